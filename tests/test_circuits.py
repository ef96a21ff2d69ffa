"""The evaluation suite of held-out circuits (s3.tracks.evaluation_circuits) and the ice rule."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from s3.tracks import design_circuits, design_road_course
from s3.tracks.circuit_design import CLEARANCE, design
from s3.tracks.corners import detect_corners
from s3.tracks.csv_loader import save_track_csv
from s3.tracks.evaluation_circuits import BUILTIN, circuit_stats, evaluation_track, ice_patches, ice_sidecar
from s3.tracks.generate import procedural_track, too_close
from s3.tracks.geometry import patch_span, segments_cross
from s3.tracks.ice_rule import BRAKE_GAP, GAP, read_ice_csv, rule_ice_patches, sharpness
from s3.tracks.road_course import ICE_MU, ICE_PATCHES
from s3.tracks.track import Track, TrackError

DESIGNS = {**design_circuits.DESIGNS, "road_course": design_road_course.ROAD_COURSE}
LENGTHS = {
    "road_course": (2700.0, 2900.0),
    "street": (1200.0, 1800.0),
    "flowing": (3000.0, 4000.0),
    "short": (500.0, 800.0),
}


# ---------------------------------------------------------------------- the circuits
@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_loads_closes_and_does_not_cross(name: str) -> None:
    t = evaluation_track(name)
    assert t.name == name and not t.patches and evaluation_track(name) is t  # cached
    assert LENGTHS[name][0] < t.length < LENGTHS[name][1]
    assert segments_cross(t.centerline) is None
    assert not too_close(t.centerline, float((t.w_left + t.w_right).max()) + CLEARANCE)  # no overlapping tarmac
    seg = t.segment_lengths
    assert seg.max() - seg.min() < 0.01 and abs(seg[-1] - np.median(seg)) < 0.01  # the join is one more 1 m step
    assert abs(t.curvature[0]) < 1e-3 and abs(t.curvature[-1]) < 1e-3  # ... on a straight, no kink
    radii = [c.radius for c in detect_corners(t)]
    assert max(t.w_left.max(), t.w_right.max()) < min(radii)  # half width below every corner radius
    ice = evaluation_track(name, "ice")
    assert ice.name == f"{name}_ice" and len(ice.patches) == len(ice_patches(name)) >= 6
    np.testing.assert_array_equal(ice.centerline, t.centerline)


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_design_scripts_rebuild_the_shipped_csvs_byte_for_byte(name: str, tmp_path: Path) -> None:
    d = DESIGNS[name]
    pts, wr, wl, _ = design(d)
    out = save_track_csv(Track(name, pts, wl, wr), tmp_path / f"{name}.csv")
    assert out.read_bytes() == d.data.read_bytes()


def test_the_three_evaluation_circuits_differ_measurably() -> None:
    road, street, flowing = (circuit_stats(evaluation_track(n)) for n in ("road_course", "street", "flowing"))
    for st in (road, street, flowing):
        print({k: round(v, 2) if isinstance(v, float) else v for k, v in st.items()})
    assert (road["corners"], street["corners"], flowing["corners"]) == (12, 14, 11)
    # street: only tight corners, all alike (R 10.5-20 m, spread < 2x); narrow
    assert 10.0 < street["radius_min_m"] < 11.0 and street["radius_max_m"] < 21.0 and street["radius_ratio"] < 2.0
    assert street["radius_iqr_m"] < 5.0 and street["width_max_m"] <= 10.0
    # flowing: no corner under 40 m, half the corners over 100 m, sweepers up to ~300 m
    assert flowing["radius_min_m"] > 40.0 and flowing["radius_median_m"] > 100.0 and flowing["radius_max_m"] > 280.0
    assert flowing["radius_iqr_m"] > 100.0
    # road course: hairpins and sweepers on one lap, the widest spread
    assert road["radius_min_m"] < 16.0 and road["radius_max_m"] > 190.0 and road["radius_ratio"] > 10.0
    assert road["radius_ratio"] > flowing["radius_ratio"] > 3.0 * street["radius_ratio"] / 1.9
    assert (
        road["radius_median_m"] < 0.5 * flowing["radius_median_m"]
        and street["radius_median_m"] < 0.5 * road["radius_median_m"]
    )


def test_corner_detection_matches_the_designed_layout() -> None:
    """Every designed corner is found once, with its radius and turn (the 5 m average widens a chicane's 5 m arcs by up
    to 9 %)."""
    # a turn is counted where |curvature| >= 1/400 1/m: a sweeper's gentle clothoid ends fall outside
    for name, d in DESIGNS.items():
        found = detect_corners(evaluation_track(name))
        assert len(found) == len(d.layout), name
        for c, (_, turn, radius) in zip(found, d.layout):
            assert 0.99 * radius < c.radius < 1.1 * radius, (name, c)
            assert abs(c.turn_deg - turn) < 0.1 * abs(turn) + 1.0, (name, c)


def test_corner_detection_across_the_start_line_and_on_a_circle() -> None:
    t = evaluation_track("short")
    base = detect_corners(t)
    k = int(round(base[0].apex))  # start the loop at the first apex: that corner straddles s = 0
    rolled = Track("rolled", np.roll(t.centerline, -k, axis=0), np.roll(t.w_left, -k), np.roll(t.w_right, -k))
    again = detect_corners(rolled)
    assert len(again) == len(base) and again[-1].exit > rolled.length > again[-1].entry  # one corner, wrapping
    assert sorted(round(c.radius, 1) for c in again) == sorted(round(c.radius, 1) for c in base)
    labelled = rule_ice_patches(rolled)
    assert len(labelled) == 6 and all(
        _apart(p, q, rolled.length) for i, (_, p) in enumerate(labelled) for _, q in labelled[i + 1 :]
    )
    a = np.linspace(0.0, 2.0 * np.pi, 300, endpoint=False)
    circle = Track("circle", 50.0 * np.stack([np.cos(a), np.sin(a)], axis=1), np.full(300, 5.0), np.full(300, 5.0))
    (only,) = detect_corners(circle)
    assert only.radius == pytest.approx(50.0, rel=0.01) and only.turn_deg == pytest.approx(360.0, abs=1.0)
    assert [lab.split(",")[0] for lab, _ in rule_ice_patches(circle)] == ["C1 mid-corner"]


# ---------------------------------------------------------------------- the ice rule
def _apart(a, b, length: float) -> bool:
    (sa, la), (sb, lb) = patch_span(a, length), patch_span(b, length)
    rel = (sb - sa) % length
    return rel >= la + GAP - 1e-6 and rel + lb <= length - GAP + 1e-6


@pytest.mark.parametrize("name", ["street", "flowing", "short", "road_course"])
def test_rule_patches_are_deterministic_disjoint_inside_the_lap_and_where_documented(name: str, tmp_path: Path) -> None:
    t = evaluation_track(name)
    labelled = rule_ice_patches(t)
    fresh = Track(
        name, np.array(t.centerline), np.array(t.w_left), np.array(t.w_right)
    )  # a new instance, same geometry
    assert rule_ice_patches(fresh) == labelled
    assert len(labelled) == (6 if name == "short" else 7)
    labels, patches = [lab for lab, _ in labelled], [p for _, p in labelled]
    assert len(set(labels)) == len(labels)
    assert [p.s_start for p in patches] == sorted(p.s_start for p in patches)  # driving order
    for k, p in enumerate(patches):
        assert 0.0 <= p.s_start < t.length and 0.0 < p.s_end - p.s_start < t.length and p.mu == ICE_MU
        for q in patches[k + 1 :]:
            assert _apart(p, q, t.length), (p, q)
    corners = detect_corners(t)
    sharpest = min(corners, key=sharpness)
    wl, wr = t.w_left.max(), t.w_right.max()
    by_corner = {lab.split()[0]: (lab, p) for lab, p in labelled}
    for cname, (lab, p) in by_corner.items():
        c = next(c for c in corners if c.name == cname)
        start, span = patch_span(p, t.length)
        if "braking zone" in lab:
            end = (c.entry - BRAKE_GAP) % t.length
            assert (start + span) % t.length == pytest.approx(end, abs=0.02), lab  # ends just before the entry
            assert (p.d_min, p.d_max) == (pytest.approx(-wr - 1.0, abs=0.01), pytest.approx(wl + 1.0, abs=0.01))
        elif "mid-corner" in lab:
            assert (c.apex - start) % t.length == pytest.approx(span / 2, abs=0.02), lab  # centred on the apex
            assert c.entry <= start and start + span <= c.exit, lab
            inside_left = ("inside" in lab) == (c.direction > 0)
            assert (p.d_min == 0.0) if inside_left else (p.d_max == 0.0), lab
        else:
            assert "exit" in lab and start == pytest.approx(c.exit % t.length, abs=0.02), lab
    brake = by_corner[sharpest.name]
    assert "braking zone" in brake[0] and brake[1].s_end <= sharpest.entry - BRAKE_GAP + 0.02


def test_road_course_keeps_its_hand_placed_patches() -> None:
    assert ice_patches("road_course") == list(ICE_PATCHES)
    assert evaluation_track("road_course", "ice").patches == tuple(p for _, p in ICE_PATCHES)


def test_the_rule_gives_any_track_ice() -> None:
    t = procedural_track(5).without_patches()
    labelled = rule_ice_patches(t)
    assert len(labelled) >= 3
    iced = t.with_patches([p for _, p in labelled])  # a valid Track
    assert len(iced.patches) == len(labelled)


# ---------------------------------------------------------------------- user CSVs and sidecars
def _user_csv(tmp_path: Path, stem: str = "my") -> Path:
    return save_track_csv(evaluation_track("short"), tmp_path / f"{stem}.csv")


def test_a_user_csv_loads_through_evaluation_track(tmp_path: Path) -> None:
    path = _user_csv(tmp_path, "harbour")
    t = evaluation_track(str(path))
    assert t.name == "harbour" and t.length == pytest.approx(evaluation_track("short").length, abs=0.01)
    ice = evaluation_track(path, "ice")
    assert ice.name == "harbour_ice" and [p for _, p in rule_ice_patches(t)] == list(
        ice.patches
    )  # no sidecar: the rule
    assert circuit_stats(t)["corners"] == 6
    with pytest.raises(TrackError, match="neither a built-in circuit"):
        evaluation_track(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="unknown condition"):
        evaluation_track("short", "snow")  # type: ignore[arg-type]


def test_a_sidecar_overrides_the_rule(tmp_path: Path) -> None:
    path = _user_csv(tmp_path)
    sidecar = ice_sidecar(path)
    assert sidecar == tmp_path / "my.ice.csv"
    sidecar.write_text(
        "# s_start_m,s_end_m,d_min_m,d_max_m,mu,label\n10,40,-7,7,0.15,start straight, full width\n\n650,20,0,7,0.2\n"
    )
    labelled = ice_patches(str(path))
    assert [lab for lab, _ in labelled] == ["start straight, full width", "patch 2 (650-20 m)"]
    assert labelled[1][1].s_end == 20.0 and labelled[1][1].mu == 0.2  # wraps past the start line
    assert evaluation_track(path, "ice").patches == tuple(p for _, p in labelled)
    sidecar.write_text("s_start_m,s_end_m,d_min_m,d_max_m,mu\n10,40,-7,7,0.15\n")  # an uncommented header
    assert len(read_ice_csv(sidecar)) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("10,40,-7,7\n", "line 1: expected 5 or 6 columns"),
        ("# c\n10,40,-7,7,0.15\n10,x,-7,7,0.15\n", "line 3: non-numeric s_end_m 'x'"),
        ("10,40,7,-7,0.15\n", "line 1: d_min_m must be below d_max_m"),
        ("10,40,-7,7,0\n", "line 1: mu must be in (0, 2]"),
        ("10,40,-7,7,nan\n", "line 1: mu must be finite"),
        ("10,10,-7,7,0.15\n", "line 1: empty patch"),
        ("10,5000,-7,7,0.15\n", "line 1: patch [10, 5000] is longer than the"),
        ("# only a comment\n", "no patches"),
    ],
)
def test_a_malformed_sidecar_is_one_line_naming_file_and_line(tmp_path: Path, body: str, expected: str) -> None:
    path = _user_csv(tmp_path)
    ice_sidecar(path).write_text(body)
    with pytest.raises(TrackError) as e:
        evaluation_track(path, "ice")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{ice_sidecar(path)}: ") and expected in msg, msg


# ---------------------------------------------------------------------- the pid baseline drives them
@pytest.fixture(scope="module")
def aided_sim():
    from s3.config import Params
    from s3.sim.factory import make_sim
    from s3.sim.params import DriverAidsParams

    sim = make_sim(Params().sim, DriverAidsParams(traction_control=True, abs=True))  # the evaluation car
    yield sim
    sim.close()


@pytest.mark.parametrize("name", BUILTIN)
def test_pid_completes_every_builtin_nominal(name: str, aided_sim) -> None:
    """The `pid` baseline (default PidParams, the car's traction control and ABS on) laps each circuit from the line at
    5 m/s."""
    from s3.evaluate.drivers import PidFactory
    from s3.evaluate.params import PidParams
    from s3.evaluate.run import run_lap

    track = evaluation_track(name)
    t0 = time.perf_counter()
    r = run_lap(aided_sim, track, PidFactory(PidParams())(aided_sim), start_s=0.0, start_speed=5.0)
    print(f"\npid {name}: {r.reason}, lap {r.lap_time} s, simulated in {time.perf_counter() - t0:.1f} s")
    assert r.completed, (r.reason, r.progress)
    assert np.abs(r.trajectory["d"]).max() < 3.0  # never near an edge
    if name == "short":
        assert r.lap_time < 50.0  # the quick smoke pipeline's circuit
