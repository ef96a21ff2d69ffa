"""A closed racing track: centerline polyline, left/right widths and friction patches.

Everything downstream (the exploration driver, the batched RL environment, evaluation) asks the
same few questions of a track: where is this point along and across the road (project), what is
the road like ahead (sample_ahead, curvature_at), and what grip is there (friction_at,
friction_grid). The numpy queries here are the reference; `torch_track.TrackBatch` mirrors them
for batches of tracks on a torch device. The plane geometry lives in `geometry`, the nearest-
segment search behind `project` in `segment_search`, the friction rasteriser in `friction_grid`.

Conventions: world x east, y north; heading CCW from +x; lateral offset d is positive to the
left of the driving direction; curvature is positive for left turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from s3.tracks.friction_grid import FrictionGrid, rasterise
from s3.tracks.geometry import MIN_SEGMENT, cross, left_normal, patch_span, periodic_spline, segments_cross, wrap_angle
from s3.tracks.segment_search import SegmentSearch

_CHUNK = 4096  # query points per vectorised projection chunk


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
        if (seg < MIN_SEGMENT).any():
            k = int(np.argmax(seg < MIN_SEGMENT))
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
        return _ro(2.0 * cross(a, b) / np.maximum(den, 1e-12))

    @cached_property
    def segment_search(self) -> SegmentSearch:
        """Nearest-segment search over the centerline's segments (behind `project`)."""
        return SegmentSearch(self.centerline, self.segment_vectors, self.segment_lengths)

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
        n0 = left_normal(self.heading[i])
        n1 = left_normal(self.heading[(i + 1) % len(self)])
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
                seg[sl], t[sl], _ = self.segment_search.nearest(p[sl], cand)
            else:
                seg[sl], t[sl], _ = self.segment_search.nearest_pruned(p[sl])
        return self.projection_from(p, seg, t, yaw)

    def projection_from(
        self, p: np.ndarray, seg: np.ndarray, t: np.ndarray, yaw: np.ndarray | None = None
    ) -> Projection:
        """The Projection of points p [N, 2] whose nearest centerline point lies at fraction t [N]
        along segment seg [N] (as `segment_search` finds them)."""
        v = self.segment_vectors[seg]
        q = self.centerline[seg] + t[:, None] * v
        rel = p - q
        side = np.where(cross(v, rel) >= 0, 1.0, -1.0)
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
    def friction_at_sd(self, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        """Friction at track coordinates (arc length s in [0, length), lateral offset d), both
        [N]: base_mu outside every patch; a later patch overrides an earlier one where they overlap."""
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
        return self.friction_at_sd(pr.s, pr.d)

    def patch_polygon(self, patch: FrictionPatch, step: float = 1.0) -> np.ndarray:
        """Outline [P, 2] of a patch in world coordinates (for plots and bounding boxes)."""
        start, span = patch_span(patch, self.length)
        s = start + np.linspace(0.0, span, max(2, int(np.ceil(span / step)) + 1))
        xl, yl, _ = self.pose_at(s, patch.d_max)
        xr, yr, _ = self.pose_at(s[::-1], patch.d_min)
        return np.stack([np.concatenate([xl, xr]), np.concatenate([yl, yr])], axis=1)

    def friction_grid(self, res: float = 0.25) -> FrictionGrid:
        """The friction map rasterised on `res` m cells (`friction_grid.rasterise`), for the physics loop."""
        return rasterise(self, res)

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
            patches.append(
                FrictionPatch(new_start, new_start + remap(start + span) - remap(start), p.d_min, p.d_max, p.mu)
            )
        return Track(self.name, xy, wl, wr, patches, self.base_mu)


def _ro(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a
