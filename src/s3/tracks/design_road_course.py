"""Design script for the built-in evaluation road course (run once; output is shipped as data).

Unlike the procedural training tracks (spline blobs through random radial points), the course is
built like a real circuit: straights and constant-radius corners joined by clothoid (linear
curvature) transitions. The straights are stretched minimally so the loop closes exactly.

    python -m s3.tracks.design_road_course            # rewrites data/road_course.csv
    python -m s3.tracks.design_road_course --check    # prints the corner table only
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

DATA = Path(__file__).with_name("data") / "road_course.csv"
STEP = 0.05  # integration step along the road [m]
SPACING = 1.0  # spacing of the shipped points [m]

# (nominal straight before the corner [m], turn [deg, left positive], radius [m])
LAYOUT: list[tuple[float, float, float]] = [
    (470.0, 170.0, 15.0),  # T1  hairpin at the end of the main straight
    (150.0, -45.0, 160.0),  # T2  fast right sweeper
    (110.0, 90.0, 40.0),  # T3  medium left
    (100.0, -70.0, 28.0),  # T4  tight right
    (130.0, 60.0, 150.0),  # T5  long left sweeper
    (120.0, 120.0, 22.0),  # T6  tight left
    (80.0, -90.0, 18.0),  # T7  right hairpin-ish
    (100.0, 75.0, 60.0),  # T8  medium left
    (140.0, 45.0, 200.0),  # T9  fast left sweeper
    (110.0, -60.0, 35.0),  # T10 medium right
    (140.0, 155.0, 16.0),  # T11 hairpin
    (90.0, -90.0, 25.0),  # T12 tight right onto the main straight
]
FINAL_STRAIGHT = 60.0  # from T12's exit to the start line


def _corner_profile(turn: float, radius: float) -> np.ndarray:
    """Curvature samples of one corner: clothoid in, constant arc, clothoid out."""
    kappa = np.sign(turn) / radius
    arc = abs(turn) * radius
    ramp = min(0.35 * arc, 35.0)
    n_ramp = max(1, int(round(ramp / STEP)))
    n_arc = max(0, int(round((arc - ramp) / STEP)))  # two half-ramps turn as much as one ramp of arc
    up = kappa * (np.arange(n_ramp) + 0.5) / n_ramp
    prof = np.concatenate([up, np.full(n_arc, kappa), up[::-1]])
    return prof * turn / (prof.sum() * STEP)  # exact turn despite rounding to whole steps


def _build(straights: list[float]) -> tuple[np.ndarray, list[dict]]:
    """Integrate the layout: dense xy [n, 2] and one record per corner (s of entry/apex/exit)."""
    pieces, corners, s = [], [], 0.0
    for k, ((_, turn, radius), straight) in enumerate(zip(LAYOUT, straights)):
        pieces.append(np.zeros(int(round(straight / STEP))))
        s += len(pieces[-1]) * STEP
        prof = _corner_profile(np.radians(turn), radius)
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
    pieces.append(np.zeros(int(round(FINAL_STRAIGHT / STEP))))
    kappa = np.concatenate(pieces)
    heading = np.concatenate([[0.0], np.cumsum(kappa[:-1] * STEP)])  # kappa is sampled at mid-steps
    mid = heading + 0.5 * kappa * STEP
    xy = np.concatenate([[[0.0, 0.0]], np.cumsum(np.stack([np.cos(mid), np.sin(mid)], 1) * STEP, axis=0)])
    return xy, corners


def design() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
    """Closed centerline [M, 2] at ~SPACING, widths (right, left) and the corner table."""
    total_turn = sum(t for _, t, _ in LAYOUT)
    assert abs(total_turn - 360.0) < 1e-9, total_turn
    # the end point is linear in the straight lengths: make the smallest change that closes it
    base = [float(length) for length, _, _ in LAYOUT]
    gap0 = _build(base)[0][-1]
    cols = []
    for k in range(len(base)):
        probe = list(base)
        probe[k] += 100.0
        cols.append((_build(probe)[0][-1] - gap0) / 100.0)
    a = np.array(cols).T  # [2, K]
    base = list(np.array(base) - a.T @ np.linalg.solve(a @ a.T, gap0))
    if min(base) < 20.0:
        raise SystemExit(f"layout does not close with straights of 20 m or more: {np.round(base, 1)}")
    xy, corners = _build(base)
    gap = xy[-1] - xy[0]
    if np.linalg.norm(gap) > 0.5:
        raise SystemExit(f"loop does not close: gap {gap}")
    seg = np.linalg.norm(np.diff(xy, axis=0), axis=1)
    arc = np.concatenate([[0.0], np.cumsum(seg)])
    xy = xy - gap * (arc / arc[-1])[:, None]  # spread the step-rounding gap (centimetres) along the loop
    n = int(round(arc[-1] / SPACING))
    s = np.arange(n) * arc[-1] / n
    pts = np.stack([np.interp(s, arc, xy[:, 0]), np.interp(s, arc, xy[:, 1])], axis=1)
    width = 11.0 + 0.8 * np.sin(2 * np.pi * 3 * s / arc[-1] + 0.7) + 0.2 * np.sin(2 * np.pi * 7 * s / arc[-1])
    return pts, width / 2, width / 2, corners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print the corner table, write nothing")
    args = parser.parse_args()
    pts, wr, wl, corners = design()
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

        save_track_csv(Track("road_course", pts, wl, wr), DATA)
        print(f"wrote {DATA}")


if __name__ == "__main__":
    main()
