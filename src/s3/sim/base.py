"""The source-simulator interface that the embedded MuJoCo car and the BeamNG adapter both implement.

Conventions (SI units throughout):
- world frame: x east, y north, z up; yaw is counter-clockwise from +x, wrapped to (-pi, pi].
- body frame: x forward, y left; vx, vy in m/s, yaw_rate in rad/s (counter-clockwise positive).
- steer: measured road-wheel steering angle in rad (mean of the two front wheels), left positive.
- wheel_speed: wheel angular speed times rolling radius, m/s, order (fl, fr, rl, rr).
- friction: peak tyre-road friction coefficient under each wheel, order (fl, fr, rl, rr).
- control: steering in [-1, 1] (left positive), throttle in [0, 1], brake in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from s3.tracks.track import Track

WHEELS = ("fl", "fr", "rl", "rr")


@dataclass(frozen=True)
class Control:
    """One control command, clipped to its valid range on construction."""

    steering: float
    throttle: float
    brake: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "steering", float(np.clip(self.steering, -1.0, 1.0)))
        object.__setattr__(self, "throttle", float(np.clip(self.throttle, 0.0, 1.0)))
        object.__setattr__(self, "brake", float(np.clip(self.brake, 0.0, 1.0)))


@dataclass(frozen=True)
class VehicleState:
    """What a source simulator reports after each control period."""

    time: float
    x: float
    y: float
    yaw: float
    vx: float
    vy: float
    yaw_rate: float
    steer: float
    wheel_speed: np.ndarray = field(default_factory=lambda: np.zeros(4))
    friction: np.ndarray = field(default_factory=lambda: np.ones(4))

    def is_finite(self) -> bool:
        """False when any field is NaN/inf: such a state must never reach a dataset."""
        scalars = np.array([self.time, self.x, self.y, self.yaw, self.vx, self.vy, self.yaw_rate, self.steer])
        return bool(
            np.isfinite(scalars).all() and np.isfinite(self.wheel_speed).all() and np.isfinite(self.friction).all()
        )


class SimulatorError(RuntimeError):
    """The simulator failed (exploded, lost its connection); the episode cannot continue."""


class SimulatorLost(SimulatorError):
    """The connection to the simulator failed (refused, closed, timed out, garbled).

    Unlike a physics failure, which repeats deterministically, this may clear up with a fresh
    connection: the job that met it is retried (s3.compute.retry) before it is given up as lost.
    """


class SimulatorUnreachable(SimulatorLost):
    """No simulator could be reached at all (nobody listening): once retries are spent, every
    other job would only wait out its own, so the stage stops."""


class SimulatorRejected(SimulatorError):
    """The simulator answered and said no (an error reply to a request): it would say no again,
    so it is never retried as if the connection were lost."""


@runtime_checkable
class SourceSim(Protocol):
    """A slow, high-fidelity, non-batched vehicle simulator."""

    name: str
    version: str
    control_dt: float
    wheelbase: float  # m, for path-following drivers
    max_steer: float  # rad, road-wheel angle at steering command 1

    def reset(self, track: Track, x: float, y: float, yaw: float, speed: float) -> VehicleState:
        """Place the car on `track` at a pose with forward speed `speed` (m/s); return its state."""
        ...

    def step(self, control: Control) -> VehicleState:
        """Apply `control` for one control period and return the state at its end."""
        ...

    def close(self) -> None:
        """Release the simulator's resources."""
        ...
