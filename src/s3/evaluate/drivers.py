"""Drivers that can be evaluated in a source simulator, and the `pid` baseline.

A driver sees what any controller on a real car would: the vehicle state from the simulator and
where the car sits on the known track map (`TrackState`, computed by the evaluation loop from the
state). It returns one `Control` per control period.

    class Driver(Protocol):
        def reset(self, track: Track, state: VehicleState) -> None
        def act(self, state: VehicleState, where: TrackState) -> Control

`PidDriver` is the classical baseline: pure-pursuit steering on the centerline plus a PID speed
loop tracking a curvature-limited speed profile with braking zones (optionally lowered on the
map's known friction patches, or planned for one assumed friction everywhere: `cautious`), with
wheel-slip control (traction control / ABS, s3.sim.aids) of its own unless the car it drives
already has it. It has no noise and no randomness. Its gains
were tuned on procedural tracks only (s3.evaluate.tune_pid): the road course is held out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from s3.evaluate.params import PidParams
from s3.sim.aids import SlipControl, WithDriverAids
from s3.sim.base import Control, SourceSim, VehicleState
from s3.sim.params import DriverAidsParams
from s3.tracks.track import Track

PROFILE_DS = 1.0  # m between speed-profile samples


@dataclass(frozen=True)
class TrackState:
    """Where the car is on the track map (all SI; d left positive, heading_error wrapped)."""

    s: float  # arc length of the nearest centerline point, [0, length)
    d: float  # lateral offset of the car centre from the centerline
    heading: float  # track heading at s
    heading_error: float  # yaw - heading
    w_left: float  # road half widths at s
    w_right: float
    segment: int  # nearest centerline segment (the projection hint)
    progress: float  # net distance along the road since the start of the run


@runtime_checkable
class Driver(Protocol):
    """What the evaluation loop drives with."""

    def reset(self, track: Track, state: VehicleState) -> None:
        """Start a new run on `track` from `state` (clear any memory)."""
        ...

    def act(self, state: VehicleState, where: TrackState) -> Control:
        """The command for the next control period."""
        ...


DriverFactory = Callable[
    [SourceSim], Driver
]  # one driver per simulator (wheelbase, dt, ...); picklable for jobs in workers


def speed_profile(
    track: Track,
    params: PidParams,
    s: np.ndarray,
    mu: np.ndarray,
) -> np.ndarray:
    """Target speed at arc lengths `s` (uniform spacing, closed loop) for friction `mu` at each.

    Cornering limit sqrt(a_lat mu / |kappa|) with |kappa| max-filtered over +- curvature_window
    (so a corner's speed holds from its entry to its exit), then braking-limited backwards and
    acceleration-limited forwards, each pass run twice round the loop so it closes.
    """
    ds = float(s[1] - s[0])
    kappa = np.abs(track.curvature_at(s))
    half = int(round(params.curvature_window / ds))
    if half > 0:
        kappa = np.max(np.stack([np.roll(kappa, k) for k in range(-half, half + 1)]), axis=0)
    v = np.minimum(params.max_speed, np.sqrt(params.lateral_accel * mu / np.maximum(kappa, 1e-6)))
    n = len(v)
    for _ in range(2):
        for i in range(n - 1, -1, -1):
            nxt = v[(i + 1) % n]
            v[i] = min(v[i], math.sqrt(nxt * nxt + 2.0 * params.brake_accel * mu[i] * ds))
    for _ in range(2):
        for i in range(n):
            prv = v[i - 1]
            v[i] = min(v[i], math.sqrt(prv * prv + 2.0 * params.drive_accel * mu[i] * ds))
    return v


class PidDriver:
    """Pure pursuit + PID speed control on a curvature-based speed profile (deterministic)."""

    def __init__(self, params: PidParams, wheelbase: float, max_steer: float, dt: float) -> None:
        self.p = params
        self.wheelbase = float(wheelbase)
        self.max_steer = float(max_steer)
        self.dt = float(dt)
        self._slip = SlipControl(
            DriverAidsParams(
                traction_control=params.traction_control, abs=params.traction_control, slip_limit=params.slip_limit
            )
        )
        self._profiles: dict[int, tuple[Track, np.ndarray]] = {}
        self.track: Track | None = None
        self._v: np.ndarray = np.zeros(1)
        self._reset_loop()

    @classmethod
    def for_sim(cls, sim: SourceSim, params: PidParams | None = None) -> PidDriver:
        """Matched to `sim`; its own slip control off when the car has driver aids (not applied twice)."""
        params = params or PidParams()
        if isinstance(sim, WithDriverAids):
            params = params.model_copy(update={"traction_control": False})
        return cls(params, sim.wheelbase, sim.max_steer, sim.control_dt)

    def _reset_loop(self) -> None:
        self._integral = 0.0
        self._v_prev: float | None = None
        self._slip.reset()

    def reset(self, track: Track, state: VehicleState) -> None:
        self.track = track
        key = id(track)
        if key not in self._profiles or self._profiles[key][0] is not track:
            self._profiles[key] = (track, self._profile(track))
        self._v = self._profiles[key][1]
        self._reset_loop()

    def _profile(self, track: Track) -> np.ndarray:
        n = max(8, int(round(track.length / PROFILE_DS)))
        s = np.arange(n) * (track.length / n)
        if (
            self.p.assume_mu is not None
        ):  # one assumed friction everywhere (the `cautious` baseline): the map's ice is ignored
            return speed_profile(track, self.p, s, np.full(n, self.p.assume_mu))
        mu = np.full(n, track.base_mu)
        if self.p.knows_ice and track.patches:
            for d in np.linspace(-self.p.ice_margin, self.p.ice_margin, 5):
                x, y, _ = track.pose_at(s, np.full(n, d))
                mu = np.minimum(mu, track.friction_at(np.stack([x, y], axis=1)))
        return speed_profile(track, self.p, s, mu)

    def target_speed(self, s: float, speed: float) -> float:
        """Lowest profile speed over the next preview_time * speed metres from s."""
        assert self.track is not None
        n = len(self._v)
        ds = self.track.length / n
        i0 = int((s % self.track.length) / ds)
        k = 1 + int(self.p.preview_time * max(speed, 0.0) / ds)
        return float(self._v[np.arange(i0, i0 + k) % n].min())

    def act(self, state: VehicleState, where: TrackState) -> Control:
        assert self.track is not None, "reset() first"
        p = self.p
        speed = math.hypot(state.vx, state.vy)
        # --- steering: pure pursuit from the rear axle to a centerline point ahead
        c, sn = math.cos(state.yaw), math.sin(state.yaw)
        rx, ry = state.x - 0.5 * self.wheelbase * c, state.y - 0.5 * self.wheelbase * sn
        ld = p.lookahead_min + p.lookahead_gain * max(speed, 0.0)
        tx, ty, _ = self.track.pose_at(np.array([where.s + ld + 0.5 * self.wheelbase]))
        dx, dy = float(tx[0]) - rx, float(ty[0]) - ry
        xl, yl = c * dx + sn * dy, -sn * dx + c * dy
        dist = max(math.hypot(xl, yl), 1e-3)
        kappa = 2.0 * yl / (dist * dist)  # curvature of the arc through the target point
        delta = math.atan(self.wheelbase * kappa) + p.yaw_gain * (state.vx * kappa - state.yaw_rate)
        steering = delta / self.max_steer
        # --- speed: PID (derivative on the measurement) on the profile speed
        v_target = self.target_speed(where.s, speed)
        err = v_target - state.vx
        dv = 0.0 if self._v_prev is None else (state.vx - self._v_prev) / self.dt
        self._v_prev = state.vx
        u = p.kp * err + p.ki * self._integral - p.kd * dv
        saturated = (u >= 1.0 and err > 0) or (u <= -1.0 and err < 0)
        if not saturated:
            self._integral = float(np.clip(self._integral + err * self.dt, -p.integral_limit, p.integral_limit))
        throttle = min(u, 1.0) if u > p.pedal_deadband else 0.0
        brake = min(-u * p.brake_gain, 1.0) if u < -p.pedal_deadband else 0.0
        throttle, brake = self._slip(state, throttle, brake)  # on the pedal travel, as the car's own aids act
        return Control(steering, throttle, brake)


def cautious(params: PidParams | None = None, mu: float = 0.2) -> PidParams:
    """`params` (default PidParams()) made the `pid_cautious` baseline: blind to the map's ice
    (knows_ice False) and planning its speed profile for friction `mu` everywhere, i.e. with its
    cornering, braking and drive accelerations at `mu` times their dry values (0.2: the middle
    of the training distribution's ice, patch_mu 0.1-0.3 in s3.tracks.generate)."""
    return PidParams.model_validate({**(params or PidParams()).model_dump(), "knows_ice": False, "assume_mu": mu})


class PidFactory:
    """Makes a `PidDriver` matched to a simulator's wheelbase, steering and period (picklable)."""

    def __init__(self, params: PidParams | None = None) -> None:
        self.params = params

    def __call__(self, sim: SourceSim) -> Driver:
        return PidDriver.for_sim(sim, self.params)


def pid_factory(params: PidParams | None = None) -> DriverFactory:
    """A factory making a `PidDriver` matched to a simulator's wheelbase, steering and period."""
    return PidFactory(params)
