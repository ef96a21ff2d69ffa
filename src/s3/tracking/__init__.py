"""MLflow for every stage, training included: the one package that talks to MLflow (floor 5).

Run structure, in one experiment (`experiment_name()`: $S3_MLFLOW_EXPERIMENT, else "s3"), which
carries the tag mlflow.experimentKind=custom_model_development (a model-training experiment, not a
GenAI one; `ui_url` is the link that opens it on its runs in MLflow 3.17's UI):

    pipeline run   s3.kind=pipeline                  one per pipeline run; `collect` and the report's
                                                     overall numbers log here; named after the DVC
                                                     experiment, else <workspace>/<params file> @ <commit>
      family run   s3.kind=family, s3.family=<name>  one per model family or policy (the four
                                                     families, oracle, direct, pid, pid_blind): its
                                                     distill accuracy, PPO curve, policy quality
        seed run   s3.kind=seed, s3.policy=<name>,   one per PPO seed when train.seeds > 1
                   s3.seed=<k>

Nesting is MLflow's own tag `mlflow.parentRunId`. The pipeline run carries the git commit and the
dvc.lock hash (restamped by every stage; the flow stamps the final one), the params file and, under
`dvc exp run`, the experiment's name.

    store        the switch (`enabled`), tracking URI, client, the experiment, `safely`
    values       flattening nested dicts; a stage's metrics as (key, step, value)
    run          `Run` (a handle on one run; never raises) and `Recorder` (calls kept, replayed later)
    provenance   git commit, dvc.lock / params.yaml hashes, the pipeline run's name and tags
    pipeline     the pipeline run and the family runs under it
    stages       `log_stage` and what each stage logs

Switch: when `enabled()` is off, nothing here creates a client, a database or a file:
`pipeline_run`/`family_run` return None and the `log_*` functions return None at once. Training
logs only into a `Run` handed to it, so it follows the same switch. Failures never fail a stage or
a training: a `Run` reports its first MLflow error as one line on stderr and turns itself off;
`log_stage_safely` and `family_run_safely` do the same for lookups.
"""

from s3.tracking.pipeline import (
    family_run,
    family_run_safely,
    finish_pipeline_run,
    pipeline_key,
    pipeline_run,
    start_pipeline_run,
)
from s3.tracking.provenance import (
    DVC_EXP_ENV,
    WORKSPACE_FILE,
    git_commit,
    overrides,
    pipeline_run_name,
    pipeline_tags,
    run_tags,
)
from s3.tracking.run import Recorder, Run
from s3.tracking.stages import log_collect, log_distill, log_evaluate, log_stage, log_stage_safely, log_train
from s3.tracking.store import (
    EXPERIMENT_ENV,
    EXPERIMENT_TAGS,
    PARENT_ENV,
    client,
    enabled,
    experiment_id,
    experiment_name,
    safely,
    tracking_uri,
    ui_url,
)
from s3.tracking.values import flatten, stage_metrics

__all__ = [
    "DVC_EXP_ENV",
    "EXPERIMENT_ENV",
    "EXPERIMENT_TAGS",
    "PARENT_ENV",
    "WORKSPACE_FILE",
    "Recorder",
    "Run",
    "client",
    "enabled",
    "experiment_id",
    "experiment_name",
    "family_run",
    "family_run_safely",
    "finish_pipeline_run",
    "flatten",
    "git_commit",
    "log_collect",
    "log_distill",
    "log_evaluate",
    "log_stage",
    "log_stage_safely",
    "log_train",
    "overrides",
    "pipeline_key",
    "pipeline_run",
    "pipeline_run_name",
    "pipeline_tags",
    "run_tags",
    "safely",
    "stage_metrics",
    "start_pipeline_run",
    "tracking_uri",
    "ui_url",
]
