"""Physics checks of the embedded MuJoCo car: behaviour a real sedan would show, not just shapes.

Expected values come from the car's own parameters (tyre curve, drag) and textbook relations
(v^2/(2 mu g), mu g), so a parameter change moves the expectation with it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from s3.sim.base import Control, SimulatorError, SourceSim, VehicleState
from s3.sim.car_model import GRAVITY
from s3.sim.mujoco_car import MujocoCar
from s3.sim.params import MujocoCarParams
from s3.sim.tyre import friction_at, sliding_ratio
from s3.tracks.friction_grid import FrictionGrid

ICE = 0.12


class FlatTrack:
    """Stand-in for s3.tracks.track.Track: only the friction map is needed."""

    def __init__(self, grid: FrictionGrid) -> None:
        self.grid = grid
        self.calls = 0

    def friction_grid(self, res: float) -> FrictionGrid:
        self.calls += 1
        return self.grid


@pytest.fixture(scope="module")
def car() -> MujocoCar:
    return MujocoCar()


def _surface(car: MujocoCar, mu: float) -> None:
    car.set_friction_grid(FrictionGrid.uniform(mu))


def _wrap(a: float) -> float:
    return (a + math.pi) % (2.0 * math.pi) - math.pi


class SpeedPI:
    """Throttle/brake feedback holding a target forward speed."""

    def __init__(self, target: float, dt: float) -> None:
        self.target, self.dt, self.integral = target, dt, 0.0

    def __call__(self, s: VehicleState) -> tuple[float, float]:
        err = self.target - s.vx
        self.integral = float(np.clip(self.integral + err * self.dt, -5.0, 5.0))
        return 0.5 * err + 0.2 * self.integral, max(0.0, -0.5 * err)


def test_implements_source_sim(car: MujocoCar) -> None:
    assert isinstance(car, SourceSim)
    assert car.name == "mujoco" and car.version.startswith("mujoco 4.")
    track = FlatTrack(FrictionGrid.uniform(0.5))
    s = car.reset(track, 3.0, -2.0, 0.4, 10.0)
    car.reset(track, 0.0, 0.0, 0.0, 0.0)
    assert track.calls == 1  # rasterised once per track object
    assert s.is_finite() and s.x == pytest.approx(3.0) and s.y == pytest.approx(-2.0)
    assert s.yaw == pytest.approx(0.4, abs=1e-3) and s.vx == pytest.approx(10.0, abs=1e-6)
    assert np.allclose(s.wheel_speed, 10.0) and np.allclose(s.friction, 0.5)
    with pytest.raises(ValueError):
        MujocoCar(control_dt=0.0333)
    with pytest.raises(ValueError):
        MujocoCarParams(wheelbase=2.7, turbo=True)


def test_compiled_friction_lookup_matches_grid() -> None:
    rng = np.random.default_rng(0)
    grid = FrictionGrid(-3.0, 2.0, 0.5, rng.uniform(0.1, 1.2, (7, 9)), 0.8)
    pts = rng.uniform([-5.0, 0.0], [4.0, 7.0], (500, 2))
    compiled = [friction_at(grid.mu, grid.x0, grid.y0, grid.res, grid.default_mu, x, y) for x, y in pts]
    assert np.allclose(compiled, grid.at(pts), atol=1e-12)


@pytest.mark.parametrize("brake", [0.0, 1.0])
def test_standstill_is_stable(car: MujocoCar, brake: float) -> None:
    _surface(car, 1.0)
    s0 = car.reset(None, 100.0, -50.0, 0.7, 0.0)
    for _ in range(50):
        s = car.step(Control(0.0, 0.0, brake))
    assert math.hypot(s.x - s0.x, s.y - s0.y) < 0.01
    assert abs(s.yaw - s0.yaw) < 1e-3 and abs(s.vx) < 1e-3 and abs(s.yaw_rate) < 1e-3


def test_full_throttle_0_to_27(car: MujocoCar) -> None:
    _surface(car, 1.0)
    s = car.reset(None, 0.0, 0.0, 0.0, 0.0)
    prev = s
    while s.vx < 27.0 and s.time < 20.0:
        prev, s = s, car.step(Control(0.0, 1.0, 0.0))
    t = prev.time + (27.0 - prev.vx) / (s.vx - prev.vx) * (s.time - prev.time)
    print(f"0-27 m/s: {t:.2f} s")
    assert 8.0 <= t <= 12.0
    assert car.wheel_airborne_fraction == 0.0


def test_holds_50m_circle_at_15ms(car: MujocoCar) -> None:
    """Steady cornering at ~4.5 m/s^2 with a feedback driver: radius held within 1 m."""
    radius, speed = 50.0, 15.0
    _surface(car, 1.0)
    s = car.reset(None, 0.0, -radius, 0.0, speed)  # centre at the origin, driving CCW
    pi = SpeedPI(speed, car.control_dt)
    wb, errs = car.params.wheelbase, []
    for k in range(300):
        course = s.yaw + math.atan2(s.vy, s.vx)
        heading_err = _wrap(math.atan2(s.y, s.x) + 0.5 * math.pi - course)
        delta = wb / radius + 0.05 * (math.hypot(s.x, s.y) - radius) + 0.5 * heading_err
        throttle, brake = pi(s)
        s = car.step(Control(delta / car.params.max_steer, throttle, brake))
        if k >= 100:
            errs.append(math.hypot(s.x, s.y) - radius)
    print(f"50 m circle at 15 m/s: max radius error {np.abs(errs).max():.3f} m")
    assert np.abs(errs).max() < 1.0
    assert s.vx == pytest.approx(speed, abs=0.3)


@pytest.mark.parametrize(
    ("mu", "speed", "max_delta", "lo", "hi"), [(1.0, 20.0, 0.25, 8.0, 10.0), (ICE, 10.0, 0.12, 1.0, 1.5)]
)
def test_peak_lateral_acceleration(
    car: MujocoCar, mu: float, speed: float, max_delta: float, lo: float, hi: float
) -> None:
    """Slow ramp steer at constant speed: the lateral acceleration tops out near mu g."""
    _surface(car, mu)
    s = car.reset(None, 0.0, 0.0, 0.0, speed)
    pi = SpeedPI(speed, car.control_dt)
    n = 150
    acc = []
    for k in range(n):
        throttle, brake = pi(s)
        s = car.step(Control(max_delta * k / n / car.params.max_steer, throttle, brake))
        acc.append(car.lateral_acceleration)
    peak = np.convolve(acc, np.ones(5) / 5, "valid").max()  # 0.5 s mean
    print(f"peak lateral acceleration on mu={mu}: {peak:.2f} m/s^2 (mu g = {mu * GRAVITY:.2f})")
    assert lo <= peak <= hi
    assert car.wheel_airborne_fraction == 0.0


def _expected_stop(car: MujocoCar, mu: float, v0: float) -> float:
    """Stopping distance on the tyre curve's locked-wheel (slip 1) force plus aerodynamic drag.

    dv/dt = -(a0 + k v^2) with a0 = mu_slide g, k = rho CdA / (2 m) integrates to
    ln(1 + k v0^2 / a0) / (2 k). Rolling resistance does not act on a locked wheel.
    """
    p = car.params
    a0 = mu * sliding_ratio(p.mf_b, p.mf_c, p.mf_e) * GRAVITY
    k = 0.5 * p.air_density * p.drag_area / p.mass
    return math.log1p(k * v0**2 / a0) / (2.0 * k)


@pytest.mark.parametrize("mu", [1.0, ICE])
def test_locked_wheel_braking_distance(car: MujocoCar, mu: float) -> None:
    v0 = 20.0
    _surface(car, mu)
    s = car.reset(None, 0.0, 0.0, 0.0, v0)
    locked = []
    while s.vx > 0.05 and s.time < 60.0:
        s = car.step(Control(0.0, 0.0, 1.0))
        if s.vx > 5.0:
            locked.append(np.abs(s.wheel_speed).max())
    expected = _expected_stop(car, mu, v0)
    simple = v0**2 / (2.0 * mu * sliding_ratio(car.params.mf_b, car.params.mf_c, car.params.mf_e) * GRAVITY)
    print(
        f"locked braking from {v0} m/s on mu={mu}: {s.x:.1f} m (expected {expected:.1f} m with drag, {simple:.1f} m "
        "without)"
    )
    assert s.x == pytest.approx(expected, rel=0.15)
    assert max(locked) < 0.1  # the wheels really are locked
    assert abs(s.y) < 0.05 and car.wheel_airborne_fraction == 0.0


FLICK = [(1.0, 1.0, 0.0)] * 8 + [(-1.0, 1.0, 0.0)] * 10 + [(1.0, 0.5, 0.0)] * 20


@pytest.mark.parametrize("mu", [1.0, ICE])
def test_no_wheel_hop_in_hard_steer_slide(car: MujocoCar, mu: float) -> None:
    """A full-lock flick at 25 m/s on full throttle slides the car; all four wheels stay loaded.

    (Built-in MuJoCo contact friction had 60-84 % of wheel-steps airborne in such slides.)
    """
    _surface(car, mu)
    s = car.reset(None, 0.0, 0.0, 0.0, 25.0)
    sideslip = []
    for command in FLICK:
        s = car.step(Control(*command))
        sideslip.append(abs(math.atan2(s.vy, abs(s.vx))))
    print(
        f"hard steer slide on mu={mu}: max sideslip {max(sideslip):.2f} rad, airborne {car.wheel_airborne_fraction:.4f}"
    )
    assert max(sideslip) > 0.3  # it really slid
    assert car.wheel_airborne_fraction == 0.0


def test_split_mu_braking_yaws_towards_grip(car: MujocoCar) -> None:
    """Left wheels on ice, right on asphalt: the asphalt side brakes harder, the car yaws right."""
    res = 0.1
    ys = -10.0 + res * np.arange(201)
    mu = np.where(ys[:, None] > 0.0, ICE, 1.0) * np.ones((1, 800))
    car.set_friction_grid(FrictionGrid(-10.0, -10.0, res, mu, 1.0))
    s = car.reset(None, 0.0, 0.0, 0.0, 20.0)
    assert np.allclose(s.friction, [ICE, 1.0, ICE, 1.0])
    for _ in range(5):
        s = car.step(Control(0.0, 0.0, 1.0))
    print(f"split-mu braking: yaw {s.yaw:.3f} rad, yaw rate {s.yaw_rate:.3f} rad/s after {s.time:.1f} s")
    assert s.yaw < -0.1 and s.yaw_rate < -0.3


def _run(car: MujocoCar, seed: int) -> list[VehicleState]:
    rng = np.random.default_rng(seed)
    states = [car.reset(None, 1.0, 2.0, 0.3, 12.0)]
    for _ in range(40):
        states.append(car.step(Control(*rng.uniform([-1.0, 0.0, 0.0], [1.0, 1.0, 0.3]))))
    return states


def test_deterministic(car: MujocoCar) -> None:
    _surface(car, 0.8)
    first, second = _run(car, 7), _run(car, 7)
    fresh = MujocoCar()
    _surface(fresh, 0.8)
    third = _run(fresh, 7)
    for a, b, c in zip(first, second, third):
        for f in ("time", "x", "y", "yaw", "vx", "vy", "yaw_rate", "steer"):
            assert getattr(a, f) == getattr(b, f) == getattr(c, f)
        assert np.array_equal(a.wheel_speed, b.wheel_speed) and np.array_equal(a.wheel_speed, c.wheel_speed)


def test_steering_is_rate_limited(car: MujocoCar) -> None:
    _surface(car, 1.0)
    car.reset(None, 0.0, 0.0, 0.0, 10.0)
    s = car.step(Control(1.0, 0.0, 0.0))
    assert 0.5 * car.params.steer_rate * car.control_dt < s.steer <= car.params.steer_rate * car.control_dt + 1e-3


def test_explosion_raises(car: MujocoCar) -> None:
    _surface(car, 1.0)
    car.reset(None, 0.0, 0.0, 0.0, 10.0)
    car.data.qvel[0] = 400.0
    with pytest.raises(SimulatorError):
        car.step(Control(0.0, 0.0, 0.0))


def test_rev_limiter_caps_wheelspin_on_ice(car: MujocoCar) -> None:
    """Full throttle on ice spins the driven wheels up to the engine's limit, not without bound."""
    _surface(car, 0.1)
    car.reset(None, 0.0, 0.0, 0.0, 0.0)
    rear = []
    for _ in range(150):
        st = car.step(Control(0.0, 1.0, 0.0))
        rear.append(0.5 * (st.wheel_speed[2] + st.wheel_speed[3]))
    limit = car.params.max_wheel_speed
    assert max(rear) > 0.9 * limit, "the driven wheels should spin up on ice"
    assert max(rear) < 1.02 * limit
    assert st.vx < 15.0  # ice gives little traction: the car itself stays slow
