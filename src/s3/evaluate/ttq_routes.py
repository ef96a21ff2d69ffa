"""Time to quality, the routes: each route's curve on its time axis, the rule applied, the budget rule.

    first_reaching(curve, share=LAP_SHARE) -> the earliest curve point (by env_steps) with lap_share >= share, or None
    direct_route(params, policies_dir, metrics_dir, tracks, starts, workers) -> direct's route
    distilled_route(name, params, ..., collect) -> a distilled policy's route (its first seed's checkpoints)
    budget_rule(direct, records_dir, params) -> {rule, budget_s, stopped_by, wall_s, family_route_s, ..., holds}

A route is {checkpoints, env_steps_per_s, offset_s, end_s, curve: [{env_steps, iteration, t_s,
t_real_time_s, wall_s, laps, runs, lap_share, ...}], reached, t_to_quality_s, ...}; its times are in
seconds, from the recorded throughputs and the metrics under metrics_dir as s3.evaluate.time_to_quality's
docstring states (The rule, The time axis). A value a record lacks is None, never a guess.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3.catalog import DIRECT
from s3.evaluate.ttq_checkpoints import MIN_SPACING_STEPS, drive_checkpoints, spaced
from s3.rl.checkpoints import DIR, read_index
from s3.rl.route_budget import RouteNotMeasured, route_budget
from s3.tracks.track import Track

LAP_SHARE = 0.5  # lap-completing: at least half of the set's laps


def first_reaching(curve: Sequence[dict[str, Any]], share: float = LAP_SHARE) -> dict[str, Any] | None:
    """The earliest point (by env_steps) whose lap_share is at least `share`; None when there is none."""
    return next(
        (
            p
            for p in sorted(curve, key=lambda p: p["env_steps"])
            if p.get("lap_share") is not None and p["lap_share"] >= share
        ),
        None,
    )


# ---------------------------------------------------------------------------- inputs
def read_metrics(path: Path) -> dict[str, Any] | None:
    """The JSON object at `path`; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def number_at(d: Any, *keys: str) -> float | None:
    """d[k0][k1]... as a float; None when a key is missing or the value is not a finite number (bools are not)."""
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) else None


def _add(*xs: float | None) -> float | None:
    return None if any(x is None for x in xs) else float(sum(xs))  # type: ignore[arg-type]


def collection_cost(metrics_dir: Path, rows: float | None, dt: float) -> dict[str, Any]:
    """The one-time collection: measured wall clock (records/collect.json) and its real-time equivalent."""
    rec = read_metrics(metrics_dir / "collect.json")
    wall = number_at(rec, "wall_seconds_total")
    if wall is None:
        wall = number_at(rec, "wall_seconds_this_run")
    workers = number_at(rec, "workers")
    return {
        "wall_s": wall,
        "rows": rows,
        "workers": workers,
        "real_time_s": rows * dt / workers if rows is not None and workers else None,
    }


def checkpoint_folder(policies_dir: Path, name: str, seed: int) -> Path:
    """Where policy `name`'s checkpoints of `seed` are: that seed's folder, or the policy's own (one seed)."""
    seeded = policies_dir / name / "seeds" / f"seed{seed}"
    return seeded if (seeded / DIR).is_dir() or not (policies_dir / name / DIR).is_dir() else policies_dir / name


# ---------------------------------------------------------------------------- routes
def _curve(
    entries: Sequence[dict[str, Any]],
    driven: Sequence[dict[str, Any]],
    rate: float | None,
    offset: float | None,
    real_time: Any,
    walls: dict[int, float],
) -> list[dict[str, Any]]:
    """Curve points: env steps, measured-throughput time (+ offset), real-time-source time, quality."""
    points = []
    for e, q in zip(entries, driven):
        n = int(e["env_steps"])
        t = offset + n / rate if rate and offset is not None else None
        points.append(
            {
                "env_steps": n,
                "iteration": e["iteration"],
                "t_s": t,
                "t_real_time_s": real_time(n),
                "wall_s": walls.get(n),
                **q,
            }
        )
    return points


def _reached(route: dict[str, Any]) -> dict[str, Any]:
    """The rule applied to a route's curve: its time to quality (or None and the bound)."""
    hit = first_reaching(route["curve"])
    bound = route.get("budget_s") if route.get("budget_s") is not None else route.get("end_s")
    return {
        "reached": hit is not None if route["curve"] else None,
        "env_steps_to_quality": None if hit is None else hit["env_steps"],
        "t_to_quality_s": None if hit is None else hit["t_s"],
        "t_to_quality_real_time_s": None if hit is None else hit["t_real_time_s"],
        "not_reached_within_s": bound if hit is None and route["curve"] else None,
        "not_reached_within_real_time_s": route.get("end_real_time_s") if hit is None and route["curve"] else None,
    }


def planned_checkpoints(folder: Path) -> int:
    """How many checkpoints of `folder` `_drive_route` will drive."""
    index = read_index(folder)
    return len(spaced(index["checkpoints"], MIN_SPACING_STEPS)) if index and index.get("checkpoints") else 0


def _drive_route(
    folder: Path, tracks: Sequence[Track], params: Any, starts: int, workers: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(index entries, their results, why not) for the checkpoints in `folder`."""
    index = read_index(folder)
    if index is None or not index.get("checkpoints"):
        return (
            [],
            [],
            f"no checkpoints in {folder / DIR} (trained before checkpoints were kept? re-run its train stage)",
        )
    entries = spaced(index["checkpoints"], MIN_SPACING_STEPS)
    return entries, drive_checkpoints(folder, entries, tracks, params, starts, workers), None


def seed_row(m: dict[str, Any] | None, seed: int) -> dict[str, Any] | None:
    """The row of `seed` in a train record's seed_selection.seeds (None: a record of one seed)."""
    return next((r for r in _get_list(m, "seed_selection", "seeds") if r.get("seed") == seed), None)


def seeds_with_checkpoints(policies_dir: Path, name: str, m: dict[str, Any] | None, first: int) -> list[int]:
    """The seeds of policy `name` whose chunks' checkpoints were kept (train.keep_checkpoints, direct's seeds), in
    seed order; [first] when the record lists no seeds."""
    seeds = [int(r["seed"]) for r in _get_list(m, "seed_selection", "seeds")] or [first]
    return [s for s in seeds if planned_checkpoints(checkpoint_folder(policies_dir, name, s)) > 0] or [first]


def direct_route(
    params: Any,
    policies_dir: Path,
    metrics_dir: Path,
    tracks: Sequence[Track],
    starts: int,
    workers: int,
    seed: int | None = None,
) -> dict[str, Any]:
    """`direct`: PPO in the source; its checkpoints on the set, its time axis from its own throughput (one seed's:
    `seed`, default train.seed, read from seed_selection.seeds when direct trained several)."""
    dt = float(params.sim.control_dt)
    m = read_metrics(metrics_dir / "train" / f"{DIRECT}.json")
    seed = params.train.seed if seed is None else seed
    row = seed_row(m, seed) or m
    rate, budget, w = number_at(row, "env_steps_per_s"), number_at(row, "budget_s"), number_at(row, "workers")
    folder = checkpoint_folder(policies_dir, DIRECT, seed)
    entries, driven, why = (
        _drive_route(folder, tracks, params, starts, workers)
        if m is not None
        else ([], [], f"no {metrics_dir / 'train' / DIRECT}.json")
    )
    walls = {int(p["env_steps"]): p["wall_s"] for p in (row or {}).get("learning_curve", []) if "wall_s" in p}
    curve = _curve(entries, driven, rate, 0.0, lambda n: n * dt / w if w else None, walls)
    steps = number_at(row, "env_steps")
    route = {
        "checkpoints": str(folder / DIR),
        "env_steps_per_s": rate,
        "workers": w,
        "budget_s": budget,
        "stopped_by": (row or {}).get("stopped_by"),  # plateau, max_env_steps, max_minutes or budget_s
        "wall_s": number_at(row, "wall_s"),
        "env_steps": number_at(row, "env_steps"),
        "offset_s": 0.0,
        "offset_real_time_s": 0.0,
        "end_s": steps / rate if steps is not None and rate else None,
        "end_real_time_s": steps * dt / w if steps is not None and w else None,
        "curve": curve,
    }
    if why:
        route["missing"] = why
    return {**route, **_reached(route)}


def training_rate(m: dict[str, Any] | None, seed: int) -> float | None:
    """The first seed's env steps over its whole training wall clock (PPO, validation, export), as direct's
    env_steps_per_s is over its whole run (the seeds trained side by side: the first seed's clock is the route's);
    the kept seed's when the per-seed table is absent."""
    for row in _get_list(m, "seed_selection", "seeds"):
        if row.get("seed") == seed and number_at(row, "env_steps") and number_at(row, "wall_s"):
            return number_at(row, "env_steps") / number_at(row, "wall_s")  # type: ignore[operator]
    steps, wall = number_at(m, "train", "env_steps"), number_at(m, "train", "wall_s")
    return steps / wall if steps and wall else None


def _get_list(d: Any, *keys: str) -> list[dict[str, Any]]:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return [r for r in d if isinstance(r, dict)] if isinstance(d, list) else []


def distilled_route(
    name: str,
    params: Any,
    policies_dir: Path,
    metrics_dir: Path,
    tracks: Sequence[Track],
    starts: int,
    workers: int,
    collect: dict[str, Any],
    seed: int | None = None,
) -> dict[str, Any]:
    """A policy trained in a distilled model: one seed's checkpoints (`seed`, default its first), after collection
    + distillation."""
    model = params.model_of(name)
    first = params.train.for_policy(name).seed
    seed = first if seed is None else seed
    m = read_metrics(metrics_dir / "train" / f"{name}.json")
    dist = read_metrics(metrics_dir / "distill" / f"{model}.json")
    rate, distill_s = training_rate(m, seed), number_at(dist, "total_wall_s")
    offset, offset_rt = _add(collect["wall_s"], distill_s), _add(collect["real_time_s"], distill_s)
    folder = checkpoint_folder(policies_dir, name, seed)
    entries, driven, why = (
        _drive_route(folder, tracks, params, starts, workers)
        if m is not None
        else ([], [], f"no {metrics_dir / 'train' / name}.json")
    )
    kept = (seed_row(m, seed) or {}).get("checkpoints") if seed != first else None  # keep_checkpoints: all
    walls = {int(p["env_steps"]): p["wall_s"] for p in (kept or (m or {}).get("checkpoints") or {}).get("points", [])}
    curve = _curve(
        entries, driven, rate, offset, lambda n: offset_rt + n / rate if rate and offset_rt is not None else None, walls
    )
    row = seed_row(m, seed)  # this seed's own steps: the seeds stop at different steps (the plateau rule)
    steps = (
        number_at(row, "env_steps") if number_at(row, "env_steps") is not None else number_at(m, "train", "env_steps")
    )
    route = {
        "model": model,
        "seed": seed,
        "checkpoints": str(folder / DIR),
        "env_steps_per_s": rate,
        "collect_wall_s": collect["wall_s"],
        "distill_wall_s": distill_s,
        "offset_s": offset,
        "offset_real_time_s": offset_rt,
        "budget_s": None,
        "end_s": offset + steps / rate if offset is not None and steps is not None and rate else None,
        "end_real_time_s": offset_rt + steps / rate if offset_rt is not None and steps is not None and rate else None,
        "rl_wall_s": number_at(m, "seed_selection", "rl_wall_s")
        if number_at(m, "seed_selection", "rl_wall_s") is not None
        else number_at(m, "train", "wall_s"),
        "curve": curve,
    }
    if why:
        route["missing"] = why
    return {**route, **_reached(route)}


def budget_rule(direct: dict[str, Any], records_dir: Path, params: Any) -> dict[str, Any]:
    """How direct's training ended against its rule. Trained to its plateau (no budget_s): the rule holds when the
    plateau rule ended it (a cap that ended it while it still improved: it does not). With a fixed wall-clock
    budget_s: it holds when the budget is at least every family's whole distilled route (collect + distill + its K
    seeds' training, s3.rl.route_budget). Every family's route is listed beside direct's own wall clock either way;
    None where unmeasured."""
    whole: dict[str, float | None] = {}
    for n in params.families:
        try:
            whole[n] = route_budget(records_dir, n, params.model_of(n))["budget_s"]
        except RouteNotMeasured:
            whole[n] = None
    known = [v for v in whole.values() if v is not None]
    need = max(known) if known else None
    budget, ended = direct.get("budget_s"), direct.get("stopped_by")
    if budget is None:
        rule = "direct trains to its own plateau (train.plateau_* in train.per_policy.direct), not to a cap"
        holds = None if ended is None else ended == "plateau"
    else:
        rule = (
            "train.direct.budget_s >= the distilled route's whole wall clock for one family (collect + distill "
            "+ its K seeds' training)"
        )
        holds = None if need is None else budget >= need
    return {
        "rule": rule,
        "budget_s": budget,
        "stopped_by": ended,
        "wall_s": direct.get("wall_s"),
        "env_steps": direct.get("env_steps"),
        "family_route_s": whole,
        "max_family_route_s": need,
        "holds": holds,
    }


SEED_KEYS = (
    "reached",
    "t_to_quality_s",
    "not_reached_within_s",
    "t_to_quality_real_time_s",
    "not_reached_within_real_time_s",
    "env_steps_to_quality",
)


def seed_times(route: dict[str, Any], seed: int) -> dict[str, Any]:
    """One seed's outcome for claim 1's censored comparison: its time to quality, or the time it ran without."""
    return {"seed": seed, **{k: route.get(k) for k in SEED_KEYS}}
