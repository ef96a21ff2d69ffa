"""Every rotation the stand-in converts, written from BeamNG's own Lua (not from s3's adapter).

Sources (docs/beamng.md, "Conventions", has the quotes):
- `lua/common/mathlib.lua`, `LuaQuat.__mul`: quaternions are stored (x, y, z, w), as beamngpy
  sends them; `quat * quat` is the Hamilton product; `quat * vec3` is
  v - 2w (u x v) + 2 u x (u x v), u = (x, y, z): the INVERSE of the textbook rotation q v q*
  ("T3d's quats use -w"). So (a * b) * v = b * (a * v). `lua_rotate` below is that formula.
- `lua/common/mathlib.lua`, `LuaQuat:setFromDir` (`quatFromDir(dir, up)`): the q with
  q * (0, 1, 0) = dir and q * (0, 0, 1) = up.
- `lua/ge/spawn.lua`: a vehicle's forward is its local -Y (`localVehForward = vec3(0, -1, 0)`);
  `safeTeleport` first turns the asked rotation by `quat(0, 0, 1, 0)` (180 deg about z; with no
  rotation it uses quat(0, 0, 0, -1)), then places the car with it.
- `lua/ge/extensions/tech/techCore.lua`, `M.handleTeleport`: `safe_spawn` -> safeTeleport;
  otherwise `reset` -> `veh:setPositionRotation(pos, rot)` with the rotation as sent; no rotation
  -> the vehicle's current one.
- `lua/vehicle/extensions/tech/techCore.lua`, `getVehicleState`: `dir = obj:getDirectionVector()`,
  `up = obj:getDirectionVectorUp()`, `rotation = quat(obj:getRotation())`; for an object rotation
  Q that is dir = Q * (0, -1, 0) and up = Q * (0, 0, 1) (forward is local -Y).

Read on the Lua of BeamNG.tech with techCore protocol v1.26 (wlkmanist/BeamNG_lua@edc1c5f);
beamngpy 1.36 speaks v1.27. MuJoCo's chassis: +x forward, +y left, +z up, orientation
qpos[3:7] as (w, x, y, z). Yaw: radians CCW from world +x, the car's heading.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FLIP = (0.0, 0.0, 1.0, 0.0)  # quat(0, 0, 1, 0): spawn.safeTeleport's 180 deg turn about z
NO_ROTATION = (0.0, 0.0, 0.0, -1.0)  # safeTeleport's rotation when none is given
FORWARD = np.array([0.0, -1.0, 0.0])  # a vehicle's forward, in its own frame
UP = np.array([0.0, 0.0, 1.0])


def lua_mul(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    """BeamNG's `quat * quat` (mathlib.lua LuaQuat.__mul): the Hamilton product, (x, y, z, w)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by + ay * bw + az * bx - ax * bz,
        aw * bz + az * bw + ax * by - ay * bx,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def lua_rotate(q: Sequence[float], v: Sequence[float]) -> np.ndarray:
    """BeamNG's `quat * vec3` (mathlib.lua LuaQuat.__mul): qv = 2 (u x v); v - w qv + u x qv."""
    u, w, v = np.asarray(q[:3], dtype=np.float64), float(q[3]), np.asarray(v, dtype=np.float64)
    qv = 2.0 * np.cross(u, v)
    return v - w * qv + np.cross(u, qv)


def quat_from_dir(
    direction: Sequence[float], up: Sequence[float] = (0.0, 0.0, 1.0)
) -> tuple[float, float, float, float]:
    """mathlib.lua `quatFromDir(dir, up)` (LuaQuat:setFromDir): the q whose textbook matrix has rows
    (dir x up, dir, up'), so that BeamNG's q * (0, 1, 0) = dir and q * (0, 0, 1) = up'."""
    d = np.asarray(direction, dtype=np.float64)
    d = d / np.linalg.norm(d)
    right = np.cross(d, np.asarray(up, dtype=np.float64))
    right = right / np.linalg.norm(right)
    m = np.stack([right, d, np.cross(right, d)])
    return _quat_from_matrix(m)


def _quat_from_matrix(m: np.ndarray) -> tuple[float, float, float, float]:
    """The (x, y, z, w) quaternion of a rotation matrix, textbook (Hamilton) convention, w >= 0."""
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0.0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = ((m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s)
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k])
        v = [0.0, 0.0, 0.0]
        v[i], v[j], v[k] = 0.25 * s, (m[j, i] + m[i, j]) / s, (m[k, i] + m[i, k]) / s
        q = (v[0], v[1], v[2], (m[k, j] - m[j, k]) / s)
    x, y, z, w = q
    return (-x, -y, -z, -w) if w < 0 else (x, y, z, w)


def teleport_rotation(
    rot: Sequence[float] | None, safe_spawn: bool, current: Sequence[float]
) -> tuple[float, float, float, float]:
    """The vehicle's object rotation after techCore's Teleport with reset (handleTeleport):
    safe_spawn -> spawn.safeTeleport's quat(0, 0, 1, 0) * rot (rot or quat(0, 0, 0, -1));
    otherwise the rotation as sent, or `current` without one."""
    if safe_spawn:
        return lua_mul(FLIP, rot if rot is not None else NO_ROTATION)
    return tuple(float(v) for v in (rot if rot is not None else current))  # type: ignore[return-value]


def heading(q: Sequence[float]) -> float:
    """Yaw of the direction vector BeamNG's State sensor reports for object rotation q."""
    d = lua_rotate(q, FORWARD)
    return math.atan2(d[1], d[0])


def object_rotation(yaw: float) -> tuple[float, float, float, float]:
    """The object rotation of an upright vehicle heading `yaw`: its local -Y along the heading."""
    return quat_from_dir((-math.cos(yaw), -math.sin(yaw), 0.0))


def yaw_from_matrix(m: list[float]) -> float:
    """Heading of a prefab vehicle from its row-major `rotationMatrix` (beamngpy's
    quat_as_rotation_mat_str of the rotation it was added with), read as that rotation. How the
    engine reads a prefab's matrix (transposed or not) is C++ and not in the sources: s3's adapter
    never relies on the spawn pose (every episode starts with a checked Teleport)."""
    r = np.asarray(m, dtype=np.float64).reshape(3, 3)
    return heading(_quat_from_matrix(r))


def chassis_yaw(q: np.ndarray) -> float:
    """Heading of the chassis from its MuJoCo (w, x, y, z) quaternion."""
    return math.atan2(2.0 * (q[0] * q[3] + q[1] * q[2]), 1.0 - 2.0 * (q[2] * q[2] + q[3] * q[3]))


def bng_orientation(q: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """What BeamNG's State sensor reports of a chassis with MuJoCo quaternion q (w, x, y, z):
    (dir [3]: forward unit vector in the world, up [3]: up unit vector in the world, rotation:
    the object rotation (x, y, z, w) with rotation * (0, -1, 0) = dir, rotation * (0, 0, 1) = up)."""
    import mujoco

    r = np.empty(9)
    mujoco.mju_quat2Mat(r, q)
    r = r.reshape(3, 3)
    fwd, up = r[:, 0], r[:, 2]
    return fwd, up, [float(v) for v in quat_from_dir(-fwd, up)]
