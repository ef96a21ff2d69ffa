"""A rasterised friction map: what the physics loop reads under each wheel at every substep.

Projecting a wheel onto the centerline 50 times per control period is too slow in Python, so a
track bakes its friction patches into a regular grid once per reset and the compiled tyre code
samples it bilinearly (smooth over one cell: no step in grip, no geometric lip).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
            out[inside] = m[i0, j0] * (1 - tx) * (1 - ty) + m[i0, j0 + 1] * tx * (1 - ty) + m[i0 + 1, j0] * (1 - tx) * ty + m[i0 + 1, j0 + 1] * tx * ty
        return out
