"""What each stage logs, and where: `log_stage` (params, metrics, artifacts into a family's run or the
pipeline run) and one function per stage that calls it (`log_collect`, `log_distill`, `log_train`,
`log_evaluate`). Tracking trouble never fails a stage: the `*_safely` forms warn in one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from s3.catalog import BASELINES, FAMILIES, PID
from s3.tracking.pipeline import family_run, pipeline_run
from s3.tracking.provenance import run_tags
from s3.tracking.run import Run
from s3.tracking.store import PARENT_ENV, enabled, safely
from s3.tracking.values import stage_metrics


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
    """The collect stage: params, dataset size and (from the run record `record`, records/collect.json)
    wall clock on the pipeline run, with the sample plot."""
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
    for fam in families:
        others = set(FAMILIES) - {fam}
        p = params.distill.model_dump(exclude=others | {"progress_bar", "torch_threads"})
        art = [Path("plots/distill") / f"{fam}_{n}.png" for n in ("trajectories", "error_vs_horizon")] + [
            Path("models") / fam / "model.json"
        ]
        log_stage_safely("distill", fam, p, Path("records/distill") / f"{fam}.json", art, root=root)


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
    metrics = {
        "summary": result.get("summary", {}),
        "transfer_gap": result.get("transfer_gap", {}),
        "wall_s": result.get("wall_s"),
    }
    p = params.evaluate.model_dump(mode="json", exclude=set() if name in BASELINES else {PID})
    log_stage_safely("eval", name, p, metrics, [Path(f) for f in result.get("plots", [])], root=root)
