"""Driver aids (traction control / ABS): the slip logic, the spin it prevents, and the pid's equivalence."""

from __future__ import annotations

import numpy as np
import pytest

from s3.evaluate.drivers import PidDriver
from s3.evaluate.params import PidParams
from s3.evaluate.probes import _start, open_surface
from s3.evaluate.run import run_lap
from s3.sim.aids import CUT, FLOOR, RECOVER, SlipControl, WithDriverAids
from s3.sim.base import Control, VehicleState
from s3.sim.factory import make_sim
from s3.sim.params import DriverAidsParams, SimParams

BOTH = DriverAidsParams(traction_control=True, abs=True)


def _state(vx: float, wheels: tuple[float, float, float, float]) -> VehicleState:
    return VehicleState(0.0, 0.0, 0.0, 0.0, vx, 0.0, 0.0, 0.0, wheel_speed=np.array(wheels))


def test_traction_control_cuts_throttle_while_the_rear_spins_and_gives_it_back() -> None:
    sc = SlipControl(BOTH)
    spin = _state(10.0, (10.0, 10.0, 12.0, 10.0))  # rear left 20 % fast: beyond slip_limit 0.12
    grip = _state(10.0, (10.0, 10.0, 10.5, 10.5))  # 5 %: within
    assert sc(spin, 1.0, 0.0) == pytest.approx((CUT, 0.0))
    assert sc(spin, 1.0, 0.0) == pytest.approx((CUT**2, 0.0))
    for _ in range(20):
        sc(spin, 1.0, 0.0)
    assert sc(spin, 1.0, 0.0)[0] == pytest.approx(FLOOR)  # never below the floor: the car can still creep
    assert sc(grip, 1.0, 0.0)[0] == pytest.approx(FLOOR + RECOVER)
    for _ in range(10):
        sc(grip, 1.0, 0.0)
    assert sc(grip, 0.7, 0.0) == pytest.approx((0.7, 0.0))
    # a spinning front wheel is not a driven wheel: no cut
    assert SlipControl(BOTH)(_state(10.0, (12.0, 10.0, 10.0, 10.0)), 1.0, 0.0) == pytest.approx((1.0, 0.0))


def test_abs_eases_the_brake_while_a_wheel_locks_and_each_aid_is_its_own_switch() -> None:
    lock = _state(10.0, (5.0, 10.0, 10.0, 10.0))  # front left 50 % slow
    assert SlipControl(BOTH)(lock, 0.0, 1.0) == pytest.approx((0.0, CUT))
    assert SlipControl(DriverAidsParams(traction_control=True))(lock, 0.0, 1.0) == pytest.approx((0.0, 1.0))
    assert SlipControl(DriverAidsParams(abs=True))(_state(10.0, (10.0, 10.0, 15.0, 15.0)), 1.0, 0.0) == pytest.approx(
        (1.0, 0.0)
    )
    # slow, or no wheel speeds reported (a simulator without them): the commands pass unchanged
    assert SlipControl(BOTH)(_state(1.5, (1.5, 1.5, 3.0, 3.0)), 1.0, 0.0) == pytest.approx((1.0, 0.0))
    assert SlipControl(BOTH)(_state(10.0, (0.0, 0.0, 0.0, 0.0)), 0.0, 1.0) == pytest.approx((0.0, 1.0))
    assert not DriverAidsParams().enabled and BOTH.enabled


def _max_sideslip(sim, throttle: float) -> tuple[float, float]:
    track = open_surface(0.15)
    st = sim.reset(track, *_start(track), 8.0)
    slip = []
    for _ in range(30):
        st = sim.step(Control(0.1, throttle, 0.0))
        slip.append(abs(np.arctan2(st.vy, abs(st.vx))))
    return max(slip), st.vx


def test_traction_control_stops_the_power_on_spin_on_ice() -> None:
    """The bare car spins under half throttle on ice (mu 0.15); with traction control it holds its line."""
    bare = make_sim(SimParams(), DriverAidsParams())
    aided = make_sim(SimParams(), BOTH)
    assert isinstance(aided, WithDriverAids) and not isinstance(bare, WithDriverAids)
    assert aided.wheelbase == bare.wheelbase and aided.control_dt == bare.control_dt
    slip_bare, vx_bare = _max_sideslip(bare, 0.5)
    slip_aided, vx_aided = _max_sideslip(aided, 0.5)
    assert slip_bare > 1.0 and vx_bare < 4.0  # spun round, nearly stopped
    assert slip_aided < 0.4 and vx_aided > 7.5  # still driving forwards at speed
    assert make_sim(SimParams(), DriverAidsParams()).__class__ is bare.__class__  # all off: no wrapper


def test_pid_own_slip_control_equals_the_cars_aids() -> None:
    """The pid keeps its slip control on a bare car and yields it to an aided car: the same laps."""
    track = open_surface(0.15)
    runs = []
    for aids in (DriverAidsParams(), BOTH):
        sim = make_sim(SimParams(), aids)
        driver = PidDriver.for_sim(sim)
        assert driver.p.traction_control is (aids is not BOTH)
        runs.append(run_lap(sim, track, driver, 0.0, start_speed=3.0, max_seconds=12.0))
    a, b = (r.trajectory for r in runs)
    assert np.array_equal(a["x"], b["x"]) and np.array_equal(a["vx"], b["vx"])
    bare = make_sim(SimParams(), DriverAidsParams())
    off = run_lap(
        bare, track, PidDriver.for_sim(bare, PidParams(traction_control=False)), 0.0, start_speed=3.0, max_seconds=12.0
    )
    assert not np.array_equal(off.trajectory["vx"], a["vx"])  # the aid was at work in those 12 s


def test_source_vec_env_workers_drive_the_aided_car() -> None:
    """PPO or validation in the source (SourceVecEnv) can run on the same aided car as evaluation."""
    from s3.compute.sim_pool import SimWorker

    track = open_surface(0.15)
    assert all(isinstance(c, WithDriverAids) for c in SimWorker(SimParams(), [track], 2, BOTH).cars)
    assert all(isinstance(c, WithDriverAids) for c in SimWorker(SimParams(), [track], 1).cars)  # the one car by default
    assert not any(
        isinstance(c, WithDriverAids) for c in SimWorker(SimParams(), [track], 1, DriverAidsParams()).cars
    )  # the bare car
