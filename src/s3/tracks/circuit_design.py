"""Design built-in circuits like real ones: straights, constant-radius corners, clothoid transitions.

A design is a LAYOUT table, one row per corner: (nominal straight before it [m], turn [deg, left
positive], radius [m]), then a final straight back to the start line. Each corner is a clothoid
(linear curvature) ramp in, a constant-radius arc and a ramp out; the turns must add up to
+-360 deg. The straights are stretched by the smallest (least-squares) change that closes the loop
exactly (or, with `relative_closure`, the smallest relative change, so that the short links of
chicanes keep their length); the design is rejected when that needs a straight shorter than `min_straight`, when the
road would overlap itself, or when half the road is wider than a corner's radius. The centerline is
shipped as a racing CSV at `spacing` m (the design scripts, e.g. design_road_course.py, write it
once; the package reads the data).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

STEP = 0.05  # integration step along the road [m]
SPACING = 1.0  # spacing of the shipped points [m]
CLEARANCE = 4.0  # m of verge required between two parts of the road, beyond the widest road

Layout = list[tuple[float, float, float]]


@dataclass(frozen=True)
class CircuitDesign:
    """One circuit: its layout, final straight [m], total road width [m] as a function of (s, length) and output
    file."""

    name: str
    layout: Layout
    final_straight: float
    width: Callable[[np.ndarray, float], np.ndarray]
    data: Path
    min_straight: float = 20.0  # m: shortest straight the closure may leave
    ramp_fraction: float = 0.35  # clothoid ramp length as a fraction of the corner's arc ...
    ramp_max: float = 35.0  # ... but at most this many metres
    relative_closure: bool = False  # close with the smallest relative (not absolute) change of the straights


def corner_profile(turn: float, radius: float, ramp_fraction: float = 0.35, ramp_max: float = 35.0) -> np.ndarray:
    """Curvature samples [1/m] at STEP spacing of one corner (turn in rad): clothoid in, constant arc, clothoid out."""
    kappa = np.sign(turn) / radius
    arc = abs(turn) * radius
    ramp = min(ramp_fraction * arc, ramp_max)
    n_ramp = max(1, int(round(ramp / STEP)))
    n_arc = max(0, int(round((arc - ramp) / STEP)))  # two half-ramps turn as much as one ramp of arc
    up = kappa * (np.arange(n_ramp) + 0.5) / n_ramp
    prof = np.concatenate([up, np.full(n_arc, kappa), up[::-1]])
    return prof * turn / (prof.sum() * STEP)  # exact turn despite rounding to whole steps


def build(design: CircuitDesign, straights: list[float]) -> tuple[np.ndarray, list[dict]]:
    """Integrate the layout: dense xy [n, 2] (m) and one record per corner (s of entry/apex/exit, m)."""
    pieces, corners, s = [], [], 0.0
    for k, ((_, turn, radius), straight) in enumerate(zip(design.layout, straights)):
        pieces.append(np.zeros(int(round(straight / STEP))))
        s += len(pieces[-1]) * STEP
        prof = corner_profile(np.radians(turn), radius, design.ramp_fraction, design.ramp_max)
        corners.append(
            {
                "name": f"T{k + 1}",
                "straight": straight,
                "turn_deg": turn,
                "radius": radius,
                "entry": s,
                "apex": s + len(prof) * STEP / 2,
                "exit": s + len(prof) * STEP,
            }
        )
        pieces.append(prof)
        s += len(prof) * STEP
    pieces.append(np.zeros(int(round(design.final_straight / STEP))))
    kappa = np.concatenate(pieces)
    heading = np.concatenate([[0.0], np.cumsum(kappa[:-1] * STEP)])  # kappa is sampled at mid-steps
    mid = heading + 0.5 * kappa * STEP
    xy = np.concatenate([[[0.0, 0.0]], np.cumsum(np.stack([np.cos(mid), np.sin(mid)], 1) * STEP, axis=0)])
    return xy, corners


def design(d: CircuitDesign) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
    """Closed centerline [M, 2] at ~SPACING m, half widths (right, left) [M] in m and the corner table."""
    total_turn = sum(t for _, t, _ in d.layout)
    if abs(abs(total_turn) - 360.0) > 1e-9:
        raise SystemExit(f"{d.name}: the turns add up to {total_turn} deg, not +-360")
    # the end point is linear in the straight lengths: make the smallest change that closes it
    base = [float(length) for length, _, _ in d.layout]
    gap0 = build(d, base)[0][-1]
    cols = []
    for k in range(len(base)):
        probe = list(base)
        probe[k] += 100.0
        cols.append((build(d, probe)[0][-1] - gap0) / 100.0)
    a = np.array(cols).T  # [2, K]
    if d.relative_closure:  # least squares in change / nominal length: short links (chicanes) barely move
        w = np.array(base) ** 2
        base = list(np.array(base) - w * (a.T @ np.linalg.solve((a * w) @ a.T, gap0)))
    else:
        base = list(np.array(base) - a.T @ np.linalg.solve(a @ a.T, gap0))
    if min(base) < d.min_straight:
        raise SystemExit(
            f"{d.name}: layout does not close with straights of {d.min_straight:g} m or more: {np.round(base, 1)}"
        )
    xy, corners = build(d, base)
    gap = xy[-1] - xy[0]
    if np.linalg.norm(gap) > 0.5:
        raise SystemExit(f"{d.name}: loop does not close: gap {gap}")
    seg = np.linalg.norm(np.diff(xy, axis=0), axis=1)
    arc = np.concatenate([[0.0], np.cumsum(seg)])
    xy = xy - gap * (arc / arc[-1])[:, None]  # spread the step-rounding gap (centimetres) along the loop
    n = int(round(arc[-1] / SPACING))
    s = np.arange(n) * arc[-1] / n
    pts = np.stack([np.interp(s, arc, xy[:, 0]), np.interp(s, arc, xy[:, 1])], axis=1)
    width = d.width(s, arc[-1])
    return pts, width / 2, width / 2, corners


def check(d: CircuitDesign, pts: np.ndarray, half_width: np.ndarray) -> None:
    """Reject a design whose road overlaps itself or whose half width reaches a corner's radius."""
    from s3.tracks.generate import too_close

    tightest = min(r for _, _, r in d.layout)
    if half_width.max() >= tightest:
        raise SystemExit(
            f"{d.name}: half width {half_width.max():.2f} m is not below the tightest radius {tightest:g} m"
        )
    if too_close(pts, 2.0 * half_width.max() + CLEARANCE):
        raise SystemExit(f"{d.name}: two parts of the road come within {CLEARANCE:g} m of verge of each other")


def main(d: CircuitDesign, doc: str) -> None:
    """Command line of a design script: print the corner table and (without --check) write the CSV."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print the corner table, write nothing")
    args = parser.parse_args()
    pts, wr, wl, corners = design(d)
    check(d, pts, np.maximum(wl, wr))
    length = float(np.linalg.norm(np.roll(pts, -1, 0) - pts, axis=1).sum())
    print(f"length {length:.1f} m, {len(pts)} points")
    for c in corners:
        print(
            f"{c['name']:>4} after {c['straight']:5.1f} m straight: turn {c['turn_deg']:+6.0f} deg"
            f"  R {c['radius']:5.0f} m  entry {c['entry']:7.1f}  apex {c['apex']:7.1f}  exit {c['exit']:7.1f}"
        )
    if not args.check:
        from s3.tracks.csv_loader import save_track_csv
        from s3.tracks.track import Track

        save_track_csv(Track(d.name, pts, wl, wr), d.data)
        print(f"wrote {d.data}")
