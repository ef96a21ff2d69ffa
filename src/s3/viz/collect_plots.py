"""A look at what `collect` recorded: a few episodes drawn on their tracks, coloured by speed.

Plain data in (tracks and arrays); which episodes to show is the collect stage's choice
(s3.data.samples).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from s3.tracks.track import Track
from s3.viz.track_plot import plot_track, save_figure


class EpisodePath(NamedTuple):
    """One episode to draw: its track, the car's positions [T, 2] (m) and speeds [T] (m/s), a title."""

    track: Track
    xy: np.ndarray
    speed: np.ndarray
    title: str


def plot_sample_episodes(episodes: Sequence[EpisodePath], png: Path) -> Path:
    """Draw `episodes` on their tracks, two per row; nothing is written when there are none."""
    if not episodes:
        return png
    cols = 2 if len(episodes) > 1 else 1
    rows = int(np.ceil(len(episodes) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 6 * rows), squeeze=False)
    for ax, ep in zip(axes.flat, episodes):
        plot_track(ep.track, [(ep.xy, ep.speed)], ax=ax, title=ep.title)
    for ax in list(axes.flat)[len(episodes) :]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
    return png
