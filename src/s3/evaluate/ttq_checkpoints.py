"""Time to quality, the driving: the one fixed hold-out set, which checkpoints drive, and their laps on it.

    ttq_tracks(n_tracks=8, seed=HOLDOUT_SEED) -> the set's tracks (s3.evaluate.time_to_quality: The set)
    spaced(entries, min_steps) -> the checkpoints driven: at least min_steps env steps apart, first and last kept
    drive_checkpoints(folder, entries, tracks, params, starts, workers) -> one result per entry, in order:
        {laps, runs, lap_share = laps / runs, completion (mean, 0-1), mean_lap_s (None without a lap), ends}

Every entry's runs (len(tracks) x starts, at START_SPEED) drive side by side in one SourceVecEnv, each
car its own simulator, up to MAX_CARS cars per env; each driven checkpoint advances the stage's progress
by one CHECKPOINTS.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.evaluate.holdout_set import HOLDOUT_SEED, START_SPEED, holdout_tracks
from s3.progress import advance
from s3.rl.checkpoints import DIR, load_checkpoint_fn, read_index
from s3.rl.export import policy_env_params
from s3.rl.tracks import start_grid
from s3.tracks.track import Track

N_TRACKS, STARTS = 8, 2
ICE_SLOTS = (0, 3)  # track i is heavy ice when i % 4 is one of these, else dry
MIN_SPACING_STEPS = 100_000  # env steps between the checkpoints driven (s3.rl.checkpoints keeps more for direct)
CHECKPOINTS = "checkpoints"  # the unit of the stage's progress
MAX_CARS = 512  # cars in one source env (checkpoints beyond that drive in a further batch)


def ttq_tracks(n_tracks: int = N_TRACKS, seed: int = HOLDOUT_SEED) -> list[Track]:
    """The fixed hold-out set: track i of the held-out generator, heavy ice when i % 4 is in ICE_SLOTS, else dry."""
    ice, dry = holdout_tracks("heavy_ice", n_tracks, seed), holdout_tracks("dry", n_tracks, seed)
    return [ice[i] if i % 4 in ICE_SLOTS else dry[i] for i in range(n_tracks)]


def spaced(entries: Sequence[dict[str, Any]], min_steps: int = MIN_SPACING_STEPS) -> list[dict[str, Any]]:
    """The checkpoints at least `min_steps` env steps after the previous one kept (the first and the last always):
    direct saves one every ~25 k steps, a distilled policy one every ~0.5 M; driving every one of direct's would cost
    more than its curve gains."""
    kept: list[dict[str, Any]] = []
    for i, e in enumerate(entries):
        if not kept or int(e["env_steps"]) - int(kept[-1]["env_steps"]) >= min_steps or i == len(entries) - 1:
            kept.append(e)
    return kept


# ---------------------------------------------------------------------------- driving
@torch.inference_mode()
def drive_checkpoints(
    folder: Path,
    entries: Sequence[dict[str, Any]],
    tracks: Sequence[Track],
    params: Any,
    starts: int = STARTS,
    workers: int = 0,
) -> list[dict[str, Any]]:
    """Each checkpoint in `entries` (of folder/checkpoints/index.json) on every run of the set: {laps, runs, lap_share,
    completion, ...}."""
    from s3.rl.source_env import SourceVecEnv
    from s3.rl.source_validation import source_episodes

    index = read_index(folder)
    if index is None:
        raise FileNotFoundError(f"{Path(folder) / DIR}: no checkpoint index")
    env_params = policy_env_params(index)
    ti, s = start_grid(tracks, starts)
    m = len(ti)
    per_env = max(1, MAX_CARS // m)
    out: list[dict[str, Any]] = []
    for b in range(0, len(entries), per_env):
        batch = list(entries[b : b + per_env])
        policies = [load_checkpoint_fn(folder, e, index) for e in batch]
        k = len(policies)

        def policy(
            obs: torch.Tensor, policies: list = policies, k: int = k
        ) -> torch.Tensor:  # row i * k + j: run i of checkpoint j
            return torch.stack([p(obs[j::k].contiguous()) for j, p in enumerate(policies)], dim=1).reshape(m * k, -1)

        # interleaved, so that each worker holds an equal share of every checkpoint's runs
        with SourceVecEnv(
            tracks,
            params.sim,
            env_params,
            num_envs=m * k,
            workers=workers,
            seed=0,
            auto_reset=False,
            compute=getattr(params, "compute", None),
        ) as env:
            obs = env.reset_to(
                torch.as_tensor(np.repeat(ti, k)),
                torch.as_tensor(np.repeat(s, k), dtype=torch.float32),
                speed=START_SPEED,
            )["policy"]
            limit = torch.ceil(env.track_length() / params.train.validation_min_speed / env.dt).long()
            runs = source_episodes(env, policy, obs, limit)
        advance(k, CHECKPOINTS)  # to the stage's progress (s3.progress)
        for j in range(k):
            part = runs.part(slice(j, None, k))
            laps = int(part.completed.sum())
            out.append(
                {
                    "laps": laps,
                    "runs": m,
                    "lap_share": laps / m,
                    "completion": float(part.completion.mean()),
                    "mean_lap_s": float(np.nanmean(part.lap_time)) if laps else None,
                    "ends": {r: part.reason.count(r) for r in sorted(set(part.reason)) if r != "lap"},
                }
            )
    return out
