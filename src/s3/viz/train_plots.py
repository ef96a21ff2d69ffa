"""Learning curves of the train stage: training reward, validation score, speed and episode length."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from s3.io import write_text_atomic
from s3.viz.track_plot import new_figure, save_figure


def _series(
    curve: Sequence[tuple[str, int, float]], tag: str, steps_per_iteration: int
) -> tuple[np.ndarray, np.ndarray]:
    pts = [(it, v) for t, it, v in curve if t == tag]
    if not pts:
        return np.zeros(0), np.zeros(0)
    it, v = np.array(pts, dtype=float).T
    return (it + 1) * steps_per_iteration, v


def write_curve_csv(path: str | Path, validation: Sequence[dict[str, Any]]) -> Path:
    """The validation points as CSV: env_steps, score (mean lap completion on the held-out tracks) and
    laps_completed (their share of completed laps); dvc.yaml plots it (x env_steps, y score)."""
    lines = ["env_steps,score,laps_completed"] + [
        f"{int(v['env_steps'])},{v['mean_completion']:.6g},{v['completion_rate']:.6g}" for v in validation
    ]
    return write_text_atomic(path, "\n".join(lines) + "\n")


def plot_learning_curve(
    path: str | Path,
    curve: Sequence[tuple[str, int, float]],
    validation: Sequence[dict[str, Any]],
    steps_per_iteration: int,
    title: str,
    best_env_steps: int | None = None,
) -> Path:
    """Three panels against environment steps; `curve` holds rsl_rl's (tag, iteration, value)."""
    fig = new_figure((11.0, 3.6))
    axes = fig.subplots(1, 3)
    x, y = _series(curve, "Train/mean_reward", steps_per_iteration)
    axes[0].plot(x, y, color="tab:blue", lw=1.2)
    axes[0].set_title("mean episode reward (training)")
    if validation:
        vx = np.array([v["env_steps"] for v in validation], dtype=float)
        axes[1].plot(
            vx, [v["mean_completion"] for v in validation], "o-", color="tab:green", ms=3, label="mean lap completion"
        )
        axes[1].plot(
            vx, [v["completion_rate"] for v in validation], "s--", color="tab:olive", ms=3, label="laps completed"
        )
        if best_env_steps is not None:
            axes[1].axvline(best_env_steps, color="0.5", ls=":", lw=1.0, label="kept checkpoint")
        axes[1].set_ylim(-0.03, 1.03)
        axes[1].legend(fontsize=7, loc="lower right")
    axes[1].set_title("held-out procedural tracks (validation)")
    x, y = _series(curve, "Env/speed", steps_per_iteration)
    axes[2].plot(x, y, color="tab:red", lw=1.2, label="mean speed [m/s]")
    x, y = _series(curve, "Train/mean_episode_length", steps_per_iteration)
    if len(y):
        ax2 = axes[2].twinx()
        ax2.plot(x, y, color="tab:purple", lw=1.0, alpha=0.7)
        ax2.set_ylabel("episode length [steps]", color="tab:purple", fontsize=8)
    axes[2].set_title("speed (red), episode length (purple)")
    for ax in axes:
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return save_figure(fig, path)
