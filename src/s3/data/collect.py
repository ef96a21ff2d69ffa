"""The `collect` stage: drive the source simulator and write validated Parquet shards.

Episodes are numbered; episode i draws everything from the seed sequence (seed, i), so the
dataset depends only on the seed, never on how episodes are spread over workers. Shard k holds
episodes [k*E, (k+1)*E) and is written atomically; a re-run skips shards that are already there
with the same provenance, so a killed collection resumes where it stopped.

Faults that may clear up are retried, `collect.retries` times with exponential backoff from
`collect.retry_backoff_s`: an episode whose simulator connection was lost (`SimulatorLost`) is
re-driven on a fresh simulator, and a shard whose worker process died is re-run in a fresh
process (alone, so that a crash is charged to the shard that caused it). Because every episode
is a function of (seed, episode), a retried episode gives exactly the rows it would have given.
What is still missing after the retries is listed under `lost` in the manifest, and its shard is
redone by the next run; physics failures (an exploded state) repeat deterministically, so they
are dropped at once and listed under `dropped`.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import os
import re
import sys
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from rich.progress import Progress

from s3 import __version__
from s3.config import Params
from s3.data.driver import ExplorationDriver
from s3.data.rollouts import (
    MANIFEST,
    RolloutError,
    read_manifest,
    read_shard,
    sha256_file,
    shard_metadata,
    shard_name,
    write_manifest,
    write_shard,
)
from s3.data.schema import COLUMNS, SCHEMA_VERSION
from s3.io import workspace_lock
from s3.sim.base import Control, SimulatorError, SimulatorLost, SourceSim, VehicleState
from s3.sim.factory import make_sim
from s3.tracks.generate import procedural_track
from s3.tracks.track import Track
from s3.workers import exit_with_parent

SHARD_RE = re.compile(r"shard-(\d{5})\.parquet")
MAX_SPEED = 120.0  # m/s: beyond this a state is an explosion, not driving
MAX_BACKOFF_S = 60.0
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
        ep, step, st.time, track_id, st.x, st.y, st.yaw, st.vx, st.vy, st.yaw_rate, st.steer,
        *map(float, st.wheel_speed), cmd.steering, cmd.throttle, cmd.brake,
        *map(float, st.friction), float(np.mean(st.friction)), s, d, off,
    ]  # fmt: skip


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
        raise  # not the episode's fault: the caller retries it on a fresh simulator
    except SimulatorError as e:
        return None, f"simulator error: {e}"
    return pd.DataFrame(rows, columns=list(COLUMNS)), ""


def backoff_seconds(params: Params, attempt: int) -> float:
    """Wait before retry number `attempt` + 1: exponential from retry_backoff_s, capped."""
    return min(params.collect.retry_backoff_s * 2.0**attempt, MAX_BACKOFF_S)


def _say(msg: str) -> None:
    print(f"collect: {msg}", file=sys.stderr, flush=True)


def drive_episode(params: Params, episode: int) -> tuple[pd.DataFrame | None, str, int, bool]:
    """run_episode on this process's simulator, retrying a lost connection with backoff.

    Returns (rows or None, why dropped or lost, retries used, lost). A simulator that cannot even
    be reached on the last attempt stops the collection (SimulatorLost): every further episode
    would only wait out its retries. Finished shards stay; a re-run resumes.
    """
    retries = params.collect.retries
    error = ""
    for attempt in range(retries + 1):
        connected = False
        try:
            sim = _worker_sim(params)
            connected = True
            df, why = run_episode(sim, params, episode)
            return df, why, attempt, False
        except SimulatorLost as e:
            error = str(e)
            _drop_worker_sim()
            if not connected and attempt == retries:
                raise SimulatorLost(f"{error} (episode {episode}, {retries + 1} attempts; finished shards are kept)") from None
            if attempt < retries:
                wait_s = backoff_seconds(params, attempt)
                _say(f"episode {episode}: {error.rstrip('.')}; retry {attempt + 1}/{retries} in {wait_s:g} s")
                time.sleep(wait_s)
    return None, f"simulator lost {retries + 1} times: {error}", retries, True


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


_SIM: tuple[str, SourceSim] | None = None


def _worker_sim(params: Params) -> SourceSim:
    """One simulator per process, rebuilt whenever the sim params change."""
    global _SIM
    key = params.sim.model_dump_json()
    if _SIM is None or _SIM[0] != key:
        if _SIM is not None:
            _SIM[1].close()
        _SIM = (key, make_sim(params.sim))
    return _SIM[1]


def _drop_worker_sim() -> None:
    """Forget this process's simulator after a lost connection (the next episode makes a new one)."""
    global _SIM
    if _SIM is not None:
        try:
            _SIM[1].close()
        except Exception:
            pass
        _SIM = None


def data_key(params: Params) -> str:
    """Provenance of the data: every input that changes a row, and nothing that does not."""
    blob = json.dumps(
        {
            "seed": params.seed,
            "sim": params.sim.model_dump(mode="json", exclude={"beamng": {"host", "port", "socket_timeout", "bng_home"}}),
            "collect": params.collect.model_dump(mode="json", exclude={"workers", "out_dir", "plot_dir", "retries", "retry_backoff_s"}),
            "s3": __version__,
            "schema": SCHEMA_VERSION,
            "simulator": _sim_version(params.sim.backend),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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


def collect_shard(params_json: str, index: int, out_dir: str, key: str) -> ShardResult:
    """Drive the episodes of shard `index` and write it (runs in a worker process)."""
    params = Params.model_validate_json(params_json)
    t0 = time.perf_counter()
    frames, dropped, lost, retried = [], [], [], []
    for ep in shard_episodes(params, index):
        _injected_exit(ep)
        df, why, retries, was_lost = drive_episode(params, ep)
        if retries:
            retried.append({"episode": ep, "retries": retries, "cause": "simulator lost"})
        if was_lost:
            lost.append({"episode": ep, "reason": why})
        elif df is None:
            dropped.append({"episode": ep, "reason": why})
        else:
            frames.append(df)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({k: [] for k in COLUMNS})
    path = Path(out_dir) / shard_name(index)
    seconds = time.perf_counter() - t0  # kept in the shard, so a resumed run still knows what the data cost
    meta = {"s3_collect_key": key, "s3_shard": str(index), "s3_dropped": json.dumps(dropped), "s3_lost": json.dumps(lost),
            "s3_seconds": f"{seconds:.3f}"}  # fmt: skip
    write_shard(path, df, meta)
    return ShardResult(index, path.name, len(df), len(frames), dropped, seconds, lost=lost, retried=retried)


def shard_episodes(params: Params, index: int) -> range:
    """The episode numbers shard `index` holds."""
    c = params.collect
    first = index * c.episodes_per_shard
    return range(first, min(first + c.episodes_per_shard, c.episodes))


def collect(params: Params, root: Path = Path("."), quiet: bool = False) -> Path:
    """Run the stage; return the manifest path."""
    c = params.collect
    out = root / c.out_dir
    key = data_key(params)
    n_shards = math.ceil(c.episodes / c.episodes_per_shard)
    # one BeamNG instance is one world: its episodes run one after another
    workers = 1 if params.sim.backend == "beamng" else (c.workers or os.cpu_count() or 1)
    params_json = params.model_dump_json()
    with workspace_lock(out, "s3 collect"):
        old_sha = _previous_hashes(out)
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
                results[k] = _reused(path, k, json.loads(meta.get("s3_dropped", "[]")), float(meta.get("s3_seconds", "nan")))
            else:
                todo.append(k)
        t0 = time.perf_counter()
        with Progress(disable=quiet, transient=False) as progress:
            bar = progress.add_task("collect", total=n_shards, completed=n_shards - len(todo))
            if todo and workers == 1:
                for k in todo:
                    results[k] = collect_shard(params_json, k, str(out), key)
                    progress.advance(bar)
            elif todo:
                for r in _collect_in_pool(params, todo, workers, str(out), key):
                    results[r.index] = r
                    progress.advance(bar)
        wall = time.perf_counter() - t0
        manifest = _manifest(params, [results[k] for k in range(n_shards)], out, wall, workers)
        path = write_manifest(out, manifest)
        if manifest["episodes_lost"]:
            _say(
                f"{manifest['episodes_lost']} episode(s) lost after {c.retries} retries "
                f"(episodes {', '.join(str(d['episode']) for d in manifest['lost'])}; see {path}); "
                "re-run `s3 collect` to collect them"
            )
        from s3.viz.collect_plots import plot_sample_episodes

        plot_sample_episodes(out, root / c.plot_dir / "sample_episodes.png", params)
    return path


def _collect_in_pool(params: Params, todo: list[int], workers: int, out_dir: str, key: str) -> Iterator[ShardResult]:
    """Run shards in worker processes, yielding each result; survive workers that die.

    When a worker dies, the pool breaks and every shard in flight fails with it. Those shards are
    re-run one at a time in a pool of their own, so that a death there is the shard's own; it is
    retried `collect.retries` times with backoff, then its episodes are reported lost.
    """
    c = params.collect
    params_json = params.model_dump_json()
    ctx = mp.get_context("spawn")
    fresh, suspects = deque(todo), deque[int]()
    deaths: dict[int, int] = {}  # deaths while running alone: the shard's own
    reruns: dict[int, int] = {}  # every re-run after a death, shared or not
    while fresh or suspects:
        alone = bool(suspects)
        queue = suspects if alone else fresh
        width = 1 if alone else min(workers, len(fresh))
        broken: list[int] = []
        with ProcessPoolExecutor(max_workers=width, mp_context=ctx, initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:
            running: dict[Future[ShardResult], int] = {}
            while (queue and not broken) or running:
                while queue and not broken and len(running) < width:
                    k = queue.popleft()
                    running[pool.submit(collect_shard, params_json, k, out_dir, key)] = k
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    k = running.pop(fut)
                    try:
                        r = fut.result()
                    except BrokenProcessPool:
                        broken.append(k)
                        continue
                    if reruns.get(k):
                        r.retried.append(_rerun_note(params, k, reruns[k]))
                    yield r
        for k in broken:
            reruns[k] = reruns.get(k, 0) + 1
        if not alone:
            if broken:
                _say(f"a worker process died; re-running shard(s) {', '.join(map(str, sorted(broken)))} one at a time")
            suspects.extend(sorted(broken))
            continue
        for k in broken:
            deaths[k] = deaths.get(k, 0) + 1
            if deaths[k] > c.retries:
                yield _lost_shard(params, k, Path(out_dir), deaths[k])
                continue
            wait_s = backoff_seconds(params, deaths[k] - 1)
            _say(f"shard {k}: worker process died; retry {deaths[k]}/{c.retries} in {wait_s:g} s")
            time.sleep(wait_s)
            suspects.appendleft(k)


def _rerun_note(params: Params, index: int, reruns: int) -> dict[str, Any]:
    eps = shard_episodes(params, index)
    return {"shard": index, "episodes": [eps.start, eps.stop - 1], "retries": reruns, "cause": "worker process died"}


def _lost_shard(params: Params, index: int, out: Path, deaths: int) -> ShardResult:
    """A shard whose worker died on every attempt: no file, every episode reported lost."""
    (out / shard_name(index)).unlink(missing_ok=True)
    reason = f"worker process died {deaths} times"
    lost = [{"episode": ep, "reason": reason} for ep in shard_episodes(params, index)]
    return ShardResult(index, shard_name(index), 0, 0, lost=lost, retried=[_rerun_note(params, index, deaths - 1)], written=False)


def _previous_hashes(out: Path) -> dict[str, str]:
    """Shard hashes from the last complete run's manifest (empty if there is none)."""
    try:
        return {s["file"]: s["sha256"] for s in read_manifest(out).get("shards", [])}
    except (RolloutError, KeyError, TypeError):
        return {}


def _reused(path: Path, index: int, dropped: list[dict[str, Any]], seconds: float) -> ShardResult:
    """A shard an earlier run already wrote with the same provenance (seconds: what it took then)."""
    episodes = pq.read_table(path, columns=["episode"]).column("episode").to_numpy()
    return ShardResult(index, path.name, len(episodes), len(np.unique(episodes)), dropped, seconds, reused=True)


def _manifest(params: Params, results: list[ShardResult], out: Path, wall: float, workers: int) -> dict[str, Any]:
    sim = params.sim
    shard_seconds = [r.seconds for r in results if r.written]
    dropped = [d for r in results for d in r.dropped]
    lost = [d for r in results for d in r.lost]
    retried = [d for r in results if not r.reused for d in r.retried]
    rows = sum(r.rows for r in results)
    return {
        "s3_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "simulator": sim.backend,
        "simulator_version": _sim_version(sim.backend),
        "control_dt": sim.control_dt,
        "rows": rows,
        "episodes": sum(r.episodes for r in results),
        "episodes_dropped": len(dropped),
        "dropped": dropped,
        "episodes_lost": len(lost),
        "lost": lost,
        "retried_this_run": retried,
        "collect_key": data_key(params),
        "wall_seconds_this_run": round(wall, 2),
        "workers": workers,
        # the whole dataset's collection cost, including shards reused from earlier runs (shards
        # written before s3_seconds existed make it null): sum of per-shard seconds / workers
        "wall_seconds_total": round(sum(shard_seconds) / workers, 2) if all(map(math.isfinite, shard_seconds)) else None,
        "shards": [{"file": r.file, "rows": r.rows, "episodes": r.episodes, "sha256": sha256_file(out / r.file)} for r in results if r.written],
        "columns": {name: {"unit": unit, "description": desc} for name, (_, unit, desc) in COLUMNS.items()},
        "params": params.model_dump(mode="json", include={"seed", "sim", "collect"}),
    }


def _sim_version(backend: str) -> str:
    if backend == "mujoco":
        import mujoco

        return f"mujoco {mujoco.__version__}"
    if backend == "beamng":
        from s3.sim.beamng import sim_version

        return sim_version()
    return "unknown"
