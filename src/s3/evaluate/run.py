"""Drive one lap in a source simulator: any `SourceSim`, any `Driver`, deterministic.

    run_lap(sim, track, driver, start_s, ..., judge=JudgeParams()) -> RunResult

The car is placed at arc length `start_s` (plus a lateral offset, heading error and speed), then
driven until its net progress along the road reaches one lap length (lap completed; the lap time
is interpolated within the last control period), until the judging rules end the run
(s3.task.rules with `judge.ends()`: "off_track", "backwards", "stalled" -- the rules a run inside a
distilled model is judged by), the simulator fails ("sim_error"), or at `max_seconds`
("max_time"). Where the car is on the track (projection, progress, lap length) is s3.task's
TrackFrame on the track resampled at `judge.track_ds`. A "sim_error" caused by a lost simulator
connection (`SimulatorLost`) is flagged `lost`: it says nothing about the driver, so the caller
re-runs it on a fresh simulator instead of scoring it.

The trajectory holds T + 1 rows (the start state, then one per control period) with the keys of
the distilled environment's trajectories (s3.rl.rollout) plus a few more; the command columns of
row k are the command that led into state k (row 0: zeros), as in the distilled environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from s3.evaluate.drivers import Driver, TrackState
from s3.sim.base import Control, SimulatorError, SimulatorLost, SourceSim, VehicleState
from s3.task.frame import TrackFrame, wrap
from s3.task.params import JudgeParams, RewardParams
from s3.task.rules import REASONS as TASK_REASONS
from s3.task.rules import Rules
from s3.tracks.geometry import wrap_angle
from s3.tracks.track import Track

REASONS = ("lap", "off_track", "backwards", "stalled", "sim_error", "max_time")
TRAJECTORY_KEYS = (
    "t",
    "x",
    "y",
    "yaw",
    "vx",
    "vy",
    "yaw_rate",
    "steer",
    "speed",
    "sideslip",
    "steering_cmd",
    "throttle_cmd",
    "brake_cmd",
    "mu",
    "mu_min",
    "s",
    "d",
    "heading_error",
    "w_left",
    "w_right",
    "progress",
)
_ONE = torch.zeros(1, dtype=torch.long)
_NO = torch.zeros(1, dtype=torch.bool)
_Z2 = torch.zeros(1, 2)


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


def _pose(state: VehicleState) -> torch.Tensor:
    return torch.tensor([[state.x, state.y, state.yaw]], dtype=torch.float32)


def track_state(frame: TrackFrame) -> TrackState:
    """Where the frame's one car is on its track."""
    d, herr, wl, wr = (float(v) for v in frame.feats[0])
    heading = float(wrap(frame.pose[0, 2] - frame.feats[0, 1]))
    return TrackState(
        s=float(frame.s[0]),
        d=d,
        heading=heading,
        heading_error=herr,
        w_left=wl,
        w_right=wr,
        segment=int(frame.seg[0]),
        progress=float(frame.progress[0]),
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
    judge: JudgeParams | None = None,
) -> RunResult:
    """Drive one lap of `track` from (start_s, start_d) heading start_heading off the road's direction."""
    judge = judge or JudgeParams()
    frame = TrackFrame([track], 1, judge.track_ds, judge.projection_window)
    length = float(frame.length()[0])
    n_steps = int(math.ceil(max_seconds / sim.control_dt))
    rules = Rules(1, sim.control_dt, judge.ends(), RewardParams(), max_steps=n_steps + 1)
    x, y, h = (float(a) for a in track.pose_at(np.array(start_s), np.array(start_d)))
    result = RunResult(
        track.name,
        float(start_s),
        float(start_d),
        float(start_heading),
        float(start_speed),
        False,
        None,
        0.0,
        length,
        "max_time",
        0,
    )
    rows: list[dict[str, float]] = []
    try:
        state = sim.reset(track, x, y, float(wrap_angle(h + start_heading)), float(start_speed))
    except SimulatorError as e:
        result.reason, result.error, result.lost = "sim_error", str(e), isinstance(e, SimulatorLost)
        return result
    t0 = state.time
    frame.place(_ONE, _ONE, _pose(state))
    where = track_state(frame)
    driver.reset(track, state)
    rows.append(_row(state, where, None))
    for k in range(n_steps):
        cmd = driver.act(state, where)
        try:
            state = sim.step(cmd)
        except SimulatorError as e:
            result.reason, result.error, result.lost = "sim_error", str(e), isinstance(e, SimulatorLost)
            break
        prev_progress = where.progress
        ds = frame.advance(_pose(state))
        where = track_state(frame)
        rows.append(_row(state, where, cmd))
        result.steps = k + 1
        if where.progress >= length:
            frac = (length - prev_progress) / max(where.progress - prev_progress, 1e-9)
            result.completed = True
            result.lap_time = float((state.time - t0) - sim.control_dt * (1.0 - min(max(frac, 0.0), 1.0)))
            result.reason = "lap"
            break
        out = rules.judge(frame, ds, _Z2, _Z2, _NO)
        if bool(out.done[0]):
            result.reason = TASK_REASONS[int(out.reason[0])]
            break
    result.progress = float(min(where.progress, length))
    result.trajectory = {key: np.array([r[key] for r in rows], dtype=float) for key in TRAJECTORY_KEYS}
    result.trajectory["t"] = result.trajectory["t"] - t0
    return result
