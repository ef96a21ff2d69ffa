"""The distilled environment: N cars driven by a learned dynamics model on procedural tracks.

`DistilledEnv` implements rsl_rl's `VecEnv`. Every quantity is a tensor [N, ...] on one device
(CPU or CUDA); there is no Python loop over cars. Per car it keeps the model's history window
(states [N, K, 4] and the commands that led into them [N, K, 3]), the world pose (integrated with
`s3.dynamics.base.integrate_pose`), its track index, the last projection segment (the hint for the
next projection), the arc length and the net progress of the episode.

Actions. The policy emits a = (steer, longitudinal) in [-1, 1]^2 (rsl_rl samples an unbounded
Gaussian: the env clips), mapped to the command by s3.rl.actions (steering_cmd = steer, scaled
down above `steer_full_speed` when that is set; throttle = max(u, 0), brake = max(-u, 0)).
`step` also accepts a 3-D command [N, 3] directly (controllers, exported policies); it is
clipped to [-1, 1] x [0, 1] x [0, 1].

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

Speed (CPU first; every shortcut is checked against the plain formulation in
tests/test_env_speed_equivalence.py). A step is a fixed sequence of batched tensor ops: no Python
loop over cars, no host sync besides the count of finished cars. The history windows slide over
preallocated buffers (one row written per step; `hs`, `ha`, `hist` are views into them, which
later steps overwrite: clone what you keep). The projection reads each car's 2 w + 1 candidate
segments as one row of a per-track sliding-window table, the preview reads tables continued
around the lap, and per-point tables hold what the far end of a segment adds: no index
arithmetic for wrap-around. Gathers are index_select (several times faster than advanced
indexing on CPU) and the arc-length wraps avoid fmod where the range allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict
from torch import Tensor

from s3.dynamics.base import DynamicsModel, integrate_pose
from s3.rl.actions import split_action
from s3.rl.observations import ObsLayout, assemble_paired, obs_layout, to_body
from s3.rl.params import EnvParams
from s3.tracks.torch_track import TrackBatch, gather_rows, remainder_near
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


def _wrap_near(a: Tensor) -> Tensor:
    """_wrap(a) bit for bit for a in (-3 pi, 3 pi], without its fmod (see remainder_near)."""
    return math.pi - remainder_near(math.pi - a, 2.0 * math.pi)


class _Window:
    """A sliding window [N, K, F] over a buffer [N, K + spare, F] (spare >= K).

    `push` writes one row and advances the window; every `spare` pushes the window is copied back
    to the front of the buffer. `view` is the current window (a view into the buffer).
    """

    def __init__(self, n: int, k: int, f: int, device: torch.device, spare: int = 64) -> None:
        self.k, self.pos = k, 0
        self.buf = torch.zeros(n, k + max(spare, k), f, device=device)

    @property
    def view(self) -> Tensor:
        return self.buf[:, self.pos : self.pos + self.k]

    def push(self, *parts: Tensor) -> None:
        """Append one row per car ([N, F], or pieces [N, F_i] that make it up), dropping the oldest."""
        if self.pos + self.k == self.buf.shape[1]:  # no room left: restart at the front
            self.buf[:, : self.k - 1] = self.buf[:, self.pos + 1 :]
            self.pos = -1
        row, col = self.buf[:, self.pos + self.k], 0
        for x in parts:
            row[:, col : col + x.shape[1]] = x
            col += x.shape[1]
        self.pos += 1

    def fill(self, ids: Tensor, row: Tensor) -> None:
        """Cars `ids` get `row` [M, F] at every position of their window."""
        self.view[ids] = row[:, None].expand(-1, self.k, -1)


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
        self.model.inference_compile = params.compile_model
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
        self._hold_dv = float(self._hold_v[1] - self._hold_v[0])
        with torch.inference_mode():
            self._allocate()
            self.set_tracks(tracks)

    # ------------------------------------------------------------------ setup
    def _allocate(self) -> None:
        n, k, h, dev = self.num_envs, self.model.history, self.layout.history, self.device
        z = lambda *shape: torch.zeros(*shape, device=dev)
        self._hs, self._ha = _Window(n, k, 4, dev), _Window(n, k, 3, dev)
        self._hist = _Window(n, h + 1, 7, dev)
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

    @property
    def hs(self) -> Tensor:
        """States [N, K, 4] the model sees, oldest first (a view, overwritten by later steps)."""
        return self._hs.view

    @property
    def ha(self) -> Tensor:
        """Commands [N, K, 3] that led into those states (a view, overwritten by later steps)."""
        return self._ha.view

    @property
    def hist(self) -> Tensor:
        """(state, command) [N, H + 1, 7] of the observation, oldest first (a view, as `hs`)."""
        return self._hist.view

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
        pos = (v / self._hold_dv).clamp(0.0, len(grid) - 1.0)
        i = pos.floor().long().clamp(max=len(grid) - 2)
        f = pos - i
        return table.index_select(0, i) * (1 - f) + table.index_select(0, i + 1) * f

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
        self._preview_offs = offs = torch.minimum(offs, tb.count[:, None] - 1)  # [B, P] points ahead
        # the preview reads tables continued around the lap: row base + segment, no wrap
        extra = int(offs.max()) + 1
        (self._ahead_xy, stride), (self._ahead_seg, _), (self._ahead_w, _) = (tb.extended(v, extra) for v in (tb.xy, tb.seg, tb.widths))
        self._ahead_base = offs + stride * torch.arange(len(tb), device=self.device)[:, None]  # [B, P]
        inv_len2 = 1.0 / tb.seg_len.square().clamp(min=1e-12)
        w = self.params.projection_window
        # the 2 w + 1 candidate segments around a hint, one table row per (track, hint)
        ax, ay, vx, vy, _ = tb._seg_parts
        local = torch.arange(tb.mmax, device=self.device).repeat(len(tb))  # point index within its track
        self._win: list[Tensor] = []
        for values in (ax, ay, vx, vy, inv_len2, local):
            table, self._win_stride = tb.windows(values, w, 2 * w + 1)
            self._win.append(table)
        # what the projection reads about the chosen segment, in pairs (one gather each)
        self._seg_s = torch.stack([tb.s_pts, tb.seg_len], dim=1)  # arc length at its start, its length
        self._seg_h = torch.stack([tb.heading, tb.dheading], dim=1)  # heading, change to the next point
        self._seg_wl = torch.stack([tb.w_left, tb.w_left_next], dim=1)  # width at both ends
        self._seg_wr = torch.stack([tb.w_right, tb.w_right_next], dim=1)
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
        full = lambda x: torch.as_tensor(x, dtype=torch.float32, device=dev).expand(n).clone()
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
        hs = self.hs
        s0 = hs[:, -1]
        pol, cmd = split_action(actions.to(self.device, torch.float32), s0[:, 0], p.steer_full_speed)
        s1 = self.model.step(hs, self.ha, cmd, self.mu if self.model.use_mu else None)
        invalid = ~torch.isfinite(s1).all(dim=1)
        invalid |= torch.hypot(s1[:, 0], s1[:, 1]) > p.max_speed
        invalid |= s1[:, 2].abs() > p.max_yaw_rate
        s1 = torch.where(invalid[:, None], s0, s1)  # never propagate a broken prediction
        pose = integrate_pose(self.pose, s0, s1, self.dt)
        tb = self.tracks
        proj = self._project(pose[:, :2], self.track_idx, self.seg, pose[:, 2])
        length = tb.length.index_select(0, self.track_idx)
        ds = remainder_near(proj.s - self.s + 0.5 * length, length) - 0.5 * length  # both s in [0, length]
        ds = ds.masked_fill(invalid, 0.0)
        self.progress += ds
        margin = p.off_track_margin
        off = torch.where(proj.d >= 0, proj.d > proj.w_left + margin, -proj.d > proj.w_right + margin)
        backwards = (proj.heading_error.abs() > p.backwards_heading) | (self.progress < -p.backwards_distance)
        moved = self.progress - self.stall_ref >= p.stall_distance
        self.stall_ref = torch.where(moved, self.progress, self.stall_ref)
        self.stall_steps = (self.stall_steps + 1).masked_fill_(moved, 0)
        failed = off | backwards | invalid
        stalled = (self.stall_steps >= self._stall_limit) & ~failed
        self.episode_length_buf += 1
        terminated = failed | stalled
        time_out = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        reward = rp.progress * ds - rp.action_rate * (pol - self.action_prev).square().sum(dim=1)
        reward = reward - rp.off_track * off.float() - rp.backwards * (backwards & ~off).float() - rp.stall * stalled.float()
        reward = reward.masked_fill(invalid, 0.0)
        # advance the buffers
        self._hs.push(s1)
        self._ha.push(cmd)
        self._hist.push(s1, cmd)
        self.pose, self.seg, self.s, self.action_prev = pose, proj.segment, proj.s, pol
        self.seg_t = proj.t
        self.mu = tb.friction_sd(self.track_idx, proj.s, proj.d, on_lap=True)
        self.track_feats = torch.stack([proj.d, proj.heading_error, proj.w_left, proj.w_right], dim=1)
        reason = time_out.long() * TIME_OUT  # later rules win
        reason = reason.masked_fill_(stalled, STALLED).masked_fill_(backwards, BACKWARDS)
        reason = reason.masked_fill_(off, OFF_TRACK).masked_fill_(invalid, MODEL_INVALID)
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
        rand = lambda: torch.rand(n, device=dev, generator=g)
        if track is None:
            track = torch.randint(0, len(tb), (n,), device=dev, generator=g)
        length = tb.length.index_select(0, track)
        s0 = rand() * length if s0 is None else s0
        at = tb._locate(track, s0)  # (point, fraction) of s0, for the widths and the pose
        if d0 is None:
            wl, wr = tb.width_at_located(*at)
            side = 2.0 * rand() - 1.0
            d0 = p.init_lateral * torch.where(side >= 0, side * wl, side * wr)
        heading = (2.0 * rand() - 1.0) * p.init_heading if heading is None else heading
        speed = p.init_speed_min + (p.init_speed_max - p.init_speed_min) * rand() if speed is None else speed
        x, y, h = tb.pose_at_located(*at, d0)
        yaw = h + heading
        zero = torch.zeros_like(speed)
        state = torch.stack([speed, zero, zero, zero], dim=1)
        thr = self.hold_throttle(speed)
        cmd = torch.stack([zero, thr, zero], dim=1)
        self._hs.fill(ids, state)
        self._ha.fill(ids, cmd)
        self._hist.fill(ids, torch.cat([state, cmd], dim=1))
        pose = torch.stack([x, y, yaw], dim=1)
        self.pose[ids] = pose
        count = tb.count.index_select(0, track)
        hint = torch.minimum((s0 * count / length).long(), count - 1)
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
        self.mu[ids] = tb.friction_sd(track, proj.s, proj.d, on_lap=True)
        self.track_feats[ids] = torch.stack([proj.d, proj.heading_error, proj.w_left, proj.w_right], dim=1)

    def _project(self, xy: Tensor, track: Tensor, hint: Tensor, yaw: Tensor) -> _Projection:
        """Hinted projection onto each car's track: the 2 w + 1 segments around `hint`.

        Same maths as TrackBatch.project(..., hint, window) (checked in the tests): each car's
        candidates are one row of the sliding-window tables (`_load_tracks`), and everything
        about the chosen segment is a 1-D gather (index_select: several times faster than
        advanced indexing on CPU).
        """
        tb = self.tracks
        rows = track * self._win_stride + hint
        ax, ay, vx, vy, inv, local = (table.index_select(0, rows) for table in self._win)  # [N, 2 w + 1] each
        rx, ry = xy[:, :1] - ax, xy[:, 1:] - ay
        t = ((rx * vx + ry * vy) * inv).clamp(0.0, 1.0)
        ex, ey = rx - t * vx, ry - t * vy
        k = (ex * ex + ey * ey).argmin(dim=1, keepdim=True)  # [N, 1] nearest candidate
        t, seg = t.gather(1, k)[:, 0], local.gather(1, k)[:, 0]
        flat = track * tb.mmax + seg
        v = gather_rows(tb.seg, flat)  # [N, 2]
        rel = xy - (gather_rows(tb.xy, flat) + t[:, None] * v)
        cross = v[:, 0] * rel[:, 1] - v[:, 1] * rel[:, 0]
        d = torch.where(cross >= 0, 1.0, -1.0) * rel.norm(dim=-1)
        s0, h0, wl, wr = (gather_rows(table, flat) for table in (self._seg_s, self._seg_h, self._seg_wl, self._seg_wr))
        s = remainder_near(s0[:, 0] + t * s0[:, 1], tb.length.index_select(0, track))  # in [0, 2 length)
        heading = _wrap_near(h0[:, 0] + t * h0[:, 1])  # |.| <= 2 pi
        wl, wr = torch.lerp(wl[:, 0], wl[:, 1], t), torch.lerp(wr[:, 0], wr[:, 1], t)
        return _Projection(s, d, heading, _wrap(yaw - heading), wl, wr, seg, t)

    def _preview(self) -> tuple[Tensor, Tensor]:
        """Centerline points [N, P, 2] and (w_left, w_right) [N, P, 2] at the preview distances ahead.

        The tracks are resampled to uniform spacing, so a preview point is a fixed number of
        points ahead of the car's projection segment (precomputed per track), shifted by the
        car's fraction along its segment: three gathers instead of P arc-length searches.
        """
        n = self.num_envs
        flat = (self.seg[:, None] + self._ahead_base.index_select(0, self.track_idx)).view(-1)  # [N * P]
        xy = gather_rows(self._ahead_xy, flat).view(n, -1, 2)
        xy = xy + self.seg_t[:, None, None] * gather_rows(self._ahead_seg, flat).view(n, -1, 2)
        return xy, gather_rows(self._ahead_w, flat).view(n, -1, 2)

    def _compute_obs(self) -> Tensor:
        tb = self.tracks
        ahead_xy, ahead_w = self._preview()
        body = to_body(ahead_xy, self.pose)
        surface = None
        if self.layout.surface_label:
            sq = self.s[:, None] + self._surface_d  # [N, Q] at the car's lateral offset
            mu_ahead = tb.friction_sd(self.track_idx, sq, self.track_feats[:, 0:1])
            surface = torch.cat([self.mu[:, None], mu_ahead], dim=1)
        return assemble_paired(self.hist, self.track_feats, body, ahead_w, surface)

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
            self._hist = _Window(n, self.layout.history + 1, 7, dev)
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
        self.mu = self.tracks.friction_sd(self.track_idx, proj.s, proj.d, on_lap=True)
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
        self._hist.fill(torch.arange(self.num_envs, device=dev), torch.cat([state, command], dim=1))
        return self._compute_obs()

    @torch.inference_mode()
    def observe(self, pose: Tensor, state: Tensor, command: Tensor) -> Tensor:
        """One control period later: returns obs [M, D] and advances progress."""
        dev = self.device
        pose, state, command = (torch.as_tensor(x, dtype=torch.float32, device=dev).reshape(self.num_envs, -1) for x in (pose, state, command))
        proj = self._project(pose[:, :2], self.track_idx, self.seg, pose[:, 2])
        length = self.tracks.length.index_select(0, self.track_idx)
        self.progress = self.progress + torch.remainder(proj.s - self.s + 0.5 * length, length) - 0.5 * length
        self._update(pose, proj)
        self._hist.push(state, command)
        return self._compute_obs()

    def on_track(self, margin: float | None = None) -> Tensor:
        """[M] whether each car's centre is within the road (plus `margin`, default the env's)."""
        m = self.params.off_track_margin if margin is None else margin
        d, wl, wr = self.track_feats[:, 0], self.track_feats[:, 2], self.track_feats[:, 3]
        return torch.where(d >= 0, d <= wl + m, -d <= wr + m)
