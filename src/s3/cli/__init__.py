"""The `s3` command line: parsing and dispatch over the stage functions.

Each command parses its options, loads and validates params (s3.cli.base.load), calls one stage
function and prints what it returned. The pipeline's stage commands (the ones dvc.yaml runs) are
here; the tools (regress, probe, holdout, bench, track, beamng, study) are in s3.cli.tools.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from s3.cli.base import (
    MODELS_DIR,
    POLICIES_DIR,
    Overrides,
    ParamsPath,
    Quiet,
    app,
    console,
    load,
    one_line_errors,
    table_console,
)
from s3.config import FAMILIES_KEY, POLICIES_KEY, pick_names

COLLECT_RECORD = Path("records/collect.json")  # the run's wall clock, workers and retries (data/rollouts: the data)
DISTILL_RECORDS, DISTILL_PLOTS = Path("records/distill"), Path("plots/distill")
TRAIN_PLOTS, TRAIN_RECORDS = Path("plots/train"), Path("records/train")
TTQ_RECORD, TTQ_PLOT = Path("records/time_to_quality.json"), Path("plots/time_to_quality.png")


@app.command()
def collect(params: ParamsPath = Path("params.yaml"), set_: Overrides = None, quiet: Quiet = False) -> None:
    """Drive the source simulator and record rollouts to data/rollouts/."""
    from s3.data.stage import collect_stage

    p = load(params, set_)
    with one_line_errors():
        console.print(collect_stage(p, Path("."), quiet=quiet, metrics_path=COLLECT_RECORD), highlight=False)


@app.command()
def distill(
    family: Annotated[str, typer.Option(help="a model family (params.yaml `families`), or all")] = "all",
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
    quiet: Quiet = False,
) -> None:
    """Train dynamics models on data/rollouts/ and measure their predictive accuracy."""
    from s3.dynamics.distill import comparison_table
    from s3.dynamics.stage import distill_stage

    p = load(params, set_)
    with one_line_errors():
        families = pick_names(family, list(p.families), list(p.families), FAMILIES_KEY)
        results = distill_stage(p, families, MODELS_DIR, DISTILL_RECORDS, DISTILL_PLOTS, quiet=quiet)
    table_console().print(comparison_table(results))


@app.command()
def train(
    family: Annotated[
        str,
        typer.Option(help="a family, the oracle, direct (params.yaml `families`, `policies_in_models`), or all"),
    ] = "all",
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
    quiet: Quiet = False,
) -> None:
    """Train PPO policies (policies/<name>/): in each family's distilled env, the oracle, or direct.

    `all` = the families; the oracle = PPO in its model's env (params.yaml `policies_in_models`) with
    the surface label observed; direct = PPO in the source simulator, to its own plateau (or train.direct.budget_s).
    """
    from s3.rl.stage import train_policies

    p = load(params, set_)
    with one_line_errors():
        names = pick_names(family, p.policies(), list(p.families), POLICIES_KEY)
        root = p.model_copy(
            update={"train": p.train.model_copy(update={"progress_bar": p.train.progress_bar and not quiet})}
        )
        results = train_policies(names, root, MODELS_DIR, POLICIES_DIR, TRAIN_PLOTS, TRAIN_RECORDS)
    for name, r in results.items():
        console.print(f"{name}: {json.dumps({k: v for k, v in r.items() if not isinstance(v, (dict, list))})}")


@app.command()
def evaluate(
    family: Annotated[
        str, typer.Option(help="a trained policy (a family, the oracle, direct), a baseline (params.yaml), or all")
    ] = "all",
    track: Annotated[
        list[str] | None,
        typer.Option(
            help="a circuit instead of evaluate.tracks, repeatable: a built-in name or a racing CSV "
            "(x_m,y_m,w_tr_right_m,w_tr_left_m)"
        ),
    ] = None,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Drive every seed of the policies (and the baselines) in the source simulator on the evaluation suite."""
    from s3.cli.tables import evaluation_table
    from s3.evaluate.stage import evaluate_stage

    p = load(params, set_)
    with one_line_errors():
        results = evaluate_stage(p, family, track, POLICIES_DIR, MODELS_DIR, say=console.print)
    table_console().print(evaluation_table(results))


@app.command()
def report(
    records_dir: Annotated[Path, typer.Option(help="where records/distill, train and eval live")] = Path("records"),
    reports_dir: Annotated[Path, typer.Option(help="reports/report.md goes here")] = Path("reports"),
    plots_dir: Annotated[Path, typer.Option(help="the accuracy-vs-quality figure goes here")] = Path("plots/report"),
    readme: Annotated[
        Path | None, typer.Option(help="also rewrite the results block of this file (README.md) from the report")
    ] = None,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Prediction accuracy vs policy quality, and the efficiency of distillation (records/report.json)."""
    from s3.report.report import report as run_report

    p = load(params, set_)
    with one_line_errors():
        run_report(records_dir, reports_dir, plots_dir, table_console(), list(p.families), p.models(), readme=readme)


@app.command("time-to-quality")
def time_to_quality(params: ParamsPath = Path("params.yaml"), set_: Overrides = None) -> None:
    """Each route's time to a lap-completing policy: every kept checkpoint of direct and of each distilled
    policy's first seed on one fixed hold-out set in the source simulator (records/time_to_quality.json,
    docs/time-to-quality.md)."""
    from s3.cli.tables import time_to_quality_lines
    from s3.evaluate.time_to_quality import time_to_quality as run

    p = load(params, set_)
    with one_line_errors():
        result = run(p, POLICIES_DIR, Path("records"), TTQ_RECORD, TTQ_PLOT)
    for line in time_to_quality_lines(result, p.policies()):
        console.print(line, highlight=False)
    if "not_run" not in result:
        console.print(f"-> {TTQ_RECORD}, {TTQ_PLOT}", highlight=False)


@app.command("dagger-rounds")
def dagger_rounds(
    policy: Annotated[str, typer.Option(help="a policy trained in a model (dagger.policies: the stage's)")],
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
    quiet: Quiet = False,
) -> None:
    """`dagger.rounds` DAgger-style rounds for one policy: drive, re-distil, re-train (stage dagger@<policy>).

    Writes dagger/<policy>/round<r>/ (rows, models, policies) and
    records/dagger/<policy>.json: per round the model's error on the rows the policy drove and the policy's
    lap share on the procedural hold-out in the source (s3.dagger.stage)."""
    from s3.dagger.stage import dagger_stage

    p = load(params, set_)
    train = p.train.model_copy(update={"progress_bar": p.train.progress_bar and not quiet})
    distill = p.distill.model_copy(update={"progress_bar": p.distill.progress_bar and not quiet})
    root = p.model_copy(update={"train": train, "distill": distill})
    with one_line_errors():
        record = dagger_stage(root, policy)

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for r in record["rounds"]:
        src, err = r["source"], (r.get("error_on_own_rows") or {}).get("ade_2s")
        console.print(
            f"round {r['round']}: hold-out lap share in the source {f(src['score'])} (dry {f(src['score_dry'])}, ice "
            f"{f(src['score_ice'])}); its model's 2-s ADE on the rows it drove {f(err)} m",
            highlight=False,
        )


from s3.cli import tools  # noqa: E402  (registers the tool commands on `app`)

__all__ = ["app", "main", "tools"]


def main() -> None:
    """Entry point for `python -m s3`."""
    app(sys.argv[1:])
