"""Where and whether MLflow is reached: the switch, the tracking URI, the client, the one experiment.

- Switch: `enabled()` ($S3_MLFLOW). When it is off, nothing in s3.tracking creates a client, a
  database or a file.
- Tracking URI: $MLFLOW_TRACKING_URI, else `sqlite:///<root>/mlflow.db` (a queued DVC experiment: its
  project's, $DVC_ROOT), always passed explicitly
  (MLflow's default silently falls back to an old ./mlruns folder). With a SQLite store the
  artifacts go to `mlartifacts/` beside the database.
- The experiment (`experiment_name()`: $S3_MLFLOW_EXPERIMENT, else "s3") carries EXPERIMENT_TAGS:
  `mlflow.experimentKind=custom_model_development`, the tag MLflow 3's UI reads for the kind of an
  experiment (model training, not GenAI). MLflow 3.17's UI decides the view from its own
  GenAI / Model training switch instead (default GenAI, kept in the browser); `ui_url` is the link
  that opens the experiment on its runs with that switch on Model training.
- Failures: `safely` runs a lookup that must never fail a stage (one warning line on stderr).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

PARENT_ENV = "S3_MLFLOW_PARENT_RUN_ID"
EXPERIMENT_ENV = "S3_MLFLOW_EXPERIMENT"
DEFAULT_EXPERIMENT = "s3"
# the experiment's kind as MLflow 3's UI reads it: a model-training (classic ML) experiment, not GenAI
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
# MLflow 3.17's UI switch (query parameter; otherwise the browser's stored choice, GenAI by default)
UI_WORKFLOW = "workflowType=machine_learning"

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


DVC_ROOT_ENV, DVC_EXP_NAME_ENV = "DVC_ROOT", "DVC_EXP_NAME"  # what DVC sets in a queued experiment's stages


def tracking_uri(root: str | Path = ".") -> str:
    """$MLFLOW_TRACKING_URI, else sqlite:///<project>/mlflow.db (absolute). The project is `root`,
    except in a queued DVC experiment, which runs in a temporary copy: there DVC names the project
    it belongs to in $DVC_ROOT, so its runs land beside the others instead of vanishing with the copy."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    project = Path(os.environ.get(DVC_ROOT_ENV) or root) if os.environ.get(DVC_EXP_NAME_ENV) else Path(root)
    return f"sqlite:///{project.resolve() / 'mlflow.db'}"


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


def ui_url(base: str, experiment: str | None = None) -> str:
    """The MLflow UI link that opens `experiment` (an id; None: the experiment list) on its runs:
    MLflow 3.17 opens an experiment on its GenAI overview unless the UI's own switch says Model
    training, which this query parameter sets. `base`: the server, e.g. http://127.0.0.1:5000."""
    page = f"experiments/{experiment}" if experiment else "experiments"
    return f"{base.rstrip('/')}/#/{page}?{UI_WORKFLOW}"


def warn(e: BaseException) -> None:
    """One line on stderr: MLflow logging was skipped, and why."""
    print(f"warning: MLflow logging skipped ({type(e).__name__}: {e})", file=sys.stderr, flush=True)


def safely(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """fn(*args, **kwargs), or None with one warning line on stderr when it raises."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        warn(e)
        return None
