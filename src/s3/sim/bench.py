"""Throughput of the embedded simulator: how many control steps one core delivers.

Data collection runs many episodes through `MujocoCar.step`, so its speed bounds how much data a
run can afford; this measures it on a steady drive (not a standstill, which is cheaper).
"""

from __future__ import annotations

import math
import time

import mujoco

from s3.sim.base import Control
from s3.sim.mujoco_car import MujocoCar
from s3.sim.params import MujocoCarParams

SPEED = 20.0  # m/s, cruise target of the schedule
EPISODE_STEPS = 300  # control steps between resets, so the car never wanders far


class _Slalom:
    """A gentle slalom at cruise speed (speed PI, sinusoidal steering), reset every episode."""

    def __init__(self, car: MujocoCar) -> None:
        self.car = car
        self.steps = 0
        self._reset()

    def _reset(self) -> None:
        self.state = self.car.reset(None, 0.0, 0.0, 0.0, SPEED)
        self.integral = 0.0

    def step(self) -> None:
        if self.steps and self.steps % EPISODE_STEPS == 0:
            self._reset()
        err = SPEED - self.state.vx
        self.integral += err * self.car.control_dt
        steer = 0.2 * math.sin(0.5 * self.state.time)
        self.state = self.car.step(Control(steer, 0.3 * err + 0.1 * self.integral, max(0.0, -0.3 * err)))
        self.steps += 1


def bench_sim(seconds: float = 5.0, params: MujocoCarParams | None = None, control_dt: float = 0.1) -> dict:
    """Run for about `seconds` of wall time on one thread and report the control-step rate."""
    car = MujocoCar(params, control_dt=control_dt)
    driver = _Slalom(car)
    for _ in range(20):  # warm-up: loads or compiles the numba kernel
        driver.step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            driver.step()
        steps += 100
    elapsed = time.perf_counter() - start
    car.close()
    return {
        "control_steps_per_s": steps / elapsed,
        "realtime_factor": steps * car.control_dt / elapsed,
        "control_dt": car.control_dt,
        "timestep": car.params.timestep,
        "substeps": car.substeps,
        "mujoco_version": mujoco.__version__,
    }
