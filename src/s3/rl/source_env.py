"""The source simulator as an rsl_rl `VecEnv`: N cars stepped in W worker processes.

`SourceVecEnv` is the environment of the `direct` baseline (s3.rl.direct). The task is the
distilled env's, from the same code (s3.task), so that the two trainings differ only in the
simulator: the observation (`Observer`, fed the poses, states and commands the source simulator
reports), reward and terminations (`Rules` with the env params' training thresholds), the start
distribution (`sample_starts`) and auto-reset.
Differences, all forced by the source simulator:
- a simulator failure (SimulatorError, non-finite or absurd state) takes the place of an invalid
  model output: the car keeps its last state, gets zero reward, ends as "model_invalid" and is
  counted in `sim_errors`;
- the observation history at a reset holds the start state beside the command (0, 0, 0), as in
  every source-simulator client (s3.task.observation), because the source simulator has no
  cheap "hold this speed" throttle table.

Processes. Each worker owns N/W simulator instances (`make_sim`), a copy of the track pool and a
friction raster per track (rasterised on first use, ~0.15 s and 5-15 MB each), so keep the pool
small. Workers start from a forkserver that has imported this module once (spawn where there is
no forkserver): no fork of a process that runs torch threads, and no per-worker torch import. The
main process samples starts, batches commands and states as tensors and computes everything
else. A worker that dies or reports an error raises `SourceWorkerError` naming it; `close()` (or
the context manager) stops them all. With `compute` naming the `ray` backend the workers are Ray
actors instead (`compute.resources.source_env` each), placed wherever the cluster has room: at most
as many as it has room for now (an actor holds its CPUs for life), and a clear error when it has
none. An env built with `holds_cpus=False` (direct's validation env, which steps only while the
training env waits) has actors that hold no CPUs, as its local processes share the cores.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from s3.catalog import DIRECT
from s3.rl import SOURCE_WORKER_PRELOAD
from s3.rl.params import EnvParams
from s3.rl.task_env import TaskVecEnv
from s3.sim.base import Control, SimulatorError
from s3.task.actions import split_action
from s3.task.observation import Observer
from s3.task.rules import TERMS, EndRules, Rules
from s3.task.starts import Starts, sample_starts, start_pose
from s3.tracks.track import Track
from s3.workers import exit_with_parent, forkserver_context
from s3.workers import prestart as start_forkserver

if TYPE_CHECKING:
    from s3.compute.params import ComputeParams
    from s3.config import SimParams
    from s3.sim.aids import DriverAidsParams

STATE_COLUMNS = ("x", "y", "yaw", "vx", "vy", "yaw_rate", "steer")


class SourceWorkerError(RuntimeError):
    """A simulator worker process died, hung or failed; the message names it."""


# ---------------------------------------------------------------------------- worker process
class _SimWorker:
    """The cars of one worker process (runs there)."""

    def __init__(
        self, sim: SimParams, tracks: Sequence[Track], n_cars: int, aids: DriverAidsParams | None = None
    ) -> None:
        from s3.sim.factory import make_sim

        self.cars = [make_sim(sim, aids) for _ in range(n_cars)]
        self.tracks = dict(enumerate(tracks))
        self.grid_res = sim.mujoco.friction_grid_res
        self.grids: dict[int, Any] = {}
        self.on = [-1] * n_cars  # the track whose friction each car holds
        self.last = np.zeros((n_cars, len(STATE_COLUMNS)))

    def set_tracks(self, changed: dict[int, Track]) -> None:
        for k, track in changed.items():
            self.tracks[k] = track
            self.grids.pop(k, None)
        self.on = [-1 if k in changed else k for k in self.on]

    def _place(self, i: int, k: int) -> Track | None:
        """Give car i track k's friction; returns the track for sims that rasterise it themselves."""
        car = self.cars[i]
        if not hasattr(car, "set_friction_grid"):
            return self.tracks[k]
        if self.on[i] != k:
            if k not in self.grids:
                self.grids[k] = self.tracks[k].friction_grid(self.grid_res)
            car.set_friction_grid(self.grids[k])
            self.on[i] = k
        return None

    def reset(self, ids: np.ndarray, track: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Cars ids[j] onto track[j] at start[j] = (x, y, yaw, speed); their states [M, 7]."""
        for j, i in enumerate(ids):
            where = self._place(int(i), int(track[j]))
            x, y, yaw, speed = (float(v) for v in start[j])
            self.last[i] = _row(self.cars[i].reset(where, x, y, yaw, speed))
        return self.last[ids].copy()

    def step(self, cmd: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One control period of the active cars: states [n, 7] and simulator failures [n]."""
        failed = np.zeros(len(self.cars), dtype=bool)
        for i in np.flatnonzero(active):
            try:
                self.last[i] = _row(self.cars[i].step(Control(*cmd[i])))
            except SimulatorError:
                failed[i] = True
        return self.last.copy(), failed

    def close(self) -> None:
        for car in self.cars:
            car.close()


def _row(st: Any) -> tuple[float, ...]:
    return (st.x, st.y, st.yaw, st.vx, st.vy, st.yaw_rate, st.steer)


def _worker_main(
    conn: Connection, sim: SimParams, tracks: Sequence[Track], n_cars: int, aids: DriverAidsParams | None, parent: int
) -> None:
    """Serve (method, args) requests until "close" or until process `parent` (the env's) goes away."""
    exit_with_parent(parent)  # the executor's orphan watch (s3.workers): a killed trainer leaves no simulators
    worker = None
    try:
        worker = _SimWorker(sim, tracks, n_cars, aids)
        conn.send(("ok", None))
        while True:
            method, args = conn.recv()
            if method == "close":
                break
            conn.send(("ok", getattr(worker, method)(*args)))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        if worker is not None:
            worker.close()
        conn.close()


# ---------------------------------------------------------------------------- main process
def _context() -> Any:
    """A forkserver context preloading this module (one torch import for all workers), else spawn."""
    return forkserver_context(SOURCE_WORKER_PRELOAD)


def prestart() -> None:
    """Start the forkserver now, so that its one-time import overlaps the caller's own setup."""
    start_forkserver(_context())


def resolve_workers(workers: int, num_envs: int) -> int:
    """0 -> one per core; never more workers than cars."""
    return max(1, min(int(workers) or (os.cpu_count() or 1), int(num_envs)))


class _Workers:
    """W simulator processes; car j lives in worker w for bounds[w] <= j < bounds[w + 1]."""

    def __init__(
        self,
        sim: SimParams,
        tracks: Sequence[Track],
        counts: Sequence[int],
        timeout_s: float,
        aids: DriverAidsParams | None = None,
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        ctx = _context()
        try:
            for w, n in enumerate(counts):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_worker_main,
                    args=(child, sim, list(tracks), int(n), aids, os.getpid()),
                    name=f"s3-source-{w}",
                    daemon=True,
                )
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
            for w in range(len(counts)):
                self._recv(w)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.procs)

    def _recv(self, w: int) -> Any:
        proc, conn = self.procs[w], self.conns[w]
        ready = wait([conn, proc.sentinel], timeout=self.timeout_s)
        if not ready:
            raise SourceWorkerError(f"source-sim worker {w} (pid {proc.pid}) sent nothing for {self.timeout_s:.0f} s")
        try:
            status, value = conn.recv()
        except (EOFError, OSError):
            proc.join(1.0)
            raise SourceWorkerError(
                f"source-sim worker {w} (pid {proc.pid}) died (exit code {proc.exitcode})"
            ) from None
        if status == "error":
            raise SourceWorkerError(f"source-sim worker {w} (pid {proc.pid}) failed:\n{value}")
        return value

    def call(self, requests: dict[int, tuple[str, tuple[Any, ...]]]) -> dict[int, Any]:
        """Send each worker its request, then collect the answers (the workers run in parallel)."""
        for w, req in requests.items():
            try:
                self.conns[w].send(req)
            except (BrokenPipeError, OSError):
                raise SourceWorkerError(
                    f"source-sim worker {w} (pid {self.procs[w].pid}) died (exit code {self.procs[w].exitcode})"
                ) from None
        return {w: self._recv(w) for w in requests}

    def owner(self, ids: np.ndarray) -> np.ndarray:
        """The worker of each global car id."""
        return np.searchsorted(self.bounds, ids, side="right") - 1

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("close", ()))
            except OSError:
                pass
        for proc in self.procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(1.0)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []


ROOM_WAIT_S = 10.0  # Ray's view of free resources lags a kill by a moment: how long to let it catch up


class _RayWorkers(_Workers):
    """The same W simulator workers as Ray actors (`compute.backend: ray`, each holding
    `compute.resources.source_env`): a `_SimWorker` per actor, the same requests, the same errors."""

    def __init__(
        self,
        sim: SimParams,
        tracks: Sequence[Track],
        counts: Sequence[int],
        timeout_s: float,
        aids: DriverAidsParams | None,
        compute: ComputeParams,
        holds_cpus: bool = True,
    ) -> None:
        from s3.compute.ray_executor import connect

        self.ray = connect(compute)
        self.timeout_s = float(timeout_s)
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        r = compute.resources.source_env
        held = {"num_cpus": r.num_cpus, "num_gpus": r.num_gpus} if holds_cpus else {"num_cpus": 0, "num_gpus": 0}
        actor = self.ray.remote(**held, max_restarts=0)(_SimWorker)
        self.held_cpus = held["num_cpus"] * len(counts)
        self.actors = [actor.remote(sim, list(tracks), int(n), aids) for n in counts]
        try:
            self.call({w: ("set_tracks", ({},)) for w in range(len(counts))})  # every actor built
        except BaseException:
            self.close()
            raise

    @staticmethod
    def fit(compute: ComputeParams, wanted: int) -> int:
        """How many actors to start: `wanted`, or as many as the cluster's nodes have room for now
        (at least 1; with none, Ray's view is given ROOM_WAIT_S to catch up before a clear error)."""
        from s3.compute.ray_executor import connect, fits, per_node

        ray, r = connect(compute), compute.resources.source_env
        want = {"CPU": r.num_cpus, "GPU": r.num_gpus}
        t0 = time.monotonic()
        while (
            room := sum(fits(n, want) for n in per_node(ray, free=True))
        ) < 1 and time.monotonic() - t0 < ROOM_WAIT_S:
            time.sleep(0.25)  # actors just killed free their CPUs a moment later
        if room < 1:
            free = ray.available_resources()
            raise SourceWorkerError(
                f"compute.resources.source_env: a source-sim actor asks {r.num_cpus:g} CPUs and {r.num_gpus:g} GPUs on one node; the Ray cluster has "
                f"{free.get('CPU', 0.0):g} CPUs and {free.get('GPU', 0.0):g} GPUs free now (other jobs or actors hold the rest): lower them, or add nodes"
            )
        if room < wanted:
            print(
                f"source env: {room} Ray actors, not {wanted}: the cluster has room for {room} now",
                file=sys.stderr,
                flush=True,
            )
        return min(wanted, room)

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, requests: dict[int, tuple[str, tuple[Any, ...]]]) -> dict[int, Any]:
        ex = self.ray.exceptions
        refs = {w: getattr(self.actors[w], method).remote(*args) for w, (method, args) in requests.items()}
        out = {}
        for w, ref in refs.items():
            try:
                out[w] = self.ray.get(ref, timeout=self.timeout_s)
            except ex.GetTimeoutError:
                raise SourceWorkerError(f"source-sim actor {w} sent nothing for {self.timeout_s:.0f} s") from None
            except ex.RayActorError as e:
                raise SourceWorkerError(f"source-sim actor {w} died ({type(e).__name__})") from None
            except ex.RayTaskError as e:
                raise SourceWorkerError(f"source-sim actor {w} failed:\n{e}") from None
        return out

    def close(self) -> None:
        """Kill the actors; return once Ray counts their CPUs free (at most ROOM_WAIT_S), so that
        an env made next finds the room."""
        actors, self.actors = getattr(self, "actors", []), []
        if not actors:
            return
        before = self.ray.available_resources().get("CPU", 0.0)
        for a in actors:
            self.ray.kill(a)
        t0 = time.monotonic()
        while (
            self.ray.available_resources().get("CPU", 0.0) < before + self.held_cpus - 1e-6
            and time.monotonic() - t0 < ROOM_WAIT_S
        ):
            time.sleep(0.1)


class SourceVecEnv(TaskVecEnv):
    """rsl_rl VecEnv over N source-simulator cars in worker processes (see the module docstring)."""

    def __init__(
        self,
        tracks: Sequence[Track],
        sim: SimParams,
        params: EnvParams | None = None,
        num_envs: int = 32,
        workers: int = 0,
        seed: int = 0,
        auto_reset: bool = True,
        timeout_s: float = 300.0,
        aids: DriverAidsParams | None = None,
        compute: ComputeParams | None = None,
        holds_cpus: bool = True,
    ) -> None:
        if sim.backend != "mujoco":
            raise ValueError(
                f"SourceVecEnv steps many cars in parallel: it needs sim.backend 'mujoco', not {sim.backend!r} (one BeamNG instance is one world)"
            )
        self.params = params = params or EnvParams()
        self.device = torch.device("cpu")  # the simulators live on the CPU; rsl_rl moves obs to its device
        self.num_envs = int(num_envs)
        self.dt = float(sim.control_dt)
        self.max_episode_length = max(1, int(round(params.episode_seconds / self.dt)))
        self.auto_reset = auto_reset
        self.cfg: dict[str, Any] = {
            "env": params.model_dump(mode="json"),
            "family": DIRECT,
            "dt": self.dt,
            "sim": sim.backend,
        }
        self.generator = torch.Generator()
        self.generator.manual_seed(int(seed))
        n = self.num_envs
        with torch.inference_mode():
            self.observer = Observer.for_params(list(tracks), params, n)
            self.rules = Rules(n, self.dt, EndRules.training(params), params.reward, self.max_episode_length)
            self.action_prev = torch.zeros(n, 2)
            self.reason = torch.zeros(n, dtype=torch.long)
            self.ep_return = torch.zeros(n)
        self.frame = self.observer.frame
        self.layout = self.observer.layout
        self.num_obs = self.layout.dim
        self.obs = torch.zeros(n, self.num_obs)
        self.sim_errors = 0
        self.car_steps = 0
        self.episode_count = 0
        self._stats = _Stats()
        w = resolve_workers(workers, n)
        if compute is not None and compute.backend == "ray":
            w = _RayWorkers.fit(compute, w) if holds_cpus else w
            counts = [len(c) for c in np.array_split(np.arange(n), w)]
            self.workers: _Workers = _RayWorkers(sim, tracks, counts, timeout_s, aids, compute, holds_cpus)
        else:
            self.workers = _Workers(
                sim, tracks, counts=[len(c) for c in np.array_split(np.arange(n), w)], timeout_s=timeout_s, aids=aids
            )
        try:
            self.reset()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        if getattr(self, "workers", None) is not None:
            self.workers.close()
            self.workers = None  # type: ignore[assignment]

    def __enter__(self) -> SourceVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ VecEnv
    @torch.inference_mode()
    def reset(self) -> TensorDict:
        """Every car to a random start (DistilledEnv's distribution); returns the observations."""
        self._restart(
            torch.arange(self.num_envs), sample_starts(self.frame.tracks, self.num_envs, self.params, self.generator)
        )
        self.obs = self.observer.compute()
        return self.get_observations()

    @torch.inference_mode()
    def reset_to(
        self,
        track_idx: Tensor,
        s: Tensor,
        d: Tensor | float = 0.0,
        heading_offset: Tensor | float = 0.0,
        speed: Tensor | float = 0.0,
    ) -> TensorDict:
        """Deterministic starts for every car (validation); returns the observations."""
        n = self.num_envs
        full = lambda x: torch.as_tensor(x, dtype=torch.float32).expand(n).clone()
        track = torch.as_tensor(track_idx, dtype=torch.long).expand(n).clone()
        self._restart(torch.arange(n), Starts(track, full(s), full(d), full(heading_offset), full(speed)))
        self.obs = self.observer.compute()
        return self.get_observations()

    @torch.inference_mode()
    def set_tracks(self, tracks: Sequence[Track], changed: Sequence[int] | None = None) -> Tensor:
        """New pool (same count when `changed` lists the replaced indices); returns the cars restarted."""
        tracks = list(tracks)
        old = len(self.frame.tracks)
        tb = self.frame.load(tracks)
        every = changed is None or len(tracks) != old
        changed = range(len(tracks)) if every else list(changed)
        self.workers.call({w: ("set_tracks", ({k: tracks[k] for k in changed},)) for w in range(len(self.workers))})
        mask = (
            torch.ones(self.num_envs, dtype=torch.bool)
            if every
            else torch.isin(self.frame.track_idx, torch.as_tensor(list(changed), dtype=torch.long))
        )
        ids = mask.nonzero(as_tuple=False).squeeze(1)
        if ids.numel():
            self._restart(ids, sample_starts(tb, ids.numel(), self.params, self.generator))
        self.obs = self.observer.compute()
        return mask

    @torch.inference_mode()
    def step(self, actions: Tensor, active: Tensor | None = None) -> tuple[TensorDict, Tensor, Tensor, dict[str, Any]]:
        """One control period; `active` [N] (default all) limits which cars are simulated at all."""
        pol, cmd = split_action(actions.detach().to("cpu", torch.float32), self.obs[:, 0], self.params.steer_full_speed)
        act = torch.ones(self.num_envs, dtype=torch.bool) if active is None else active.to("cpu", torch.bool)
        state, ds, invalid = self._advance(cmd, act)
        out = self.rules.judge(self.frame, ds, pol, self.action_prev, invalid, act)
        self.action_prev = torch.where(act[:, None], pol, self.action_prev)
        self.reason, dones = out.reason, out.done
        self.ep_return += out.reward
        self.sim_errors += int(invalid.sum())
        self.car_steps += int(act.sum())
        self.episode_count += int(dones.sum())
        progress = self.frame.progress
        self._stats.add(state[:, 0], act, dones, self.ep_return, self.episode_length_buf, progress)
        log = {
            "Env/model_invalid": invalid.float().sum(),
            "Env/off_track_rate": out.off.float().mean(),
            "Env/speed": state[act, 0].mean() if act.any() else torch.zeros(()),
            "Env/progress_per_step": ds.mean(),
            **{f"reward/{k}": out.terms[k].mean() for k in TERMS},
        }
        extras: dict[str, Any] = {
            "time_outs": out.time_out,
            "log": log,
            "reason": out.reason,
            "progress": progress.clone(),
        }
        if self.auto_reset:
            ids = dones.nonzero(as_tuple=False).squeeze(1)
            if ids.numel():
                log["Env/episode_progress_m"] = progress[ids].mean()
                self._restart(ids, sample_starts(self.frame.tracks, ids.numel(), self.params, self.generator))
        self.obs = self.observer.compute()
        return self.get_observations(), out.reward, dones, extras

    def _advance(self, cmd: Tensor, act: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Simulate the active cars and feed the observer: (state [N, 4], progress ds [N], invalid [N]).

        A failed or absurd simulator state is never propagated (the car keeps its last one, as
        DistilledEnv does with an invalid model output); inactive cars stand still and keep their
        observation history.
        """
        p, ob = self.params, self.observer
        prev_pose, prev_state, hist0 = self.frame.pose.clone(), ob.hist[:, -1, :4].clone(), ob.hist.clone()
        states, failed = self._simulate(cmd, act)
        absurd = (torch.hypot(states[:, 3], states[:, 4]) > p.max_speed) | (states[:, 5].abs() > p.max_yaw_rate)
        invalid = act & (failed | ~torch.isfinite(states).all(dim=1) | absurd)
        keep = invalid | ~act
        pose = torch.where(keep[:, None], prev_pose, states[:, :3])
        state = torch.where(keep[:, None], prev_state, states[:, 3:])
        ds = ob.observe(pose, state, cmd, frozen=keep)
        ob.hist.copy_(torch.where(act[:, None, None], ob.hist, hist0))  # a view: write in place
        return state, ds, invalid

    # ------------------------------------------------------------------ internals
    def _simulate(self, cmd: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        """Step every worker's cars in parallel; states [N, 7] (float32) and failures [N]."""
        c, a, b = cmd.numpy().astype(np.float64), active.numpy(), self.workers.bounds
        out = self.workers.call(
            {w: ("step", (c[b[w] : b[w + 1]], a[b[w] : b[w + 1]])) for w in range(len(self.workers))}
        )
        states = np.concatenate([out[w][0] for w in range(len(self.workers))])
        failed = np.concatenate([out[w][1] for w in range(len(self.workers))])
        return torch.from_numpy(states).float(), torch.from_numpy(failed)

    def _restart(self, ids: Tensor, st: Starts) -> None:
        """Reset cars `ids` at starts `st` in their workers and start their episodes (history:
        the state the simulator reports, beside the command (0, 0, 0))."""
        pose, _ = start_pose(self.frame.tracks, st)
        start = torch.cat([pose, st.speed[:, None]], dim=1)
        ids_np, track_np, start_np = ids.numpy(), st.track.numpy(), start.double().numpy()
        owner, b = self.workers.owner(ids_np), self.workers.bounds
        sel = {int(w): owner == w for w in np.unique(owner)}
        out = self.workers.call({w: ("reset", (ids_np[m] - b[w], track_np[m], start_np[m])) for w, m in sel.items()})
        states = np.zeros((len(ids_np), len(STATE_COLUMNS)))
        for w, m in sel.items():
            states[m] = out[w]
        sim_state = torch.from_numpy(states).float()
        self.observer.start(ids, st.track, sim_state[:, :3], sim_state[:, 3:], torch.zeros(len(ids_np), 3))
        self.rules.restart(ids)
        self.action_prev[ids] = 0.0
        self.ep_return[ids] = 0.0

    # ------------------------------------------------------------------ reporting
    def pop_stats(self) -> dict[str, float | int | None]:
        """Episodes finished and mean speed since the last call (the direct learning curve)."""
        out = self._stats.summary()
        self._stats = _Stats()
        return out


class _Stats:
    """Running sums for the learning curve between two `pop_stats` calls."""

    def __init__(self) -> None:
        self.speed_sum, self.steps = 0.0, 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.progress: list[float] = []

    def add(self, vx: Tensor, active: Tensor, dones: Tensor, ret: Tensor, length: Tensor, progress: Tensor) -> None:
        self.speed_sum += float(vx[active].sum())
        self.steps += int(active.sum())
        self.returns += ret[dones].tolist()
        self.lengths += length[dones].tolist()
        self.progress += progress[dones].tolist()

    def summary(self) -> dict[str, float | int | None]:
        mean = lambda v: float(np.mean(v)) if v else None
        return {
            "episodes": len(self.returns),
            "mean_return": mean(self.returns),
            "mean_episode_steps": mean(self.lengths),
            "mean_episode_progress_m": mean(self.progress),
            "mean_speed_m_s": self.speed_sum / self.steps if self.steps else None,
        }
