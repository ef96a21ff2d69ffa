"""A rasterised friction map: what the physics loop reads under each wheel at every substep.

Projecting a wheel onto the centerline 50 times per control period is too slow in Python, so a
track bakes its friction patches into a regular grid once per reset (`rasterise`, behind
`Track.friction_grid`) and the compiled tyre code samples it bilinearly (smooth over one cell:
no step in grip, no geometric lip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from s3.tracks.geometry import patch_span

if TYPE_CHECKING:
    from s3.tracks.track import Track


@dataclass(frozen=True)
class FrictionGrid:
    """Peak friction on a regular grid; cell (i, j) is centred at (x0 + j*res, y0 + i*res)."""

    x0: float
    y0: float
    res: float
    mu: np.ndarray  # [ny, nx] float64
    default_mu: float  # friction outside the grid

    @classmethod
    def uniform(cls, mu: float) -> FrictionGrid:
        """A surface with the same friction everywhere (a 1x1 grid that is never inside)."""
        return cls(0.0, 0.0, 1.0, np.full((1, 1), mu, dtype=np.float64), float(mu))

    def at(self, xy: np.ndarray) -> np.ndarray:
        """Bilinear friction at points xy [N, 2] (numpy reference of the compiled lookup)."""
        xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        ny, nx = self.mu.shape
        fx = (xy[:, 0] - self.x0) / self.res
        fy = (xy[:, 1] - self.y0) / self.res
        inside = (fx >= 0) & (fy >= 0) & (fx <= nx - 1) & (fy <= ny - 1)
        out = np.full(len(xy), self.default_mu, dtype=np.float64)
        if inside.any() and nx > 1 and ny > 1:
            j0 = np.minimum(np.floor(fx[inside]).astype(int), nx - 2)
            i0 = np.minimum(np.floor(fy[inside]).astype(int), ny - 2)
            tx, ty = fx[inside] - j0, fy[inside] - i0
            m = self.mu
            out[inside] = (
                m[i0, j0] * (1 - tx) * (1 - ty)
                + m[i0, j0 + 1] * tx * (1 - ty)
                + m[i0 + 1, j0] * (1 - tx) * ty
                + m[i0 + 1, j0 + 1] * tx * ty
            )
        return out


def rasterise(track: Track, res: float) -> FrictionGrid:
    """The track's friction on a grid of `res` m cells; only cells near a patch are evaluated.

    Each patch's (s, d) rectangle, widened by a margin, is sampled at half a cell to mark the
    cells it touches; those cells are projected exactly (against only the centerline blocks that
    can be nearest to them) and given `track.friction_at`'s value. Every other cell keeps
    base_mu, so a long course costs little more than its patches. No patches: a uniform grid.
    """
    if not track.patches:
        return FrictionGrid.uniform(track.base_mu)
    pad = 2.0 * res + 0.5
    step = 0.5 * res
    samples = []
    for p in track.patches:
        start, span = patch_span(p, track.length)
        ss = start - pad + np.arange(0.0, span + 2 * pad + step, step)
        dd = np.arange(p.d_min - pad, p.d_max + pad + step, step)
        x, y, _ = track.pose_at(ss[:, None], dd[None, :])
        reach = max(abs(p.d_min), abs(p.d_max)) + pad + 2.0 * res  # cell-to-centerline bound
        samples.append((np.stack([x.ravel(), y.ravel()], axis=1), reach))
    allpts = np.concatenate([pts for pts, _ in samples])
    x0 = (np.floor(allpts[:, 0].min() / res) - 1) * res
    y0 = (np.floor(allpts[:, 1].min() / res) - 1) * res
    nx = int(np.ceil((allpts[:, 0].max() - x0) / res)) + 2
    ny = int(np.ceil((allpts[:, 1].max() - y0) / res)) + 2
    mu = np.full((ny, nx), track.base_mu)
    done = np.zeros((ny, nx), dtype=bool)
    search = track.segment_search
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
        cand = search.near_box(pc.min(axis=0), pc.max(axis=0), reach)
        chunk = max(1, 2**21 // len(cand))
        for k in range(0, len(pc), chunk):
            sl = slice(k, k + chunk)
            seg, t, _ = search.nearest(pc[sl], np.broadcast_to(cand, (len(pc[sl]), len(cand))))
            pr = track.projection_from(pc[sl], seg, t)
            mu.ravel()[cells[sl]] = track.friction_at_sd(pr.s, pr.d)
    return FrictionGrid(float(x0), float(y0), float(res), mu, track.base_mu)
