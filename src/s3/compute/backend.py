"""What `compute.backend` picks: the executor of a stage's jobs (the local process pool or Ray tasks,
s3.compute.ray_executor) and the pool of source simulators (worker processes or Ray actors,
s3.compute.ray_sim_pool); the Ray modules are imported only for the ray backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from s3.compute.executor import Executor, LocalExecutor
from s3.compute.params import ComputeParams, JobKind
from s3.compute.sim_pool import PRELOAD, SimPool

if TYPE_CHECKING:
    from s3.sim.params import DriverAidsParams, SimParams
    from s3.tracks.track import Track


def executor_for(
    compute: ComputeParams | None,
    kind: JobKind,
    workers: int = 0,
    preload: Sequence[str] = (),
    label: str = "s3",
    instances: Sequence[str] = (),
    progress: bool | str = False,
) -> Executor:
    """The executor `compute.backend` names, for jobs of `kind` (their Ray resources):
    `workers` and `preload` concern the local pool only (Ray's width is its cluster's resources);
    `progress`: show the jobs finished / all, in this unit (a stage with a progress of its own: False)."""
    compute = compute or ComputeParams()
    if compute.backend == "ray":
        from s3.compute.ray_executor import RayExecutor

        return RayExecutor(compute, kind, label=label, instances=instances, progress=progress)
    return LocalExecutor(workers, preload, compute.retry, label, instances, progress)


def open_sim_pool(
    sim: SimParams,
    tracks: Sequence[Track],
    cars: int,
    workers: int,
    timeout_s: float,
    aids: DriverAidsParams | None = None,
    compute: ComputeParams | None = None,
    holds_cpus: bool = True,
    preload: Sequence[str] = PRELOAD,
) -> SimPool:
    """`cars` simulators split as evenly as can be over `workers` processes, or over Ray actors
    when `compute` names the `ray` backend (s3.compute.ray_sim_pool: at most as many as the cluster
    has room for now, unless `holds_cpus` is False: actors that hold no CPUs)."""
    split = lambda w: [len(c) for c in np.array_split(np.arange(int(cars)), w)]
    if compute is not None and compute.backend == "ray":
        from s3.compute.ray_sim_pool import RaySimPool

        w = RaySimPool.fit(compute, workers) if holds_cpus else workers
        return RaySimPool(sim, tracks, split(w), timeout_s, aids, compute, holds_cpus)
    return SimPool(sim, tracks, counts=split(workers), timeout_s=timeout_s, aids=aids, preload=preload)
