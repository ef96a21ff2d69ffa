"""The `s3` command line: a thin layer over the stage functions.

Every command reads params.yaml (or --params), applies `--set section.key=value` overrides and
validates them before any work; known failures print one line and exit non-zero.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from s3.config import Params, ParamsError, load_params

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Sim2Sim2Sim: collect, distill, train, evaluate, report.")
bench_app = typer.Typer(no_args_is_help=True, help="Throughput benchmarks that print JSON.")
track_app = typer.Typer(no_args_is_help=True, help="Inspect tracks: the built-in road course or a CSV circuit.")
app.add_typer(bench_app, name="bench")
app.add_typer(track_app, name="track")

console = Console(stderr=True)
ParamsPath = Annotated[Path, typer.Option("--params", "-p", help="params file")]
Overrides = Annotated[list[str] | None, typer.Option("--set", help="override, e.g. --set collect.episodes=10")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars")]


def _known_errors() -> tuple[type[Exception], ...]:
    from s3.data.rollouts import RolloutError
    from s3.dynamics.checkpoint import CheckpointError
    from s3.dynamics.distill import DistillError
    from s3.io import WorkspaceBusy
    from s3.sim.base import SimulatorError
    from s3.tracks.track import TrackError

    return (ParamsError, RolloutError, WorkspaceBusy, SimulatorError, TrackError, CheckpointError, DistillError)


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


@app.command()
def collect(params: ParamsPath = Path("params.yaml"), set_: Overrides = None, quiet: Quiet = False) -> None:
    """Drive the source simulator and record rollouts to data/rollouts/."""
    from s3.data.collect import collect as run

    p = _params(params, set_)
    with _one_line_errors():
        manifest = run(p, Path("."), quiet=quiet)
    m = json.loads(manifest.read_text())
    console.print(
        f"collected {m['rows']} rows in {m['episodes']} episodes ({m['episodes_dropped']} dropped) "
        f"with {m['simulator_version']} -> {manifest.parent}"
    )


MODELS_DIR, DISTILL_METRICS, DISTILL_PLOTS = Path("models"), Path("metrics/distill"), Path("plots/distill")


@app.command()
def distill(
    family: Annotated[str, typer.Option(help="bicycle, ddm, transformer, dytr, or all")] = "all",
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = None,
    quiet: Quiet = False,
) -> None:
    """Train dynamics models on data/rollouts/ and measure their predictive accuracy."""
    from s3.dynamics.distill import comparison_table, distill_many
    from s3.dynamics.params import FAMILIES

    p = _params(params, set_)
    with _one_line_errors():
        if family != "all" and family not in FAMILIES:
            raise ParamsError(f"--family: {family!r} is not one of {', '.join(FAMILIES)}, all")
        families = list(FAMILIES) if family == "all" else [family]
        dp = p.distill.model_copy(update={"progress_bar": p.distill.progress_bar and not quiet})
        results = distill_many(families, Path(p.collect.out_dir), MODELS_DIR, DISTILL_METRICS, DISTILL_PLOTS, dp)
    Console().print(comparison_table(results))


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


def main() -> None:
    """Entry point for `python -m s3`."""
    app(sys.argv[1:])
