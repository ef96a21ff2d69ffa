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
record (`metrics_path`, metrics/collect.json for `s3 collect`), rewritten after every shard: a
re-run that reuses shards takes their seconds from it, so the dataset's whole collection cost
(`wall_seconds_total`) survives a killed run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from s3 import __version__
from s3.compute.backend import executor_for
from s3.compute.executor import Job, Outcome
from s3.compute.retry import check_lost
from s3.config import Params
from s3.data.driver import ExplorationDriver
from s3.data.rollouts import (
    MANIFEST,
    RolloutError,
    read_manifest,
    read_shard,
    sha256_file,
    shard_bytes,
    shard_metadata,
    shard_name,
    write_bytes_atomic,
    write_manifest,
)
from s3.data.schema import COLUMNS, SCHEMA_VERSION
from s3.io import workspace_lock, write_json_atomic
from s3.progress import progress
from s3.sim.backends import sim_backend
from s3.sim.base import Control, SimulatorError, SimulatorLost, SourceSim, VehicleState
from s3.sim.factory import drop_worker_sim, instances, worker_sim
from s3.tracks.generate import procedural_track
from s3.tracks.track import Track

SHARD_RE = re.compile(r"shard-(\d{5})\.parquet")
MAX_SPEED = 120.0  # m/s: beyond this a state is an explosion, not driving
# Test hook: "<episode>:<marker file>" makes the process that is about to drive <episode> exit at
# once (os._exit), the first time only (the marker file records that it happened); with an empty
# marker ("<episode>:") it exits every time. Reliability tests use it to kill a worker process.
FAULT_EXIT_ENV = "S3_FAULT_EXIT_AT_EPISODE"


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


@lru_cache(maxsize=64)
def track_for(track_id: str, params_json: str) -> Track:
    """Rebuild a collection track from its id ("proc<seed>" or "proc<seed>-ice")."""
    from s3.tracks.generate import ProceduralTrackParams

    tp = ProceduralTrackParams.model_validate_json(params_json)
    seed = int(track_id.removeprefix("proc").removesuffix("-ice"))
    track = procedural_track(seed, tp)
    return track if track_id.endswith("-ice") else track.without_patches()


def episode_plan(params: Params, episode: int) -> tuple[np.random.Generator, str]:
    """The episode's own random stream and the track it runs on."""
    rng = np.random.default_rng(np.random.SeedSequence([params.seed, episode]))
    c = params.collect
    track_seed = params.seed * 100_003 + int(rng.integers(c.n_tracks))
    ice = rng.random() < c.ice_episode_fraction
    return rng, f"proc{track_seed}" + ("-ice" if ice else "")


def _row(ep: int, step: int, st: VehicleState, track_id: str, cmd: Control, s: float, d: float, off: bool) -> list:
    return [
        ep,
        step,
        st.time,
        track_id,
        st.x,
        st.y,
        st.yaw,
        st.vx,
        st.vy,
        st.yaw_rate,
        st.steer,
        *map(float, st.wheel_speed),
        cmd.steering,
        cmd.throttle,
        cmd.brake,
        *map(float, st.friction),
        float(np.mean(st.friction)),
        s,
        d,
        off,
    ]


def run_episode(sim: SourceSim, params: Params, episode: int) -> tuple[pd.DataFrame | None, str]:
    """Drive one episode; return its rows, or None and the reason it was dropped."""
    c = params.collect
    rng, track_id = episode_plan(params, episode)
    track = track_for(track_id, c.tracks.model_dump_json())
    driver = ExplorationDriver(track, c.driver, sim.wheelbase, sim.max_steer, sim.control_dt, rng)

    s0 = rng.uniform(0.0, track.length)
    half = 0.5 * float(sum(w[0] for w in track.width_at(np.array([s0]))))
    x0, y0, h0 = (float(a[0]) for a in track.pose_at(np.array([s0]), np.array([rng.uniform(-0.4, 0.4) * half])))
    speed0 = min(rng.uniform(*c.start_speed), driver.target_speed(s0))
    rows: list[list] = []
    try:
        state = sim.reset(track, x0, y0, h0 + rng.normal(0.0, 0.05), speed0)
        for step in range(c.episode_steps):
            if not state.is_finite() or math.hypot(state.vx, state.vy) > MAX_SPEED:
                return None, "non-finite or exploded state"
            proj = track.project(np.array([[state.x, state.y]]), np.array([state.yaw]))
            s, d, herr = float(proj.s[0]), float(proj.d[0]), float(proj.heading_error[0])
            edge = float(proj.w_left[0]) if d > 0 else float(proj.w_right[0])
            cmd = driver.act(state, s)
            rows.append(_row(episode, step, state, track_id, cmd, s, d, abs(d) > edge))
            lost = abs(d) > edge + c.off_track_margin
            backwards = state.vx < -1.0 or (abs(herr) > 2.0 and state.vx > 2.0)
            if lost or backwards or step == c.episode_steps - 1:
                break
            state = sim.step(cmd)
    except SimulatorLost:
        raise  # not the episode's fault: the shard is retried on a fresh simulator
    except SimulatorError as e:
        return None, f"simulator error: {e}"
    return pd.DataFrame(rows, columns=list(COLUMNS)), ""


def _say(msg: str) -> None:
    print(f"collect: {msg}", file=sys.stderr, flush=True)


def drive_episode(params: Params, episode: int) -> tuple[pd.DataFrame | None, str]:
    """run_episode on this process's simulator: (rows, or None and why the episode was dropped).

    A lost connection drops the cached simulator and propagates (the shard is retried); no
    simulator to be had at all is `SimulatorUnreachable`.
    """
    sim = worker_sim(params.sim)
    try:
        return run_episode(sim, params, episode)
    except SimulatorLost:
        drop_worker_sim()
        raise


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


# BeamNG params that say where and how patiently to reach the simulator, not what it simulates
BEAMNG_NOT_DATA = {
    "host",
    "port",
    "instances",
    "request_timeout",
    "load_timeout",
    "bng_home",
    "check_position_m",
    "check_heading_deg",
    "check_speed_m_s",
}


def data_params(params: Params) -> dict[str, Any]:
    """Every param that changes a row, and none that does not (worker count, paths, the simulator's address)."""
    return {
        "seed": params.seed,
        "sim": params.sim.model_dump(mode="json", exclude={"beamng": BEAMNG_NOT_DATA}),
        "collect": params.collect.model_dump(mode="json", exclude={"workers", "out_dir", "plot_dir"}),
    }


def data_key(params: Params) -> str:
    """Provenance of the data: data_params, the s3, schema and simulator versions."""
    blob = {
        **data_params(params),
        "s3": __version__,
        "schema": SCHEMA_VERSION,
        "simulator": sim_backend(params.sim).version(),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def _reusable(path: Path, key: str, old_sha: str | None) -> bool:
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
        old_sha = _previous_hashes(out)
        old_seconds = _previous_seconds(record)
        (out / MANIFEST).unlink(missing_ok=True)  # until the new one is written, no dataset is claimed
        for stale in out.iterdir():
            m = SHARD_RE.fullmatch(stale.name)
            if (m and int(m.group(1)) >= n_shards) or (stale.name.startswith(".shard-") and stale.suffix == ".tmp"):
                stale.unlink()
        results: dict[int, ShardResult] = {}
        todo = []
        for k in range(n_shards):
            path = out / shard_name(k)
            if path.exists() and _reusable(path, key, old_sha.get(path.name)):
                meta = shard_metadata(path)
                seconds = old_seconds.get((path.name, old_sha.get(path.name) or sha256_file(path)), math.nan)
                results[k] = _reused(path, k, json.loads(meta.get("s3_dropped", "[]")), seconds)
            else:
                todo.append(k)
        t0 = time.perf_counter()
        with progress("collect", n_shards, "shards", earlier=n_shards - len(todo)) as bar:  # some kept from before

            def done(i: int, o: Outcome) -> None:
                results[todo[i]] = _shard_result(params, todo[i], out, o)
                if record is not None:  # a killed run still leaves what its finished shards cost
                    write_json_atomic(
                        record, _run_record(params, results, out, time.perf_counter() - t0, workers, complete=False)
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
        manifest = _manifest(params, [results[k] for k in range(n_shards)], out)
        path = write_manifest(out, manifest)
        if record is not None:
            write_json_atomic(record, _run_record(params, results, out, wall, workers, complete=True))
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


def _previous_hashes(out: Path) -> dict[str, str]:
    """Shard hashes from the last complete run's manifest (empty if there is none)."""
    try:
        return {s["file"]: s["sha256"] for s in read_manifest(out).get("shards", [])}
    except (RolloutError, KeyError, TypeError):
        return {}


def _previous_seconds(record: Path | None) -> dict[tuple[str, str], float]:
    """(file, sha256) -> seconds of the shards an earlier run recorded (empty if there is no record)."""
    try:
        shards = json.loads(record.read_text())["shards"] if record is not None else []
        return {(s["file"], s["sha256"]): float(s["seconds"]) for s in shards if s.get("seconds") is not None}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _reused(path: Path, index: int, dropped: list[dict[str, Any]], seconds: float) -> ShardResult:
    """A shard an earlier run already wrote with the same provenance (seconds: what it took then)."""
    episodes = pq.read_table(path, columns=["episode"]).column("episode").to_numpy()
    return ShardResult(index, path.name, len(episodes), len(np.unique(episodes)), dropped, seconds, reused=True)


def _run_record(
    params: Params, results: dict[int, ShardResult], out: Path, wall: float, workers: int, complete: bool
) -> dict[str, Any]:
    """What this run measured about itself: metrics/collect.json (not part of the dataset)."""
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


def _manifest(params: Params, results: list[ShardResult], out: Path) -> dict[str, Any]:
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
