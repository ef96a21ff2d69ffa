"""The runs of one pipeline: the pipeline (parent) run and a family run per model family or policy.

The pipeline run is, in order: $S3_MLFLOW_PARENT_RUN_ID (the Prefect flow creates one with
`start_pipeline_run` and exports it to the stages), else the run tagged with this workspace's
pipeline key (`pipeline_key`: git commit + params.yaml hash, + the DVC experiment's name under
`dvc exp run`), created on first use, so one `dvc repro` running several stage processes lands in
one pipeline run. It is named and tagged as s3.tracking.provenance says. A family run is found by
its s3.family tag under the pipeline run, so later stages log into the same run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from s3.tracking.provenance import dvc_experiment, pipeline_run_name, pipeline_tags, run_tags
from s3.tracking.run import Run
from s3.tracking.store import PARENT_ENV, client, enabled, experiment_id, safely


def pipeline_key(tags: Mapping[str, str]) -> str:
    """The key that finds a workspace's pipeline run: `<git commit>:<params.yaml hash>`, with
    `:<experiment>` appended under `dvc exp run` (two experiments of one commit and params are two runs)."""
    exp = dvc_experiment()
    return f"{tags['s3.git_commit']}:{tags['s3.params_sha']}" + (f":{exp}" if exp else "")


def start_pipeline_run(root: str | Path = ".", name: str | None = None, tags: Mapping[str, str] | None = None) -> str:
    """Create a pipeline run (the flow calls this and exports it in $S3_MLFLOW_PARENT_RUN_ID); its id."""
    c = client(root)
    t = {**run_tags(root), **pipeline_tags(root), "s3.kind": "pipeline", **(tags or {})}
    t["s3.pipeline_key"] = f"{pipeline_key(t)}:{time.time_ns()}"
    run_name = name or pipeline_run_name(root, t["s3.git_commit"])
    return c.create_run(experiment_id(c), run_name=run_name, tags=t).info.run_id


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
    key = pipeline_key(t)
    found = c.search_runs(
        [exp_id],
        filter_string=f"tags.`s3.pipeline_key` = '{key}'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    if found:
        return Run(uri, exp_id, found[0].info.run_id)
    tags = {**t, **pipeline_tags(root), "s3.kind": "pipeline", "s3.pipeline_key": key}
    run = c.create_run(exp_id, run_name=pipeline_run_name(root, t["s3.git_commit"]), tags=tags)
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
    return parent.child(family, {**pipeline_tags(root), "s3.family": family, "s3.kind": "family"})


def family_run_safely(family: str, root: str | Path = ".") -> Run | None:
    """`family_run` that never fails the caller (None and one warning line on MLflow trouble)."""
    return safely(family_run, family, root)
