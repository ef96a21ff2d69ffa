"""Handles on one MLflow run: `Run` logs into it; `Recorder` keeps the calls where MLflow must not be
reached (a job on a Ray node) and replays them later against a `Run`.

Writes: a `Run` sends metrics with `MlflowClient.log_batch(..., synchronous=False)`; MLflow splits
them into its batch limits and writes them on its own thread. `Run.flush()` waits for the handle's
writes, `Run.finish()` flushes and ends the run. A `Run` never raises: its first MLflow error is one
line on stderr and turns it off.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from s3.tracking.store import client, warn
from s3.tracking.values import flatten, number

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


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
                warn(e)

    def log_curve(self, points: Iterable[tuple[str, int, Any]], prefix: str = "") -> None:
        """(key, step, value) triples as metrics `<prefix><key>` at `step`; values that are not
        finite numbers are skipped. Asynchronous: MLflow batches and writes them."""
        from mlflow.entities import Metric

        with self._guard() as on:
            if not on:
                return
            now = int(time.time() * 1000)
            items = [Metric(prefix + k, x, now, int(step)) for k, step, v in points if (x := number(v)) is not None]
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
