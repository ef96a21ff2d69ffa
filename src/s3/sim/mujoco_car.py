"""The embedded high-fidelity source simulator: a MuJoCo multibody car with a slip-based tyre model.

Each control period runs `control_dt / timestep` physics steps as mj_step1 -> compiled tyre
kernel -> mj_step2, so the tyre forces see the positions and velocities of the step they act in.
Brakes and rolling resistance are MuJoCo joint friction (`dof_frictionloss`) on the wheel spin
joints: the constraint solver treats them implicitly, so a braked wheel locks exactly and a
rolling car comes to a true stop instead of creeping.
"""

from __future__ import annotations

import math
from typing import Protocol

import mujoco
import numpy as np

from s3.sim.base import Control, SimulatorError, VehicleState
from s3.sim.car_model import FRONT, WHEELS, build_mjcf
from s3.sim.params import MujocoCarParams
from s3.sim.tyre import (
    N_IDS,
    N_OUT,
    N_U,
    O_AIRBORNE,
    O_FZ,
    O_MU,
    O_WHEEL_STEPS,
    U_STEER,
    U_THROTTLE,
    friction_at,
    pack_params,
    tyre_substep,
)
from s3.tracks.friction_grid import FrictionGrid

MAX_SPEED = 150.0  # m/s; beyond this the state is treated as an explosion
MAX_SPIN = 60.0  # rad/s of chassis rotation, likewise
SETTLE_TIME = 1.5  # s of standstill simulated once to find the static ride state


class HasFrictionGrid(Protocol):
    """What `reset` needs from a track."""

    def friction_grid(self, res: float) -> FrictionGrid: ...


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([math.cos(0.5 * yaw), 0.0, 0.0, math.sin(0.5 * yaw)])


class MujocoCar:
    """A rear-wheel-drive sedan in MuJoCo, implementing `s3.sim.base.SourceSim`."""

    name = "mujoco"

    def __init__(self, params: MujocoCarParams | None = None, control_dt: float = 0.1) -> None:
        self.params = params or MujocoCarParams()
        self.version = f"mujoco {mujoco.__version__}"
        self.control_dt = float(control_dt)
        self.wheelbase = self.params.wheelbase
        self.max_steer = self.params.max_steer
        dt = self.params.timestep
        self.substeps = int(round(self.control_dt / dt))
        if self.substeps < 1 or abs(self.substeps * dt - self.control_dt) > 1e-9:
            raise ValueError(f"control_dt {control_dt} is not a whole number of {dt} s physics steps")
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(self.params))
        self.data = mujoco.MjData(self.model)
        m = self.model
        jid = {w: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"spin_{w}") for w in WHEELS}
        self._spin_dof = np.array([m.jnt_dofadr[jid[w]] for w in WHEELS])
        self._spin_qpos = np.array([m.jnt_qposadr[jid[w]] for w in WHEELS])
        steer_j = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"steer_{w}") for w in FRONT]
        self._steer_qpos = np.array([m.jnt_qposadr[j] for j in steer_j])
        ids = np.zeros(N_IDS, dtype=np.int64)
        ids[0] = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "chassis")
        ids[1:5] = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, f"wheel_{w}") for w in WHEELS]
        ids[5:9] = self._spin_dof
        ids[9:13] = [m.sensor_adr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, f"touch_{w}")] for w in WHEELS]
        ids[13:15] = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, f"steer_{w}") for w in FRONT]
        self._ids = ids
        self._kparams = pack_params(self.params)
        self._u = np.zeros(N_U)
        self._slip = np.zeros((4, 2))
        self._out = np.zeros(N_OUT)
        p = self.params
        per_wheel = np.array([p.brake_bias_front] * 2 + [1.0 - p.brake_bias_front] * 2)
        self._brake_max = 0.5 * p.brake_torque_max * per_wheel
        self._vel_prev = np.zeros(2)
        self._lat_acc = 0.0
        self.set_friction_grid(FrictionGrid.uniform(p.default_mu))
        self._rest_qpos, self._rest_loads = self._settle()

    # -- setup -----------------------------------------------------------------------------
    def set_friction_grid(self, grid: FrictionGrid) -> None:
        """Use this friction map from now on (reset() replaces it when given a track)."""
        self._track: object | None = None
        self._grid = np.ascontiguousarray(grid.mu, dtype=np.float64)
        self._gmeta = np.array([grid.x0, grid.y0, grid.res, grid.default_mu], dtype=np.float64)
        d = self.data
        self._args = (
            d.xpos,
            d.xmat,
            d.cvel,
            d.subtree_com,
            d.qvel,
            d.sensordata,
            d.xfrc_applied,
            d.qfrc_applied,
            d.ctrl,
            self._ids,
            self._kparams,
            self._u,
            self._slip,
            self._grid,
            self._gmeta,
            self._out,
        )

    def _settle(self) -> tuple[np.ndarray, np.ndarray]:
        """Simulate the braked car at rest once; keep its static pose (suspension, sink) and loads."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        mujoco.mj_forward(m, d)
        self._set_wheel_friction(brake=1.0)
        for _ in range(int(SETTLE_TIME / self.params.timestep)):
            self._physics_step()
        return d.qpos.copy(), self._out[O_FZ : O_FZ + 4].copy()

    # -- SourceSim -------------------------------------------------------------------------
    def reset(self, track: HasFrictionGrid | None, x: float, y: float, yaw: float, speed: float) -> VehicleState:
        """Place the settled car at (x, y, yaw) moving forward at `speed` with rolling wheels.

        `track=None` keeps the current friction map (e.g. one given to set_friction_grid).
        """
        if track is not None and track is not self._track:
            self.set_friction_grid(track.friction_grid(self.params.friction_grid_res))
            self._track = track  # rasterise once per track object, not at every episode
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        qpos = self._rest_qpos.copy()
        qpos[0:2] = x, y
        mujoco.mju_mulQuat(qpos[3:7], _yaw_quat(yaw), self._rest_qpos[3:7])
        qpos[self._steer_qpos] = 0.0
        qpos[self._spin_qpos] = 0.0
        d.qpos[:] = qpos
        d.qvel[0:2] = speed * math.cos(yaw), speed * math.sin(yaw)
        d.qvel[self._spin_dof] = speed / self.params.wheel_radius
        self._slip[:] = 0.0
        self._out[:] = 0.0
        self._out[O_FZ : O_FZ + 4] = self._rest_loads
        self._u[:] = 0.0
        self._set_wheel_friction(0.0)  # the model keeps the last episode's brake otherwise
        mujoco.mj_forward(m, d)
        self._out[O_FZ : O_FZ + 4] = d.sensordata[self._ids[9:13]]
        for i, body in enumerate(self._ids[1:5]):
            self._out[O_MU + i] = friction_at(self._grid, *self._gmeta, d.xpos[body, 0], d.xpos[body, 1])
        self._vel_prev = d.qvel[0:2].copy()
        self._lat_acc = 0.0
        return self._state()

    def step(self, control: Control) -> VehicleState:
        """Hold `control` for one control period (steering rate-limited) and return the new state."""
        self._u[U_THROTTLE] = control.throttle
        self._u[U_STEER] = control.steering * self.params.max_steer
        self._set_wheel_friction(control.brake)
        m, d, args = self.model, self.data, self._args
        step1, step2 = mujoco.mj_step1, mujoco.mj_step2
        for _ in range(self.substeps):
            step1(m, d)
            tyre_substep(*args)
            step2(m, d)
        if not (np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()):
            raise SimulatorError(f"non-finite MuJoCo state at t={d.time:.3f} s")
        if np.linalg.norm(d.qvel[0:3]) > MAX_SPEED or np.linalg.norm(d.qvel[3:6]) > MAX_SPIN:
            raise SimulatorError(f"absurd MuJoCo state at t={d.time:.3f} s: |v|={np.linalg.norm(d.qvel[0:3]):.1f} m/s")
        vel = d.qvel[0:2].copy()
        acc = (vel - self._vel_prev) / self.control_dt
        heading = math.atan2(vel[1] + self._vel_prev[1], vel[0] + self._vel_prev[0]) if vel.any() else 0.0
        self._lat_acc = -acc[0] * math.sin(heading) + acc[1] * math.cos(heading)
        self._vel_prev = vel
        return self._state()

    def close(self) -> None:
        """Nothing external to release; drop the big arrays."""
        self._args = ()

    # -- diagnostics -----------------------------------------------------------------------
    @property
    def wheel_airborne_fraction(self) -> float:
        """Share of wheel-substeps since reset with zero normal load (a hop detector)."""
        n = self._out[O_WHEEL_STEPS]
        return float(self._out[O_AIRBORNE] / n) if n else 0.0

    @property
    def wheel_loads(self) -> np.ndarray:
        """Normal load per wheel (fl, fr, rl, rr) seen by the tyre model at the last substep, N."""
        return self._out[O_FZ : O_FZ + 4].copy()

    @property
    def lateral_acceleration(self) -> float:
        """Mean acceleration of the chassis over the last control period, normal to its path, m/s^2.

        Positive to the left. Taken from the velocity change (not an accelerometer) so body roll
        does not mix gravity in.
        """
        return self._lat_acc

    # -- internals -------------------------------------------------------------------------
    def _set_wheel_friction(self, brake: float) -> None:
        """Brake torque plus rolling resistance as implicit Coulomb friction on the spin joints."""
        p = self.params
        rolling = p.rolling_resistance * p.wheel_radius * self._out[O_FZ : O_FZ + 4]
        self.model.dof_frictionloss[self._spin_dof] = brake * self._brake_max + rolling

    def _physics_step(self) -> None:
        m, d = self.model, self.data
        mujoco.mj_step1(m, d)
        tyre_substep(*self._args)
        mujoco.mj_step2(m, d)

    def _state(self) -> VehicleState:
        d = self.data
        q = d.qpos[3:7]
        yaw = math.atan2(2.0 * (q[0] * q[3] + q[1] * q[2]), 1.0 - 2.0 * (q[2] * q[2] + q[3] * q[3]))
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, q)
        omega_world = rot.reshape(3, 3) @ d.qvel[3:6]
        c, s = math.cos(yaw), math.sin(yaw)
        vxw, vyw = d.qvel[0], d.qvel[1]
        return VehicleState(
            time=float(d.time),
            x=float(d.qpos[0]),
            y=float(d.qpos[1]),
            yaw=yaw,
            vx=float(c * vxw + s * vyw),
            vy=float(-s * vxw + c * vyw),
            yaw_rate=float(omega_world[2]),
            steer=float(d.qpos[self._steer_qpos].mean()),
            wheel_speed=d.qvel[self._spin_dof] * self.params.wheel_radius,
            friction=self._out[O_MU : O_MU + 4].copy(),
        )
