"""The report stage: does a better dynamics model give a better policy?

    report(metrics_dir="records", reports_dir="reports", plots_dir="plots/report") -> report dict

joins `records/distill/<family>.json` (prediction accuracy), `records/eval/<name>.json` (policy
quality back in the source simulator), `records/train/<name>.json` (RL wall clock, every seed's hold-out
score and end), every seed's validation history (policies/<name>/seeds/seed<k>/policy.json), the
rollout manifest (rows), `records/collect.json` (collection wall clock), the experiment sets
(`records/experiments/<set>/`) and the DAgger rounds (`records/dagger/<policy>.json`) into one report, and writes

    records/report.json                      everything below, strict JSON (null = not measured)
    reports/report.md                        the tables, the definitions, links to the figures
    plots/report/accuracy_vs_quality.png     prediction error against policy quality
    plots/report/error_vs_horizon.png        every family's open-loop position error against horizon
    plots/report/calibration_<family>.png    an ensemble's spread against its error, per surface
                                             (only for the families distilled as an ensemble; an experiment
                                             variant's: calibration_<family>_<set>_<variant>.png)
    plots/report/ice_levers.png              the ice levers' lap time against laps finished (hold-out, suite)
    plots/report/training_curves.png         every seed's validation curve on the procedural hold-out
                                             (s3.report.training; from policies/<name>/seeds/)

It is printed as rich tables and logged to MLflow (one run per family, the pipeline's parent run
for the correlation and the baselines), so runs of different families and pipeline runs line
up in the MLflow UI. A missing input is "not measured" (null / "—"), never a guess.

This module joins and writes; each step has its own module:

    inputs.py   reading the stage metrics, the order of the policies
    rows.py     one row per policy: prediction accuracy, policy quality, transfer gap
    ranks.py    quality ranks of the families, Spearman rank correlation (exact p)
    claims.py   the paper's claims with their verdicts (statistics: stats.py)
    cost.py     efficiency: collection and direct PPO costs, speed-up, break-even
    levers.py   the ice levers' rows (the `ice` experiment set)
    dagger.py   the DAgger rounds' rows (the dagger@<policy> stages)
    training.py every trained seed: its kept hold-out score, its end, its validation curve
    render.py   the tables and lines as text, rich tables, reports/report.md
    plots.py    the accuracy-vs-quality figure
    mlflow.py   the MLflow runs
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from s3 import headline
from s3.catalog import DIRECT, FAMILIES, FAMILY, ORACLE_KIND
from s3.io import json_safe, write_text_atomic
from s3.report.claims import RULES, claim_verdicts, claims
from s3.report.cost import collect_cost, direct_cost, efficiency_block
from s3.report.dagger import dagger_rows
from s3.report.inputs import (
    BASELINES,
    control_dt,
    ensemble_records,
    get,
    horizon_curves,
    json_names,
    order_names,
    read_json,
)
from s3.report.levers import SET as LEVER_SET
from s3.report.levers import lever_rows, lever_targets
from s3.report.mlflow import log_report_mlflow
from s3.report.ranks import quality_ranks, spearman
from s3.report.render import (
    claims_table,
    correlation_lines,
    cost_lines,
    efficiency_table,
    markdown,
    report_table,
)
from s3.report.rows import CORRELATED, policy_kind, policy_row, prediction_source, selected_row
from s3.report.training import training_rows

HEADLINE_ERROR = "ade_2s_all"
FIGURE = "accuracy_vs_quality.png"
HORIZON_FIGURE = "error_vs_horizon.png"
LEVER_FIGURE = "ice_levers.png"  # s3.viz.lever_tradeoff: the ice levers' lap time against laps finished

DEFINITIONS = {
    "prediction_error": "open-loop average displacement error (m) of the position over 1 s / 2 s, on held-out test "
    "episodes of the collected rollouts; 'all' = every test window, 'ice' = windows entirely on mu < 0.5",
    "probe_error": "manoeuvre probes (s3.evaluate.probes): fixed open-loop commands (cornering, braking, power on) "
    "from the same start for 3 s in the source simulator and in the model, on open asphalt and on open ice (mu 0.15); "
    "mean position error (m) after 3 s per surface, and in how many of the 8 manoeuvres model and source agree on "
    "whether the car slid (|sideslip| > 0.5 rad)",
    "policy_quality": "every training seed of the policy back in the source simulator on the evaluation suite "
    "(held-out circuits, nominal and with ice, four starts each): completion rate and lap share as the mean over "
    "seeds of each seed's share, with a 95 % two-level bootstrap interval (seeds, then their runs), n = seeds and "
    "runs; lap time over the completed laps only, with their number. The distillation seed is fixed: each family is "
    "one distillation draw",
    "quality_rank": "families ordered by mean completion rate ((nominal + ice) / 2, higher is better), ties broken "
    "by the mean share of the lap driven before failing (nominal and ice; higher is better), then by the nominal "
    "then the ice lap time (shorter is better; no completed lap counts as slowest); rank 1 = best, "
    "equal keys share their average rank",
    "spearman": "rho = Spearman rank correlation of (prediction error, policy quality = minus the quality rank) over "
    "the model families that have both; error is lower-is-better and quality higher-is-better, so -1 = the family "
    "that predicts best also drives best, +1 = the reverse, 0 = prediction accuracy says nothing about policy "
    "quality (claim 3's sign convention); p = exact two-sided permutation p-value (the share of all orderings of "
    "the ranks with |rho| at least as large). Null with a reason when fewer than 3 families have both or one side "
    "is constant",
    "transfer_gap": "same policy, same track: source-simulator minus distilled-environment value (negative completion "
    "gap = completes less often in the source simulator; positive lap-time gap = slower there)",
    "rl_wall_to_policy": "the RL time to quality by claim 1's curves and criterion (records/time_to_quality.json): "
    "the time of a policy's first checkpoint (its first seed's) that completes at least half of the time-to-quality "
    "hold-out laps, minus its route's collection and distillation; 'not reached' when none does. For `direct` (PPO "
    "in the source simulator) its time to quality, or, when it never gets there, 'not reached within B' (the time it "
    "ran) and the speed-up is a lower bound (>= B / t_distilled). Without those curves: not measured",
    "speedup": "t_direct / t_distilled (RL phase only)",
    "one_time_cost": "collection wall clock (records/collect.json) + that family's distill wall clock (total_wall_s: "
    "data loading, training and the accuracy evaluation); paid once, shared by every policy trained on the model",
    "break_even": "n = one_time_cost / (t_direct - t_distilled): after ceil(n) policies (ablations, seeds) the "
    "distilled route has cost less in total. When direct never reached the lap, t_direct > B, so n computed with B "
    "is an upper bound (<=). 'never' when the distilled RL phase is not faster than direct",
    "real_time": "the same figures for a source simulator that runs at real time (as BeamNG.tech typically does): "
    "each car advances 1 / control_dt control steps per second, so direct PPO needs env_steps x control_dt / workers "
    "seconds and collection rows x control_dt / workers seconds (same numbers of parallel workers as measured). "
    "These count the simulator's time only (PPO updates and resets come on top) and leave the distilled RL and "
    "distill wall clocks as measured",
}


def build_report(
    metrics_dir: Path,
    manifest: Path | None = None,
    families: Iterable[str] | None = None,
    models: Mapping[str, str] | None = None,
    policies_dir: Path | None = None,
) -> dict[str, Any]:
    """Join the stage metrics into the report dict (reads files, writes nothing).

    `manifest` defaults to <metrics_dir>/../data/rollouts/manifest.json and `policies_dir` (every seed's
    validation history, s3.report.training) to <metrics_dir>/../policies (the project layout).
    `families` (default: every family of s3.catalog) and `models` (policy -> the model
    family it trains in; default: each family its own) come from params.yaml in `s3 report`.
    """
    families = list(FAMILIES if families is None else families)
    models = {**{f: f for f in families}, **(models or {})}
    metrics_dir = Path(metrics_dir)
    manifest = Path(manifest) if manifest is not None else metrics_dir.parent / "data" / "rollouts" / "manifest.json"
    missing: list[str] = []
    d_dir, e_dir, t_dir = metrics_dir / "distill", metrics_dir / "eval", metrics_dir / "train"
    names = order_names(
        {*models, *json_names(d_dir), *json_names(e_dir), *(n for n in json_names(t_dir) if n != DIRECT)},
        families,
        models,
    )
    names = [n for n in names if n in models or n in BASELINES or (e_dir / f"{n}.json").exists()]
    rows: dict[str, dict[str, Any]] = {}
    selected_rows: dict[str, dict[str, Any]] = {}
    names += [n for n in json_names(e_dir) if n not in names and n in BASELINES]
    evals: dict[str, dict | None] = {}
    for name in names:
        evals[name] = read_json(e_dir / f"{name}.json", missing)
        kind = policy_kind(name, families, models)
        trained = kind in (FAMILY, ORACLE_KIND, "policy")
        train = read_json(t_dir / f"{name}.json", missing) if trained else None
        src = prediction_source(name, d_dir, train, families, models) if trained else None
        distill = read_json(d_dir / f"{src}.json", missing) if src else None
        rows[name] = policy_row(name, kind, distill, evals[name], train, src)
        selected = selected_row(rows[name], evals[name], train)
        if selected is not None:
            selected_rows[f"{name} (selected)"] = selected
    for name, rank in quality_ranks({n: r for n, r in rows.items() if n in families}).items():
        rows[name]["quality"]["rank"] = rank
    ranks = {n: r["quality"]["rank"] for n, r in rows.items() if r["quality"]["rank"] is not None}
    better = {
        n: -r for n, r in ranks.items()
    }  # higher = better: one sign convention with claim 3 (rho < 0 = accuracy pays)
    corr = {m: spearman({n: rows[n]["prediction"][m] for n in families}, better) for m in CORRELATED}

    man = read_json(manifest, missing)
    dt = control_dt(man, metrics_dir, evals)
    for name, row in selected_rows.items():  # after the ranks and the correlation: the seeds' row is the policy's
        steps = row["selection"]["source_car_steps"]
        # at the real-time rate, like every other source cost: car steps x control period, on one simulator instance
        row["selection"]["source_real_time_one_instance_s"] = (
            steps * dt if steps is not None and dt is not None else None
        )
        rows[name] = row
    collect = collect_cost(man, dt, read_json(metrics_dir / "collect.json", missing))
    ttq = (
        read_json(metrics_dir / "time_to_quality.json", []) if (metrics_dir / "time_to_quality.json").exists() else None
    )
    direct = direct_cost(read_json(t_dir / f"{DIRECT}.json", missing), get(ttq, DIRECT), dt)
    experiments = read_experiments(metrics_dir / "experiments")
    levers = lever_rows(experiments.get(LEVER_SET, {}), evals)
    claim_list = claims(evals, rows, families, experiments, ttq)
    report = {
        "claims": claim_list,
        "claim_verdicts": claim_verdicts(claim_list),
        "claim_rules": RULES,
        "experiments": {k: sorted(v) for k, v in experiments.items()},
        "levers": levers,
        "lever_targets": lever_targets(levers),
        "dagger": dagger_rows(metrics_dir, experiments),
        "training": training_rows(t_dir, Path(policies_dir or metrics_dir.parent / "policies"), names),
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs)",
        "metrics_dir": str(metrics_dir),
        "rows": rows,
        "correlation": {"headline": HEADLINE_ERROR, "quality": "minus quality_rank", **corr},
        "efficiency": {
            "control_dt": dt,
            "collect": collect,
            DIRECT: direct,
            **efficiency_block(rows, collect, direct, ttq),
            "direct_budget_rule": (ttq or {}).get("budget_rule"),
        },  # s3.evaluate.time_to_quality checks it, once
        "definitions": DEFINITIONS,
        "missing": missing,
    }
    return json_safe(report)


def read_experiments(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{set: {variant: {"distill": records/distill dict, "eval": records/eval dict, "params": ...}}} from
    records/experiments/<set>/<variant>.json (`s3 study run` writes them; absent = not run)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*/*.json")):
        data = read_json(path, [])
        if data is not None:
            out.setdefault(path.parent.name, {})[path.stem] = data
    return out


def write_report(report: Mapping[str, Any], metrics_dir: Path, reports_dir: Path, plots_dir: Path) -> list[Path]:
    """records/report.json, the figures and reports/report.md (all atomic); returns their paths."""
    from s3.report.plots import plot_accuracy_vs_quality
    from s3.viz.distill_plots import plot_calibration, plot_error_vs_horizon

    figs = [plot_accuracy_vs_quality(report, Path(plots_dir) / FIGURE)]
    curves = horizon_curves(Path(metrics_dir) / "distill")
    if curves:  # every family in one figure: only this stage reads all of their metrics
        figs.append(
            plot_error_vs_horizon(Path(plots_dir) / HORIZON_FIGURE, curves, "open-loop position error, every family")
        )
    ensembles = dict(ensemble_records(Path(metrics_dir) / "distill"))  # name -> ensemble entry, one figure each
    for set_name, variants in read_experiments(Path(metrics_dir) / "experiments").items():  # e.g. the ice levers'
        for variant, v in variants.items():
            ens = (v.get("distill") or {}).get("ensemble")
            if ens and ens.get("calibration") and all(ens != seen for seen in ensembles.values()):
                ensembles[f"{(v.get('distill') or {}).get('family', 'model')}_{set_name}_{variant}"] = ens
    for name, ens in ensembles.items():
        title = f"{name}: ensemble of {ens['members']}, spread vs error at {ens['horizon_s']:g} s (test episodes)"
        figs.append(plot_calibration(Path(plots_dir) / f"calibration_{name}.png", ens["calibration"], title))
    if report.get("levers"):
        from s3.report.levers import ICE_EVERY_SEED
        from s3.viz.lever_tradeoff import plot_lever_tradeoff

        title = "ice levers: laps finished against lap time, each lever (K seeds each)"
        figs.append(plot_lever_tradeoff(Path(plots_dir) / LEVER_FIGURE, report["levers"], ICE_EVERY_SEED, title))
    training = None
    if any(s["curve"] for r in report.get("training") or [] for s in r["seeds"]):
        from s3.report.render_training import FIGURE as TRAINING_FIGURE
        from s3.viz.seed_curves import plot_seed_curves

        title = "every seed's validation on the procedural hold-out: dry solid, icy dashed, all dotted, kept circled"
        training = plot_seed_curves(Path(plots_dir) / TRAINING_FIGURE, report["training"], title)
        figs.append(training)
    out = headline.write_record(Path(metrics_dir) / "report.json", report, headline.report)
    ttq_figure = (
        Path(plots_dir).parent / "time_to_quality.png"
    )  # the time_to_quality stage's figure, linked (not written) here
    shown = [*(f for f in figs if f != training), *([ttq_figure] if ttq_figure.exists() else [])]
    md = write_text_atomic(Path(reports_dir) / "report.md", markdown(report, shown, Path(reports_dir), training))
    return [out, md, *figs]


def report(
    metrics_dir: str | Path = "records",
    reports_dir: str | Path = "reports",
    plots_dir: str | Path = "plots/report",
    console: Console | None = None,
    families: Iterable[str] | None = None,
    models: Mapping[str, str] | None = None,
    readme: Path | None = None,
) -> dict[str, Any]:
    """The `s3 report` stage: build, write, print and log the report; returns the report dict.
    `readme`: also rewrite the results block of this file (README.md), which must hold one
    (ParamsError before any work otherwise)."""
    from s3.config import ParamsError
    from s3.io import write_text_atomic
    from s3.report.render import README_BEGIN, README_END, readme_block, readme_table, replace_readme_block

    if readme is not None and (not readme.is_file() or readme_block(readme.read_text()) is None):
        raise ParamsError(f"--readme {readme}: needs a file with one {README_BEGIN} ... {README_END} block")
    rep = build_report(Path(metrics_dir), families=families, models=models)
    paths = write_report(rep, Path(metrics_dir), Path(reports_dir), Path(plots_dir))
    console = console or Console()
    console.print(report_table(rep))
    console.print(claims_table(rep))
    for line in correlation_lines(rep):
        console.print(f"Spearman (error, quality) {line}", highlight=False)
    console.print(efficiency_table(rep))
    for line in cost_lines(rep):
        console.print(line, highlight=False)
    for m in rep["missing"]:
        console.print(f"[yellow]not measured:[/yellow] {m}", highlight=False)
    log_report_mlflow(rep, paths)
    console.print(f"wrote {', '.join(map(str, paths))}", highlight=False)
    if readme is not None:
        write_text_atomic(readme, replace_readme_block(readme.read_text(), readme_table(rep)))
        console.print(f"results block -> {readme}", highlight=False)
    return rep
