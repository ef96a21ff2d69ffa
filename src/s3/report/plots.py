"""The report's figure: prediction error against policy quality, one point per model family.

If accuracy predicted policy quality, the points would fall on a line down and to the right
(completion) or up and to the right (lap time). Baselines without a dynamics model (pid,
direct PPO) are horizontal reference lines. Built on matplotlib's object API (Agg, no pyplot).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes

from s3.catalog import POLICIES
from s3.viz.track_plot import new_figure, save_figure

# (error metric in the report rows, condition, policy quantity, y label), row by row
PANELS = (
    ("ade_2s_all", "nominal", "completion_rate", "completion rate, nominal"),
    ("ade_2s_ice", "ice", "completion_rate", "completion rate, ice"),
    ("probe_3s_ice", "ice", "lap_share", "share of the ice lap driven"),
    ("ade_2s_all", "nominal", "lap_time_s", "lap time, nominal (s)"),
    ("ade_2s_ice", "ice", "lap_time_s", "lap time, ice (s)"),
    ("probe_3s_asphalt", "nominal", "lap_time_s", "lap time, nominal (s)"),
)
X_LABELS = {
    "ade_2s_all": "ADE 2 s, all test windows (m)",
    "ade_2s_ice": "ADE 2 s, ice windows (m)",
    "probe_3s_ice": "manoeuvre probes on ice, error at 3 s (m)",
    "probe_3s_asphalt": "manoeuvre probes on asphalt, error at 3 s (m)",
}
POINT_COLOUR, REFERENCE_STYLE = "0.2", ("0.7", "--")  # a policy the catalog does not know (or draws the other way)


def _point_colour(name: str) -> str:
    """The colour of a policy drawn as a point (s3.catalog: one with a dynamics model)."""
    p = POLICIES.get(name)
    return p.colour if p is not None and p.line is None else POINT_COLOUR


def _reference_style(name: str) -> tuple[str, str]:
    """(colour, line style) of a policy drawn as a horizontal reference line (s3.catalog: one without a model)."""
    p = POLICIES.get(name)
    return (p.colour, p.line) if p is not None and p.line is not None else REFERENCE_STYLE


def _panel(ax: Axes, rows: Mapping[str, Mapping[str, Any]], error: str, cond: str, quantity: str, ylabel: str) -> None:
    """Labelled family points and the baselines' reference lines on one axis."""
    shown = 0
    for name, r in rows.items():
        x, y = r["prediction"].get(error), r["policy"][cond].get(quantity)
        if r["kind"] == "baseline" and y is not None:
            color, style = _reference_style(name)
            ax.axhline(y, color=color, ls=style, lw=1.0)
            ax.annotate(
                name, (0.99, y), xycoords=("axes fraction", "data"), fontsize=7, color=color, va="bottom", ha="right"
            )
        elif x is not None and y is not None:
            hollow = r["kind"] != "family"
            color = _point_colour(name)
            ax.scatter([x], [y], s=55, color="none" if hollow else color, edgecolors=color, zorder=3)
            ax.annotate(name, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8, color=color)
            shown += 1
    if not shown:
        ax.text(
            0.5,
            0.5,
            "no policy with both\nprediction error and this metric",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=8,
            color="0.4",
        )
    if quantity in ("completion_rate", "lap_share"):
        ax.set_ylim(-0.05, 1.08)
    ax.set_xlabel(X_LABELS[error], fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def _title(report: Mapping[str, Any]) -> str:
    head = report["correlation"]["headline"]
    c = report["correlation"][head]
    rho = f"rho = {c['rho']:+.2f} (n = {c['n']})" if c["rho"] is not None else f"rho not defined ({c['reason']})"
    return (
        f"prediction error vs policy quality in the source simulator\n"
        f"Spearman({head}, quality): {rho}\n(-1 = the better predictor drives better; hollow = oracle)"
    )


def plot_accuracy_vs_quality(report: Mapping[str, Any], path: str | Path) -> Path:
    """2 x 3 panels: completion and lap time (nominal / ice) against the matching 2 s ADE, and
    against the manoeuvre probes' error (s3.evaluate.probes)."""
    fig = new_figure((14.0, 8.0))
    axes = fig.subplots(2, 3, squeeze=False)
    for ax, (error, cond, quantity, ylabel) in zip(axes.flat, PANELS):
        _panel(ax, report["rows"], error, cond, quantity, ylabel)
    fig.suptitle(_title(report), fontsize=10)
    return save_figure(fig, path, dpi=110)
