"""The section "Training, every seed" of reports/report.md, in render.py's formats (rows: s3.report.training)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from s3.report.cost import DASH

TRAINING_COLUMNS = (
    "policy",
    "validated in",
    "hold-out lap share, all runs (per seed)",
    "dry runs (per seed)",
    "dry: lowest / mean / SD (n seeds)",
    "env steps (M): kept checkpoint of run",
    "ended by",
    "wall per seed (min)",
)
FIGURE = "training_curves.png"  # plots/report/<FIGURE>: s3.viz.seed_curves.plot_seed_curves


def _each(seeds: list[Mapping[str, Any]], key: str, fmt: Callable[[float], str]) -> str:
    return " / ".join(DASH if s.get(key) is None else fmt(s[key]) for s in seeds)


def _m(steps: float | None) -> str:
    return DASH if steps is None else f"{steps / 1e6:.1f}"


def _dry(d: Mapping[str, Any]) -> str:
    if not d.get("n"):
        return DASH
    sd = DASH if d["sd"] is None else f"{d['sd']:.2f}"
    return f"{d['min']:.2f} / {d['mean']:.2f} / {sd} (n={d['n']})"


def training_rows_md(rows: list[Mapping[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        seeds = r["seeds"]
        ended = [s.get("stopped_by") or DASH for s in seeds]
        out.append(
            [
                r["policy"],
                r["in"],
                _each(seeds, "score", lambda x: f"{x:.2f}"),
                _each(seeds, "score_dry", lambda x: f"{x:.2f}"),
                _dry(r["dry"]),
                " / ".join(f"{_m(s.get('kept_env_steps'))} of {_m(s.get('env_steps'))}" for s in seeds),
                ", ".join(ended) if len(set(ended)) > 1 else f"{ended[0]} x{len(ended)}",
                _each(seeds, "wall_s", lambda x: f"{x / 60:.1f}"),
            ]
        )
    return out


def training_section(
    rows: list[Mapping[str, Any]], md_table: Callable[[Any, list[list[str]]], str], figure: str | None = None
) -> list[str]:
    """The section (nothing when no policy has a train record); `figure`: the curves' markdown image, if drawn."""
    if not rows:
        return []
    return [
        "## Training, every seed (procedural hold-out)",
        "Each seed's kept checkpoint on the held-out procedural tracks that training validates on (inside its "
        "distilled model; `direct` in the source simulator): the lap share of all runs and of the dry runs, "
        "where its kept checkpoint lies and how many steps it ran, and what ended it (plateau: no gain for the "
        "rule's chunks; step cap; wall-clock cap = truncated). These are the figures recipes are chosen on; the "
        "evaluation suite above is not.",
        md_table(TRAINING_COLUMNS, training_rows_md(rows)),
        *([figure] if figure else []),
    ]
