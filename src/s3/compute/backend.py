"""The executor `compute.backend` names: the local process pool or Ray tasks (s3.compute.ray_executor,
imported only for the ray backend)."""

from __future__ import annotations

from collections.abc import Sequence

from s3.compute.executor import Executor, LocalExecutor
from s3.compute.params import ComputeParams, JobKind


def executor_for(
    compute: ComputeParams | None,
    kind: JobKind,
    workers: int = 0,
    preload: Sequence[str] = (),
    label: str = "s3",
    instances: Sequence[str] = (),
    progress: bool = False,
) -> Executor:
    """The executor `compute.backend` names, for jobs of `kind` (their Ray resources):
    `workers` and `preload` concern the local pool only (Ray's width is its cluster's resources);
    `progress`: Ray shows jobs done / total across the cluster (a stage with a bar of its own: False)."""
    compute = compute or ComputeParams()
    if compute.backend == "ray":
        from s3.compute.ray_executor import RayExecutor

        return RayExecutor(compute, kind, label=label, instances=instances, progress=progress)
    return LocalExecutor(workers, preload, compute.retry, label, instances)
