"""Evaluation figures: trajectories on the track, speed/steering traces, a top-down lap GIF.

Built on the object API with Agg canvases (no pyplot), like s3.viz.track_plot.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.animation import FuncAnimation, PillowWriter
from matplotlib.figure import Figure

from s3.tracks.geometry import patch_span
from s3.tracks.track import Track
from s3.viz.track_plot import new_figure, plot_track


def track_figure(track: Track, trajectories: Sequence[Mapping[str, np.ndarray]], title: str) -> Figure:
    """The track (patches shaded) with every trajectory coloured by speed."""
    fig = new_figure((8.0, 8.0))
    ax = fig.add_subplot()
    plot_track(track, [(np.stack([tj["x"], tj["y"]], axis=1), tj["speed"]) for tj in trajectories], ax=ax, title=title)
    return fig


def traces_figure(traces: Mapping[str, Mapping[str, np.ndarray]], track: Track, title: str) -> Figure:
    """Speed and steering command against arc length, one line per labelled trajectory.

    Arc length is the track's s (wrapped), so runs from different starts line up; the track's
    friction patches are shaded.
    """
    fig = new_figure((10.0, 6.0))
    ax_v, ax_s = fig.subplots(2, 1, sharex=True)
    for label, tj in traces.items():
        a = np.mod(tj["s"][0] + tj["progress"], track.length)
        cut = np.nonzero(np.diff(a) < -0.5 * track.length)[0] + 1  # no line across the start line
        color = None  # the first part picks the next colour; the rest of the lap keeps it
        for part in np.split(np.arange(len(a)), cut):
            if len(part) < 2:
                continue
            (line,) = ax_v.plot(a[part], tj["speed"][part], lw=1.0, label=label if part[0] == 0 else None, color=color)
            color = line.get_color()
            ax_s.plot(a[part], tj["steering_cmd"][part], lw=0.8, color=color)
    for p in track.patches:
        start, span = patch_span(p, track.length)
        for ax in (ax_v, ax_s):
            for lo, hi in ((start, min(start + span, track.length)), (0.0, start + span - track.length)):
                if hi > lo:
                    ax.axvspan(lo, hi, color="lightblue", alpha=0.5, lw=0)
    ax_v.set_ylabel("speed [m/s]")
    ax_s.set_ylabel("steering command")
    ax_s.set_xlabel("arc length s [m]")
    ax_s.set_xlim(0.0, track.length)
    ax_v.legend(fontsize=7, ncol=3, loc="lower right")
    ax_v.set_title(title)
    return fig


def lap_gif(
    track: Track,
    traj: Mapping[str, np.ndarray],
    path: str | os.PathLike[str],
    title: str,
    frame_seconds: float = 1.0,
    fps: int = 12,
) -> Path:
    """A small top-down animation of one run (car marker and trail), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.asarray(traj["t"], dtype=float)
    dt = float(t[1] - t[0]) if len(t) > 1 else 1.0
    stride = max(1, int(round(frame_seconds / dt)))
    frames = list(range(0, len(t), stride))
    if frames[-1] != len(t) - 1:
        frames.append(len(t) - 1)
    fig = new_figure((4.5, 4.5))
    ax = fig.add_subplot()
    plot_track(track, ax=ax, title=title)
    ax.title.set_fontsize(8)
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.tick_params(labelsize=6)
    x, y = np.asarray(traj["x"]), np.asarray(traj["y"])
    (trail,) = ax.plot([], [], color="crimson", lw=1.2, zorder=7)
    (car,) = ax.plot([], [], "o", color="crimson", ms=5, zorder=8)
    label = ax.text(0.02, 0.98, "", transform=ax.transAxes, va="top", fontsize=7, zorder=9)

    def draw(k: int) -> tuple:
        trail.set_data(x[: k + 1], y[: k + 1])
        car.set_data([x[k]], [y[k]])
        label.set_text(f"t = {t[k]:5.1f} s   v = {traj['speed'][k]:4.1f} m/s")
        return trail, car, label

    anim = FuncAnimation(fig, draw, frames=frames, blit=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".gif", dir=path.parent)
    os.close(fd)
    try:
        anim.save(tmp, writer=PillowWriter(fps=fps), dpi=60)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; outputs are ordinary files
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
