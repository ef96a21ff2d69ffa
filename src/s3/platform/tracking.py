"""MLflow for every stage, training included: the one module that talks to MLflow.

Run structure, in one experiment (`experiment_name()`: $S3_MLFLOW_EXPERIMENT, else "s3"), which
carries the tag mlflow.experimentKind=custom_model_development (MLflow 3's UI opens it as model
training, not as a GenAI experiment):

    pipeline run   s3.kind=pipeline                  one per pipeline run; `collect` and the report's
                                                     overall numbers log here
      family run   s3.kind=family, s3.family=<name>  one per model family or policy (the four
                                                     families, oracle, direct, pid, pid_blind): its
                                                     distill accuracy, PPO curve, policy quality
        seed run   s3.kind=seed, s3.policy=<name>,   one per PPO seed when train.seeds > 1
                   s3.seed=<k>

Nesting is MLflow's own tag `mlflow.parentRunId`. The pipeline run is, in order:
$S3_MLFLOW_PARENT_RUN_ID (the Prefect flow creates one and exports it to the stages), else the run
tagged with this workspace's pipeline key (git commit + params.yaml hash), created on first use, so
one `dvc repro` running several stage processes lands in one pipeline run. It carries the git
commit and the dvc.lock hash (restamped by every stage; the flow stamps the final one). A family
run is found by its s3.family tag under the pipeline run, so later stages log into the same run.

- Tracking URI: $MLFLOW_TRACKING_URI, else `sqlite:///<root>/mlflow.db`, always passed explicitly
  (MLflow's default silently falls back to an old ./mlruns folder). With a SQLite store the
  artifacts go to `mlartifacts/` beside the database.
- Switch: `enabled()`. When it is off, nothing here creates a client, a database or a file:
  `pipeline_run`/`family_run` return None and the `log_*` functions return None at once.
  Training logs only into a `Run` handed to it, so it follows the same switch.
- Writes: a `Run` handle sends metrics with `MlflowClient.log_batch(..., synchronous=False)`;
  MLflow splits them into its batch limits and writes them on its own thread. `Run.flush()` waits
  for the handle's writes, `Run.finish()` flushes and ends the run.
- Failures never fail a stage or a training: a `Run` reports its first MLflow error as one line on
  stderr and turns itself off; `log_stage_safely` and `family_run_safely` do the same for lookups.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

PARENT_ENV = "S3_MLFLOW_PARENT_RUN_ID"
EXPERIMENT_ENV = "S3_MLFLOW_EXPERIMENT"
DEFAULT_EXPERIMENT = "s3"
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}  # MLflow 3's UI: a model-training experiment
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value

T = TypeVar("T")


def enabled() -> bool:
    """$S3_MLFLOW (0/off/false/no = off); unset means on, except inside pytest (tests that check
    tracking set S3_MLFLOW=1), so the other tests stay fast and leave no mlflow.db."""
    value = os.environ.get("S3_MLFLOW")
    if value is None:
        return "PYTEST_CURRENT_TEST" not in os.environ
    return value.strip().lower() not in ("0", "off", "false", "no")


def experiment_name() -> str:
    """The one experiment every run goes to: $S3_MLFLOW_EXPERIMENT, else "s3" (read at each call)."""
    return os.environ.get(EXPERIMENT_ENV) or DEFAULT_EXPERIMENT


def tracking_uri(root: str | Path = ".") -> str:
    """$MLFLOW_TRACKING_URI, else sqlite:///<root>/mlflow.db (absolute)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


def artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: mlartifacts/ beside a SQLite database (not
    ./mlruns, whose presence would make MLflow's default URI fall back to the file store); for
    any other store, MLflow's default."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return None


def client(root: str | Path = ".", uri: str | None = None) -> Any:
    """An MlflowClient on `uri` (default: tracking_uri(root))."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri or tracking_uri(root))


def experiment_id(c: Any) -> str:
    """The id of `experiment_name()` in c's store, created (with EXPERIMENT_TAGS) if missing; an
    existing experiment without the tags gains them."""
    from mlflow.exceptions import MlflowException

    name = experiment_name()
    exp = c.get_experiment_by_name(name)
    if exp is None:
        try:
            return c.create_experiment(name, artifact_location=artifact_location(c.tracking_uri), tags=EXPERIMENT_TAGS)
        except MlflowException:  # another process created it meanwhile
            exp = c.get_experiment_by_name(name)
            if exp is None:
                raise
    for k, v in EXPERIMENT_TAGS.items():
        if exp.tags.get(k) != v:
            c.set_experiment_tag(exp.experiment_id, k, v)
    return exp.experiment_id


def _number(v: Any) -> float | None:
    """A finite real number as float; None for anything else (bools, strings, None, NaN, inf)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


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


def _warn(e: BaseException) -> None:
    print(f"warning: MLflow logging skipped ({type(e).__name__}: {e})", file=sys.stderr, flush=True)


class Run:
    """A handle on one MLflow run to log into.

    Picklable: it holds only the tracking URI and the ids (the client is rebuilt on first use), so a
    worker process logs into a run its parent created. Never raises: the first MLflow error is
    reported as one line on stderr, kept in `error`, and turns the handle off (later calls do
    nothing). Metrics are written asynchronously; `flush()` waits for this handle's writes. The
    handle never ends the run by itself: whoever created the run calls `finish()`.
    """

    def __init__(self, uri: str, experiment_id: str, run_id: str) -> None:
        self.uri, self.experiment_id, self.run_id = uri, experiment_id, run_id
        self.error: str | None = None
        self._client: Any = None
        self._pending: list[Any] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri, "experiment_id": self.experiment_id, "run_id": self.run_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["uri"], state["experiment_id"], state["run_id"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, uri={self.uri!r})"

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = client(uri=self.uri)
        return self._client

    @contextlib.contextmanager
    def _guard(self) -> Iterator[bool]:
        """Yields whether the handle is on; an exception inside turns it off with one warning."""
        try:
            yield self.error is None
        except Exception as e:
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"
                _warn(e)

    def log_curve(self, points: Iterable[tuple[str, int, Any]], prefix: str = "") -> None:
        """(key, step, value) triples as metrics `<prefix><key>` at `step`; values that are not
        finite numbers are skipped. Asynchronous: MLflow batches and writes them."""
        from mlflow.entities import Metric

        with self._guard() as on:
            if not on:
                return
            now = int(time.time() * 1000)
            items = [Metric(prefix + k, x, now, int(step)) for k, step, v in points if (x := _number(v)) is not None]
            if items:
                self._pending.append(self.client.log_batch(self.run_id, metrics=items, synchronous=False))

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> None:
        """{key: value} at one step (see `log_curve`)."""
        self.log_curve(((k, step, v) for k, v in metrics.items()))

    def log_params(self, params: Mapping[str, Any], prefix: str = "") -> None:
        """Nested params flattened to `<prefix><dotted.key>` (values as strings, cut to MLflow's
        6000 characters). A param the run already holds with another value (a re-run with --set)
        keeps its first value, and the new one is recorded as tag `param_rerun.<key>`."""
        from mlflow.entities import Param, RunTag

        with self._guard() as on:
            if not on:
                return
            existing = self.client.get_run(self.run_id).data.params
            new, clashes = [], []
            for k, v in flatten(params, prefix).items():
                s = str(v)[:MAX_PARAM_CHARS]
                if k not in existing:
                    new.append(Param(k, s))
                elif existing[k] != s:
                    clashes.append(RunTag(f"param_rerun.{k}", s))
            self.client.log_batch(self.run_id, params=new, tags=clashes)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        with self._guard() as on:
            if on:
                self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifacts(self, paths: Iterable[str | Path], artifact_path: str) -> None:
        """Files (and folders, as `<artifact_path>/<name>/`) that exist; missing ones are skipped."""
        with self._guard() as on:
            if not on:
                return
            for p in map(Path, paths):
                if p.is_dir():
                    self.client.log_artifacts(self.run_id, str(p), artifact_path=f"{artifact_path}/{p.name}")
                elif p.exists():
                    self.client.log_artifact(self.run_id, str(p), artifact_path=artifact_path)

    def child(self, name: str, tags: Mapping[str, str]) -> Run | None:
        """A new run nested under this one (tag mlflow.parentRunId); None when this handle is off."""
        with self._guard() as on:
            if on:
                run = self.client.create_run(
                    self.experiment_id, run_name=name, tags={**tags, "mlflow.parentRunId": self.run_id}
                )
                return Run(self.uri, self.experiment_id, run.info.run_id)
        return None

    def flush(self) -> None:
        """Wait until every metric this handle sent is written."""
        pending, self._pending = self._pending, []
        with self._guard():
            for ops in pending:
                if ops is not None:
                    ops.wait()

    def finish(self, status: str = "FINISHED") -> None:
        """Flush, then end the run with `status` (FINISHED, FAILED, KILLED)."""
        self.flush()
        with self._guard() as on:
            if on:
                self.client.set_terminated(self.run_id, status=status)


class Recorder:
    """Stands in for a Run where MLflow must not be reached (a job on a Ray node): it keeps the
    calls, with artifact paths relative to `base` (the job's folder), and `replay(run, base)` makes
    them in the stage's process against the real run, with `base` the folder the job's files were
    written to. Carries the run's id, so what the job records about its run is the same."""

    def __init__(self, run_id: str | None, base: str | Path) -> None:
        self.run_id, self.base = run_id, Path(base)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def log_curve(self, points: Iterable[tuple[str, int, Any]], prefix: str = "") -> None:
        self.calls.append(("log_curve", (list(points), prefix)))

    def log_metrics(self, metrics: Mapping[str, Any], step: int = 0) -> None:
        self.calls.append(("log_metrics", (dict(metrics), step)))

    def log_params(self, params: Mapping[str, Any], prefix: str = "") -> None:
        self.calls.append(("log_params", (dict(params), prefix)))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.calls.append(("set_tags", (dict(tags),)))

    def log_artifacts(self, paths: Iterable[str | Path], artifact_path: str) -> None:
        rel = [Path(p).resolve().relative_to(self.base.resolve()).as_posix() for p in paths]  # inside the job's folder
        self.calls.append(("log_artifacts", (rel, artifact_path)))

    def flush(self) -> None:
        pass

    def __getstate__(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "base": str(self.base), "calls": self.calls}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.run_id, self.base, self.calls = state["run_id"], Path(state["base"]), state["calls"]

    def replay(self, run: Run | None, base: str | Path) -> None:
        """Make the recorded calls on `run` (nothing when None), artifacts read under `base`."""
        if run is None:
            return
        for name, args in self.calls:
            if name == "log_artifacts":
                args = ([Path(base) / p for p in args[0]], args[1])
            getattr(run, name)(*args)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "none"


def git_commit(root: str | Path = ".") -> str:
    """$S3_GIT_COMMIT, else HEAD's sha with '-dirty' when tracked files differ; 'unknown' outside git.
    (A scratch workspace sets S3_GIT_COMMIT to its source's commit.)"""
    if os.environ.get("S3_GIT_COMMIT"):
        return os.environ["S3_GIT_COMMIT"]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_tags(root: str | Path = ".") -> dict[str, str]:
    """The pipeline's provenance tags: git commit, dvc.lock and params.yaml hashes."""
    root = Path(root)
    return {
        "s3.git_commit": git_commit(root),
        "s3.dvc_lock_sha": _sha(root / "dvc.lock"),
        "s3.params_sha": _sha(root / "params.yaml"),
    }


def start_pipeline_run(root: str | Path = ".", name: str | None = None, tags: Mapping[str, str] | None = None) -> str:
    """Create a pipeline run (the flow calls this and exports it in $S3_MLFLOW_PARENT_RUN_ID); its id."""
    c = client(root)
    t = {**run_tags(root), "s3.kind": "pipeline", **(tags or {})}
    t["s3.pipeline_key"] = f"{t['s3.git_commit']}:{t['s3.params_sha']}:{time.time_ns()}"
    return c.create_run(experiment_id(c), run_name=name or f"pipeline {t['s3.git_commit'][:8]}", tags=t).info.run_id


def finish_pipeline_run(run_id: str, root: str | Path = ".", status: str = "FINISHED") -> None:
    """Stamp the final dvc.lock hash and end the pipeline run and the family runs left open."""
    c = client(root)
    for k, v in run_tags(root).items():
        c.set_tag(run_id, k, v)
    exp_id = c.get_run(run_id).info.experiment_id
    for child in c.search_runs(
        [exp_id], filter_string=f"tags.`mlflow.parentRunId` = '{run_id}' and attributes.status = 'RUNNING'"
    ):
        c.set_terminated(child.info.run_id, status=status)
    c.set_terminated(run_id, status=status)


def pipeline_run(root: str | Path = ".") -> Run | None:
    """The current pipeline run (module docstring), created on first use; None when tracking is off."""
    if not enabled():
        return None
    c = client(root)
    uri, env = c.tracking_uri, os.environ.get(PARENT_ENV)
    if env:
        return Run(uri, c.get_run(env).info.experiment_id, env)
    exp_id = experiment_id(c)
    t = run_tags(root)
    key = f"{t['s3.git_commit']}:{t['s3.params_sha']}"
    found = c.search_runs(
        [exp_id],
        filter_string=f"tags.`s3.pipeline_key` = '{key}'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    if found:
        return Run(uri, exp_id, found[0].info.run_id)
    run = c.create_run(
        exp_id, run_name=f"pipeline {t['s3.git_commit'][:8]}", tags={**t, "s3.kind": "pipeline", "s3.pipeline_key": key}
    )
    return Run(uri, exp_id, run.info.run_id)


def family_run(family: str, root: str | Path = ".") -> Run | None:
    """`family`'s run in the current pipeline run (a model family or policy name), created on first
    use; None when tracking is off. Every stage of that family logs into it, so one MLflow row
    holds both prediction accuracy and policy quality."""
    parent = pipeline_run(root)
    if parent is None:
        return None
    c = parent.client
    found = c.search_runs(
        [parent.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent.run_id}' and tags.`s3.family` = '{family}'",
        max_results=1,
    )
    if found:
        return Run(parent.uri, parent.experiment_id, found[0].info.run_id)
    return parent.child(family, {"s3.family": family, "s3.kind": "family"})


def safely(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """fn(*args, **kwargs), or None with one warning line on stderr when it raises."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        _warn(e)
        return None


def family_run_safely(family: str, root: str | Path = ".") -> Run | None:
    """`family_run` that never fails the caller (None and one warning line on MLflow trouble)."""
    return safely(family_run, family, root)


def stage_metrics(metrics: Mapping[str, Any]) -> list[tuple[str, int, Any]]:
    """(key, step, value) of a stage's metrics: numeric leaves at step 0 under their dotted key; a
    list of numbers is a curve (step = index). Other leaves are dropped by `Run.log_curve`."""
    out: list[tuple[str, int, Any]] = []
    for k, v in flatten(metrics).items():
        out += [(k, i, x) for i, x in enumerate(v)] if isinstance(v, list) else [(k, 0, v)]
    return out


def log_stage(
    stage: str,
    family: str | None,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | str | Path | None = None,
    artifacts: Iterable[str | Path] = (),
    root: str | Path = ".",
    run: Run | None = None,
) -> str | None:
    """Log one stage's params, metrics (a dict or a JSON file) and artifacts; returns the run id.

    Into `run` if given, else `family`'s run, else (family None) the pipeline run. Metrics become
    `<stage>/<dotted.key>` (`stage_metrics`), params `<stage>.<dotted.key>` (`Run.log_params`),
    artifacts go under `<stage>/`. The run is tagged `s3.stage.<stage>=done` and with `run_tags`
    (so is its pipeline run), then ended, except a pipeline run the flow owns. Returns None, having
    done nothing, when tracking is off, and None when the run reported an MLflow error.
    """
    if not enabled():
        return None
    root = Path(root)
    if run is None:
        run = pipeline_run(root) if family is None else family_run(family, root)
        if run is None:
            return None
    if isinstance(metrics, (str, Path)):
        metrics = json.loads(Path(metrics).read_text())
    run.log_curve(stage_metrics(metrics or {}), prefix=f"{stage}/")
    run.log_params(params or {}, f"{stage}.")
    tags = run_tags(root)
    run.set_tags({**tags, f"s3.stage.{stage}": "done"})
    parent = None if run.error else run.client.get_run(run.run_id).data.tags.get("mlflow.parentRunId")
    if parent:  # the pipeline run carries the latest dvc.lock hash too
        Run(run.uri, run.experiment_id, parent).set_tags(tags)
    run.log_artifacts(artifacts, stage)
    if parent or not os.environ.get(PARENT_ENV):
        run.finish()  # later stages may still log into a finished run; the flow ends its own pipeline run
    else:
        run.flush()
    return None if run.error else run.run_id


def log_stage_safely(*args: Any, **kwargs: Any) -> str | None:
    """`log_stage` that never fails the stage: tracking trouble is one warning line."""
    return safely(log_stage, *args, **kwargs)


def log_collect(
    params: Any, manifest: str | Path, root: str | Path = ".", record: str | Path | None = None
) -> str | None:
    """The collect stage: params, dataset size and (from the run record `record`, metrics/collect.json) wall clock on the pipeline run, with the sample plot."""
    m = json.loads(Path(manifest).read_text())
    if record is not None and Path(record).exists():  # the run's wall clock is not in the dataset's manifest
        m = {**m, **json.loads(Path(record).read_text())}
    summary = {k: m.get(k) for k in ("rows", "episodes", "episodes_dropped", "wall_seconds_this_run")}
    p = params.model_dump(include={"seed", "sim", "collect"})
    return log_stage_safely(
        "collect", None, p, summary, [Path(params.collect.plot_dir) / "sample_episodes.png"], root=root
    )


def log_distill(params: Any, families: Iterable[str], root: str | Path = ".") -> None:
    """The distill stage: each family's params, accuracy metrics, plots and model card in its run."""
    from s3.dynamics.registry import FAMILIES

    for fam in families:
        others = set(FAMILIES) - {fam}
        p = params.distill.model_dump(exclude=others | {"progress_bar", "torch_threads"})
        art = [Path("plots/distill") / f"{fam}_{n}.png" for n in ("trajectories", "error_vs_horizon")] + [
            Path("models") / fam / "model.json"
        ]
        log_stage_safely("distill", fam, p, Path("metrics/distill") / f"{fam}.json", art, root=root)


def log_train(
    params: Any, name: str, summary: Mapping[str, Any], run: Run | None = None, root: str | Path = "."
) -> None:
    """The train stage's summary of policy `name` in its run (`run`, or looked up): params
    `train.*`, the summary's numbers as `train/...`, the learning-curve plot and policy.json. The
    PPO curve itself was logged by the training, into the same run."""
    p = params.train.for_policy(name).model_dump(mode="json", exclude={"progress_bar", "per_policy"})
    metrics = {k: v for k, v in summary.items() if k != "history"}
    art = [Path("plots/train") / f"{name}.png", Path("policies") / name / "policy.json"]
    log_stage_safely("train", name, p, metrics, art, root=root, run=run)


def log_evaluate(params: Any, name: str, result: Mapping[str, Any], root: str | Path = ".") -> None:
    """The evaluate stage: policy quality (summary and transfer gap) and the figures in its run."""
    from s3.catalog import BASELINES, PID

    metrics = {
        "summary": result.get("summary", {}),
        "transfer_gap": result.get("transfer_gap", {}),
        "wall_s": result.get("wall_s"),
    }
    p = params.evaluate.model_dump(mode="json", exclude=set() if name in BASELINES else {PID})
    log_stage_safely("eval", name, p, metrics, [Path(f) for f in result.get("plots", [])], root=root)
