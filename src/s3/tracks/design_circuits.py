"""Design script for the built-in evaluation circuits beyond the road course (output shipped as data).

Built like the road course (s3.tracks.circuit_design: straights, constant-radius corners, clothoid
transitions, straights stretched minimally so the loop closes exactly), and unlike the procedural
training tracks (spline blobs, 600-1500 m, no straights, no constant-radius corners):

    street   ~1.5 km tight street circuit: ~90 deg corners of R 12-20 m, three chicanes (R 10-15 m), 9-10 m wide
    flowing  ~3.5 km fast circuit: long sweepers of R 80-300 m and a few medium corners, 12-13 m wide
    short    ~0.7 km small circuit for the quick smoke pipeline, 10-11 m wide

    python -m s3.tracks.design_circuits                   # rewrites data/{street,flowing,short}.csv
    python -m s3.tracks.design_circuits street --check    # prints street's corner table only
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from s3.tracks.circuit_design import CircuitDesign, main

DATA = Path(__file__).with_name("data")

# (nominal straight before the corner [m], turn [deg, left positive], radius [m])
STREET_LAYOUT: list[tuple[float, float, float]] = [
    (280.0, 90.0, 15.0),  # T1  left at the end of the main straight
    (120.0, -90.0, 12.0),  # T2  right
    (60.0, 90.0, 14.0),  # T3  left
    (110.0, -35.0, 12.0),  # T4  chicane, right ...
    (10.0, 35.0, 12.0),  # T5  ... left
    (80.0, 90.0, 18.0),  # T6  left
    (110.0, 45.0, 10.0),  # T7  tight chicane, left ...
    (10.0, -45.0, 10.0),  # T8  ... right
    (80.0, 90.0, 14.0),  # T9  left
    (60.0, -90.0, 12.0),  # T10 right
    (100.0, 90.0, 15.0),  # T11 left
    (80.0, 30.0, 15.0),  # T12 chicane, left ...
    (10.0, -30.0, 15.0),  # T13 ... right
    (100.0, 90.0, 20.0),  # T14 left onto the main straight
]
STREET_FINAL = 40.0


def street_width(s: np.ndarray, length: float) -> np.ndarray:
    """Total road width [m] at arc length s [m]: 9.0-10.0 m."""
    return 9.5 + 0.5 * np.sin(2 * np.pi * 4 * s / length + 0.3)


STREET = CircuitDesign(
    "street", STREET_LAYOUT, STREET_FINAL, street_width, DATA / "street.csv", min_straight=8.0, relative_closure=True
)

FLOWING_LAYOUT: list[tuple[float, float, float]] = [
    (350.0, 60.0, 250.0),  # T1  long left sweeper after the main straight
    (150.0, -40.0, 200.0),  # T2  fast right
    (120.0, 90.0, 120.0),  # T3  left sweeper
    (150.0, 70.0, 50.0),  # T4  medium left
    (150.0, -50.0, 300.0),  # T5  very fast right
    (100.0, 80.0, 90.0),  # T6  left
    (170.0, -60.0, 150.0),  # T7  right sweeper
    (120.0, 100.0, 45.0),  # T8  medium left
    (150.0, 50.0, 180.0),  # T9  left sweeper
    (150.0, -45.0, 80.0),  # T10 right
    (100.0, 105.0, 60.0),  # T11 medium left onto the main straight
]
FLOWING_FINAL = 200.0


def flowing_width(s: np.ndarray, length: float) -> np.ndarray:
    """Total road width [m] at arc length s [m]: 12.0-13.0 m."""
    return 12.5 + 0.5 * np.sin(2 * np.pi * 3 * s / length + 1.1)


FLOWING = CircuitDesign(
    "flowing", FLOWING_LAYOUT, FLOWING_FINAL, flowing_width, DATA / "flowing.csv", relative_closure=True
)

SHORT_LAYOUT: list[tuple[float, float, float]] = [
    (60.0, 90.0, 25.0),  # T1  left
    (60.0, -60.0, 40.0),  # T2  right
    (50.0, 150.0, 18.0),  # T3  left hairpin
    (50.0, 60.0, 60.0),  # T4  left
    (40.0, -45.0, 30.0),  # T5  right
    (40.0, 165.0, 22.0),  # T6  left hairpin onto the main straight
]
SHORT_FINAL = 30.0


def short_width(s: np.ndarray, length: float) -> np.ndarray:
    """Total road width [m] at arc length s [m]: 10.0-11.0 m."""
    return 10.5 + 0.5 * np.sin(2 * np.pi * 2 * s / length + 0.5)


SHORT = CircuitDesign("short", SHORT_LAYOUT, SHORT_FINAL, short_width, DATA / "short.csv", relative_closure=True)

DESIGNS = {d.name: d for d in (STREET, FLOWING, SHORT)}


if __name__ == "__main__":
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(DESIGNS)
    sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a.startswith("-")]
    for name in names:
        print(f"--- {name}")
        main(DESIGNS[name], __doc__)
