"""Top-down track plots (edges, friction patches, start line, speed-coloured trajectories).

Figures are built on matplotlib's object API with the Agg canvas, never pyplot, so plotting in
a pipeline stage or a worker thread touches no global GUI state.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Polygon

from s3.io import atomic_path
from s3.tracks.geometry import patch_span
from s3.tracks.track import Track

Trajectory = tuple[np.ndarray, np.ndarray]  # xy [T, 2], speed [T] in m/s


def new_figure(figsize: tuple[float, float] = (8.0, 8.0)) -> Figure:
    """A figure bound to an Agg canvas (no pyplot)."""
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_track(
    track: Track,
    trajectories: Sequence[Trajectory] = (),
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw `track` top-down with its patches and trajectories coloured by speed (one colorbar)."""
    if ax is None:
        ax = new_figure().add_subplot()
    s = np.append(track.s, track.length)
    xl, yl, _ = track.pose_at(s, np.append(track.w_left, track.w_left[0]))
    xr, yr, _ = track.pose_at(s, -np.append(track.w_right, track.w_right[0]))
    road = np.concatenate([np.stack([xl, yl], 1), np.stack([xr, yr], 1)[::-1]])
    ax.fill(road[:, 0], road[:, 1], color="0.88", lw=0, zorder=0)
    ax.plot(xl, yl, color="0.25", lw=0.8, zorder=2)
    ax.plot(xr, yr, color="0.25", lw=0.8, zorder=2)
    ax.plot(track.centerline[:, 0], track.centerline[:, 1], color="0.6", lw=0.5, ls="--", zorder=1)
    for p in track.patches:
        ax.add_patch(
            Polygon(track.patch_polygon(p), closed=True, fc="lightblue", ec="steelblue", lw=0.6, alpha=0.8, zorder=3)
        )
        start, span = patch_span(p, track.length)
        x, y, _ = track.pose_at(np.array(start + span / 2), np.array((p.d_min + p.d_max) / 2))
        ax.annotate(f"μ={p.mu:.2f}", (float(x), float(y)), fontsize=7, color="navy", ha="center", va="center", zorder=6)
    _start_line(ax, track)
    _trajectories(ax, trajectories)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x [m] (east)")
    ax.set_ylabel("y [m] (north)")
    ax.set_title(title if title is not None else f"{track.name}  ({track.length:.0f} m)")
    return ax


def _start_line(ax: Axes, track: Track) -> None:
    """A chequered-flag red line across the road at s = 0 and an arrow for the direction."""
    x, y, h = track.pose_at(np.zeros(2), np.array([track.w_left[0], -track.w_right[0]]))
    ax.plot(x, y, color="red", lw=2.0, zorder=5)
    x0, y0 = track.centerline[0]
    arrow = 2.0 * max(track.w_left[0], track.w_right[0])
    ax.annotate(
        "",
        xy=(x0 + arrow * np.cos(h[0]), y0 + arrow * np.sin(h[0])),
        xytext=(x0, y0),
        arrowprops={"arrowstyle": "->", "color": "red", "lw": 1.5},
        zorder=5,
    )


def _trajectories(ax: Axes, trajectories: Sequence[Trajectory]) -> None:
    if not trajectories:
        return
    speeds = np.concatenate([np.asarray(v, dtype=float).reshape(-1) for _, v in trajectories])
    norm = Normalize(vmin=float(np.nanmin(speeds)), vmax=float(np.nanmax(speeds)) + 1e-9)
    lc = None
    for xy, v in trajectories:
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        v = np.asarray(v, dtype=float).reshape(-1)
        if len(xy) < 2:
            continue
        segs = np.stack([xy[:-1], xy[1:]], axis=1)
        lc = LineCollection(segs, cmap="viridis", norm=norm, lw=1.6, zorder=4)
        lc.set_array(0.5 * (v[:-1] + v[1:]))
        ax.add_collection(lc)
    if lc is not None:
        ax.figure.colorbar(lc, ax=ax, label="speed [m/s]", shrink=0.8)


def save_figure(fig: Figure, path: str | os.PathLike[str], dpi: int = 150) -> Path:
    """Write fig to path atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi)
    return path


def save_track_plot(track: Track, path: str | os.PathLike[str]) -> Path:
    """A top-down plot of `track` (its name as the title) written to `path` (PNG)."""
    import matplotlib.pyplot as plt

    ax = plot_track(track, title=track.name)
    try:
        return save_figure(ax.figure, path)
    finally:
        plt.close(ax.figure)
