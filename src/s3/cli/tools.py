"""The `s3` tools beside the pipeline's stages: regress, probe, holdout, dagger, bench, track, beamng, study.

Like the stage commands (s3.cli): parse, load params, call one function, print what it returned.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from s3.catalog import BICYCLE
from s3.cli.base import (
    MODELS_DIR,
    POLICIES_DIR,
    AsJson,
    Overrides,
    ParamsPath,
    app,
    beamng_app,
    bench_app,
    console,
    fail,
    load,
    one_line_errors,
    study_app,
    table_console,
    track_app,
)
from s3.config import FAMILIES_KEY, ParamsError, pick_names


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

    p = load(params, set_)
    try:
        if record:
            console.print(f"baseline -> {record_baseline(Path('.'), p.regress, baseline)}")
            return
        ok, text = run_check(Path("."), p.regress, baseline, ref, verbose)
    except (FileNotFoundError, subprocess.CalledProcessError, json.JSONDecodeError, KeyError) as e:
        raise fail(e) from None
    print(text)
    if not ok:
        raise typer.Exit(1)


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

    p = load(params, set_)
    with one_line_errors():
        families = pick_names(family, list(p.families), list(p.families), FAMILIES_KEY)
        results = probe_folders(families, MODELS_DIR, p.sim)
    if as_json:
        print(json.dumps(results))
        return
    out = table_console()
    for name, result in results.items():
        out.print(probe_table(name, result))


@app.command()
def holdout(
    family: Annotated[
        str, typer.Option(help="a model family, the oracle, direct, or all (every trained policy)")
    ] = "all",
    surface: Annotated[str, typer.Option(help="heavy_ice (3-6 patches per track) or dry (pace)")] = "heavy_ice",
    tracks: Annotated[int, typer.Option(min=1, max=64, help="held-out procedural tracks, 2 starts each")] = 8,
    seed: Annotated[
        int, typer.Option(help="generator seed of the held-out tracks (training validates on train.seed)")
    ] = 7,
    pursuit: Annotated[
        list[float] | None,
        typer.Option(
            min=0.1, max=20.0, help="also a blind centerline follower at this lateral acceleration (m/s^2); repeatable"
        ),
    ] = None,
    baseline: Annotated[
        list[str] | None,
        typer.Option(help="also a registered baseline beside the pid (pid_blind, pid_cautious); repeatable"),
    ] = None,
    seeds: Annotated[
        bool, typer.Option("--seeds", help="one row per trained seed instead of the exported one")
    ] = False,
    as_json: AsJson = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Policies and the pid in the source simulator on held-out procedural tracks: where choices are judged.

    The road course stays held out; this is the check the README's decisions cite (s3.evaluate.holdout).
    """
    from s3.cli.tables import holdout_table
    from s3.evaluate.holdout import holdout_stage

    p = load(params, set_)
    with one_line_errors():
        result = holdout_stage(
            p,
            family,
            POLICIES_DIR,
            surface,
            n_tracks=tracks,
            seed=seed,
            pursuit=pursuit or (),
            baselines=baseline or (),
            every_seed=seeds,
        )
    if as_json:
        print(json.dumps(result))
        return
    table_console().print(holdout_table(result))


@app.command()
def dagger(
    policy: Annotated[str, typer.Option(help="the policy that drives (policies/<name>/, its exported seed)")],
    round_: Annotated[int, typer.Option("--round", min=1, help="the round (1, 2, ...): its episode ids")] = 1,
    episodes: Annotated[int, typer.Option(min=1, max=100_000, help="collection episodes the policy drives")] = 200,
    ice: Annotated[float, typer.Option(min=0.0, max=1.0, help="share of the episodes on their icy track")] = 1.0,
    noise: Annotated[float, typer.Option(min=0.0, max=1.0, help="std of Gaussian noise on its commands")] = 0.0,
    out: Annotated[Path | None, typer.Option(help="the round's dataset (default data/dagger/round<k>)")] = None,
    model: Annotated[
        Path | None, typer.Option(help="also measure this distilled model's error on the round's rows")
    ] = None,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """A DAgger-style round: the policy drives collection episodes in the source; its rows, for re-distillation.

    Distill them beside the collected data with `--set distill.extra_rollouts=[data/dagger/round1]`
    (s3.dagger.round; the manifest says which policy drove). `--model models/ddm` also writes that model's
    open-loop error on the round's rows to <out>/model_error.json (s3.dagger.error)."""
    from s3.dagger.error import model_error
    from s3.dagger.round import collect_round
    from s3.io import write_json_atomic

    p = load(params, set_)
    folder = out or Path("data/dagger") / f"round{round_}"
    with one_line_errors():
        path = collect_round(p, POLICIES_DIR / policy, folder, round_, episodes, ice, noise)
    manifest = json.loads(path.read_text())
    who = manifest["provenance"]
    console.print(
        f"{path}: {manifest['rows']} rows, {manifest['episodes']} episodes ({manifest['episodes_dropped']} dropped), "
        f"driven by {who['policy']} seed {who['seed']} (weights {who['weights_sha256'][:12]})",
        highlight=False,
    )
    if model is not None:
        with one_line_errors():
            err = model_error(model, folder)
        write_json_atomic(folder / "model_error.json", err)
        console.print(
            f"{model} on the round's rows: ADE 1 s {err['ade_1s']:.3f} m, 2 s {err.get('ade_2s', float('nan')):.3f} m "
            f"({err['windows']} windows) -> {folder / 'model_error.json'}",
            highlight=False,
        )


@bench_app.command("env")
def bench_env(
    family: Annotated[str, typer.Option(help="model family whose models/<family>/ to step")] = BICYCLE,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto")] = "auto",
    seconds: Annotated[float, typer.Option(help="wall seconds to time the source simulator (0 skips it)")] = 10.0,
    size: Annotated[
        list[int] | None, typer.Option(help="number of cars N, repeatable (default 256, 1024, 4096; a GPU wants more)")
    ] = None,
    as_json: AsJson = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Distilled-env and PPO steps/s at N = 256, 1024, 4096 (or --size), where a PPO iteration and a validation
    spend their time, against the source simulator.

    The same run measures the source simulator's single-process control steps/s and a PPO loop
    on it (one worker per core), and prints the ratios env_vs_source and ppo_vs_direct.
    """
    from s3.rl.bench import bench_env as run_env

    p = load(params, set_)
    if size and min(size) < 1:
        raise typer.BadParameter(f"--size must be >= 1, got {min(size)}")
    with one_line_errors():
        sizes = size or (256, 1024, 4096)
        result = run_env(
            family, MODELS_DIR, sizes=sizes, device=device, params=p.train, sim=p.sim, source_seconds=seconds
        )
    if as_json:
        print(json.dumps(result))
    else:
        console.print_json(json.dumps(result))


@bench_app.command("sim")
def bench_sim(
    seconds: Annotated[float, typer.Option(help="simulated seconds to time")] = 20.0,
    as_json: AsJson = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
) -> None:
    """Single-process control steps per second of the source simulator."""
    from s3.sim.bench import bench_sim as run

    p = load(params, set_)
    with one_line_errors():
        result = run(seconds=seconds, params=p.sim.mujoco, control_dt=p.sim.control_dt)
    if as_json:
        print(json.dumps(result))
        return
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

    with one_line_errors():
        if track == "road_course":
            if condition not in ("nominal", "ice"):
                raise ParamsError(f"--condition: {condition!r} is not one of 'nominal', 'ice'")
            t = road_course(condition)  # type: ignore[arg-type]
        else:
            t = load_track_csv(Path(track))
    console.print(f"{t.name}: {t.length:.0f} m, {len(t.centerline)} points, {len(t.patches)} friction patches")
    if out is not None:
        from s3.viz.track_plot import save_track_plot

        save_track_plot(t, out)
        console.print(f"plot -> {out}")


@beamng_app.command("check")
def beamng_check(params: ParamsPath = Path("params.yaml"), set_: Overrides = None) -> None:
    """First contact with a BeamNG.tech (sim.beamng.host / port): reset at four headings, a run-up,
    throttle and the steering sign, the ice switch; one line each and a verdict (exit 1 if not ready)."""
    from s3.sim.beamng_check import first_contact, verdict

    p = load(params, ["sim.backend=beamng", *(set_ or [])])
    with one_line_errors():
        checks = first_contact(p.sim)
    for c in checks:
        mark = "[green]ok[/green]  " if c.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {c.name}: {c.detail}", markup=True, highlight=False, soft_wrap=True)
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
        "records/experiments"
    ),
    base: Annotated[
        Path | None,
        typer.Option(help="start every variant from this params file, K (train.seeds) included: `make study`"),
    ] = None,
) -> None:
    """Run a set's variants, each in its own scratch workspace (dvc repro evaluate@<policy>), into
    records/experiments/<set>/."""
    from s3.platform.study import run_study

    with one_line_errors():
        run_study(name, variant, root=root, results=results, force=force, dry_run=dry_run, say=typer.echo, base=base)
