"""Drive one lap in a source simulator: any `SourceSim`, any `Driver`, deterministic.

    run_lap(sim, track, driver, start_s, ...) -> RunResult

The car is placed at arc length `start_s` (plus a lateral offset, heading error and speed), then
driven until its net progress along the road reaches one lap length (lap completed; the lap time
is interpolated within the last control period), it is `fail_distance` beyond a road edge
("off_track"), it has gone `backwards_distance` backwards ("backwards"), it has stood still for
`stall_seconds` ("stalled"), the simulator fails ("sim_error"), or at `max_seconds` ("max_time").
A "sim_error" caused by a lost simulator connection (`SimulatorLost`) is flagged `lost`: it says
nothing about the driver, so the caller retries the run on a fresh simulator instead of scoring it.

The trajectory holds T + 1 rows (the start state, then one per control period) with the keys of
the distilled environment's trajectories (s3.rl.rollout) plus a few more; the command columns of
row k are the command that led into state k (row 0: zeros), as in the distilled environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from s3.evaluate.drivers import Driver, TrackState
from s3.evaluate.metrics import beyond_edge
from s3.sim.base import Control, SimulatorError, SimulatorLost, SourceSim, VehicleState
from s3.tracks.track import Track, wrap_angle

REASONS = ("lap", "off_track", "backwards", "stalled", "sim_error", "max_time")
TRAJECTORY_KEYS = (
    "t", "x", "y", "yaw", "vx", "vy", "yaw_rate", "steer", "speed", "sideslip",
    "steering_cmd", "throttle_cmd", "brake_cmd", "mu", "mu_min",
    "s", "d", "heading_error", "w_left", "w_right", "progress",
)  # fmt: skip


@dataclass
class RunResult:
    """One attempt at one lap in the source simulator."""

    track: str
    start_s: float
    start_d: float
    start_heading: float
    start_speed: float
    completed: bool
    lap_time: float | None  # s, interpolated; None when not completed
    progress: float  # m of net progress when the run ended (the lap length when completed)
    lap_length: float
    reason: str  # one of REASONS
    steps: int
    trajectory: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None
    lost: bool = False  # the simulator connection was lost: retry, do not score


def track_state(track: Track, state: VehicleState, hint: int | None, window: int, progress: float) -> TrackState:
    """Project the car onto the track (locally around `hint` when given)."""
    pr = track.project(np.array([[state.x, state.y]]), np.array([state.yaw]), None if hint is None else np.array([hint]), window)
    assert pr.heading_error is not None
    return TrackState(
        s=float(pr.s[0]),
        d=float(pr.d[0]),
        heading=float(pr.heading[0]),
        heading_error=float(pr.heading_error[0]),
        w_left=float(pr.w_left[0]),
        w_right=float(pr.w_right[0]),
        segment=int(pr.segment[0]),
        progress=progress,
    )


def _row(state: VehicleState, where: TrackState, cmd: Control | None) -> dict[str, float]:
    fr = np.asarray(state.friction, dtype=float)
    return {
        "t": state.time,
        "x": state.x,
        "y": state.y,
        "yaw": state.yaw,
        "vx": state.vx,
        "vy": state.vy,
        "yaw_rate": state.yaw_rate,
        "steer": state.steer,
        "speed": math.hypot(state.vx, state.vy),
        "sideslip": math.atan2(state.vy, abs(state.vx)) if abs(state.vx) > 1.0 else 0.0,
        "steering_cmd": cmd.steering if cmd else 0.0,
        "throttle_cmd": cmd.throttle if cmd else 0.0,
        "brake_cmd": cmd.brake if cmd else 0.0,
        "mu": float(fr.mean()),
        "mu_min": float(fr.min()),
        "s": where.s,
        "d": where.d,
        "heading_error": where.heading_error,
        "w_left": where.w_left,
        "w_right": where.w_right,
        "progress": where.progress,
    }


def run_lap(
    sim: SourceSim,
    track: Track,
    driver: Driver,
    start_s: float = 0.0,
    start_d: float = 0.0,
    start_heading: float = 0.0,
    start_speed: float = 0.0,
    max_seconds: float = 400.0,
    fail_distance: float = 4.0,
    backwards_distance: float = 10.0,
    stall_seconds: float = 8.0,
    stall_speed: float = 0.5,
    projection_window: int = 24,
) -> RunResult:
    """Drive one lap of `track` from (start_s, start_d) heading start_heading off the road's direction."""
    x, y, h = (float(a) for a in track.pose_at(np.array(start_s), np.array(start_d)))
    result = RunResult(track.name, float(start_s), float(start_d), float(start_heading), float(start_speed),
                       False, None, 0.0, track.length, "max_time", 0)  # fmt: skip
    rows: list[dict[str, float]] = []
    try:
        state = sim.reset(track, x, y, float(wrap_angle(h + start_heading)), float(start_speed))
    except SimulatorError as e:
        result.reason, result.error, result.lost = "sim_error", str(e), isinstance(e, SimulatorLost)
        return result
    t0 = state.time
    where = track_state(track, state, None, projection_window, 0.0)
    driver.reset(track, state)
    rows.append(_row(state, where, None))
    length = track.length
    n_steps = int(math.ceil(max_seconds / sim.control_dt))
    progress, still = 0.0, 0.0
    for k in range(n_steps):
        cmd = driver.act(state, where)
        try:
            state = sim.step(cmd)
        except SimulatorError as e:
            result.reason, result.error, result.lost = "sim_error", str(e), isinstance(e, SimulatorLost)
            break
        prev_s, prev_progress = where.s, progress
        where = track_state(track, state, where.segment, projection_window, progress)
        ds = (where.s - prev_s + 0.5 * length) % length - 0.5 * length
        progress += ds
        where = replace(where, progress=progress)
        rows.append(_row(state, where, cmd))
        result.steps = k + 1
        if progress >= length:
            frac = (length - prev_progress) / max(progress - prev_progress, 1e-9)
            result.completed = True
            result.lap_time = float((state.time - t0) - sim.control_dt * (1.0 - min(max(frac, 0.0), 1.0)))
            result.reason = "lap"
            break
        if float(beyond_edge(where.d, where.w_left, where.w_right)) > fail_distance:
            result.reason = "off_track"
            break
        if progress < -backwards_distance:
            result.reason = "backwards"
            break
        still = still + sim.control_dt if math.hypot(state.vx, state.vy) < stall_speed else 0.0
        if still >= stall_seconds:
            result.reason = "stalled"
            break
    result.progress = float(min(progress, length))
    result.trajectory = {key: np.array([r[key] for r in rows], dtype=float) for key in TRAJECTORY_KEYS}
    result.trajectory["t"] = result.trajectory["t"] - t0
    return result
