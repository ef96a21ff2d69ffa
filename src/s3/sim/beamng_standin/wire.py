"""beamngpy 1.36's wire format: length-prefixed msgpack frames, and the error a request gets.

A frame is a 4-byte big-endian length and a msgpack body; every request body is a map with a
str `type` and an int `_id`, and its reply echoes `_id`. A reply carrying `bngError` makes
beamngpy raise.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import msgpack

PROTOCOL_VERSION = "v1.27"  # beamngpy 1.36 / BeamNG.tech 0.39


class ProtocolError(Exception):
    """A request the stand-in answers with a bngError (and, if `close`, then hangs up)."""

    def __init__(self, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.close = close


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
    """Send one message as a length-prefixed msgpack frame."""
    body = msgpack.packb(msg, use_bin_type=True)
    conn.sendall(struct.pack("!I", len(body)) + body)
