"""Evaluation in the source simulator: metrics on hand-made trajectories, the lap loop, and pid."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from s3.config import Params
from s3.evaluate.drivers import Driver, PidDriver, TrackState, pid_factory
from s3.evaluate.evaluate import evaluate_driver, transfer_gap
from s3.evaluate.metrics import off_track_events, pedal_switches, run_metrics, steering_smoothness
from s3.evaluate.params import EvaluateParams
from s3.evaluate.run import run_lap
from s3.sim.base import Control, VehicleState
from s3.task.params import JudgeParams
from s3.tracks.track import FrictionPatch, Track

R = 100.0  # radius of the test circle (m); lap = 2 pi R
DT = 0.1


def circle(patches: tuple[FrictionPatch, ...] = ()) -> Track:
    a = np.linspace(0.0, 2 * np.pi, 720, endpoint=False)
    xy = np.stack([R * np.cos(a), R * np.sin(a)], axis=1)  # counter-clockwise from (R, 0)
    return Track("circle", xy, np.full(720, 5.0), np.full(720, 4.0), patches)


def straight_run(
    track: Track, speed: np.ndarray, d: np.ndarray | None = None, vy: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """A hand-made trajectory: progress integrates `speed` (sampled every DT) from s = 0."""
    n = len(speed)
    progress = np.concatenate([[0.0], np.cumsum(0.5 * (speed[1:] + speed[:-1]) * DT)])
    z = np.zeros(n)
    return {
        "t": np.arange(n) * DT,
        "vx": speed.astype(float),
        "vy": z if vy is None else vy,
        "steering_cmd": z.copy(),
        "throttle_cmd": z.copy(),
        "brake_cmd": z.copy(),
        "s": np.mod(progress, track.length),
        "d": z.copy() if d is None else d,
        "progress": progress,
        "mu": np.ones(n),
    }


# ---------------------------------------------------------------------- pure metric functions
def test_off_track_events_count_entries_not_samples() -> None:
    beyond = np.array([-1.0, 0.5, 0.7, -0.2, 0.0, 0.3, -1.0, 2.0])  # 0.0 = exactly on the edge: on track
    assert off_track_events(beyond) == 3
    assert off_track_events(beyond, tolerance=0.6) == 2
    assert off_track_events(np.array([1.0, 1.0, -1.0])) == 1  # starting off track is one event


def test_steering_smoothness_of_known_signals() -> None:
    ramp = 0.05 * np.arange(50)  # 0.05 per step = 0.5 per s, no curvature
    rate, jerk = steering_smoothness(ramp, DT)
    assert rate == pytest.approx(0.5) and jerk == pytest.approx(0.0, abs=1e-9)
    zigzag = 0.1 * (-1.0) ** np.arange(21)  # +-0.1 alternating: |rate| = 0.2 / dt, |jerk| = 0.4 / dt^2
    rate, jerk = steering_smoothness(zigzag, DT)
    assert rate == pytest.approx(2.0) and jerk == pytest.approx(40.0)


def test_pedal_switches_ignore_coasting() -> None:
    th = np.array([0.5, 0.0, 0.0, 0.0, 0.6, 0.02, 0.3])
    br = np.array([0.0, 0.0, 0.4, 0.2, 0.0, 0.0, 0.0])
    assert pedal_switches(th, br) == 2  # throttle -> (coast) -> brake -> throttle


# ---------------------------------------------------------------------- metrics of hand-made runs
def test_known_lap_time_and_lateral_error() -> None:
    track = circle()
    v = 12.5
    n = int(math.ceil(track.length / v / DT)) + 1
    d = np.full(n, 0.5)
    d[n // 2] = -1.5
    tj = straight_run(track, np.full(n, v), d=d)
    m = run_metrics(tj, track, completed=True, lap_time=track.length / v, progress=track.length, dt=DT)
    assert m["completed"] and m["lap_time_s"] == pytest.approx(track.length / v)
    assert m["distance_m"] == pytest.approx(track.length) and m["completion_fraction"] == 1.0
    assert m["off_track_events"] == 0
    assert m["max_abs_lateral_error_m"] == pytest.approx(1.5)
    assert m["mean_abs_lateral_error_m"] == pytest.approx((0.5 * (n - 1) + 1.5) / n)
    assert m["mean_speed_mps"] == pytest.approx(track.length / ((n - 1) * DT))


def test_known_off_track_events_use_each_sides_width() -> None:
    track = circle()  # w_left 5, w_right 4
    n = 100
    d = np.zeros(n)
    d[10:15] = 5.5  # left edge 5: off
    d[30:32] = -4.5  # right edge 4: off
    d[50:55] = 4.5  # inside the left edge: on
    d[70:72] = -5.5  # off again
    tj = straight_run(track, np.full(n, 10.0), d=d)
    m = run_metrics(tj, track, completed=False, lap_time=None, progress=float(tj["progress"][-1]), dt=DT)
    assert m["off_track_events"] == 3
    assert m["time_off_track_s"] == pytest.approx(9 * DT)
    assert m["lap_time_s"] is None and not m["completed"]
    assert run_metrics(tj, track, False, None, float(tj["progress"][-1]), DT, tolerance=1.0)["off_track_events"] == 1


def test_known_ice_patch_crossing() -> None:
    ice = FrictionPatch(100.0, 150.0, -6.0, 6.0, 0.15)
    later = FrictionPatch(500.0, 520.0, -6.0, 6.0, 0.15)
    track = circle((ice, later))
    n = 120
    speed = 20.0 - np.arange(n) * DT  # decelerating at 1 m/s^2
    vy = np.zeros(n)
    tj = straight_run(track, speed, vy=vy)
    a = tj["progress"]
    inside = (a > 100.0) & (a < 150.0)
    k_peak = int(np.nonzero(inside)[0][3])
    tj["vy"][k_peak] = math.tan(0.2) * speed[k_peak]  # sideslip 0.2 rad inside the patch
    tj["vy"][5] = 5.0  # a bigger slip before the patch must not count
    tj["mu"] = np.where(inside, 0.15, 1.0)
    m = run_metrics(
        tj,
        track,
        completed=False,
        lap_time=None,
        progress=float(a[-1]),
        dt=DT,
        patches=[("ice", ice), ("later", later)],
    )
    first, second = m["patches"]
    # speed is linear in time and progress is its exact integral: v(a) = sqrt(v0^2 - 2 a) (1 m/s^2)
    # between samples the metric interpolates linearly, which is exact to ~1e-3 m/s here
    assert first["attempted"] and first["crossed"] and first["crossed_on_track"]
    assert first["entry_speed"] == pytest.approx(math.sqrt(400.0 - 200.0), abs=5e-3)
    assert first["exit_speed"] == pytest.approx(math.sqrt(400.0 - 300.0), abs=5e-3)
    assert first["peak_sideslip"] == pytest.approx(0.2)
    assert first["touched_patch_mu"]
    assert second == {
        "label": "later",
        "attempted": False,
        "crossed": False,
        "crossed_on_track": False,
        "entry_speed": None,
        "exit_speed": None,
        "peak_sideslip": None,
        "touched_patch_mu": False,
    }
    # the same run leaving the road inside the patch crossed it, but not on track
    tj["d"] = np.where(inside & (a > 120.0), 6.0, 0.0)
    m2 = run_metrics(tj, track, False, None, float(a[-1]), DT, patches=[("ice", ice)])
    assert m2["patches"][0]["crossed"] and not m2["patches"][0]["crossed_on_track"]


def test_a_run_ending_inside_a_patch_is_attempted_not_crossed() -> None:
    ice = FrictionPatch(100.0, 150.0, -6.0, 6.0, 0.15)
    track = circle((ice,))
    tj = straight_run(track, np.full(62, 20.0))  # ends at 122 m
    p = run_metrics(tj, track, False, None, float(tj["progress"][-1]), DT)["patches"][0]
    assert p["attempted"] and not p["crossed"] and p["entry_speed"] == pytest.approx(20.0) and p["exit_speed"] is None


# ---------------------------------------------------------------------- the lap loop
class RailSim:
    """A fake SourceSim that slides the car along the centerline at constant speed (d drifts)."""

    name, version, control_dt, wheelbase, max_steer = "rail", "0", DT, 2.7, 0.5

    def __init__(self, speed: float, drift: float = 0.0) -> None:
        self.speed, self.drift = speed, drift

    def reset(self, track: Track, x: float, y: float, yaw: float, speed: float) -> VehicleState:
        self.track, self.t = track, 0.0
        self.s0 = float(track.project(np.array([[x, y]])).s[0])
        return self._state()

    def _state(self) -> VehicleState:
        s = self.s0 + self.speed * self.t
        x, y, h = (float(v) for v in self.track.pose_at(np.array(s), np.array(self.drift * self.t)))
        return VehicleState(self.t, x, y, h, self.speed, 0.0, 0.0, 0.0)

    def step(self, control: Control) -> VehicleState:
        self.t += DT
        return self._state()

    def close(self) -> None:
        pass


class Recorder:
    def __init__(self) -> None:
        self.calls = 0

    def reset(self, track: Track, state: VehicleState) -> None:
        self.calls = 0

    def act(self, state: VehicleState, where: TrackState) -> Control:
        self.calls += 1
        return Control(0.1, 0.5, 0.0)


def test_run_lap_interpolates_the_lap_time_and_stops_off_track() -> None:
    track = circle()
    drv = Recorder()
    assert isinstance(drv, Driver)
    r = run_lap(RailSim(13.0), track, drv, start_s=200.0)
    assert r.completed and r.reason == "lap"
    assert r.lap_time == pytest.approx(track.length / 13.0, abs=0.02)  # polyline vs arc: ~1e-3 relative
    assert r.progress == pytest.approx(track.length)
    tj = r.trajectory
    assert len(tj["t"]) == r.steps + 1 and tj["steering_cmd"][0] == 0.0 and tj["steering_cmd"][1] == pytest.approx(0.1)
    off = run_lap(RailSim(13.0, drift=1.0), track, Recorder(), start_s=0.0, judge=JudgeParams(off_track_distance=2.0))
    assert off.reason == "off_track" and not off.completed
    assert off.trajectory["d"][-1] > 5.0 + 2.0 and off.progress < track.length


def test_params_reject_unknown_keys_and_bad_starts() -> None:
    with pytest.raises(ValidationError):
        EvaluateParams(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        EvaluateParams(start_fractions=[1.2])
    with pytest.raises(ValidationError, match="neither a built-in circuit"):
        EvaluateParams(tracks=["road_course", "nowhere"])
    with pytest.raises(ValidationError, match="distinct"):
        EvaluateParams(tracks=["street", "street"])
    assert EvaluateParams().tracks == ["road_course", "street", "flowing"]


# ---------------------------------------------------------------------- end to end: pid on the evaluation suite
@pytest.fixture(scope="module")
def pid_eval(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("eval")
    ep = EvaluateParams(tracks=["road_course", "short"], start_fractions=[0.0, 0.5], gif=True, gif_frame_seconds=4.0)
    out = evaluate_driver("pid", pid_factory(ep.pid), Params(), tmp / "metrics" / "pid.json", tmp / "plots", ep)
    return tmp, out


def test_pid_completes_the_nominal_circuits(pid_eval: tuple[Path, dict]) -> None:
    tmp, out = pid_eval
    runs = out["runs"]
    assert (
        len(runs) == 2 * 2 * 2 and {r["seed"] for r in runs} == {0} and not out["lost"]
    )  # circuits x conditions x starts, one "seed"
    nominal = [r for r in runs if r["track"] == "road_course" and r["condition"] == "nominal"]
    assert all(r["completed"] for r in nominal), [r["reason"] for r in nominal]
    assert all(100.0 < r["lap_time_s"] < 200.0 for r in nominal)  # ~2.8 km at a realistic road-car pace
    assert all(r["off_track_events"] == 0 and r["min_edge_margin_m"] > 0 for r in nominal)
    ice = [r for r in runs if r["track"] == "road_course" and r["condition"] == "ice"]
    assert all(
        r["patches_attempted"] >= 5 for r in ice
    )  # 7 patches, minus those past the end of a lap from the second start
    written = json.loads((tmp / "metrics" / "pid.json").read_text())
    suite = written["summary"]["suite"]["nominal"]
    assert suite["completion_rate"]["estimate"] == 1.0 and suite["runs"] == 4 and suite["seeds"] == 1
    assert suite["completion_rate"]["n_units"] == 4 and suite["lap_time_s"]["n_units"] == 4
    lap_times = [r["lap_time_s"] for r in runs if r["condition"] == "nominal"]
    assert suite["lap_time_s"]["estimate"] == pytest.approx(sum(lap_times) / 4)  # one seed: the mean of its runs
    assert (
        written["by_seed"]["0"]["nominal"]["completed"] == 4
        and written["by_seed"]["0"]["nominal"]["wilson95"][1] == 1.0
    )
    assert written["suite"]["short"]["corners"] > 0 and written["suite"]["road_course"]["length_m"] > 2700
    assert written["simulator"]["driver_aids"]["traction_control"] is True  # the one car's aids, recorded
    for p in out["plots"]:
        assert Path(p).stat().st_size > 1000
    assert {Path(p).name for p in out["plots"]} >= {
        "pid_road_course_track.png",
        "pid_short_ice_traces.png",
        "pid_road_course_lap.gif",
    }
    gap = transfer_gap(out["summary"]["suite"]["nominal"], out["summary"]["suite"]["nominal"])
    assert gap["lap_time_s"]["gap"] == 0.0 and gap["lap_share"]["gap"] == 0.0


def test_source_runs_are_deterministic() -> None:
    from s3.sim.factory import make_sim
    from s3.tracks.road_course import road_course

    sim = make_sim(Params().sim)
    track = road_course("nominal")
    a = run_lap(sim, track, PidDriver.for_sim(sim), start_s=1000.0, start_speed=5.0, max_seconds=20.0)
    b = run_lap(sim, track, PidDriver.for_sim(sim), start_s=1000.0, start_speed=5.0, max_seconds=20.0)
    assert np.array_equal(a.trajectory["x"], b.trajectory["x"]) and np.array_equal(
        a.trajectory["throttle_cmd"], b.trajectory["throttle_cmd"]
    )


# ---------------------------------------------------------------------- policies in the source simulator
def test_policy_driver_drives_the_source_sim() -> None:
    """The env's observation-only pure-pursuit controller, through PolicyDriver, laps in MuJoCo."""
    from s3.evaluate.policy_driver import PolicyDriver
    from s3.rl.controllers import PurePursuit
    from s3.sim.factory import make_sim
    from s3.task.layout import obs_layout
    from s3.task.params import EnvParams
    from s3.tracks.generate import procedural_track

    sim = make_sim(Params().sim)
    layout = obs_layout(EnvParams())
    drv = PolicyDriver(lambda: PurePursuit(layout, wheelbase=sim.wheelbase, max_steer=sim.max_steer), EnvParams())
    track = procedural_track(1002).without_patches()
    r = run_lap(sim, track, drv, start_s=0.0, start_speed=5.0, max_seconds=150.0)
    assert r.completed, (r.reason, r.progress)


def test_an_empty_run_is_a_failed_run() -> None:
    m = run_metrics({}, circle(), False, None, 0.0, DT)
    assert not m["completed"] and m["off_track_events"] is None
    json.dumps(m, allow_nan=False)
