"""The time-to-quality figure: lap share on the fixed hold-out set against each route's time, measured and for a
real-time source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from s3.catalog import DIRECT
from s3.io import write_text_atomic
from s3.viz.track_plot import new_figure, save_figure

ROUTE_KEYS = ("tracks", "rule", "lap_share_needed", "time_axis", "collect", "distilled_best", "budget_rule")


def write_curves_csv(folder: str | Path, result: dict[str, Any]) -> Path:
    """Each route's curve as `<folder>/<route>.csv` (t_s, t_real_time_s, env_steps, lap_share, completion),
    for `dvc plots diff` to overlay experiments (dvc.yaml: x t_s, y lap_share); stale routes' files go."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cols = ("t_s", "t_real_time_s", "env_steps", "lap_share", "completion")
    routes = {k: v for k, v in result.items() if k not in ROUTE_KEYS and isinstance(v, dict) and v.get("curve")}
    for stale in folder.glob("*.csv"):
        if stale.stem not in routes:
            stale.unlink()
    for name, route in routes.items():
        rows = [",".join(cols)] + [
            ",".join("" if p.get(c) is None else f"{p[c]:.6g}" for c in cols) for p in route["curve"]
        ]
        write_text_atomic(folder / f"{name}.csv", "\n".join(rows) + "\n")
    return folder


def plot_time_to_quality(path: str | Path, result: dict[str, Any]) -> Path:
    """Two panels (measured wall clock; a real-time source), log time axis: every route's lap-share curve,
    the 'half the laps' line, each route's time to quality (a star) and the distilled routes' one-time offset
    (dotted)."""
    fig = new_figure((11.0, 4.2))
    axes = fig.subplots(1, 2, sharey=True)
    routes = [(n, r) for n, r in result.items() if n not in ROUTE_KEYS and isinstance(r, dict) and "curve" in r]
    colors = {n: f"C{i}" for i, (n, _) in enumerate(routes)}
    share = result.get("lap_share_needed", 0.5)
    for ax, (t_key, hit_key, off_key, title) in zip(
        axes,
        [
            ("t_s", "t_to_quality_s", "offset_s", "measured on this machine"),
            ("t_real_time_s", "t_to_quality_real_time_s", "offset_real_time_s", "real-time source (1x per worker)"),
        ],
    ):
        for name, r in routes:
            pts = [p for p in r["curve"] if p.get(t_key) is not None]
            style = dict(color=colors[name], lw=2.2 if name == DIRECT else 1.2, ms=3)
            if pts:
                ax.plot(
                    [p[t_key] for p in pts],
                    [p["lap_share"] for p in pts],
                    "o-" if name == DIRECT else ".-",
                    label=name,
                    **style,
                )
            hit = next((p for p in pts if p["env_steps"] == r.get("env_steps_to_quality")), None)
            if hit is not None and r.get(hit_key) is not None:
                ax.plot([hit[t_key]], [hit["lap_share"]], "*", color=colors[name], ms=12, mec="k", mew=0.5)
            if name != DIRECT and r.get(off_key):
                ax.axvline(r[off_key], color=colors[name], ls=":", lw=0.8)
        budget = result.get(DIRECT, {}).get("budget_s")
        if budget and t_key == "t_s":
            ax.axvline(budget, color="0.3", ls="--", lw=0.8, label="direct's budget")
        ax.axhline(share, color="0.5", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("time [s] (log)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel(f"lap share on {result.get('tracks', {}).get('runs', '?')} hold-out runs")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(
        f"time to a lap-completing policy (>= {share:.0%} of the laps; star: first reached; dotted: collect + distill)"
    )
    return save_figure(fig, path)


def plot_not_run(path: str | Path, reason: str) -> Path:
    """A figure that says why there is no curve (the stage's output exists either way)."""
    fig = new_figure((6.0, 1.6))
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, f"time to quality not measured:\n{reason}", ha="center", va="center", wrap=True, fontsize=9)
    return save_figure(fig, Path(path))
