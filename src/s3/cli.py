"""The `s3` command line: a thin layer over the stage functions.

Every command reads params.yaml (or --params), applies `--set section.key=value` overrides and
validates them before any work; known failures print one line and exit non-zero.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from s3.catalog import BICYCLE, DIRECT
from s3.config import Params, ParamsError, load_params
from s3.tracking import log_collect, log_distill, log_evaluate

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Sim2Sim2Sim: collect, distill, train, evaluate, report."
)
bench_app = typer.Typer(no_args_is_help=True, help="Throughput benchmarks that print JSON.")
track_app = typer.Typer(no_args_is_help=True, help="Inspect tracks: the built-in road course or a CSV circuit.")
app.add_typer(bench_app, name="bench")
app.add_typer(track_app, name="track")
study_app = typer.Typer(
    no_args_is_help=True, help="Experiment sets beside the default run: studies/<set>.yaml (docs/study.md)."
)
app.add_typer(study_app, name="study")
beamng_app = typer.Typer(no_args_is_help=True, help="BeamNG.tech as the source simulator (docs/beamng.md).")
app.add_typer(beamng_app, name="beamng")

console = Console(stderr=True)


def _table_console() -> Console:
    """stdout for tables; wide when not a terminal (dvc, logs), where rich would assume 80 columns."""
    out = Console()
    return out if out.is_terminal else Console(width=180)


ParamsPath = Annotated[Path, typer.Option("--params", "-p", help="params file")]
Overrides = Annotated[list[str] | None, typer.Option("--set", help="override, e.g. --set collect.episodes=10")]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="no per-item detail (chunk lines, Lightning logs); progress still shows")
]


def _known_errors() -> tuple[type[Exception], ...]:
    """The project's own error classes, of the modules already imported: an exception of a class
    whose module was never imported cannot occur, and importing them (lightning, rsl_rl) costs seconds."""
    where = {
        "s3.compute.retry": "TooMuchLost",
        "s3.data.rollouts": "RolloutError",
        "s3.dynamics.checkpoint": "CheckpointError",
        "s3.dynamics.distill": "DistillError",
        "s3.io": "WorkspaceBusy",
        "s3.rl.source_env": "SourceWorkerError",
        "s3.rl.runner": "TrainError",
        "s3.sim.base": "SimulatorError",
        "s3.tracks.track": "TrackError",
    }
    return (ParamsError, *(getattr(sys.modules[m], name) for m, name in where.items() if m in sys.modules))


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    """Turn the project's own failures into one readable line and exit code 2."""
    try:
        yield
    except _known_errors() as e:
        console.print(f"[red]error:[/red] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _params(path: Path, overrides: list[str] | None) -> Params:
    with _one_line_errors():
        return load_params(path, overrides or [])


COLLECT_METRICS = Path(
    "metrics/collect.json"
)  # the run's wall clock, workers and retries (data/rollouts holds only the data)


@app.command()
def collect(params: ParamsPath = Path("params.yaml"), set_: Overrides = None, quiet: Quiet = False) -> None:
    """Drive the source simulator and record rollouts to data/rollouts/."""
    from s3.data.collect import collect as run

    p = _params(params, set_)
    with _one_line_errors():
        manifest = run(p, Path("."), quiet=quiet, metrics_path=COLLECT_METRICS)
    m = json.loads(manifest.read_text())
    console.print(
        f"collected {m['rows']} rows in {m['episodes']} episodes ({m['episodes_dropped']} dropped, {m['episodes_lost']} lost) "
        f"with {m['simulator_version']} -> {manifest.parent}"
    )
    log_collect(p, manifest, record=COLLECT_METRICS)  # MLflow; S3_MLFLOW=0 skips


FAMILIES_KEY = "params.yaml: families"
POLICIES_KEY = "params.yaml: families, policies_in_models; direct"


def _pick(option: str, known: list[str], every: list[str], where: str) -> list[str]:
    """The names a `--family` option picks: one of `known`, or "all" (= `every`)."""
    if option == "all":
        return list(every)
    if option not in known:
        raise ParamsError(f"--family: {option!r} is not one of {', '.join(known)}, all ({where})")
    return [option]


def _families(family: str, p: Params) -> list[str]:
    """The model families a `--family` option names ("all" = every family of params.yaml)."""
    return _pick(family, list(p.families), list(p.families), FAMILIES_KEY)


MODELS_DIR, DISTILL_METRICS, DISTILL_PLOTS = Path("models"), Path("metrics/distill"), Path("plots/distill")


@app.command()
def distill(
    family: Annotated[str, typer.Option(help="a model family (params.yaml `families`), or all")] = "all",
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
    quiet: Quiet = False,
) -> None:
    """Train dynamics models on data/rollouts/ and measure their predictive accuracy."""
    from s3.dynamics.distill import comparison_table, distill_many

    p = _params(params, set_)
    with _one_line_errors():
        families = _families(family, p)
        dp = p.distill.model_copy(update={"progress_bar": p.distill.progress_bar and not quiet})
        results = distill_many(families, Path(p.collect.out_dir), MODELS_DIR, DISTILL_METRICS, DISTILL_PLOTS, dp)
    _table_console().print(comparison_table(results))
    log_distill(p, families)  # MLflow; S3_MLFLOW=0 skips


@app.command()
def regress(
    baseline: Annotated[Path | None, typer.Option(help="baseline file (default: regress.baseline)")] = None,
    ref: Annotated[str | None, typer.Option(help="compare with the metrics committed at this git ref instead")] = None,
    record: Annotated[bool, typer.Option("--record", help="write the baseline from the current metrics")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="list the passing checks too")] = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Compare metrics/*.json with a recorded baseline; exit 1 when a metric regressed."""
    from s3.platform.regress import record as record_baseline
    from s3.platform.regress import run_check

    p = _params(params, set_)
    try:
        if record:
            console.print(f"baseline -> {record_baseline(Path('.'), p.regress, baseline)}")
            return
        ok, text = run_check(Path("."), p.regress, baseline, ref, verbose)
    except (FileNotFoundError, subprocess.CalledProcessError, json.JSONDecodeError, KeyError) as e:
        console.print(f"[red]error:[/red] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    print(text)
    if not ok:
        raise typer.Exit(1)


POLICIES_DIR, TRAIN_PLOTS, TRAIN_METRICS = Path("policies"), Path("plots/train"), Path("metrics/train")


@app.command()
def train(
    family: Annotated[
        str,
        typer.Option(
            help="a family, oracle, direct (params.yaml `families`, `policies_in_models`), or all (the families)"
        ),
    ] = "all",
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
    quiet: Quiet = False,
) -> None:
    """Train PPO policies (policies/<name>/): in each family's distilled env, the oracle, or direct.

    `all` = the families; `oracle` = PPO in its model's env (params.yaml `policies_in_models`) with
    the surface label observed; `direct` = PPO in the source simulator for train.direct.budget_s.
    """
    from s3.rl.stage import train_policies

    p = _params(params, set_)
    with _one_line_errors():
        names = _pick(family, p.policies(), list(p.families), POLICIES_KEY)
        root = p.model_copy(
            update={"train": p.train.model_copy(update={"progress_bar": p.train.progress_bar and not quiet})}
        )
        results = train_policies(names, root, MODELS_DIR, POLICIES_DIR, TRAIN_PLOTS, TRAIN_METRICS)
    for fam, r in results.items():
        console.print(f"{fam}: {json.dumps({k: v for k, v in r.items() if not isinstance(v, (dict, list))})}")


@app.command()
def evaluate(
    family: Annotated[
        str,
        typer.Option(
            help="a trained policy (a family, oracle, direct), a baseline (pid, pid_blind, pid_cautious), or all"
        ),
    ] = "all",
    track: Annotated[
        list[str] | None,
        typer.Option(
            help="a circuit instead of evaluate.tracks, repeatable: a built-in name or a racing CSV (x_m,y_m,w_tr_right_m,w_tr_left_m)"
        ),
    ] = None,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Drive every seed of the policies (and the baselines) in the source simulator on the evaluation suite."""
    from s3.evaluate.evaluate import BASELINES, evaluate_baseline
    from s3.evaluate.policy_eval import evaluate_policy, skipped_policy

    p = _params(params, set_)
    with _one_line_errors():
        if track:
            for spec in track:
                if spec.endswith(".csv") and not Path(spec).exists():
                    raise ParamsError(f"--track {spec}: no such file")
            p = p.model_copy(
                update={"evaluate": p.evaluate.model_validate({**p.evaluate.model_dump(), "tracks": list(track)})}
            )
        ep = p.evaluate
        known = [*p.policies(), *BASELINES]
        names = _pick(family, known, known, f"{POLICIES_KEY}; the baselines")
        results = {}
        for name in names:
            out, plots = Path(ep.out_dir) / f"{name}.json", Path(ep.plot_dir) / name
            if track:  # the pipeline's suite results (metrics/eval/<name>.json) stay as they are
                tag = "_".join(Path(t).stem for t in track)
                out, plots = (
                    Path(ep.out_dir) / "tracks" / f"{name}_{tag}.json",
                    Path(ep.plot_dir) / "tracks" / f"{name}_{tag}",
                )
            if name in BASELINES:
                results[name] = evaluate_baseline(name, p, out, plots)
                if not track:  # a custom circuit's results are not the pipeline's
                    log_evaluate(p, name, results[name])
                continue
            folder = POLICIES_DIR / name
            skipped = skipped_policy(name, folder, out, plots)  # direct with a BeamNG source
            if skipped is not None:
                results[name] = skipped
                console.print(f"evaluate: {name} not evaluated: {skipped['skipped']}")
                continue
            if not (folder / "policy.json").exists():
                if family == "all" and name not in p.families:
                    console.print(f"evaluate: skipping {name} ({folder} has no policy)")
                    continue
                raise ParamsError(f"{folder}: no policy; run `s3 train --family {name}` first")
            # direct was trained in the source simulator: no distilled env to compare with
            results[name] = evaluate_policy(name, folder, p, out, plots, MODELS_DIR, distilled=name != DIRECT)
            if not track:
                log_evaluate(p, name, results[name])
    _table_console().print(_evaluation_table(results))


@app.command()
def report(
    metrics_dir: Annotated[Path, typer.Option(help="where metrics/distill, train and eval live")] = Path("metrics"),
    reports_dir: Annotated[Path, typer.Option(help="reports/report.md goes here")] = Path("reports"),
    plots_dir: Annotated[Path, typer.Option(help="the accuracy-vs-quality figure goes here")] = Path("plots/report"),
    readme: Annotated[
        Path | None, typer.Option(help="also rewrite the results block of this file (README.md) from the report")
    ] = None,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Prediction accuracy vs policy quality, and the efficiency of distillation (metrics/report.json)."""
    from s3.io import write_text_atomic
    from s3.report.render import README_BEGIN, README_END, readme_block, readme_table, replace_readme_block
    from s3.report.report import report as run_report

    p = _params(params, set_)
    with _one_line_errors():
        if readme is not None and (not readme.is_file() or readme_block(readme.read_text()) is None):
            raise ParamsError(f"--readme {readme}: needs a file with one {README_BEGIN} ... {README_END} block")
        rep = run_report(
            metrics_dir, reports_dir, plots_dir, _table_console(), families=list(p.families), models=p.models()
        )
        if readme is not None:
            write_text_atomic(readme, replace_readme_block(readme.read_text(), readme_table(rep)))
            console.print(f"results block -> {readme}", highlight=False)


@app.command()
def probe(
    family: Annotated[str, typer.Option(help="a model family (params.yaml `families`), or all")] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object {family: probes}")] = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Fixed open-loop manoeuvres (asphalt and ice) in the source simulator and in models/<family>/, compared.

    The same probes `s3 evaluate` writes for a policy's model; here for any distilled model, no policy needed.
    """
    from s3.evaluate.probes import probe_folders, probe_table

    p = _params(params, set_)
    with _one_line_errors():
        results = probe_folders(_families(family, p), MODELS_DIR, p.sim)
    if as_json:
        print(json.dumps(results))
        return
    out = _table_console()
    for name, result in results.items():
        out.print(probe_table(name, result))


@app.command()
def holdout(
    family: Annotated[str, typer.Option(help="a model family, oracle, direct, or all (every trained policy)")] = "all",
    surface: Annotated[str, typer.Option(help="heavy_ice (3-6 patches per track) or dry (pace)")] = "heavy_ice",
    tracks: Annotated[int, typer.Option(min=1, max=64, help="held-out procedural tracks, 2 starts each")] = 8,
    seed: Annotated[
        int, typer.Option(help="generator seed of the held-out tracks (training validates on train.seed)")
    ] = 7,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Policies and the pid in the source simulator on held-out procedural tracks: where choices are judged.

    The road course stays held out; this is the check the README's decisions cite (s3.evaluate.holdout).
    """
    from s3.evaluate.holdout import SURFACES
    from s3.evaluate.holdout import holdout as run_holdout
    from s3.rl.export import load_policy_fn, policy_env_params

    p = _params(params, set_)
    with _one_line_errors():
        if surface not in SURFACES:
            raise ParamsError(f"--surface: {surface!r} is not one of {', '.join(SURFACES)}")
        known = p.policies()
        names = _pick(family, known, [n for n in known if (POLICIES_DIR / n / "policy.json").exists()], POLICIES_KEY)
        policies = {}
        for name in names:
            if not (POLICIES_DIR / name / "policy.json").exists():
                raise ParamsError(f"{POLICIES_DIR / name}: no policy; run `s3 train --family {name}` first")
            fn, meta = load_policy_fn(POLICIES_DIR / name)
            policies[name] = (fn, policy_env_params(meta))
        result = run_holdout(policies, p, surface, n_tracks=tracks, seed=seed)
    if as_json:
        print(json.dumps(result))
        return
    _table_console().print(_holdout_table(result))


TTQ_METRICS, TTQ_PLOT = Path("metrics/time_to_quality.json"), Path("plots/time_to_quality.png")


@app.command("time-to-quality")
def time_to_quality(params: ParamsPath = Path("params.yaml"), set_: Overrides = None) -> None:
    """Each route's time to a lap-completing policy: every kept checkpoint of direct and of each distilled policy's
    first seed on one fixed hold-out set in the source simulator (metrics/time_to_quality.json, docs/time-to-quality.md)."""
    from s3.evaluate.time_to_quality import time_to_quality as run

    p = _params(params, set_)
    with _one_line_errors():
        result = run(p, POLICIES_DIR, Path("metrics"), TTQ_METRICS, TTQ_PLOT)
    if "not_run" in result:
        console.print(f"time to quality not measured: {result['not_run']}", highlight=False)
        return
    for name in p.policies():
        r = result[name]
        if r.get("missing"):
            console.print(f"{name}: {r['missing']}", highlight=False)
        elif r["t_to_quality_s"] is not None:
            console.print(
                f"{name}: lap-completing after {_secs(r['t_to_quality_s'])} (real-time source {_secs(r['t_to_quality_real_time_s'])})",
                highlight=False,
            )
        else:
            console.print(f"{name}: not lap-completing within {_secs(r['not_reached_within_s'])}", highlight=False)
    console.print(f"-> {TTQ_METRICS}, {TTQ_PLOT}", highlight=False)


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f} s"


def _holdout_table(result: dict) -> object:
    from rich.table import Table

    t = Table(
        title=f"held-out procedural tracks ({result['surface']}, seed {result['seed']}), source simulator, {result['runs']} runs"
    )
    for col in ("driver", "laps", "lap share", "mean lap (s)", "lap time / pid's", "ends"):
        t.add_column(col)
    for name, r in result["drivers"].items():
        ratio = r.get("lap_time_vs_pid")
        t.add_row(
            name,
            f"{r['laps']}/{r['runs']}",
            f"{100 * r['mean_completion']:.0f}%",
            "-" if r["mean_lap_s"] is None else f"{r['mean_lap_s']:.1f}",
            "-" if ratio is None else f"{ratio:.3f} (n={r['n_common']})",
            ", ".join(f"{n} {k}" for k, n in r["ends"].items()) or "-",
        )
    return t


def _evaluation_table(results: dict[str, dict]) -> object:
    from rich.table import Table

    def ci(m: dict, digits: int = 2) -> str:
        if m.get("estimate") is None:
            return "-"
        lo_hi = "" if m.get("ci95") is None else f" [{m['ci95'][0]:.{digits}f}, {m['ci95'][1]:.{digits}f}]"
        return f"{m['estimate']:.{digits}f}{lo_hi}"

    table = Table(
        title="evaluate: the evaluation suite in the source simulator (mean over seeds [95 % two-level bootstrap])"
    )
    for col in ("driver", "circuit", "condition", "seeds", "laps", "completion", "lap share", "lap time (s)"):
        table.add_column(col, justify="left" if col in ("driver", "circuit", "condition") else "right")
    for name, res in results.items():
        for circuit, conds in res.get("summary", {}).items():
            for cond, b in conds.items():
                table.add_row(
                    name,
                    circuit,
                    cond,
                    str(b["seeds"]),
                    f"{b['completed']}/{b['runs']}",
                    ci(b["completion_rate"]),
                    ci(b["lap_share"]),
                    ci(b["lap_time_s"], 1),
                )
    return table


@bench_app.command("env")
def bench_env(
    family: Annotated[str, typer.Option(help="model family whose models/<family>/ to step")] = BICYCLE,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto")] = "auto",
    seconds: Annotated[float, typer.Option(help="wall seconds to time the source simulator (0 skips it)")] = 10.0,
    size: Annotated[
        list[int] | None, typer.Option(help="number of cars N, repeatable (default 256, 1024, 4096; a GPU wants more)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Distilled-env and PPO steps/s at N = 256, 1024, 4096 (or --size), against the source simulator.

    The same run measures the source simulator's single-process control steps/s and a PPO loop
    on it (one worker per core), and prints the ratios env_vs_source and ppo_vs_direct.
    """
    from s3.rl.bench import bench_env as run_env

    p = _params(params, set_)
    with _one_line_errors():
        if size and min(size) < 1:
            raise typer.BadParameter(f"--size must be >= 1, got {min(size)}")
        result = run_env(
            family,
            MODELS_DIR,
            sizes=size or (256, 1024, 4096),
            device=device,
            params=p.train,
            sim=p.sim,
            source_seconds=seconds,
        )
    if as_json:
        print(json.dumps(result))
    else:
        console.print_json(json.dumps(result))


@bench_app.command("sim")
def bench_sim(
    seconds: Annotated[float, typer.Option(help="simulated seconds to time")] = 20.0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Single-process control steps per second of the source simulator."""
    from s3.sim.bench import bench_sim as run

    p = _params(params, set_)
    with _one_line_errors():
        result = run(seconds=seconds, params=p.sim.mujoco, control_dt=p.sim.control_dt)
    if as_json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            console.print(f"{k}: {v}")


@track_app.command("show")
def track_show(
    track: Annotated[str, typer.Argument(help="'road_course' or a CSV file (x_m, y_m, w_tr_right_m, w_tr_left_m)")],
    condition: Annotated[str, typer.Option(help="road course condition: nominal or ice")] = "nominal",
    out: Annotated[Path | None, typer.Option(help="write a top-down plot here (PNG)")] = None,
) -> None:
    """Validate a track, print its length and corners, optionally plot it."""
    from s3.tracks.csv_loader import load_track_csv
    from s3.tracks.road_course import road_course

    with _one_line_errors():
        if track == "road_course":
            if condition not in ("nominal", "ice"):
                raise ParamsError(f"--condition: {condition!r} is not one of 'nominal', 'ice'")
            t = road_course(condition)  # type: ignore[arg-type]
        else:
            t = load_track_csv(Path(track))
    console.print(f"{t.name}: {t.length:.0f} m, {len(t.centerline)} points, {len(t.patches)} friction patches")
    if out is not None:
        import matplotlib.pyplot as plt

        from s3.viz.track_plot import plot_track, save_figure

        ax = plot_track(t, title=t.name)
        save_figure(ax.figure, out)
        plt.close(ax.figure)
        console.print(f"plot -> {out}")


@beamng_app.command("check")
def beamng_check(params: ParamsPath = Path("params.yaml"), set_: Overrides = None) -> None:
    """First contact with a BeamNG.tech (sim.beamng.host / port): reset at four headings, a run-up,
    throttle and the steering sign, the ice switch; one line each and a verdict (exit 1 if not ready)."""
    from s3.sim.beamng_check import first_contact, verdict

    p = _params(params, ["sim.backend=beamng", *(set_ or [])])
    with _one_line_errors():
        checks = first_contact(p.sim)
    for c in checks:
        console.print(
            f"{'[green]ok[/green]  ' if c.ok else '[red]FAIL[/red]'} {c.name}: {c.detail}",
            markup=True,
            highlight=False,
            soft_wrap=True,
        )
    console.print(verdict(checks), highlight=False)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


@study_app.command("run")
def study_run(
    name: Annotated[str, typer.Argument(help="a set in studies/ (ablation, graded) or a study .yaml file")],
    variant: Annotated[list[str] | None, typer.Option(help="only this variant (repeatable)")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list the variants and their commands; run nothing")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="also run variants whose result file exists")] = False,
    root: Annotated[Path, typer.Option(help="the workspaces: ROOT/<set>/<variant>")] = Path("/tmp/s3-study"),
    results: Annotated[Path, typer.Option(help="the results: RESULTS/<set>/<variant>.json")] = Path(
        "metrics/experiments"
    ),
) -> None:
    """Run a set's variants, each in its own scratch workspace (dvc repro evaluate@<policy>), into metrics/experiments/<set>/."""
    from s3.platform.study import StudyError, run_study

    try:
        with _one_line_errors():
            run_study(name, variant, root=root, results=results, force=force, dry_run=dry_run, say=typer.echo)
    except StudyError as e:
        console.print(f"[red]error:[/red] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def main() -> None:
    """Entry point for `python -m s3`."""
    app(sys.argv[1:])
