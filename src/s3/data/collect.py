"""The `collect` stage: drive the source simulator and write validated Parquet shards.

Episodes are numbered; episode i draws everything from the seed sequence (seed, i), so the
dataset depends only on the seed, never on how episodes are spread over workers. Shard k holds
episodes [k*E, (k+1)*E) and is written atomically; a re-run skips shards that are already there
with the same provenance, so a killed collection resumes where it stopped.

Shards are the jobs of the executor (s3.compute.executor: a local pool, or Ray with
`compute.backend: ray`). A job returns its shard's bytes and this process writes them, so workers
need no access to the workspace. The executor alone retries, by the project's
one policy (`compute.retry`): a shard whose simulator connection was lost (`SimulatorLost`, the
cached simulator is dropped first) or whose worker process died is re-run. Because every episode
is a function of (seed, episode), a retried shard gives exactly the rows it would have given.
What is still missing after the retries is listed under `lost` in the manifest, and its shard is
redone by the next run; a simulator that cannot be reached at all stops the stage; physics
failures (an exploded state) repeat deterministically, so they are dropped at once and listed
under `dropped`.

The shards and the manifest hold only what the inputs determine, so the same params give the same
bytes. What the run measured about itself (wall clock, workers, retries) goes to the stage's run
record (`metrics_path`, records/collect.json for `s3 collect`), rewritten after every shard: a
re-run that reuses shards takes their seconds from it, so the dataset's whole collection cost
(`wall_seconds_total`) survives a killed run.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from pathlib import Path

import pandas as pd

from s3 import headline
from s3.compute.backend import executor_for
from s3.compute.executor import Job, Outcome
from s3.compute.retry import check_lost
from s3.config import Params
from s3.data.collect_records import (
    ShardResult,
    build_manifest,
    previous_hashes,
    previous_seconds,
    reusable,
    reused_shard,
    run_record,
)
from s3.data.episode import drive_episode, track_for
from s3.data.provenance import data_key
from s3.data.rollouts import (
    MANIFEST,
    sha256_file,
    shard_bytes,
    shard_metadata,
    shard_name,
    write_bytes_atomic,
    write_manifest,
)
from s3.data.schema import COLUMNS
from s3.io import workspace_lock
from s3.progress import progress
from s3.sim.backends import sim_backend
from s3.sim.factory import drop_worker_sim, instances

SHARD_RE = re.compile(r"shard-(\d{5})\.parquet")
# Test hook: "<episode>:<marker file>" makes the process that is about to drive <episode> exit at
# once (os._exit), the first time only (the marker file records that it happened); with an empty
# marker ("<episode>:") it exits every time. Reliability tests use it to kill a worker process.
FAULT_EXIT_ENV = "S3_FAULT_EXIT_AT_EPISODE"


def _say(msg: str) -> None:
    print(f"collect: {msg}", file=sys.stderr, flush=True)


def _injected_exit(episode: int) -> None:
    """The FAULT_EXIT_ENV test hook (a no-op unless that variable is set)."""
    spec = os.environ.get(FAULT_EXIT_ENV)
    if not spec:
        return
    at, _, marker = spec.partition(":")
    if int(at) != episode:
        return
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os._exit(70)


def collect_shard(params_json: str, index: int, key: str) -> tuple[ShardResult, bytes]:
    """Drive the episodes of shard `index` (an executor job, anywhere): (its result, its Parquet
    bytes), which the stage's process writes (a worker needs no access to the workspace)."""
    params = Params.model_validate_json(params_json)
    t0 = time.perf_counter()
    frames, dropped = [], []
    for ep in shard_episodes(params, index):
        _injected_exit(ep)
        df, why = drive_episode(params, ep)
        if df is None:
            dropped.append({"episode": ep, "reason": why})
        else:
            frames.append(df)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({k: [] for k in COLUMNS})
    meta = {"s3_collect_key": key, "s3_shard": str(index), "s3_dropped": json.dumps(dropped), "s3_lost": "[]"}
    data = shard_bytes(df, meta, shard_name(index))
    return ShardResult(index, shard_name(index), len(df), len(frames), dropped, time.perf_counter() - t0), data


def shard_episodes(params: Params, index: int) -> range:
    """The episode numbers shard `index` holds."""
    c = params.collect
    first = index * c.episodes_per_shard
    return range(first, min(first + c.episodes_per_shard, c.episodes))


def collect(params: Params, root: Path = Path("."), quiet: bool = False, metrics_path: Path | None = None) -> Path:
    """Run the stage; return the manifest path. `metrics_path` (under `root`): the run record
    (module docstring); None writes none, and reused shards then count as of unknown cost. The
    shards done show on stderr (s3.progress) whatever `quiet` says: collect prints no per-item detail."""
    c = params.collect
    out = root / c.out_dir
    record = root / metrics_path if metrics_path is not None else None
    key = data_key(params)
    n_shards = math.ceil(c.episodes / c.episodes_per_shard)
    # one BeamNG instance is one world: one worker per instance, its episodes one after another
    sims = instances(params.sim)
    workers = len(sims) if sims else (c.workers or os.cpu_count() or 1)
    params_json = params.model_dump_json()
    with workspace_lock(out, "s3 collect"):
        old_sha = previous_hashes(out)
        old_seconds = previous_seconds(record)
        (out / MANIFEST).unlink(missing_ok=True)  # until the new one is written, no dataset is claimed
        for stale in out.iterdir():
            m = SHARD_RE.fullmatch(stale.name)
            if (m and int(m.group(1)) >= n_shards) or (stale.name.startswith(".shard-") and stale.suffix == ".tmp"):
                stale.unlink()
        results: dict[int, ShardResult] = {}
        todo = []
        for k in range(n_shards):
            path = out / shard_name(k)
            if path.exists() and reusable(path, key, old_sha.get(path.name)):
                meta = shard_metadata(path)
                seconds = old_seconds.get((path.name, old_sha.get(path.name) or sha256_file(path)), math.nan)
                results[k] = reused_shard(path, k, json.loads(meta.get("s3_dropped", "[]")), seconds)
            else:
                todo.append(k)
        t0 = time.perf_counter()
        with progress("collect", n_shards, "shards", earlier=n_shards - len(todo)) as bar:  # some kept from before

            def done(i: int, o: Outcome) -> None:
                results[todo[i]] = _shard_result(params, todo[i], out, o)
                if record is not None:  # a killed run still leaves what its finished shards cost
                    headline.write_record(
                        record,
                        run_record(params, results, out, time.perf_counter() - t0, workers, complete=False),
                        headline.collect,
                    )
                bar.advance()

            preload = (
                "s3.data.collect",
                "s3.sim.factory",
                sim_backend(params.sim).module,
            )
            executor = executor_for(params.compute, "collect", workers, preload, "collect", sims)
            try:
                executor.run([Job(f"shard {k}", collect_shard, (params_json, k, key)) for k in todo], done)
            finally:
                drop_worker_sim()  # this process's, if the shards ran here
        wall = time.perf_counter() - t0
        manifest = build_manifest(params, [results[k] for k in range(n_shards)], out)
        path = write_manifest(out, manifest)
        if record is not None:
            headline.write_record(
                record, run_record(params, results, out, wall, workers, complete=True), headline.collect
            )
        if manifest["episodes_lost"]:
            _say(
                f"{manifest['episodes_lost']} episode(s) lost after {params.compute.retry.retries} retries "
                f"(episodes {', '.join(str(d['episode']) for d in manifest['lost'])}; see {path}); "
                "re-run `s3 collect` to collect them"
            )
        first = next((d.get("reason") for d in manifest["lost"]), None)
        check_lost(
            "collect", manifest["episodes_lost"], c.episodes, params.compute.fail_at_lost_share, first, str(path)
        )
        from s3.data.samples import sample_episodes
        from s3.viz.collect_plots import plot_sample_episodes

        tracks_json = c.tracks.model_dump_json()
        episodes = sample_episodes(out, lambda track_id: track_for(track_id, tracks_json))
        plot_sample_episodes(episodes, root / c.plot_dir / "sample_episodes.png")
    return path


def _shard_result(params: Params, index: int, out: Path, o: Outcome) -> ShardResult:
    """The shard job's result, with its retries noted; a shard given up: no file, every episode lost."""
    eps = shard_episodes(params, index)
    retried = (
        [{"shard": index, "episodes": [eps.start, eps.stop - 1], "retries": o.retries, "causes": o.causes}]
        if o.retries
        else []
    )
    if o.ok:
        r, data = o.value
        write_bytes_atomic(out / r.file, data)
        r.retried = retried
        return r
    (out / shard_name(index)).unlink(missing_ok=True)
    reason = o.error if o.causes[-1] == "worker process died" else f"{o.causes[-1]} {o.retries + 1} times: {o.error}"
    lost = [{"episode": ep, "reason": reason} for ep in eps]
    return ShardResult(index, shard_name(index), 0, 0, lost=lost, retried=retried, written=False)
