"""The evaluate stage: a driver back in the SOURCE simulator on the held-out road course.

    evaluate_driver(name, driver_factory, params, out_json, plots_dir, eval_params=None) -> dict

runs every condition (nominal, ice) x start position x seed, computes the per-run metrics
(s3.evaluate.metrics), aggregates them with 95 % t-intervals over starts and seeds, writes the
JSON atomically to `out_json` (conventionally metrics/eval/<name>.json) and the figures under
`plots_dir`. The simulator is deterministic: seed k perturbs the start (lateral offset, heading,
speed) by a fixed draw, the same draw in both conditions, so the conditions are paired.

A run whose simulator connection was lost (BeamNG gone, socket closed) is not a driving result:
it is re-run on a freshly made simulator, `collect.retries` times with exponential backoff from
`collect.retry_backoff_s` (the project's one simulator retry policy). A run still lost after
that is left out of the aggregates and listed under "lost" in the output, with the error;
"retried" lists runs that needed retries and then succeeded. A simulator that cannot be reached
at all (at the start, or on a run's last attempt) stops the stage with a SimulatorError.
"""

from __future__ import annotations

import datetime as _dt
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from s3.evaluate.drivers import Driver, DriverFactory, pid_factory
from s3.evaluate.metrics import aggregate, run_metrics
from s3.evaluate.params import EvaluateParams
from s3.evaluate.plots import lap_gif, traces_figure, track_figure
from s3.evaluate.run import RunResult, run_lap
from s3.io import write_json_atomic
from s3.sim.aids import DriverAidsParams
from s3.sim.base import SimulatorLost, SourceSim
from s3.sim.factory import make_sim
from s3.tracks.road_course import ICE_PATCHES, road_course
from s3.viz.track_plot import save_figure

DEFAULT_RETRIES, DEFAULT_BACKOFF_S, MAX_BACKOFF_S = 3, 1.0, 60.0
HEADLINE = ("lap_time_s", "mean_speed_mps", "distance_m", "off_track_events", "mean_abs_lateral_error_m",
            "max_abs_lateral_error_m", "mean_abs_steering_rate", "mean_abs_steering_jerk", "pedal_switches")  # fmt: skip


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


def _retry_policy(params: Any) -> tuple[int, float]:
    """(retries, first backoff in s) from the root params' collect section, else the defaults."""
    c = getattr(params, "collect", None)
    return (getattr(c, "retries", DEFAULT_RETRIES), getattr(c, "retry_backoff_s", DEFAULT_BACKOFF_S))


class _Simulator:
    """The evaluation's simulator and the driver bound to it, remade after a lost connection."""

    def __init__(self, params: Any, driver_factory: DriverFactory, aids: DriverAidsParams | None = None) -> None:
        self.params, self.driver_factory, self.aids = params, driver_factory, aids
        self.retries, self.backoff_s = _retry_policy(params)
        self.sim: SourceSim | None = None
        self.driver: Driver | None = None
        self.info: dict[str, Any] | None = None

    def get(self) -> tuple[SourceSim, Driver]:
        """The live simulator and driver (making them if needed; raises SimulatorLost)."""
        if self.sim is None:
            sim = make_sim(self.params.sim, self.aids)
            self.sim, self.driver = sim, self.driver_factory(sim)
            aids = self.aids.model_dump() if self.aids is not None and self.aids.enabled else None
            self.info = self.info or {"name": sim.name, "version": sim.version, "control_dt": sim.control_dt, "driver_aids": aids}
        assert self.driver is not None
        return self.sim, self.driver

    def drop(self) -> None:
        sim, self.sim, self.driver = self.sim, None, None
        if sim is not None:
            try:
                sim.close()
            except Exception:
                pass

    def wait(self, attempt: int, what: str, error: str) -> None:
        wait_s = min(self.backoff_s * 2.0**attempt, MAX_BACKOFF_S)
        print(f"evaluate: {what}: {error.rstrip('.')}; retry {attempt + 1}/{self.retries} in {wait_s:g} s", file=sys.stderr, flush=True)
        time.sleep(wait_s)

    def connect(self) -> None:
        """Make the first simulator, retrying a lost connection; raise the last error if it never comes."""
        for attempt in range(self.retries + 1):
            try:
                self.get()
                return
            except SimulatorLost as e:
                self.drop()
                if attempt == self.retries:
                    raise
                self.wait(attempt, "connecting", str(e))

    @property
    def control_dt(self) -> float:
        return float(self.info["control_dt"]) if self.info else float(self.params.sim.control_dt)

    def run(self, what: str, **lap: Any) -> tuple[RunResult | None, int, str]:
        """run_lap(sim, driver=driver, **lap), re-run while the connection is lost: (result or None, retries, last error)."""
        error = ""
        for attempt in range(self.retries + 1):
            connected = False
            try:
                sim, driver = self.get()
                connected = True
                r = run_lap(sim, driver=driver, **lap)
                if not r.lost:
                    return r, attempt, error
                error = r.error or "simulator lost"
            except SimulatorLost as e:
                error = str(e)
            self.drop()
            if not connected and attempt == self.retries:  # unreachable: the other runs would only wait too
                raise SimulatorLost(f"{error} ({what}, {self.retries + 1} attempts)")
            if attempt < self.retries:
                self.wait(attempt, what, error)
        return None, self.retries, error


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
    simulator = _Simulator(params, driver_factory, ep.driver_aids)
    simulator.connect()
    results: dict[str, Any] = {}
    kept: dict[str, list[tuple[dict[str, Any], RunResult]]] = {}
    lost: list[dict[str, Any]] = []
    retried: list[dict[str, Any]] = []
    try:
        for cond in ep.conditions:
            track = road_course(cond)
            labelled = list(ICE_PATCHES) if cond == "ice" else []
            runs: list[dict[str, Any]] = []
            kept[cond] = []
            for i, frac in enumerate(ep.start_fractions):
                for seed in ep.seeds:
                    d0, h0, v0 = start_perturbation(seed, i, ep)
                    t0 = time.perf_counter()
                    where = {"condition": cond, "start_index": i, "seed": seed}
                    r, retries, error = simulator.run(
                        f"{cond} start {i} seed {seed}", track=track, start_s=frac * track.length, start_d=d0,
                        start_heading=h0, start_speed=v0, max_seconds=ep.max_lap_seconds, judge=ep.judge,
                    )  # fmt: skip
                    if r is None:
                        lost.append({**where, "attempts": retries + 1, "error": error})
                        continue
                    if retries:
                        retried.append({**where, "retries": retries, "error": error})
                    m = run_metrics(r.trajectory, track, r.completed, r.lap_time, r.progress, simulator.control_dt,
                                    ep.off_track_tolerance, labelled)  # fmt: skip
                    row = {
                        "condition": cond,
                        "start_index": i,
                        "start_fraction": frac,
                        "start_s": r.start_s,
                        "seed": seed,
                        "start_d": d0,
                        "start_heading": h0,
                        "start_speed": v0,
                        "reason": r.reason,
                        "steps": r.steps,
                        "error": r.error,
                        "wall_s": time.perf_counter() - t0,
                        **m,
                    }
                    runs.append(row)
                    kept[cond].append((row, r))
            per_start = []
            for i, frac in enumerate(ep.start_fractions):
                sub = [r for r in runs if r["start_index"] == i]
                per_start.append({"start_index": i, "start_fraction": frac, **aggregate(sub)})
            results[cond] = {"track": track.name, "length_m": track.length, "aggregate": aggregate(runs),
                             "per_start": per_start, "runs": runs}  # fmt: skip
    finally:
        simulator.drop()
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
        "simulator": simulator.info,
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
    "pid": lambda ep: pid_factory(ep.pid),  # as configured (default: slows for the map's known ice)
    "pid_blind": lambda ep: pid_factory(ep.pid.model_copy(update={"knows_ice": False})),  # no surface knowledge
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
