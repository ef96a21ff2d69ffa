"""Plane geometry of closed polylines: angles, splines, crossings, segment blocks, arc spans.

Points are float64 arrays [..., 2] in metres (world x east, y north); angles are radians, CCW
from +x. A closed polyline of M points has M segments, segment i running from point i to point
(i + 1) % M. Nothing here needs a Track; `patch_span` reads only a patch's arc-length range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from s3.tracks.track import FrictionPatch

BLOCK = 16  # segments per block (bounding box or circle) in the pruned searches
MIN_SEGMENT = 1e-6  # m; shorter segments count as duplicate points


def wrap_angle(a: np.ndarray) -> np.ndarray:
    """Wrap angles to (-pi, pi]."""
    return np.pi - np.mod(np.pi - np.asarray(a, dtype=np.float64), 2.0 * np.pi)


def cross(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """z component of the cross product of 2-D vectors [..., 2] (> 0 when v is left of u)."""
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def left_normal(heading: np.ndarray) -> np.ndarray:
    """Unit left normals [..., 2] of headings [...]."""
    return np.stack([-np.sin(heading), np.cos(heading)], axis=-1)


def point_segment_dist(x: np.ndarray, a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Distance from points x to segments a + [0, 1] * v (all [P, 2])."""
    t = np.clip(((x - a) * v).sum(-1) / (v * v).sum(-1), 0.0, 1.0)
    return np.linalg.norm(x - a - t[:, None] * v, axis=-1)


def patch_span(p: FrictionPatch, length: float) -> tuple[float, float]:
    """(start in [0, length), span in (0, length]) of a patch on a loop of `length` m, resolving
    wrap-around (s_end below s_start, or past the start line)."""
    span = p.s_end - p.s_start
    if span <= 0:
        span += length
    return float(np.mod(p.s_start, length)), float(span)


def segment_blocks(m: int) -> np.ndarray:
    """Segment ids [ceil(m / BLOCK), BLOCK] of a closed polyline of m points, in runs of BLOCK;
    the last block is padded by repeating segment m - 1."""
    nb = -(-m // BLOCK)
    return np.minimum(np.arange(nb * BLOCK).reshape(nb, BLOCK), m - 1)


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
    seg = segment_blocks(m)
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
        proper = (cross(r, q - p) * cross(r, q + s - p) < 0) & (cross(s, p - q) * cross(s, p + r - q) < 0)
        gap = np.minimum.reduce(
            [
                point_segment_dist(q, p, r),
                point_segment_dist(q + s, p, r),
                point_segment_dist(p, q, s),
                point_segment_dist(p + r, q, s),
            ]
        )
        hit = np.nonzero(proper | (gap < MIN_SEGMENT))[0]  # crossing, touching or overlapping
        if len(hit):
            k = hit[0]
            return int(min(i[k], j[k])), int(max(i[k], j[k]))
    return None
