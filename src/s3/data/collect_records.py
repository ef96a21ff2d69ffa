"""What the `collect` stage writes beside the shards, and what it reads back from an earlier run.

ShardResult                      one shard's outcome (rows, episodes, dropped / lost / retried, seconds)
reusable(path, key, old_sha)     an existing shard is kept: its key, intact, nothing lost
reused_shard(path, index, ...)   the ShardResult of a kept shard
previous_hashes(out)             file -> sha256 from the last complete run's manifest ({} if none)
previous_seconds(record)         (file, sha256) -> seconds from an earlier run record ({} if none)
build_manifest(params, results, out)          data/rollouts/manifest.json: a function of the inputs only
run_record(params, results, out, wall, ...)   records/collect.json: what the run measured (seconds, workers)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from s3 import __version__
from s3.config import Params
from s3.data.provenance import data_key, data_params
from s3.data.rollouts import RolloutError, read_manifest, read_shard, sha256_file, shard_metadata
from s3.data.schema import COLUMNS, SCHEMA_VERSION
from s3.sim.backends import sim_backend


@dataclass
class ShardResult:
    """What one shard produced (rows kept, episodes dropped and why)."""

    index: int
    file: str
    rows: int
    episodes: int
    dropped: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    reused: bool = False
    lost: list[dict[str, Any]] = field(default_factory=list)
    retried: list[dict[str, Any]] = field(default_factory=list)
    written: bool = True
    sha256: str = ""  # of the written file, once computed (_sha)


def reusable(path: Path, key: str, old_sha: str | None) -> bool:
    """An existing shard is kept only if it has our provenance, is intact and lost nothing."""
    meta = shard_metadata(path)
    if meta.get("s3_collect_key") != key or json.loads(meta.get("s3_lost", "[]")):
        return False
    if old_sha is not None:
        return sha256_file(path) == old_sha
    try:
        read_shard(path)
    except RolloutError:
        return False
    return True


def previous_hashes(out: Path) -> dict[str, str]:
    """Shard hashes from the last complete run's manifest (empty if there is none)."""
    try:
        return {s["file"]: s["sha256"] for s in read_manifest(out).get("shards", [])}
    except (RolloutError, KeyError, TypeError):
        return {}


def previous_seconds(record: Path | None) -> dict[tuple[str, str], float]:
    """(file, sha256) -> seconds of the shards an earlier run recorded (empty if there is no record)."""
    try:
        shards = json.loads(record.read_text())["shards"] if record is not None else []
        return {(s["file"], s["sha256"]): float(s["seconds"]) for s in shards if s.get("seconds") is not None}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def reused_shard(path: Path, index: int, dropped: list[dict[str, Any]], seconds: float) -> ShardResult:
    """A shard an earlier run already wrote with the same provenance (seconds: what it took then)."""
    episodes = pq.read_table(path, columns=["episode"]).column("episode").to_numpy()
    return ShardResult(index, path.name, len(episodes), len(np.unique(episodes)), dropped, seconds, reused=True)


def run_record(
    params: Params, results: dict[int, ShardResult], out: Path, wall: float, workers: int, complete: bool
) -> dict[str, Any]:
    """What this run measured about itself: records/collect.json (not part of the dataset)."""
    done = [results[k] for k in sorted(results)]
    shard_seconds = [r.seconds for r in done if r.written]
    shards = [
        {
            "file": r.file,
            "sha256": _sha(r, out),
            "seconds": round(r.seconds, 3) if math.isfinite(r.seconds) else None,
            "reused": r.reused,
        }
        for r in done
        if r.written
    ]
    return {
        "collect_key": data_key(params),
        "complete": complete,
        "wall_seconds_this_run": round(wall, 2),
        "workers": workers,
        # the whole dataset's collection cost, including shards reused from earlier runs (a reused
        # shard no record knows makes it null): sum of per-shard seconds / workers
        "wall_seconds_total": round(sum(shard_seconds) / workers, 2)
        if all(map(math.isfinite, shard_seconds))
        else None,
        "retried_this_run": [d for r in done if not r.reused for d in r.retried],
        "shards": shards,
    }


def _sha(r: ShardResult, out: Path) -> str:
    """The written shard's SHA-256, hashed once."""
    r.sha256 = r.sha256 or sha256_file(out / r.file)
    return r.sha256


def build_manifest(params: Params, results: list[ShardResult], out: Path) -> dict[str, Any]:
    """The dataset's manifest: a function of the inputs only (byte-stable)."""
    sim = params.sim
    dropped = [d for r in results for d in r.dropped]
    lost = [d for r in results for d in r.lost]
    rows = sum(r.rows for r in results)
    return {
        "s3_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "simulator": sim.backend,
        "simulator_version": sim_backend(sim).version(),
        "control_dt": sim.control_dt,
        "rows": rows,
        "episodes": sum(r.episodes for r in results),
        "episodes_dropped": len(dropped),
        "dropped": dropped,
        "episodes_lost": len(lost),
        "lost": lost,
        "collect_key": data_key(params),
        "shards": [
            {"file": r.file, "rows": r.rows, "episodes": r.episodes, "sha256": _sha(r, out)}
            for r in results
            if r.written
        ],
        "columns": {name: {"unit": unit, "description": desc} for name, (_, unit, desc) in COLUMNS.items()},
        "params": data_params(params),  # not the worker count or the paths: the same data, the same bytes
    }
