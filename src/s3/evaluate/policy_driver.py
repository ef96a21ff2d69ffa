"""A trained policy (or any obs -> action callable) as a source-simulator `Driver`.

The observation is rebuilt from the source simulator's state exactly as the distilled
environment builds it (s3.rl.env / s3.task.layout): the same layout, the same history
convention (each state beside the command that led into it, most recent first), the track
features and the centerline preview taken on the track resampled at the env's `track_ds` with
the same point-offset arithmetic, and the friction under / ahead of the car when the policy was
trained with the surface label (the `oracle`). At a reset the history is filled with the start
state and the command (0, hold_throttle(vx), 0), as the env does.

    driver = PolicyDriver(make_policy, layout, dt)           # make_policy() -> fresh obs -> action callable
    factory = policy_factory("policies/dytr")                 # a DriverFactory for evaluate_driver
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.evaluate.drivers import DriverFactory, TrackState
from s3.sim.base import Control, SourceSim, VehicleState
from s3.task.layout import ObsLayout, assemble
from s3.tracks.track import Track, wrap_angle

Policy = Callable[[torch.Tensor], torch.Tensor]


def layout_from_json(obs: dict[str, Any]) -> ObsLayout:
    """The ObsLayout described by policy.json's "obs" entry (ObsLayout.to_json)."""
    groups = {g: slice(v["start"], v["stop"]) for g, v in obs["groups"].items()}
    return ObsLayout(
        history=int(obs["history"]),
        preview_points=int(obs["preview_points"]),
        preview_spacing=float(obs["preview_spacing_m"]),
        surface_label=bool(obs["surface_label"]),
        surface_ahead=tuple(float(d) for d in obs["surface_ahead_m"]),
        groups=groups,
    )


class PolicyDriver:
    """Runs `make_policy()`'s callable on observations rebuilt from source-simulator states."""

    def __init__(
        self,
        make_policy: Callable[[], Policy],
        layout: ObsLayout,
        dt: float,
        track_ds: float = 1.0,
        projection_window: int = 16,
        hold_throttle: Callable[[float], float] | None = None,
    ) -> None:
        self.make_policy = make_policy
        self.layout = layout
        self.dt = float(dt)
        self.track_ds = float(track_ds)
        self.window = int(projection_window)
        self.hold_throttle = hold_throttle or (lambda v: 0.0)
        self._resampled: dict[int, tuple[Track, Track, np.ndarray]] = {}
        self.track: Track | None = None
        self._policy: Policy | None = None
        self._hist = np.zeros((layout.history + 1, 7), dtype=np.float32)
        self._last_cmd = np.zeros(3, dtype=np.float32)
        self._first = True
        self._seg: int | None = None
        self._last_obs: np.ndarray | None = None

    def reset(self, track: Track, state: VehicleState) -> None:
        key = id(track)
        if key not in self._resampled or self._resampled[key][0] is not track:
            rt = track.resampled(self.track_ds)
            spacing = rt.length / len(rt)
            offs = np.minimum(np.round(np.array(self.layout.preview_distances) / spacing).astype(np.int64), len(rt) - 1)
            self._resampled[key] = (track, rt, offs)
        self.track = self._resampled[key][1]
        self._offs = self._resampled[key][2]
        self._policy = self.make_policy()
        cmd0 = np.array([0.0, self.hold_throttle(max(state.vx, 0.0)), 0.0], dtype=np.float32)
        row = np.concatenate([[state.vx, state.vy, state.yaw_rate, state.steer], cmd0]).astype(np.float32)
        self._hist[:] = row
        self._last_cmd = cmd0
        self._first = True
        self._seg = None

    def observation(self, state: VehicleState) -> np.ndarray:
        """The flat observation [D] for `state` (pushes it into the history unless just reset)."""
        rt = self.track
        assert rt is not None, "reset() first"
        if not self._first:
            row = np.concatenate([[state.vx, state.vy, state.yaw_rate, state.steer], self._last_cmd]).astype(np.float32)
            self._hist = np.concatenate([self._hist[1:], row[None]], axis=0)
        self._first = False
        xy = np.array([[state.x, state.y]])
        hint = None if self._seg is None else np.array([self._seg])
        pr = rt.project(xy, np.array([state.yaw]), hint, self.window)
        seg = int(pr.segment[0])
        self._seg = seg
        t = float(np.clip((pr.s[0] - rt.s[seg]) / rt.segment_lengths[seg], 0.0, 1.0)) if pr.s[0] >= rt.s[seg] else 1.0
        idx = (seg + self._offs) % len(rt)
        pts = rt.centerline[idx] + t * rt.segment_vectors[idx]
        c, s = math.cos(state.yaw), math.sin(state.yaw)
        dx, dy = pts[:, 0] - state.x, pts[:, 1] - state.y
        body = np.stack([c * dx + s * dy, -s * dx + c * dy], axis=1)
        assert pr.heading_error is not None
        feats = np.array([pr.d[0], wrap_angle(pr.heading_error[0]), pr.w_left[0], pr.w_right[0]])
        surface = None
        if self.layout.surface_label:
            sq = np.concatenate([[pr.s[0]], pr.s[0] + np.array(self.layout.surface_ahead)])
            surface = rt._mu_from_sd(np.mod(sq, rt.length), np.full(len(sq), pr.d[0]))  # same (s, d) rule as the env
        tt = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float32))[None]
        obs = assemble(tt(self._hist), tt(feats), tt(body), tt(rt.w_left[idx]), tt(rt.w_right[idx]), None if surface is None else tt(surface))
        return obs[0].numpy()

    @torch.inference_mode()
    def act(self, state: VehicleState, where: TrackState) -> Control:
        assert self._policy is not None, "reset() first"
        self._last_obs = self.observation(state)
        obs = torch.as_tensor(self._last_obs)[None]
        out = self._policy(obs).detach().cpu().numpy().reshape(-1).astype(np.float64)
        if len(out) == 2:
            a = np.clip(out, -1.0, 1.0)
            cmd = np.array([a[0], max(a[1], 0.0), max(-a[1], 0.0)])
        else:
            cmd = np.array([np.clip(out[0], -1, 1), np.clip(out[1], 0, 1), np.clip(out[2], 0, 1)])
        self._last_cmd = cmd.astype(np.float32)
        return Control(float(cmd[0]), float(cmd[1]), float(cmd[2]))


def policy_factory(folder: str | Path, track_ds: float = 1.0, device: str = "cpu") -> DriverFactory:
    """A DriverFactory for an exported policy in `folder` (policies/<family>/).

    Refuses a simulator whose control period differs from the one the policy was trained at.
    """
    from s3.rl.export import as_callable, load_deployed

    module, meta = load_deployed(folder, device)
    layout = layout_from_json(meta["obs"])
    recurrent = bool(meta["policy"]["recurrent"])

    def make(sim: SourceSim) -> PolicyDriver:
        if abs(float(meta["dt"]) - sim.control_dt) > 1e-9:
            raise ValueError(f"{folder}: policy trained at dt={meta['dt']} s, simulator steps {sim.control_dt} s")
        return PolicyDriver(lambda: as_callable(module, recurrent), layout, sim.control_dt, track_ds)

    return make
