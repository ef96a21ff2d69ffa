"""A loopback stand-in for BeamNG.tech's research port, for testing the BeamNG adapter end to end.

BeamNG.tech is licensed and cannot run here, so the adapter (`s3.sim.beamng`) is exercised through
the real beamngpy client against this server. It speaks beamngpy 1.36's wire protocol: every
frame is a 4-byte big-endian length and a msgpack map with `type` and `_id`; the first message
on every socket must be `Hello` with protocol "v1.27"; replies echo `_id` and carry BeamNG's reply
type; a reply with `bngError` makes beamngpy raise. Each vehicle gets its own socket, announced
by `StartVehicleConnection` on the main one. It implements exactly the messages the adapter makes
beamngpy send; anything else is answered with a `bngError` (never left hanging). Physics is the
embedded `MujocoCar`, with BeamNG's conventions on the wire.

Start it from tests as a context manager (`with BeamngStandin() as s: s.port`) or from a shell:
`python -m s3.sim.beamng_standin --port 25252 [--drop-after-steps K [--drops N]]`. It binds
127.0.0.1 unless told otherwise.

Modules: `wire` (framing, msgpack, the protocol version), `server` (sockets, strictness, dispatch,
fault injection), `handlers` (one handler per message type), `world` (scenarios, simulation
mode, the car, ground friction, sensors), `rotation` (every conversion between MuJoCo's and
BeamNG's rotation conventions), `__main__` (the command line).
"""

from s3.sim.beamng_standin.handlers import FRICTION_RE
from s3.sim.beamng_standin.server import BeamngStandin
from s3.sim.beamng_standin.wire import PROTOCOL_VERSION, ProtocolError, recv_frame, send_frame

__all__ = ["FRICTION_RE", "PROTOCOL_VERSION", "BeamngStandin", "ProtocolError", "recv_frame", "send_frame"]
