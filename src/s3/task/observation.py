"""The policy observation of N cars, whatever drives them (a learned model, the source simulator).

    obs = Observer.for_params(tracks, env_params, num_cars)
    obs.start(ids, track, pose, state, command, hint=None)   # cars `ids` begin an episode
    ds = obs.observe(pose, state, command, frozen=None)      # every car, one control period later
    o = obs.compute()                                        # [N, D], layout s3.task.layout
    p = obs.privileged()                                     # [N, 1 + Q] friction for the critic, or None

pose [N, 3] = world (x, y, yaw); state [N, 4] = (vx, vy, yaw_rate, steer) body frame; command
[N, 3] = the command applied over the last period, i.e. the one that led into `state`. At a start
the history holds (state, command) at every position, so `command` there is the command that holds
the state: the distilled env passes its model's steady-speed throttle (0, hold(vx), 0); the source
simulator, which has no such table, passes (0, 0, 0). The track side is a `TrackFrame` (`frame`):
its progress, friction and track features are the ones the rules judge.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from s3.task.frame import TrackFrame
from s3.task.layout import ObsLayout, assemble_paired, obs_layout, to_body
from s3.task.params import EnvParams
from s3.task.window import Window
from s3.tracks.torch_track import TrackBatch
from s3.tracks.track import Track


class Observer:
    """The observation builder over a TrackFrame (see the module docstring)."""

    def __init__(
        self,
        tracks: Sequence[Track] | TrackBatch,
        layout: ObsLayout,
        num_cars: int,
        track_ds: float = 1.0,
        window: int = 8,
        device: torch.device | str = "cpu",
        privileged: bool = False,
    ) -> None:
        self.layout, self.n = layout, int(num_cars)
        self.privileged_surface = privileged and not layout.surface_label  # the label for the critic alone
        surface = layout.surface_ahead if layout.surface_label or self.privileged_surface else ()
        self.frame = TrackFrame(tracks, self.n, track_ds, window, layout.preview_distances, surface, device)
        with torch.inference_mode():
            self._hist = Window(self.n, layout.history + 1, 7, self.frame.device)

    @classmethod
    def for_params(
        cls, tracks: Sequence[Track] | TrackBatch, params: EnvParams, num_cars: int, device: torch.device | str = "cpu"
    ) -> Observer:
        """The observer of a policy trained with these env params."""
        layout = obs_layout(params)
        return cls(tracks, layout, num_cars, params.track_ds, params.projection_window, device, params.critic_surface)

    @property
    def hist(self) -> Tensor:
        """(state, command) [N, H + 1, 7] of the observation, oldest first (a view, overwritten later)."""
        return self._hist.view

    @torch.inference_mode()
    def start(
        self, ids: Tensor, track: Tensor, pose: Tensor, state: Tensor, command: Tensor, hint: Tensor | None = None
    ) -> None:
        """Cars `ids` [M] begin an episode on `track` [M] at pose [M, 3] with state [M, 4], command [M, 3]."""
        self.frame.place(ids, track, pose, hint)
        self._hist.fill(ids, torch.cat([state, command], dim=1))

    @torch.inference_mode()
    def observe(self, pose: Tensor, state: Tensor, command: Tensor, frozen: Tensor | None = None) -> Tensor:
        """Every car one period later; returns the arc-length change ds [N] (0 where `frozen`)."""
        ds = self.frame.advance(pose, frozen)
        self._hist.push(state, command)
        return ds

    @torch.inference_mode()
    def compute(self) -> Tensor:
        """The flat observation [N, D] of every car now."""
        f = self.frame
        ahead_xy, ahead_w = f.preview()
        surface = f.surface() if self.layout.surface_label else None
        return assemble_paired(self.hist, f.feats, to_body(ahead_xy, f.pose), ahead_w, surface)

    @torch.inference_mode()
    def privileged(self) -> Tensor | None:
        """What only the critic observes (env.critic_surface without the label): the friction under and
        ahead of every car [N, 1 + Q], as in the label; None when there is none."""
        return self.frame.surface() if self.privileged_surface else None
