"""Summaries of an evaluation: per seed, per circuit, over the suite, with intervals that state their n.

    policy_seeds(folder) -> [(seed, folder)]        every trained seed of a policy (policies/<name>/)
    summarise(rows, tracks, conditions) -> {"suite": {cond: block}, "<track>": {cond: block}}
    by_seed(rows, conditions) -> {seed: {cond: {...}}}

A row is one run (s3.evaluate.evaluate: seed, track, condition, start_index and the per-run
metrics of s3.evaluate.metrics). The unit of a policy's quality is the training seed: a block's
intervals come from the two-level bootstrap (s3.evaluate.intervals: seeds, then the runs of each seed
= circuits x starts), so with K seeds they are as coarse as K makes them. A deterministic driver
(the pid baselines) is one "seed": its interval resamples its runs only (the method says which).

A block: {"runs", "completed", "seeds", "completion_rate", "lap_share", "lap_time_s", <metric>...},
each metric an Interval's JSON (estimate = mean over seeds of the mean within a seed; ci95;
n_seeds; n_units = the runs behind it). `lap_time_s` covers completed runs only, and its n_units
says how many those are; a seed that completed none does not count towards it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from s3.evaluate.intervals import two_level_bootstrap, wilson

SUITE = "suite"
QUALITY = ("completion_rate", "lap_share", "lap_time_s")
# smoothness and safety per run (s3.evaluate.metrics); claim (2) of the report reads these
BEHAVIOUR = (
    "mean_speed_mps",
    "mean_abs_steering_rate",
    "mean_abs_steering_jerk",
    "mean_abs_lateral_jerk",
    "time_off_track_s",
    "min_edge_margin_m",
    "off_track_events",
    "mean_abs_lateral_error_m",
    "pedal_switches",
    "patch_crossing_rate",
)
N_RESAMPLES = 4000


def policy_seeds(folder: str | Path) -> list[tuple[int, Path]]:
    """(seed, folder) of every trained seed of the policy in `folder`, in seed order.

    s3.rl.seeds keeps each seed under <folder>/seeds/seed<k>/; a policy trained as one seed
    (`direct`, or train.seeds = 1) is the folder itself, its seed read from its policy.json.
    """
    folder = Path(folder)
    seeds = sorted(
        (int(p.name.removeprefix("seed")), p)
        for p in (folder / "seeds").glob("seed*")
        if p.name.removeprefix("seed").isdigit() and (p / "policy.json").exists()
    )
    if seeds:
        return seeds
    meta = json.loads((folder / "policy.json").read_text())
    return [(int((meta.get("params") or {}).get("seed", 0)), folder)]


def value(row: dict[str, Any], key: str) -> float | None:
    """The per-run number behind `key` (completion_rate = the 0/1 outcome, lap_share = completion_fraction)."""
    if key == "completion_rate":
        return float(bool(row["completed"]))
    if key == "lap_share":  # a completed lap is the whole lap (progress / length can round below 1)
        return 1.0 if row["completed"] else row.get("completion_fraction")
    v = row.get(key)
    return None if v is None or isinstance(v, bool) else float(v)


def groups(rows: Iterable[dict[str, Any]], key: str) -> list[list[float]]:
    """Per seed (in seed order), the finite values of `key` of its runs."""
    out: dict[Any, list[float]] = {}
    for r in rows:
        v = value(r, key)
        out.setdefault(r["seed"], [])
        if v is not None:
            out[r["seed"]].append(v)
    return [out[s] for s in sorted(out, key=lambda s: (s is None, s))]


def block(rows: Sequence[dict[str, Any]], keys: Sequence[str] = (*QUALITY, *BEHAVIOUR)) -> dict[str, Any]:
    """The summary of one set of runs (module docstring)."""
    out: dict[str, Any] = {
        "runs": len(rows),
        "completed": sum(bool(r["completed"]) for r in rows),
        "seeds": len({r["seed"] for r in rows}),
    }
    for key in keys:
        out[key] = two_level_bootstrap(groups(rows, key), n_resamples=N_RESAMPLES).to_json()
    return out


def summarise(rows: Sequence[dict[str, Any]], tracks: Sequence[str], conditions: Sequence[str]) -> dict[str, Any]:
    """{"suite": {cond: block over every circuit}, <track>: {cond: block}} (module docstring)."""
    out: dict[str, Any] = {SUITE: {c: block([r for r in rows if r["condition"] == c]) for c in conditions}}
    for t in tracks:
        out[t] = {c: block([r for r in rows if r["track"] == t and r["condition"] == c]) for c in conditions}
    return out


def by_seed(rows: Sequence[dict[str, Any]], conditions: Sequence[str]) -> dict[str, Any]:
    """Per seed and condition: laps completed of runs with the Wilson interval (valid within one seed
    only: runs of one seed share its weights), mean lap share, mean lap time of the completed laps."""
    out: dict[str, Any] = {}
    for seed in sorted({r["seed"] for r in rows}, key=lambda s: (s is None, s)):
        out[str(seed)] = {}
        for c in conditions:
            mine = [r for r in rows if r["seed"] == seed and r["condition"] == c]
            k, n = sum(bool(r["completed"]) for r in mine), len(mine)
            laps = [r["lap_time_s"] for r in mine if r["completed"] and r.get("lap_time_s") is not None]
            shares = [r["completion_fraction"] for r in mine if r.get("completion_fraction") is not None]
            ci = wilson(k, n)
            out[str(seed)][c] = {
                "completed": k,
                "runs": n,
                "completion_rate": k / n if n else None,
                "wilson95": list(ci) if ci else None,
                "lap_share": sum(shares) / len(shares) if shares else None,
                "lap_time_s": sum(laps) / len(laps) if laps else None,
                "lap_time_n": len(laps),
            }
    return out
