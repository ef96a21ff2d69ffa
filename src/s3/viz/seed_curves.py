"""The report's training figure: every seed's validation curve on the procedural hold-out.

Apart from train_plots.py (the train stages' own figures), so that changing this figure re-runs the report
stage only, not every train stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from s3.viz.track_plot import new_figure, save_figure


def plot_seed_curves(path: str | Path, rows: Sequence[dict[str, Any]], title: str) -> Path:
    """One panel per policy (s3.report.training's rows): every seed's validation lap share against environment
    steps, dry runs solid and icy runs dashed (all runs dotted where the dry/icy split is not recorded), each
    seed's kept checkpoint circled on its dry (else all-runs) curve, and the panel titled with where it validated."""
    rows = [r for r in rows if any(s["curve"] for s in r["seeds"])]
    cols = min(3, max(1, len(rows)))
    fig = new_figure((3.8 * cols, 3.0 * -(-max(1, len(rows)) // cols)))
    axes = np.atleast_1d(fig.subplots(-(-max(1, len(rows)) // cols), cols, squeeze=False)).ravel()
    for ax, r in zip(axes, rows, strict=False):
        for i, s in enumerate(r["seeds"]):
            c = f"C{i}"
            x = [p["env_steps"] for p in s["curve"]]
            split = any(p.get("score_dry") is not None for p in s["curve"])
            lines = (("score_dry", "-"), ("score_ice", "--")) if split else (("score", ":"),)
            for key, ls in lines:
                ax.plot(x, [p.get(key) for p in s["curve"]], ls=ls, color=c, lw=1.1, marker=".", ms=3)
            kept = s.get("score_dry") if split else s.get("score")
            if s.get("kept_env_steps") is not None and kept is not None:
                ax.plot(
                    [s["kept_env_steps"]],
                    [kept],
                    "o",
                    color=c,
                    ms=6,
                    mfc="none",
                    label="kept" if s["seed"] is None else f"seed {s['seed']}",
                )
        ax.set_title(f"{r['policy']} (in the {r['in']})", fontsize=9)
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes[len(rows) :]:
        ax.set_axis_off()
    axes[0].set_ylabel("hold-out lap share")
    fig.suptitle(title)
    return save_figure(fig, path)
