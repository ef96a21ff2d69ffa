"""What s3 sends BeamNG.tech, as plain functions of s3's data (no connection here): the scenario
(`track_scenario`, `road_nodes`, `geometry_key`), the rotation convention (`yaw_to_rot_quat`), the friction Lua
chunks, bounded socket replies (`set_socket_timeout`) and the client's version (`sim_version`).
The adapter that drives BeamNG with them is s3.sim.beamng; the stand-in (s3.sim.beamng_standin)
accepts exactly these chunks.

Scenario. Each track geometry becomes one scenario on a flat level (`level`, default
"smallgrid"): one looped DecalRoad whose nodes are the track's road centre (centerline shifted
by (w_left - w_right)/2 along the normal) with width w_left + w_right, plus the vehicle at the
track's first centerline point, facing along it.

Ice patches (beamngpy has no friction API):
- `friction_mode: lua` (default). While the car's centre is on a patch, ONE fixed GE Lua chunk
  (`FRICTION_LUA`, sent with `bng.control.queue_lua_command`) scales the static and sliding
  friction of `ground_model` to (patch mu / track base_mu) times their values when s3 first
  touched them, through `core_environment.groundModels[name].cdata` and `be:setGroundModel` (also
  for its aliases); the same chunk with scale 1 restores them when the car leaves the patch, at
  reset and at close. Limitation: a ground model is global, so the whole level (every wheel, every
  surface using that ground model) turns icy at once, switched once per control period from the
  centre position, whereas the embedded simulator applies patches per wheel at every physics step.
  `ground_model` must name the ground model under the car on the chosen level (and road).
- `friction_mode: level`: nothing is sent; the user supplies a level whose materials are icy where
  s3's track has patches (and lays the track there with `origin`). Limitation: s3 cannot check that
  the level's ice matches its patches; the friction labels still come from s3's geometry.
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from s3.sim.base import SimulatorError

if TYPE_CHECKING:
    from s3.sim.beamng_params import BeamngParams
    from s3.tracks.track import Track

# The one GE Lua chunk s3 sends (lua friction mode). Placeholders: {gm} the ground model name
# (A-Z, 0-9, _), {scale} the friction factor relative to the values first seen, as "%.6f".
# `s3_mu0` (a raw global in the GE VM) keeps those first-seen values so that restoring is exact.
FRICTION_LUA = (
    "local n, k = '{gm}', {scale} "
    "local G = core_environment.groundModels "
    "local gm = G[n] "
    "if not gm then error('s3: unknown ground model ' .. n) end "
    "local s = rawget(_G, 's3_mu0') or {{}} "
    "rawset(_G, 's3_mu0', s) "
    "s[n] = s[n] or {{gm.cdata.staticFrictionCoefficient, gm.cdata.slidingFrictionCoefficient}} "
    "gm.cdata.staticFrictionCoefficient = s[n][1] * k "
    "gm.cdata.slidingFrictionCoefficient = s[n][2] * k "
    "for name, g in pairs(G) do if name == n or g.parent == n then be:setGroundModel(name, gm.cdata) end end"
)


def set_socket_timeout(conn: Any, seconds: float, what: str) -> None:
    """Bound every reply on a beamngpy Connection to `seconds`. beamngpy 1.36's public API sets one
    timeout per BeamNGpy at construction (`socket_timeout`) and none on vehicle connections; this
    sets it on a live Connection (its `timeout`, and the `settimeout` of the socket under its
    PrefixedLengthSocket `skt`), and stops loudly if those internals are not there, rather than
    leave the connection without a bound. docs/beamng.md: timeouts."""
    skt = getattr(conn, "skt", None)
    raw = getattr(skt, "skt", None)
    if conn is None or skt is None or not hasattr(raw, "settimeout"):
        import beamngpy

        raise SimulatorError(
            f"cannot bound {what} to {seconds:g} s: beamngpy {str(beamngpy.__version__).strip()} no longer has "
            "Connection.skt.skt (s3 follows beamngpy 1.36); a frozen BeamNG.tech would hang s3"
        )
    conn.timeout = skt.timeout = seconds
    raw.settimeout(seconds)


# The read-back after each switch (sent with a response): the factors by which the ENGINE's copy of
# the ground model (be:getGroundModelByID, as core_environment.dumpGroundModels reads it) differs
# from the values s3 first saw, as "%.6f %.6f" (static, sliding); "unset" or "missing" otherwise.
FRICTION_CHECK_LUA = (
    "local n = '{gm}' "
    "local s = rawget(_G, 's3_mu0') "
    "local o = s and s[n] "
    "if not o then return 'unset' end "
    "for i = 0, be:getGroundModelCount() do "
    "local g = be:getGroundModelByID(i) "
    "if g and g.data then g = g.data end "
    "if g and g.name == n then "
    "return string.format('%.6f %.6f', g.staticFrictionCoefficient / o[1], g.slidingFrictionCoefficient / o[2]) end "
    "end "
    "return 'missing'"
)
FRICTION_CHECK_TOLERANCE = 1e-4


def friction_lua(ground_model: str, scale: float) -> str:
    """The friction chunk for `ground_model` scaled by `scale` (1 restores the original)."""
    return FRICTION_LUA.format(gm=ground_model, scale=f"{scale:.6f}")


def friction_check_lua(ground_model: str) -> str:
    """The read-back chunk for `ground_model` (FRICTION_CHECK_LUA)."""
    return FRICTION_CHECK_LUA.format(gm=ground_model)


def sim_version() -> str:
    """Client library and wire protocol, the provenance of BeamNG data (imports beamngpy)."""
    import beamngpy
    from beamngpy.connection import Connection

    return f"beamngpy {str(beamngpy.__version__).strip()} (protocol {Connection.PROTOCOL_VERSION})"


def yaw_to_rot_quat(yaw: float, safe_spawn: bool) -> tuple[float, float, float, float]:
    """The rotation (x, y, z, w) to send with Teleport so that BeamNG's State `dir` is
    (cos yaw, sin yaw, 0), from BeamNG's Lua (docs/beamng.md, "Conventions"): `quat * vec3` rotates
    by the inverse of the textbook quaternion (mathlib.lua LuaQuat.__mul), a vehicle faces its
    local -Y (spawn.lua localVehForward), and techCore's handleTeleport passes the rotation on as
    sent, except that with safe_spawn spawn.safeTeleport first turns it by quat(0, 0, 1, 0).

    safe_spawn: quatFromDir((cos yaw, sin yaw, 0)) = (0, 0, sin(pi/4 - yaw/2), cos(pi/4 - yaw/2)).
    without:    that turned back by 180 deg = (0, 0, -sin(pi/4 + yaw/2), cos(pi/4 + yaw/2))."""
    if safe_spawn:
        half = 0.25 * math.pi - 0.5 * yaw
        return (0.0, 0.0, math.sin(half), math.cos(half))
    half = 0.25 * math.pi + 0.5 * yaw
    return (0.0, 0.0, -math.sin(half), math.cos(half))


def wrap_angle(a: float) -> float:
    """Wrap to (-pi, pi]."""
    return float(math.pi - np.mod(math.pi - a, 2.0 * math.pi))


def road_nodes(track: Track, origin: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> list[tuple[float, ...]]:
    """DecalRoad nodes (x, y, z, width) of a track in the level: the road's middle and full width."""
    xy = np.asarray(track.centerline, dtype=np.float64)
    h = np.asarray(track.heading, dtype=np.float64)
    shift = 0.5 * (track.w_left - track.w_right)
    mid = xy + shift[:, None] * np.stack([-np.sin(h), np.cos(h)], axis=1)
    width = track.w_left + track.w_right
    return [
        (float(x + origin[0]), float(y + origin[1]), float(origin[2]), float(w))
        for (x, y), w in zip(mid, width, strict=True)
    ]


def geometry_key(track: Track) -> str:
    """Identity of a track's road geometry (patches excluded)."""
    h = hashlib.sha1()
    for arr in (track.centerline, track.w_left, track.w_right):
        h.update(np.ascontiguousarray(arr, dtype=np.float64).tobytes())
    return h.hexdigest()[:12]


def track_scenario(track: Track, key: str, p: BeamngParams) -> tuple[Any, Any]:
    """The beamngpy Scenario of `track`'s road (geometry `key`) and its Vehicle (electrics attached),
    not yet made or loaded (imports beamngpy)."""
    from beamngpy import Road, Scenario, Vehicle
    from beamngpy.sensors import Electrics

    scenario = Scenario(p.level, f"s3_{key}", description="s3 track (generated)")
    road = Road(p.road_material, rid=f"s3_road_{key}", looped=True)
    road.add_nodes(*road_nodes(track, p.origin))
    scenario.add_road(road)
    options = {"part_config": p.part_config} if p.part_config else {}
    vehicle = Vehicle(p.vehicle_id, model=p.vehicle_model, license="S3", **options)
    vehicle.sensors.attach("electrics", Electrics())
    x0, y0 = track.centerline[0] + np.array(p.origin[:2], dtype=np.float64)
    scenario.add_vehicle(
        vehicle,
        pos=(float(x0), float(y0), p.origin[2]),
        rot_quat=yaw_to_rot_quat(float(track.heading[0]), safe_spawn=False),
    )
    return scenario, vehicle
