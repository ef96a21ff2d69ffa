"""Corners of any closed track, found from its curvature (the one detection behind stats and the ice rule).

    detect_corners(track) -> list[Corner]     # in driving order from the start line

The curvature is sampled every DS m along the lap and averaged over SMOOTH m (a circular moving
average: the heading change over SMOOTH m divided by SMOOTH m, which tames the centimetre noise of
surveyed centerlines). A corner is a maximal stretch where that curvature keeps one sign and its
magnitude stays at or above CORNER_KAPPA = 1/400 1/m (a radius of 400 m or less), with stretches of
the same sign less than MERGE_GAP m apart joined, and which turns the car by MIN_TURN_DEG or more.
Its radius is 1 / the peak averaged curvature; its apex is the middle of the stretch curved within
5 % of that peak (the middle of a constant-radius arc). The two halves of a chicane turn opposite ways: they are two
corners.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from s3.tracks.track import Track

DS = 1.0  # m between curvature samples
SMOOTH = 5.0  # m of the circular moving average of the curvature
CORNER_KAPPA = 1.0 / 400.0  # 1/m: a corner is where the road is curved this much or more (radius <= 400 m)
MERGE_GAP = 10.0  # m: same-direction stretches closer than this are one corner
MIN_TURN_DEG = 10.0  # deg: a stretch that turns less is a kink, not a corner
APEX_SHARE = 0.95  # the apex is the middle of the stretch curved at least this share of the peak


@dataclass(frozen=True)
class Corner:
    """One corner; arc lengths in m from the start line (exit may exceed the lap length when it wraps)."""

    index: int  # 0-based, in driving order from the start line
    entry: float  # s where |curvature| first reaches CORNER_KAPPA
    apex: float  # s of the middle of the tightest part
    exit: float  # s where it falls below CORNER_KAPPA again
    radius: float  # m, 1 / peak averaged |curvature|
    turn_deg: float  # signed heading change over the corner, left positive

    @property
    def direction(self) -> int:
        """+1 for a left-hand corner, -1 for a right-hander."""
        return 1 if self.turn_deg > 0 else -1

    @property
    def name(self) -> str:
        return f"C{self.index + 1}"


def smoothed_curvature(track: Track) -> tuple[np.ndarray, np.ndarray]:
    """(s [n] in m at ~DS spacing, curvature [n] in 1/m averaged over SMOOTH m, left positive)."""
    n = max(8, int(round(track.length / DS)))
    s = np.arange(n) * (track.length / n)
    kappa = track.curvature_at(s)
    half = max(0, int(round(SMOOTH / (track.length / n) / 2)))
    if half:
        kappa = np.mean(np.stack([np.roll(kappa, k) for k in range(-half, half + 1)]), axis=0)
    return s, kappa


def detect_corners(track: Track) -> list[Corner]:
    """The track's corners in driving order (see the module docstring for the rule)."""
    s, kappa = smoothed_curvature(track)
    n, ds = len(s), track.length / len(s)
    sign = np.where(np.abs(kappa) >= CORNER_KAPPA, np.sign(kappa), 0.0).astype(int)
    if (sign != 0).all() and (sign == sign[0]).all():  # curved all the way round (a circle): one corner
        runs = [(0, n - 1, int(sign[0]))]
    else:
        shift = int(np.argmax(sign == 0)) if (sign == 0).any() else int(np.argmax(sign != sign[0]))
        runs = _runs(np.roll(sign, -shift), shift, n)
        runs = _merge(runs, int(round(MERGE_GAP / ds)), n)
    corners = []
    for i0, i1, _sign in runs:
        idx = np.arange(i0, i1 + 1) % n
        turn = float(np.degrees(kappa[idx].sum() * ds))
        if abs(turn) < MIN_TURN_DEG:
            continue
        mag = np.abs(kappa[idx])
        tight = np.nonzero(mag >= APEX_SHARE * mag.max())[0]
        apex = i0 + 0.5 * float(
            tight[0] + tight[-1] + 1
        )  # middle of the tightest part (a constant-radius arc's middle)
        corners.append((i0, i1, apex, float(mag.max()), turn))
    corners.sort(key=lambda c: c[0] % n)
    return [
        Corner(k, i0 * ds, apex * ds, (i1 + 1) * ds, 1.0 / peak, turn)
        for k, (i0, i1, apex, peak, turn) in enumerate(corners)
    ]


def _runs(sign: np.ndarray, shift: int, n: int) -> list[tuple[int, int, int]]:
    """(first, last, sign) of the non-zero constant-sign runs of `sign` (rolled by -shift), in unrolled indices."""
    runs, k = [], 0
    while k < n:
        if sign[k] == 0:
            k += 1
            continue
        j = k
        while j + 1 < n and sign[j + 1] == sign[k]:
            j += 1
        runs.append(((k + shift) % n, (k + shift) % n + (j - k), int(sign[k])))
        k = j + 1
    return runs


def _merge(runs: list[tuple[int, int, int]], gap: int, n: int) -> list[tuple[int, int, int]]:
    """Join consecutive same-sign runs separated by fewer than `gap` samples (around the loop too)."""
    out: list[tuple[int, int, int]] = []
    for run in runs:
        if out and out[-1][2] == run[2] and (run[0] - out[-1][1]) % n <= gap:
            out[-1] = (out[-1][0], out[-1][1] + (run[1] - out[-1][1]) % n, run[2])
        else:
            out.append(run)
    if len(out) > 1 and out[-1][2] == out[0][2] and (out[0][0] - out[-1][1]) % n <= gap:
        last = out.pop()
        out[0] = (last[0], last[1] + (out[0][1] - last[1]) % n, last[2])
    return out


def corner_radius_stats(corners: list[Corner]) -> dict[str, float | None]:
    """min / median / max corner radius, the max/min ratio and the interquartile range (m), None without corners."""
    if not corners:
        return {
            "radius_min_m": None,
            "radius_median_m": None,
            "radius_max_m": None,
            "radius_ratio": None,
            "radius_iqr_m": None,
        }
    r = np.array([c.radius for c in corners])
    q1, q3 = np.percentile(r, [25, 75])
    return {
        "radius_min_m": float(r.min()),
        "radius_median_m": float(np.median(r)),
        "radius_max_m": float(r.max()),
        "radius_ratio": float(r.max() / r.min()),
        "radius_iqr_m": float(q3 - q1),
    }


def turn_total_deg(corners: list[Corner]) -> float:
    """Sum of |turn| over the corners (deg): how much cornering a lap holds."""
    return float(math.fsum(abs(c.turn_deg) for c in corners))
