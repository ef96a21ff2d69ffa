"""Scoring finished seed candidates in the source simulator, on held-out procedural tracks.

    source_scores(folders, root, tp) -> [summary per folder]      (summary["score"]: lap share)

Why. In-model validation measures how a policy drives in its own distilled model, and a policy
can learn to exploit that model. In the eighth run (docs/decisions/seed-selection.md) the
in-model score kept the seed that was worse in the source, on held-out procedural tracks, for
three of the four learned policies. So the choice among seeds, whose weights are already
trained only in the model, is made
where the policy will be deployed: the source simulator, in the evaluation's car
(`sim.driver_aids`), on the first `train.source_validation_tracks` of the policy's own
held-out procedural validation tracks (never the road course), from the same start grid as
in-model validation, each run ending at its lap, a failure, or after the lap length at
`train.validation_min_speed`. The source steps this costs are recorded beside the scores.
Needs the embedded simulator (`sim.backend: mujoco`): its cars run side by side in worker
processes (s3.rl.source_env), every candidate's runs in one env, each car in its own simulator
(a run's result does not depend on which others share the env; tests/test_seeds.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.rl.export import load_policy_fn, policy_env_params
from s3.rl.params import TrainParams
from s3.rl.source_env import SourceVecEnv
from s3.rl.source_validation import source_episodes
from s3.rl.tracks import dry_runs, start_grid, validation_tracks


@torch.inference_mode()
def source_scores(folders: Sequence[Path], root: Any, tp: TrainParams) -> list[dict[str, Any]]:
    """Each saved policy in `folders` driven in the source simulator on the validation tracks (module docstring)."""
    tracks = validation_tracks(tp.tracks, tp.seed, first=tp.source_validation_tracks)
    ti, s = start_grid(tracks, tp.tracks.validation_starts)
    loaded = [load_policy_fn(folder) for folder in folders]
    env_params = policy_env_params(loaded[0][1])  # the seeds of one policy share their env params
    if any(policy_env_params(meta) != env_params for _, meta in loaded[1:]):
        raise ValueError(
            f"{', '.join(map(str, folders))}: candidates trained with different env params cannot share one source env"
        )
    k, m = len(loaded), len(ti)
    policies = [policy for policy, _ in loaded]

    def policy(obs: torch.Tensor) -> torch.Tensor:  # obs [m * k, D]; row i * k + j is run i of candidate j
        return torch.stack([p(obs[j::k].contiguous()) for j, p in enumerate(policies)], dim=1).reshape(m * k, -1)

    # every candidate at once, interleaved so that each worker holds an equal share of each: the
    # stragglers of one candidate's runs overlap the other's instead of following them
    with SourceVecEnv(
        tracks, root.sim, env_params, num_envs=m * k, seed=tp.seed, auto_reset=False, compute=root.compute
    ) as env:
        obs = env.reset_to(torch.as_tensor(np.repeat(ti, k)), torch.as_tensor(np.repeat(s, k), dtype=torch.float32))[
            "policy"
        ]
        batch = source_episodes(
            env, policy, obs, torch.ceil(env.track_length() / tp.validation_min_speed / env.dt).long()
        )
    out = []
    for j in range(k):
        part = batch.part(slice(j, None, k))
        summary = part.summary(dry_runs(tracks, ti))
        out.append(
            {**summary, "score": summary["mean_completion"], "car_steps": int(part.steps.sum()), "tracks": len(tracks)}
        )
    return out
