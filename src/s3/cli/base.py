"""What every `s3` command shares: the Typer apps, the options, params loading and one-line errors.

Every command reads params.yaml (or --params), applies `--set section.key=value` overrides and
validates them before any work; the project's own failures print one line and exit 2.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from s3.config import Params, ParamsError, load_params

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Sim2Sim2Sim: collect, distill, train, evaluate, report."
)
bench_app = typer.Typer(no_args_is_help=True, help="Throughput benchmarks that print JSON.")
track_app = typer.Typer(no_args_is_help=True, help="Inspect tracks: the built-in road course or a CSV circuit.")
study_app = typer.Typer(
    no_args_is_help=True, help="Experiment sets beside the default run: studies/<set>.yaml (docs/study.md)."
)
beamng_app = typer.Typer(no_args_is_help=True, help="BeamNG.tech as the source simulator (docs/beamng.md).")
app.add_typer(bench_app, name="bench")
app.add_typer(track_app, name="track")
app.add_typer(study_app, name="study")
app.add_typer(beamng_app, name="beamng")

console = Console(stderr=True)

ParamsPath = Annotated[Path, typer.Option("--params", "-p", help="params file")]
Overrides = Annotated[list[str] | None, typer.Option("--set", help="override, e.g. --set collect.episodes=10")]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="no per-item detail (chunk lines, Lightning logs); progress still shows")
]
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON object")]

# The pipeline's fixed paths (dvc.yaml's outs name the same).
MODELS_DIR, POLICIES_DIR = Path("models"), Path("policies")


def table_console() -> Console:
    """stdout for tables; wide when not a terminal (dvc, logs), where rich would assume 80 columns."""
    out = Console()
    return out if out.is_terminal else Console(width=180)


def _known_errors() -> tuple[type[Exception], ...]:
    """The project's own error classes, of the modules already imported: an exception of a class
    whose module was never imported cannot occur, and importing them (lightning, rsl_rl) costs seconds."""
    where = {
        "s3.compute.retry": "TooMuchLost",
        "s3.compute.sim_pool": "SourceWorkerError",
        "s3.data.rollouts": "RolloutError",
        "s3.dynamics.checkpoint": "CheckpointError",
        "s3.dynamics.distill": "DistillError",
        "s3.io": "WorkspaceBusy",
        "s3.platform.study": "StudyError",
        "s3.rl.runner": "TrainError",
        "s3.sim.base": "SimulatorError",
        "s3.tracks.track": "TrackError",
    }
    return (ParamsError, *(getattr(sys.modules[m], name) for m, name in where.items() if m in sys.modules))


def fail(message: object) -> typer.Exit:
    """Print `message` as one red error line; the Exit (code 2) to raise."""
    console.print(f"[red]error:[/red] {message}", markup=True, highlight=False, soft_wrap=True)
    return typer.Exit(2)


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn the project's own failures into one readable line and exit code 2."""
    try:
        yield
    except _known_errors() as e:
        raise fail(e) from None


def load(path: Path, overrides: list[str] | None) -> Params:
    """The validated params of `path` with `--set` overrides (a bad key: one line, exit 2)."""
    with one_line_errors():
        return load_params(path, overrides or [])
