"""The source simulators s3 drives, each described once: `sim.backend` -> `SimBackend`.

A descriptor says how to make one bare simulator (`make`), what it can do, what one instance of it
is as a compute resource, and which version produced its data. Stage code asks the descriptor
(`sim_backend(params.sim)`) and never compares `sim.backend` with a name
(tests/test_sim_backends.py checks `src/` for such comparisons outside `s3.sim`).

Capabilities:
- `real_time`: one instance steps one car at about real time (True), or many times faster (False).
- `side_by_side`: many cars of it step side by side in worker processes (s3.compute.sim_pool), so
  PPO inside it (`direct`), the time-to-quality replay of every checkpoint and the seed choice in
  the source are offered; `not_side_by_side` is the reason the stages print and record when not.
- `driver_aids`: s3's traction control / ABS (s3.sim.aids) wrap its car; otherwise the vehicle
  brings its own.
- Instances (`instances(sim)`; `external_instances`): the external simulators a stage's jobs spread
  over, one job at a time each (so one worker each), addressed `host:port` (on Ray, one custom resource each:
  s3.compute.ray_cluster.instance_resource); none for an embedded simulator, of which a worker
  makes as many as it needs. A job finds its instance in INSTANCE_ENV and its lease in LEASE_ENV
  (set by s3.compute.executor, read by s3.sim.factory).

Importing this module imports no simulator: each one's module is imported when it is made.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from s3.sim.base import SourceSim
    from s3.sim.params import SimParams

INSTANCE_ENV = "S3_SIM_INSTANCE"  # a job's simulator instance (`SimBackend.instances`), set by the executor
LEASE_ENV = "S3_SIM_LEASE"  # "<executor token>:<jobs that instance was handed before>" (s3.sim.factory.worker_sim)


@dataclass(frozen=True)
class SimBackend:
    """One source simulator: how to make it and what it can do (module docstring)."""

    name: str
    module: str  # the module that holds its SourceSim: what a worker process preloads
    simulator: str  # the SourceSim class in `module`
    real_time: bool
    side_by_side: bool
    not_side_by_side: str  # why `side_by_side` is False ("" when it is True)
    driver_aids: bool
    external_instances: bool  # its instances run outside s3: one worker (one job at a time) per instance
    instance: str  # what one instance is, in words
    make: Callable[[SimParams], SourceSim]  # a fresh bare simulator (no driver aids: s3.sim.factory.make_sim adds them)
    instances: Callable[[SimParams], tuple[str, ...]]  # the instances a stage's jobs spread over (one worker each)
    version: Callable[[], str]  # client library / engine version, the provenance of its data (collect's manifest)
    check_control_dt: Callable[[SimParams], None]  # ValueError unless sim.control_dt is whole physics steps


def _simulator_class(name: str) -> type[SourceSim]:
    """The SourceSim class of backend `name`, imported now (its `module`'s `simulator`): the
    simulators import their params, which ask this descriptor, so the link back is by name."""
    backend = BACKENDS[name]
    return getattr(importlib.import_module(backend.module), backend.simulator)


# ---------------------------------------------------------------------------- mujoco
def _make_mujoco(sim: SimParams) -> SourceSim:
    return _simulator_class("mujoco")(sim.mujoco, control_dt=sim.control_dt)


def _mujoco_version() -> str:
    import mujoco

    return f"mujoco {mujoco.__version__}"


def _mujoco_control_dt(sim: SimParams) -> None:
    n = sim.control_dt / sim.mujoco.timestep
    if abs(n - round(n)) > 1e-6:
        raise ValueError(
            f"control_dt {sim.control_dt} s must be a whole number of mujoco.timestep {sim.mujoco.timestep} s"
        )


# ---------------------------------------------------------------------------- beamng
def _make_beamng(sim: SimParams) -> SourceSim:
    address = os.environ.get(INSTANCE_ENV)  # the instance the executor gave this job, if any
    beamng = sim.beamng.at(address) if address else sim.beamng
    return _simulator_class("beamng")(beamng, control_dt=sim.control_dt)  # imports beamngpy (~2 s): only here


def _beamng_version() -> str:
    from s3.sim.beamng_wire import sim_version

    return sim_version()


def _beamng_control_dt(sim: SimParams) -> None:
    n = sim.control_dt * sim.beamng.steps_per_second
    if n < 1 or abs(n - round(n)) > 1e-6:
        raise ValueError(
            f"control_dt {sim.control_dt} s must be a whole number of BeamNG steps "
            f"(1/beamng.steps_per_second = {1 / sim.beamng.steps_per_second:g} s)"
        )


BACKENDS: dict[str, SimBackend] = {
    b.name: b
    for b in (
        SimBackend(
            name="mujoco",
            module="s3.sim.mujoco_car",
            simulator="MujocoCar",
            real_time=False,
            side_by_side=True,
            not_side_by_side="",
            driver_aids=True,
            external_instances=False,
            instance="a car in a worker process (embedded: any number per process, no external instance)",
            make=_make_mujoco,
            instances=lambda sim: (),
            version=_mujoco_version,
            check_control_dt=_mujoco_control_dt,
        ),
        SimBackend(
            name="beamng",
            module="s3.sim.beamng",
            simulator="BeamngSim",
            real_time=True,
            side_by_side=False,
            not_side_by_side="one beamng instance steps one car at about real time",
            driver_aids=False,  # its vehicles carry their own ESC / ABS (the jbeam part config)
            external_instances=True,
            instance="one BeamNG.tech at host:port (sim.beamng.instances), one job at a time; on Ray a custom resource",
            make=_make_beamng,
            instances=lambda sim: sim.beamng.addresses(),
            version=_beamng_version,
            check_control_dt=_beamng_control_dt,
        ),
    )
}


def sim_backend(sim: SimParams | str) -> SimBackend:
    """The descriptor of `sim.backend` (a SimParams or the name itself); ValueError naming
    `sim.backend` and the known names for any other."""
    name = sim if isinstance(sim, str) else sim.backend
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"sim.backend: unknown backend {name!r} (known: {', '.join(sorted(BACKENDS))})") from None


def side_by_side_names() -> str:
    """The backends whose cars step side by side, as stage messages name them ("'mujoco'")."""
    return " or ".join(repr(b.name) for b in BACKENDS.values() if b.side_by_side)
