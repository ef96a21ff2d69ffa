"""The episodes the collect stage draws (plots/collect/sample_episodes.png): the longest of the
first non-empty shard, episodes on ice tracks first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from s3.data.rollouts import read_manifest, read_shard
from s3.tracks.track import Track
from s3.viz.collect_plots import EpisodePath


def sample_episodes(rollouts: Path, track_of: Callable[[str], Track], n: int = 4) -> list[EpisodePath]:
    """Up to `n` episodes of the rollouts at `rollouts`, each on the track `track_of(track_id)` rebuilds."""
    shards = [s for s in read_manifest(rollouts)["shards"] if s["rows"] > 0]
    if not shards:
        return []
    df = read_shard(rollouts / shards[0]["file"])
    lengths = df.groupby("episode").agg(steps=("step", "size"), track=("track_id", "first"))
    lengths["ice"] = lengths["track"].str.endswith("-ice")
    chosen = lengths.sort_values(["ice", "steps"], ascending=False).index[:n]
    out = []
    for ep in chosen:
        e = df[df.episode == ep]
        track = track_of(e.track_id.iloc[0])
        speed = np.hypot(e.vx.to_numpy(), e.vy.to_numpy())
        title = f"episode {ep} on {track.name} ({len(e)} steps)"
        out.append(EpisodePath(track, e[["x", "y"]].to_numpy(), speed, title))
    return out
