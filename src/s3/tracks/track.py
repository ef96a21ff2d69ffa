"""A closed racing track: centerline polyline, left/right widths and friction patches.

Everything downstream (the exploration driver, the batched RL environment, evaluation) asks the
same few questions of a track: where is this point along and across the road (project), what is
the road like ahead (sample_ahead, curvature_at), and what grip is there (friction_at,
friction_grid). The numpy queries here are the reference; `torch_track.TrackBatch` mirrors them
for batches of tracks on a torch device.

Conventions: world x east, y north; heading CCW from +x; lateral offset d is positive to the
left of the driving direction; curvature is positive for left turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from s3.tracks.friction_grid import FrictionGrid

_BLOCK = 16  # segments per bounding circle in the pruned projection
_CHUNK = 4096  # query points per vectorised projection chunk
_MIN_SEG = 1e-6  # shorter segments count as duplicate points


class TrackError(ValueError):
    """A track (or the file it came from) is unusable; the message is one line naming it."""

    def __init__(self, subject: str, problem: str) -> None:
        self.subject = subject
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{subject}: {self.problem}")

    def __reduce__(self) -> tuple[type[TrackError], tuple[str, str]]:
        """Survive the trip back from a worker process as the same one-line error."""
        return (TrackError, (self.subject, self.problem))


@dataclass(frozen=True)
class FrictionPatch:
    """A region of different grip, in track coordinates (so it follows the road).

    s_start/s_end are arc lengths in metres; s_end may exceed the track length or be smaller
    than s_start, meaning the patch wraps past the start line. d_min/d_max bound the lateral
    offset (left positive) relative to the centerline.
    """

    s_start: float
    s_end: float
    d_min: float
    d_max: float
    mu: float

    def __post_init__(self) -> None:
        for f in ("s_start", "s_end", "d_min", "d_max", "mu"):
            object.__setattr__(self, f, float(getattr(self, f)))


class Projection(NamedTuple):
    """Where points sit relative to a track, all arrays [N]."""

    s: np.ndarray  # arc length of the nearest centerline point, in [0, length)
    d: np.ndarray  # signed lateral offset, left positive
    heading: np.ndarray  # track heading at s
    heading_error: np.ndarray | None  # yaw - heading wrapped to (-pi, pi]; None without yaw
    w_left: np.ndarray
    w_right: np.ndarray
    segment: np.ndarray  # index i of the nearest segment (point i -> point i+1)


def wrap_angle(a: np.ndarray) -> np.ndarray:
    """Wrap angles to (-pi, pi]."""
    return np.pi - np.mod(np.pi - np.asarray(a, dtype=np.float64), 2.0 * np.pi)


def periodic_spline(t: np.ndarray, period: float, y: np.ndarray, tq: np.ndarray) -> np.ndarray:
    """Evaluate the periodic natural cubic spline through (t[i], y[i]) at tq (y: [M, D]).

    Knots t must increase within [0, period). The cyclic tridiagonal system for the second
    derivatives is strictly diagonally dominant (ratio 1/2), so Jacobi iteration converges
    geometrically and stays fully vectorised.
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    h = np.diff(np.append(t, t[0] + period))  # h[i] = t[i+1] - t[i]
    hp = np.roll(h, 1)  # h[i-1]
    slope = (np.roll(y, -1, axis=0) - y) / h[:, None]
    rhs = 6.0 * (slope - np.roll(slope, 1, axis=0))
    diag = 2.0 * (hp + h)[:, None]
    m = np.zeros_like(y)
    prev, nxt = np.roll(np.arange(len(t)), 1), np.roll(np.arange(len(t)), -1)  # np.roll(m, +-1), as cheap indexing
    for _ in range(80):
        m = (rhs - hp[:, None] * m[prev] - h[:, None] * m[nxt]) / diag
    tq = np.mod(np.asarray(tq, dtype=np.float64) - t[0], period) + t[0]
    i = np.clip(np.searchsorted(t, tq, side="right") - 1, 0, len(t) - 1)
    j = (i + 1) % len(t)
    hi = h[i][:, None]
    a = ((t[i] + h[i] - tq) / h[i])[:, None]
    b = 1.0 - a
    return a * y[i] + b * y[j] + ((a**3 - a) * m[i] + (b**3 - b) * m[j]) * hi**2 / 6.0


def segments_cross(xy: np.ndarray) -> tuple[int, int] | None:
    """First pair of non-adjacent segments of the closed polyline xy that cross or touch.

    Segments are grouped in blocks whose bounding boxes are compared first, so the cost is
    close to linear in the number of points for tracks that do not fold back on themselves.
    """
    m = len(xy)
    a = xy
    b = np.roll(xy, -1, axis=0)
    nb = -(-m // _BLOCK)
    seg = np.minimum(np.arange(nb * _BLOCK).reshape(nb, _BLOCK), m - 1)
    lo = np.minimum(a[seg], b[seg]).min(axis=1)  # [nb, 2]
    hi = np.maximum(a[seg], b[seg]).max(axis=1)
    overlap = (lo[:, None, :] <= hi[None, :, :]).all(-1) & (lo[None, :, :] <= hi[:, None, :]).all(-1)
    bi, bj = np.nonzero(np.triu(overlap))
    for start in range(0, len(bi), 512):
        i = seg[bi[start : start + 512]][:, :, None]  # [P, K, 1]
        j = seg[bj[start : start + 512]][:, None, :]  # [P, 1, K]
        i, j = np.broadcast_arrays(i, j)
        i, j = i.ravel(), j.ravel()
        apart = np.abs(i - j)
        keep = (apart > 1) & (apart < m - 1)  # neighbours share an end point by construction
        i, j = i[keep], j[keep]
        lo_i, hi_i = np.minimum(a[i], b[i]), np.maximum(a[i], b[i])
        lo_j, hi_j = np.minimum(a[j], b[j]), np.maximum(a[j], b[j])
        near = (lo_i <= hi_j).all(-1) & (lo_j <= hi_i).all(-1)
        i, j = i[near], j[near]
        if len(i) == 0:
            continue
        p, r = a[i], b[i] - a[i]
        q, s = a[j], b[j] - a[j]
        proper = (_cross(r, q - p) * _cross(r, q + s - p) < 0) & (_cross(s, p - q) * _cross(s, p + r - q) < 0)
        gap = np.minimum.reduce(
            [_point_segment_dist(q, p, r), _point_segment_dist(q + s, p, r), _point_segment_dist(p, q, s), _point_segment_dist(p + r, q, s)]
        )
        hit = np.nonzero(proper | (gap < _MIN_SEG))[0]  # crossing, touching or overlapping
        if len(hit):
            k = hit[0]
            return int(min(i[k], j[k])), int(max(i[k], j[k]))
    return None


def _point_segment_dist(x: np.ndarray, a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Distance from points x to segments a + [0, 1] * v (all [P, 2])."""
    t = np.clip(((x - a) * v).sum(-1) / (v * v).sum(-1), 0.0, 1.0)
    return np.linalg.norm(x - a - t[:, None] * v, axis=-1)


def _cross(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def patch_span(p: FrictionPatch, length: float) -> tuple[float, float]:
    """(start in [0, length), span in (0, length]) of a patch, resolving wrap-around."""
    span = p.s_end - p.s_start
    if span <= 0:
        span += length
    return float(np.mod(p.s_start, length)), float(span)


class Track:
    """An immutable closed track; construction validates it and raises TrackError if unusable."""

    def __init__(
        self,
        name: str,
        centerline: np.ndarray,
        w_left: np.ndarray,
        w_right: np.ndarray,
        patches: Sequence[FrictionPatch] = (),
        base_mu: float = 1.0,
    ) -> None:
        self.name = str(name)
        try:
            xy = np.array(centerline, dtype=np.float64)
            wl = np.array(w_left, dtype=np.float64)
            wr = np.array(w_right, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise self._fail(f"centerline and widths must be numeric arrays ({e})") from None
        self._check(xy, wl, wr)
        for arr in (xy, wl, wr):
            arr.setflags(write=False)
        self.centerline, self.w_left, self.w_right = xy, wl, wr
        self.base_mu = float(base_mu)
        self.patches: tuple[FrictionPatch, ...] = tuple(patches)
        self._check_friction()
        self._resampled: dict[float, Track] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the resampling memo (workers resample what they use)."""
        return {**self.__dict__, "_resampled": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_resampled": {}, **state})

    def _fail(self, problem: str) -> TrackError:
        return TrackError(f"track {self.name!r}", problem)

    def _check(self, xy: np.ndarray, wl: np.ndarray, wr: np.ndarray) -> None:
        if xy.ndim != 2 or xy.shape[1] != 2:
            raise self._fail(f"centerline must have shape [M, 2], got {list(xy.shape)}")
        m = len(xy)
        if m < 4:
            raise self._fail(f"too few centerline points ({m} < 4)")
        for label, w in (("w_left", wl), ("w_right", wr)):
            if w.shape != (m,):
                raise self._fail(f"{label} must have shape [{m}], got {list(w.shape)}")
        for label, arr in (("centerline", xy), ("w_left", wl), ("w_right", wr)):
            bad = ~np.isfinite(arr.reshape(m, -1)).all(axis=1)
            if bad.any():
                raise self._fail(f"non-finite {label} at point {int(np.argmax(bad))}")
        for label, w in (("w_left", wl), ("w_right", wr)):
            if (w <= 0).any():
                k = int(np.argmin(w))
                raise self._fail(f"{label} must be positive, got {w[k]:g} at point {k}")
        seg = np.linalg.norm(np.roll(xy, -1, axis=0) - xy, axis=1)
        if (seg < _MIN_SEG).any():
            k = int(np.argmax(seg < _MIN_SEG))
            raise self._fail(f"duplicate consecutive points {k} and {(k + 1) % m}")
        crossing = segments_cross(xy)
        if crossing is not None:
            raise self._fail(f"centerline intersects itself (segments {crossing[0]} and {crossing[1]})")

    def _check_friction(self) -> None:
        if not (np.isfinite(self.base_mu) and 0 < self.base_mu <= 2):
            raise self._fail(f"base_mu must be in (0, 2], got {self.base_mu:g}")
        for k, p in enumerate(self.patches):
            if not isinstance(p, FrictionPatch):
                raise self._fail(f"patch {k} is not a FrictionPatch")
            if not np.isfinite([p.s_start, p.s_end, p.d_min, p.d_max, p.mu]).all():
                raise self._fail(f"patch {k} has non-finite values")
            if not 0 < p.mu <= 2:
                raise self._fail(f"patch {k} mu must be in (0, 2], got {p.mu:g}")
            if not p.d_min < p.d_max:
                raise self._fail(f"patch {k} needs d_min < d_max, got {p.d_min:g} >= {p.d_max:g}")
            span = p.s_end - p.s_start
            if span == 0 or span > self.length or span < -self.length:
                raise self._fail(f"patch {k} s range [{p.s_start:g}, {p.s_end:g}] is empty or longer than the track")

    def __repr__(self) -> str:
        return f"Track({self.name!r}, {len(self)} points, {self.length:.1f} m, {len(self.patches)} patches)"

    def __len__(self) -> int:
        return len(self.centerline)

    # ------------------------------------------------------------------ derived geometry
    @cached_property
    def segment_vectors(self) -> np.ndarray:
        """[M, 2] vector from point i to point i+1 (the last one closes the loop)."""
        return _ro(np.roll(self.centerline, -1, axis=0) - self.centerline)

    @cached_property
    def segment_lengths(self) -> np.ndarray:
        return _ro(np.linalg.norm(self.segment_vectors, axis=1))

    @cached_property
    def s(self) -> np.ndarray:
        """[M] arc length at each centerline point (s[0] = 0)."""
        return _ro(np.concatenate([[0.0], np.cumsum(self.segment_lengths)[:-1]]))

    @cached_property
    def length(self) -> float:
        return float(self.segment_lengths.sum())

    @cached_property
    def heading(self) -> np.ndarray:
        """[M] heading at each point: direction of the chord between its neighbours."""
        v = np.roll(self.centerline, -1, axis=0) - np.roll(self.centerline, 1, axis=0)
        return _ro(np.arctan2(v[:, 1], v[:, 0]))

    @cached_property
    def curvature(self) -> np.ndarray:
        """[M] signed Menger curvature through each point and its neighbours (left turn > 0)."""
        p0, p1, p2 = np.roll(self.centerline, 1, axis=0), self.centerline, np.roll(self.centerline, -1, axis=0)
        a, b, c = p1 - p0, p2 - p1, p2 - p0
        den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) * np.linalg.norm(c, axis=1)
        return _ro(2.0 * _cross(a, b) / np.maximum(den, 1e-12))

    @cached_property
    def _blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Segment blocks with bounding circles (segment ids [nb, K], centres [nb, 2], radii [nb])."""
        m = len(self)
        nb = -(-m // _BLOCK)
        seg = np.minimum(np.arange(nb * _BLOCK).reshape(nb, _BLOCK), m - 1)
        ends = np.concatenate([self.centerline[seg], self.centerline[(seg + 1) % m]], axis=1)
        centre = 0.5 * (ends.min(axis=1) + ends.max(axis=1))
        radius = np.linalg.norm(ends - centre[:, None, :], axis=2).max(axis=1)
        return seg, centre, radius

    # ------------------------------------------------------------------ along-track lookups
    def _locate(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Segment index and fraction along it for arc lengths s (any real, wrapped)."""
        s = np.mod(np.asarray(s, dtype=np.float64), self.length)
        i = np.clip(np.searchsorted(self.s, s, side="right") - 1, 0, len(self) - 1)
        t = np.clip((s - self.s[i]) / self.segment_lengths[i], 0.0, 1.0)
        return i, t

    def _lerp(self, values: np.ndarray, i: np.ndarray, t: np.ndarray) -> np.ndarray:
        j = (i + 1) % len(self)
        return values[i] * (1 - t) + values[j] * t

    def _heading_lerp(self, i: np.ndarray, t: np.ndarray) -> np.ndarray:
        h0 = self.heading[i]
        return wrap_angle(h0 + t * wrap_angle(self.heading[(i + 1) % len(self)] - h0))

    def pose_at(self, s: np.ndarray, d: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World x, y and track heading at arc length s and lateral offset d (left positive).

        The offset is taken along the interpolated point normals, so lines of constant d are
        the continuous offset polylines used for the road edges.
        """
        s = np.asarray(s, dtype=np.float64)
        i, t = self._locate(s)
        xy = self.centerline[i] * (1 - t)[..., None] + self.centerline[(i + 1) % len(self)] * t[..., None]
        h = self._heading_lerp(i, t)
        n0 = _normal(self.heading[i])
        n1 = _normal(self.heading[(i + 1) % len(self)])
        normal = n0 * (1 - t)[..., None] + n1 * t[..., None]
        xy = xy + np.asarray(d, dtype=np.float64)[..., None] * normal
        return xy[..., 0], xy[..., 1], h

    def heading_at(self, s: np.ndarray) -> np.ndarray:
        return self._heading_lerp(*self._locate(s))

    def curvature_at(self, s: np.ndarray) -> np.ndarray:
        return self._lerp(self.curvature, *self._locate(s))

    def width_at(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(w_left, w_right) at arc lengths s."""
        i, t = self._locate(s)
        return self._lerp(self.w_left, i, t), self._lerp(self.w_right, i, t)

    def sample_ahead(self, s: np.ndarray, distances: np.ndarray) -> np.ndarray:
        """Centerline points [N, K, 2] at s[n] + distances[k] (wrapping around the loop)."""
        sq = np.asarray(s, dtype=np.float64).reshape(-1, 1) + np.asarray(distances, dtype=np.float64).reshape(1, -1)
        x, y, _ = self.pose_at(sq)
        return np.stack([x, y], axis=-1)

    # ------------------------------------------------------------------ projection
    @cached_property
    def _seg_arrays(self) -> tuple[np.ndarray, ...]:
        """Segment starts, directions and 1/length^2 split by component (faster gathers)."""
        v = self.segment_vectors
        inv = 1.0 / (self.segment_lengths**2)
        return self.centerline[:, 0].copy(), self.centerline[:, 1].copy(), v[:, 0].copy(), v[:, 1].copy(), inv

    def _nearest(self, p: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Nearest point on candidate segments cand [n, C] for points p [n, 2]: (segment, t, dist2)."""
        ax, ay, vx, vy, inv = self._seg_arrays
        vxc, vyc = vx[cand], vy[cand]
        rx = p[:, :1] - ax[cand]
        ry = p[:, 1:] - ay[cand]
        t = np.clip((rx * vxc + ry * vyc) * inv[cand], 0.0, 1.0)
        rx -= t * vxc
        ry -= t * vyc
        dist2 = rx * rx + ry * ry
        k = np.argmin(dist2, axis=1)
        rows = np.arange(len(p))
        return cand[rows, k], t[rows, k], dist2[rows, k]

    def _nearest_pruned(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact nearest segment: the few blocks with the smallest lower bound, then a check."""
        seg, centre, radius = self._blocks
        nb = len(centre)
        c = min(4, nb)
        dc = np.linalg.norm(p[:, None, :] - centre[None], axis=2)
        lb = np.maximum(dc - radius[None], 0.0)
        if c < nb:
            part = np.argpartition(lb, c, axis=1)
            best_blocks, next_lb = part[:, :c], np.take_along_axis(lb, part[:, c : c + 1], axis=1)[:, 0]
        else:
            best_blocks, next_lb = np.broadcast_to(np.arange(nb), (len(p), nb)), np.full(len(p), np.inf)
        cand = seg[best_blocks].reshape(len(p), -1)
        i, t, dist2 = self._nearest(p, cand)
        redo = np.nonzero(dist2 > next_lb**2)[0]
        if len(redo):
            all_seg = np.broadcast_to(np.arange(len(self)), (len(redo), len(self)))
            i[redo], t[redo], dist2[redo] = self._nearest(p[redo], all_seg)
        return i, t, dist2

    def project(
        self,
        xy: np.ndarray,
        yaw: np.ndarray | None = None,
        hint: np.ndarray | None = None,
        window: int = 16,
    ) -> Projection:
        """Exact projection of points xy [N, 2] onto the centerline polyline.

        Without a hint the search is global (bounding-circle pruning, exact). With `hint`
        (segment indices [N], e.g. from the previous step) only segments within `window` of the
        hint are searched: O(N * window), correct as long as a point moved fewer segments.
        """
        p = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        n, m = len(p), len(self)
        seg = np.empty(n, dtype=np.int64)
        t = np.empty(n)
        for lo in range(0, n, _CHUNK):
            sl = slice(lo, lo + _CHUNK)
            if hint is not None:
                h = np.asarray(hint, dtype=np.int64).reshape(-1)[sl]
                cand = np.mod(h[:, None] + np.arange(-window, window + 1)[None], m)
                seg[sl], t[sl], _ = self._nearest(p[sl], cand)
            else:
                seg[sl], t[sl], _ = self._nearest_pruned(p[sl])
        return self._projection_from(p, seg, t, yaw)

    def _projection_from(self, p: np.ndarray, seg: np.ndarray, t: np.ndarray, yaw: np.ndarray | None) -> Projection:
        v = self.segment_vectors[seg]
        q = self.centerline[seg] + t[:, None] * v
        rel = p - q
        side = np.where(_cross(v, rel) >= 0, 1.0, -1.0)
        d = side * np.linalg.norm(rel, axis=1)
        s = np.mod(self.s[seg] + t * self.segment_lengths[seg], self.length)
        heading = self._heading_lerp(seg, t)
        herr = None if yaw is None else wrap_angle(np.asarray(yaw, dtype=np.float64).reshape(-1) - heading)
        return Projection(
            s=s,
            d=d,
            heading=heading,
            heading_error=herr,
            w_left=self._lerp(self.w_left, seg, t),
            w_right=self._lerp(self.w_right, seg, t),
            segment=seg,
        )

    def is_on_track(self, xy: np.ndarray) -> np.ndarray:
        """True where the lateral offset is within the road width on that side."""
        pr = self.project(xy)
        return np.where(pr.d >= 0, pr.d <= pr.w_left, -pr.d <= pr.w_right)

    # ------------------------------------------------------------------ friction
    def _mu_from_sd(self, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        """Friction at track coordinates; a later patch overrides an earlier one where they overlap."""
        mu = np.full(s.shape, self.base_mu)
        for p in self.patches:
            start, span = patch_span(p, self.length)
            inside = (np.mod(s - start, self.length) <= span) & (d >= p.d_min) & (d <= p.d_max)
            mu[inside] = p.mu
        return mu

    def friction_at(self, xy: np.ndarray) -> np.ndarray:
        """Peak friction mu [N] at world points: base_mu outside every patch."""
        p = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        if not self.patches:
            return np.full(len(p), self.base_mu)
        pr = self.project(p)
        return self._mu_from_sd(pr.s, pr.d)

    def patch_polygon(self, patch: FrictionPatch, step: float = 1.0) -> np.ndarray:
        """Outline [P, 2] of a patch in world coordinates (for plots and bounding boxes)."""
        start, span = patch_span(patch, self.length)
        s = start + np.linspace(0.0, span, max(2, int(np.ceil(span / step)) + 1))
        xl, yl, _ = self.pose_at(s, patch.d_max)
        xr, yr, _ = self.pose_at(s[::-1], patch.d_min)
        return np.stack([np.concatenate([xl, xr]), np.concatenate([yl, yr])], axis=1)

    def friction_grid(self, res: float = 0.25) -> FrictionGrid:
        """Rasterise the patches into a FrictionGrid; only cells near a patch are evaluated.

        Each patch's (s, d) rectangle, widened by a margin, is sampled at half a cell to mark
        the cells it touches; those cells are projected exactly (against only the centerline
        blocks that can be nearest to them) and given friction_at's value. Every other cell
        keeps base_mu, so a long course costs little more than its patches.
        """
        if not self.patches:
            return FrictionGrid.uniform(self.base_mu)
        pad = 2.0 * res + 0.5
        step = 0.5 * res
        samples = []
        for p in self.patches:
            start, span = patch_span(p, self.length)
            ss = start - pad + np.arange(0.0, span + 2 * pad + step, step)
            dd = np.arange(p.d_min - pad, p.d_max + pad + step, step)
            x, y, _ = self.pose_at(ss[:, None], dd[None, :])
            reach = max(abs(p.d_min), abs(p.d_max)) + pad + 2.0 * res  # cell-to-centerline bound
            samples.append((np.stack([x.ravel(), y.ravel()], axis=1), reach))
        allpts = np.concatenate([pts for pts, _ in samples])
        x0 = (np.floor(allpts[:, 0].min() / res) - 1) * res
        y0 = (np.floor(allpts[:, 1].min() / res) - 1) * res
        nx = int(np.ceil((allpts[:, 0].max() - x0) / res)) + 2
        ny = int(np.ceil((allpts[:, 1].max() - y0) / res)) + 2
        mu = np.full((ny, nx), self.base_mu)
        done = np.zeros((ny, nx), dtype=bool)
        seg, centre, radius = self._blocks
        for pts, reach in samples:
            fj = np.floor((pts[:, 0] - x0) / res).astype(np.int64)
            fi = np.floor((pts[:, 1] - y0) / res).astype(np.int64)
            cells = np.unique(np.concatenate([(fi + di) * nx + fj + dj for di in (0, 1) for dj in (0, 1)]))
            cells = cells[~done.ravel()[cells]]
            if len(cells) == 0:
                continue
            done.ravel()[cells] = True
            ii, jj = np.divmod(cells, nx)
            pc = np.stack([x0 + jj * res, y0 + ii * res], axis=1)
            lo, hi = pc.min(axis=0), pc.max(axis=0)
            gap = np.maximum(np.maximum(lo[None] - centre, centre - hi[None]), 0.0)
            cand = np.unique(seg[np.linalg.norm(gap, axis=1) - radius <= reach])
            chunk = max(1, 2**21 // len(cand))
            for k in range(0, len(pc), chunk):
                sl = slice(k, k + chunk)
                s_i, t_i, _ = self._nearest(pc[sl], np.broadcast_to(cand, (len(pc[sl]), len(cand))))
                pr = self._projection_from(pc[sl], s_i, t_i, None)
                mu.ravel()[cells[sl]] = self._mu_from_sd(pr.s, pr.d)
        return FrictionGrid(float(x0), float(y0), float(res), mu, self.base_mu)

    # ------------------------------------------------------------------ copies
    def with_patches(self, patches: Sequence[FrictionPatch], name: str | None = None) -> Track:
        return Track(name or self.name, self.centerline, self.w_left, self.w_right, patches, self.base_mu)

    def without_patches(self, name: str | None = None) -> Track:
        return self.with_patches((), name)

    def resampled(self, ds: float) -> Track:
        """The same loop with points at uniform arc-length spacing (close to ds), smoothed by a
        periodic cubic spline through the current points; widths and patches follow along.

        Memoised per ds (the track is immutable): every DistilledEnv and TrackBatch built on the
        same tracks resamples them once, e.g. the training env after each pool refresh, which
        rebuilds its table of all the pool's tracks.
        """
        if not ds > 0:
            raise self._fail(f"resampling step must be positive, got {ds}")
        ds = float(ds)
        if ds not in self._resampled:
            self._resampled[ds] = self._resample(ds)
        return self._resampled[ds]

    def _resample(self, ds: float) -> Track:
        t_knots = self.s
        period = self.length
        dense_t = np.linspace(0.0, period, 16 * len(self) + 1)
        dense = periodic_spline(t_knots, period, self.centerline, dense_t)
        arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(dense, axis=0), axis=1))])
        n = max(4, int(round(arc[-1] / ds)))
        s_new = np.arange(n) * (arc[-1] / n)
        t_new = np.interp(s_new, arc, dense_t)
        xy = periodic_spline(t_knots, period, self.centerline, t_new)
        wl = np.interp(t_new, t_knots, self.w_left, period=period)
        wr = np.interp(t_new, t_knots, self.w_right, period=period)
        seg = np.linalg.norm(np.roll(xy, -1, axis=0) - xy, axis=1)
        s_poly = np.concatenate([[0.0], np.cumsum(seg)])  # new polyline arc length at t_new (+ end)
        t_ext = np.append(t_new, period)

        def remap(s_old: float) -> float:
            turns, r = divmod(s_old, period)
            return float(np.interp(r, t_ext, s_poly) + turns * s_poly[-1])

        patches = []
        for p in self.patches:
            start, span = patch_span(p, period)
            new_start = remap(start)
            patches.append(FrictionPatch(new_start, new_start + remap(start + span) - remap(start), p.d_min, p.d_max, p.mu))
        return Track(self.name, xy, wl, wr, patches, self.base_mu)


def _normal(heading: np.ndarray) -> np.ndarray:
    return np.stack([-np.sin(heading), np.cos(heading)], axis=-1)


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a
