"""The evaluate stage: a driver back in the SOURCE simulator on the evaluation suite.

    evaluate_driver(name, drivers, params, out_json, plots_dir, eval_params=None) -> dict

`drivers` is a DriverFactory (a deterministic driver: the pid baselines) or a list of (seed,
factory), one per training seed of a policy (s3.evaluate.suite.policy_seeds). Every seed drives
every circuit of `evaluate.tracks` (built-in names or racing CSVs, s3.tracks.evaluation_circuits)
in every condition (nominal, ice) from each of `evaluate.start_fractions` (spread around the lap,
at `start_speed`, on the centerline and along it: no perturbations, the seeds carry the variation).
The per-run metrics (s3.evaluate.metrics) are kept as rows; the summaries (s3.evaluate.suite) give
each figure with its interval and n: over the suite and per circuit, and per seed. Written
atomically to `out_json` (conventionally records/eval/<name>.json); figures under `plots_dir`.

Each run is a job of the executor (s3.compute.executor; `evaluate.workers` at once, one per
BeamNG instance; or Ray tasks, with a policy's files shipped to them), so runs go side by side and the project's one
retry policy applies: a run whose simulator connection was lost says nothing about the driver and is re-run on a fresh
simulator; a run still lost after the retries is left out of the summaries and listed under "lost" with the error;
"retried" lists runs that needed retries and then succeeded. A simulator that cannot be reached at all stops the stage
with a SimulatorError. Factories must be picklable (class instances such as PidFactory or PolicyFactory), as jobs may
run in workers.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3 import headline
from s3.catalog import PID, PID_BLIND, PID_CAUTIOUS
from s3.compute.backend import executor_for
from s3.compute.executor import Job
from s3.compute.retry import check_lost
from s3.evaluate.drivers import DriverFactory, PidFactory, cautious
from s3.evaluate.metrics import run_metrics
from s3.evaluate.params import EvaluateParams
from s3.evaluate.plots import lap_gif, traces_figure, track_figure
from s3.evaluate.run import RunResult, run_lap
from s3.evaluate.suite import by_seed, summarise
from s3.io import json_safe
from s3.sim.base import SimulatorLost
from s3.sim.factory import drop_worker_sim, instances, worker_sim
from s3.tracks.evaluation_circuits import circuit_stats, evaluation_track, ice_patches
from s3.viz.track_plot import save_figure

PRELOAD = ("s3.evaluate.evaluate", "s3.evaluate.policy_driver", "s3.sim.factory", "s3.sim.mujoco_car")
Drivers = DriverFactory | Sequence[tuple[int, DriverFactory]]


def eval_params_of(params: Any, eval_params: EvaluateParams | None = None) -> EvaluateParams:
    """`eval_params` if given, else the root Params' `evaluate` section, else the defaults."""
    if eval_params is not None:
        return eval_params
    ep = getattr(params, "evaluate", None)
    return ep if isinstance(ep, EvaluateParams) else EvaluateParams()


def track_name(spec: str) -> str:
    """The name a circuit spec goes by in the metrics: a built-in's name, a CSV's stem."""
    return evaluation_track(spec, "nominal").name


def evaluation_run(
    sim_json: str, ep_json: str, factory: DriverFactory, spec: str, cond: str, i: int
) -> tuple[dict[str, Any], RunResult, dict[str, Any]]:
    """One run (an executor job): (its row of metrics, the run, the simulator's description).

    A lost connection drops this process's simulator and raises SimulatorLost (the job is retried).
    """
    from s3.sim.params import SimParams

    sim_params, ep = SimParams.model_validate_json(sim_json), EvaluateParams.model_validate_json(ep_json)
    sim = worker_sim(sim_params)
    track = evaluation_track(spec, cond)  # type: ignore[arg-type]
    frac = ep.start_fractions[i]
    t0 = time.perf_counter()
    r = run_lap(
        sim,
        track,
        factory(sim),
        start_s=frac * track.length,
        start_speed=ep.start_speed,
        max_seconds=ep.max_lap_seconds,
        judge=ep.judge,
    )
    if r.lost:
        drop_worker_sim()
        raise SimulatorLost(r.error or "simulator lost")
    labelled = list(ice_patches(spec)) if cond == "ice" else []
    m = run_metrics(
        r.trajectory, track, r.completed, r.lap_time, r.progress, sim.control_dt, ep.off_track_tolerance, labelled
    )
    patches = m.pop("patches")
    attempted = [p for p in patches if p["attempted"]]
    row = {
        "track": track_name(spec),
        "condition": cond,
        "start_index": i,
        "start_fraction": frac,
        "start_s": r.start_s,
        "reason": r.reason,
        "steps": r.steps,
        "error": r.error,
        "wall_s": round(time.perf_counter() - t0, 3),
        **m,
        "patches_attempted": len(attempted),
        "patches_crossed": sum(bool(p["crossed_on_track"]) for p in attempted),
        "patch_crossing_rate": sum(bool(p["crossed_on_track"]) for p in attempted) / len(attempted)
        if attempted
        else None,
    }
    aids = sim_params.aids()
    return (
        row,
        r,
        {
            "name": sim.name,
            "version": sim.version,
            "control_dt": sim.control_dt,
            "driver_aids": aids.model_dump() if aids is not None else None,
        },
    )


def _seeded(drivers: Drivers) -> list[tuple[int, DriverFactory]]:
    return [(0, drivers)] if callable(drivers) else list(drivers)  # type: ignore[list-item]


def evaluate_driver(
    name: str,
    drivers: Drivers,
    params: Any,
    out_json: str | Path,
    plots_dir: str | Path | None,
    eval_params: EvaluateParams | None = None,
) -> dict[str, Any]:
    """Evaluate one driver (every seed of a policy); `params` is the root Params (its `sim` picks the simulator).

    `eval_params` defaults to `params.evaluate` when the root Params has that section, else to
    EvaluateParams(). Returns the dict written to `out_json`; plots are skipped when plots_dir is None.
    """
    ep = eval_params_of(params, eval_params)
    t_start = time.perf_counter()
    seeded = _seeded(drivers)
    runs = [
        (seed, spec, cond, i)
        for seed, _ in seeded
        for spec in ep.tracks
        for cond in ep.conditions
        for i in range(len(ep.start_fractions))
    ]
    sims = instances(params.sim)  # one BeamNG instance is one world: one worker per instance
    compute = getattr(params, "compute", None)
    executor = executor_for(
        compute, "evaluate", len(sims) or ep.workers, PRELOAD, f"evaluate {name}", sims, progress="runs"
    )
    ship = (
        (lambda f: f) if executor.shared_fs else (lambda f: f.shipped() if hasattr(f, "shipped") else f)
    )  # a policy's files travel with it
    factory_of = {seed: ship(f) for seed, f in seeded}
    sim_json, ep_json = params.sim.model_dump_json(), ep.model_dump_json()
    jobs = [
        Job(
            f"seed {seed} {spec} {cond} start {i}", evaluation_run, (sim_json, ep_json, factory_of[seed], spec, cond, i)
        )
        for seed, spec, cond, i in runs
    ]
    try:
        outcomes = executor.run(jobs)
    finally:
        drop_worker_sim()  # this process's, if the runs ran here
    kept: list[tuple[dict[str, Any], RunResult]] = []
    lost: list[dict[str, Any]] = []
    retried: list[dict[str, Any]] = []
    info: dict[str, Any] | None = None
    for (seed, spec, cond, i), o in zip(runs, outcomes):
        where = {"seed": seed, "track": spec, "condition": cond, "start_index": i}
        if not o.ok:
            lost.append({**where, "attempts": o.retries + 1, "error": o.error})
            continue
        if o.retries:
            retried.append({**where, "retries": o.retries, "causes": o.causes})
        row, r, info = o.value
        kept.append(({"seed": seed, **row}, r))
    rows = [row for row, _ in kept]
    names = [track_name(spec) for spec in ep.tracks]
    fail_at = compute.fail_at_lost_share if compute is not None else 1.0
    check_lost(f"evaluate {name}", len(lost), len(runs), fail_at, lost[0]["error"] if lost else None, "the log above")
    if lost:
        print(
            f"evaluate: {len(lost)} run(s) lost to the simulator connection, left out of the metrics (see {out_json})",
            file=sys.stderr,
            flush=True,
        )
    plots = _plots(name, kept, ep, Path(plots_dir)) if plots_dir is not None else []
    out = {
        "driver": name,
        "simulator": info,
        "suite": {
            n: {"spec": spec, **circuit_stats(evaluation_track(spec, "nominal"))} for n, spec in zip(names, ep.tracks)
        },
        "seeds": [seed for seed, _ in seeded],
        "params": ep.model_dump(mode="json"),
        "summary": summarise(rows, names, ep.conditions),
        "by_seed": by_seed(rows, ep.conditions),
        "runs": rows,
        "plots": plots,
        "lost": lost,
        "retried": retried,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    out = json_safe(out)  # an undefined metric (NaN) is null, not a crash after the runs
    headline.write_record(out_json, out, headline.evaluate)
    return out


def _plots(name: str, kept: list[tuple[dict[str, Any], RunResult]], ep: EvaluateParams, folder: Path) -> list[str]:
    """Per circuit and condition: every seed's runs on the map, and the first seed's speed and steering traces."""
    written: list[str] = []
    for spec in ep.tracks:
        for cond in ep.conditions:
            track = evaluation_track(spec, cond)  # type: ignore[arg-type]
            pairs = [(row, r) for row, r in kept if row["track"] == track_name(spec) and row["condition"] == cond]
            if not pairs:
                continue
            done = sum(row["completed"] for row, _ in pairs)
            fig = track_figure(
                track,
                [r.trajectory for _, r in pairs],
                f"{name} on {track.name}: {done}/{len(pairs)} laps completed (all seeds)",
            )
            written.append(str(save_figure(fig, folder / f"{name}_{track.name}_track.png")))
            first = min(row["seed"] for row, _ in pairs)
            traces = {
                f"start {row['start_fraction']:.2f} ({row['reason']})": r.trajectory
                for row, r in pairs
                if row["seed"] == first
            }
            fig = traces_figure(traces, track, f"{name}, {track.name}: speed and steering (seed {first})")
            written.append(str(save_figure(fig, folder / f"{name}_{track.name}_traces.png")))
    if ep.gif and kept:
        row, r = kept[0]
        track = evaluation_track(ep.tracks[0], row["condition"])  # type: ignore[arg-type]
        lt = f"{row['lap_time_s']:.1f} s" if row["completed"] else row["reason"]
        title = f"{name}, {track.name}, seed {row['seed']}, start {row['start_fraction']:.2f}: {lt}"
        written.append(
            str(
                lap_gif(
                    track,
                    r.trajectory,
                    folder / f"{name}_{track.name}_lap.gif",
                    title,
                    ep.gif_frame_seconds,
                    ep.gif_fps,
                )
            )
        )
    return written


BASELINES: dict[str, Any] = {
    PID: lambda ep: PidFactory(ep.pid),  # as configured (default: slows for the map's known ice)
    PID_BLIND: lambda ep: PidFactory(ep.pid.model_copy(update={"knows_ice": False})),  # no surface knowledge
    PID_CAUTIOUS: lambda ep: PidFactory(cautious(ep.pid)),  # blind, planned for the lowest training friction everywhere
}


def evaluate_baseline(
    name: str,
    params: Any,
    out_json: str | Path,
    plots_dir: str | Path | None,
    eval_params: EvaluateParams | None = None,
) -> dict[str, Any]:
    """Evaluate a registered no-learning baseline (`pid`) the same way as any policy."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    ep = eval_params_of(params, eval_params)
    return evaluate_driver(name, BASELINES[name](ep), params, out_json, plots_dir, ep)


def transfer_gap(source: dict[str, Any], distilled: dict[str, Any]) -> dict[str, Any]:
    """Source-minus-distilled differences of two summary blocks (s3.evaluate.suite) of the same driver, runs and
    circuits.

    Positive lap-time gap = slower in the source simulator; negative completion gap = completes
    less often there.
    """
    out: dict[str, Any] = {}
    for key in ("completion_rate", "lap_share", "lap_time_s"):
        a, b = source[key]["estimate"], distilled[key]["estimate"]
        out[key] = {"source": a, "distilled": b, "gap": None if a is None or b is None else a - b}
    return out
