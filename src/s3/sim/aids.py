"""Traction control and ABS: the driver aids a road car (and BeamNG.tech's cars) comes with.

They act on the wheel speeds, which only the source simulator knows: a learned dynamics model's
state is (vx, vy, yaw rate, steer), so a policy trained inside one cannot see wheel spin. On ice
the bare source car spins under as little as 20 % throttle (the rear wheels spin up and the rear
axle loses its side grip); the distilled models slide but do not spin. With the aids on, the car
the policy meets in the source behaves more like the one it learned in.

`SlipControl` is the aid itself (the `pid` baseline has always driven with it); `WithDriverAids`
wraps the source simulator so that every command passes through it, as a car's own control unit
would do, whoever drives. `sim.driver_aids` (on by default) is the one car of every stage
(collection, probes, direct, evaluation) on the embedded simulator; a BeamNG vehicle brings its
own (`SimParams.aids()`, docs/decisions/driver-aids.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from s3.sim.base import Control, SourceSim, VehicleState
from s3.sim.params import DriverAidsParams

if TYPE_CHECKING:
    from s3.tracks.track import Track


CUT, RECOVER, FLOOR = 0.6, 0.15, 0.1  # per control period: scale on slip, recovery step, lowest scale


class SlipControl:
    """Per-period throttle and brake scales: cut by CUT while slipping, recover by RECOVER after."""

    def __init__(self, params: DriverAidsParams) -> None:
        self.p = params
        self.reset()

    def reset(self) -> None:
        self.tc, self.abs = 1.0, 1.0

    def __call__(self, state: VehicleState, throttle: float, brake: float) -> tuple[float, float]:
        """(throttle, brake) to apply, given the state the previous period ended in."""
        ws = np.asarray(state.wheel_speed, dtype=float)
        if ws.shape != (4,) or not ws.any() or state.vx < self.p.min_speed:
            return throttle, brake
        slip = (ws - state.vx) / max(abs(state.vx), 1.0)  # fl fr rl rr, + spinning, - locking
        if self.p.traction_control:
            spinning = float(slip[2:].max()) > self.p.slip_limit
            self.tc = max(FLOOR, self.tc * CUT) if spinning else min(1.0, self.tc + RECOVER)
            throttle *= self.tc
        if self.p.abs:
            locking = float(slip.min()) < -self.p.slip_limit
            self.abs = max(FLOOR, self.abs * CUT) if locking else min(1.0, self.abs + RECOVER)
            brake *= self.abs
        return throttle, brake


class WithDriverAids:
    """A SourceSim whose commands pass through `SlipControl` (everything else is the wrapped sim's)."""

    def __init__(self, sim: SourceSim, params: DriverAidsParams) -> None:
        self.sim = sim
        self.aids = SlipControl(params)
        self._state: VehicleState | None = None

    def __getattr__(self, name: str) -> Any:  # wheelbase, max_steer, control_dt, version, friction_grid, ...
        return getattr(self.sim, name)

    def reset(self, track: Track, x: float, y: float, yaw: float, speed: float) -> VehicleState:
        self.aids.reset()
        self._state = self.sim.reset(track, x, y, yaw, speed)
        return self._state

    def step(self, control: Control) -> VehicleState:
        if self._state is not None:
            throttle, brake = self.aids(self._state, control.throttle, control.brake)
            control = Control(control.steering, throttle, brake)
        self._state = self.sim.step(control)
        return self._state

    def close(self) -> None:
        self.sim.close()
