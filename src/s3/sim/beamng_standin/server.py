"""The stand-in's TCP server: sockets, per-socket protocol state, dispatch, fault injection.

Strictness (so a client-side mistake fails a test): wrong protocol version -> a Hello reply with
the stand-in's version (beamngpy raises on the mismatch), then the socket is closed; a first
message other than Hello, a missing or out-of-sequence `_id` (the stand-in requires 0, 1, 2, ...
per socket, stricter than BeamNG, which only echoes it) -> `bngError` and close; an unknown
message type -> `bngError`, the socket stays open. Each vehicle gets its own listening socket,
announced by `StartVehicleConnection` on the main one. Requests are handled one at a time under
one lock, whichever socket they arrive on.

Fault injection: `drop_after_steps=K` hangs up every open socket, without replying, when the
K-th `Step` request since start arrives, `drops` times in all (K more `Step`s apart); the
listening sockets stay open, so a client can reconnect and start over, as with a BeamNG.tech
that was restarted. `dropped` counts the hang-ups. `freeze_after_steps=K` stops answering at the
K-th `Step` (every socket stays open, nothing is ever replied, new connections are accepted and
ignored), as a frozen BeamNG.tech would, until `thaw()`.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import msgpack

from s3.sim.beamng_standin import handlers
from s3.sim.beamng_standin.wire import PROTOCOL_VERSION, ProtocolError, recv_frame, send_frame
from s3.sim.beamng_standin.world import World
from s3.sim.mujoco_car import MujocoCar
from s3.sim.params import MujocoCarParams
from s3.tracks.track import Track


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
    """The server. `start()` binds (port 0 = any free port) and serves in daemon threads.

    `world` is the simulated level (its car, track and surface friction also read as `car`,
    `track`, `mu`, `friction_log`); `received` (message types in arrival order), `lua_log` (the
    GE Lua chunks run) and `errors` (every bngError's reason) record what happened, for tests.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        car_params: MujocoCarParams | None = None,
        surface: str = "ASPHALT",
        protocol_version: str = PROTOCOL_VERSION,
        drop_after_steps: int | None = None,
        drops: int = 1,
        freeze_after_steps: int | None = None,
    ) -> None:
        if drop_after_steps is not None and drop_after_steps < 1:
            raise ValueError(f"drop_after_steps must be >= 1, got {drop_after_steps}")
        if freeze_after_steps is not None and freeze_after_steps < 1:
            raise ValueError(f"freeze_after_steps must be >= 1, got {freeze_after_steps}")
        self._steps_to_freeze = freeze_after_steps
        self.frozen = threading.Event()
        self.host = host
        self.drop_after_steps = drop_after_steps
        self._drops_left = drops if drop_after_steps is not None else 0
        self._steps_to_drop = drop_after_steps or 0
        self.dropped = 0
        self._want_port = port
        self.protocol_version = protocol_version
        self.world = World(car_params or MujocoCarParams(), surface)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._main: _Listener | None = None
        self._vehicle_listeners: dict[str, _Listener] = {}
        self.received: list[str] = []
        self.lua_log: list[str] = []
        self.errors: list[str] = []
        self.quit = threading.Event()

    # -- what tests read --------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._main is None:
            raise RuntimeError("stand-in not started")
        return self._main.sock.getsockname()[1]

    @property
    def mu(self) -> float:
        """Peak friction the car currently gets from the surface."""
        return self.world.mu

    @property
    def car(self) -> MujocoCar | None:
        return self.world.car

    @property
    def track(self) -> Track | None:
        """The loaded scenario's road as a Track (None without a road)."""
        return self.world.track

    @property
    def friction_log(self) -> list[tuple[int, float]]:
        """(steps taken, car mu) at each friction change."""
        return self.world.friction_log

    # -- lifecycle --------------------------------------------------------------------------
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

    def request_stop(self) -> None:
        """Make serve_forever return (safe from a signal handler)."""
        self._stop.set()

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
    def open_vehicle_socket(self, vid: str) -> int:
        """Listen for vehicle `vid`'s connection (closing its previous socket); the port."""
        old = self._vehicle_listeners.pop(vid, None)
        if old is not None:
            self._close_listener(old)
        lst = self._listen(0, "vehicle", vid)
        self._vehicle_listeners[vid] = lst
        return lst.sock.getsockname()[1]

    def close_vehicle_sockets(self) -> None:
        for lst in self._vehicle_listeners.values():
            self._close_listener(lst)
        self._vehicle_listeners.clear()

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
            threading.Thread(
                target=self._serve, args=(conn, _Session(kind, vid=vid)), daemon=True, name=f"bng-{kind}-conn"
            ).start()

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

    # -- dispatch ---------------------------------------------------------------------------
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
            if kind == "Step" and self._steps_to_freeze is not None:
                self._steps_to_freeze -= 1
                if self._steps_to_freeze == 0:
                    self.frozen.set()
            if self.frozen.is_set():
                return None, False
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
        handler = (handlers.MAIN if sess.kind == "main" else handlers.VEHICLE).get(kind)
        if handler is None:
            self.errors.append(f"unknown {sess.kind} message {kind}")
            return {"_id": rid, "bngError": f"Unknown message type: {kind}"}, False
        try:
            with self._lock:
                reply = handler(self, msg)
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

    # -- fault injection --------------------------------------------------------------------
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

    def thaw(self) -> None:
        """End an injected freeze: later requests are answered again (those ignored stay unanswered)."""
        self.frozen.clear()
        self._steps_to_freeze = None

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
