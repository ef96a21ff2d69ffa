"""Compiled per-substep tyre, drivetrain and drag forces, run between `mj_step1` and `mj_step2`.

Why compiled: the forces must be recomputed at every 2 ms physics step; numpy per step made the
car ~15x slower (NOTES.md). The kernel reads MuJoCo's arrays in place (positions, frames,
velocities, touch loads) and writes `xfrc_applied`, `qfrc_applied` and the steering servo target.

Tyre model: the transient slips (kappa', tan alpha') follow first-order relaxation equations
    sigma_x dk/dt + |Vx| k = omega R - Vx,     sigma_y da/dt + |Vx| a = -Vy
whose decay term is integrated implicitly, so they stay bounded and smooth at any speed and
behave like a stiff carcass spring at rest (a braked car at rest stays at rest). A damper on the
slip velocity fades in below `low_speed`, and the slip magnitude is capped near the force peak
at low speed: otherwise a slide ending at rest leaves the carcass wound up to sliding slip and it
pushes the car back by tens of centimetres (with the cap the rock-back is a few centimetres). The force is the Magic
Formula of the combined slip magnitude, shared between the directions in proportion to the slip components (isotropic
friction: it opposes the sliding velocity), with peak mu * Fz, mu sampled bilinearly from the friction grid under the
wheel.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from s3.sim.params import MujocoCarParams

# parameter vector layout (built by `pack_params`)
P_DT, P_R, P_B, P_C, P_E, P_SX, P_SY, P_VLOW, P_CLOW, P_SPEAK = range(10)
P_TMAX, P_PMAX, P_DRAG, P_STEER_STEP, P_WHEELBASE, P_HALF_TRACK, P_ACKERMANN, P_WLIM = range(10, 18)
N_PARAMS = 18

# index vector layout (built by the car from model ids)
I_CHASSIS = 0
I_WHEEL_BODY = 1  # 4 entries, fl fr rl rr
I_WHEEL_DOF = 5  # 4 entries
I_TOUCH = 9  # 4 entries
I_STEER_ACT = 13  # 2 entries
N_IDS = 15

# inputs set once per control period, then the rate-limited steering angle the kernel keeps
U_THROTTLE, U_STEER, U_STEER_NOW = 0, 1, 2
N_U = 3

# outputs: per-wheel friction and load, then counters since reset
O_MU = 0  # 4 entries
O_FZ = 4  # 4 entries
O_AIRBORNE = 8  # wheel-substeps with zero normal load
O_WHEEL_STEPS = 9  # wheel-substeps in total
N_OUT = 10


@njit(cache=True)
def magic_formula(s: float, b: float, c: float, e: float) -> float:
    """Normalised force F/D at slip magnitude s >= 0."""
    bs = b * s
    return math.sin(c * math.atan(bs - e * (bs - math.atan(bs))))


def peak_slip(b: float, c: float, e: float) -> float:
    """Slip magnitude at which the Magic Formula peaks (dense search; the curve is smooth)."""
    s = np.linspace(1e-4, 2.0, 200001)
    bs = b * s
    f = np.sin(c * np.arctan(bs - e * (bs - np.arctan(bs))))
    return float(s[int(np.argmax(f))])


def sliding_ratio(b: float, c: float, e: float, s: float = 1.0) -> float:
    """Force ratio F/D at slip magnitude s (1.0 is a locked wheel going straight)."""
    return float(magic_formula(s, b, c, e))


@njit(cache=True)
def friction_at(mu: np.ndarray, x0: float, y0: float, res: float, default: float, x: float, y: float) -> float:
    """Bilinear friction at one point: the compiled twin of `FrictionGrid.at`."""
    ny, nx = mu.shape
    fx = (x - x0) / res
    fy = (y - y0) / res
    if nx < 2 or ny < 2 or fx < 0.0 or fy < 0.0 or fx > nx - 1 or fy > ny - 1:
        return default
    j0 = min(int(math.floor(fx)), nx - 2)
    i0 = min(int(math.floor(fy)), ny - 2)
    tx = fx - j0
    ty = fy - i0
    return (
        mu[i0, j0] * (1.0 - tx) * (1.0 - ty)
        + mu[i0, j0 + 1] * tx * (1.0 - ty)
        + mu[i0 + 1, j0] * (1.0 - tx) * ty
        + mu[i0 + 1, j0 + 1] * tx * ty
    )


@njit(cache=True)
def _point_velocity(cvel: np.ndarray, subtree_com: np.ndarray, body: int, root: int, px: float, py: float, pz: float):
    """World velocity of a point fixed to `body` (cvel is [ang, lin] at the root's subtree com)."""
    wx, wy, wz = cvel[body, 0], cvel[body, 1], cvel[body, 2]
    rx = px - subtree_com[root, 0]
    ry = py - subtree_com[root, 1]
    rz = pz - subtree_com[root, 2]
    vx = cvel[body, 3] + wy * rz - wz * ry
    vy = cvel[body, 4] + wz * rx - wx * rz
    vz = cvel[body, 5] + wx * ry - wy * rx
    return vx, vy, vz


@njit(cache=True)
def tyre_substep(
    xpos: np.ndarray,
    xmat: np.ndarray,
    cvel: np.ndarray,
    subtree_com: np.ndarray,
    qvel: np.ndarray,
    sensordata: np.ndarray,
    xfrc: np.ndarray,
    qfrc: np.ndarray,
    ctrl: np.ndarray,
    ids: np.ndarray,
    p: np.ndarray,
    u: np.ndarray,
    slip: np.ndarray,
    grid: np.ndarray,
    gmeta: np.ndarray,
    out: np.ndarray,
) -> None:
    """Advance the slip states one physics step and write every external force for it."""
    dt = p[P_DT]
    radius = p[P_R]
    chassis = ids[I_CHASSIS]

    # steering: rate-limit the bicycle-model angle, then split it per wheel (Ackermann), since
    # parallel-steered wheels fight each other in tight turns and stall a slow car
    step = p[P_STEER_STEP]
    cur = u[U_STEER_NOW] + min(max(u[U_STEER] - u[U_STEER_NOW], -step), step)
    u[U_STEER_NOW] = cur
    t = math.tan(cur)
    for j in range(2):
        y_w = p[P_HALF_TRACK] if j == 0 else -p[P_HALF_TRACK]
        ack = math.atan(p[P_WHEELBASE] * t / (p[P_WHEELBASE] - y_w * t))
        ctrl[ids[I_STEER_ACT + j]] = cur + p[P_ACKERMANN] * (ack - cur)

    # aerodynamic drag on the chassis centre of mass (horizontal)
    cx, cy, cz = xpos[chassis, 0], xpos[chassis, 1], xpos[chassis, 2]
    vx, vy, _ = _point_velocity(cvel, subtree_com, chassis, chassis, cx, cy, cz)
    vh = math.sqrt(vx * vx + vy * vy)
    for k in range(6):
        xfrc[chassis, k] = 0.0
    xfrc[chassis, 0] = -p[P_DRAG] * vh * vx
    xfrc[chassis, 1] = -p[P_DRAG] * vh * vy

    # engine torque through an open differential: equal torque on both rear wheels
    w_rear = 0.5 * (qvel[ids[I_WHEEL_DOF + 2]] + qvel[ids[I_WHEEL_DOF + 3]])
    torque = u[U_THROTTLE] * min(p[P_TMAX], p[P_PMAX] / max(abs(w_rear), 1e-3))
    # rev limiter: drive fades out over the last 5 % below the engine's top wheel speed
    torque *= min(1.0, max(0.0, (p[P_WLIM] - abs(w_rear)) / (0.05 * p[P_WLIM])))
    for i in range(4):
        qfrc[ids[I_WHEEL_DOF + i]] = 0.5 * torque if i >= 2 else 0.0

    for i in range(4):
        body = ids[I_WHEEL_BODY + i]
        dof = ids[I_WHEEL_DOF + i]
        for k in range(6):
            xfrc[body, k] = 0.0
        # wheel heading in the ground plane from its spin axis (local y)
        ax, ay = xmat[body, 1], xmat[body, 4]
        norm = math.sqrt(ax * ax + ay * ay)
        px, py, pz = xpos[body, 0], xpos[body, 1], xpos[body, 2]
        mu = friction_at(grid, gmeta[0], gmeta[1], gmeta[2], gmeta[3], px, py)
        fz = max(sensordata[ids[I_TOUCH + i]], 0.0)
        out[O_MU + i] = mu
        out[O_FZ + i] = fz
        out[O_WHEEL_STEPS] += 1.0
        if fz <= 0.0:
            out[O_AIRBORNE] += 1.0
        if norm < 1e-6:
            continue
        fx_, fy_ = ay / norm, -ax / norm  # forward
        lx_, ly_ = -fy_, fx_  # left
        wvx, wvy, _ = _point_velocity(cvel, subtree_com, body, chassis, px, py, pz)
        v_long = wvx * fx_ + wvy * fy_
        v_lat = wvx * lx_ + wvy * ly_
        slip_vel = qvel[dof] * radius - v_long  # > 0 when driving
        # total ground speed of the wheel: a car sliding sideways is not a car at rest, so the
        # low-speed cap and damper must not give it peak grip in a spin
        speed = math.sqrt(v_long * v_long + v_lat * v_lat)

        kap = (slip[i, 0] + dt / p[P_SX] * slip_vel) / (1.0 + dt * speed / p[P_SX])
        alp = (slip[i, 1] - dt / p[P_SY] * v_lat) / (1.0 + dt * speed / p[P_SY])
        ratio = speed / p[P_VLOW]
        s_lim = p[P_SPEAK] * (1.0 + ratio * ratio)
        s = math.sqrt(kap * kap + alp * alp)
        if s > s_lim:
            kap *= s_lim / s
            alp *= s_lim / s
        slip[i, 0] = kap
        slip[i, 1] = alp

        d_peak = mu * fz
        stiff = p[P_B] * p[P_C] * d_peak
        if stiff <= 0.0:
            continue
        if speed < p[P_VLOW]:
            fade = 0.5 * (1.0 + math.cos(math.pi * ratio)) * p[P_CLOW] / stiff
            kap += fade * slip_vel
            alp -= fade * v_lat
        s = math.sqrt(kap * kap + alp * alp)
        if s < 1e-12:
            continue
        f_over_s = d_peak * magic_formula(s, p[P_B], p[P_C], p[P_E]) / s
        f_long = f_over_s * kap
        f_lat = f_over_s * alp
        fwx = f_long * fx_ + f_lat * lx_
        fwy = f_long * fy_ + f_lat * ly_
        # applied at the ground point below the centre (flat ground at z=0): add its moment
        xfrc[body, 0] = fwx
        xfrc[body, 1] = fwy
        xfrc[body, 3] = pz * fwy
        xfrc[body, 4] = -pz * fwx


def pack_params(c: MujocoCarParams) -> np.ndarray:
    """The kernel's parameter vector (one array: cheap to pass to a compiled function)."""
    p = np.zeros(N_PARAMS)
    p[P_DT], p[P_R] = c.timestep, c.wheel_radius
    p[P_B], p[P_C], p[P_E] = c.mf_b, c.mf_c, c.mf_e
    p[P_SX], p[P_SY] = c.relax_long, c.relax_lat
    p[P_VLOW], p[P_CLOW] = c.low_speed, c.low_speed_damping
    p[P_SPEAK] = peak_slip(c.mf_b, c.mf_c, c.mf_e)
    p[P_TMAX], p[P_PMAX] = c.drive_torque_max, c.drive_power_max
    p[P_WLIM] = c.max_wheel_speed / c.wheel_radius
    p[P_DRAG] = 0.5 * c.air_density * c.drag_area
    p[P_STEER_STEP] = c.steer_rate * c.timestep
    p[P_WHEELBASE], p[P_HALF_TRACK], p[P_ACKERMANN] = c.wheelbase, 0.5 * c.track_width, c.ackermann
    return p
