"""Design script for the built-in evaluation road course (run once; output is shipped as data).

Unlike the procedural training tracks (spline blobs through random radial points), the course is
built like a real circuit: straights and constant-radius corners joined by clothoid (linear
curvature) transitions (s3.tracks.circuit_design). The straights are stretched minimally so the
loop closes exactly.

    python -m s3.tracks.design_road_course            # rewrites data/road_course.csv
    python -m s3.tracks.design_road_course --check    # prints the corner table only
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from s3.tracks.circuit_design import CircuitDesign, main

DATA = Path(__file__).with_name("data") / "road_course.csv"

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


def width(s: np.ndarray, length: float) -> np.ndarray:
    """Total road width [m] at arc length s [m]: 10.2-11.8 m, varying gently along the lap."""
    return 11.0 + 0.8 * np.sin(2 * np.pi * 3 * s / length + 0.7) + 0.2 * np.sin(2 * np.pi * 7 * s / length)


ROAD_COURSE = CircuitDesign("road_course", LAYOUT, FINAL_STRAIGHT, width, DATA)


def design() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
    """Closed centerline [M, 2] at ~1 m, half widths (right, left) and the corner table."""
    from s3.tracks.circuit_design import design as _design

    return _design(ROAD_COURSE)


if __name__ == "__main__":
    main(ROAD_COURSE, __doc__)
