"""Time to quality (the study's claim 1, efficiency): how long each route takes to a lap-completing policy.

    time_to_quality(params, policies_dir, metrics_dir, out_path=None, plot_path=None) -> result
writes
    <metrics_dir>/time_to_quality.json (or out_path), and the figure at plot_path if given
built from
    s3.evaluate.ttq_checkpoints  the set (ttq_tracks), the checkpoints driven (spaced) and their laps on it
    s3.evaluate.ttq_routes       each route's curve and time axis, the rule (first_reaching), the budget rule

Checkpoints. Training keeps every chunk's actor (s3.rl.checkpoints): `direct` in
policies/direct/checkpoints/ (policies/direct/seeds/seed<k>/checkpoints/ with train.direct.seeds > 1),
each distilled policy (the families and the oracle) for its first seed (train.seed; every seed with
train.keep_checkpoints: all) in policies/<name>/seeds/seed<k>/checkpoints/ (policies/<name>/checkpoints/
when it trains one seed). Every one of them drives the same runs in the source simulator. A route's curve
is its first seed's; when more than one seed kept its checkpoints, the route also lists every seed's time
or bound (`seeds`), and `claim_route` names the route direct is compared with (train.direct.route):
claim 1's censored test (s3.report.censored).

The set. One fixed set of procedural hold-out tracks (s3.evaluate.holdout_set: generator seed
`time_to_quality.seed`, 7 by default, never used for training or validation), the same for both
routes: 8 tracks x 2 evenly spaced starts = 16 runs at 5 m/s, in the one car (`sim.driver_aids`). Half the
tracks carry heavy ice (3-6 patches of mu 0.1-0.3), half are dry: track i is the heavy-ice version when i %
4 is 0 or 3, else the dry one, so that each surface gets two circuits and two spline blobs, one of each
mirrored (the generator makes tracks 0-3 circuits, 4-7 blobs, every second of each kind mirrored). A run
ends at its lap, a failure (off the road, turned around, stalled, a simulator error), or after the lap
length at `train.validation_min_speed`. All checkpoints of one route drive side by side in one SourceVecEnv
(each car its own simulator: a run's result does not depend on which others share the env).

The rule. A checkpoint is lap-completing when it completes at least half of the set's laps
(lap_share = laps / runs >= 0.5). A route's time to quality is the time of its earliest
lap-completing checkpoint (no interpolation between checkpoints); None when none is (then the
bound: `not_reached_within_s`, direct's budget or the distilled route's last checkpoint).

The time axis, reproducible from the recorded throughputs rather than from each chunk's clock:
- direct: t = env_steps / env_steps_per_s (records/train/direct.json: env steps over its whole wall
  clock, worker start, validation and export included);
- distilled: t = offset + env_steps / env_steps_per_s, the rate being the first seed's env steps over
  its whole training wall clock, validation and export included, like direct's (records/train/<name>.json
  seed_selection.seeds, else the kept seed's train; the seeds trained side by side, so the first seed's
  clock is the route's), offset = the one-time collection (records/collect.json wall_seconds_total)
  + distillation of its model (records/distill/<model>.json total_wall_s).
For a real-time source (a simulator that runs at 1x per worker, e.g. BeamNG), as in
s3.report.cost: direct t = env_steps x control_dt / workers (simulation alone, PPO updates not
counted: a lower bound), collection = rows x control_dt / collect workers (rows: records/distill);
distillation and distilled PPO do not touch the source and keep their measured times.
Each point also carries `wall_s` where the training recorded it (its own clock at that checkpoint).

distilled_best: the families' earliest time to quality (the oracle observes the friction that
direct and the families must infer, so it is reported but not a candidate).
budget_rule: how direct's training ended against its rule: trained to its own plateau, the plateau rule must
have ended it (not a cap); with a fixed wall-clock budget, the budget must be at least the distilled route's whole
wall clock for one family (collection + distillation + its K seeds' training, seed_selection.rl_wall_s), checked
per family. Each family's route is listed beside direct's wall clock either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from s3 import headline
from s3.catalog import DIRECT
from s3.evaluate.holdout_set import START_SPEED
from s3.evaluate.ttq_checkpoints import CHECKPOINTS, ICE_SLOTS, N_TRACKS, STARTS, ttq_tracks
from s3.evaluate.ttq_routes import (
    LAP_SHARE,
    budget_rule,
    checkpoint_folder,
    collection_cost,
    direct_route,
    distilled_route,
    number_at,
    planned_checkpoints,
    read_metrics,
    seed_times,
    seeds_with_checkpoints,
)
from s3.io import json_safe
from s3.progress import progress
from s3.sim.backends import side_by_side_names, sim_backend


def _with_seeds(seeds: list[int], route: Any) -> dict[str, Any]:
    """The first seed's route; with more than one seed kept, also `seeds`: every seed's time or bound."""
    first = route(seeds[0])
    if len(seeds) == 1:
        return first
    return {**first, "seeds": [seed_times(first, seeds[0]), *(seed_times(route(s), s) for s in seeds[1:])]}


RULE = (
    "lap-completing = a checkpoint completes at least half of the set's laps (lap_share >= 0.5); time to quality = "
    "the time of a route's earliest lap-completing checkpoint (None: never, within not_reached_within_s)"
)


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
        reason = (
            f"needs the embedded simulator (sim.backend {side_by_side_names()}, not {params.sim.backend!r}): every "
            "checkpoint drives side by side"
        )
        headline.write_record(out, {"not_run": reason}, headline.time_to_quality)
        if plot_path is not None:
            from s3.viz.time_to_quality_plots import plot_not_run

            plot_not_run(plot_path, reason)
        return {"not_run": reason}
    dt = float(params.sim.control_dt)
    generator_seed = params.time_to_quality.seed
    tracks = ttq_tracks(n_tracks, generator_seed)
    names = [n for n in params.policies() if n != DIRECT]
    rows = None  # the collected dataset's rows, as each distillation read it
    for family in dict.fromkeys(params.model_of(n) for n in names):
        rows = number_at(read_metrics(metrics_dir / "distill" / f"{family}.json"), "rows")
        if rows is not None:
            break
    collect = collection_cost(metrics_dir, rows, dt)
    seeds = {  # every seed whose checkpoints were kept; the first is each route's curve
        n: seeds_with_checkpoints(policies_dir, n, read_metrics(metrics_dir / "train" / f"{n}.json"), first)
        for n, first in [(DIRECT, params.train.seed), *((n, params.train.for_policy(n).seed) for n in names)]
    }
    folders = [checkpoint_folder(policies_dir, n, s) for n, ss in seeds.items() for s in ss]
    with progress("time_to_quality", sum(map(planned_checkpoints, folders)), CHECKPOINTS):
        direct = _with_seeds(
            seeds[DIRECT], lambda s: direct_route(params, policies_dir, metrics_dir, tracks, starts, workers, s)
        )
        routes = {
            n: _with_seeds(
                seeds[n],
                lambda s, n=n: distilled_route(
                    n, params, policies_dir, metrics_dir, tracks, starts, workers, collect, s
                ),
            )
            for n in names
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
            "generator_seed": generator_seed,
            "n_tracks": n_tracks,
            "starts_per_track": starts,
            "runs": n_tracks * starts,
            "start_speed_m_s": START_SPEED,
            "surfaces": "track i heavy_ice when i % 4 in (0, 3), else dry (s3.evaluate.holdout_set.SURFACES)",
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
            DIRECT: f"env_steps / env_steps_per_s (records/train/{DIRECT}.json)",
            "distilled": "collect wall + distill total_wall_s + env_steps / env_steps_per_s (the first seed's env "
            "steps over its whole training wall clock, records/train/<policy>.json seed_selection.seeds), as "
            "direct's rate is over its whole run",
            "real_time": "direct: env_steps x control_dt / workers; distilled: collect rows x control_dt / collect "
            "workers + distill + PPO",
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
        "budget_rule": budget_rule(direct, metrics_dir, params),
    }
    if any(len(ss) > 1 for ss in seeds.values()):  # claim 1's censored test: direct against the route it is matched to
        result["claim_route"] = params.train.direct.route
    result = json_safe(result)
    headline.write_record(out, result, headline.time_to_quality)
    if plot_path is not None:  # the figure, and its curves as data beside it (plots/time_to_quality/<route>.csv)
        from s3.viz.time_to_quality_plots import plot_time_to_quality, write_curves_csv

        plot_time_to_quality(plot_path, result)
        write_curves_csv(Path(plot_path).with_suffix(""), result)
    return result
