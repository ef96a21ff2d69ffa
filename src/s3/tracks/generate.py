"""Seeded procedural training tracks: diverse closed roads with optional ice patches.

Training a policy on many different tracks (curvature and friction diversity) is what lets it
drive a held-out course; every track is a pure function of its seed, so datasets and training
runs are reproducible. Shapes come from random radial control points joined by a periodic
spline, scaled to a random length, and rejected when a corner is tighter than the minimum
radius or two parts of the road come too close (overlapping tarmac).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.spatial import cKDTree

from s3.tracks.geometry import periodic_spline
from s3.tracks.track import FrictionPatch, Track, TrackError

_CLEARANCE = 6.0  # metres of verge between two parts of the road, beyond their widths
_SEPARATION_ARC = 60.0  # points closer than this along the road are neighbours, not other parts


class ProceduralTrackParams(BaseModel):
    """What kinds of tracks the generator may produce (all lengths in metres)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    length_min: float = Field(600.0, ge=200.0, le=20000.0)
    length_max: float = Field(1500.0, ge=200.0, le=20000.0)
    width_min: float = Field(8.0, gt=3.0, le=30.0, description="total road width")
    width_max: float = Field(12.0, gt=3.0, le=30.0, description="total road width")
    min_corner_radius: float = Field(12.0, gt=0.0, le=500.0)
    control_points_min: int = Field(8, ge=4, le=64)
    control_points_max: int = Field(20, ge=4, le=64)
    radial_jitter_min: float = Field(0.2, ge=0.0, lt=0.9, description="relative spread of control-point radii")
    radial_jitter_max: float = Field(0.7, ge=0.0, lt=0.9)
    ds: float = Field(2.0, gt=0.0, le=10.0, description="spacing of the centerline points")
    patch_probability: float = Field(0.5, ge=0.0, le=1.0, description="chance a track has friction patches")
    patches_min: int = Field(1, ge=1, le=50)
    patches_max: int = Field(4, ge=1, le=50)
    patch_length_min: float = Field(10.0, gt=0.0)
    patch_length_max: float = Field(80.0, gt=0.0)
    patch_mu_min: float = Field(0.1, gt=0.0, le=2.0)
    patch_mu_max: float = Field(0.3, gt=0.0, le=2.0)
    full_width_probability: float = Field(0.35, ge=0.0, le=1.0)
    half_width_probability: float = Field(0.35, ge=0.0, le=1.0)
    max_attempts: int = Field(300, ge=1, le=10000)

    @model_validator(mode="after")
    def _ranges(self) -> ProceduralTrackParams:
        for lo, hi in (
            ("length_min", "length_max"),
            ("width_min", "width_max"),
            ("control_points_min", "control_points_max"),
            ("radial_jitter_min", "radial_jitter_max"),
            ("patches_min", "patches_max"),
            ("patch_length_min", "patch_length_max"),
            ("patch_mu_min", "patch_mu_max"),
        ):
            if getattr(self, lo) > getattr(self, hi):
                raise ValueError(f"{lo} must not exceed {hi}")
        if self.full_width_probability + self.half_width_probability > 1.0:
            raise ValueError("full_width_probability + half_width_probability must not exceed 1")
        if self.width_max / 2.0 >= self.min_corner_radius:
            raise ValueError("half the road width must stay below min_corner_radius")
        return self


def procedural_track(seed: int, params: ProceduralTrackParams | None = None) -> Track:
    """The track for `seed`: the same seed and params always give the same track."""
    params = params or ProceduralTrackParams()
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5353]))
    for _ in range(params.max_attempts):
        xy = _candidate_shape(rng, params)
        if xy is None:
            continue
        wl, wr = _widths(rng, params, len(xy))
        try:
            track = Track(f"procedural_{seed}", xy, wl, wr)
        except TrackError:
            continue
        if rng.random() < params.patch_probability:
            track = track.with_patches(random_patches(rng, params, track))
        return track
    raise TrackError(f"procedural track {seed}", f"no valid shape in {params.max_attempts} attempts; loosen the params")


def _candidate_shape(rng: np.random.Generator, params: ProceduralTrackParams) -> np.ndarray | None:
    """Centerline points of one random shape at the target length, or None if unusable."""
    n = int(rng.integers(params.control_points_min, params.control_points_max + 1))
    angles = 2.0 * np.pi * (np.arange(n) + rng.uniform(-0.35, 0.35, n)) / n
    jitter = rng.uniform(params.radial_jitter_min, params.radial_jitter_max)
    radii = 1.0 + jitter * rng.uniform(-1.0, 1.0, n)
    aspect = rng.uniform(0.6, 1.0)
    ctrl = np.stack([radii * np.cos(angles), aspect * radii * np.sin(angles)], axis=1)
    ctrl = ctrl @ _rotation(rng.uniform(0.0, 2.0 * np.pi)).T
    chord = np.linalg.norm(np.roll(ctrl, -1, axis=0) - ctrl, axis=1)
    t = np.concatenate([[0.0], np.cumsum(chord)[:-1]])
    dense_t = np.linspace(0.0, chord.sum(), 4000, endpoint=False)
    dense = periodic_spline(t, chord.sum(), ctrl, dense_t)
    seg = np.linalg.norm(np.roll(dense, -1, axis=0) - dense, axis=1)
    target = rng.uniform(params.length_min, params.length_max)
    dense *= target / seg.sum()
    arc = np.concatenate([[0.0], np.cumsum(seg * target / seg.sum())])
    m = max(8, int(round(target / params.ds)))
    s_new = np.arange(m) * (arc[-1] / m)
    xy = np.stack([np.interp(s_new, arc, np.append(dense[:, k], dense[0, k])) for k in range(2)], axis=1)
    if _too_tight(xy, params.min_corner_radius) or too_close(xy, params.width_max + _CLEARANCE):
        return None  # a crossing also counts as too close; Track() double-checks it exactly
    return xy


def _too_tight(xy: np.ndarray, min_radius: float) -> bool:
    p0, p2 = np.roll(xy, 1, axis=0), np.roll(xy, -1, axis=0)
    a, b, c = xy - p0, p2 - xy, p2 - p0
    cross = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    kappa = 2.0 * np.abs(cross) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) * np.linalg.norm(c, axis=1))
    return bool(kappa.max() * min_radius > 1.0)


def too_close(xy: np.ndarray, min_gap: float) -> bool:
    """True when two parts of the road that are far apart along it are close in space.

    A k-d tree lists the point pairs within min_gap (plus a hair of margin) and their exact
    distances decide: the all-pairs answer (tests/test_tracks.py) without its O(m^2) cost, which
    was over half the time of making a training track.
    """
    seg = np.linalg.norm(np.roll(xy, -1, axis=0) - xy, axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)[:-1]])
    length = seg.sum()
    pairs = cKDTree(xy).query_pairs(min_gap * (1.0 + 1e-9), output_type="ndarray")  # [P, 2], i < j
    i, j = pairs[:, 0], pairs[:, 1]
    d = np.linalg.norm(xy[i] - xy[j], axis=1)
    along = np.abs(s[i] - s[j])
    along = np.minimum(along, length - along)
    return bool((d[along > _SEPARATION_ARC] < min_gap).any())


def _widths(rng: np.random.Generator, params: ProceduralTrackParams, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Slowly varying total width within the range, split evenly about the centerline."""
    w0 = rng.uniform(params.width_min, params.width_max)
    amp = 0.5 * rng.uniform(0.0, params.width_max - params.width_min)
    phase = 2.0 * np.pi * (np.arange(m) / m) * rng.integers(1, 4) + rng.uniform(0.0, 2.0 * np.pi)
    w = np.clip(w0 + amp * np.sin(phase), params.width_min, params.width_max)
    return w / 2.0, w / 2.0


def random_patches(rng: np.random.Generator, params: ProceduralTrackParams, track: Track) -> list[FrictionPatch]:
    """Random low-grip patches: full width, one half of the road, or a strip across part of it."""
    out = []
    wl, wr = float(track.w_left.max()), float(track.w_right.max())
    for _ in range(int(rng.integers(params.patches_min, params.patches_max + 1))):
        s0 = rng.uniform(0.0, track.length)
        span = min(rng.uniform(params.patch_length_min, params.patch_length_max), 0.5 * track.length)
        mu = rng.uniform(params.patch_mu_min, params.patch_mu_max)
        kind = rng.random()
        if kind < params.full_width_probability:
            d_min, d_max = -wr - 1.0, wl + 1.0
        elif kind < params.full_width_probability + params.half_width_probability:
            d_min, d_max = (0.0, wl + 1.0) if rng.random() < 0.5 else (-wr - 1.0, 0.0)
        else:
            width = rng.uniform(2.0, max(2.0, wl + wr - 1.0))
            d_min = rng.uniform(-wr, wl - width)
            d_max = d_min + width
        out.append(FrictionPatch(s0, s0 + span, d_min, d_max, mu))
    return out


def _rotation(a: float) -> np.ndarray:
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
