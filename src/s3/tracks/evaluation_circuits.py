"""The evaluation suite: held-out circuits, each nominal or with ice, by name or from a CSV.

    BUILTIN = ("road_course", "street", "flowing", "short")
    evaluation_track(spec, condition="nominal") -> Track    # "<name>" or "<name>_ice"
    ice_patches(spec) -> list[(label, FrictionPatch)]       # the ice condition's labelled patches
    circuit_stats(track) -> dict                            # length, corners, radius range and spread

`spec` is a built-in name or the path of a racing CSV (x_m,y_m,w_tr_right_m,w_tr_left_m; the
name is the file's stem). The ice condition is the road course's seven hand-placed patches for
"road_course", a sidecar `<stem>.ice.csv` next to a CSV when there is one, and otherwise the
documented rule (s3.tracks.ice_rule) on the circuit's corners (s3.tracks.corners). None of these
circuits is used for training: they are built from straights, constant-radius corners and clothoid
transitions (design_road_course.py, design_circuits.py), unlike the procedural spline blobs.
Built-ins are cached (tracks are immutable); a CSV is read afresh on every call.
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from s3.tracks.corners import corner_radius_stats, detect_corners, turn_total_deg
from s3.tracks.csv_loader import load_track_csv
from s3.tracks.ice_rule import Labelled, read_ice_csv, rule_ice_patches
from s3.tracks.road_course import ICE_PATCHES
from s3.tracks.track import Track, TrackError

BUILTIN = ("road_course", "street", "flowing", "short")
Condition = Literal["nominal", "ice"]


def ice_sidecar(csv_path: str | os.PathLike[str]) -> Path:
    """Where the ice patches of a circuit CSV may be given: `my.csv` -> `my.ice.csv`."""
    p = Path(csv_path)
    return p.with_name(p.stem + ".ice.csv")


@lru_cache(maxsize=len(BUILTIN))
def _builtin(name: str) -> Track:
    with resources.as_file(resources.files("s3.tracks") / "data" / f"{name}.csv") as path:
        return load_track_csv(path, name=name)


@lru_cache(maxsize=len(BUILTIN))
def _builtin_ice(name: str) -> tuple[tuple[str, Any], ...]:
    return tuple(ICE_PATCHES) if name == "road_course" else tuple(rule_ice_patches(_builtin(name)))


@lru_cache(maxsize=len(BUILTIN))
def _builtin_ice_track(name: str) -> Track:
    return _builtin(name).with_patches([p for _, p in _builtin_ice(name)], name=f"{name}_ice")


def _csv(spec: str | os.PathLike[str]) -> Path:
    path = Path(spec)
    if not path.is_file():
        raise TrackError(str(spec), f"neither a built-in circuit ({', '.join(BUILTIN)}) nor a CSV file")
    return path


def nominal_track(spec: str | os.PathLike[str]) -> Track:
    """The circuit without ice (named after the built-in or the CSV's stem)."""
    return _builtin(str(spec)) if str(spec) in BUILTIN else load_track_csv(_csv(spec))


def ice_patches(spec: str | os.PathLike[str]) -> Labelled:
    """The labelled patches of `spec`'s ice condition: hand-placed (road_course), the sidecar's, or the rule's."""
    if str(spec) in BUILTIN:
        return list(_builtin_ice(str(spec)))
    path = _csv(spec)
    sidecar = ice_sidecar(path)
    if sidecar.is_file():
        return read_ice_csv(sidecar, nominal_track(path))
    return rule_ice_patches(nominal_track(path))


def evaluation_track(spec: str | os.PathLike[str], condition: Condition = "nominal") -> Track:
    """The circuit `spec` in `condition`: named "<name>" (nominal) or "<name>_ice"."""
    if condition not in ("nominal", "ice"):
        raise ValueError(f"unknown condition {condition!r}; expected 'nominal' or 'ice'")
    if str(spec) in BUILTIN:
        return _builtin(str(spec)) if condition == "nominal" else _builtin_ice_track(str(spec))
    track = nominal_track(spec)
    if condition == "nominal":
        return track
    return track.with_patches([p for _, p in ice_patches(spec)], name=f"{track.name}_ice")


def circuit_stats(track: Track) -> dict[str, Any]:
    """How a circuit looks in numbers (lengths and radii in m, turns in deg), by s3.tracks.corners' detection.

    corners: count; left/right: of each hand; corner_fraction: share of the lap inside corners;
    turn_total_deg: sum of |turn|; radius_min/median/max_m, radius_ratio (max/min), radius_iqr_m:
    over the corners' radii; width_min/max_m: total road width.
    """
    corners = detect_corners(track)
    width = track.w_left + track.w_right
    return {
        "name": track.name,
        "length_m": track.length,
        "corners": len(corners),
        "left": sum(c.direction > 0 for c in corners),
        "right": sum(c.direction < 0 for c in corners),
        "corner_fraction": sum(c.exit - c.entry for c in corners) / track.length,
        "turn_total_deg": turn_total_deg(corners),
        **corner_radius_stats(corners),
        "width_min_m": float(width.min()),
        "width_max_m": float(width.max()),
    }
