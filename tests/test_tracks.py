"""Tracks: geometry numbers, numpy/torch agreement, friction, generator, road course, CSV, plots."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from s3.tracks import generate
from s3.tracks.csv_loader import load_track_csv, save_track_csv
from s3.tracks.generate import ProceduralTrackParams, procedural_track
from s3.tracks.geometry import periodic_spline, segments_cross, wrap_angle
from s3.tracks.road_course import ICE_PATCHES, road_course
from s3.tracks.torch_track import TrackBatch
from s3.tracks.track import FrictionPatch, Track, TrackError


def circle(radius: float = 50.0, m: int = 720, name: str = "circle", patches=()) -> Track:
    th = np.linspace(0.0, 2 * np.pi, m, endpoint=False)
    xy = np.stack([radius * np.cos(th), radius * np.sin(th)], axis=1)
    return Track(name, xy, np.full(m, 5.0), np.full(m, 4.0), patches)


def ds_wrapped(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
    return np.mod(a - b + length / 2, length) - length / 2


# ---------------------------------------------------------------- geometry on a circle
def test_circle_length_and_curvature():
    r = 50.0
    t = circle(r)
    assert t.length == pytest.approx(2 * np.pi * r, rel=1e-3)
    np.testing.assert_allclose(t.curvature, 1 / r, rtol=1e-3)  # CCW circle turns left: positive
    np.testing.assert_allclose(t.curvature_at(np.array([0.3, 100.0, 250.0])), 1 / r, rtol=1e-3)
    cw = Track("cw", t.centerline[::-1], t.w_left, t.w_right)
    np.testing.assert_allclose(cw.curvature, -1 / r, rtol=1e-3)
    # heading of a CCW circle at angle theta is theta + pi/2
    np.testing.assert_allclose(
        wrap_angle(t.heading - (np.linspace(0, 2 * np.pi, 720, endpoint=False) + np.pi / 2)), 0, atol=1e-9
    )


def test_project_known_offsets_on_circle():
    r = 50.0
    t = circle(r)
    theta = np.array([0.1, 1.0, 2.5, 4.0, 6.2])
    d = np.array([0.0, 2.0, -3.0, 4.5, -1.0])  # left of a CCW circle is towards the centre
    xy = np.stack([(r - d) * np.cos(theta), (r - d) * np.sin(theta)], axis=1)
    yaw = theta + np.pi / 2 + np.array([0.0, 0.2, -0.3, np.pi - 0.05, 2 * np.pi + 0.1])
    pr = t.project(xy, yaw)
    np.testing.assert_allclose(ds_wrapped(pr.s, r * theta, t.length), 0, atol=0.01)
    np.testing.assert_allclose(pr.d, d, atol=0.01)
    np.testing.assert_allclose(pr.heading_error, [0.0, 0.2, -0.3, np.pi - 0.05, 0.1], atol=1e-3)
    np.testing.assert_allclose(pr.w_left, 5.0)
    np.testing.assert_allclose(pr.w_right, 4.0)
    assert pr.segment.dtype.kind == "i" and pr.segment.shape == (5,)
    assert t.project(xy).heading_error is None
    np.testing.assert_array_equal(t.is_on_track(xy), [True, True, True, True, True])
    off = np.array([[r - 5.5, 0.0], [r + 4.5, 0.0], [r + 3.9, 0.0]])  # left beyond 5, right beyond 4, inside
    np.testing.assert_array_equal(t.is_on_track(off), [False, False, True])


def test_pose_at_inverts_project_and_hint_matches_global():
    t = procedural_track(3)
    rng = np.random.default_rng(1)
    s = rng.uniform(0, t.length, 3000)
    d = rng.uniform(-3.5, 3.5, 3000)
    x, y, h = t.pose_at(s, d)
    pr = t.project(np.stack([x, y], 1), h)
    assert np.abs(ds_wrapped(pr.s, s, t.length)).max() < 0.3  # offsets follow point normals, not segment normals
    assert np.abs(pr.d - d).max() < 0.02
    assert np.abs(pr.heading_error).max() < 0.02
    hinted = t.project(np.stack([x, y], 1), h, hint=(pr.segment + 3) % len(t), window=8)
    np.testing.assert_allclose(hinted.d, pr.d, atol=1e-9)
    np.testing.assert_allclose(ds_wrapped(hinted.s, pr.s, t.length), 0, atol=1e-6)
    xy = t.sample_ahead(np.array([0.0, t.length - 1.0]), np.array([0.0, 2.0, 10.0]))
    assert xy.shape == (2, 3, 2)
    np.testing.assert_allclose(xy[1, 1], np.stack(t.pose_at(np.array(1.0))[:2]), atol=1e-9)  # wraps
    np.testing.assert_allclose(np.linalg.norm(xy[0, 2] - xy[0, 0]), 10.0, rtol=0.02)


def test_global_projection_is_exact_against_brute_force():
    t = road_course()
    rng = np.random.default_rng(2)
    pts = rng.uniform(t.centerline.min(0) - 30, t.centerline.max(0) + 30, (800, 2))
    pr = t.project(pts)
    diff = pts[:, None, :] - t.centerline[None]
    v = t.segment_vectors[None]
    u = np.clip((diff * v).sum(-1) / (t.segment_lengths**2)[None], 0, 1)
    dist = np.linalg.norm(diff - u[..., None] * v, axis=-1).min(1)
    np.testing.assert_allclose(np.abs(pr.d), dist, atol=1e-9)


def test_resampled_spacing_length_and_patches():
    t = circle(40.0, m=37, patches=(FrictionPatch(10.0, 30.0, -1.0, 1.0, 0.3),))
    r = t.resampled(0.5)
    seg = r.segment_lengths
    assert seg.max() / seg.min() < 1.01
    assert r.length == pytest.approx(2 * np.pi * 40.0, rel=1e-3)  # the spline restores the circle
    assert r.patches[0].s_start == pytest.approx(10.0 * r.length / t.length, abs=0.2)
    assert r.patches[0].s_end - r.patches[0].s_start == pytest.approx(20.0, rel=0.02)


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "xy_fn, wl, problem",
    [
        (lambda xy: xy[:3], None, "too few"),
        (lambda xy: np.where(np.arange(len(xy))[:, None] == 5, np.nan, xy), None, "non-finite centerline"),
        (lambda xy: np.insert(xy, 4, xy[4], axis=0), None, "duplicate"),
        (lambda xy: xy, -1.0, "must be positive"),
    ],
)
def test_invalid_tracks_raise_one_line(xy_fn, wl, problem):
    xy = circle().centerline
    xy2 = xy_fn(xy)
    w = np.full(len(xy2), 3.0 if wl is None else wl)
    with pytest.raises(TrackError) as e:
        Track("bad", xy2, w, np.full(len(xy2), 3.0))
    assert problem in str(e.value) and "'bad'" in str(e.value) and "\n" not in str(e.value)


def test_self_intersection_and_patch_mu_rejected():
    t = np.linspace(0, 2 * np.pi, 200, endpoint=False)
    eight = np.stack([50 * np.sin(t), 25 * np.sin(2 * t)], axis=1)
    with pytest.raises(TrackError, match="intersects itself"):
        Track("eight", eight, np.ones(200), np.ones(200))
    assert segments_cross(eight) is not None
    assert segments_cross(circle().centerline) is None
    side = np.arange(0.0, 100.0, 1.0)  # collinear points along straights are fine
    zero, full = 0 * side, 100 + 0 * side
    rect = np.concatenate(
        [np.stack(c, 1) for c in ((side, zero), (full, side), (100 - side, full), (zero, 100 - side))]
    )
    assert segments_cross(rect) is None
    touching = np.concatenate([rect[:150], [[100.0, 0.0]], rect[150:]])  # revisits a corner
    assert segments_cross(touching) is not None
    with pytest.raises(TrackError, match=r"patch 0 mu must be in \(0, 2\]"):
        circle(patches=(FrictionPatch(0, 10, -1, 1, 0.0),))
    with pytest.raises(TrackError, match="patch 0 mu"):
        circle(patches=(FrictionPatch(0, 10, -1, 1, 2.5),))


# ---------------------------------------------------------------- friction
def test_friction_at_and_grid_inside_and_outside_a_patch():
    r = 50.0
    # left half from s=20 to 60 m; a second patch wrapping past the start line, full width
    t = circle(r, patches=(FrictionPatch(20.0, 60.0, 0.0, 5.0, 0.2), FrictionPatch(300.0, 10.0, -5.0, 5.0, 0.4)))
    pose = lambda s, d: np.stack(t.pose_at(np.asarray(s, float), np.asarray(d, float))[:2], axis=-1)
    pts = pose([40.0, 40.0, 100.0, 5.0, 312.0, 40.0], [2.0, -2.0, 2.0, -3.0, 3.0, 6.0])
    np.testing.assert_allclose(t.friction_at(pts), [0.2, 1.0, 1.0, 0.4, 0.4, 1.0])
    grid = t.friction_grid(res=0.25)
    rng = np.random.default_rng(3)
    s = rng.uniform(0, t.length, 20000)
    d = rng.uniform(-9, 9, 20000)
    xy = pose(s, d)
    pr = t.project(xy)
    # away from every patch edge (more than two cells) grid and exact lookup agree
    edge_s = np.array([20.0, 60.0, 300.0, 10.0])
    far_s = np.abs(ds_wrapped(pr.s[:, None], edge_s[None], t.length)).min(1) > 0.6
    far_d = np.abs(pr.d[:, None] - np.array([0.0, 5.0, -5.0])[None]).min(1) > 0.6
    far = far_s & far_d
    exact = t.friction_at(xy)
    assert (exact[far] < 1).sum() > 1000
    np.testing.assert_allclose(grid.at(xy[far]), exact[far], atol=1e-9)
    assert grid.default_mu == 1.0
    assert circle().friction_grid().at(np.zeros((1, 2)))[0] == 1.0


def test_friction_grid_marks_the_road_course_patches():
    t = road_course("ice")
    grid = t.friction_grid(0.25)
    mid = []
    for p in t.patches:
        x, y, _ = t.pose_at(np.array((p.s_start + p.s_end) / 2), np.array((p.d_min + p.d_max) / 2))
        mid.append([float(x), float(y)])
    np.testing.assert_allclose(grid.at(np.array(mid)), 0.15)


# ---------------------------------------------------------------- torch batch
def _random_points(batch: TrackBatch, n: int, seed: int):
    rng = np.random.default_rng(seed)
    ti = rng.integers(0, len(batch), n)
    lengths = np.array([t.length for t in batch.tracks])
    s = rng.uniform(0, 1, n) * lengths[ti]
    d = rng.uniform(-6.0, 6.0, n)
    yaw = rng.uniform(-np.pi, np.pi, n)
    xy = np.zeros((n, 2))
    for k, t in enumerate(batch.tracks):
        m = ti == k
        x, y, _ = t.pose_at(s[m], d[m])
        xy[m] = np.stack([x, y], 1)
    return ti, s, xy, yaw


def _batch() -> TrackBatch:
    ice = (FrictionPatch(50.0, 120.0, -6.0, 0.5, 0.2), FrictionPatch(100.0, 140.0, 0.0, 6.0, 0.5))
    tracks = [circle(30.0, 200), procedural_track(1).with_patches(ice), procedural_track(2), road_course("ice")]
    return TrackBatch(tracks, ds=1.0)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_track_batch_matches_numpy(device):
    batch = _batch()
    if device != "cpu":
        batch = TrackBatch(batch.tracks, ds=1.0, device=device)
    ti, s, xy, yaw = _random_points(batch, 3000, seed=4)
    tt = lambda a, dt=torch.float32: torch.as_tensor(a, dtype=dt, device=device)
    pr = batch.project(tt(xy), tt(ti, torch.long), yaw=tt(yaw))
    hinted = batch.project(tt(xy), tt(ti, torch.long), hint=pr.segment + 4, window=8, yaw=tt(yaw))
    mu = batch.friction_at(tt(xy), tt(ti, torch.long)).cpu().numpy()
    sa = batch.sample_ahead(tt(ti, torch.long), tt(s), tt([0.0, 5.0, 25.0, 80.0]))
    for k, t in enumerate(batch.tracks):
        m = ti == k
        ref = t.project(xy[m], yaw[m])
        for got in (pr, hinted):
            # near-ties on the inside of a bend may pick the other segment in float32: a few cm in s
            assert np.abs(ds_wrapped(got.s.cpu().numpy()[m], ref.s, t.length)).max() < 0.15
            np.testing.assert_allclose(got.d.cpu().numpy()[m], ref.d, atol=2e-3)
            np.testing.assert_allclose(wrap_angle(got.heading_error.cpu().numpy()[m] - ref.heading_error), 0, atol=1e-2)
            np.testing.assert_allclose(got.w_left.cpu().numpy()[m], ref.w_left, atol=1e-3)
        np.testing.assert_array_equal(hinted.segment.cpu().numpy()[m], pr.segment.cpu().numpy()[m])
        exact = t.friction_at(xy[m])
        assert (mu[m] != exact.astype(np.float32)).mean() < 0.002  # only float32 ties on patch edges
        np.testing.assert_allclose(sa.xy.cpu().numpy()[m], t.sample_ahead(s[m], [0.0, 5.0, 25.0, 80.0]), atol=2e-3)
        np.testing.assert_allclose(sa.w_left.cpu().numpy()[m][:, 1], t.width_at(s[m] + 5.0)[0], atol=1e-3)
    assert sa.xy.shape == (3000, 4, 2) and sa.xy.device.type == device


def test_track_batch_pose_and_on_track():
    batch = _batch()
    ti = torch.tensor([0, 1, 3, 3])
    s = torch.tensor([1.0, 50.0, 500.0, 2800.0])
    x, y, h = batch.pose_at(ti, s, torch.tensor([1.0, -2.0, 0.0, 3.0]))
    pr = batch.project(torch.stack([x, y], 1), ti, yaw=h)
    np.testing.assert_allclose(pr.d.numpy(), [1.0, -2.0, 0.0, 3.0], atol=0.02)
    np.testing.assert_allclose(pr.heading_error.numpy(), 0.0, atol=0.02)
    assert batch.is_on_track(pr).all()
    np.testing.assert_allclose(batch.curvature_at(ti[:1], s[:1]).numpy(), 1 / 30.0, rtol=0.01)
    double = TrackBatch(batch.tracks[:2], dtype=torch.float64)
    pr64 = double.project(torch.stack([x, y], 1)[:2].double(), ti[:2])
    assert pr64.s.dtype == torch.float64
    np.testing.assert_allclose(pr64.d.numpy(), [1.0, -2.0], atol=0.02)


# ---------------------------------------------------------------- procedural tracks
def test_procedural_tracks_deterministic_closed_valid():
    params = ProceduralTrackParams()
    for seed in range(6):
        a, b = procedural_track(seed, params), procedural_track(seed, params)
        np.testing.assert_array_equal(a.centerline, b.centerline)
        assert a.patches == b.patches and a.name == f"procedural_{seed}"
        assert params.length_min <= a.length <= params.length_max
        assert 1 / np.abs(a.curvature).max() >= params.min_corner_radius
        closing = np.linalg.norm(a.centerline[0] - a.centerline[-1])
        assert closing == pytest.approx(np.median(a.segment_lengths), rel=0.05)  # closed, evenly spaced
        assert segments_cross(a.centerline) is None
        w = a.w_left + a.w_right
        assert params.width_min - 1e-9 <= w.min() and w.max() <= params.width_max + 1e-9
    shapes = {round(procedural_track(s).length) for s in range(6)}
    assert len(shapes) == 6


def _too_close_all_pairs(xy: np.ndarray, min_gap: float) -> bool:
    """The O(m^2) definition that generate.too_close answers with a k-d tree."""
    seg = np.linalg.norm(np.roll(xy, -1, axis=0) - xy, axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)[:-1]])
    d = np.linalg.norm(xy[:, None, :] - xy[None, :, :], axis=2)
    along = np.abs(s[:, None] - s[None, :])
    along = np.minimum(along, seg.sum() - along)
    return bool((d[along > generate._SEPARATION_ARC] < min_gap).any())


def test_too_close_matches_all_pairs_on_the_shapes_the_generator_tries():
    rng = np.random.default_rng(3)
    params = ProceduralTrackParams()
    answers = []
    for _ in range(40):
        n = int(rng.integers(6, 16))
        ctrl = (
            np.stack([np.cos(2 * np.pi * np.arange(n) / n), np.sin(2 * np.pi * np.arange(n) / n)], 1)
            * rng.uniform(0.3, 1.0, (n, 1))
            * 150
        )
        t = np.arange(n, dtype=float)
        xy = periodic_spline(t, float(n), ctrl, np.linspace(0, n, int(rng.integers(150, 400)), endpoint=False))
        gaps = np.linalg.norm(xy[:, None] - xy[None], axis=2)
        for gap in (params.width_max + generate._CLEARANCE, float(np.quantile(gaps, 0.02)), 40.0):
            answers.append(generate.too_close(xy, gap))
            assert answers[-1] == _too_close_all_pairs(xy, gap), gap
    assert 0.2 < np.mean(answers) < 0.8  # both answers were exercised
    # at the boundary: a pair exactly min_gap apart is not too close; with min_gap a hair larger it is
    line = np.array([[0.0, 0.0], [100.0, 0.0], [100.0, 30.0], [0.0, 30.0]])
    xy = np.concatenate([np.linspace(line[k], line[(k + 1) % 4], 50, endpoint=False) for k in range(4)])
    assert not generate.too_close(xy, 30.0) and not _too_close_all_pairs(xy, 30.0)
    assert generate.too_close(xy, np.nextafter(30.0, 31.0)) and _too_close_all_pairs(xy, np.nextafter(30.0, 31.0))


def test_procedural_patches_and_params():
    params = ProceduralTrackParams(patch_probability=1.0, patches_min=2, patches_max=3)
    t = procedural_track(11, params)
    assert 2 <= len(t.patches) <= 3
    assert all(params.patch_mu_min <= p.mu <= params.patch_mu_max for p in t.patches)
    with pytest.raises(ValidationError):
        ProceduralTrackParams(bogus=1)
    with pytest.raises(ValidationError):
        ProceduralTrackParams(length_min=2000.0, length_max=1000.0)


# ---------------------------------------------------------------- road course
def count_corners(t: Track, threshold: float = 1 / 400) -> int:
    """Runs of |curvature| above threshold (a corner), counted around the closed loop."""
    k = np.convolve(np.abs(np.concatenate([t.curvature[-5:], t.curvature, t.curvature[:5]])), np.ones(11) / 11, "valid")
    above = k > threshold
    starts = above & ~np.roll(above, 1)
    return int(starts.sum()) if not above.all() else 1


def test_road_course_shape_and_ice():
    nominal, ice = road_course("nominal"), road_course("ice")
    assert nominal.name == "road_course" and ice.name == "road_course_ice"
    assert 2600 <= nominal.length <= 3000
    assert count_corners(nominal) >= 10
    kappa = np.abs(nominal.curvature)
    assert kappa.max() > 1 / 20 and kappa[kappa > 1e-3].min() < 1 / 150  # hairpins and fast sweepers
    w = nominal.w_left + nominal.w_right
    assert w.min() >= 9.5 and w.max() <= 12.5
    assert len(ice.patches) == 7 == len(ICE_PATCHES) and not nominal.patches
    assert all(p.mu == pytest.approx(0.15) for p in ice.patches)
    np.testing.assert_array_equal(ice.centerline, nominal.centerline)
    with pytest.raises(ValueError):
        road_course("snow")


def test_road_course_differs_from_procedural_tracks():
    # built from straights: long stretches of (near) zero curvature that spline blobs lack
    straight = lambda t: np.mean(np.abs(t.curvature) < 1e-4)
    assert straight(road_course()) > 0.4
    assert max(straight(procedural_track(s)) for s in range(4)) < 0.2


# ---------------------------------------------------------------- CSV
def test_csv_round_trip(tmp_path: Path):
    t = procedural_track(5)
    path = save_track_csv(t, tmp_path / "sub" / "t.csv")
    assert path.read_text().startswith("# x_m,y_m,w_tr_right_m,w_tr_left_m\n")
    back = load_track_csv(path, patches=t.patches)
    assert back.name == "t"
    np.testing.assert_allclose(back.centerline, t.centerline, atol=1e-4)
    np.testing.assert_allclose(back.w_left, t.w_left, atol=1e-4)
    np.testing.assert_allclose(back.w_right, t.w_right, atol=1e-4)
    assert back.patches == t.patches
    reordered = tmp_path / "r.csv"
    rows = "".join(f"{wl},{wr},{x},{y}\n" for (x, y), wl, wr in zip(t.centerline, t.w_left, t.w_right))
    reordered.write_text("# w_tr_left_m,w_tr_right_m,x_m,y_m\n" + rows)
    np.testing.assert_allclose(load_track_csv(reordered).w_left, t.w_left)


def _rows(n: int = 40) -> list[str]:
    th = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return [f"{30 * math.cos(a):.4f},{30 * math.sin(a):.4f},4.0,4.5" for a in th]


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda r: r[:16] + ["1.0,2.0,3.0"] + r[17:], "line 18: expected 4 columns"),
        (lambda r: r[:16] + ["1.0,2.0,3.0,nan"] + r[17:], "line 18: NaN in w_tr_left_m"),
        (lambda r: r[:3] + ["1.0,abc,3.0,3.0"] + r[4:], "line 5: non-numeric y_m 'abc'"),
        (lambda r: r[:10] + [r[9]] + r[10:], "lines 11 and 12: duplicate consecutive points"),
        (lambda r: r[:3], "too few points (3 < 4)"),
        (lambda r: r[:5] + [r[20]] + r[6:], "intersects itself"),
        (lambda r: r[:7] + ["1.0,2.0,-3.0,3.0"] + r[8:], "line 9: w_tr_right_m must be positive"),
    ],
)
def test_bad_csv_one_line_error_naming_file(tmp_path: Path, mutate, expected):
    path = tmp_path / "x.csv"
    path.write_text("# x_m,y_m,w_tr_right_m,w_tr_left_m\n" + "\n".join(mutate(_rows())) + "\n")
    with pytest.raises(TrackError) as e:
        load_track_csv(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and expected in msg and "\n" not in msg


def test_csv_missing_header_column_and_missing_file(tmp_path: Path):
    path = tmp_path / "h.csv"
    path.write_text("# x_m,y_m,w_tr_right_m\n" + "\n".join(_rows()))
    with pytest.raises(TrackError, match=r"h\.csv: line 1: header lacks column\(s\) w_tr_left_m"):
        load_track_csv(path)
    with pytest.raises(TrackError, match="nope.csv: cannot read"):
        load_track_csv(tmp_path / "nope.csv")


# ---------------------------------------------------------------- plots
def test_plot_track_writes_png(tmp_path: Path):
    from s3.viz.track_plot import plot_track, save_figure

    t = road_course("ice")
    s = np.linspace(0, 600, 300)
    x, y, _ = t.pose_at(s, np.sin(s / 40))
    ax = plot_track(t, [(np.stack([x, y], 1), 10 + s / 30), (np.stack([x, y], 1)[:50], np.full(50, 5.0))], title="ice")
    assert ax.get_title() == "ice" and len(ax.figure.axes) == 2  # one colorbar for all trajectories
    out = save_figure(ax.figure, tmp_path / "plots" / "course.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert [p.name for p in out.parent.iterdir()] == ["course.png"]  # no temp file left behind
