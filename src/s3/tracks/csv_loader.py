"""Read and write tracks in the common racing CSV format (as in the TUM racetrack-database).

    # x_m,y_m,w_tr_right_m,w_tr_left_m
    0.0,0.0,5.5,5.5
    ...

One row per centerline point of a closed loop (the first point is not repeated). A header
naming the columns may reorder them. Every problem is reported as one line naming the file and,
where it helps, the line: "tracks/x.csv: line 17: NaN in w_tr_left_m".
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from s3.io import atomic_path
from s3.tracks.track import FrictionPatch, Track, TrackError

COLUMNS = ("x_m", "y_m", "w_tr_right_m", "w_tr_left_m")


def load_track_csv(
    path: str | os.PathLike[str],
    name: str | None = None,
    patches: Sequence[FrictionPatch] = (),
    base_mu: float = 1.0,
) -> Track:
    """Load a track; the name defaults to the file's stem."""
    path = Path(path)
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TrackError(where, f"cannot read: {e}") from None
    order = list(range(4))
    rows, lines = [], []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if not rows:
                order = _column_order(line, where, lineno) or order
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            raise TrackError(where, f"line {lineno}: expected 4 columns {','.join(COLUMNS)}, got {len(fields)}")
        values = []
        for col in range(4):
            field = fields[order[col]]
            try:
                v = float(field)
            except ValueError:
                raise TrackError(where, f"line {lineno}: non-numeric {COLUMNS[col]} {field!r}") from None
            if math.isnan(v):
                raise TrackError(where, f"line {lineno}: NaN in {COLUMNS[col]}")
            if math.isinf(v):
                raise TrackError(where, f"line {lineno}: infinite {COLUMNS[col]}")
            values.append(v)
        rows.append(values)
        lines.append(lineno)
    data = np.array(rows, dtype=np.float64).reshape(-1, 4)
    if len(data) > 1 and np.array_equal(data[0, :2], data[-1, :2]):
        data, lines = data[:-1], lines[:-1]  # a loop written with its first point repeated
    if len(data) < 4:
        raise TrackError(where, f"too few points ({len(data)} < 4)")
    for col in (2, 3):
        bad = np.nonzero(data[:, col] <= 0)[0]
        if len(bad):
            raise TrackError(where, f"line {lines[bad[0]]}: {COLUMNS[col]} must be positive, got {data[bad[0], col]:g}")
    step = np.linalg.norm(np.diff(data[:, :2], axis=0), axis=1)
    dup = np.nonzero(step < 1e-6)[0]
    if len(dup):
        raise TrackError(where, f"lines {lines[dup[0]]} and {lines[dup[0] + 1]}: duplicate consecutive points")
    try:
        return Track(name or path.stem, data[:, :2], data[:, 3], data[:, 2], patches, base_mu)
    except TrackError as e:
        raise TrackError(where, e.problem) from None


def _column_order(header: str, where: str, lineno: int) -> list[int] | None:
    """Column positions from a header naming them, or None for a comment that names none."""
    names = [n.strip() for n in header.lstrip("#").split(",")]
    if not any(n in COLUMNS for n in names):
        return None
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise TrackError(where, f"line {lineno}: header lacks column(s) {', '.join(missing)}")
    if len(names) != 4:
        raise TrackError(where, f"line {lineno}: header must name exactly the 4 columns {','.join(COLUMNS)}")
    return [names.index(c) for c in COLUMNS]


def save_track_csv(track: Track, path: str | os.PathLike[str]) -> Path:
    """Write centerline and widths (not patches) atomically in the racing CSV format."""
    path = Path(path)
    data = np.column_stack([track.centerline, track.w_right, track.w_left])
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write("# " + ",".join(COLUMNS) + "\n")
        np.savetxt(f, data, fmt="%.4f", delimiter=",")
    return path
