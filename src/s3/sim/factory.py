"""Make the configured source simulator (its descriptor: s3.sim.backends), and keep one per worker process for jobs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from s3.sim.backends import INSTANCE_ENV, LEASE_ENV, sim_backend
from s3.sim.base import SourceSim

if TYPE_CHECKING:
    from s3.sim.params import DriverAidsParams, SimParams


def make_sim(params: SimParams, aids: DriverAidsParams | None = None) -> SourceSim:
    """A fresh simulator for `params.backend`, behind traction control / ABS where `aids` asks
    (default: `params.aids()`, the one car every stage drives: `sim.driver_aids` on the embedded
    car, none on BeamNG, whose vehicles bring their own; `DriverAidsParams()` = bare)."""
    sim = sim_backend(params).make(params)
    aids = params.aids() if aids is None else aids
    if aids is not None and aids.enabled:
        from s3.sim.aids import WithDriverAids

        return WithDriverAids(sim, aids)
    return sim


def instances(params: SimParams) -> tuple[str, ...]:
    """The simulator instances a stage's jobs spread over (one worker each): BeamNG's addresses;
    none for the embedded simulator (any number of workers)."""
    return sim_backend(params).instances(params)


_CACHED: tuple[str, SourceSim] | None = None
_LEASE: tuple[str, int] | None = None  # the lease of this process's last job on its cached simulator's instance


def worker_sim(params: SimParams, aids: DriverAidsParams | None = None) -> SourceSim:
    """This process's simulator for jobs (collection shards, evaluation runs): made once and
    reused, remade when the params or the job's instance change, after `drop_worker_sim`, and when
    another worker or another executor drove the instance since this process's last job (the lease
    is not the same executor's next one: that worker's scenario replaced ours). A simulator that cannot be made (nobody
    listening) is `SimulatorUnreachable`."""
    from s3.sim.base import SimulatorLost, SimulatorUnreachable

    global _CACHED, _LEASE
    key = (
        params.model_dump_json()
        + (aids.model_dump_json() if aids is not None else "")
        + os.environ.get(INSTANCE_ENV, "")
    )
    lease = _parse_lease(os.environ[LEASE_ENV]) if LEASE_ENV in os.environ else None
    stale = lease is not None and (_LEASE is None or lease != (_LEASE[0], _LEASE[1] + 1))
    if _CACHED is None or _CACHED[0] != key or stale:
        drop_worker_sim()
        try:
            _CACHED = (key, make_sim(params, aids))
        except SimulatorLost as e:
            raise SimulatorUnreachable(str(e)) from None
    _LEASE = lease
    return _CACHED[1]


def _parse_lease(lease: str) -> tuple[str, int]:
    """LEASE_ENV's '<executor token>:<count>' (set by s3.compute.executor)."""
    token, _, count = lease.rpartition(":")
    return token, int(count)


def drop_worker_sim() -> None:
    """Close and forget this process's simulator (after a lost connection, or at the end of a stage)."""
    global _CACHED
    cached, _CACHED = _CACHED, None
    if cached is not None:
        try:
            cached[1].close()
        except Exception:  # a lost connection may not close cleanly: it is gone either way
            pass
