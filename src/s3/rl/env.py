"""The distilled environment: N cars driven by a learned dynamics model on procedural tracks.

`DistilledEnv` implements rsl_rl's `VecEnv`. Every quantity is a tensor [N, ...] on one device
(CPU or CUDA); there is no Python loop over cars. Per car it keeps the model's history window
(states [N, K, 4] and the commands that led into them [N, K, 3]), the world pose (integrated with
`s3.dynamics.base.integrate_pose`), its track index, the last projection segment (the hint for the
next projection), the arc length and the net progress of the episode.

Actions. The policy emits a = (steer, longitudinal) in [-1, 1]^2 (rsl_rl samples an unbounded
Gaussian: the env clips), mapped to the command (steering_cmd = steer, throttle = max(u, 0),
brake = max(-u, 0)). `step` also accepts a 3-D command [N, 3] directly (controllers, exported
policies); it is clipped to [-1, 1] x [0, 1] x [0, 1].

One step (control period dt of the model):
    s[t+1] = model.step(history, command, mu)   mu = peak friction under the car at time t, from
                                                the track's patches (fed only if the model uses it)
    pose   = integrate_pose(pose, s[t], s[t+1])
    reward = progress_w * ds - action_rate_w * |a[t] - a[t-1]|^2
             - off_track_w * [left the road] - backwards_w * [turned around / reversed]
             - stall_w * [stalled]
  ds is the signed arc-length change along the centerline (wraps at the start line).
Terminations: off track (car centre beyond the road edge + off_track_margin), backwards (|heading
error| > backwards_heading, or net progress < -backwards_distance), stalled (less than
stall_distance of progress in the last stall_seconds: a car parked before a corner it fears
would otherwise sit out the episode at no cost), and model outputs that are
non-finite or absurd (|(vx, vy)| > max_speed or |yaw rate| > max_yaw_rate). Such outputs are never
propagated: the car keeps its previous state, gets zero reward, is terminated and counted
(`invalid_model_steps`, extras["log"]["Env/model_invalid"]). The time limit is reported in
extras["time_outs"] (rsl_rl bootstraps it) and is not a failure. Finished cars are reset in
place (auto-reset) and the returned observation is the first of their new episode.

Reset. A car starts on a random pool track at a random arc length, lateral offset (a fraction
`init_lateral` of the half width on that side), heading error (+-init_heading) and speed
(uniform [init_speed_min, init_speed_max]), driving straight (vy = yaw rate = steer = 0). The model
needs a history window; it is filled with that initial state repeated K times, each with the
command that holds it: zero steering, no brake, and the throttle at which *this model* keeps the
speed constant (tabulated once per env by solving model.step(...)[vx] = vx on a speed grid, with
mu = 1). The window is thus a steady state of the model itself rather than an impossible history
(a coasting command under a constant speed). At zero speed it is all zeros. The observation
history is filled the same way.

All public methods run under torch.inference_mode (rsl_rl collects rollouts under it): every env
tensor is an inference tensor, created and updated only there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from tensordict import TensorDict
from torch import Tensor

from rsl_rl.env import VecEnv

from s3.dynamics.base import DynamicsModel, integrate_pose
from s3.rl.observations import ObsLayout, assemble, obs_layout, to_body
from s3.rl.params import EnvParams
from s3.tracks.torch_track import TrackBatch
from s3.tracks.track import Track

REASONS = ("running", "off_track", "backwards", "model_invalid", "stalled", "time_out")
OFF_TRACK, BACKWARDS, MODEL_INVALID, STALLED, TIME_OUT = 1, 2, 3, 4, 5


class _Projection(NamedTuple):
    """A TrackBatch projection plus the fraction t along the segment."""

    s: Tensor
    d: Tensor
    heading: Tensor
    heading_error: Tensor
    w_left: Tensor
    w_right: Tensor
    segment: Tensor
    t: Tensor


def _wrap(a: Tensor) -> Tensor:
    return math.pi - torch.remainder(math.pi - a, 2.0 * math.pi)


class _SD(NamedTuple):
    """What TrackBatch.friction_from_projection reads from a projection."""

    s: Tensor
    d: Tensor


def policy_to_command(a: Tensor) -> Tensor:
    """(steer, longitudinal) [N, 2] in [-1, 1] -> (steering_cmd, throttle_cmd, brake_cmd) [N, 3]."""
    a = a.clamp(-1.0, 1.0)
    return torch.stack([a[:, 0], a[:, 1].clamp(min=0.0), (-a[:, 1]).clamp(min=0.0)], dim=1)


def command_to_policy(cmd: Tensor) -> Tensor:
    """The inverse map (throttle and brake together collapse to their difference)."""
    return torch.stack([cmd[:, 0], cmd[:, 1] - cmd[:, 2]], dim=1)


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class DistilledEnv(VecEnv):
    """Batched driving environment over any dynamics family (see the module docstring)."""

    num_actions = 2

    def __init__(
        self,
        model: DynamicsModel,
        tracks: Sequence[Track],
        params: EnvParams | None = None,
        num_envs: int | None = None,
        device: str | torch.device | None = "cpu",
        seed: int = 0,
        auto_reset: bool = True,
    ) -> None:
        self.params = params = params or EnvParams()
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.dt = float(model.dt)
        self.num_envs = int(num_envs or params.num_envs)
        self.max_episode_length = max(1, int(round(params.episode_seconds / self.dt)))
        self.layout: ObsLayout = obs_layout(params)
        self.num_obs = self.layout.dim
        self.auto_reset = auto_reset
        self.cfg: dict[str, Any] = {"env": params.model_dump(mode="json"), "family": model.family, "dt": self.dt}
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        self._hold_v, self._hold_u = self._hold_throttle_table()
        with torch.inference_mode():
            self._allocate()
            self.set_tracks(tracks)

    # ------------------------------------------------------------------ setup
    def _allocate(self) -> None:
        n, k, h, dev = self.num_envs, self.model.history, self.layout.history, self.device
        z = lambda *shape: torch.zeros(*shape, device=dev)  # noqa: E731
        self.hs, self.ha = z(n, k, 4), z(n, k, 3)
        self.hist = z(n, h + 1, 7)
        self.pose = z(n, 3)
        self.track_idx = torch.zeros(n, dtype=torch.long, device=dev)
        self.seg = torch.zeros(n, dtype=torch.long, device=dev)
        self.seg_t = z(n)  # fraction along the projection segment
        self.s, self.progress, self.mu = z(n), z(n), torch.ones(n, device=dev)
        self.stall_ref = z(n)  # progress when the stall clock last restarted
        self.stall_steps = torch.zeros(n, dtype=torch.long, device=dev)
        self._stall_limit = max(1, int(round(self.params.stall_seconds / self.dt)))
        self.action_prev = z(n, 2)
        self.track_feats = z(n, 4)
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=dev)
        self.reason = torch.zeros(n, dtype=torch.long, device=dev)
        self.invalid_count = torch.zeros((), dtype=torch.long, device=dev)
        self.episode_count = torch.zeros((), dtype=torch.long, device=dev)
        self._preview_d = torch.tensor(self.layout.preview_distances, device=dev)
        self._surface_d = torch.tensor(self.layout.surface_ahead, device=dev)
        self.obs = z(n, self.num_obs)

    @torch.no_grad()
    def _hold_throttle_table(self, v_max: float = 45.0, n_v: int = 46, n_u: int = 51) -> tuple[Tensor, Tensor]:
        """Throttle [n_v] that keeps each speed of a grid [n_v] constant under this model (mu = 1)."""
        dev, k = self.device, self.model.history
        v = torch.linspace(0.0, v_max, n_v, device=dev)
        u = torch.linspace(0.0, 1.0, n_u, device=dev)
        vv, uu = (t.reshape(-1) for t in torch.meshgrid(v, u, indexing="ij"))
        zero = torch.zeros_like(vv)
        state = torch.stack([vv, zero, zero, zero], dim=1)
        cmd = torch.stack([zero, uu, zero], dim=1)
        mu = torch.ones_like(vv) if self.model.use_mu else None
        vx1 = self.model.step(state[:, None].expand(-1, k, -1).contiguous(), cmd[:, None].expand(-1, k, -1).contiguous(), cmd, mu)[:, 0]
        f = (vx1 - vv).reshape(n_v, n_u)
        f = torch.where(torch.isfinite(f), f, torch.full_like(f, float("inf")))
        above = f >= 0
        j = torch.where(above.any(dim=1), above.float().argmax(dim=1), torch.full((n_v,), n_u - 1, device=dev))
        jm = (j - 1).clamp(min=0)
        f0, f1 = f.gather(1, jm[:, None])[:, 0], f.gather(1, j[:, None])[:, 0]
        frac = torch.where((j > 0) & torch.isfinite(f1) & (f1 > f0), -f0 / (f1 - f0).clamp(min=1e-9), torch.zeros_like(f0))
        hold = (u[jm] + frac.clamp(0, 1) * (u[j] - u[jm])).clamp(0.0, 1.0)
        hold = torch.where(above.any(dim=1), hold, torch.ones_like(hold))
        hold[0] = 0.0  # at rest: all zeros
        return v, hold

    def hold_throttle(self, v: Tensor) -> Tensor:
        """Interpolated steady-speed throttle for speeds v [M] (clamped to the grid)."""
        grid, table = self._hold_v, self._hold_u
        dv = float(grid[1] - grid[0])
        pos = (v / dv).clamp(0.0, len(grid) - 1.0)
        i = pos.floor().long().clamp(max=len(grid) - 2)
        f = pos - i
        return table[i] * (1 - f) + table[i + 1] * f

    @torch.inference_mode()
    def set_tracks(self, tracks: Sequence[Track] | TrackBatch, changed: Sequence[int] | None = None) -> Tensor:
        """Use these tracks from now on; returns the mask [N] of cars that were reset onto them.

        With `changed` (indices of the tracks that differ from the current ones; same number of
        tracks), only the cars on those tracks restart and the others drive on; otherwise every
        car restarts.
        """
        old_count = len(self.tracks) if hasattr(self, "tracks") else -1
        tb = self._load_tracks(tracks)
        if changed is None or len(tb) != old_count:
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        else:
            mask = torch.isin(self.track_idx, torch.as_tensor(list(changed), dtype=torch.long, device=self.device))
        ids = mask.nonzero(as_tuple=False).squeeze(1)
        if ids.numel():
            self._reset_idx(ids)
        self.obs = self._compute_obs()
        return mask

    def _load_tracks(self, tracks: Sequence[Track] | TrackBatch) -> TrackBatch:
        """Install the tracks and the per-track tables of the fast projection and preview."""
        self.tracks = tb = tracks if isinstance(tracks, TrackBatch) else TrackBatch(list(tracks), ds=self.params.track_ds, device=self.device)
        spacing = tb.length / tb.count.to(tb.length.dtype)  # [B] point spacing after resampling
        offs = torch.round(self._preview_d[None, :] / spacing[:, None]).long()
        self._preview_offs = torch.minimum(offs, tb.count[:, None] - 1)  # [B, P] points ahead
        self._inv_len2 = 1.0 / tb.seg_len.square().clamp(min=1e-12)
        w = self.params.projection_window
        self._window = torch.arange(-w, w + 1, device=self.device)
        return tb

    # ------------------------------------------------------------------ VecEnv
    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self.obs}, batch_size=[self.num_envs], device=self.device)

    @torch.inference_mode()
    def reset(self) -> TensorDict:
        """Reset every car (random starts) and return the observations."""
        self._reset_idx(torch.arange(self.num_envs, device=self.device))
        self.obs = self._compute_obs()
        return self.get_observations()

    @torch.inference_mode()
    def reset_to(
        self,
        track_idx: Tensor,
        s: Tensor,
        d: Tensor | float = 0.0,
        heading_offset: Tensor | float = 0.0,
        speed: Tensor | float = 0.0,
    ) -> TensorDict:
        """Deterministic reset of every car to the given starts (evaluation); returns observations."""
        n, dev = self.num_envs, self.device
        full = lambda x: torch.as_tensor(x, dtype=torch.float32, device=dev).expand(n).clone()  # noqa: E731
        self._reset_idx(
            torch.arange(n, device=dev),
            track=torch.as_tensor(track_idx, dtype=torch.long, device=dev).expand(n).clone(),
            s0=full(s),
            d0=full(d),
            heading=full(heading_offset),
            speed=full(speed),
        )
        self.obs = self._compute_obs()
        return self.get_observations()

    @torch.inference_mode()
    def step(self, actions: Tensor) -> tuple[TensorDict, Tensor, Tensor, dict[str, Any]]:
        p, rp = self.params, self.params.reward
        a = actions.to(self.device, torch.float32)
        if a.shape[1] == 3:
            cmd = torch.stack([a[:, 0].clamp(-1, 1), a[:, 1].clamp(0, 1), a[:, 2].clamp(0, 1)], dim=1)
            pol = command_to_policy(cmd)
        else:
            pol = a.clamp(-1.0, 1.0)
            cmd = policy_to_command(pol)
        s0 = self.hs[:, -1]
        s1 = self.model.step(self.hs, self.ha, cmd, self.mu if self.model.use_mu else None)
        invalid = ~torch.isfinite(s1).all(dim=1)
        invalid |= torch.hypot(s1[:, 0], s1[:, 1]) > p.max_speed
        invalid |= s1[:, 2].abs() > p.max_yaw_rate
        s1 = torch.where(invalid[:, None], s0, s1)  # never propagate a broken prediction
        pose = integrate_pose(self.pose, s0, s1, self.dt)
        tb = self.tracks
        proj = self._project(pose[:, :2], self.track_idx, self.seg, pose[:, 2])
        length = tb.length[self.track_idx]
        ds = torch.remainder(proj.s - self.s + 0.5 * length, length) - 0.5 * length
        ds = torch.where(invalid, torch.zeros_like(ds), ds)
        self.progress += ds
        margin = p.off_track_margin
        off = torch.where(proj.d >= 0, proj.d > proj.w_left + margin, -proj.d > proj.w_right + margin)
        backwards = (proj.heading_error.abs() > p.backwards_heading) | (self.progress < -p.backwards_distance)
        moved = self.progress - self.stall_ref >= p.stall_distance
        self.stall_ref = torch.where(moved, self.progress, self.stall_ref)
        self.stall_steps = torch.where(moved, torch.zeros_like(self.stall_steps), self.stall_steps + 1)
        stalled = (self.stall_steps >= self._stall_limit) & ~(off | backwards | invalid)
        self.episode_length_buf += 1
        terminated = off | backwards | invalid | stalled
        time_out = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        reward = rp.progress * ds - rp.action_rate * (pol - self.action_prev).square().sum(dim=1)
        reward = reward - rp.off_track * off.float() - rp.backwards * (backwards & ~off).float() - rp.stall * stalled.float()
        reward = torch.where(invalid, torch.zeros_like(reward), reward)
        # advance the buffers
        self.hs = torch.cat([self.hs[:, 1:], s1[:, None]], dim=1)
        self.ha = torch.cat([self.ha[:, 1:], cmd[:, None]], dim=1)
        self.hist = torch.cat([self.hist[:, 1:], torch.cat([s1, cmd], dim=1)[:, None]], dim=1)
        self.pose, self.seg, self.s, self.action_prev = pose, proj.segment, proj.s, pol
        self.seg_t = proj.t
        self.mu = tb.friction_from_projection(self.track_idx, proj)
        self.track_feats = torch.stack([proj.d, proj.heading_error, proj.w_left, proj.w_right], dim=1)
        reason = torch.zeros_like(self.reason)
        reason = torch.where(time_out, TIME_OUT, reason)
        reason = torch.where(stalled, STALLED, reason)
        reason = torch.where(backwards, BACKWARDS, reason)
        reason = torch.where(off, OFF_TRACK, reason)
        reason = torch.where(invalid, MODEL_INVALID, reason)
        self.reason = reason
        dones = terminated | time_out
        n_invalid = invalid.sum()
        self.invalid_count += n_invalid
        self.episode_count += dones.sum()
        log = {
            "Env/model_invalid": n_invalid.float(),
            "Env/off_track_rate": off.float().mean(),
            "Env/speed": s1[:, 0].mean(),
            "Env/progress_per_step": ds.mean(),
        }
        extras: dict[str, Any] = {"time_outs": time_out, "log": log, "reason": reason, "progress": self.progress.clone()}
        if self.auto_reset:
            ids = dones.nonzero(as_tuple=False).squeeze(1)
            if ids.numel():
                log["Env/episode_progress_m"] = self.progress[ids].mean()
                self._reset_idx(ids)
        self.obs = self._compute_obs()
        return self.get_observations(), reward, dones, extras

    # ------------------------------------------------------------------ internals
    def _reset_idx(
        self,
        ids: Tensor,
        track: Tensor | None = None,
        s0: Tensor | None = None,
        d0: Tensor | None = None,
        heading: Tensor | None = None,
        speed: Tensor | None = None,
    ) -> None:
        p, tb, dev, g = self.params, self.tracks, self.device, self.generator
        n = ids.numel()
        rand = lambda: torch.rand(n, device=dev, generator=g)  # noqa: E731
        if track is None:
            track = torch.randint(0, len(tb), (n,), device=dev, generator=g)
        length = tb.length[track]
        s0 = rand() * length if s0 is None else s0
        wl, wr = tb.width_at(track, s0)
        if d0 is None:
            side = 2.0 * rand() - 1.0
            d0 = p.init_lateral * torch.where(side >= 0, side * wl, side * wr)
        heading = (2.0 * rand() - 1.0) * p.init_heading if heading is None else heading
        speed = p.init_speed_min + (p.init_speed_max - p.init_speed_min) * rand() if speed is None else speed
        x, y, h = tb.pose_at(track, s0, d0)
        yaw = h + heading
        zero = torch.zeros_like(speed)
        state = torch.stack([speed, zero, zero, zero], dim=1)
        thr = self.hold_throttle(speed)
        cmd = torch.stack([zero, thr, zero], dim=1)
        self.hs[ids] = state[:, None].expand(-1, self.model.history, -1)
        self.ha[ids] = cmd[:, None].expand(-1, self.model.history, -1)
        self.hist[ids] = torch.cat([state, cmd], dim=1)[:, None].expand(-1, self.layout.history + 1, -1)
        pose = torch.stack([x, y, yaw], dim=1)
        self.pose[ids] = pose
        hint = torch.minimum((s0 * tb.count[track] / length).long(), tb.count[track] - 1)
        proj = self._project(pose[:, :2], track, hint, yaw)
        self.track_idx[ids] = track
        self.seg[ids] = proj.segment
        self.seg_t[ids] = proj.t
        self.s[ids] = proj.s
        self.progress[ids] = 0.0
        self.stall_ref[ids] = 0.0
        self.stall_steps[ids] = 0
        self.episode_length_buf[ids] = 0
        self.action_prev[ids] = torch.stack([zero, thr], dim=1)
        self.mu[ids] = tb.friction_from_projection(track, proj)
        self.track_feats[ids] = torch.stack([proj.d, proj.heading_error, proj.w_left, proj.w_right], dim=1)

    def _project(self, xy: Tensor, track: Tensor, hint: Tensor, yaw: Tensor) -> _Projection:
        """Hinted projection onto each car's track: the 2 w + 1 segments around `hint`.

        Same maths as TrackBatch.project(..., hint, window) (checked in the tests), written with
        index_select gathers, which are several times faster than advanced indexing on CPU.
        """
        tb, n = self.tracks, xy.shape[0]
        cnt = tb.count.index_select(0, track)[:, None]
        base = (track * tb.mmax)[:, None]
        local = hint[:, None] + self._window[None, :]
        local = torch.where(local < 0, local + cnt, local)
        local = torch.where(local >= cnt, local - cnt, local)
        cand = (local + base).reshape(-1)
        a = tb.xy.index_select(0, cand).view(n, -1, 2)
        v = tb.seg.index_select(0, cand).view(n, -1, 2)
        inv = self._inv_len2.index_select(0, cand).view(n, -1)
        r = xy[:, None, :] - a
        t = ((r * v).sum(dim=-1) * inv).clamp(0.0, 1.0)
        e = r - t[..., None] * v
        k = (e * e).sum(dim=-1).argmin(dim=1, keepdim=True)
        seg = local.gather(1, k)[:, 0]
        t = t.gather(1, k)[:, 0]
        flat = base[:, 0] + seg
        nxt_local = seg + 1
        nxt = base[:, 0] + torch.where(nxt_local >= cnt[:, 0], torch.zeros_like(nxt_local), nxt_local)
        v = tb.seg.index_select(0, flat)
        rel = xy - (tb.xy.index_select(0, flat) + t[:, None] * v)
        cross = v[:, 0] * rel[:, 1] - v[:, 1] * rel[:, 0]
        d = torch.where(cross >= 0, 1.0, -1.0) * rel.norm(dim=-1)
        s = torch.remainder(tb.s_pts.index_select(0, flat) + t * tb.seg_len.index_select(0, flat), tb.length.index_select(0, track))
        h0 = tb.heading.index_select(0, flat)
        heading = _wrap(h0 + t * _wrap(tb.heading.index_select(0, nxt) - h0))
        wl = torch.lerp(tb.w_left.index_select(0, flat), tb.w_left.index_select(0, nxt), t)
        wr = torch.lerp(tb.w_right.index_select(0, flat), tb.w_right.index_select(0, nxt), t)
        return _Projection(s, d, heading, _wrap(yaw - heading), wl, wr, seg, t)

    def _preview(self) -> tuple[Tensor, Tensor, Tensor]:
        """Centerline points [N, P, 2] and widths [N, P] at the preview distances ahead.

        The tracks are resampled to uniform spacing, so a preview point is a fixed number of
        points ahead of the car's projection segment (precomputed per track), shifted by the
        car's fraction along its segment: a few gathers instead of P arc-length searches.
        """
        tb, n = self.tracks, self.num_envs
        cnt = tb.count.index_select(0, self.track_idx)[:, None]
        idx = self.seg[:, None] + self._preview_offs.index_select(0, self.track_idx)
        idx = torch.where(idx >= cnt, idx - cnt, idx)
        flat = (idx + (self.track_idx * tb.mmax)[:, None]).reshape(-1)
        t = self.seg_t[:, None].expand(-1, idx.shape[1]).reshape(-1, 1)
        xy = tb.xy.index_select(0, flat) + t * tb.seg.index_select(0, flat)
        wl = tb.w_left.index_select(0, flat).view(n, -1)
        wr = tb.w_right.index_select(0, flat).view(n, -1)
        return xy.view(n, -1, 2), wl, wr

    def _compute_obs(self) -> Tensor:
        tb = self.tracks
        ahead_xy, ahead_wl, ahead_wr = self._preview()
        body = to_body(ahead_xy, self.pose)
        surface = None
        if self.layout.surface_label:
            q = self._surface_d.numel()
            sq = (self.s[:, None] + self._surface_d).reshape(-1)
            dq = self.track_feats[:, 0:1].expand(-1, q).reshape(-1)
            mu_ahead = tb.friction_from_projection(self.track_idx.repeat_interleave(q), _SD(sq, dq)).view(-1, q)  # type: ignore[arg-type]
            surface = torch.cat([self.mu[:, None], mu_ahead], dim=1)
        return assemble(self.hist, self.track_feats, body, ahead_wl, ahead_wr, surface)

    # ------------------------------------------------------------------ reporting
    @property
    def invalid_model_steps(self) -> int:
        """Model outputs rejected (non-finite or absurd) since construction."""
        return int(self.invalid_count)

    def track_length(self) -> Tensor:
        """Lap length [N] of each car's current track (as resampled inside the env)."""
        return self.tracks.length[self.track_idx]


class ObservationBuilder(DistilledEnv):
    """The policy observation for cars driven by something else (the source simulator).

        builder = ObservationBuilder([track], env_params, num_cars=1)
        obs = builder.start(track_idx, pose, state, command)   # at the start of an episode
        obs = builder.observe(pose, state, command)            # after every control period

    pose [M, 3] = world (x, y, yaw); state [M, 4] = (vx, vy, yaw_rate, steer) body frame; command
    [M, 3] = the command applied over the last period (the one that led into `state`; at the start,
    the command that holds the state, e.g. (0, 0, 0) at rest). `start` fills the observation
    history with (state, command), as the distilled env does at a reset. The track-side results are
    kept: `progress` (net metres along the centerline since `start`), `track_feats` (d, heading
    error, w_left, w_right), `mu` (friction under the car), `s`; a lap is done when
    progress >= track_length(). The observation is computed by the same code as in DistilledEnv,
    so `env_params` must be the policy's (policy.json "params"/"env").
    """

    def __init__(self, tracks: Sequence[Track], params: EnvParams | None = None, num_cars: int = 1, device: str | torch.device | None = "cpu") -> None:
        self.params = params or EnvParams()
        self.device = resolve_device(device)
        self.num_envs = int(num_cars)
        self.layout = obs_layout(self.params)
        self.num_obs = self.layout.dim
        n, dev = self.num_envs, self.device
        with torch.inference_mode():
            self.hist = torch.zeros(n, self.layout.history + 1, 7, device=dev)
            self.pose = torch.zeros(n, 3, device=dev)
            self.track_idx = torch.zeros(n, dtype=torch.long, device=dev)
            self.seg = torch.zeros(n, dtype=torch.long, device=dev)
            self.seg_t, self.s, self.progress = (torch.zeros(n, device=dev) for _ in range(3))
            self.mu = torch.ones(n, device=dev)
            self.track_feats = torch.zeros(n, 4, device=dev)
            self._preview_d = torch.tensor(self.layout.preview_distances, device=dev)
            self._surface_d = torch.tensor(self.layout.surface_ahead, device=dev)
            self._load_tracks(tracks)

    def _update(self, pose: Tensor, proj: _Projection) -> None:
        self.pose, self.seg, self.seg_t, self.s = pose, proj.segment, proj.t, proj.s
        self.mu = self.tracks.friction_from_projection(self.track_idx, proj)
        self.track_feats = torch.stack([proj.d, proj.heading_error, proj.w_left, proj.w_right], dim=1)

    @torch.inference_mode()
    def start(self, track_idx: Tensor | Sequence[int], pose: Tensor, state: Tensor, command: Tensor) -> Tensor:
        """Begin an episode (the car may be anywhere near its track); returns obs [M, D]."""
        dev = self.device
        self.track_idx = torch.as_tensor(track_idx, dtype=torch.long, device=dev).reshape(-1).expand(self.num_envs).clone()
        pose, state, command = (torch.as_tensor(x, dtype=torch.float32, device=dev).reshape(self.num_envs, -1) for x in (pose, state, command))
        full = self.tracks.project(pose[:, :2], self.track_idx, yaw=pose[:, 2])  # exact, no hint
        proj = self._project(pose[:, :2], self.track_idx, full.segment, pose[:, 2])
        self._update(pose, proj)
        self.progress = torch.zeros(self.num_envs, device=dev)
        self.hist = torch.cat([state, command], dim=1)[:, None].expand(-1, self.layout.history + 1, -1).clone()
        return self._compute_obs()

    @torch.inference_mode()
    def observe(self, pose: Tensor, state: Tensor, command: Tensor) -> Tensor:
        """One control period later: returns obs [M, D] and advances progress."""
        dev = self.device
        pose, state, command = (torch.as_tensor(x, dtype=torch.float32, device=dev).reshape(self.num_envs, -1) for x in (pose, state, command))
        proj = self._project(pose[:, :2], self.track_idx, self.seg, pose[:, 2])
        length = self.tracks.length[self.track_idx]
        self.progress = self.progress + torch.remainder(proj.s - self.s + 0.5 * length, length) - 0.5 * length
        self._update(pose, proj)
        self.hist = torch.cat([self.hist[:, 1:], torch.cat([state, command], dim=1)[:, None]], dim=1)
        return self._compute_obs()

    def on_track(self, margin: float | None = None) -> Tensor:
        """[M] whether each car's centre is within the road (plus `margin`, default the env's)."""
        m = self.params.off_track_margin if margin is None else margin
        d, wl, wr = self.track_feats[:, 0], self.track_feats[:, 2], self.track_feats[:, 3]
        return torch.where(d >= 0, d <= wl + m, -d <= wr + m)
