"""Policies and the `pid` on held-out procedural tracks in the source simulator: where choices are judged.

The road course is held out from every choice, so a choice (a reward weight, a training recipe,
the driver aids) needs other ground to stand on. This is it: each driver in the source
simulator, in the one car (`sim.driver_aids`), on procedural tracks that no
training or validation has used. Those are 8 tracks from the held-out generator with seed 7
(training validates on seed `train.seed`). Each track is run from 2 evenly spaced starts at
5 m/s, and a run ends at the lap, a failure, or after the lap length at
`train.validation_min_speed`. The `pid` drives the same runs, and each policy's lap times are
given as a ratio to the pid's on the runs both completed. Other registered baselines (`baselines`,
e.g. `pid_cautious`, blind and planned for ice everywhere) drive the same runs on request, and
each policy's lap times are given against theirs too.

    SURFACES["heavy_ice"], SURFACES["dry"]   the sets of s3.evaluate.holdout_set

These are the "16 heavy-ice procedural runs" the README's decisions cite.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.catalog import BASELINES, PID
from s3.evaluate.holdout_set import HOLDOUT_SEED, START_SPEED, SURFACES, holdout_tracks
from s3.evaluate.run import run_lap
from s3.rl.controllers import PurePursuit
from s3.rl.tracks import start_grid
from s3.sim.factory import make_sim
from s3.task.layout import obs_layout
from s3.task.params import EnvParams

Policy = Callable[[torch.Tensor], torch.Tensor]


def holdout(
    policies: Mapping[str, tuple[Policy, EnvParams]],
    params: Any,
    surface: str = "heavy_ice",
    n_tracks: int = 8,
    starts: int = 2,
    seed: int = HOLDOUT_SEED,
    workers: int = 0,
    baselines: Sequence[str] = (PID,),
) -> dict[str, Any]:
    """{"drivers": {"pid": row, <baseline>: row, name: row, ...}, ...}; each policy is (obs -> action, its
    EnvParams); `baselines` names registered baselines (s3.evaluate.evaluate.BASELINES), the pid always first.

    row: laps, runs, mean_completion, ends (reason counts), mean_lap_s, and for policies
    lap_time_vs_pid (mean ratio over the runs both completed; < 1 = faster) with n_common, and
    lap_time_vs {baseline: {"ratio", "n_common"}} for every baseline.
    """
    from s3.evaluate.evaluate import BASELINES as BASELINE_DRIVERS
    from s3.evaluate.evaluate import eval_params_of
    from s3.rl.source_env import SourceVecEnv
    from s3.rl.source_validation import source_episodes

    tracks = holdout_tracks(surface, n_tracks, seed)
    ti, s = start_grid(tracks, starts)
    limit = np.array([tracks[i].length for i in ti]) / params.train.validation_min_speed
    aids = params.sim.driver_aids
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise ValueError(f"baselines {unknown}: expected some of {', '.join(BASELINES)}")
    ep = eval_params_of(params)
    rows, laps = {}, {}
    sim = make_sim(params.sim)
    try:
        for b in dict.fromkeys([PID, *baselines]):
            driver = BASELINE_DRIVERS[b](ep)(sim)
            runs = [
                run_lap(sim, tracks[i], driver, float(si), start_speed=START_SPEED, max_seconds=float(lim))
                for i, si, lim in zip(ti, s, limit)
            ]
            laps[b] = np.array([r.lap_time if r.completed else np.nan for r in runs])
            completion = np.array([min(r.progress / r.lap_length, 1.0) for r in runs])
            rows[b] = _row(laps[b], completion, [r.reason for r in runs])
    finally:
        sim.close()
    for name, (policy, env_params) in policies.items():
        with SourceVecEnv(
            tracks,
            params.sim,
            env_params,
            num_envs=len(ti),
            workers=workers,
            auto_reset=False,
            aids=aids,
            compute=getattr(params, "compute", None),
        ) as env:
            obs = env.reset_to(torch.as_tensor(ti), torch.as_tensor(s, dtype=torch.float32), speed=START_SPEED)[
                "policy"
            ]
            b = source_episodes(env, policy, obs, torch.as_tensor(np.ceil(limit / env.dt)).long())
        lap = np.where(b.completed, b.lap_time, np.nan)
        row = _row(lap, b.completion, b.reason)
        row["lap_time_vs"] = {k: _ratio(lap, ref) for k, ref in laps.items()}
        row["lap_time_vs_pid"], row["n_common"] = row["lap_time_vs"][PID]["ratio"], row["lap_time_vs"][PID]["n_common"]
        rows[name] = row
    return {
        "surface": surface,
        "seed": seed,
        "tracks": [t.name for t in tracks],
        "runs": len(ti),
        "driver_aids": aids.model_dump() if aids.enabled else None,
        "drivers": rows,
    }


def _ratio(lap: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    """Mean lap-time ratio over the runs both drivers completed (< 1 = faster), and how many those are."""
    common = np.isfinite(lap) & np.isfinite(ref)
    return {"ratio": float(np.mean(lap[common] / ref[common])) if common.any() else None, "n_common": int(common.sum())}


def _row(lap: np.ndarray, completion: np.ndarray, reasons: list[str]) -> dict[str, Any]:
    done = np.isfinite(lap)
    return {
        "laps": int(done.sum()),
        "runs": len(lap),
        "mean_completion": float(np.mean(completion)),
        "ends": {r: reasons.count(r) for r in sorted(set(reasons)) if r not in ("lap", "completed")},
        "mean_lap_s": float(np.mean(lap[done])) if done.any() else None,
    }


def holdout_stage(
    params: Any,
    family: str,
    policies_dir: Path,
    surface: str = "heavy_ice",
    n_tracks: int = 8,
    seed: int = HOLDOUT_SEED,
    pursuit: Sequence[float] = (),
    baselines: Sequence[str] = (PID,),
    every_seed: bool = False,
) -> dict[str, Any]:
    """`s3 holdout`: the policies `family` names ("all": every trained one) from `policies_dir`,
    with the pid, on the held-out tracks; ParamsError for an unknown surface or a missing policy.
    `every_seed`: one row `<name>/seed<k>` per trained seed (the unit of a policy's quality) instead
    of the exported one.

    `pursuit`: lateral accelerations (m/s^2) of blind reference drivers, one row `pursuit_<a>` each: the
    centerline follower of s3.rl.controllers reading only the policy observation (no map, no friction),
    taking corners at most at that lateral acceleration, with `train.env` as its observation. `baselines`:
    registered baselines driven beside the pid (ParamsError for an unknown one)."""
    from s3.config import POLICIES_KEY, ParamsError, pick_names
    from s3.evaluate.suite import policy_seeds
    from s3.rl.export import load_policy_fn, policy_env_params

    if surface not in SURFACES:
        raise ParamsError(f"--surface: {surface!r} is not one of {', '.join(SURFACES)}")
    if unknown := [b for b in baselines if b not in BASELINES]:
        raise ParamsError(f"--baseline: {', '.join(unknown)} is not one of {', '.join(BASELINES)}")
    known = params.policies()
    trained = [n for n in known if (policies_dir / n / "policy.json").exists()]
    policies = {}
    for name in pick_names(family, known, trained, POLICIES_KEY):
        if not (policies_dir / name / "policy.json").exists():
            raise ParamsError(f"{policies_dir / name}: no policy; run `s3 train --family {name}` first")
        folders = [(f"{name}/seed{k}", f) for k, f in policy_seeds(policies_dir / name)] if every_seed else []
        for row, folder in folders or [(name, policies_dir / name)]:
            fn, meta = load_policy_fn(folder)
            policies[row] = (fn, policy_env_params(meta))
    env = params.train.env
    for a in pursuit:
        follower = PurePursuit(obs_layout(env), lateral_accel=a, brake_accel=min(3.0, a))
        policies[f"pursuit_{a:g}"] = (follower, env)
    return holdout(policies, params, surface, n_tracks=n_tracks, seed=seed, baselines=baselines)
