"""The pool of source simulators as Ray actors (`compute.backend: ray`): s3.compute.sim_pool's
`SimPool` with a `SimWorker` per actor, each holding `compute.resources.source_env`.

Actors are placed wherever the cluster has room. An actor holds its CPUs for life, so a pool
starts at most as many as the cluster has room for now (`RaySimPool.fit`), and stops with an
error naming `compute.resources.source_env` when it has none. A pool built with
`holds_cpus=False` (direct's validation env, which steps only while the training env waits) has
actors that hold no CPUs. The requests, answers and errors (`SourceWorkerError`) are the local
pool's. Ray is imported only here, through s3.compute.ray_cluster.connect.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from s3.compute.sim_pool import SimPool, SimWorker, SourceWorkerError

if TYPE_CHECKING:
    from s3.compute.params import ComputeParams
    from s3.sim.params import DriverAidsParams, SimParams
    from s3.tracks.track import Track

ROOM_WAIT_S = 10.0  # Ray's view of free resources lags a kill by a moment: how long to let it catch up


class RaySimPool(SimPool):
    """The same W simulator workers as Ray actors (`compute.backend: ray`, each holding
    `compute.resources.source_env`): a `SimWorker` per actor, the same requests, the same errors."""

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
        from s3.compute.ray_cluster import connect

        self.ray = connect(compute)
        self.timeout_s = float(timeout_s)
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        r = compute.resources.source_env
        held = {"num_cpus": r.num_cpus, "num_gpus": r.num_gpus} if holds_cpus else {"num_cpus": 0, "num_gpus": 0}
        actor = self.ray.remote(**held, max_restarts=0)(SimWorker)
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
        from s3.compute.ray_cluster import connect, fits, per_node

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
                f"compute.resources.source_env: a source-sim actor asks {r.num_cpus:g} CPUs and {r.num_gpus:g} GPUs "
                f"on one node; the Ray cluster has {free.get('CPU', 0.0):g} CPUs and {free.get('GPU', 0.0):g} GPUs "
                "free now (other jobs or actors hold the rest): lower them, or add nodes"
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
