"""A loopback stand-in for BeamNG.tech's research port, for testing the BeamNG adapter end to end.

BeamNG.tech is licensed and cannot run here, so the adapter (`s3.sim.beamng`) is exercised through
the real beamngpy client against this server. It speaks beamngpy 1.36's wire protocol: every
frame is a 4-byte big-endian length and a msgpack map with `type` and `_id`; the first message
on every socket must be `Hello` with protocol "v1.27"; replies echo `_id` and carry BeamNG's reply
type; a reply with `bngError` makes beamngpy raise. Each vehicle gets its own socket, announced
by `StartVehicleConnection` on the main one. It implements exactly the messages the adapter makes
beamngpy send; anything else is answered with a `bngError` (never left hanging).

Strictness (so a client-side mistake fails a test): wrong protocol version -> a Hello reply with
the stand-in's version (beamngpy raises on the mismatch), then the socket is closed; a first
message other than Hello, a missing or out-of-sequence `_id` (the stand-in requires 0, 1, 2, ...
per socket, stricter than BeamNG, which only echoes it) -> `bngError` and close; stepping before
deterministic mode, or while not paused, or without a started scenario -> `bngError`.

Physics is the embedded `MujocoCar` (one car, one world shared by all sockets), with BeamNG's
conventions on the wire: world x/y/z unchanged, vehicle forward = local -Y, `dir`/`vel` in the
world frame, steering input +1 = right, electrics `steering` = steering-wheel degrees (+ = left),
`wheelspeed` = one value (the mean of the four wheels). A deterministic step is 1 /
steps_per_second of MuJoCo time (`FPSLimit` must make that a whole number of MuJoCo steps). The
road of `CreateScenario`'s prefab is parsed into an `s3.tracks.track.Track` (`standin.track`); the
flat level is one surface whose ground model (`surface`, "ASPHALT") gives the car its friction:
mu = car default_mu * static friction / original static friction. GE Lua is accepted only in the
exact form of `s3.sim.beamng.FRICTION_LUA`. `SetVelocity(v, dt)` ramps the forward speed linearly
to v over dt seconds (BeamNG applies forces; the ramp is the stand-in's model of it).

Fault injection (for reliability tests): `drop_after_steps=K` hangs up every open socket, without
replying, when the K-th `Step` request since start arrives, `drops` times in all (K more `Step`s
apart); the listening sockets stay open, so a client can reconnect and start over, as with a
BeamNG.tech that was restarted. `dropped` counts the hang-ups.

Start it from tests as a context manager (`with BeamngStandin() as s: s.port`) or from a shell:
`python -m s3.sim.beamng_standin --port 25252 [--drop-after-steps K [--drops N]]`. It binds
127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from s3.sim.base import Control
from s3.sim.beamng import FRICTION_LUA
from s3.sim.mujoco_car import MujocoCar
from s3.sim.params import MujocoCarParams
from s3.tracks.friction_grid import FrictionGrid
from s3.tracks.track import Track, TrackError

PROTOCOL_VERSION = "v1.27"  # beamngpy 1.36 / BeamNG.tech 0.39
STEERING_WHEEL_LOCK = 450.0  # deg of steering wheel at full input, the stand-in vehicle's
GROUND_MODELS = {  # name: (staticFrictionCoefficient, slidingFrictionCoefficient)
    "ASPHALT": (0.98, 0.70),
    "ICE": (0.10, 0.08),
    "GRASS": (0.70, 0.55),
}


def _lua_pattern() -> re.Pattern[str]:
    probe = FRICTION_LUA.format(gm="@@GM@@", scale="@@SCALE@@")
    rx = re.escape(probe).replace("@@GM@@", r"(?P<gm>[A-Za-z0-9_]+)").replace("@@SCALE@@", r"(?P<scale>\d+\.\d{6})")
    return re.compile(rx)


FRICTION_RE = _lua_pattern()


class ProtocolError(Exception):
    """A request the stand-in answers with a bngError (and, if `close`, then hangs up)."""

    def __init__(self, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.close = close


# -- framing ------------------------------------------------------------------------------------
def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        b = conn.recv(min(65536, n - got))
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def recv_frame(conn: socket.socket) -> Any:
    """One length-prefixed msgpack message, or None when the peer closed."""
    head = _recv_exactly(conn, 4)
    if head is None:
        return None
    body = _recv_exactly(conn, struct.unpack("!I", head)[0])
    if body is None:
        return None
    return msgpack.unpackb(body, raw=False, strict_map_key=False)


def send_frame(conn: socket.socket, msg: dict[str, Any]) -> None:
    body = msgpack.packb(msg, use_bin_type=True)
    conn.sendall(struct.pack("!I", len(body)) + body)


# -- prefab -------------------------------------------------------------------------------------
_TRAILING_COMMA = re.compile(r",\s*([\]}])")


def parse_prefab(prefab: str) -> list[dict[str, Any]]:
    """The objects of a beamngpy prefab: one JSON object per line, trailing commas allowed."""
    objects = []
    for k, line in enumerate(prefab.splitlines()):
        if not line.strip():
            continue
        try:
            obj = json.loads(_TRAILING_COMMA.sub(r"\1", line))
        except json.JSONDecodeError as e:
            raise ProtocolError(f"CreateScenario: prefab line {k + 1} is not a scene object ({e.msg})") from None
        if not isinstance(obj, dict) or "class" not in obj:
            raise ProtocolError(f"CreateScenario: prefab line {k + 1} has no class")
        objects.append(obj)
    return objects


def _yaw_from_matrix(m: list[float]) -> float:
    r = np.asarray(m, dtype=np.float64).reshape(3, 3)  # row-major, as beamngpy writes it
    fwd = r @ np.array([0.0, -1.0, 0.0])
    return math.atan2(fwd[1], fwd[0])


def _yaw_from_quat(q: list[float]) -> float:
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


_BODY_TO_BNG = np.array([math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)])  # Rz(+90 deg), (w, x, y, z)


@dataclass
class _Scenario:
    level: str
    name: str
    path: str
    roads: list[dict[str, Any]]
    vehicles: list[dict[str, Any]]


@dataclass
class _Ramp:
    start: float
    target: float
    duration: float
    elapsed: float = 0.0


@dataclass
class _Session:
    """Per-socket protocol state."""

    kind: str  # "main" or "vehicle"
    next_id: int = 0
    hello: bool = False
    vid: str | None = None


@dataclass
class _Listener:
    sock: socket.socket
    thread: threading.Thread
    conns: list[socket.socket] = field(default_factory=list)


class BeamngStandin:
    """The server. `start()` binds (port 0 = any free port) and serves in daemon threads."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        car_params: MujocoCarParams | None = None,
        surface: str = "ASPHALT",
        protocol_version: str = PROTOCOL_VERSION,
        drop_after_steps: int | None = None,
        drops: int = 1,
    ) -> None:
        if drop_after_steps is not None and drop_after_steps < 1:
            raise ValueError(f"drop_after_steps must be >= 1, got {drop_after_steps}")
        self.host = host
        self.drop_after_steps = drop_after_steps
        self._drops_left = drops if drop_after_steps is not None else 0
        self._steps_to_drop = drop_after_steps or 0
        self.dropped = 0
        self._want_port = port
        self.car_params = car_params or MujocoCarParams()
        self.protocol_version = protocol_version
        self.surface = surface
        self.ground_models = {k: list(v) for k, v in GROUND_MODELS.items()}
        self._ground_models0 = {k: tuple(v) for k, v in GROUND_MODELS.items()}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._main: _Listener | None = None
        self._vehicle_listeners: dict[str, _Listener] = {}
        # world
        self.scenarios: dict[str, _Scenario] = {}
        self.scenario: _Scenario | None = None
        self.track: Track | None = None
        self.started = False
        self.paused = False
        self.deterministic = False
        self.fps: int | None = None
        self.car: MujocoCar | None = None
        self._car_fps: int | None = None
        self.control = {"steering": 0.0, "throttle": 0.0, "brake": 0.0, "parkingbrake": 0.0}
        self._ramp: _Ramp | None = None
        self._spawn = (0.0, 0.0, 0.0)
        self.steps_taken = 0
        # what happened (for tests)
        self.received: list[str] = []  # message types, in arrival order
        self.lua_log: list[str] = []
        self.friction_log: list[tuple[int, float]] = []  # (steps_taken, car mu) at each friction change
        self.errors: list[str] = []
        self.quit = threading.Event()

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._main is None:
            raise RuntimeError("stand-in not started")
        return self._main.sock.getsockname()[1]

    @property
    def mu(self) -> float:
        """Peak friction the car currently gets from the surface."""
        static0 = self._ground_models0[self.surface][0]
        return self.car_params.default_mu * self.ground_models[self.surface][0] / static0

    def start(self) -> BeamngStandin:
        self._main = self._listen(self._want_port, "main", None)
        return self

    def stop(self) -> None:
        self._stop.set()
        listeners = [self._main, *self._vehicle_listeners.values()]
        for lst in listeners:
            if lst is not None:
                self._close_listener(lst)
        for lst in listeners:
            if lst is not None:
                lst.thread.join(timeout=2.0)

    def __enter__(self) -> BeamngStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Block until Quit, stop() or a signal."""
        while not self._stop.is_set() and not self.quit.is_set():
            self._stop.wait(0.2)
        self.stop()

    # -- sockets ----------------------------------------------------------------------------
    def _listen(self, port: int, kind: str, vid: str | None) -> _Listener:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, port))
        sock.listen(8)
        lst = _Listener(sock, threading.Thread())
        lst.thread = threading.Thread(target=self._accept_loop, args=(lst, kind, vid), daemon=True, name=f"bng-{kind}")
        lst.thread.start()
        return lst

    def _close_listener(self, lst: _Listener) -> None:
        for c in [lst.sock, *lst.conns]:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept_loop(self, lst: _Listener, kind: str, vid: str | None) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = lst.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                lst.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, _Session(kind, vid=vid)), daemon=True, name=f"bng-{kind}-conn").start()

    def _serve(self, conn: socket.socket, sess: _Session) -> None:
        try:
            while not self._stop.is_set():
                try:
                    msg = recv_frame(conn)
                except (OSError, ValueError, msgpack.UnpackException):
                    return
                if msg is None:
                    return
                reply, close = self._answer(msg, sess)
                if reply is not None:
                    send_frame(conn, reply)
                if close:
                    return
        except OSError:
            return
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _answer(self, msg: Any, sess: _Session) -> tuple[dict[str, Any] | None, bool]:
        """The reply to one message and whether to hang up afterwards."""
        if not isinstance(msg, dict) or not isinstance(msg.get("_id"), int) or not isinstance(msg.get("type"), str):
            self.errors.append(f"malformed message {msg!r:.80}")
            rid = msg.get("_id") if isinstance(msg, dict) else None
            return {"_id": rid, "bngError": "malformed request: expected a map with str 'type' and int '_id'"}, True
        rid, kind = msg["_id"], msg["type"]
        with self._lock:
            self.received.append(kind)
            if kind == "Step" and self._drop_due():
                self._hang_up()
                return None, True
        if rid != sess.next_id:
            self.errors.append(f"{kind}: _id {rid}, expected {sess.next_id}")
            return {"_id": rid, "bngError": f"request id {rid} out of sequence (expected {sess.next_id})"}, True
        sess.next_id += 1
        if not sess.hello:
            if kind != "Hello":
                self.errors.append(f"{kind} before Hello")
                return {"_id": rid, "bngError": f"the first message must be Hello, got {kind}"}, True
            sess.hello = True
            ok = msg.get("protocolVersion") == self.protocol_version
            if not ok:
                self.errors.append(f"protocol {msg.get('protocolVersion')!r} != {self.protocol_version!r}")
            return {"_id": rid, "type": "Hello", "protocolVersion": self.protocol_version}, not ok
        handlers = self._main_handlers if sess.kind == "main" else self._vehicle_handlers
        handler = handlers().get(kind)
        if handler is None:
            self.errors.append(f"unknown {sess.kind} message {kind}")
            return {"_id": rid, "bngError": f"Unknown message type: {kind}"}, False
        try:
            with self._lock:
                reply = handler(msg, sess)
        except ProtocolError as e:
            self.errors.append(f"{kind}: {e}")
            return {"_id": rid, "bngError": str(e)}, e.close
        except Exception as e:
            self.errors.append(f"{kind}: {type(e).__name__}: {e}")
            return {"_id": rid, "bngError": f"stand-in failure in {kind}: {type(e).__name__}: {e}"}, False
        if reply is None:
            return None, False
        reply["_id"] = rid
        close = bool(reply.pop("_close", False))
        return reply, close

    def _drop_due(self) -> bool:
        """Count a Step request; True when the injected connection drop is due now."""
        if self._drops_left <= 0:
            return False
        self._steps_to_drop -= 1
        if self._steps_to_drop > 0:
            return False
        self._drops_left -= 1
        self._steps_to_drop = self.drop_after_steps or 0
        self.dropped += 1
        return True

    def _hang_up(self) -> None:
        """Close every accepted connection (main and vehicle), as a crashed simulator would."""
        for lst in [self._main, *self._vehicle_listeners.values()]:
            if lst is None:
                continue
            for c in list(lst.conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            lst.conns.clear()

    # -- handlers ---------------------------------------------------------------------------
    def _main_handlers(self) -> dict[str, Callable[[dict[str, Any], _Session], dict[str, Any] | None]]:
        return {
            "GetSystemInfo": self._h_system_info,
            "GetEnvironmentPaths": self._h_paths,
            "CreateScenario": self._h_create,
            "LoadScenario": self._h_load,
            "GetCurrentVehicles": self._h_vehicles,
            "GetPlayerVehicleID": self._h_player,
            "StartVehicleConnection": self._h_vehicle_connection,
            "StartScenario": self._h_start,
            "StopScenario": self._h_stop,
            "SetPhysicsDeterministic": self._h_deterministic,
            "FPSLimit": self._h_fps,
            "Pause": lambda m, s: self._set_paused(True, "Paused"),
            "Resume": lambda m, s: self._set_paused(False, "Resumed"),
            "Step": self._h_step,
            "Teleport": self._h_teleport,
            "QueueLuaCommandGE": self._h_lua,
            "Quit": self._h_quit,
        }

    def _vehicle_handlers(self) -> dict[str, Callable[[dict[str, Any], _Session], dict[str, Any] | None]]:
        return {
            "Control": self._h_control,
            "SensorRequest": self._h_sensors,
            "SetVelocity": self._h_set_velocity,
            "SetShiftMode": lambda m, s: {"type": "ShiftModeSet"},
        }

    def _h_system_info(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        return {"type": "GetSystemInfo", "os": {"type": "Linux", "name": "s3 BeamNG stand-in"}, "tech": True}

    def _h_paths(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        return {"type": "GetEnvironmentPaths", "home": "/s3-standin/home", "user": "/s3-standin/user/0.39"}

    def _h_create(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        level, name, prefab = msg.get("level"), msg.get("name"), msg.get("prefab")
        if not (isinstance(level, str) and isinstance(name, str) and isinstance(prefab, str)):
            raise ProtocolError("CreateScenario needs str level, name and prefab")
        objects = parse_prefab(prefab)
        roads = [o for o in objects if o["class"] == "DecalRoad"]
        vehicles = [o for o in objects if o["class"] == "BeamNGVehicle"]
        for v in vehicles:
            if len(v.get("position", [])) != 3 or len(v.get("rotationMatrix", [])) != 9:
                raise ProtocolError(f"CreateScenario: vehicle {v.get('name')!r} lacks position or rotationMatrix")
        path = f"/levels/{level}/scenarios/{name}/{name}.json"
        self.scenarios[path] = _Scenario(level, name, path, roads, vehicles)
        return {"type": "CreateScenario", "result": path}

    def _h_load(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        sc = self.scenarios.get(msg.get("path", ""))
        if sc is None:
            raise ProtocolError(f"LoadScenario: no scenario at {msg.get('path')!r}")
        if len(sc.vehicles) != 1:
            raise ProtocolError(f"the stand-in simulates exactly one vehicle, the scenario has {len(sc.vehicles)}")
        self.scenario = sc
        self.track = self._road_track(sc)
        self.started = self.paused = False
        for lst in self._vehicle_listeners.values():
            self._close_listener(lst)
        self._vehicle_listeners.clear()
        v = sc.vehicles[0]
        self._spawn = (float(v["position"][0]), float(v["position"][1]), _yaw_from_matrix(v["rotationMatrix"]))
        if self.fps is not None:
            self._place(*self._spawn)
        return {"type": "MapLoaded"}

    def _road_track(self, sc: _Scenario) -> Track | None:
        if not sc.roads:
            return None
        nodes = np.asarray(sc.roads[0].get("nodes", []), dtype=np.float64)
        if nodes.ndim != 2 or nodes.shape[1] != 4:
            raise ProtocolError("DecalRoad nodes must be [x, y, z, width] rows")
        try:
            return Track(sc.roads[0].get("name", "road"), nodes[:, :2], 0.5 * nodes[:, 3], 0.5 * nodes[:, 3])
        except TrackError as e:
            raise ProtocolError(f"road is not a drivable loop: {e}") from None

    def _vehicle_info(self) -> dict[str, Any]:
        if self.scenario is None:
            raise ProtocolError("no scenario loaded")
        return self.scenario.vehicles[0]

    def _h_vehicles(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        v = self._vehicle_info()
        info = {"id": 1000, "name": v["name"], "model": v["jBeam"]}
        return {"type": "GetCurrentVehicles", "result": {v["name"]: info}}

    def _h_player(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        v = self._vehicle_info()
        return {"type": "getPlayerVehicleID", "id": 1000, "vid": v["name"]}

    def _h_vehicle_connection(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        v = self._vehicle_info()
        if msg.get("vid") != v["name"]:
            raise ProtocolError(f"StartVehicleConnection: no vehicle {msg.get('vid')!r} in the scenario")
        old = self._vehicle_listeners.pop(v["name"], None)
        if old is not None:
            self._close_listener(old)
        lst = self._listen(0, "vehicle", v["name"])
        self._vehicle_listeners[v["name"]] = lst
        return {"type": "StartVehicleConnection", "vid": v["name"], "result": lst.sock.getsockname()[1]}

    def _h_start(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        if self.scenario is None:
            raise ProtocolError("StartScenario: no scenario loaded")
        self.started, self.paused = True, False
        return {"type": "ScenarioStarted"}

    def _h_stop(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        self.scenario, self.started = None, False
        return {"type": "ScenarioStopped"}

    def _h_deterministic(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        self.deterministic = True
        return {"type": "SetPhysicsDeterministic"}

    def _h_fps(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        fps = msg.get("fps")
        if not isinstance(fps, int) or fps <= 0:
            raise ProtocolError(f"FPSLimit: fps must be a positive int, got {fps!r}")
        n = 1.0 / fps / self.car_params.timestep
        if abs(n - round(n)) > 1e-9:
            raise ProtocolError(f"the stand-in needs 1/fps to be whole {self.car_params.timestep} s MuJoCo steps")
        self.fps = fps
        return {"type": "SetFPSLimit"}

    def _set_paused(self, paused: bool, ack: str) -> dict[str, Any]:
        self.paused = paused
        return {"type": ack}

    def _h_step(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any] | None:
        count = msg.get("count")
        if not isinstance(count, int) or count < 1:
            raise ProtocolError(f"Step: count must be a positive int, got {count!r}")
        if not self.started:
            raise ProtocolError("Step: no scenario running")
        if not (self.deterministic and self.fps):
            raise ProtocolError("Step: set deterministic mode and steps per second first")
        if not self.paused:
            raise ProtocolError("Step: pause the simulation first")
        car = self._car()
        cmd = Control(-float(self.control["steering"]), float(self.control["throttle"]), float(self.control["brake"]))
        h = 1.0 / self.fps
        for _ in range(count):
            r = self._ramp
            if r is not None:  # the ramp's speed at mid-step: the distance covered is exact for a linear ramp
                self._set_forward_speed(r.start + (r.target - r.start) * min(1.0, (r.elapsed + 0.5 * h) / r.duration))
            car.step(cmd)
            self.steps_taken += 1
            if r is not None:
                r.elapsed += h
                if r.elapsed >= r.duration - 1e-9:
                    self._set_forward_speed(r.target)
                    self._ramp = None
        return {"type": "Stepped"} if msg.get("ack", True) else None

    def _h_teleport(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        v = self._vehicle_info()
        if msg.get("vehicle") != v["name"]:
            raise ProtocolError(f"Teleport: no vehicle {msg.get('vehicle')!r}")
        if not msg.get("reset", True):
            raise ProtocolError("Teleport: the stand-in supports only reset=True")
        pos = msg.get("pos")
        if not (isinstance(pos, (list, tuple)) and len(pos) == 3):
            raise ProtocolError("Teleport: pos must be (x, y, z)")
        rot = msg.get("rot")
        yaw = _yaw_from_quat(rot) if rot is not None else self._yaw()
        self._place(float(pos[0]), float(pos[1]), yaw)
        return {"type": "Teleported", "success": True}

    def _h_lua(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        chunk = msg.get("chunk")
        m = FRICTION_RE.fullmatch(chunk) if isinstance(chunk, str) else None
        if m is None:
            raise ProtocolError("QueueLuaCommandGE: the stand-in runs only s3's friction template")
        gm, scale = m.group("gm"), float(m.group("scale"))
        if gm not in self.ground_models:
            raise ProtocolError(f"Lua error: s3: unknown ground model {gm}")
        s0, k0 = self._ground_models0[gm]
        self.ground_models[gm] = [s0 * scale, k0 * scale]
        self.lua_log.append(chunk)
        self._apply_surface()
        return {"type": "ExecutedLuaChunkGE"}

    def _h_quit(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        self.quit.set()
        return {"type": "Quit", "_close": True}

    # vehicle socket
    def _h_control(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        for key in ("steering", "throttle", "brake", "parkingbrake"):
            if key in msg:
                val = msg[key]
                if not isinstance(val, (int, float)) or not math.isfinite(val):
                    raise ProtocolError(f"Control: {key} must be a finite number, got {val!r}")
                lo = -1.0 if key == "steering" else 0.0
                self.control[key] = min(1.0, max(lo, float(val)))
        return {"type": "Controlled"}

    def _h_set_velocity(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        v, dt = msg.get("velocity"), msg.get("dt", 1.0)
        if not isinstance(v, (int, float)) or not isinstance(dt, (int, float)) or dt <= 0:
            raise ProtocolError("SetVelocity: velocity and dt > 0 must be numbers")
        car = self._car()
        st = car._state()
        self._ramp = _Ramp(float(st.vx), float(v), float(dt))
        return {"type": "VelocitySet"}

    def _h_sensors(self, msg: dict[str, Any], sess: _Session) -> dict[str, Any]:
        sensors = msg.get("sensors")
        if not isinstance(sensors, dict):
            raise ProtocolError("SensorRequest: sensors must be a map")
        data: dict[str, Any] = {}
        for name, req in sensors.items():
            kind = req.get("type") if isinstance(req, dict) else None
            if kind == "State":
                data[name] = {"state": self._state_sensor()}
            elif kind == "Electrics":
                data[name] = {"values": self._electrics()}
            else:
                raise ProtocolError(f"SensorRequest: the stand-in has no {kind!r} sensor")
        return {"type": "SensorData", "data": data}

    # -- the car ----------------------------------------------------------------------------
    def _car(self) -> MujocoCar:
        if self.fps is None:
            raise ProtocolError("set steps per second (FPSLimit) first")
        if self.car is None or self._car_fps != self.fps:
            self.car = MujocoCar(self.car_params, control_dt=1.0 / self.fps)
            self._car_fps = self.fps
            self._apply_surface()
            if self.scenario is not None:
                x, y, yaw = self._spawn
                self.car.reset(None, x, y, yaw, 0.0)
        return self.car

    def _place(self, x: float, y: float, yaw: float) -> None:
        car = self._car()
        car.reset(None, x, y, yaw, 0.0)
        self.control.update(steering=0.0, throttle=0.0, brake=0.0)
        self._ramp = None

    def _apply_surface(self) -> None:
        if self.car is not None:
            self.car.set_friction_grid(FrictionGrid.uniform(self.mu))
            self.friction_log.append((self.steps_taken, self.mu))

    def _yaw(self) -> float:
        q = self._car().data.qpos[3:7]
        return math.atan2(2.0 * (q[0] * q[3] + q[1] * q[2]), 1.0 - 2.0 * (q[2] * q[2] + q[3] * q[3]))

    def _set_forward_speed(self, v: float) -> None:
        """SetVelocity's effect: the chassis' forward speed becomes v, wheels rolling with it."""
        car = self._car()
        d, yaw = car.data, self._yaw()
        f = np.array([math.cos(yaw), math.sin(yaw)])
        d.qvel[0:2] += (v - float(d.qvel[0:2] @ f)) * f
        d.qvel[car._spin_dof] = v / car.params.wheel_radius

    def _rot(self) -> np.ndarray:
        import mujoco

        r = np.empty(9)
        mujoco.mju_quat2Mat(r, self._car().data.qpos[3:7])
        return r.reshape(3, 3)

    def _state_sensor(self) -> dict[str, Any]:
        car = self._car()
        d, r = car.data, self._rot()
        q = _quat_mul(d.qpos[3:7], _BODY_TO_BNG)  # BeamNG vehicle frame: +X left, +Y back, +Z up
        pos = d.qpos[0:3]
        return {
            "time": float(d.time),
            "pos": [float(v) for v in pos],
            "dir": [float(v) for v in r[:, 0]],
            "up": [float(v) for v in r[:, 2]],
            "vel": [float(v) for v in d.qvel[0:3]],
            "front": [float(v) for v in pos + 0.5 * car.params.body_length * r[:, 0]],
            "rotation": [float(q[1]), float(q[2]), float(q[3]), float(q[0])],
        }

    def _electrics(self) -> dict[str, Any]:
        car = self._car()
        st = car._state()
        c = self.control
        return {
            "steering": st.steer / car.params.max_steer * STEERING_WHEEL_LOCK,
            "steering_input": c["steering"],
            "throttle": c["throttle"],
            "throttle_input": c["throttle"],
            "brake": c["brake"],
            "brake_input": c["brake"],
            "parkingbrake": c["parkingbrake"],
            "wheelspeed": float(np.mean(st.wheel_speed)),
            "airspeed": float(np.linalg.norm(car.data.qvel[0:3])),
            "gear": "D",
            "running": True,
        }


def main(argv: list[str] | None = None) -> None:
    """`python -m s3.sim.beamng_standin --port N`: serve until Ctrl-C, SIGTERM or a Quit message."""
    ap = argparse.ArgumentParser(description="BeamNG.tech protocol stand-in backed by s3's MuJoCo car")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    ap.add_argument("--port", type=int, default=25252, help="research port to listen on (0 = any free port)")
    ap.add_argument("--drop-after-steps", type=int, default=None, metavar="K", help="fault injection: hang up at the K-th Step request")
    ap.add_argument("--drops", type=int, default=1, metavar="N", help="how many times to hang up (every K Step requests)")
    args = ap.parse_args(argv)
    server = BeamngStandin(args.host, args.port, drop_after_steps=args.drop_after_steps, drops=args.drops).start()
    signal.signal(signal.SIGTERM, lambda *_: server._stop.set())
    print(f"BeamNG stand-in listening on {args.host}:{server.port} (protocol {server.protocol_version})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
