"""Ice for any circuit: patches placed by a documented rule, or read from a sidecar CSV.

    rule_ice_patches(track) -> list[(label, FrictionPatch)]
    read_ice_csv(path, track=None) -> list[(label, FrictionPatch)]

THE RULE. Corners come from s3.tracks.corners.detect_corners (|curvature| >= 1/400 1/m averaged
over 5 m, turning 10 deg or more), ranked by sharpness: smallest radius (to the metre) first, then
the larger turn (to the degree), then the earlier entry. Seven slots are filled in this order, each by the sharpest
corner not yet used whose patch fits (at least GAP m clear of every patch already placed, else that corner is passed
over for the slot):

    2 x braking zone  BRAKE_LEN m, full width, ending BRAKE_GAP m before the corner's entry (clipped
                      so that it starts no earlier than the previous corner's exit)
    3 x mid-corner    centred on the apex, half the corner's length (MID_MIN..MID_MAX m); the inside
                      half, then the outside half, then the inside half again
    2 x exit          EXIT_LEN m, full width, from the corner's exit (clipped at the next entry)

All patches have mu ICE_MU = 0.15 (as the road course's hand-placed ones); "full width" reaches
1 m beyond both edges, a half spans the centerline to 1 m beyond that edge. A track with fewer
corners gets fewer patches. The result depends on the geometry only: deterministic.

THE SIDECAR. For a circuit CSV `my.csv`, a file `my.ice.csv` next to it replaces the rule:

    # s_start_m,s_end_m,d_min_m,d_max_m,mu,label
    395,455,-7,7,0.15,braking zone before the hairpin
    1040,1075,0,7,0.15

one patch per line, arc lengths and lateral offsets (left positive) in metres as in
FrictionPatch; the label is optional (the rest of the line, commas allowed). Lines starting with
"#" are comments. Every problem is one line naming the file and the line, as csv_loader's are.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from s3.tracks.corners import Corner, detect_corners
from s3.tracks.road_course import ICE_MU
from s3.tracks.track import FrictionPatch, Track, TrackError

BRAKE_LEN = 50.0  # m of a braking-zone patch
BRAKE_GAP = 5.0  # m between a braking-zone patch and the corner's entry
MID_MIN, MID_MAX = 10.0, 40.0  # m: bounds of a mid-corner patch's length
EXIT_LEN = 40.0  # m of an exit patch
MIN_LEN = 10.0  # m: a clipped patch shorter than this does not fit
GAP = 5.0  # m of clear road between two patches
SLOTS = ("brake", "brake", "inside", "outside", "inside", "exit", "exit")
SIDECAR_COLUMNS = ("s_start_m", "s_end_m", "d_min_m", "d_max_m", "mu", "label")

Labelled = list[tuple[str, FrictionPatch]]


def rule_ice_patches(track: Track, mu: float = ICE_MU) -> Labelled:
    """The rule's patches for `track` (see the module docstring), in driving order, labelled."""
    corners = detect_corners(track)
    ranked = sorted(corners, key=sharpness)
    rank = {c.index: k + 1 for k, c in enumerate(ranked)}
    length = track.length
    full = (-float(track.w_right.max()) - 1.0, float(track.w_left.max()) + 1.0)
    used: set[int] = set()
    placed: list[tuple[float, float, str, tuple[float, float]]] = []  # (start, end, label, (d_min, d_max))
    for slot in SLOTS:
        for c in ranked:
            if c.index in used:
                continue
            span = _span(slot, c, corners, length)
            if span is None or any(_overlap(span, (a, b), length) for a, b, _, _ in placed):
                continue
            d, where = _lateral(slot, c, full)
            what = {"brake": "braking zone", "exit": "exit"}.get(slot, "mid-corner")
            label = (
                f"{c.name} {what}, {where} (sharpness rank {rank[c.index]}, R {c.radius:.0f} m "
                f"{'left' if c.direction > 0 else 'right'})"
            )
            placed.append((span[0], span[1], label, d))
            used.add(c.index)
            break
    placed.sort(key=lambda p: p[0] % length)
    out = []
    for a, b, label, (d_min, d_max) in placed:
        start = a % length
        out.append(
            (label, FrictionPatch(round(start, 2), round(start + (b - a), 2), round(d_min, 2), round(d_max, 2), mu))
        )
    return out


def sharpness(c: Corner) -> tuple[float, float, float]:
    """Sort key, sharpest first: radius to the whole metre, then the larger turn in whole degrees, then the earlier
    entry (rounded so that corners designed alike rank by position, not by the last centimetre of survey noise)."""
    return (round(c.radius), -round(abs(c.turn_deg)), c.entry)


def _span(slot: str, c: Corner, corners: list[Corner], length: float) -> tuple[float, float] | None:
    """[start, end) in m (unwrapped, start may be negative) of the slot's patch at corner c, or None if it does not
    fit."""
    prev, nxt = corners[c.index - 1], corners[(c.index + 1) % len(corners)]  # c itself on a one-corner track
    if slot == "brake":
        end = c.entry - BRAKE_GAP
        limit = prev.exit
        while limit > c.entry:  # the previous corner's exit, before this entry
            limit -= length
        start = max(end - BRAKE_LEN, limit)
    elif slot == "exit":
        start = c.exit
        limit = nxt.entry
        while limit < start:  # the next corner's entry, after this exit
            limit += length
        end = min(start + EXIT_LEN, limit)
    else:
        half = min(MID_MAX, max(MID_MIN, 0.5 * (c.exit - c.entry))) / 2.0
        start, end = c.apex - half, c.apex + half
    return (start, end) if end - start >= MIN_LEN else None


def _overlap(a: tuple[float, float], b: tuple[float, float], length: float) -> bool:
    """True when arcs a and b of the loop come closer than GAP m (they may wrap)."""
    a0 = a[0] % length
    b0 = (b[0] - a0) % length  # b's start relative to a's start
    la, lb = a[1] - a[0], b[1] - b[0]
    return b0 < la + GAP or b0 + lb > length - GAP


def _lateral(slot: str, c: Corner, full: tuple[float, float]) -> tuple[tuple[float, float], str]:
    """(d_min, d_max) in m and its description: full width, or the inside/outside half of corner c."""
    if slot in ("brake", "exit"):
        return full, "full width"
    inside_left = (slot == "inside") == (c.direction > 0)
    return ((0.0, full[1]), f"{slot} (left) half") if inside_left else ((full[0], 0.0), f"{slot} (right) half")


def read_ice_csv(path: str | os.PathLike[str], track: Track | None = None) -> Labelled:
    """Labelled patches from a sidecar CSV (format in the module docstring); `track` bounds the arc lengths."""
    path = Path(path)
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TrackError(where, f"cannot read: {e}") from None
    out: Labelled = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",", 5)]
        if len(fields) < 5:
            raise TrackError(
                where, f"line {lineno}: expected 5 or 6 columns {','.join(SIDECAR_COLUMNS)}, got {len(fields)}"
            )
        values = []
        for col, field in zip(SIDECAR_COLUMNS, fields[:5]):
            try:
                v = float(field)
            except ValueError:
                if not out and col == "s_start_m" and field == "s_start_m":
                    break  # an uncommented header line
                raise TrackError(where, f"line {lineno}: non-numeric {col} {field!r}") from None
            if not math.isfinite(v):
                raise TrackError(where, f"line {lineno}: {col} must be finite, got {field}")
            values.append(v)
        if len(values) < 5:
            continue
        s0, s1, d0, d1, mu = values
        if not d0 < d1:
            raise TrackError(where, f"line {lineno}: d_min_m must be below d_max_m, got {d0:g} >= {d1:g}")
        if not 0.0 < mu <= 2.0:
            raise TrackError(where, f"line {lineno}: mu must be in (0, 2], got {mu:g}")
        if s1 == s0:
            raise TrackError(where, f"line {lineno}: empty patch (s_start_m = s_end_m = {s0:g})")
        if track is not None and abs(s1 - s0) > track.length:
            raise TrackError(
                where, f"line {lineno}: patch [{s0:g}, {s1:g}] is longer than the {track.length:.1f} m lap"
            )
        label = fields[5] if len(fields) == 6 and fields[5] else f"patch {len(out) + 1} ({s0:g}-{s1:g} m)"
        out.append((label, FrictionPatch(s0, s1, d0, d1, mu)))
    if not out:
        raise TrackError(
            where, "no patches (expected one line per patch: s_start_m,s_end_m,d_min_m,d_max_m,mu[,label])"
        )
    return out
