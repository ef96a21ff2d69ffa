"""The report's ice-levers figure: what each lever trades, lap time against laps finished.

Left, the choice: every training seed of every variant on the icy procedural hold-out in the source
(lap share against its mean lap time over completed hold-out laps), with the target line. Right, the
report: each variant on the evaluation suite's ice (completion with its interval against the mean lap
time), beside the cautious PID.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3.catalog import PID_CAUTIOUS
from s3.viz.track_plot import new_figure, save_figure

MARKERS = "osD^vP*Xh<>"


def plot_lever_tradeoff(path: str | Path, rows: Sequence[dict[str, Any]], target: float, title: str) -> Path:
    """rows: s3.report.levers.lever_rows (each with `seed_points` and the suite cells); target: the icy
    hold-out lap share every seed should reach (drawn dashed)."""
    fig = new_figure((11.0, 4.4))
    hold, suite = fig.subplots(1, 2)
    for i, r in enumerate(rows):
        style = {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)], "label": r["variant"]}
        pts = [p for p in r.get("seed_points") or [] if p.get("lap_time_s") is not None and p.get("ice") is not None]
        if pts:
            hold.plot([p["lap_time_s"] for p in pts], [p["ice"] for p in pts], ls="none", ms=6, alpha=0.8, **style)
        done, lap = r["suite_ice_completion"], r["suite_ice_lap_time_s"]
        if done.get("estimate") is not None and lap.get("estimate") is not None:
            lo, hi = done.get("ci95") or (done["estimate"], done["estimate"])
            err = [[100 * (done["estimate"] - lo)], [100 * (hi - done["estimate"])]]
            suite.errorbar([lap["estimate"]], [100 * done["estimate"]], yerr=err, ms=7, capsize=3, **style)
    cautious = next((r for r in rows if r.get("cautious_ice_lap_time_s") is not None), None)
    if cautious is not None and cautious.get("cautious_ice_completion") is not None:
        x, y = cautious["cautious_ice_lap_time_s"], 100 * cautious["cautious_ice_completion"]
        (star,) = suite.plot([x], [y], "k*", ms=12, label=PID_CAUTIOUS)
        suite.legend(handles=[star], fontsize=7, loc="lower right")
    hold.axhline(target, color="0.3", ls="--", lw=1, label=f"target {target:.2f}, every seed")
    hold.set(xlabel="mean lap time over completed hold-out laps (s)", ylabel="icy hold-out lap share (per seed)")
    hold.set_title("choice: procedural hold-out, every training seed", fontsize=9)
    suite.set(xlabel="mean ice lap time on the suite (s)", ylabel="suite ice laps completed (%), 95 % interval")
    suite.set_title("report: evaluation suite, ice", fontsize=9)
    for ax in (hold, suite):
        ax.grid(alpha=0.3)
    hold.set_ylim(-0.03, 1.03)
    suite.set_ylim(-3, 103)
    hold.legend(fontsize=6, loc="lower right", ncol=2)
    fig.suptitle(title)
    return save_figure(fig, path)
