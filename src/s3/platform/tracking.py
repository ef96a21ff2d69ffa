"""MLflow for every stage: one parent run per pipeline run, one child run per model family.

- Tracking URI: $MLFLOW_TRACKING_URI, else `sqlite:///<project>/mlflow.db`; always set explicitly
  (MLflow's default silently falls back to an old ./mlruns folder).
- The parent run of a pipeline run is, in order: $S3_MLFLOW_PARENT_RUN_ID (the Prefect flow
  creates the parent and exports it to the stages), else the run tagged with this workspace's
  pipeline key (git commit + params.yaml hash), created on first use; so one `dvc repro` that
  runs several stage processes lands in one parent. The parent carries the git commit and the
  dvc.lock hash (updated by every stage; the flow sets the final one).
- Child runs are found by the tag `s3.family` under the parent; `collect` logs to the parent.
- `S3_MLFLOW=0` (or off/false/no) skips all logging; unset inside pytest means off too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

EXPERIMENT = os.environ.get("S3_MLFLOW_EXPERIMENT", "s3")
PARENT_ENV = "S3_MLFLOW_PARENT_RUN_ID"


def enabled() -> bool:
    """$S3_MLFLOW (0/off/false/no = off); unset means on, except inside pytest (tests that
    check tracking set S3_MLFLOW=1), so the other stage tests stay fast and leave no mlflow.db."""
    value = os.environ.get("S3_MLFLOW")
    if value is None:
        return "PYTEST_CURRENT_TEST" not in os.environ
    return value.strip().lower() not in ("0", "off", "false", "no")


def tracking_uri(root: str | Path = ".") -> str:
    """$MLFLOW_TRACKING_URI, else sqlite:///<root>/mlflow.db (absolute)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


def client(root: str | Path = ".") -> Any:
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(root)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "none"


def git_commit(root: str | Path = ".") -> str:
    """$S3_GIT_COMMIT, else HEAD's sha with '-dirty' when tracked files differ; 'unknown' outside git.
    (A scratch workspace sets S3_GIT_COMMIT to its source's commit.)"""
    if os.environ.get("S3_GIT_COMMIT"):
        return os.environ["S3_GIT_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_tags(root: str | Path = ".") -> dict[str, str]:
    root = Path(root)
    return {"s3.git_commit": git_commit(root), "s3.dvc_lock_sha": _sha(root / "dvc.lock"), "s3.params_sha": _sha(root / "params.yaml")}


def _experiment_id(c: Any, root: str | Path = ".") -> str:
    """The `s3` experiment; created with artifacts in <root>/mlartifacts (not ./mlruns)."""
    exp = c.get_experiment_by_name(EXPERIMENT)
    if exp is not None:
        return exp.experiment_id
    return c.create_experiment(EXPERIMENT, artifact_location=(Path(root).resolve() / "mlartifacts").as_uri())


def start_pipeline_run(root: str | Path = ".", name: str | None = None, tags: Mapping[str, str] | None = None) -> str:
    """Create a parent run for one pipeline run (the flow calls this); returns its id."""
    c = client(root)
    t = {**run_tags(root), "s3.kind": "pipeline", **(tags or {})}
    t["s3.pipeline_key"] = f"{t['s3.git_commit']}:{t['s3.params_sha']}:{time.time_ns()}"
    run = c.create_run(_experiment_id(c, root), run_name=name or f"pipeline {t['s3.git_commit'][:8]}", tags=t)
    return run.info.run_id


def finish_pipeline_run(run_id: str, root: str | Path = ".", status: str = "FINISHED") -> None:
    """Stamp the final dvc.lock hash and close the parent run (and children left open)."""
    c = client(root)
    for k, v in run_tags(root).items():
        c.set_tag(run_id, k, v)
    exp_id = c.get_run(run_id).info.experiment_id
    for child in c.search_runs([exp_id], filter_string=f"tags.`mlflow.parentRunId` = '{run_id}' and attributes.status = 'RUNNING'"):
        c.set_terminated(child.info.run_id, status=status)
    c.set_terminated(run_id, status=status)


def _parent(c: Any, root: Path) -> str:
    env = os.environ.get(PARENT_ENV)
    if env:
        return env
    t = run_tags(root)
    key = f"{t['s3.git_commit']}:{t['s3.params_sha']}"
    exp_id = _experiment_id(c, root)
    found = c.search_runs([exp_id], filter_string=f"tags.`s3.pipeline_key` = '{key}'", max_results=1, order_by=["attributes.start_time DESC"])
    if found:
        return found[0].info.run_id
    run = c.create_run(exp_id, run_name=f"pipeline {t['s3.git_commit'][:8]}", tags={**t, "s3.kind": "pipeline", "s3.pipeline_key": key})
    return run.info.run_id


def family_run(family: str, root: str | Path = ".") -> tuple[Any, str]:
    """(client, run_id) of `family`'s child run in the current pipeline run (created on first use).

    Later stages (train, evaluate) log into the same run, so one MLflow row per family holds
    both prediction accuracy and policy quality.
    """
    root = Path(root)
    c = client(root)
    parent = _parent(c, root)
    exp_id = c.get_run(parent).info.experiment_id
    found = c.search_runs([exp_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent}' and tags.`s3.family` = '{family}'", max_results=1)
    if found:
        return c, found[0].info.run_id
    run = c.create_run(exp_id, run_name=family, tags={"mlflow.parentRunId": parent, "s3.family": family, "s3.kind": "family"})
    return c, run.info.run_id


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are kept as values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def log_stage(
    stage: str,
    family: str | None,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | str | Path | None = None,
    artifacts: Iterable[str | Path] = (),
    root: str | Path = ".",
) -> str | None:
    """Log one stage's params, metrics (a dict or a JSON file) and artifacts; returns the run id.

    Numeric leaves become metrics `<stage>/<dotted.key>`; a list of numbers becomes a curve
    (one metric, step = index). Params go in as `<stage>.<dotted.key>`; a param that already
    holds another value (a re-run with --set) is kept and the new value recorded as a tag.
    Does nothing (returns None) when $S3_MLFLOW is off.
    """
    if not enabled():
        return None
    from mlflow.entities import Metric, Param, RunTag

    root = Path(root)
    if family is None:
        c = client(root)
        run_id = _parent(c, root)
    else:
        c, run_id = family_run(family, root)
    if isinstance(metrics, (str, Path)):
        metrics = json.loads(Path(metrics).read_text())
    now = int(time.time() * 1000)
    items: list[Metric] = []
    for k, v in flatten(metrics or {}).items():
        if isinstance(v, list):
            items += [Metric(f"{stage}/{k}", x, now, i) for i, x in enumerate(map(_number, v)) if x is not None]
        elif (x := _number(v)) is not None:
            items.append(Metric(f"{stage}/{k}", x, now, 0))
    for i in range(0, len(items), 1000):
        c.log_batch(run_id, metrics=items[i : i + 1000])
    existing = c.get_run(run_id).data.params
    new_params, clashes = [], []
    for k, v in flatten(params or {}, f"{stage}.").items():
        s = str(v)[:6000]
        if k not in existing:
            new_params.append(Param(k, s))
        elif existing[k] != s:
            clashes.append(RunTag(f"param_rerun.{k}", s))
    for i in range(0, len(new_params), 100):
        c.log_batch(run_id, params=new_params[i : i + 100])
    tags = [RunTag(k, v) for k, v in run_tags(root).items()] + [RunTag(f"s3.stage.{stage}", "done")] + clashes[:100]
    c.log_batch(run_id, tags=tags)
    if family is not None:  # the parent carries the latest dvc.lock hash too
        c.log_batch(c.get_run(run_id).data.tags["mlflow.parentRunId"], tags=[RunTag(k, v) for k, v in run_tags(root).items()])
    for a in artifacts:
        p = Path(a)
        if p.is_dir():
            c.log_artifacts(run_id, str(p), artifact_path=f"{stage}/{p.name}")
        elif p.exists():
            c.log_artifact(run_id, str(p), artifact_path=stage)
    if family is not None or not os.environ.get(PARENT_ENV):
        c.set_terminated(run_id)  # later stages may still log into a finished run; the flow closes its own parent
    return run_id


def log_stage_safely(*args: Any, **kwargs: Any) -> str | None:
    """`log_stage` that never fails the stage: tracking trouble is one warning line."""
    try:
        return log_stage(*args, **kwargs)
    except Exception as e:
        import sys

        print(f"warning: MLflow logging skipped ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def log_collect(params: Any, manifest: str | Path, root: str | Path = ".") -> str | None:
    """The collect stage: params and dataset size on the parent run, with the sample plot."""
    m = json.loads(Path(manifest).read_text())
    summary = {k: m.get(k) for k in ("rows", "episodes", "episodes_dropped", "wall_seconds_this_run")}
    p = params.model_dump(include={"seed", "sim", "collect"})
    return log_stage_safely("collect", None, p, summary, [Path(params.collect.plot_dir) / "sample_episodes.png"], root=root)


def log_distill(params: Any, families: Iterable[str], root: str | Path = ".") -> None:
    """The distill stage: each family's params, accuracy metrics, plots and model card in its run."""
    from s3.dynamics.params import FAMILIES

    for fam in families:
        others = set(FAMILIES) - {fam}
        p = params.distill.model_dump(exclude=others | {"progress_bar", "torch_threads"})
        art = [Path("plots/distill") / f"{fam}_{n}.png" for n in ("trajectories", "error_vs_horizon")] + [Path("models") / fam / "model.json"]
        log_stage_safely("distill", fam, p, Path("metrics/distill") / f"{fam}.json", art, root=root)


def log_train(params: Any, name: str, summary: Mapping[str, Any], curve: Iterable[float] = (), root: str | Path = ".") -> None:
    """The train stage: a policy's params, validation, wall clock and learning curve in its run."""
    p = params.train.for_policy(name).model_dump(mode="json", exclude={"progress_bar", "per_policy"})
    metrics = {**{k: v for k, v in summary.items() if k != "history"}, "curve": {"mean_reward": list(curve)}}
    log_stage_safely("train", name, p, metrics, [Path("plots/train") / f"{name}.png", Path("policies") / name / "policy.json"], root=root)


def log_evaluate(params: Any, name: str, result: Mapping[str, Any], root: str | Path = ".") -> None:
    """The evaluate stage: policy quality (summary and transfer gap) and the figures in its run."""
    metrics = {"summary": result.get("summary", {}), "transfer_gap": result.get("transfer_gap", {}), "wall_s": result.get("wall_s")}
    p = params.evaluate.model_dump(mode="json", exclude=set() if name.startswith("pid") else {"pid"})
    log_stage_safely("eval", name, p, metrics, [Path(f) for f in result.get("plots", [])], root=root)
