"""Metrics of one evaluation run, and their aggregation over starts and seeds.

Everything here works on a trajectory dict of equal-length arrays (T + 1 rows, row 0 the start)
with at least the keys t, vx, vy, steering_cmd, throttle_cmd, brake_cmd, s, d, progress — the
keys shared by source-simulator runs (s3.evaluate.run) and distilled-environment laps
(s3.rl.rollout), so the transfer gap compares like with like. Optional keys are filled in from
the track (w_left, w_right), the velocities (speed, sideslip) or `mu` (mu_min); `yaw_rate` is
needed for the lateral jerk only (None without it).

Definitions (documented once, used everywhere):
- off-track: the car centre more than `tolerance` metres beyond a road edge; an off-track
  *event* is one entry into that state (a run that starts off track counts one).
- time off track: the control periods whose end state is off track, times dt (row 0, the start
  state, ends no period), i.e. the right-endpoint sum of the off-track indicator over the run.
- lap share: `completion_fraction`, net progress over the lap length clipped to [0, 1].
- edge margin: the distance from the car centre to the nearer road edge, min(w_left - d,
  w_right + d) (m; negative = that far beyond an edge, where it equals -beyond_edge);
  `min_edge_margin_m` is its smallest value over all rows of the run, the start included.
- lateral jerk: the body-frame lateral acceleration a_y = d(vy)/dt + vx * yaw_rate (the
  rigid-body term plus the rate of sideslip velocity, so a car sliding out counts), taken at
  the midpoint of each control period: a_y[k + 1/2] = (vy[k+1] - vy[k]) / dt + the mean of
  vx * yaw_rate at k and k+1; its first difference over dt is the jerk (m/s^3) at the interior
  rows, and `mean_abs_lateral_jerk` is the mean of |jerk| (None below 3 rows or without
  yaw_rate). Steady cornering (constant speed, radius and sideslip) gives 0; a yaw-rate step
  of r at speed v gives a total |jerk| * dt of v * r, spread over the two interior rows around it.
- steering rate / jerk: first / second finite difference of the steering command (normalised,
  [-1, 1]) over the control period, per s / per s^2; the mean of their absolute values.
- throttle/brake switches: changes between "throttle" (throttle > eps, throttle >= brake) and
  "brake" (brake > eps) phases; coasting in between does not reset the count.
- ice patch crossing: the car's unwrapped arc length (start s + progress) passes the patch's
  start (entry) and later its end (exit). A patch the run never reached, or whose exit lies past
  the end of a completed lap (a start inside the patch), is not "attempted" and is left out of
  the rates. "crossed_on_track" also requires no off-track sample from entry to exit.
  Entry/exit speeds are interpolated at the patch boundaries; peak sideslip is the largest
  |atan2(vy, |vx|)| from entry to exit.
- confidence intervals: two-sided 95 % Student-t intervals of the mean over runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from s3.tracks.geometry import patch_span
from s3.tracks.track import FrictionPatch, Track

PEDAL_EPS = 0.05


def beyond_edge(d: np.ndarray, w_left: np.ndarray, w_right: np.ndarray) -> np.ndarray:
    """How far the car centre is outside the road (m; <= 0 on the road)."""
    d = np.asarray(d, dtype=float)
    return np.where(d >= 0, d - np.asarray(w_left, dtype=float), -d - np.asarray(w_right, dtype=float))


def edge_margin(d: np.ndarray, w_left: np.ndarray, w_right: np.ndarray) -> np.ndarray:
    """Distance (m) from the car centre to the nearer road edge; negative beyond an edge."""
    d = np.asarray(d, dtype=float)
    return np.minimum(np.asarray(w_left, dtype=float) - d, np.asarray(w_right, dtype=float) + d)


def lateral_jerk(vx: np.ndarray, vy: np.ndarray, yaw_rate: np.ndarray, dt: float) -> np.ndarray:
    """Lateral jerk (m/s^3) at the interior rows: the first difference over dt of the body-frame
    lateral acceleration d(vy)/dt + vx * yaw_rate taken at the control-period midpoints."""
    vx, vy, r = (np.asarray(a, dtype=float) for a in (vx, vy, yaw_rate))
    centripetal = vx * r
    a_y = np.diff(vy) / dt + 0.5 * (centripetal[1:] + centripetal[:-1])
    return np.diff(a_y) / dt


def off_track_events(beyond: np.ndarray, tolerance: float = 0.0) -> int:
    """Number of entries into the off-track state (beyond > tolerance)."""
    off = np.asarray(beyond, dtype=float) > tolerance
    if len(off) == 0:
        return 0
    return int(off[0]) + int(np.count_nonzero(off[1:] & ~off[:-1]))


def steering_smoothness(steering_cmd: np.ndarray, dt: float) -> tuple[float, float]:
    """(mean |d steering / dt|, mean |d^2 steering / dt^2|) of the commands, per s and per s^2."""
    u = np.asarray(steering_cmd, dtype=float)
    rate = np.diff(u) / dt
    jerk = np.diff(u, n=2) / (dt * dt)
    return (float(np.abs(rate).mean()) if len(rate) else 0.0, float(np.abs(jerk).mean()) if len(jerk) else 0.0)


def pedal_switches(throttle: np.ndarray, brake: np.ndarray, eps: float = PEDAL_EPS) -> int:
    """Changes between throttle and brake phases (coasting in between ignored)."""
    th, br = np.asarray(throttle, dtype=float), np.asarray(brake, dtype=float)
    phase = np.where(br > eps, -1, np.where((th > eps) & (th >= br), 1, 0))
    phase = phase[phase != 0]
    return int(np.count_nonzero(phase[1:] != phase[:-1]))


def _interp_at(a: np.ndarray, values: np.ndarray, i: int, target: float) -> float:
    """values interpolated where a (increasing between i-1 and i) reaches target."""
    if i == 0 or a[i] == a[i - 1]:
        return float(values[i])
    f = float(np.clip((target - a[i - 1]) / (a[i] - a[i - 1]), 0.0, 1.0))
    return float(values[i - 1] * (1 - f) + values[i] * f)


def patch_crossing(
    traj: dict[str, np.ndarray],
    patch: FrictionPatch,
    length: float,
    off: np.ndarray,
    completed: bool,
) -> dict[str, Any]:
    """One patch on one run (see the module docstring for the definitions)."""
    a = traj["s"][0] + traj["progress"]  # unwrapped arc length
    start, span = patch_span(patch, length)
    k = math.floor((a[0] - start) / length) + 1  # first occurrence whose entry lies ahead of the start
    entry = start + k * length
    if entry - a[0] >= length:
        entry -= length
    out: dict[str, Any] = {
        "attempted": False,
        "crossed": False,
        "crossed_on_track": False,
        "entry_speed": None,
        "exit_speed": None,
        "peak_sideslip": None,
        "touched_patch_mu": False,
    }
    reached = np.nonzero(a >= entry)[0]
    if len(reached) == 0:
        return out
    i_in = int(reached[0])
    left = np.nonzero(a[i_in:] >= entry + span)[0]
    if len(left) == 0 and completed:
        return out  # the exit lies past the end of the lap: not evaluated from this start
    out["attempted"] = True
    speed = traj["speed"]
    out["entry_speed"] = _interp_at(a, speed, i_in, entry)
    i_out = i_in + int(left[0]) if len(left) else len(a) - 1
    seg = slice(i_in, i_out + 1)
    out["peak_sideslip"] = float(np.abs(traj["sideslip"][seg]).max())
    mu = traj["mu_min"][seg]
    out["touched_patch_mu"] = bool((mu <= patch.mu + 0.05).any())
    if len(left):
        out["crossed"] = True
        out["exit_speed"] = _interp_at(a, speed, i_out, entry + span)
        out["crossed_on_track"] = not bool(off[seg].any())
    return out


def _complete_traj(traj: dict[str, np.ndarray], track: Track) -> dict[str, np.ndarray]:
    tj = {k: np.asarray(v, dtype=float) for k, v in traj.items()}
    if "w_left" not in tj or "w_right" not in tj:
        tj["w_left"], tj["w_right"] = track.width_at(tj["s"])
    if "speed" not in tj:
        tj["speed"] = np.hypot(tj["vx"], tj["vy"])
    if "sideslip" not in tj:
        tj["sideslip"] = np.where(np.abs(tj["vx"]) > 1.0, np.arctan2(tj["vy"], np.abs(tj["vx"])), 0.0)
    if "mu_min" not in tj:
        tj["mu_min"] = tj["mu"] if "mu" in tj else np.full(len(tj["s"]), track.base_mu)
    return tj


def run_metrics(
    traj: dict[str, np.ndarray],
    track: Track,
    completed: bool,
    lap_time: float | None,
    progress: float,
    dt: float,
    tolerance: float = 0.0,
    patches: Sequence[tuple[str, FrictionPatch]] | None = None,
) -> dict[str, Any]:
    """All per-run metrics of one trajectory on `track` (patches default to the track's own).

    An empty trajectory (the simulator failed at reset) gives a failed run with no samples.
    """
    if patches is None:
        patches = [(f"patch {k}", p) for k, p in enumerate(track.patches)]
    if len(traj.get("t", ())) == 0:
        return {
            "completed": False,
            "lap_time_s": None,
            "distance_m": 0.0,
            "completion_fraction": 0.0,
            "duration_s": 0.0,
            **{k: None for k in RUN_SCALARS if k not in ("lap_time_s", "distance_m", "completion_fraction")},
            "max_speed_mps": None,
            "patches": [],
        }
    tj = _complete_traj(traj, track)
    beyond = beyond_edge(tj["d"], tj["w_left"], tj["w_right"])
    off = beyond > tolerance
    rate, jerk = steering_smoothness(tj["steering_cmd"][1:], dt)
    t = tj["t"]
    absd = np.abs(tj["d"])
    duration = float(t[-1] - t[0]) if len(t) > 1 else 0.0
    out: dict[str, Any] = {
        "completed": bool(completed),
        "lap_time_s": float(lap_time) if completed and lap_time is not None else None,
        "distance_m": float(min(max(progress, 0.0), track.length)),
        "completion_fraction": float(np.clip(progress / track.length, 0.0, 1.0)),
        "duration_s": duration,
        "mean_speed_mps": float(max(progress, 0.0) / duration) if duration > 0 else 0.0,
        "max_speed_mps": float(tj["speed"].max()),
        "off_track_events": off_track_events(beyond, tolerance),
        "time_off_track_s": float(np.count_nonzero(off[1:]) * dt),
        "mean_abs_lateral_error_m": float(absd.mean()),
        "max_abs_lateral_error_m": float(absd.max()),
        "mean_abs_steering_rate": rate,
        "mean_abs_steering_jerk": jerk,
        "pedal_switches": pedal_switches(tj["throttle_cmd"][1:], tj["brake_cmd"][1:]),
        "max_abs_sideslip_rad": float(np.abs(tj["sideslip"]).max()),
        "mean_abs_lateral_jerk": float(np.abs(lateral_jerk(tj["vx"], tj["vy"], tj["yaw_rate"], dt)).mean())
        if "yaw_rate" in tj and len(t) >= 3
        else None,
        "min_edge_margin_m": float(edge_margin(tj["d"], tj["w_left"], tj["w_right"]).min()),
        "patches": [{"label": label, **patch_crossing(tj, p, track.length, off, completed)} for label, p in patches],
    }
    return out


RUN_SCALARS = (
    "lap_time_s",
    "distance_m",
    "completion_fraction",
    "mean_speed_mps",
    "off_track_events",
    "time_off_track_s",
    "mean_abs_lateral_error_m",
    "max_abs_lateral_error_m",
    "mean_abs_steering_rate",
    "mean_abs_steering_jerk",
    "pedal_switches",
    "max_abs_sideslip_rad",
    "mean_abs_lateral_jerk",
    "min_edge_margin_m",
)
