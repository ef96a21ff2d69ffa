"""Many tracks as padded tensors, so thousands of cars on different tracks are one tensor op.

Each track is resampled to the same spacing and padded to the longest one; every query takes a
track index per point. The formulas mirror `Track` (numpy) exactly: projection onto the
polyline segments, headings and widths interpolated between points, offsets along interpolated
point normals, later friction patches overriding earlier ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from s3.tracks.geometry import patch_span
from s3.tracks.track import Track

_PAIRS_PER_CHUNK = 2**22  # point-segment pairs per chunk in the global (hint-free) projection


class BatchProjection(NamedTuple):
    """Projection of N points onto their own tracks, all tensors [N]."""

    s: torch.Tensor
    d: torch.Tensor
    heading: torch.Tensor
    heading_error: torch.Tensor | None
    w_left: torch.Tensor
    w_right: torch.Tensor
    segment: torch.Tensor  # int64 index of the nearest segment; feed it back as the next hint


class AheadSample(NamedTuple):
    """Centerline preview: points [N, K, 2], widths [N, K]."""

    xy: torch.Tensor
    w_left: torch.Tensor
    w_right: torch.Tensor


def _wrap(a: torch.Tensor) -> torch.Tensor:
    return math.pi - torch.remainder(math.pi - a, 2.0 * math.pi)


def remainder_near(x: torch.Tensor, period: torch.Tensor | float) -> torch.Tensor:
    """torch.remainder(x, period) bit for bit for x in [-period, 2 period), period > 0.

    Two selects instead of fmod, which is ~10x slower than any other elementwise op on CPU:
    fmod(x, p) is x itself for |x| < p and x - p (exact, Sterbenz) for p <= x < 2 p.
    """
    return torch.where(x < 0, x + period, torch.where(x >= period, x - period, x))


class TrackBatch:
    """B tracks resampled to spacing ds and padded to [B, Mmax, ...] tensors on one device."""

    def __init__(
        self,
        tracks: Sequence[Track],
        ds: float = 1.0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if not tracks:
            raise ValueError("TrackBatch needs at least one track")
        self.tracks: tuple[Track, ...] = tuple(t.resampled(ds) for t in tracks)
        self.ds = float(ds)
        self.device = torch.device(device)
        self.dtype = dtype
        b = len(self.tracks)
        counts = np.array([len(t) for t in self.tracks])
        mmax = int(counts.max())
        self.mmax = mmax

        def pad(get, width: int | None = None) -> np.ndarray:
            shape = (b, mmax) if width is None else (b, mmax, width)
            out = np.zeros(shape)
            for k, t in enumerate(self.tracks):
                v = get(t)
                out[k, : len(v)] = v
                out[k, len(v) :] = v[-1]
            return out

        def tens(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(a, dtype=dtype, device=self.device)

        self.count = torch.as_tensor(counts, dtype=torch.int64, device=self.device)
        self.length = tens(np.array([t.length for t in self.tracks]))
        self.base_mu = tens(np.array([t.base_mu for t in self.tracks]))
        # flattened [B * Mmax] so a (track, point) pair is one gather index
        self.xy = tens(pad(lambda t: t.centerline, 2)).reshape(-1, 2)
        self.seg = tens(pad(lambda t: t.segment_vectors, 2)).reshape(-1, 2)
        self.seg_len = tens(pad(lambda t: t.segment_lengths)).reshape(-1)
        self.s_pts = tens(pad(lambda t: t.s)).reshape(-1)
        self.heading = tens(pad(lambda t: t.heading)).reshape(-1)
        self.curvature = tens(pad(lambda t: t.curvature)).reshape(-1)
        self.w_left = tens(pad(lambda t: t.w_left)).reshape(-1)
        self.w_right = tens(pad(lambda t: t.w_right)).reshape(-1)
        self._seg_parts = (
            self.xy[:, 0].contiguous(),
            self.xy[:, 1].contiguous(),
            self.seg[:, 0].contiguous(),
            self.seg[:, 1].contiguous(),
            1.0 / self.seg_len.square(),
        )
        self.widths = torch.stack([self.w_left, self.w_right], dim=1)  # [B * Mmax, 2] for one gather (gather_rows)
        # per point: the following point (flat index) and what its segment's far end adds
        i = torch.arange(mmax, device=self.device)
        nxt = (
            torch.where(i[None, :] + 1 < self.count[:, None], i[None, :] + 1, 0)
            + mmax * torch.arange(b, device=self.device)[:, None]
        )
        self.next_flat = nxt.reshape(-1)  # [B * Mmax]
        self.dheading = _wrap(self.heading[self.next_flat] - self.heading)  # heading change along the segment
        self.w_left_next, self.w_right_next = self.w_left[self.next_flat], self.w_right[self.next_flat]
        self.normal = _normal(self.heading)  # [B * Mmax, 2] unit left normals
        self._init_patches()

    def _init_patches(self) -> None:
        b = len(self.tracks)
        pmax = max(1, max(len(t.patches) for t in self.tracks))
        table = np.zeros((b, pmax, 5))  # start, span, d_min, d_max, mu
        valid = np.zeros((b, pmax), dtype=bool)
        for k, t in enumerate(self.tracks):
            for j, p in enumerate(t.patches):
                table[k, j] = (*patch_span(p, t.length), p.d_min, p.d_max, p.mu)
                valid[k, j] = True
        self.patches = torch.as_tensor(table, dtype=self.dtype, device=self.device)
        self.patch_valid = torch.as_tensor(valid, device=self.device)
        # the same as [5 * pmax, B] (field, slot; track) for one gather per query; unused slots never match
        cols = self.patches.clone()
        cols[..., 1] = torch.where(self.patch_valid, cols[..., 1], torch.full_like(cols[..., 1], -math.inf))
        self._patch_cols = cols.permute(2, 1, 0).reshape(-1, b).contiguous()

    def __len__(self) -> int:
        return len(self.tracks)

    def extended(self, values: torch.Tensor, extra: int) -> tuple[torch.Tensor, int]:
        """Per-point values [B * Mmax, ...] continued around each lap, so i + k needs no wrap.

        -> (table [B * stride, ...], stride = Mmax + extra): row b * stride + i holds point
        i mod count[b] of track b, for 0 <= i < count[b] + extra.
        """
        stride = self.mmax + extra
        local = torch.remainder(torch.arange(stride, device=self.device)[None, :], self.count[:, None])  # [B, stride]
        flat = local + self.mmax * torch.arange(len(self), device=self.device)[:, None]
        return values[flat.reshape(-1)].contiguous(), stride

    def windows(self, values: torch.Tensor, before: int, width: int) -> tuple[torch.Tensor, int]:
        """Sliding windows along each closed track, for one row gather per query.

        values [B * Mmax] per point -> (table, stride): table [R, width] is a view whose row
        b * stride + i holds the values at points i - before, ..., i - before + width - 1 of track
        b, wrapped around the lap (for 0 <= i < count[b]).
        """
        stride = self.mmax + width - 1
        j = torch.arange(stride, device=self.device) - before
        local = torch.remainder(j[None, :], self.count[:, None])  # [B, stride]
        ext = values.view(len(self), self.mmax).gather(1, local)  # [B, stride]
        return ext.reshape(-1).unfold(0, width, 1), stride

    # ------------------------------------------------------------------ along-track lookups
    def _locate(self, track_idx: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat point index and fraction along the segment for arc lengths s (wrapped).

        Points are uniformly spaced after resampling, so s / spacing lands on the right segment
        or a neighbour; two correction passes make it exact.
        """
        shape = s.shape
        ti = track_idx.reshape(-1, *([1] * (s.dim() - 1))).expand(shape).reshape(-1)
        s = s.reshape(-1)
        length = self.length.index_select(0, ti)
        n = self.count.index_select(0, ti)
        s = torch.remainder(s, length)
        i = torch.minimum((s * n / length).long(), n - 1)
        base = ti * self.mmax
        for _ in range(2):
            below = s < self.s_pts.index_select(0, base + i)
            i = torch.where(below & (i > 0), i - 1, i)
            nxt = torch.where(i + 1 < n, self.s_pts.index_select(0, base + torch.minimum(i + 1, n - 1)), length)
            i = torch.where((s >= nxt) & (i + 1 < n), i + 1, i)
        flat = base + i
        t = torch.clamp((s - self.s_pts.index_select(0, flat)) / self.seg_len.index_select(0, flat), 0.0, 1.0)
        return flat.view(shape), t.view(shape)

    def _next(self, flat: torch.Tensor) -> torch.Tensor:
        """Flat index of the following point on the same (closed) track."""
        return _take(self.next_flat, flat)

    def _lerp(self, values: torch.Tensor, flat: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return _take(values, flat) * (1 - t) + _take(values, self._next(flat)) * t

    def _heading_lerp(self, flat: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return _wrap(_take(self.heading, flat) + t * _take(self.dheading, flat))

    def pose_at(
        self, track_idx: torch.Tensor, s: torch.Tensor, d: torch.Tensor | float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """World x, y, heading at (s, d) on each point's track (s, d broadcast to s's shape)."""
        return self.pose_at_located(*self._locate(track_idx, s), d)

    def pose_at_located(
        self, flat: torch.Tensor, t: torch.Tensor, d: torch.Tensor | float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`pose_at` from an earlier `_locate` (flat point index, fraction along its segment)."""
        nxt = self._next(flat)
        tt = t.unsqueeze(-1)
        xy = _take(self.xy, flat) * (1 - tt) + _take(self.xy, nxt) * tt
        normal = _take(self.normal, flat) * (1 - tt) + _take(self.normal, nxt) * tt
        d = torch.as_tensor(d, dtype=self.dtype, device=self.device)
        xy = xy + d.unsqueeze(-1) * normal if d.dim() else xy + d * normal
        return xy[..., 0], xy[..., 1], self._heading_lerp(flat, t)

    def curvature_at(self, track_idx: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self._lerp(self.curvature, *self._locate(track_idx, s))

    def width_at(self, track_idx: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.width_at_located(*self._locate(track_idx, s))

    def width_at_located(self, flat: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`width_at` from an earlier `_locate`."""
        return self._lerp(self.w_left, flat, t), self._lerp(self.w_right, flat, t)

    def sample_ahead(self, track_idx: torch.Tensor, s: torch.Tensor, distances: torch.Tensor) -> AheadSample:
        """Centerline points and widths at s[n] + distances[k]: [N, K, 2], [N, K]."""
        distances = torch.as_tensor(distances, dtype=self.dtype, device=self.device)
        sq = s.unsqueeze(-1) + distances.unsqueeze(0)
        flat, t = self._locate(track_idx, sq)
        nxt = self._next(flat)
        xy = self.xy[flat] * (1 - t).unsqueeze(-1) + self.xy[nxt] * t.unsqueeze(-1)
        wl = self.w_left[flat] * (1 - t) + self.w_left[nxt] * t
        wr = self.w_right[flat] * (1 - t) + self.w_right[nxt] * t
        return AheadSample(xy, wl, wr)

    # ------------------------------------------------------------------ projection
    def _nearest(
        self, xy: torch.Tensor, cand: torch.Tensor, valid: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Best flat segment index and fraction among candidates cand [n, C]."""
        ax, ay, vx, vy, inv = self._seg_parts
        vxc, vyc = vx[cand], vy[cand]
        rx = xy[:, :1] - ax[cand]
        ry = xy[:, 1:] - ay[cand]
        t = torch.clamp((rx * vxc + ry * vyc) * inv[cand], 0.0, 1.0)
        rx = rx - t * vxc
        ry = ry - t * vyc
        dist2 = rx * rx + ry * ry
        if valid is not None:
            dist2 = torch.where(valid, dist2, torch.full_like(dist2, float("inf")))
        k = dist2.argmin(dim=1, keepdim=True)
        return cand.gather(1, k).squeeze(1), t.gather(1, k).squeeze(1)

    def project(
        self,
        xy: torch.Tensor,
        track_idx: torch.Tensor,
        hint: torch.Tensor | None = None,
        window: int = 16,
        yaw: torch.Tensor | None = None,
    ) -> BatchProjection:
        """Project points xy [N, 2] onto their tracks.

        With `hint` (segment indices [N], e.g. the previous step's `segment`) only the
        2 * window + 1 segments around it are searched: O(N * window). Without it every segment
        of the point's track is searched (exact; use at resets).
        """
        xy = xy.to(self.dtype)
        track_idx = track_idx.long()
        base = track_idx * self.mmax
        n_seg = self.count[track_idx]
        if hint is not None:
            offs = torch.arange(-window, window + 1, device=self.device)
            local = torch.remainder(hint.long().unsqueeze(1) + offs, n_seg.unsqueeze(1))
            flat, t = self._nearest(xy, base.unsqueeze(1) + local, None)
        else:
            flat = torch.empty(len(xy), dtype=torch.long, device=self.device)
            t = torch.empty(len(xy), dtype=self.dtype, device=self.device)
            offs = torch.arange(self.mmax, device=self.device)
            chunk = max(1, _PAIRS_PER_CHUNK // self.mmax)
            for lo in range(0, len(xy), chunk):
                sl = slice(lo, lo + chunk)
                valid = offs.unsqueeze(0) < n_seg[sl].unsqueeze(1)
                flat[sl], t[sl] = self._nearest(xy[sl], base[sl].unsqueeze(1) + offs, valid)
        return self._projection_from(xy, flat, t, yaw)

    def _projection_from(
        self, xy: torch.Tensor, flat: torch.Tensor, t: torch.Tensor, yaw: torch.Tensor | None
    ) -> BatchProjection:
        v = self.seg[flat]
        rel = xy - (self.xy[flat] + t.unsqueeze(-1) * v)
        cross = v[:, 0] * rel[:, 1] - v[:, 1] * rel[:, 0]
        d = torch.where(cross >= 0, 1.0, -1.0).to(self.dtype) * rel.norm(dim=-1)
        b = torch.div(flat, self.mmax, rounding_mode="floor")
        s = torch.remainder(self.s_pts[flat] + t * self.seg_len[flat], self.length[b])
        heading = self._heading_lerp(flat, t)
        herr = None if yaw is None else _wrap(yaw.to(self.dtype) - heading)
        return BatchProjection(
            s=s,
            d=d,
            heading=heading,
            heading_error=herr,
            w_left=self._lerp(self.w_left, flat, t),
            w_right=self._lerp(self.w_right, flat, t),
            segment=flat - b * self.mmax,
        )

    def friction_from_projection(self, track_idx: torch.Tensor, proj: BatchProjection) -> torch.Tensor:
        """Friction [N] given a projection already computed this step."""
        return self.friction_sd(track_idx, proj.s, proj.d, on_lap=True)

    def friction_sd(
        self, track_idx: torch.Tensor, s: torch.Tensor, d: torch.Tensor, on_lap: bool = False
    ) -> torch.Tensor:
        """Friction at arc lengths s and lateral offsets d on each row's track.

        track_idx [N]; s, d [N] or [N, Q] (d may be [N, 1]) -> [N] or [N, Q]. The last patch that
        contains a point wins; base_mu outside every patch. on_lap: the caller guarantees
        0 <= s <= length (a projection's s), which saves an fmod.
        """
        track_idx = track_idx.long()
        n, pmax = track_idx.shape[0], self.patches.shape[1]
        # patch slots first, cars last: every op below runs along contiguous [N] rows
        rows = self._patch_cols.index_select(1, track_idx).view(5, pmax, 1, n)
        start, span, d_min, d_max, mu = rows.unbind(0)  # [P, 1, N]
        sq, dq = s.reshape(n, -1).t(), d.reshape(n, -1).t()  # [Q, N] (dq may be [1, N])
        length = self.length.index_select(0, track_idx)  # [N]
        ahead = sq - start  # [P, Q, N] from each patch's start; in [-length, length] for s on the lap
        ahead = remainder_near(ahead, length) if on_lap else torch.remainder(ahead, length)
        inside = (ahead <= span) & (dq >= d_min) & (dq <= d_max)
        order = torch.arange(1, pmax + 1, device=self.device).view(pmax, 1, 1)
        last = (inside * order).amax(dim=0)  # [Q, N]: the last patch that contains the point, 0 if none
        mu = mu.squeeze(1).gather(0, (last - 1).clamp(min=0))  # [Q, N]
        out = torch.where(last > 0, mu, self.base_mu.index_select(0, track_idx))
        return out.t().reshape(s.shape)

    def friction_at(
        self, xy: torch.Tensor, track_idx: torch.Tensor, hint: torch.Tensor | None = None, window: int = 16
    ) -> torch.Tensor:
        """Peak friction [N] under points xy on their tracks (base_mu outside patches)."""
        return self.friction_from_projection(track_idx, self.project(xy, track_idx, hint, window))

    def is_on_track(self, proj: BatchProjection) -> torch.Tensor:
        """True where a projected point is within the road width on its side."""
        return torch.where(proj.d >= 0, proj.d <= proj.w_left, -proj.d <= proj.w_right)


def _take(values: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """values[flat] for a per-point table [B * Mmax] or [B * Mmax, F] and indices of any shape."""
    out = gather_rows(values, flat.reshape(-1)) if values.dim() == 2 else values.index_select(0, flat.reshape(-1))
    return out.view(*flat.shape, *values.shape[1:])


def gather_rows(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """table[idx] for a contiguous table [M, F] and indices [L] -> [L, F].

    A float32 pair (F = 2) is gathered as one int64 (a bit-exact reinterpretation): index_select
    over the rows of a 2-D table is several times slower on CPU than over a 1-D one.
    """
    if table.dtype == torch.float32 and table.shape[1] == 2:
        return table.view(torch.int64).view(-1).index_select(0, idx).view(torch.float32).view(-1, 2)
    return table.index_select(0, idx)


def _normal(h: torch.Tensor) -> torch.Tensor:
    return torch.stack([-torch.sin(h), torch.cos(h)], dim=-1)
