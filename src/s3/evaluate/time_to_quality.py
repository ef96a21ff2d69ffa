"""Time to quality (the study's claim 1, efficiency): how long each route takes to a lap-completing policy.

    time_to_quality(params, policies_dir, metrics_dir, out_path=None, plot_path=None) -> result
    first_reaching(curve, share=LAP_SHARE) -> the first curve point that is lap-completing, or None
    ttq_tracks(n_tracks=8, seed=HOLDOUT_SEED) -> the one fixed set of hold-out tracks
writes
    <metrics_dir>/time_to_quality.json (or out_path), and the figure at plot_path if given

Checkpoints. Training keeps every chunk's actor (s3.rl.checkpoints): `direct` in
policies/direct/checkpoints/, each distilled policy (the families and the oracle) for its first
seed (train.seed) in policies/<name>/seeds/seed<train.seed>/checkpoints/ (policies/<name>/checkpoints/
when it trains one seed). Every one of them drives the same runs in the source simulator.

The set. One fixed set of procedural hold-out tracks (s3.evaluate.holdout: generator seed 7, never
used for training or validation), the same for both routes: 8 tracks x 2 evenly spaced starts = 16
runs at 5 m/s, in the one car (`sim.driver_aids`). Half the tracks carry heavy ice (3-6 patches of
mu 0.1-0.3), half are dry: track i is the heavy-ice version when i % 4 is 0 or 3, else the dry one,
so that each surface gets two circuits and two spline blobs, one of each mirrored (the generator
makes tracks 0-3 circuits, 4-7 blobs, every second of each kind mirrored). A run ends at its lap, a
failure (off the road, turned around, stalled, a simulator error), or after the lap length at
`train.validation_min_speed`. All checkpoints of one route drive side by side in one SourceVecEnv
(each car its own simulator: a run's result does not depend on which others share the env).

The rule. A checkpoint is lap-completing when it completes at least half of the set's laps
(lap_share = laps / runs >= 0.5). A route's time to quality is the time of its earliest
lap-completing checkpoint (no interpolation between checkpoints); None when none is (then the
bound: `not_reached_within_s`, direct's budget or the distilled route's last checkpoint).

The time axis, reproducible from the recorded throughputs rather than from each chunk's clock:
- direct: t = env_steps / env_steps_per_s (metrics/train/direct.json: env steps over its whole wall
  clock, worker start, validation and export included);
- distilled: t = offset + env_steps / env_steps_per_s, the rate being the first seed's env steps over
  its whole training wall clock, validation and export included, like direct's (metrics/train/<name>.json
  seed_selection.seeds, else the kept seed's train; the seeds trained side by side, so the first seed's
  clock is the route's), offset = the one-time collection (metrics/collect.json wall_seconds_total)
  + distillation of its model (metrics/distill/<model>.json total_wall_s).
For a real-time source (a simulator that runs at 1x per worker, e.g. BeamNG), as in
s3.report.cost: direct t = env_steps x control_dt / workers (simulation alone, PPO updates not
counted: a lower bound), collection = rows x control_dt / collect workers (rows: metrics/distill);
distillation and distilled PPO do not touch the source and keep their measured times.
Each point also carries `wall_s` where the training recorded it (its own clock at that checkpoint).

distilled_best: the families' earliest time to quality (the oracle observes the friction that
direct and the families must infer, so it is reported but not a candidate).
budget_rule: direct's budget must be at least the distilled route's whole wall clock for one family
(collection + distillation + its K seeds' training, seed_selection.rl_wall_s); checked per family.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.catalog import DIRECT
from s3.evaluate.holdout import HOLDOUT_SEED, START_SPEED, holdout_tracks
from s3.io import json_safe, write_json_atomic
from s3.progress import advance, progress
from s3.rl.checkpoints import DIR, load_checkpoint_fn, read_index
from s3.rl.export import policy_env_params
from s3.rl.tracks import start_grid
from s3.sim.backends import side_by_side_names, sim_backend
from s3.tracks.track import Track

N_TRACKS, STARTS = 8, 2
ICE_SLOTS = (0, 3)  # track i is heavy ice when i % 4 is one of these, else dry
LAP_SHARE = 0.5  # lap-completing: at least half of the set's laps
MIN_SPACING_STEPS = 100_000  # env steps between the checkpoints driven (s3.rl.checkpoints keeps more for direct)
CHECKPOINTS = "checkpoints"  # the unit of the stage's progress
MAX_CARS = 512  # cars in one source env (checkpoints beyond that drive in a further batch)
RULE = (
    "lap-completing = a checkpoint completes at least half of the set's laps (lap_share >= 0.5); time to quality = the time of a "
    "route's earliest lap-completing checkpoint (None: never, within not_reached_within_s)"
)


def ttq_tracks(n_tracks: int = N_TRACKS, seed: int = HOLDOUT_SEED) -> list[Track]:
    """The fixed hold-out set: track i of the held-out generator, heavy ice when i % 4 is in ICE_SLOTS, else dry."""
    ice, dry = holdout_tracks("heavy_ice", n_tracks, seed), holdout_tracks("dry", n_tracks, seed)
    return [ice[i] if i % 4 in ICE_SLOTS else dry[i] for i in range(n_tracks)]


def spaced(entries: Sequence[dict[str, Any]], min_steps: int = MIN_SPACING_STEPS) -> list[dict[str, Any]]:
    """The checkpoints at least `min_steps` env steps after the previous one kept (the first and the last always):
    direct saves one every ~25 k steps, a distilled policy one every ~0.5 M; driving every one of direct's would cost
    more than its curve gains."""
    kept: list[dict[str, Any]] = []
    for i, e in enumerate(entries):
        if not kept or int(e["env_steps"]) - int(kept[-1]["env_steps"]) >= min_steps or i == len(entries) - 1:
            kept.append(e)
    return kept


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


# ---------------------------------------------------------------------------- driving
@torch.inference_mode()
def drive_checkpoints(
    folder: Path,
    entries: Sequence[dict[str, Any]],
    tracks: Sequence[Track],
    params: Any,
    starts: int = STARTS,
    workers: int = 0,
) -> list[dict[str, Any]]:
    """Each checkpoint in `entries` (of folder/checkpoints/index.json) on every run of the set: {laps, runs, lap_share, completion, ...}."""
    from s3.rl.source_env import SourceVecEnv
    from s3.rl.source_validation import source_episodes

    index = read_index(folder)
    if index is None:
        raise FileNotFoundError(f"{Path(folder) / DIR}: no checkpoint index")
    env_params = policy_env_params(index)
    ti, s = start_grid(tracks, starts)
    m = len(ti)
    per_env = max(1, MAX_CARS // m)
    out: list[dict[str, Any]] = []
    for b in range(0, len(entries), per_env):
        batch = list(entries[b : b + per_env])
        policies = [load_checkpoint_fn(folder, e, index) for e in batch]
        k = len(policies)

        def policy(
            obs: torch.Tensor, policies: list = policies, k: int = k
        ) -> torch.Tensor:  # row i * k + j: run i of checkpoint j
            return torch.stack([p(obs[j::k].contiguous()) for j, p in enumerate(policies)], dim=1).reshape(m * k, -1)

        # interleaved, so that each worker holds an equal share of every checkpoint's runs
        with SourceVecEnv(
            tracks,
            params.sim,
            env_params,
            num_envs=m * k,
            workers=workers,
            seed=0,
            auto_reset=False,
            compute=getattr(params, "compute", None),
        ) as env:
            obs = env.reset_to(
                torch.as_tensor(np.repeat(ti, k)),
                torch.as_tensor(np.repeat(s, k), dtype=torch.float32),
                speed=START_SPEED,
            )["policy"]
            limit = torch.ceil(env.track_length() / params.train.validation_min_speed / env.dt).long()
            runs = source_episodes(env, policy, obs, limit)
        advance(k, CHECKPOINTS)  # to the stage's progress (s3.progress)
        for j in range(k):
            part = runs.part(slice(j, None, k))
            laps = int(part.completed.sum())
            out.append(
                {
                    "laps": laps,
                    "runs": m,
                    "lap_share": laps / m,
                    "completion": float(part.completion.mean()),
                    "mean_lap_s": float(np.nanmean(part.lap_time)) if laps else None,
                    "ends": {r: part.reason.count(r) for r in sorted(set(part.reason)) if r != "lap"},
                }
            )
    return out


# ---------------------------------------------------------------------------- inputs
def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _num(d: Any, *keys: str) -> float | None:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) else None


def _add(*xs: float | None) -> float | None:
    return None if any(x is None for x in xs) else float(sum(xs))  # type: ignore[arg-type]


def collection_cost(metrics_dir: Path, rows: float | None, dt: float) -> dict[str, Any]:
    """The one-time collection: measured wall clock (metrics/collect.json) and its real-time equivalent."""
    rec = _read(metrics_dir / "collect.json")
    wall = _num(rec, "wall_seconds_total")
    if wall is None:
        wall = _num(rec, "wall_seconds_this_run")
    workers = _num(rec, "workers")
    return {
        "wall_s": wall,
        "rows": rows,
        "workers": workers,
        "real_time_s": rows * dt / workers if rows is not None and workers else None,
    }


def checkpoint_folder(policies_dir: Path, name: str, seed: int) -> Path:
    """Where policy `name`'s checkpoints are: its first seed's folder, or the policy's own (one seed)."""
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


def _planned(folder: Path) -> int:
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


def direct_route(
    params: Any, policies_dir: Path, metrics_dir: Path, tracks: Sequence[Track], starts: int, workers: int
) -> dict[str, Any]:
    """`direct`: PPO in the source; its checkpoints on the set, its time axis from its own throughput."""
    dt = float(params.sim.control_dt)
    m = _read(metrics_dir / "train" / f"{DIRECT}.json")
    rate, budget, w = _num(m, "env_steps_per_s"), _num(m, "budget_s"), _num(m, "workers")
    folder = policies_dir / DIRECT
    entries, driven, why = (
        _drive_route(folder, tracks, params, starts, workers)
        if m is not None
        else ([], [], f"no {metrics_dir / 'train' / DIRECT}.json")
    )
    walls = {int(p["env_steps"]): p["wall_s"] for p in (m or {}).get("learning_curve", []) if "wall_s" in p}
    curve = _curve(entries, driven, rate, 0.0, lambda n: n * dt / w if w else None, walls)
    steps = _num(m, "env_steps")
    route = {
        "checkpoints": str(folder / DIR),
        "env_steps_per_s": rate,
        "workers": w,
        "budget_s": budget,
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
        if row.get("seed") == seed and _num(row, "env_steps") and _num(row, "wall_s"):
            return _num(row, "env_steps") / _num(row, "wall_s")  # type: ignore[operator]
    steps, wall = _num(m, "train", "env_steps"), _num(m, "train", "wall_s")
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
) -> dict[str, Any]:
    """A policy trained in a distilled model: its first seed's checkpoints, after collection + distillation."""
    model = params.model_of(name)
    seed = params.train.for_policy(name).seed
    m = _read(metrics_dir / "train" / f"{name}.json")
    dist = _read(metrics_dir / "distill" / f"{model}.json")
    rate, distill_s = training_rate(m, seed), _num(dist, "total_wall_s")
    offset, offset_rt = _add(collect["wall_s"], distill_s), _add(collect["real_time_s"], distill_s)
    folder = checkpoint_folder(policies_dir, name, seed)
    entries, driven, why = (
        _drive_route(folder, tracks, params, starts, workers)
        if m is not None
        else ([], [], f"no {metrics_dir / 'train' / name}.json")
    )
    walls = {int(p["env_steps"]): p["wall_s"] for p in ((m or {}).get("checkpoints") or {}).get("points", [])}
    curve = _curve(
        entries, driven, rate, offset, lambda n: offset_rt + n / rate if rate and offset_rt is not None else None, walls
    )
    steps = _num(m, "train", "env_steps")
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
        "rl_wall_s": _num(m, "seed_selection", "rl_wall_s")
        if _num(m, "seed_selection", "rl_wall_s") is not None
        else _num(m, "train", "wall_s"),
        "curve": curve,
    }
    if why:
        route["missing"] = why
    return {**route, **_reached(route)}


def budget_rule(direct: dict[str, Any], routes: dict[str, dict[str, Any]], families: Sequence[str]) -> dict[str, Any]:
    """direct's budget against each family's whole distilled route (collect + distill + its K seeds' training)."""
    whole = {
        n: _add(r["collect_wall_s"], r["distill_wall_s"], r["rl_wall_s"]) for n, r in routes.items() if n in families
    }
    known = [v for v in whole.values() if v is not None]
    need = max(known) if known else None
    budget = direct.get("budget_s")
    return {
        "rule": "train.direct.budget_s >= the distilled route's whole wall clock for one family (collect + distill + its K seeds' training)",
        "budget_s": budget,
        "family_route_s": whole,
        "max_family_route_s": need,
        "holds": None if need is None or budget is None else budget >= need,
    }


def time_to_quality(
    params: Any,
    policies_dir: str | Path,
    metrics_dir: str | Path,
    out_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    n_tracks: int = N_TRACKS,
    starts: int = STARTS,
    workers: int = 0,
) -> dict[str, Any]:
    """Every kept checkpoint of direct and of each distilled policy's first seed on the fixed hold-out set; the
    curves, each route's time to quality, the families' best (module docstring). Writes the JSON (and the figure)."""
    policies_dir, metrics_dir = Path(policies_dir), Path(metrics_dir)
    out = Path(out_path) if out_path is not None else metrics_dir / "time_to_quality.json"
    if not sim_backend(params.sim).side_by_side:  # the report still runs: claim 1 says why it was not measured
        reason = f"needs the embedded simulator (sim.backend {side_by_side_names()}, not {params.sim.backend!r}): every checkpoint drives side by side"
        write_json_atomic(out, {"not_run": reason})
        if plot_path is not None:
            from s3.viz.time_to_quality_plots import plot_not_run

            plot_not_run(plot_path, reason)
        return {"not_run": reason}
    dt = float(params.sim.control_dt)
    tracks = ttq_tracks(n_tracks)
    names = [n for n in params.policies() if n != DIRECT]
    rows = None  # the collected dataset's rows, as each distillation read it
    for family in dict.fromkeys(params.model_of(n) for n in names):
        rows = _num(_read(metrics_dir / "distill" / f"{family}.json"), "rows")
        if rows is not None:
            break
    collect = collection_cost(metrics_dir, rows, dt)
    folders = [
        policies_dir / DIRECT,
        *(checkpoint_folder(policies_dir, n, params.train.for_policy(n).seed) for n in names),
    ]
    with progress("time_to_quality", sum(map(_planned, folders)), CHECKPOINTS):
        direct = direct_route(params, policies_dir, metrics_dir, tracks, starts, workers)
        routes = {
            n: distilled_route(n, params, policies_dir, metrics_dir, tracks, starts, workers, collect) for n in names
        }
    reached = [
        (r["t_to_quality_s"], n) for n, r in routes.items() if n in params.families and r["t_to_quality_s"] is not None
    ]
    best_name = min(reached)[1] if reached else None
    ends = [
        r["end_s"] for n, r in routes.items() if n in params.families and r["curve"] and r["end_s"] is not None
    ]  # the families evaluated
    result = {
        "tracks": {
            "generator_seed": HOLDOUT_SEED,
            "n_tracks": n_tracks,
            "starts_per_track": starts,
            "runs": n_tracks * starts,
            "start_speed_m_s": START_SPEED,
            "surfaces": "track i heavy_ice when i % 4 in (0, 3), else dry (s3.evaluate.holdout.SURFACES)",
            "time_limit": f"lap length / train.validation_min_speed ({params.train.validation_min_speed} m/s)",
            "list": [
                {
                    "name": t.name,
                    "surface": "heavy_ice" if i % 4 in ICE_SLOTS else "dry",
                    "length_m": round(float(t.length), 1),
                }
                for i, t in enumerate(tracks)
            ],
        },
        "rule": RULE,
        "lap_share_needed": LAP_SHARE,
        "time_axis": {
            DIRECT: f"env_steps / env_steps_per_s (metrics/train/{DIRECT}.json)",
            "distilled": "collect wall + distill total_wall_s + env_steps / env_steps_per_s (the first seed's env steps over its whole "
            "training wall clock, metrics/train/<policy>.json seed_selection.seeds), as direct's rate is over its whole run",
            "real_time": "direct: env_steps x control_dt / workers; distilled: collect rows x control_dt / collect workers + distill + PPO",
            "control_dt": dt,
        },
        "collect": collect,
        DIRECT: direct,
        **routes,
        "distilled_best": {
            "over": list(params.families),
            "policy": best_name,
            "t_to_quality_s": None if best_name is None else routes[best_name]["t_to_quality_s"],
            "t_to_quality_real_time_s": None if best_name is None else routes[best_name]["t_to_quality_real_time_s"],
            "env_steps_to_quality": None if best_name is None else routes[best_name]["env_steps_to_quality"],
            "not_reached_within_s": None
            if best_name is not None or not ends
            else min(ends),  # no family reached it within its own end
        },
        "budget_rule": budget_rule(direct, routes, list(params.families)),
    }
    result = json_safe(result)
    write_json_atomic(out, result)
    if plot_path is not None:
        from s3.viz.time_to_quality_plots import plot_time_to_quality

        plot_time_to_quality(plot_path, result)
    return result
