"""Many tracks as padded tensors, so thousands of cars on different tracks are one tensor op.

Each track is resampled to the same spacing and padded to the longest one; every query takes a
track index per point. The formulas mirror `Track` (numpy) exactly: projection onto the
polyline segments, headings and widths interpolated between points, offsets along interpolated
point normals, later friction patches overriding earlier ones.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
import torch

from s3.tracks.track import Track, patch_span

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

    def __len__(self) -> int:
        return len(self.tracks)

    # ------------------------------------------------------------------ along-track lookups
    def _locate(self, track_idx: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat point index and fraction along the segment for arc lengths s (wrapped).

        Points are uniformly spaced after resampling, so s / spacing lands on the right segment
        or a neighbour; two correction passes make it exact.
        """
        shape = s.shape
        ti = track_idx.reshape(-1, *([1] * (s.dim() - 1))).expand(shape)
        length = self.length[ti]
        n = self.count[ti]
        s = torch.remainder(s, length)
        i = torch.minimum((s * n / length).long(), n - 1)
        base = ti * self.mmax
        for _ in range(2):
            below = s < self.s_pts[base + i]
            i = torch.where(below & (i > 0), i - 1, i)
            nxt = torch.where(i + 1 < n, self.s_pts[base + torch.minimum(i + 1, n - 1)], length)
            i = torch.where((s >= nxt) & (i + 1 < n), i + 1, i)
        flat = base + i
        t = torch.clamp((s - self.s_pts[flat]) / self.seg_len[flat], 0.0, 1.0)
        return flat, t

    def _next(self, flat: torch.Tensor) -> torch.Tensor:
        """Flat index of the following point on the same (closed) track."""
        b = torch.div(flat, self.mmax, rounding_mode="floor")
        i = flat - b * self.mmax + 1
        return b * self.mmax + torch.where(i >= self.count[b], torch.zeros_like(i), i)

    def _lerp(self, values: torch.Tensor, flat: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return values[flat] * (1 - t) + values[self._next(flat)] * t

    def _heading_lerp(self, flat: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h0 = self.heading[flat]
        return _wrap(h0 + t * _wrap(self.heading[self._next(flat)] - h0))

    def pose_at(
        self, track_idx: torch.Tensor, s: torch.Tensor, d: torch.Tensor | float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """World x, y, heading at (s, d) on each point's track (s, d broadcast to s's shape)."""
        flat, t = self._locate(track_idx, s)
        nxt = self._next(flat)
        tt = t.unsqueeze(-1)
        xy = self.xy[flat] * (1 - tt) + self.xy[nxt] * tt
        h0, h1 = self.heading[flat], self.heading[nxt]
        normal = _normal(h0) * (1 - tt) + _normal(h1) * tt
        d = torch.as_tensor(d, dtype=self.dtype, device=self.device)
        xy = xy + d.unsqueeze(-1) * normal if d.dim() else xy + d * normal
        return xy[..., 0], xy[..., 1], _wrap(h0 + t * _wrap(h1 - h0))

    def curvature_at(self, track_idx: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self._lerp(self.curvature, *self._locate(track_idx, s))

    def width_at(self, track_idx: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat, t = self._locate(track_idx, s)
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
    def _nearest(self, xy: torch.Tensor, cand: torch.Tensor, valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
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
        track_idx = track_idx.long()
        p = self.patches[track_idx]  # [N, P, 5]
        length = self.length[track_idx].unsqueeze(1)
        s, d = proj.s.unsqueeze(1), proj.d.unsqueeze(1)
        inside = (
            self.patch_valid[track_idx]
            & (torch.remainder(s - p[..., 0], length) <= p[..., 1])
            & (d >= p[..., 2])
            & (d <= p[..., 3])
        )
        order = torch.arange(1, p.shape[1] + 1, device=self.device)
        last = (inside.long() * order).max(dim=1).values  # 0 when no patch contains the point
        mu = p[..., 4].gather(1, (last - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        return torch.where(last > 0, mu, self.base_mu[track_idx])

    def friction_at(
        self, xy: torch.Tensor, track_idx: torch.Tensor, hint: torch.Tensor | None = None, window: int = 16
    ) -> torch.Tensor:
        """Peak friction [N] under points xy on their tracks (base_mu outside patches)."""
        return self.friction_from_projection(track_idx, self.project(xy, track_idx, hint, window))

    def is_on_track(self, proj: BatchProjection) -> torch.Tensor:
        """True where a projected point is within the road width on its side."""
        return torch.where(proj.d >= 0, proj.d <= proj.w_left, -proj.d <= proj.w_right)


def _normal(h: torch.Tensor) -> torch.Tensor:
    return torch.stack([-torch.sin(h), torch.cos(h)], dim=-1)
