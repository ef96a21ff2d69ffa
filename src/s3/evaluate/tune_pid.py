"""Hand-tuning aid for the `pid` baseline, on PROCEDURAL tracks only (the road course is held out).

    python -m s3.evaluate.tune_pid [--tracks 12] [--set key=value ...]

Drives one lap on each of `--tracks` procedural tracks (seeds 1000.., the RL training-track
generator with friction patches), once without and once with the patches, and prints the
completion and the total lap time. The defaults in `PidParams` were picked with it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from s3.evaluate.drivers import PidDriver
from s3.evaluate.params import PidParams
from s3.evaluate.run import run_lap
from s3.sim.mujoco_car import MujocoCar
from s3.tracks.generate import ProceduralTrackParams, procedural_track

TUNING_SEEDS_FROM = 1000  # far from the collection pool (0..n_tracks) and the RL pools
TUNING_TRACKS = ProceduralTrackParams(patch_probability=1.0, patches_min=1, patches_max=5, patch_length_max=100.0)


def score(params: PidParams, n_tracks: int = 12, verbose: bool = False) -> dict[str, float]:
    """Completion and lap times of `params` on the tuning tracks (nominal and with patches)."""
    car = MujocoCar()
    out: dict[str, list[float]] = {"nominal": [], "ice": []}
    times: dict[str, list[float]] = {"nominal": [], "ice": []}
    for seed in range(TUNING_SEEDS_FROM, TUNING_SEEDS_FROM + n_tracks):
        track = procedural_track(seed, TUNING_TRACKS)
        for cond, t in (("nominal", track.without_patches()), ("ice", track)):
            r = run_lap(car, t, PidDriver.for_sim(car, params), 0.0, 0.0, 0.0, 5.0, max_seconds=300.0)
            out[cond].append(float(r.completed))
            if r.completed:
                times[cond].append(float(r.lap_time or 0.0) / t.length * 1000.0)
            if verbose:
                print(
                    f"  {seed} {cond:7s} {t.length:6.0f} m  {r.reason:9s} {r.lap_time or float('nan'):6.1f} s  "
                    f"progress {r.progress:6.0f} m"
                )
    return {
        "nominal_completion": float(np.mean(out["nominal"])),
        "ice_completion": float(np.mean(out["ice"])),
        "nominal_s_per_km": float(np.mean(times["nominal"])) if times["nominal"] else float("nan"),
        "ice_s_per_km": float(np.mean(times["ice"])) if times["ice"] else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracks", type=int, default=12)
    ap.add_argument("--set", action="append", default=[], help="PidParams field=value")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    overrides = dict(a.split("=", 1) for a in args.set)
    params = PidParams(**overrides)
    t0 = time.time()
    res = score(params, args.tracks, args.verbose)
    print({k: round(v, 3) for k, v in res.items()}, f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
