"""Make the configured source simulator; nothing above this knows which one it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from s3.sim.base import SourceSim

if TYPE_CHECKING:
    from s3.config import SimParams
    from s3.sim.aids import DriverAidsParams


def make_sim(params: SimParams, aids: DriverAidsParams | None = None) -> SourceSim:
    """A fresh simulator for `params.backend`, behind traction control / ABS where `aids` asks."""
    sim = _bare_sim(params)
    if aids is not None and aids.enabled:
        from s3.sim.aids import WithDriverAids

        return WithDriverAids(sim, aids)
    return sim


def _bare_sim(params: SimParams) -> SourceSim:
    if params.backend == "mujoco":
        from s3.sim.mujoco_car import MujocoCar

        return MujocoCar(params.mujoco, control_dt=params.control_dt)
    if params.backend == "beamng":
        from s3.sim.beamng import BeamngSim  # imports beamngpy (~2 s): only for this backend

        return BeamngSim(params.beamng, control_dt=params.control_dt)
    raise ValueError(f"sim.backend: unknown backend {params.backend!r}")
