"""The requests the stand-in answers: one handler per beamngpy message type, per kind of socket.

Exactly the messages `s3.sim.beamng` makes beamngpy send are here; the server answers any other
type with `Unknown message type`. A handler checks the request's fields, acts on the server's
`World` and returns the reply (BeamNG's reply type; `_id` is added by the server; `_close`:
hang up after replying) or None for no reply. It raises `ProtocolError` for a bad request. GE
Lua is accepted only in the exact form of `s3.sim.beamng_wire.FRICTION_LUA`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from s3.sim.beamng_standin.wire import ProtocolError
from s3.sim.beamng_wire import FRICTION_CHECK_LUA, FRICTION_LUA

if TYPE_CHECKING:
    from s3.sim.beamng_standin.server import BeamngStandin

Handler = Callable[["BeamngStandin", dict[str, Any]], dict[str, Any] | None]


def _lua_pattern(template: str, **groups: str) -> re.Pattern[str]:
    """The exact text of one of s3's Lua templates, its placeholders captured by the given regexes."""
    probe = template.format(**{k: f"@@{k}@@" for k in groups})
    rx = re.escape(probe)
    for k, pattern in groups.items():
        rx = rx.replace(f"@@{k}@@", f"(?P<{k}>{pattern})")
    return re.compile(rx)


FRICTION_RE = _lua_pattern(
    FRICTION_LUA, gm=r"[A-Za-z0-9_]+", scale=r"\d+\.\d{6}"
)  # the friction chunk: ground model, scale
FRICTION_CHECK_RE = _lua_pattern(FRICTION_CHECK_LUA, gm=r"[A-Za-z0-9_]+")  # the read-back chunk: ground model


# -- main socket ---------------------------------------------------------------------------------
def _system_info(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    return {"type": "GetSystemInfo", "os": {"type": "Linux", "name": "s3 BeamNG stand-in"}, "tech": True}


def _paths(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    return {"type": "GetEnvironmentPaths", "home": "/s3-standin/home", "user": "/s3-standin/user/0.39"}


def _create(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    level, name, prefab = msg.get("level"), msg.get("name"), msg.get("prefab")
    if not (isinstance(level, str) and isinstance(name, str) and isinstance(prefab, str)):
        raise ProtocolError("CreateScenario needs str level, name and prefab")
    return {"type": "CreateScenario", "result": srv.world.create_scenario(level, name, prefab)}


def _load(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    srv.world.load_scenario(msg.get("path"))
    srv.close_vehicle_sockets()
    srv.world.spawn()
    return {"type": "MapLoaded"}


def _vehicles(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    v = srv.world.vehicle()
    info = {"id": 1000, "name": v["name"], "model": v["jBeam"]}
    return {"type": "GetCurrentVehicles", "result": {v["name"]: info}}


def _player(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    v = srv.world.vehicle()
    return {"type": "getPlayerVehicleID", "id": 1000, "vid": v["name"]}


def _vehicle_connection(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    v = srv.world.vehicle()
    if msg.get("vid") != v["name"]:
        raise ProtocolError(f"StartVehicleConnection: no vehicle {msg.get('vid')!r} in the scenario")
    return {"type": "StartVehicleConnection", "vid": v["name"], "result": srv.open_vehicle_socket(v["name"])}


def _start(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    srv.world.start_scenario()
    return {"type": "ScenarioStarted"}


def _stop(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    srv.world.stop_scenario()
    return {"type": "ScenarioStopped"}


def _deterministic(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    srv.world.deterministic = True
    return {"type": "SetPhysicsDeterministic"}


def _fps(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    fps = msg.get("fps")
    if not isinstance(fps, int) or fps <= 0:
        raise ProtocolError(f"FPSLimit: fps must be a positive int, got {fps!r}")
    srv.world.set_fps(fps)
    return {"type": "SetFPSLimit"}


def _pause(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    srv.world.paused = True
    return {"type": "Paused"}


def _resume(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    srv.world.paused = False
    return {"type": "Resumed"}


def _step(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any] | None:
    count = msg.get("count")
    if not isinstance(count, int) or count < 1:
        raise ProtocolError(f"Step: count must be a positive int, got {count!r}")
    srv.world.step(count)
    return {"type": "Stepped"} if msg.get("ack", True) else None


def _teleport(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    v = srv.world.vehicle()
    if msg.get("vehicle") != v["name"]:
        raise ProtocolError(f"Teleport: no vehicle {msg.get('vehicle')!r}")
    if not msg.get("reset", True):
        raise ProtocolError("Teleport: the stand-in supports only reset=True")
    pos = msg.get("pos")
    if not (isinstance(pos, (list, tuple)) and len(pos) == 3):
        raise ProtocolError("Teleport: pos must be (x, y, z)")
    rot = msg.get("rot")
    if rot is not None and not (
        isinstance(rot, (list, tuple)) and len(rot) == 4 and all(isinstance(v, (int, float)) for v in rot)
    ):
        raise ProtocolError("Teleport: rot must be a quaternion (x, y, z, w)")
    srv.world.teleport(float(pos[0]), float(pos[1]), rot, bool(msg.get("safe_spawn", False)))
    return {"type": "Teleported", "success": True}


def _lua(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    """techCore's handleQueueLuaCommandGE: the chunk runs under pcall; with `resp` the reply carries
    tostring(its first return value) and a Lua error is a bngError, without it the error is only
    logged and the reply is a bare ACK."""
    chunk, want = msg.get("chunk"), bool(msg.get("resp", False))
    if not isinstance(chunk, str):
        raise ProtocolError("QueueLuaCommandGE: chunk must be a string")
    if (m := FRICTION_CHECK_RE.fullmatch(chunk)) is not None:
        srv.lua_log.append(chunk)
        return (
            {"type": "ExecutedLuaChunkGE", "resp": srv.world.ground_model_factors(m.group("gm"))}
            if want
            else {"type": "ExecutedLuaChunkGE"}
        )
    m = FRICTION_RE.fullmatch(chunk)
    if m is None:
        raise ProtocolError("QueueLuaCommandGE: the stand-in runs only s3's friction chunks")
    srv.lua_log.append(chunk)
    try:
        srv.world.scale_ground_model(m.group("gm"), float(m.group("scale")))
    except ProtocolError:
        if want:
            raise
        srv.errors.append(f"Lua error (logged by BeamNG only): unknown ground model {m.group('gm')}")
        return {"type": "ExecutedLuaChunkGE"}
    srv.world.apply_surface()
    return {"type": "ExecutedLuaChunkGE", "resp": "nil"} if want else {"type": "ExecutedLuaChunkGE"}


def _quit(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    srv.quit.set()
    return {"type": "Quit", "_close": True}


MAIN: dict[str, Handler] = {
    "GetSystemInfo": _system_info,
    "GetEnvironmentPaths": _paths,
    "CreateScenario": _create,
    "LoadScenario": _load,
    "GetCurrentVehicles": _vehicles,
    "GetPlayerVehicleID": _player,
    "StartVehicleConnection": _vehicle_connection,
    "StartScenario": _start,
    "StopScenario": _stop,
    "SetPhysicsDeterministic": _deterministic,
    "FPSLimit": _fps,
    "Pause": _pause,
    "Resume": _resume,
    "Step": _step,
    "Teleport": _teleport,
    "QueueLuaCommandGE": _lua,
    "Quit": _quit,
}


# -- vehicle socket ------------------------------------------------------------------------------
def _control(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    for key in ("steering", "throttle", "brake", "parkingbrake"):
        if key in msg:
            val = msg[key]
            if not isinstance(val, (int, float)) or not math.isfinite(val):
                raise ProtocolError(f"Control: {key} must be a finite number, got {val!r}")
            lo = -1.0 if key == "steering" else 0.0
            srv.world.control[key] = min(1.0, max(lo, float(val)))
    return {"type": "Controlled"}


def _set_velocity(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    v, dt = msg.get("velocity"), msg.get("dt", 1.0)
    if not isinstance(v, (int, float)) or not isinstance(dt, (int, float)) or dt <= 0:
        raise ProtocolError("SetVelocity: velocity and dt > 0 must be numbers")
    srv.world.ramp_speed(float(v), float(dt))
    return {"type": "VelocitySet"}


def _sensors(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    sensors = msg.get("sensors")
    if not isinstance(sensors, dict):
        raise ProtocolError("SensorRequest: sensors must be a map")
    data: dict[str, Any] = {}
    for name, req in sensors.items():
        kind = req.get("type") if isinstance(req, dict) else None
        if kind == "State":
            data[name] = {"state": srv.world.state_sensor()}
        elif kind == "Electrics":
            data[name] = {"values": srv.world.electrics()}
        else:
            raise ProtocolError(f"SensorRequest: the stand-in has no {kind!r} sensor")
    return {"type": "SensorData", "data": data}


def _shift_mode(srv: BeamngStandin, msg: dict[str, Any]) -> dict[str, Any]:
    return {"type": "ShiftModeSet"}


VEHICLE: dict[str, Handler] = {
    "Control": _control,
    "SensorRequest": _sensors,
    "SetVelocity": _set_velocity,
    "SetShiftMode": _shift_mode,
}
