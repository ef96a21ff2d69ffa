"""Track pools for the distilled environment: procedural training tracks and held-out validation tracks.

Two procedural generators, mixed by `circuit_fraction`:
- spline blobs (s3.tracks.generate.procedural_track): smooth random loops. Measured on 40 seeds:
  the sharpest turn within 60 m of road is 70-116 degrees, never a hairpin;
- circuits (`circuit_track` below): straights and constant-radius corners joined by clothoids,
  with random corner sequences that include hairpins (120-180 degrees at R 12-25 m), sweepers and
  long straights -- the corner vocabulary of real road courses, so that a policy has braked for a
  hairpin before it meets one. Their layouts are random; the built-in road course is not among
  them and is never used for training or selection.
Either kind is mirrored (x, y) -> (x, -y) with `mirror_probability`: both generators draw
counter-clockwise loops whose tight corners are mostly left-handers, while a real course (the
built-in one included) has tight right-handers too.
Seeds (every track is a pure function of its seed, see s3.tracks.generate):
- training tracks draw seeds from [0, 2^30) with a generator seeded by `seed`;
- validation tracks use seeds 2^30 + seed * 1000 + i, a range no training draw can reach, so the
  checkpoint is selected on roads the policy never trained on. The built-in road course is never
  used for training or selection.
Domain randomisation of the surface: the friction patch density and range come from
`TrackPoolParams.procedural` (patch_probability, patches_min/max, patch_length_*, patch_mu_*), the
grip outside patches from base_mu_min/max (sampled per training track).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from s3.rl.params import CircuitTrackParams, TrackPoolParams
from s3.tracks.generate import ProceduralTrackParams, procedural_track, random_patches, too_close
from s3.tracks.track import FrictionPatch, Track, TrackError

VALIDATION_SEED_BASE = 2**30


def mirrored(track: Track) -> Track:
    """The mirror image (x, -y): every left turn becomes a right turn; widths and patches follow."""
    patches = [FrictionPatch(p.s_start, p.s_end, -p.d_max, -p.d_min, p.mu) for p in track.patches]
    return Track(
        f"{track.name}_mirrored",
        track.centerline * np.array([1.0, -1.0]),
        track.w_right,
        track.w_left,
        patches,
        track.base_mu,
    )


def _with_base_mu(track: Track, mu: float) -> Track:
    if mu == track.base_mu:
        return track
    return Track(track.name, track.centerline, track.w_left, track.w_right, track.patches, base_mu=mu)


def _eased(track: Track, severity: float) -> Track:
    """`track` with its grip moved toward dry: mu -> 1 + (mu - 1) * severity (1: unchanged)."""
    if severity >= 1.0:
        return track
    ease = lambda mu: 1.0 + (mu - 1.0) * severity
    patches = [dataclasses.replace(p, mu=ease(p.mu)) for p in track.patches]
    return Track(track.name, track.centerline, track.w_left, track.w_right, patches, base_mu=ease(track.base_mu))


class TrackPool:
    """A refreshable pool of procedural training tracks plus a fixed validation set."""

    def __init__(self, params: TrackPoolParams, seed: int = 0) -> None:
        self.params = params
        self.seed = int(seed)
        self._rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0x7261]))
        self.refreshes = 0  # the grip curriculum's clock (a resumed pool replays its refreshes)
        self.tracks: list[Track] = [self._new_track() for _ in range(params.pool_size)]
        self.generated = len(self.tracks)

    def _new_track(self) -> Track:
        p = self.params
        seed = int(self._rng.integers(0, VALIDATION_SEED_BASE))
        circuit = bool(self._rng.random() < p.circuit_fraction)
        mirror = bool(self._rng.random() < p.mirror_probability)
        mu = float(self._rng.uniform(p.base_mu_min, p.base_mu_max)) if p.base_mu_max > p.base_mu_min else p.base_mu_min
        track = make_track(seed, p, circuit)
        return _eased(_with_base_mu(mirrored(track) if mirror else track, mu), self.severity)

    @property
    def severity(self) -> float:
        """How much of the drawn ice new tracks get: 1 without a grip curriculum or once it is over."""
        n = self.params.grip_curriculum
        return 1.0 if n == 0 else min(1.0, self.refreshes / n)

    def refresh(self, fraction: float | None = None) -> list[int]:
        """Replace a share of the pool with new tracks; returns the replaced indices."""
        fraction = self.params.refresh_fraction if fraction is None else fraction
        k = int(round(fraction * len(self.tracks)))
        self.refreshes += 1
        if k <= 0:
            return []
        idx = sorted(int(i) for i in self._rng.choice(len(self.tracks), size=k, replace=False))
        for i in idx:
            self.tracks[i] = self._new_track()
        self.generated += k
        return idx

    def validation_tracks(self) -> list[Track]:
        """The held-out procedural tracks (same generator params as training, disjoint seeds)."""
        return validation_tracks(self.params, self.seed)


def make_track(seed: int, params: TrackPoolParams, circuit: bool) -> Track:
    """A spline-blob or circuit procedural track for `seed` (friction patches per `params.procedural`)."""
    return (
        circuit_track(seed, params.circuit, params.procedural) if circuit else procedural_track(seed, params.procedural)
    )


def dry_runs(tracks: Sequence[Track], track_index: Sequence[int] | np.ndarray) -> np.ndarray:
    """bool [M]: True where run i's track (tracks[track_index[i]]) has no friction patch and full base grip."""
    return np.array([not tracks[i].patches and tracks[i].base_mu >= 1.0 for i in track_index], dtype=bool)


def validation_tracks(params: TrackPoolParams, seed: int = 0, first: int | None = None) -> list[Track]:
    """Seeds 2^30 + seed * 1000 + i; the first round(circuit_fraction * n) are circuits, the rest blobs;
    with mirror_probability > 0, every second track of each kind is mirrored. `first`: only the
    first that many of the n (the same tracks, without generating the rest)."""
    base = VALIDATION_SEED_BASE + int(seed) * 1000
    n = params.validation_tracks
    n_circuit = int(round(params.circuit_fraction * n))
    out = []
    for i in range(n if first is None else min(int(first), n)):
        track = make_track(base + i, params, i < n_circuit)
        k = i if i < n_circuit else i - n_circuit
        out.append(mirrored(track) if params.mirror_probability > 0 and k % 2 == 1 else track)
    return out


# ---------------------------------------------------------------------------- circuit generator
_STEP = 0.25  # integration step along the road [m]
_CLEARANCE = 6.0  # m of verge between two parts of the road, beyond their widths


def _corner_profile(turn: float, radius: float) -> np.ndarray:
    """Curvature samples of one corner: clothoid in, constant arc, clothoid out; turns exactly `turn` rad."""
    arc = abs(turn) * radius
    ramp = min(0.35 * arc, 35.0)
    n_ramp = max(1, int(round(ramp / _STEP)))
    n_arc = max(0, int(round((arc - ramp) / _STEP)))
    up = (np.arange(n_ramp) + 0.5) / n_ramp
    prof = np.concatenate([up, np.ones(n_arc), up[::-1]]) * np.sign(turn) / radius
    return prof * turn / (prof.sum() * _STEP)


def _corners(rng: np.random.Generator, p: CircuitTrackParams) -> list[tuple[float, float]] | None:
    """(turn [rad], radius [m]) per corner, turning +360 degrees in total, or None."""
    n = int(rng.integers(p.corners_min, p.corners_max + 1))
    kinds = rng.choice(
        3, size=n, p=[p.hairpin_probability, 1.0 - p.hairpin_probability - p.sweeper_probability, p.sweeper_probability]
    )
    lo = np.array([120.0, 40.0, 20.0])[kinds]
    hi = np.array([180.0, 120.0, 60.0])[kinds]
    mag = rng.uniform(lo, hi)
    r_lo = np.array([p.hairpin_radius_min, p.hairpin_radius_min + 2.0, 60.0])
    r_hi = np.array([p.hairpin_radius_max, 60.0, 250.0])
    radius = np.exp(rng.uniform(np.log(r_lo[kinds]), np.log(r_hi[kinds])))  # log-uniform: tight corners are common
    left = rng.random(n) < 0.65
    if left.sum() == 0:
        return None
    alpha = (360.0 + mag[~left].sum()) / mag[left].sum()  # scale the left turns so the loop closes in heading
    mag = np.where(left, mag * alpha, mag)
    if not 0.6 <= alpha <= 1.6 or mag.max() > 185.0:
        return None
    return [(float(np.radians(m if lf else -m)), float(r)) for m, lf, r in zip(mag, left, radius)]


def _layout(corners: list[tuple[float, float]], straights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integrate straights + corners: dense points [n, 2], the heading of each straight [K], curvature [n]."""
    pieces, heading, straight_heading = [], 0.0, []
    for (turn, radius), length in zip(corners, straights):
        pieces.append(np.zeros(max(1, int(round(length / _STEP)))))
        straight_heading.append(heading)
        prof = _corner_profile(turn, radius)
        pieces.append(prof)
        heading += float(prof.sum() * _STEP)
    kappa = np.concatenate(pieces)
    h = np.concatenate([[0.0], np.cumsum(kappa[:-1] * _STEP)]) + 0.5 * kappa * _STEP
    xy = np.concatenate([[[0.0, 0.0]], np.cumsum(np.stack([np.cos(h), np.sin(h)], 1) * _STEP, axis=0)])
    return xy, np.array(straight_heading), kappa


def circuit_track(
    seed: int, params: CircuitTrackParams | None = None, surface: ProceduralTrackParams | None = None
) -> Track:
    """A random closed circuit of straights and clothoid-eased constant-radius corners (pure function of seed).

    The straights are stretched by the least-squares change that closes the loop exactly (the
    end point is linear in their lengths); layouts needing a straight under `straight_min` / 2,
    crossing themselves or running two parts of the road closer than their widths plus 6 m are
    rejected. Widths and friction patches follow `surface` (the spline-blob generator's params).
    """
    p = params or CircuitTrackParams()
    surface = surface or ProceduralTrackParams()
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x43495243]))
    for _ in range(p.max_attempts):
        corners = _corners(rng, p)
        if corners is None:
            continue
        straights = rng.uniform(p.straight_min, p.straight_max, len(corners))
        straights[int(rng.integers(len(corners)))] = rng.uniform(p.main_straight_min, p.main_straight_max)
        xy, sh, _ = _layout(corners, straights)
        u = np.stack([np.cos(sh), np.sin(sh)])  # [2, K]: end-point change per metre of each straight
        straights = straights - u.T @ np.linalg.solve(u @ u.T, xy[-1] - xy[0])
        if straights.min() < 0.5 * p.straight_min:
            continue
        xy, _, _ = _layout(corners, straights)
        if np.linalg.norm(xy[-1] - xy[0]) > 1.0:
            continue
        arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])
        if not p.length_min <= arc[-1] <= p.length_max:
            continue
        xy = xy - (xy[-1] - xy[0]) * (arc / arc[-1])[:, None]
        m = int(round(arc[-1] / surface.ds))
        s_new = np.arange(m) * arc[-1] / m
        pts = np.stack([np.interp(s_new, arc, xy[:, 0]), np.interp(s_new, arc, xy[:, 1])], axis=1)
        rot = rng.uniform(0.0, 2.0 * np.pi)
        pts = pts @ np.array([[np.cos(rot), np.sin(rot)], [-np.sin(rot), np.cos(rot)]])
        if too_close(pts, surface.width_max + _CLEARANCE):
            continue
        w0 = rng.uniform(surface.width_min, surface.width_max)
        amp = 0.5 * rng.uniform(0.0, surface.width_max - surface.width_min)
        w = np.clip(
            w0 + amp * np.sin(2 * np.pi * rng.integers(1, 4) * s_new / arc[-1] + rng.uniform(0, 2 * np.pi)),
            surface.width_min,
            surface.width_max,
        )
        try:
            track = Track(f"circuit_{seed}", pts, w / 2, w / 2)
        except TrackError:
            continue
        if rng.random() < surface.patch_probability:
            track = track.with_patches(random_patches(rng, surface, track))
        return track
    raise TrackError(f"circuit track {seed}", f"no valid layout in {p.max_attempts} attempts; loosen the params")


def start_grid(tracks: Sequence[Track], starts_per_track: int) -> tuple[np.ndarray, np.ndarray]:
    """Evenly spaced start arc lengths: (track index [M], s [M]) with M = len(tracks) * starts_per_track."""
    ti, s = [], []
    for k, t in enumerate(tracks):
        for j in range(starts_per_track):
            ti.append(k)
            s.append(t.length * j / starts_per_track)
    return np.array(ti, dtype=np.int64), np.array(s, dtype=np.float64)
