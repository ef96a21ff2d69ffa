"""First contact with a BeamNG.tech: `s3 beamng check` (docs/beamng.md, "First contact").

    first_contact(sim_params) -> [Check, ...]     each: name, ok, detail (one line)

On a flat circle laid out as s3 lays out any track, through the adapter s3 uses for data:
1. reset at four headings (every reset reads the State sensor back: s3.sim.beamng.check_reset);
2. a reset at speed (the run-up and its speed);
3. a step: throttle for 2 s moves the car forward along its heading, and steering left turns it
   left (positive yaw rate), i.e. the steering sign;
4. the ice switch: the ground model scaled to 0.25 and back to 1, read back from the engine.
A check that fails says why in one line; the later ones still run where they can.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from s3.sim.base import Control, SimulatorError
from s3.tracks.track import Track

HEADINGS_DEG = (0.0, 90.0, -150.0, 30.0)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def check_track(radius: float = 150.0, n: int = 400) -> Track:
    """A flat circle (counter-clockwise) of `radius` m, 10 m wide, on the level's origin."""
    a = np.linspace(0.0, 2.0 * np.pi, n, endpoint=False)
    xy = np.stack([radius * np.cos(a), radius * np.sin(a)], axis=1)
    return Track("first_contact", xy, np.full(n, 5.0), np.full(n, 5.0))


def first_contact(sim_params: Any) -> list[Check]:
    """Run the checks against the BeamNG.tech of `sim_params.beamng` (sim.backend must be beamng)."""
    from s3.sim.beamng import BeamngSim

    if sim_params.backend != "beamng":
        raise ValueError("s3 beamng check: set sim.backend: beamng (and sim.beamng.host / port)")
    sim = BeamngSim(sim_params.beamng, control_dt=sim_params.control_dt)
    track = check_track()
    checks: list[Check] = []

    def attempt(name: str, fn: Callable[[], str]) -> None:
        try:
            checks.append(Check(name, True, fn()))
        except SimulatorError as e:
            checks.append(Check(name, False, str(e)))

    def pose(deg: float) -> tuple[float, float, float]:
        x, y, _ = (float(v[0]) for v in track.pose_at(np.array([0.0]), np.array([0.5])))
        return x, y, math.radians(deg)

    try:
        for deg in HEADINGS_DEG:

            def reset_at(deg: float = deg) -> str:
                st = sim.reset(track, *pose(deg), 0.0)
                return f"asked {deg:.0f} deg, read back {math.degrees(st.yaw):.1f} deg at ({st.x:.2f}, {st.y:.2f}) m"

            attempt(f"reset heading {deg:.0f} deg", reset_at)

        def run_up() -> str:
            x, y, _ = pose(0.0)
            st = sim.reset(track, x, y, math.pi / 2, 10.0)  # along the circle at its start
            return f"asked 10 m/s, read back {st.vx:.2f} m/s"

        attempt("reset at 10 m/s", run_up)

        def drive() -> str:
            x, y, h = (float(v[0]) for v in track.pose_at(np.array([0.0])))
            st0 = sim.reset(track, x, y, h, 0.0)
            st = st0
            for _ in range(int(round(2.0 / sim.control_dt))):
                st = sim.step(Control(0.0, 0.6, 0.0))
            ahead = (st.x - st0.x) * math.cos(st0.yaw) + (st.y - st0.y) * math.sin(st0.yaw)
            if not (st.vx > 0.5 and ahead > 0.5):
                raise SimulatorError(
                    f"throttle for 2 s: forward speed {st.vx:.2f} m/s, {ahead:.2f} m ahead: throttle or heading"
                )
            rates = [sim.step(Control(0.5, 0.3, 0.0)).yaw_rate for _ in range(int(round(1.0 / sim.control_dt)))]
            if not np.mean(rates) > 0.02:
                raise SimulatorError(
                    f"steering left for 1 s: mean yaw rate {np.mean(rates):+.3f} rad/s (should be > 0): steering sign"
                )
            return (
                f"throttle: {st.vx:.1f} m/s, {ahead:.1f} m ahead; steering left: yaw rate {np.mean(rates):+.2f} rad/s"
            )

        attempt("step: throttle and steering sign", drive)

        def ice() -> str:
            if sim.params.friction_mode != "lua":
                return "friction_mode level: nothing to switch (the level's own materials)"
            sim.switch_friction(0.25)  # sends the chunk and reads the engine's ground model back
            sim.switch_friction(1.0)
            return f"{sim.params.ground_model} scaled to x0.25 and back to x1, read back from the engine"

        attempt("ice switch", ice)
    finally:
        sim.close()
    return checks


def verdict(checks: list[Check]) -> str:
    """One line: ready, or which checks failed."""
    bad = [c.name for c in checks if not c.ok]
    return (
        "verdict: ready for s3"
        if not bad
        else f"verdict: NOT ready ({len(bad)} of {len(checks)} checks failed: {', '.join(bad)})"
    )
