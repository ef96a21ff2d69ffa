"""Every rotation the stand-in converts between MuJoCo's chassis and BeamNG's conventions.

MuJoCo's chassis frame: +x forward, +y left, +z up; its orientation is the free joint's
quaternion qpos[3:7] in (w, x, y, z) order. The stand-in's model of BeamNG's conventions: a
vehicle faces its local -Y (vehicle frame +X left, +Y back, +Z up); beamngpy sends quaternions
as (x, y, z, w) and a prefab's `rotationMatrix` as 9 row-major floats. Yaw is in radians, CCW
from world +x, the car's heading. The stand-in's reading of BeamNG's conventions lives here
only, so it can be changed in one place.
"""

from __future__ import annotations

import math

import numpy as np

_BODY_TO_BNG = np.array([math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)])  # Rz(+90 deg), (w, x, y, z)


def yaw_from_matrix(m: list[float]) -> float:
    """Heading of a vehicle from a prefab's row-major `rotationMatrix` (its local -Y is forward)."""
    r = np.asarray(m, dtype=np.float64).reshape(3, 3)  # row-major, as beamngpy writes it
    fwd = r @ np.array([0.0, -1.0, 0.0])
    return math.atan2(fwd[1], fwd[0])


def yaw_from_quat(q: list[float]) -> float:
    """Heading of a vehicle from a beamngpy (x, y, z, w) quaternion (its local -Y is forward)."""
    x, y, z, w = (float(v) for v in q)
    r = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )
    fwd = r @ np.array([0.0, -1.0, 0.0])
    return math.atan2(fwd[1], fwd[0])


def chassis_yaw(q: np.ndarray) -> float:
    """Heading of the chassis from its MuJoCo (w, x, y, z) quaternion."""
    return math.atan2(2.0 * (q[0] * q[3] + q[1] * q[2]), 1.0 - 2.0 * (q[2] * q[2] + q[3] * q[3]))


def bng_orientation(q: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """What BeamNG's state sensor reports of a chassis with MuJoCo quaternion q (w, x, y, z):
    (dir [3]: forward unit vector in the world, up [3]: up unit vector in the world, rotation:
    the BeamNG vehicle frame's quaternion as beamngpy's (x, y, z, w))."""
    import mujoco

    r = np.empty(9)
    mujoco.mju_quat2Mat(r, q)
    r = r.reshape(3, 3)
    qb = _quat_mul(q, _BODY_TO_BNG)
    return r[:, 0], r[:, 2], [float(qb[1]), float(qb[2]), float(qb[3]), float(qb[0])]


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (w, x, y, z) quaternions."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )
