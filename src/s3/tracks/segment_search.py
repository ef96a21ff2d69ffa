"""Exact nearest-segment search on a closed polyline, for projecting points onto a centerline.

Segments are grouped in blocks of `geometry.BLOCK` with a bounding circle each. A global query
checks the few blocks whose circles come closest, then falls back to every segment for the
points where another block could still hold a nearer segment, so the answer is always exact.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from s3.tracks.geometry import segment_blocks


class SegmentSearch:
    """Nearest segments of a closed polyline (points [M, 2], segment i from point i to i + 1).

    `vectors` [M, 2] and `lengths` [M] are the segment vectors and their lengths (> 0). Every
    query returns (segment [n], t [n], dist2 [n]): the nearest segment, the fraction along it of
    the nearest point on it, in [0, 1], and the squared distance to that point, in m^2.
    """

    def __init__(self, points: np.ndarray, vectors: np.ndarray, lengths: np.ndarray) -> None:
        self.points = points
        inv = 1.0 / (lengths**2)
        self._arrays = (
            points[:, 0].copy(),
            points[:, 1].copy(),
            vectors[:, 0].copy(),
            vectors[:, 1].copy(),
            inv,
        )  # split by component: faster gathers

    def __len__(self) -> int:
        return len(self.points)

    @cached_property
    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Segment blocks with bounding circles: (segment ids [nb, BLOCK], centres [nb, 2], radii [nb])."""
        m = len(self)
        seg = segment_blocks(m)
        ends = np.concatenate([self.points[seg], self.points[(seg + 1) % m]], axis=1)
        centre = 0.5 * (ends.min(axis=1) + ends.max(axis=1))
        radius = np.linalg.norm(ends - centre[:, None, :], axis=2).max(axis=1)
        return seg, centre, radius

    def nearest(self, p: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Nearest point on candidate segments cand [n, C] for points p [n, 2]; ties go to the first candidate."""
        ax, ay, vx, vy, inv = self._arrays
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

    def nearest_pruned(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact nearest segment of all for points p [n, 2]: the few blocks with the smallest lower
        bound, then every segment for the points where the next block's bound is not beaten."""
        seg, centre, radius = self.blocks
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
        i, t, dist2 = self.nearest(p, cand)
        redo = np.nonzero(dist2 > next_lb**2)[0]
        if len(redo):
            all_seg = np.broadcast_to(np.arange(len(self)), (len(redo), len(self)))
            i[redo], t[redo], dist2[redo] = self.nearest(p[redo], all_seg)
        return i, t, dist2

    def near_box(self, lo: np.ndarray, hi: np.ndarray, reach: float) -> np.ndarray:
        """Sorted ids of the segments in every block whose bounding circle comes within `reach`
        (m) of the axis-aligned box [lo, hi] (each [2])."""
        seg, centre, radius = self.blocks
        gap = np.maximum(np.maximum(lo[None] - centre, centre - hi[None]), 0.0)
        return np.unique(seg[np.linalg.norm(gap, axis=1) - radius <= reach])
