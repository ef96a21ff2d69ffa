"""The s3 pipeline as a Prefect 3 flow, read from DVC and run through DVC.

    python -m flows.pipeline [--root DIR] [TARGET ...]

- The stage graph is `dvc.repo.Repo(root).index.graph`; nothing here lists stages. Each stage is
  one task run (task `distill`, run `distill@ddm`) submitted with `wait_for` its upstream stages'
  runs, so Prefect records the edges (each task run's `task_inputs`) and the dashboard's flow-run
  graph draws the DAG. Each task calls `Repo(root).reproduce(targets=[stage], single_item=True)`
  and logs one line: ran, or up to date.
- Cache key: DVC's own run-cache hash of the stage (command, dependency hashes, parameter
  values; see dvc/stage/cache.py) plus the workspace path. An unchanged stage (DVC's verdict)
  whose key Prefect has seen shows as Cached and is not re-run. A stage DVC calls changed is
  always run, even when Prefect holds its key (e.g. params reverted, outputs deleted), and the
  record is rewritten afterwards.
- No task retries: the stage's own jobs are the one layer that retries (s3.compute.retry: shards,
  evaluation runs and source simulators, with backoff; a failure that will repeat is not retried),
  so a failed stage has already spent its retries.
- MLflow: the flow opens the parent run of this pipeline run and hands its id to the stage
  commands through $S3_MLFLOW_PARENT_RUN_ID; each family's stages log into its child run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.context import TaskRunContext
from prefect.task_runners import ThreadPoolTaskRunner

_DVC_LOCK = threading.Lock()  # one DVC operation at a time per workspace (DVC's repo lock)


@contextlib.contextmanager
def _repo(root: str) -> Iterator[Any]:
    """DVC's Repo at `root`, entered with the process in `root` (DVC's in-process API resolves
    some paths against the working directory); callers hold _DVC_LOCK."""
    from dvc.repo import Repo

    old = os.getcwd()
    os.chdir(root)
    try:
        with Repo(root) as repo:
            yield repo
    finally:
        os.chdir(old)


def _stage(repo: Any, name: str) -> Any:
    for st in repo.index.stages:
        if st.name == name:
            return st
    raise KeyError(f"no stage {name!r} in {repo.root_dir}/dvc.yaml")


def stage_generations(root: str, targets: list[str] | None = None) -> list[list[str]]:
    """Pipeline stage names (`name` or `name@key`) in dependency order, grouped into generations
    whose members can run independently; restricted to `targets` and their upstream if given."""
    import networkx as nx

    with _DVC_LOCK, _repo(root) as repo:
        g = repo.index.graph  # edges point from a stage to the stages it depends on
        stages = [s for s in g.nodes if getattr(s, "cmd", None)]
        keep = set(stages)
        if targets:
            want = [s for s in stages if s.name in targets or s.name.split("@")[0] in targets]
            if not want:
                raise KeyError(f"no stage matches {targets}")
            keep = set(want) | {d for s in want for d in nx.descendants(g, s)}
        sub = g.subgraph(keep).reverse(copy=True)
        return [sorted(s.name for s in gen) for gen in nx.topological_generations(sub)]


def stage_upstream(root: str, targets: list[str] | None = None) -> dict[str, list[str]]:
    """Each stage (in dependency order, restricted as stage_generations) -> the stages it directly
    depends on (DVC's graph: a dep that is another stage's output)."""
    with _DVC_LOCK, _repo(root) as repo:
        g = repo.index.graph
        by_name = {s.name: s for s in g.nodes if getattr(s, "cmd", None)}
    order = [n for gen in stage_generations(root, targets) for n in gen]
    return {n: sorted(u.name for u in g.successors(by_name[n]) if u.name in order) for n in order}


def _stage_hash(st: Any) -> str | None:
    """DVC's run-cache hash of the stage (command, dependency hashes, params, output paths).

    DVC keeps stages with a `persist` output (collect: resumable rollouts) out of its run cache;
    those are hashed the same way, since the key only has to say "same inputs".
    """
    from dvc.stage.cache import _can_hash, _get_cache_hash, _get_stage_hash
    from dvc.stage.serialize import to_single_stage_lockfile

    if _can_hash(st):
        return _get_stage_hash(st)
    hashed = st.cmd and st.deps and st.outs and all(d.protocol == "local" and d.get_hash() for d in st.deps)
    if hashed and any(o.persist for o in st.outs):
        return _get_cache_hash(to_single_stage_lockfile(st), key=True)
    return None


def _dvc_state(root: str, stage: str) -> tuple[str | None, bool]:
    """(DVC run-cache hash of the stage, whether DVC would re-run it)."""
    with _DVC_LOCK, _repo(root) as repo, repo.lock:
        st = _stage(repo, stage)
        changed = bool(st.changed())
        try:
            st.save_deps()
        except Exception:
            return None, True
        return _stage_hash(st), changed


def _key(root: str, stage: str, stage_hash: str) -> str:
    return hashlib.sha256(f"s3-dvc-stage:{Path(root).resolve()}:{stage}:{stage_hash}".encode()).hexdigest()


def stage_cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """Prefect cache key from DVC's dependency/params hash; None forces a run."""
    root, stage = parameters["root"], parameters["stage"]
    stage_hash, changed = _dvc_state(root, stage)
    if stage_hash is None:
        return None
    key = _key(root, stage, stage_hash)
    if changed and context.result_store is not None and context.result_store.exists(key):
        return None  # Prefect remembers this state but the workspace no longer holds it
    return key


def run_stage(root: str, stage: str) -> dict[str, Any]:
    """Run one DVC stage (only it, not its upstream); DVC skips it when nothing changed."""
    logger = get_run_logger()
    with _DVC_LOCK, _repo(root) as repo:
        st = _stage(repo, stage)
        ran = repo.reproduce(targets=[f"{st.dvcfile.path}:{st.name}"], single_item=True)
    ran_names = [s.name for s in ran]
    logger.info("%s: %s", stage, "ran" if ran_names else "up to date (DVC: nothing changed)")
    result = {"stage": stage, "ran": bool(ran_names)}
    ctx = TaskRunContext.get()
    if ctx is not None and ctx.result_store is not None:  # re-record the key after a forced run
        stage_hash, changed = _dvc_state(root, stage)
        if stage_hash is not None and not changed:
            ctx.result_store.write(obj=result, key=_key(root, stage, stage_hash))
    return result


def stage_task(base: str) -> Any:
    """The Prefect task for stages named `base`. No task retries: the stage's own jobs are the one
    layer that retries (s3.compute.retry), so a failed stage has already spent its retries."""
    return task(run_stage, name=base, task_run_name="{stage}", cache_key_fn=stage_cache_key, persist_result=True)


@flow(name="s3-pipeline", task_runner=ThreadPoolTaskRunner(max_workers=1), log_prints=True)
def pipeline(root: str = ".", targets: list[str] | None = None, mlflow: bool = True) -> dict[str, bool]:
    """Run the DVC pipeline at `root` stage by stage; returns {stage: ran}."""
    from s3 import tracking

    logger = get_run_logger()
    root = str(Path(root).resolve())
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # the `s3` command
    upstream = stage_upstream(root, targets)
    logger.info("%d stages: %s", len(upstream), ", ".join(upstream))
    parent = tracking.start_pipeline_run(root, tags={"s3.runner": "prefect"}) if mlflow and tracking.enabled() else None
    if parent:
        os.environ[tracking.PARENT_ENV] = parent
    ran: dict[str, bool] = {}
    status = "FAILED"
    try:
        futures: dict[str, Any] = {}
        for name, ups in upstream.items():  # dependency order: every upstream is submitted first
            t = stage_task(name.split("@")[0])
            futures[name] = t.submit(root=root, stage=name, wait_for=[futures[u] for u in ups])
        for name, f in futures.items():
            ran[name] = f.result()["ran"]
        status = "FINISHED"
    finally:
        if parent:
            os.environ.pop(tracking.PARENT_ENV, None)
            tracking.finish_pipeline_run(parent, root, status)
    return ran


def server_unreachable() -> str | None:
    """One line when $PREFECT_API_URL names a server that does not answer (else None: no server is
    needed, Prefect then runs the flow against a temporary local one)."""
    import httpx

    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return None
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=3.0).raise_for_status()
    except httpx.HTTPError:
        return f"no Prefect server answers at {url}: start one with `make ui` (another terminal), then run this again"
    return None


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", help="stages (default: the whole pipeline)")
    ap.add_argument("--root", default=".", help="the DVC workspace")
    ap.add_argument("--no-mlflow", action="store_true")
    a = ap.parse_args()
    if (why := server_unreachable()) is not None:
        sys.exit(why)
    print(pipeline(root=a.root, targets=a.targets or None, mlflow=not a.no_mlflow))
