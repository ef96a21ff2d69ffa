"""MLflow behind rsl_rl's logger hook.

rsl_rl 5.x builds its writer from cfg["logger"] = {"class_name": "s3.rl.mlflow_logger:MLflowLogWriter",
...kwargs} whenever the runner has a log_dir, and builds a new one at every `learn()` call (we
learn in chunks). So the writer only appends to an MLflow run that the stage owns (by run id),
buffers one iteration's scalars and sends them with one `log_batch`, and keeps an in-process
copy of the curve (`curve(run_id)`) for the learning-curve plot. Metric keys are rsl_rl's tags
("Train/mean_reward", "Loss/value", "Perf/total_fps", "Env/speed", ...) under `prefix`.

The tracking URI is always set explicitly: $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rsl_rl.utils.log_writer import LogWriter

from s3.platform.tracking import flatten

_CURVES: dict[str, list[tuple[str, int, float]]] = defaultdict(list)


def tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite file mlflow.db in the current directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def artifact_location(uri: str) -> str | None:
    """For a SQLite store, artifacts go to mlartifacts/ beside the database file (not ./mlruns, whose
    presence would make MLflow's default URI fall back to the file store)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return None


def client(uri: str | None = None) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri or tracking_uri())


def ensure_experiment(experiment: str, uri: str | None = None) -> str:
    """Create the tracking database (its schema migration) and `experiment` now, so that worker
    processes starting runs together do not race to create them; returns the experiment id."""
    uri = uri or tracking_uri()
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    return exp.experiment_id if exp is not None else c.create_experiment(experiment, artifact_location=artifact_location(uri))


def start_run(experiment: str, run_name: str, tags: dict[str, str] | None = None, uri: str | None = None) -> tuple[Any, str]:
    """(client, run_id) of a new run in `experiment` (created if missing)."""
    uri = uri or tracking_uri()
    c = client(uri)
    run = c.create_run(ensure_experiment(experiment, uri), run_name=run_name, tags=tags or {})
    return c, run.info.run_id


@contextlib.contextmanager
def train_run(experiment: str, name: str, run_id: str | None = None, run_name: str | None = None) -> Iterator[tuple[Any, str, str]]:
    """(client, run_id, tracking uri) for a training run: `run_id` if given (its owner ends it),
    else a new run `train-<run_name or name>` (tagged s3.family = name) that ends FINISHED with
    the block, or FAILED if it raises."""
    uri = tracking_uri()
    if run_id is not None:
        yield client(uri), run_id, uri
        return
    c, rid = start_run(experiment, f"train-{run_name or name}", {"s3.stage": "train", "s3.family": name}, uri)
    status = "FAILED"
    try:
        yield c, rid, uri
        status = "FINISHED"
    finally:
        c.set_terminated(rid, status=status)


def log_params(c: Any, run_id: str, params: dict[str, Any], prefix: str = "") -> None:
    from mlflow.entities import Param

    items = [Param(k, str(v)[:6000]) for k, v in flatten(params, prefix).items()]  # MLflow params are flat strings
    for i in range(0, len(items), 100):
        c.log_batch(run_id, params=items[i : i + 100])


def log_metrics(c: Any, run_id: str, metrics: dict[str, float], step: int) -> None:
    log_points(c, run_id, [(metrics, step)])


def log_points(c: Any, run_id: str, points: list[tuple[dict[str, float], int]]) -> None:
    """(metrics, step) pairs in as few writes as MLflow allows; None and non-finite values skipped."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(k, float(v), now, int(step)) for metrics, step in points for k, v in metrics.items() if v is not None and math.isfinite(float(v))]
    for i in range(0, len(items), 900):  # MLflow takes at most 1000 metrics per batch
        c.log_batch(run_id, metrics=items[i : i + 900])


def keep_curve(run_id: str, points: list[tuple[str, int, float]]) -> None:
    """Adopt a curve recorded in another process (a seed trained in a worker, s3.rl.seeds)."""
    _CURVES[run_id] = list(points)


def curve(run_id: str) -> list[tuple[str, int, float]]:
    """(tag, iteration, value) scalars seen by the writer for this run, in order."""
    return list(_CURVES.get(run_id, []))


class MLflowLogWriter(LogWriter):
    """rsl_rl LogWriter that appends to an existing MLflow run.

    Iterations are written in batches of up to `FLUSH_STEPS` (and at `stop`, which rsl_rl calls at
    the end of every `learn` chunk): one SQLite write per iteration cost ~20 ms, ~5 s a run.
    """

    FLUSH_STEPS = 20

    def __init__(self, log_dir: str | None = None, run_id: str = "", tracking_uri: str | None = None, prefix: str = "train/") -> None:
        if not run_id:
            raise ValueError("MLflowLogWriter needs the run_id of an MLflow run")
        self.run_id, self.prefix = run_id, prefix
        self.client = client(tracking_uri)
        self._buf: dict[str, float] = {}
        self._step: int | None = None
        self._pending: list[tuple[dict[str, float], int]] = []

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        value = float(scalar_value)
        if tag.endswith("/time"):  # rsl_rl's wall-clock-indexed duplicates: step is seconds, skip
            return
        if self._step is not None and global_step != self._step:
            self._end_step()
            if len(self._pending) >= self.FLUSH_STEPS:
                self.flush()
        self._step = int(global_step)
        self._buf[self.prefix + tag] = value
        _CURVES[self.run_id].append((tag, int(global_step), value))

    def _end_step(self) -> None:
        if self._buf and self._step is not None:
            self._pending.append((self._buf, self._step))
        self._buf = {}

    def flush(self) -> None:
        self._end_step()
        log_points(self.client, self.run_id, self._pending)
        self._pending = []

    def stop(self) -> None:
        self.flush()
