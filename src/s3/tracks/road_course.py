"""The built-in evaluation road course (~2.8 km, 12 corners), nominal and with seven ice patches.

It is held out from training: it is built from straights, constant-radius corners and clothoid
transitions (see design_road_course.py), unlike the spline-blob procedural tracks. Corners, with
arc lengths in metres from the start line (driving direction is counter-clockwise overall):

    T1  +170 deg R15  hairpin   459.9-520.1    T7  -90 deg R18           1789.1-1827.3
    T2  -45 deg R160  sweeper   690.2-850.8    T8  +75 deg R60           1885.3-1991.4
    T3  +90 deg R40             1014.5-1099.3  T9  +45 deg R200 sweeper  2080.1-2272.2
    T4  -70 deg R28             1174.1-1220.2  T10 -60 deg R35           2367.0-2416.5
    T5  +60 deg R150 sweeper    1392.0-1584.2  T11 +155 deg R16 hairpin  2499.3-2557.8
    T6  +120 deg R22            1688.7-1750.9  T12 -90 deg R25           2706.2-2759.2
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

from s3.tracks.csv_loader import load_track_csv
from s3.tracks.track import FrictionPatch, Track

ICE_MU = 0.15
_FULL = (-7.0, 7.0)  # beyond both edges (half widths are 5.0-6.0 m)
_LEFT = (0.0, 7.0)
_RIGHT = (-7.0, 0.0)

# (label, patch): where a car must brake, turn, or accelerate on ice
ICE_PATCHES: tuple[tuple[str, FrictionPatch], ...] = (
    ("T1 braking zone before the hairpin, full width", FrictionPatch(395.0, 455.0, *_FULL, ICE_MU)),
    ("T3 mid-corner, inside (left) half", FrictionPatch(1040.0, 1075.0, *_LEFT, ICE_MU)),
    ("T4 exit, full width", FrictionPatch(1212.0, 1250.0, *_FULL, ICE_MU)),
    ("T6 mid-corner, 5 m strip left of centre", FrictionPatch(1705.0, 1735.0, -2.0, 3.0, ICE_MU)),
    ("T9 fast sweeper mid-corner, outside (right) half", FrictionPatch(2150.0, 2205.0, *_RIGHT, ICE_MU)),
    ("T11 braking zone before the hairpin, left half", FrictionPatch(2440.0, 2495.0, *_LEFT, ICE_MU)),
    ("T12 exit onto the main straight, full width", FrictionPatch(2752.0, 2800.0, *_FULL, ICE_MU)),
)


@lru_cache(maxsize=1)
def _nominal() -> Track:
    with resources.as_file(resources.files("s3.tracks") / "data" / "road_course.csv") as path:
        return load_track_csv(path, name="road_course")


@lru_cache(maxsize=2)
def road_course(condition: Literal["nominal", "ice"] = "nominal") -> Track:
    """The evaluation course: "road_course" (asphalt only) or "road_course_ice" (7 ice patches).

    Cached: tracks are immutable, so every caller shares the same instance.
    """
    if condition == "nominal":
        return _nominal()
    if condition == "ice":
        return _nominal().with_patches([p for _, p in ICE_PATCHES], name="road_course_ice")
    raise ValueError(f"unknown road course condition {condition!r}; expected 'nominal' or 'ice'")
