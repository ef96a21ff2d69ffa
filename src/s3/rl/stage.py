"""The train stage by policy name: a model family, the `oracle`, or the `direct` baseline.

    train_policies(names, root_params, models_dir, out_dir, plots_dir, metrics_dir) -> {name: summary}

- a family (params.yaml `families`): PPO in that family's distilled env (s3.rl.train);
- `oracle`: PPO in the distilled env of its model (params.yaml `policies_in_models`) with the
  surface label observed (the true friction under and ahead of the car): an upper bound on what
  knowing the surface buys;
- `direct`: PPO in the source simulator itself, to its own plateau or for `train.direct.budget_s` (s3.rl.direct).
Each gets `train.per_policy.<name>` merged over the shared train params, and writes
<out_dir>/<name>/, <plots_dir>/<name>.png and <metrics_dir>/<name>.json. With `train.seeds` > 1 a
distilled-env policy trains that many seeds side by side and keeps the best (s3.rl.seeds), by
the in-model validation score or, with `train.seed_selection: source`, by the same score in the
source simulator (s3.rl.source_selection).

MLflow: each policy logs into its family run of the current pipeline run
(s3.tracking.family_run, none when S3_MLFLOW is off): the training's own logs (its PPO
curve and validation, or per-seed runs nested under it), then the summary (tracking.log_train).
A training that raises ends that run FAILED.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from s3 import headline, tracking
from s3.catalog import DIRECT
from s3.rl import TRAIN_WORKER_PRELOAD
from s3.sim.backends import side_by_side_names, sim_backend
from s3.workers import forkserver_context, prestart


def train_one(
    name: str,
    root: Any,
    models_dir: str | Path,
    out_dir: str | Path,
    plots_dir: str | Path,
    metrics_dir: str | Path,
    track: bool = True,
) -> dict[str, Any]:
    """Train the policy `name` with `root.train.for_policy(name)`, logged to MLflow (`track`: into its family
    run; False: not at all, for a policy that is not the stage's own, e.g. a DAgger round's); returns its summary."""
    if (
        name != DIRECT and root.train.for_policy(name).seeds > 1
    ):  # the seed workers' forkserver imports while this process does (s3.workers)
        prestart(forkserver_context(TRAIN_WORKER_PRELOAD))
    run = tracking.family_run_safely(name) if track else None
    try:
        summary = _train(name, root, models_dir, out_dir, plots_dir, metrics_dir, run)
    except BaseException:
        if run is not None:
            run.finish("FAILED")
        raise
    if track:
        tracking.log_train(root, name, summary, run=run)
    return summary


def _train(
    name: str,
    root: Any,
    models_dir: str | Path,
    out_dir: str | Path,
    plots_dir: str | Path,
    metrics_dir: str | Path,
    run: tracking.Run | None,
) -> dict[str, Any]:
    """The training of `train_one`, logging into `run`."""
    tp = root.train.for_policy(name)
    if name == DIRECT:
        from s3.rl.direct import train_direct

        if tp.direct.seeds > 1:
            from s3.rl.direct_seeds import train_direct_seeds as train_direct
        return train_direct(root.model_copy(update={"train": tp}), out_dir, plots_dir, metrics_dir, run=run)
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.rl.env import resolve_device
    from s3.rl.train import train_policy

    family = root.model_of(name)
    model_folder = Path(models_dir) / family
    if tp.seeds > 1:
        from s3.rl.seeds import train_seeds

        scorer, not_in_source = None, None
        if tp.seed_selection == "source" and not sim_backend(root.sim).side_by_side:
            not_in_source = (
                "train.seed_selection 'source' drives the seeds side by side in the embedded simulator "
                f"(sim.backend {side_by_side_names()}); with {root.sim.backend!r} the seed is chosen by in-model "
                "validation"
            )
            print(f"train {name}: {not_in_source}", file=sys.stderr, flush=True)
        elif tp.seed_selection == "source":
            from s3.rl.source_selection import source_scores

            scorer = functools.partial(source_scores, root=root, tp=tp)
        summary = train_seeds(
            name, family, model_folder, out_dir, Path(plots_dir) / f"{name}.png", tp, scorer, run, root.compute
        )
        if not_in_source is not None:
            summary["seed_selection"] = {**summary["seed_selection"], "source_choice_not_run": not_in_source}
    else:
        model = load_checkpoint(model_folder, family, resolve_device(tp.device))
        summary = train_policy(
            model, Path(out_dir) / name, Path(plots_dir) / f"{name}.png", tp, family, run, model_folder
        )
    summary = {"policy": name, **summary}
    headline.write_record(Path(metrics_dir) / f"{name}.json", summary, headline.train)
    return summary


def train_policies(
    names: list[str],
    root: Any,
    models_dir: str | Path,
    out_dir: str | Path,
    plots_dir: str | Path,
    metrics_dir: str | Path,
) -> dict[str, dict[str, Any]]:
    """`train_one` for each name in turn."""
    return {n: train_one(n, root, models_dir, out_dir, plots_dir, metrics_dir) for n in names}
