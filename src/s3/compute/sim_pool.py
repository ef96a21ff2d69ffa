"""Pools of source simulators in local worker processes: W processes holding N cars between them.

`SimPool(sim, tracks, counts, timeout_s, aids, preload)` starts one process per entry of `counts`;
process w holds counts[w] simulators (`s3.sim.factory.make_sim`: the descriptor's simulator behind
the driver aids), a copy of the track pool and a friction raster per track (rasterised on first
use, ~0.15 s and 5-15 MB each), so keep the pool small. Car j lives in worker w for
bounds[w] <= j < bounds[w + 1]. `call({w: (method, args)})` sends each worker a request
(`SimWorker.reset`, `step`, `set_tracks`) and collects the answers: the workers run in parallel.

Processes start from a forkserver that has imported `preload` once (spawn where there is no
forkserver; s3.workers): no fork of a process that runs torch threads. A worker ends with the
process that made the pool (the orphan watch). A worker that dies, hangs past `timeout_s` or
reports an error raises `SourceWorkerError` naming it; `close()` stops them all.

`s3.compute.backend.open_sim_pool` chooses this pool or its Ray twin (s3.compute.ray_sim_pool, `compute.backend: ray`).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import numpy as np

from s3.sim.base import Control, SimulatorError
from s3.workers import exit_with_parent, forkserver_context
from s3.workers import prestart as start_forkserver

if TYPE_CHECKING:
    from s3.sim.params import DriverAidsParams, SimParams
    from s3.tracks.track import Track

STATE_COLUMNS = ("x", "y", "yaw", "vx", "vy", "yaw_rate", "steer")  # a car's state row, as the workers answer
PRELOAD = ("s3.compute.sim_pool", "s3.sim.factory", "s3.sim.mujoco_car")  # a worker's imports (the forkserver's)


class SourceWorkerError(RuntimeError):
    """A simulator worker process died, hung or failed; the message names it."""


# ---------------------------------------------------------------------------- worker process
class SimWorker:
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
        worker = SimWorker(sim, tracks, n_cars, aids)
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
def prestart(preload: Sequence[str] = PRELOAD) -> None:
    """Start the forkserver (importing `preload`) now, so that its one-time import overlaps the caller's own setup."""
    start_forkserver(forkserver_context(preload))


def resolve_workers(workers: int, num_envs: int) -> int:
    """0 -> one per core; never more workers than cars."""
    return max(1, min(int(workers) or (os.cpu_count() or 1), int(num_envs)))


class SimPool:
    """W simulator processes; car j lives in worker w for bounds[w] <= j < bounds[w + 1]."""

    def __init__(
        self,
        sim: SimParams,
        tracks: Sequence[Track],
        counts: Sequence[int],
        timeout_s: float,
        aids: DriverAidsParams | None = None,
        preload: Sequence[str] = PRELOAD,
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        ctx = forkserver_context(preload)
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
