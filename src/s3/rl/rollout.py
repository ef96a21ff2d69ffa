"""Deterministic driving inside a distilled environment: laps, lap times and trajectories.

    run_episodes(policy, model, tracks, track_index, start_s, ...) -> EpisodeBatch   (M cars at once)
    drive_lap(policy, model, track, ...) -> LapResult                                 (one car, one lap)

`policy` is any callable obs [M, D] -> action, either the 2-D policy action (steer,
longitudinal) or the 3-D command (steering_cmd, throttle_cmd, brake_cmd) -- e.g. an exported
policy (`s3.rl.export.load_policy_fn`), the in-memory rsl_rl actor, or `controllers.PurePursuit`.
A recurrent policy keeps its own state: pass a fresh one per call. Each car starts at rest (or at
`start_speed`) on the centerline at arc length `start_s`, heading along the road, with the
history filled as at any reset (see s3.rl.env). A car's episode ends when its net progress reaches
one lap length (lap completed; the lap time is interpolated within the step), when it leaves the
road, turns around, stalls (see s3.rl.env), or the model output is rejected, or at
`max_seconds` (one value, or one per car). No randomness is
involved: the same policy, model and start give the same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from s3.dynamics.base import DynamicsModel
from s3.rl.env import DistilledEnv
from s3.task.params import EndRules, EnvParams
from s3.task.rules import REASONS, TIME_OUT
from s3.tracks.track import Track

Policy = Callable[[Tensor], Tensor]
TRAJECTORY_KEYS = (
    "t",
    "x",
    "y",
    "yaw",
    "vx",
    "vy",
    "yaw_rate",
    "steer",
    "steering_cmd",
    "throttle_cmd",
    "brake_cmd",
    "mu",
    "s",
    "d",
    "progress",
)


@dataclass
class EpisodeBatch:
    """Outcome of M deterministic episodes (arrays [M]; trajectories [T + 1, M])."""

    completed: np.ndarray
    lap_time: np.ndarray  # s; NaN where the lap was not completed
    progress: np.ndarray  # m of net progress when the episode ended
    lap_length: np.ndarray  # m (the track as resampled in the env)
    reason: list[str]  # "lap", "off_track", "backwards", "model_invalid", "stalled" or "max_time"
    steps: np.ndarray
    trajectory: dict[str, np.ndarray] | None = None

    @property
    def completion(self) -> np.ndarray:
        """Share of a lap driven before the episode ended, in [0, 1]."""
        return np.clip(self.progress / self.lap_length, 0.0, 1.0)

    def part(self, rows: slice) -> EpisodeBatch:
        """The episodes `rows` of this batch (without trajectories), e.g. one policy's share of a shared run."""
        return EpisodeBatch(
            self.completed[rows],
            self.lap_time[rows],
            self.progress[rows],
            self.lap_length[rows],
            self.reason[rows],
            self.steps[rows],
        )

    def summary(self, dry: np.ndarray | None = None) -> dict[str, Any]:
        """Counts and means; with `dry` (bool [M], True where the run's track has no friction patch)
        also the mean share of a lap on those tracks (`score_dry`) and on the others (`score_ice`),
        None where a side has no run."""
        done = self.completed
        out = {
            "episodes": int(len(done)),
            "completion_rate": float(done.mean()),
            "mean_completion": float(self.completion.mean()),
            "mean_lap_time_s": float(np.nanmean(self.lap_time)) if done.any() else None,
            "reasons": {r: self.reason.count(r) for r in sorted(set(self.reason))},
        }
        if dry is not None:
            dry = np.asarray(dry, dtype=bool)
            for key, rows in (("score_dry", dry), ("score_ice", ~dry)):
                out[key] = float(self.completion[rows].mean()) if rows.any() else None
                out[key.replace("score", "runs")] = int(rows.sum())
        return out


@dataclass
class LapResult:
    """One car's attempt at one lap."""

    completed: bool
    lap_time: float | None
    progress: float
    lap_length: float
    reason: str
    trajectory: dict[str, np.ndarray] = field(default_factory=dict)


@torch.inference_mode()
def run_episodes(
    policy: Policy,
    model: DynamicsModel,
    tracks: Sequence[Track],
    track_index: Sequence[int] | np.ndarray,
    start_s: Sequence[float] | np.ndarray,
    env_params: EnvParams | None = None,
    start_d: float | Sequence[float] = 0.0,
    start_speed: float | Sequence[float] = 0.0,
    max_seconds: float | Sequence[float] | np.ndarray | None = None,
    record: bool = False,
    device: str | torch.device = "cpu",
    ends: EndRules | None = None,
) -> EpisodeBatch:
    """Drive M = len(track_index) cars, car i on tracks[track_index[i]] from arc length start_s[i].

    `ends`: the rules that end a run (default: the env params' training terminations; evaluation
    passes its judging rules, `evaluate.judge.ends()`).

    max_seconds defaults to each car's lap length at 4 m/s on average.
    """
    params = env_params or EnvParams()
    m = len(track_index)
    env = DistilledEnv(model, tracks, params, num_envs=m, device=device, seed=0, auto_reset=False, ends=ends)
    dev = env.device
    obs = env.reset_to(
        torch.as_tensor(np.asarray(track_index), device=dev),
        torch.as_tensor(np.asarray(start_s, dtype=np.float32), device=dev),
        torch.as_tensor(np.asarray(start_d, dtype=np.float32), device=dev),
        0.0,
        torch.as_tensor(np.asarray(start_speed, dtype=np.float32), device=dev),
    )["policy"]
    length = env.track_length()
    if max_seconds is None:
        limit = length / 4.0
    else:
        limit = torch.as_tensor(np.asarray(max_seconds, dtype=np.float32), device=dev).expand(m)
    limit_steps = torch.ceil(limit / env.dt).long()
    frames = [_frame(env, 0.0)] if record else []

    def step(active: Tensor) -> tuple[Tensor, Tensor]:
        nonlocal obs
        obs_td, _, _, extras = env.step(policy(obs))
        obs = obs_td["policy"]
        if record:
            frames.append(_frame(env, env.dt * len(frames)))
        return extras["progress"], extras["reason"]

    out = lap_loop(step, length, limit_steps, env.dt)
    if record:
        trajectory = {key: torch.stack([f[key] for f in frames]).cpu().numpy() for key in TRAJECTORY_KEYS}
        for arr in trajectory.values():  # freeze each car's trajectory after its episode ended
            for i, last in enumerate(out.steps):
                arr[last + 1 :, i] = arr[last, i]
        out.trajectory = trajectory
    return out


def lap_loop(
    step: Callable[[Tensor], tuple[Tensor, Tensor]], length: Tensor, limit_steps: Tensor, dt: float
) -> EpisodeBatch:
    """Step M cars until each has lapped, failed or used its `limit_steps` [M].

    `step(active [M] bool)` advances the env one control period and returns (net progress [M],
    env reason code [M]); a car ends at the lap (its time interpolated across the line), at a
    failure reason, or out of steps ("max_time"; an env time-out does not end it).
    """
    m, dev = len(length), length.device
    active = torch.ones(m, dtype=torch.bool, device=dev)
    completed = torch.zeros(m, dtype=torch.bool, device=dev)
    lap_time = torch.full((m,), float("nan"), device=dev)
    final_progress = torch.zeros(m, device=dev)
    reason = torch.full((m,), -1, dtype=torch.long, device=dev)  # -1 running, 0 lap, else REASONS index
    steps = torch.zeros(m, dtype=torch.long, device=dev)
    prev = torch.zeros(m, device=dev)
    for k in range(int(limit_steps.max())):
        prog, why = step(active)
        crossed = active & (prog >= length)
        frac = ((length - prev) / (prog - prev).clamp(min=1e-6)).clamp(0.0, 1.0)
        lap_time = torch.where(crossed, dt * (k + frac), lap_time)
        ended = active & ~crossed & (why > 0) & (why != TIME_OUT)
        reason = torch.where(crossed, 0, torch.where(ended, why, reason))
        ended |= active & ~crossed & (k + 1 >= limit_steps)  # out of time: reason stays "max_time"
        completed |= crossed
        final_progress = torch.where(active, torch.where(crossed, length, prog), final_progress)
        steps = torch.where(active, k + 1, steps)
        active &= ~(crossed | ended)
        prev = prog
        if not bool(active.any()):
            break
    names = ["lap", *REASONS[1:TIME_OUT]]
    return EpisodeBatch(
        completed=completed.cpu().numpy(),
        lap_time=lap_time.cpu().numpy(),
        progress=final_progress.cpu().numpy(),
        lap_length=length.cpu().numpy(),
        reason=[names[r] if r >= 0 else "max_time" for r in reason.tolist()],
        steps=steps.cpu().numpy(),
    )


def _frame(env: DistilledEnv, t: float) -> dict[str, Tensor]:
    s, cmd = env.hs[:, -1], env.ha[:, -1]
    return {
        "t": torch.full((env.num_envs,), t, device=env.device),
        "x": env.pose[:, 0].clone(),
        "y": env.pose[:, 1].clone(),
        "yaw": env.pose[:, 2].clone(),
        "vx": s[:, 0].clone(),
        "vy": s[:, 1].clone(),
        "yaw_rate": s[:, 2].clone(),
        "steer": s[:, 3].clone(),
        "steering_cmd": cmd[:, 0].clone(),
        "throttle_cmd": cmd[:, 1].clone(),
        "brake_cmd": cmd[:, 2].clone(),
        "mu": env.frame.mu.clone(),
        "s": env.frame.s.clone(),
        "d": env.track_feats[:, 0].clone(),
        "progress": env.progress.clone(),
    }


def drive_lap(
    policy: Policy,
    model: DynamicsModel,
    track: Track,
    env_params: EnvParams | None = None,
    start_s: float = 0.0,
    start_speed: float = 0.0,
    start_d: float = 0.0,
    max_seconds: float | None = None,
    device: str | torch.device = "cpu",
) -> LapResult:
    """One lap of `track` from (start_s, start_d) at start_speed; trajectory arrays [T + 1]."""
    out = run_episodes(
        policy,
        model,
        [track],
        [0],
        [start_s],
        env_params,
        start_d,
        start_speed,
        max_seconds,
        record=True,
        device=device,
    )
    traj = {k: v[: int(out.steps[0]) + 1, 0] for k, v in (out.trajectory or {}).items()}
    lt = float(out.lap_time[0])
    return LapResult(
        bool(out.completed[0]),
        lt if math.isfinite(lt) else None,
        float(out.progress[0]),
        float(out.lap_length[0]),
        out.reason[0],
        traj,
    )
