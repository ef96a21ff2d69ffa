"""The track frame: where N cars are on their tracks, batched.

    frame = TrackFrame(tracks, num_cars, track_ds=1.0, window=8, preview=[5, 10, ...], surface_ahead=[...])
    frame.place(ids, track, pose, hint=None)   # cars `ids` start on `track` at `pose` [M, 3]; progress 0
    ds = frame.advance(pose, frozen=None)      # one control period later: [N] arc-length change
    xy, widths = frame.preview()               # centerline points [N, P, 2] and widths [N, P, 2] ahead
    mu = frame.surface()                       # friction under the car, then at s + surface_ahead [N, 1 + Q]

Per car it keeps the world pose [N, 3] (x, y, yaw), the track index, the last projection segment
and the fraction along it (the hint for the next projection), the arc length s [m, in [0, length]],
the net progress since `place` [m] (signed; wraps at the start line), the peak friction under the
car `mu`, and `feats` [N, 4] = (d [m, left +], heading error [rad, wrapped], w_left, w_right [m]).

Tracks are resampled to `track_ds` (s3.tracks.torch_track.TrackBatch). The projection searches the
2 window + 1 segments around the hint as one row of a per-track sliding-window table; the preview
reads tables continued around the lap; per-point tables hold what the far end of a segment adds.
Gathers are index_select (several times faster than advanced indexing on CPU), and arc-length
wraps avoid fmod where the range allows. Every method runs under torch.inference_mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from s3.tracks.torch_track import TrackBatch, gather_rows, remainder_near
from s3.tracks.track import Track


class Projection(NamedTuple):
    """A hinted projection [N] each: arc length, lateral offset, track heading, heading error,
    half widths, segment and the fraction t along it."""

    s: Tensor
    d: Tensor
    heading: Tensor
    heading_error: Tensor
    w_left: Tensor
    w_right: Tensor
    segment: Tensor
    t: Tensor


def wrap(a: Tensor) -> Tensor:
    """Angles wrapped to (-pi, pi]."""
    return math.pi - torch.remainder(math.pi - a, 2.0 * math.pi)


def _wrap_near(a: Tensor) -> Tensor:
    """wrap(a) bit for bit for a in (-3 pi, 3 pi], without its fmod (see remainder_near)."""
    return math.pi - remainder_near(math.pi - a, 2.0 * math.pi)


class TrackFrame:
    """N cars on a batch of tracks (see the module docstring)."""

    def __init__(
        self,
        tracks: Sequence[Track] | TrackBatch,
        num_cars: int,
        track_ds: float = 1.0,
        window: int = 8,
        preview: Sequence[float] = (),
        surface_ahead: Sequence[float] = (),
        device: torch.device | str = "cpu",
    ) -> None:
        self.n, self.track_ds, self.window = int(num_cars), float(track_ds), int(window)
        self.device = dev = torch.device(device)
        with torch.inference_mode():
            z = lambda *shape: torch.zeros(*shape, device=dev)
            self.pose = z(self.n, 3)
            self.track_idx = torch.zeros(self.n, dtype=torch.long, device=dev)
            self.seg = torch.zeros(self.n, dtype=torch.long, device=dev)
            self.seg_t, self.s, self.progress = z(self.n), z(self.n), z(self.n)
            self.mu = torch.ones(self.n, device=dev)
            self.feats = z(self.n, 4)
            self._preview_d = torch.tensor(list(preview), device=dev)
            self._surface_d = torch.tensor(list(surface_ahead), device=dev)
            self.load(tracks)

    # ------------------------------------------------------------------ tracks
    @torch.inference_mode()
    def load(self, tracks: Sequence[Track] | TrackBatch) -> TrackBatch:
        """Install the tracks and the tables of the fast projection and preview (cars keep their state)."""
        dev = self.device
        self.tracks = tb = (
            tracks if isinstance(tracks, TrackBatch) else TrackBatch(list(tracks), ds=self.track_ds, device=dev)
        )
        spacing = tb.length / tb.count.to(tb.length.dtype)  # [B] point spacing after resampling
        offs = torch.round(self._preview_d[None, :] / spacing[:, None]).long()
        self._preview_offs = offs = torch.minimum(offs, tb.count[:, None] - 1)  # [B, P] points ahead
        # the preview reads tables continued around the lap: row base + segment, no wrap
        extra = int(offs.max()) + 1 if offs.numel() else 1
        (self._ahead_xy, stride), (self._ahead_seg, _), (self._ahead_w, _) = (
            tb.extended(v, extra) for v in (tb.xy, tb.seg, tb.widths)
        )
        self._ahead_base = offs + stride * torch.arange(len(tb), device=dev)[:, None]  # [B, P]
        inv_len2 = 1.0 / tb.seg_len.square().clamp(min=1e-12)
        w = self.window
        # the 2 w + 1 candidate segments around a hint, one table row per (track, hint)
        ax, ay, vx, vy, _ = tb._seg_parts
        local = torch.arange(tb.mmax, device=dev).repeat(len(tb))  # point index within its track
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

    def length(self) -> Tensor:
        """Lap length [N] of each car's track (as resampled)."""
        return self.tracks.length.index_select(0, self.track_idx)

    # ------------------------------------------------------------------ cars
    @torch.inference_mode()
    def place(self, ids: Tensor, track: Tensor, pose: Tensor, hint: Tensor | None = None) -> Projection:
        """Start cars `ids` [M] on `track` [M] at `pose` [M, 3]; hint [M] = a segment near the car
        (None: an exhaustive projection finds it). Progress restarts at 0."""
        if hint is None:
            hint = self.tracks.project(pose[:, :2], track, yaw=pose[:, 2]).segment
        proj = self.project(pose[:, :2], track, hint, pose[:, 2])
        self.track_idx[ids] = track
        self.pose[ids] = pose
        self.seg[ids], self.seg_t[ids], self.s[ids] = proj.segment, proj.t, proj.s
        self.progress[ids] = 0.0
        self.mu[ids] = self.tracks.friction_sd(track, proj.s, proj.d, on_lap=True)
        self.feats[ids] = torch.stack([proj.d, proj.heading_error, proj.w_left, proj.w_right], dim=1)
        return proj

    @torch.inference_mode()
    def advance(self, pose: Tensor, frozen: Tensor | None = None) -> Tensor:
        """Every car is now at `pose` [N, 3]; returns its arc-length change ds [N] (0 where `frozen`)
        and adds it to `progress`."""
        proj = self.project(pose[:, :2], self.track_idx, self.seg, pose[:, 2])
        length = self.length()
        ds = remainder_near(proj.s - self.s + 0.5 * length, length) - 0.5 * length  # both s in [0, length]
        if frozen is not None:
            ds = ds.masked_fill(frozen, 0.0)
        self.progress = self.progress + ds
        self.pose, self.seg, self.seg_t, self.s = pose, proj.segment, proj.t, proj.s
        self.mu = self.tracks.friction_sd(self.track_idx, proj.s, proj.d, on_lap=True)
        self.feats = torch.stack([proj.d, proj.heading_error, proj.w_left, proj.w_right], dim=1)
        return ds

    def off_track(self, margin: float) -> Tensor:
        """[N] whether each car's centre is more than `margin` metres beyond its road edge."""
        d, _, wl, wr = self.feats.unbind(dim=1)
        return torch.where(d >= 0, d > wl + margin, -d > wr + margin)

    # ------------------------------------------------------------------ maths
    def project(self, xy: Tensor, track: Tensor, hint: Tensor, yaw: Tensor) -> Projection:
        """Hinted projection of xy [M, 2] onto `track` [M]: the 2 w + 1 segments around `hint` [M].

        TrackBatch.project(..., hint, window)'s maths (checked in the tests), with each car's
        candidates one row of the sliding-window tables and the chosen segment read by 1-D gathers.
        """
        tb = self.tracks
        rows = track * self._win_stride + hint
        ax, ay, vx, vy, inv, local = (table.index_select(0, rows) for table in self._win)  # [M, 2 w + 1] each
        rx, ry = xy[:, :1] - ax, xy[:, 1:] - ay
        t = ((rx * vx + ry * vy) * inv).clamp(0.0, 1.0)
        ex, ey = rx - t * vx, ry - t * vy
        k = (ex * ex + ey * ey).argmin(dim=1, keepdim=True)  # [M, 1] nearest candidate
        t, seg = t.gather(1, k)[:, 0], local.gather(1, k)[:, 0]
        flat = track * tb.mmax + seg
        v = gather_rows(tb.seg, flat)  # [M, 2]
        rel = xy - (gather_rows(tb.xy, flat) + t[:, None] * v)
        cross = v[:, 0] * rel[:, 1] - v[:, 1] * rel[:, 0]
        d = torch.where(cross >= 0, 1.0, -1.0) * rel.norm(dim=-1)
        s0, h0, wl, wr = (gather_rows(table, flat) for table in (self._seg_s, self._seg_h, self._seg_wl, self._seg_wr))
        s = remainder_near(s0[:, 0] + t * s0[:, 1], tb.length.index_select(0, track))  # in [0, 2 length)
        heading = _wrap_near(h0[:, 0] + t * h0[:, 1])  # |.| <= 2 pi
        wl, wr = torch.lerp(wl[:, 0], wl[:, 1], t), torch.lerp(wr[:, 0], wr[:, 1], t)
        return Projection(s, d, heading, wrap(yaw - heading), wl, wr, seg, t)

    def preview(self) -> tuple[Tensor, Tensor]:
        """Centerline points [N, P, 2] (world) and (w_left, w_right) [N, P, 2] at the preview distances.

        The tracks are resampled to uniform spacing, so a preview point is a fixed number of
        points ahead of the car's projection segment (precomputed per track), shifted by the
        car's fraction along its segment: three gathers instead of P arc-length searches.
        """
        n = self.n
        flat = (self.seg[:, None] + self._ahead_base.index_select(0, self.track_idx)).view(-1)  # [N * P]
        xy = gather_rows(self._ahead_xy, flat).view(n, -1, 2)
        xy = xy + self.seg_t[:, None, None] * gather_rows(self._ahead_seg, flat).view(n, -1, 2)
        return xy, gather_rows(self._ahead_w, flat).view(n, -1, 2)

    def surface(self) -> Tensor:
        """Peak friction under each car, then at s + surface_ahead at its lateral offset: [N, 1 + Q]."""
        sq = self.s[:, None] + self._surface_d  # [N, Q]
        ahead = self.tracks.friction_sd(self.track_idx, sq, self.feats[:, 0:1])
        return torch.cat([self.mu[:, None], ahead], dim=1)
