"""Plots of the distill stage: predicted vs true trajectories, error vs horizon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from s3.io import atomic_path

SPLIT_TITLES = {
    "all": "all test windows",
    "asphalt": "asphalt only",
    "ice": "ice only",
    "transition": "crossing a friction transition",
}


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_trajectories(path: str | Path, episodes: list[dict[str, Any]], title: str) -> Path:
    """One panel per episode excerpt: the true path (ice rows highlighted) and open-loop predictions.

    Each entry: `title`, `xy` [T, 2] true positions, `ice` [T] bool, `segments` list of [H+1, 2]
    predicted positions, each starting on the true path.
    """
    n = max(1, len(episodes))
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 5.0), squeeze=False)
    for ax, ep in zip(axes[0], episodes):
        xy, ice = np.asarray(ep["xy"]), np.asarray(ep["ice"], bool)
        ax.plot(xy[:, 0], xy[:, 1], color="0.2", lw=1.2, label="true")
        if ice.any():
            ax.scatter(xy[ice, 0], xy[ice, 1], s=6, color="tab:cyan", label="ice (mu < 0.5)", zorder=3)
        for i, seg in enumerate(ep["segments"]):
            seg = np.asarray(seg)
            ax.plot(
                seg[:, 0],
                seg[:, 1],
                color="tab:red",
                lw=1.0,
                alpha=0.85,
                label="predicted 3 s open loop" if i == 0 else None,
            )
            ax.plot(seg[0, 0], seg[0, 1], "o", color="tab:red", ms=2.5)
        ax.set_title(ep["title"], fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="best")
    fig.suptitle(title)
    return _save(fig, path)


def plot_error_vs_horizon(
    path: str | Path, curves: dict[str, dict[str, Any]], title: str = "open-loop position error"
) -> Path:
    """Mean position error vs prediction horizon, one panel per surface split, one line per model.

    `curves`: label -> the `error_vs_horizon` entry of a metrics JSON ({"t": [...], split: [...]}).
    """
    splits = [s for s in SPLIT_TITLES if any(c.get(s) for c in curves.values())]
    fig, axes = plt.subplots(
        1, max(1, len(splits)), figsize=(4.2 * max(1, len(splits)), 3.6), squeeze=False, sharey=False
    )
    for ax, split in zip(axes[0], splits):
        for label, c in curves.items():
            if c.get(split):
                ax.plot(c["t"], c[split], label=label, lw=1.4)
        ax.set_title(SPLIT_TITLES[split], fontsize=9)
        ax.set_xlabel("horizon (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean position error (m)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def plot_calibration(path: str | Path, calibration: dict[str, Any], title: str = "ensemble spread vs error") -> Path:
    """An ensemble's mean error against its members' spread, by decile of spread, one line per surface.

    `calibration`: the `ensemble.calibration` entry of a distill record (s3.dynamics.ensemble.calibration).
    A calibrated spread rises with the error; the dashed line is error = spread.
    """
    fig, ax = plt.subplots(figsize=(5.0, 4.0))
    top = 0.0
    for split, c in calibration.items():
        if not c:
            continue
        pts = [(s, e) for s, e in zip(c["spread_m"], c["error_m"]) if s is not None and e is not None]
        ax.plot(*zip(*pts), marker="o", lw=1.2, label=f"{split} (rho {c['spearman_rho']:.2f}, n={c['windows']})")
        top = max(top, *(max(p) for p in pts))
    ax.plot([0, top], [0, top], ls="--", color="grey", lw=0.8)
    ax.set_xlabel("members' spread (m)")
    ax.set_ylabel("mean prediction's error (m)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)
