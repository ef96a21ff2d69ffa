"""The exploration driver: a competent path follower made to misbehave on purpose.

A dataset of only tidy laps teaches a dynamics model nothing about the limit, and a racing
policy lives at the limit. So the driver follows a wandering line with pure pursuit at a speed
profile drawn per episode (sometimes faster than the grip allows, sometimes ignorant of ice),
adds correlated noise to every input, and now and then does something aggressive: brakes hard,
steps the steering, floors the throttle mid-corner, or lifts off.
"""

from __future__ import annotations

import math

import numpy as np

from s3.data.params import DriverParams
from s3.sim.base import Control, VehicleState
from s3.tracks.track import Track

G = 9.81
NOISE_SPEED = 10.0  # m/s above which steering noise scales as 1/speed
EVENTS = ("hard_brake", "steer_step", "power_on", "lift_off", "hold")


def speed_profile(
    track: Track, s: np.ndarray, v_cap: float, a_lat: float, a_brake: float, mu: np.ndarray
) -> np.ndarray:
    """Cornering-limited speed at arc lengths `s` (uniformly spaced, closed), then braking-limited backwards."""
    kappa = np.abs(track.curvature_at(s))
    v = np.minimum(v_cap, np.sqrt(a_lat * mu / np.maximum(kappa, 1e-6)))
    ds = float(s[1] - s[0])
    # Two backward passes round the loop so the braking zone before the start line is right too.
    for _ in range(2):
        for i in range(len(v) - 1, -1, -1):
            nxt = v[(i + 1) % len(v)]
            v[i] = min(v[i], math.sqrt(nxt * nxt + 2.0 * a_brake * mu[i] * ds))
    return v


class ExplorationDriver:
    """Pure pursuit + speed PI + Ornstein-Uhlenbeck noise + random aggressive events."""

    def __init__(
        self,
        track: Track,
        params: DriverParams,
        wheelbase: float,
        max_steer: float,
        dt: float,
        rng: np.random.Generator,
    ) -> None:
        self.track, self.p, self.wheelbase, self.max_steer, self.dt, self.rng = (
            track,
            params,
            wheelbase,
            max_steer,
            dt,
            rng,
        )
        self.v_cap = rng.uniform(*params.max_speed)
        self.a_lat = rng.uniform(*params.lateral_accel)
        knows_ice = rng.random() < params.knows_ice_prob
        self._ds = 2.0
        self._s_grid = np.arange(0.0, track.length, self._ds)
        centre = track.pose_at(self._s_grid)
        mu = (
            track.friction_at(np.stack(centre[:2], axis=-1)) if knows_ice else np.full(len(self._s_grid), track.base_mu)
        )
        self._v_profile = speed_profile(track, self._s_grid, self.v_cap, self.a_lat, 0.5 * G, mu)
        # The line the car aims for: a smooth random wander across the track, a sum of a few sinusoids in s.
        k = rng.integers(1, 6, size=3) * 2 * math.pi / track.length
        self._line = (k, rng.uniform(0, 2 * math.pi, size=3), rng.uniform(-1, 1, size=3) / 3 * params.line_offset)
        self._noise = np.zeros(2)
        self._integral = 0.0
        self._event: tuple[str, float, float] | None = None  # (kind, time left, magnitude)

    def target_speed(self, s: float) -> float:
        """Profile speed at arc length s."""
        i = int((s % self.track.length) / self._ds) % len(self._v_profile)
        return float(self._v_profile[i])

    def start(self, track: Track, state: VehicleState) -> None:
        """Nothing to do: the episode's plan (line, speed profile, noise) was drawn in __init__."""

    def _line_offset(self, s: float) -> float:
        k, phase, amp = self._line
        half = 0.5 * float(sum(w[0] for w in self.track.width_at(np.array([s]))))
        return float(np.sum(amp * np.sin(k * s + phase))) * half

    def act(self, state: VehicleState, s: float) -> Control:
        """The command for the current state, given its arc length along the track."""
        p, dt = self.p, self.dt
        speed = math.hypot(state.vx, state.vy)
        lookahead = max(p.lookahead_min, p.lookahead_gain * speed)
        s_t = s + lookahead
        tx, ty, _ = (float(a[0]) for a in self.track.pose_at(np.array([s_t]), np.array([self._line_offset(s_t)])))
        dx, dy = tx - state.x, ty - state.y
        c, sn = math.cos(state.yaw), math.sin(state.yaw)
        xl, yl = c * dx + sn * dy, -sn * dx + c * dy
        alpha = math.atan2(yl, xl)
        delta = math.atan2(2.0 * self.wheelbase * math.sin(alpha), max(math.hypot(xl, yl), 1e-3))
        steering = delta / self.max_steer

        v_target = self.target_speed(s + 1.0 * speed)
        err = v_target - state.vx
        self._integral = float(np.clip(self._integral + err * dt, -20.0, 20.0))
        u = p.speed_kp * err + p.speed_ki * self._integral

        # Ornstein-Uhlenbeck noise on (steering, pedal); steering noise shrinks with speed so that
        # it stays a similar lateral acceleration rather than a certain spin at 30 m/s.
        a = math.exp(-dt / p.noise_tau)
        sigma = np.array([p.steer_noise * min(1.0, NOISE_SPEED / max(speed, 1.0)), p.pedal_noise])
        self._noise = a * self._noise + math.sqrt(1 - a * a) * sigma * self.rng.standard_normal(2)
        steering += self._noise[0]
        u += self._noise[1]
        # Grip left for traction after cornering (friction circle): flooring a rear-driven car or
        # stamping on the brakes mid-corner is an event, not the driver's habit.
        a_y = abs(state.vx * state.yaw_rate)
        traction = math.sqrt(max(0.0, 1.0 - min(a_y / self.a_lat, 1.0) ** 2))
        throttle = min(max(u, 0.0), max(0.15, traction))
        brake = min(max(-u, 0.0), 0.1 + 0.4 * traction)

        steering, throttle, brake = self._apply_event(
            steering, throttle, brake, min(1.0, NOISE_SPEED / max(speed, 1.0))
        )
        return Control(steering, throttle, brake)

    def _apply_event(
        self, steering: float, throttle: float, brake: float, steer_scale: float
    ) -> tuple[float, float, float]:
        """Override the inputs while an event lasts; steering events shrink with speed like the noise."""
        p = self.p
        if self._event is None and self.rng.random() < p.event_rate * self.dt:
            kind = EVENTS[self.rng.integers(len(EVENTS))]
            self._event = (
                kind,
                self.rng.uniform(*p.event_duration),
                self.rng.uniform(0.3, 1.0) * self.rng.choice([-1, 1]),
            )
        if self._event is None:
            return steering, throttle, brake
        kind, left, mag = self._event
        self._event = (kind, left - self.dt, mag) if left > self.dt else None
        if kind == "hard_brake":
            return steering, 0.0, 0.6 + 0.4 * abs(mag)
        if kind == "steer_step":
            return steering + steer_scale * mag, throttle, brake
        if kind == "power_on":
            return steering, 0.6 + 0.4 * abs(mag), 0.0
        if kind == "lift_off":
            return steering, 0.0, 0.0
        return steer_scale * mag, abs(mag) if mag > 0 else 0.0, abs(mag) if mag < 0 else 0.0
