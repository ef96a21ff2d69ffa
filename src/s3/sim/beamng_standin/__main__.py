"""`python -m s3.sim.beamng_standin`: run the BeamNG.tech stand-in until Ctrl-C, SIGTERM or Quit."""

from __future__ import annotations

import argparse
import signal

from s3.sim.beamng_standin.server import BeamngStandin


def main(argv: list[str] | None = None) -> None:
    """`python -m s3.sim.beamng_standin --port N`: serve until Ctrl-C, SIGTERM or a Quit message;
    prints one line with the address once listening."""
    ap = argparse.ArgumentParser(
        prog="python -m s3.sim.beamng_standin", description="BeamNG.tech protocol stand-in backed by s3's MuJoCo car"
    )
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    ap.add_argument("--port", type=int, default=25252, help="research port to listen on (0 = any free port)")
    ap.add_argument(
        "--drop-after-steps",
        type=int,
        default=None,
        metavar="K",
        help="fault injection: hang up at the K-th Step request",
    )
    ap.add_argument(
        "--drops", type=int, default=1, metavar="N", help="how many times to hang up (every K Step requests)"
    )
    ap.add_argument(
        "--freeze-after-steps",
        type=int,
        default=None,
        metavar="K",
        help="fault injection: stop answering at the K-th Step request",
    )
    args = ap.parse_args(argv)
    server = BeamngStandin(
        args.host,
        args.port,
        drop_after_steps=args.drop_after_steps,
        drops=args.drops,
        freeze_after_steps=args.freeze_after_steps,
    ).start()
    signal.signal(signal.SIGTERM, lambda *_: server.request_stop())
    print(f"BeamNG stand-in listening on {args.host}:{server.port} (protocol {server.protocol_version})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
