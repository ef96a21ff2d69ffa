"""A look at what `collect` recorded: a few episodes drawn on their tracks, coloured by speed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from s3.data.rollouts import read_manifest, read_shard
from s3.viz.track_plot import plot_track, save_figure

if TYPE_CHECKING:
    from s3.config import Params


def plot_sample_episodes(rollouts: Path, png: Path, params: Params, n: int = 4) -> Path:
    """Plot the longest episodes of the first shard, preferring ones on ice tracks."""
    from s3.data.collect import track_for

    shards = [s for s in read_manifest(rollouts)["shards"] if s["rows"] > 0]
    if not shards:
        return png
    df = read_shard(rollouts / shards[0]["file"])
    lengths = df.groupby("episode").agg(steps=("step", "size"), track=("track_id", "first"))
    lengths["ice"] = lengths["track"].str.endswith("-ice")
    chosen = lengths.sort_values(["ice", "steps"], ascending=False).index[:n]
    cols = 2 if len(chosen) > 1 else 1
    rows = int(np.ceil(len(chosen) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 6 * rows), squeeze=False)
    for ax, ep in zip(axes.flat, chosen):
        e = df[df.episode == ep]
        track = track_for(e.track_id.iloc[0], params.collect.tracks.model_dump_json())
        speed = np.hypot(e.vx.to_numpy(), e.vy.to_numpy())
        plot_track(
            track, [(e[["x", "y"]].to_numpy(), speed)], ax=ax, title=f"episode {ep} on {track.name} ({len(e)} steps)"
        )
    for ax in list(axes.flat)[len(chosen) :]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
    return png
