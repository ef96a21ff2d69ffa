"""One collection episode: its plan (random stream and track) from (seed, episode) alone, and its rows.

    episode_plan(params, episode) -> (rng, track_id): rng from SeedSequence([params.seed, episode])
    track_for(track_id, tracks_json) -> the collection track ("proc<seed>", or "proc<seed>-ice" with its patches)
    run_episode(sim, params, episode, driver_for=exploration_driver) -> (rows, "") or (None, why it was dropped)
    drive_episode(params, episode) -> run_episode on this process's simulator (s3.sim.factory.worker_sim)

Rows follow s3.data.schema.COLUMNS, one per control step (sim.control_dt), at most
collect.episode_steps; an episode ends when the car leaves the road by more than
collect.off_track_margin, turns around, or runs out of steps. A non-finite state or one faster than
MAX_SPEED (m/s), and a simulator error, drop the episode; `SimulatorLost` propagates (the shard is
retried on a fresh simulator). The same (params, episode) gives the same rows on any worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Protocol

import numpy as np
import pandas as pd

from s3.config import Params
from s3.data.driver import ExplorationDriver
from s3.data.schema import COLUMNS
from s3.sim.base import Control, SimulatorError, SimulatorLost, SourceSim, VehicleState
from s3.sim.factory import drop_worker_sim, worker_sim
from s3.tracks.generate import procedural_track
from s3.tracks.track import Track

MAX_SPEED = 120.0  # m/s: beyond this a state is an explosion, not driving


@lru_cache(maxsize=64)
def track_for(track_id: str, params_json: str) -> Track:
    """Rebuild a collection track from its id ("proc<seed>" or "proc<seed>-ice")."""
    from s3.tracks.generate import ProceduralTrackParams

    tp = ProceduralTrackParams.model_validate_json(params_json)
    seed = int(track_id.removeprefix("proc").removesuffix("-ice"))
    track = procedural_track(seed, tp)
    return track if track_id.endswith("-ice") else track.without_patches()


def episode_plan(params: Params, episode: int) -> tuple[np.random.Generator, str]:
    """The episode's own random stream and the track it runs on."""
    rng = np.random.default_rng(np.random.SeedSequence([params.seed, episode]))
    c = params.collect
    track_seed = params.seed * 100_003 + int(rng.integers(c.n_tracks))
    ice = rng.random() < c.ice_episode_fraction
    return rng, f"proc{track_seed}" + ("-ice" if ice else "")


def _row(ep: int, step: int, st: VehicleState, track_id: str, cmd: Control, s: float, d: float, off: bool) -> list:
    return [
        ep,
        step,
        st.time,
        track_id,
        st.x,
        st.y,
        st.yaw,
        st.vx,
        st.vy,
        st.yaw_rate,
        st.steer,
        *map(float, st.wheel_speed),
        cmd.steering,
        cmd.throttle,
        cmd.brake,
        *map(float, st.friction),
        float(np.mean(st.friction)),
        s,
        d,
        off,
    ]


class EpisodeDriver(Protocol):
    """Who drives an episode: the exploration driver, or (s3.dagger) a trained policy."""

    def target_speed(self, s: float) -> float: ...  # the speed it plans at arc length s (caps the start speed)

    def start(self, track: Track, state: VehicleState) -> None: ...  # the car was just placed

    def act(self, state: VehicleState, s: float) -> Control: ...


DriverFor = Callable[[Track, SourceSim, Params, np.random.Generator], EpisodeDriver]


def exploration_driver(track: Track, sim: SourceSim, params: Params, rng: np.random.Generator) -> EpisodeDriver:
    """The collection's driver (s3.data.driver), drawn from the episode's own random stream."""
    return ExplorationDriver(track, params.collect.driver, sim.wheelbase, sim.max_steer, sim.control_dt, rng)


def run_episode(
    sim: SourceSim, params: Params, episode: int, driver_for: DriverFor = exploration_driver
) -> tuple[pd.DataFrame | None, str]:
    """Drive one episode with `driver_for`'s driver; return its rows, or None and the reason it was dropped."""
    c = params.collect
    rng, track_id = episode_plan(params, episode)
    track = track_for(track_id, c.tracks.model_dump_json())
    driver = driver_for(track, sim, params, rng)

    s0 = rng.uniform(0.0, track.length)
    half = 0.5 * float(sum(w[0] for w in track.width_at(np.array([s0]))))
    x0, y0, h0 = (float(a[0]) for a in track.pose_at(np.array([s0]), np.array([rng.uniform(-0.4, 0.4) * half])))
    speed0 = min(rng.uniform(*c.start_speed), driver.target_speed(s0))
    rows: list[list] = []
    try:
        state = sim.reset(track, x0, y0, h0 + rng.normal(0.0, 0.05), speed0)
        driver.start(track, state)
        for step in range(c.episode_steps):
            if not state.is_finite() or math.hypot(state.vx, state.vy) > MAX_SPEED:
                return None, "non-finite or exploded state"
            proj = track.project(np.array([[state.x, state.y]]), np.array([state.yaw]))
            s, d, herr = float(proj.s[0]), float(proj.d[0]), float(proj.heading_error[0])
            edge = float(proj.w_left[0]) if d > 0 else float(proj.w_right[0])
            cmd = driver.act(state, s)
            rows.append(_row(episode, step, state, track_id, cmd, s, d, abs(d) > edge))
            lost = abs(d) > edge + c.off_track_margin
            backwards = state.vx < -1.0 or (abs(herr) > 2.0 and state.vx > 2.0)
            if lost or backwards or step == c.episode_steps - 1:
                break
            state = sim.step(cmd)
    except SimulatorLost:
        raise  # not the episode's fault: the shard is retried on a fresh simulator
    except SimulatorError as e:
        return None, f"simulator error: {e}"
    return pd.DataFrame(rows, columns=list(COLUMNS)), ""


def drive_episode(params: Params, episode: int) -> tuple[pd.DataFrame | None, str]:
    """run_episode on this process's simulator: (rows, or None and why the episode was dropped).

    A lost connection drops the cached simulator and propagates (the shard is retried); no
    simulator to be had at all is `SimulatorUnreachable`.
    """
    sim = worker_sim(params.sim)
    try:
        return run_episode(sim, params, episode)
    except SimulatorLost:
        drop_worker_sim()
        raise
