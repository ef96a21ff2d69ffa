"""The evaluate stage: a driver back in the SOURCE simulator on the held-out road course.

    evaluate_driver(name, driver_factory, params, out_json, plots_dir, eval_params=None) -> dict

runs every condition (nominal, ice) x start position x seed, computes the per-run metrics
(s3.evaluate.metrics), aggregates them with 95 % t-intervals over starts and seeds, writes the
JSON atomically to `out_json` (conventionally metrics/eval/<name>.json) and the figures under
`plots_dir`. The simulator is deterministic: seed k perturbs the start (lateral offset, heading,
speed) by a fixed draw, the same draw in both conditions, so the conditions are paired.

Each run is a job of the executor (s3.compute.executor; `evaluate.workers` at once, one for
BeamNG's one instance), so runs go side by side and the project's one retry policy applies: a
run whose simulator connection was lost says nothing about the driver and is re-run on a fresh
simulator; a run still lost after the retries is left out of the aggregates and listed under
"lost" with the error; "retried" lists runs that needed retries and then succeeded. A simulator
that cannot be reached at all stops the stage with a SimulatorError. `driver_factory` must be
picklable (a class instance such as PidFactory or PolicyFactory), as jobs may run in workers.
"""

from __future__ import annotations

import datetime as _dt
import platform
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from s3.compute.executor import Job, LocalExecutor
from s3.compute.retry import RetryPolicy
from s3.evaluate.drivers import DriverFactory, PidFactory
from s3.evaluate.metrics import aggregate, run_metrics
from s3.evaluate.params import EvaluateParams
from s3.evaluate.plots import lap_gif, traces_figure, track_figure
from s3.evaluate.run import RunResult, run_lap
from s3.io import write_json_atomic
from s3.sim.base import SimulatorLost
from s3.sim.factory import drop_worker_sim, worker_sim
from s3.tracks.road_course import ICE_PATCHES, road_course
from s3.viz.track_plot import save_figure

HEADLINE = ("lap_time_s", "mean_speed_mps", "distance_m", "off_track_events", "mean_abs_lateral_error_m",
            "max_abs_lateral_error_m", "mean_abs_steering_rate", "mean_abs_steering_jerk", "pedal_switches")  # fmt: skip
PRELOAD = ("s3.evaluate.evaluate", "s3.evaluate.policy_driver", "s3.sim.factory", "s3.sim.mujoco_car")


def start_perturbation(seed: int, start_index: int, ep: EvaluateParams) -> tuple[float, float, float]:
    """(lateral offset m, heading error rad, speed m/s) of the start for this seed and start."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(start_index), 0x5E7A]))
    u = rng.uniform(-1.0, 1.0, 3)
    return (
        float(u[0] * ep.perturb_lateral),
        float(u[1] * ep.perturb_heading),
        float(max(0.0, ep.start_speed + u[2] * ep.perturb_speed)),
    )


def eval_params_of(params: Any, eval_params: EvaluateParams | None = None) -> EvaluateParams:
    """`eval_params` if given, else the root Params' `evaluate` section, else the defaults."""
    if eval_params is not None:
        return eval_params
    ep = getattr(params, "evaluate", None)
    return ep if isinstance(ep, EvaluateParams) else EvaluateParams()


def _ci(agg: dict[str, Any], key: str) -> dict[str, Any]:
    m = agg[key]
    return {"mean": m["mean"], "ci95": m["ci95"], "n": m["n"]}


@lru_cache(maxsize=4)
def _track(cond: str):
    return road_course(cond)  # type: ignore[arg-type]


def evaluation_run(sim_json: str, ep_json: str, factory: DriverFactory, cond: str, i: int, seed: int) -> tuple[dict[str, Any], RunResult, dict[str, Any]]:
    """One run (an executor job): (its row of metrics, the run, the simulator's description).

    A lost connection drops this process's simulator and raises SimulatorLost (the job is retried).
    """
    from s3.config import SimParams

    sim_params, ep = SimParams.model_validate_json(sim_json), EvaluateParams.model_validate_json(ep_json)
    sim = worker_sim(sim_params, ep.driver_aids)
    track = _track(cond)
    frac = ep.start_fractions[i]
    d0, h0, v0 = start_perturbation(seed, i, ep)
    t0 = time.perf_counter()
    r = run_lap(sim, track, factory(sim), start_s=frac * track.length, start_d=d0, start_heading=h0, start_speed=v0,
                max_seconds=ep.max_lap_seconds, judge=ep.judge)  # fmt: skip
    if r.lost:
        drop_worker_sim()
        raise SimulatorLost(r.error or "simulator lost")
    labelled = list(ICE_PATCHES) if cond == "ice" else []
    m = run_metrics(r.trajectory, track, r.completed, r.lap_time, r.progress, sim.control_dt, ep.off_track_tolerance, labelled)
    row = {"condition": cond, "start_index": i, "start_fraction": frac, "start_s": r.start_s, "seed": seed, "start_d": d0,
           "start_heading": h0, "start_speed": v0, "reason": r.reason, "steps": r.steps, "error": r.error,
           "wall_s": time.perf_counter() - t0, **m}  # fmt: skip
    aids = ep.driver_aids.model_dump() if ep.driver_aids.enabled else None
    return row, r, {"name": sim.name, "version": sim.version, "control_dt": sim.control_dt, "driver_aids": aids}


def evaluate_driver(
    name: str,
    driver_factory: DriverFactory,
    params: Any,
    out_json: str | Path,
    plots_dir: str | Path | None,
    eval_params: EvaluateParams | None = None,
) -> dict[str, Any]:
    """Evaluate one driver; `params` is the root Params (its `sim` section picks the simulator).

    `eval_params` defaults to `params.evaluate` when the root Params has that section, else to
    EvaluateParams(). Returns the dict written to `out_json`; plots are skipped when plots_dir is None.
    """
    ep = eval_params_of(params, eval_params)
    t_start = time.perf_counter()
    runs = [(cond, i, seed) for cond in ep.conditions for i in range(len(ep.start_fractions)) for seed in ep.seeds]
    beamng = params.sim.backend == "beamng"
    workers = 1 if beamng else ep.workers  # one BeamNG instance is one world
    compute = getattr(params, "compute", None)
    executor = LocalExecutor(workers, PRELOAD, compute.retry if compute is not None else RetryPolicy(), label="evaluate")
    sim_json, ep_json = params.sim.model_dump_json(), ep.model_dump_json()
    jobs = [Job(f"{cond} start {i} seed {seed}", evaluation_run, (sim_json, ep_json, driver_factory, cond, i, seed)) for cond, i, seed in runs]
    try:
        outcomes = executor.run(jobs)
    finally:
        drop_worker_sim()  # this process's, if the runs ran here
    kept: dict[str, list[tuple[dict[str, Any], RunResult]]] = {cond: [] for cond in ep.conditions}
    lost: list[dict[str, Any]] = []
    retried: list[dict[str, Any]] = []
    info: dict[str, Any] | None = None
    for (cond, i, seed), o in zip(runs, outcomes):
        where = {"condition": cond, "start_index": i, "seed": seed}
        if not o.ok:
            lost.append({**where, "attempts": o.retries + 1, "error": o.error})
            continue
        if o.retries:
            retried.append({**where, "retries": o.retries, "causes": o.causes})
        row, r, info = o.value
        kept[cond].append((row, r))
    results: dict[str, Any] = {}
    for cond in ep.conditions:
        rows = [row for row, _ in kept[cond]]
        per_start = [{"start_index": i, "start_fraction": frac, **aggregate([r for r in rows if r["start_index"] == i])}
                     for i, frac in enumerate(ep.start_fractions)]  # fmt: skip
        track = _track(cond)
        results[cond] = {"track": track.name, "length_m": track.length, "aggregate": aggregate(rows), "per_start": per_start, "runs": rows}
    if lost:
        print(f"evaluate: {len(lost)} run(s) lost to the simulator connection, left out of the metrics (see {out_json})", file=sys.stderr, flush=True)
    summary: dict[str, Any] = {}
    for cond, res in results.items():
        agg = res["aggregate"]
        summary[cond] = {"completion_rate": agg["completion_rate"]["mean"], "completed": agg["completed"],
                         "runs": agg["runs"], **{k: _ci(agg, k) for k in HEADLINE}}  # fmt: skip
        if "patch_crossing_rate" in agg:
            summary[cond]["patch_crossing_rate"] = _ci(agg, "patch_crossing_rate")
    plots: list[str] = []
    if plots_dir is not None:
        plots = _plots(name, kept, Path(plots_dir), ep)
    out = {
        "driver": name,
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.machine()}, {platform.system()})",
        "simulator": info,
        "held_out_track": "road_course (built-in, never used for training or tuning)",
        "params": ep.model_dump(mode="json"),
        "summary": summary,
        "conditions": results,
        "plots": plots,
        "lost": lost,
        "retried": retried,
        "wall_s": time.perf_counter() - t_start,
    }
    write_json_atomic(out_json, out)
    return out


def _plots(name: str, kept: dict[str, list[tuple[dict[str, Any], RunResult]]], folder: Path, ep: EvaluateParams) -> list[str]:
    written: list[str] = []
    for cond, pairs in kept.items():
        if not pairs:
            continue
        track = road_course(cond)  # type: ignore[arg-type]
        done = sum(row["completed"] for row, _ in pairs)
        fig = track_figure(track, [r.trajectory for _, r in pairs], f"{name} on {track.name}: {done}/{len(pairs)} laps completed")
        written.append(str(save_figure(fig, folder / f"{name}_{cond}_track.png")))
        first_seed = {}
        for row, r in pairs:
            first_seed.setdefault(row["start_index"], (row, r))
        traces = {f"start {row['start_fraction']:.2f} ({row['reason']})": r.trajectory for row, r in first_seed.values()}
        fig = traces_figure(traces, track, f"{name}, {cond}: speed and steering (first seed of each start)")
        written.append(str(save_figure(fig, folder / f"{name}_{cond}_traces.png")))
    if ep.gif:
        cond = "nominal" if kept.get("nominal") else next((c for c in kept if kept[c]), None)
        if cond is not None:
            row, r = kept[cond][0]
            track = road_course(cond)  # type: ignore[arg-type]
            lt = f"{row['lap_time_s']:.1f} s" if row["completed"] else row["reason"]
            written.append(str(lap_gif(track, r.trajectory, folder / f"{name}_{cond}_lap.gif",
                                       f"{name}, {cond}, start {row['start_fraction']:.2f}: {lt}",
                                       ep.gif_frame_seconds, ep.gif_fps)))  # fmt: skip
    return written


BASELINES: dict[str, Any] = {
    "pid": lambda ep: PidFactory(ep.pid),  # as configured (default: slows for the map's known ice)
    "pid_blind": lambda ep: PidFactory(ep.pid.model_copy(update={"knows_ice": False})),  # no surface knowledge
}


def evaluate_baseline(name: str, params: Any, out_json: str | Path, plots_dir: str | Path | None,
                      eval_params: EvaluateParams | None = None) -> dict[str, Any]:  # fmt: skip
    """Evaluate a registered no-learning baseline (`pid`) the same way as any policy."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    ep = eval_params_of(params, eval_params)
    return evaluate_driver(name, BASELINES[name](ep), params, out_json, plots_dir, ep)


def transfer_gap(source: dict[str, Any], distilled: dict[str, Any]) -> dict[str, Any]:
    """Source-minus-distilled differences of two `aggregate()` results of the same driver and track.

    Positive lap-time gap = slower in the source simulator; negative completion gap = completes
    less often there.
    """

    def mean(agg: dict[str, Any], key: str) -> float | None:
        return agg[key]["mean"]

    out: dict[str, Any] = {}
    for key in ("completion_rate", "lap_time_s", "mean_speed_mps"):
        a, b = mean(source, key), mean(distilled, key)
        out[key] = {"source": a, "distilled": b, "gap": None if a is None or b is None else a - b}
    return out
