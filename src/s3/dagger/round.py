"""One DAgger-style round: rows of the source simulator where a trained policy drives.

    collect_round(params, policy_dir, out_dir, round_index, episodes, ice_fraction=1.0, noise=0.0) -> manifest path
    provenance(policy_dir, round_index, noise) -> who drove: {driver, policy, family, seed, weights_sha256, ...}

A dataset collected by the exploration driver covers what that driver does, not where a policy
trained on it goes: on ice a blind policy drives into states no row shows, and its model is wrong
exactly there. A round lets the exported policy in `policy_dir` drive `episodes` collection episodes
in the source simulator, with collect's episode plan, tracks and end rules (s3.data.episode;
`ice_fraction` of the episodes on their icy variant), its steering and pedals perturbed by Gaussian
noise of std `noise` (0 = as it drives). Episode ids are ROUND_OFFSET * round + i, so a round's
episodes never share an id (nor a plan) with the base dataset's or another round's. The folder is a
rollout dataset like data/rollouts (shards + manifest.json, s3.data.rollouts), and its manifest says
who drove (`provenance`). `distill.extra_rollouts` reads it beside the base data.

One process, one simulator: a round is small beside the collection (hundreds of episodes).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from s3 import __version__
from s3.config import Params
from s3.data.episode import EpisodeDriver, run_episode
from s3.data.provenance import data_params
from s3.data.rollouts import sha256_file, shard_name, write_manifest, write_shard
from s3.data.schema import COLUMNS, SCHEMA_VERSION
from s3.evaluate.policy_driver import PolicyDriver, PolicyFactory
from s3.progress import progress
from s3.sim.base import Control, SourceSim, VehicleState
from s3.sim.factory import drop_worker_sim, worker_sim
from s3.tracks.track import Track

ROUND_OFFSET = 10_000_000  # episode ids of round r start at r * ROUND_OFFSET (collect.episodes is at most 1e6)
START_SPEED_CAP = 15.0  # m/s: the fastest start of a round's episode (a policy has no speed profile to ask)


class OnPolicy:
    """An EpisodeDriver (s3.data.episode) for an exported policy, with optional Gaussian action noise."""

    def __init__(self, driver: PolicyDriver, noise: float, rng: np.random.Generator) -> None:
        self.driver, self.noise, self.rng = driver, noise, rng

    def target_speed(self, s: float) -> float:
        return START_SPEED_CAP

    def start(self, track: Track, state: VehicleState) -> None:
        self.driver.reset(track, state)

    def act(self, state: VehicleState, s: float) -> Control:
        cmd = self.driver.act(state, None)  # type: ignore[arg-type]  # the policy builds its own track view
        if self.noise <= 0.0:
            return cmd
        steer, throttle, brake = (float(v) for v in self.rng.normal(0.0, self.noise, 3))
        return Control(
            float(np.clip(cmd.steering + steer, -1.0, 1.0)),
            float(np.clip(cmd.throttle + throttle, 0.0, 1.0)),
            float(np.clip(cmd.brake + brake, 0.0, 1.0)),
        )


def provenance(policy_dir: str | Path, round_index: int, noise: float) -> dict[str, Any]:
    """Who drove the round: the policy's name and seed (its policy.json) and the sha256 of its weights."""
    from s3.rl.export import META, WEIGHTS

    folder = Path(policy_dir)
    meta = json.loads((folder / META).read_text())
    return {
        "driver": "policy",
        "policy": folder.name,  # policies/<name>/
        "family": meta.get("family"),
        "folder": str(folder),
        "seed": (meta.get("params") or {}).get("seed"),
        "weights_sha256": hashlib.sha256((folder / WEIGHTS).read_bytes()).hexdigest(),
        "round": round_index,
        "action_noise": noise,
    }


def collect_round(
    params: Params,
    policy_dir: str | Path,
    out_dir: str | Path,
    round_index: int,
    episodes: int,
    ice_fraction: float = 1.0,
    noise: float = 0.0,
) -> Path:
    """Drive `episodes` episodes with the policy in `policy_dir`; write the round's dataset; return its manifest."""
    if round_index < 1:
        raise ValueError(f"round_index must be >= 1 (round 0 is the base collection), got {round_index}")
    if not 1 <= episodes <= ROUND_OFFSET:
        raise ValueError(f"episodes must be in [1, {ROUND_OFFSET}], got {episodes}")
    if not 0.0 <= ice_fraction <= 1.0 or noise < 0.0:
        raise ValueError(f"ice_fraction must be in [0, 1] and noise >= 0, got {ice_fraction}, {noise}")
    params = params.model_copy(
        update={"collect": params.collect.model_copy(update={"ice_episode_fraction": ice_fraction})}
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_error.json").unlink(missing_ok=True)  # measured on an earlier round's rows (s3 dagger --model)
    factory = PolicyFactory(policy_dir)
    who = provenance(policy_dir, round_index, noise)
    sim: SourceSim = worker_sim(params.sim)
    policy = factory(sim)

    def driver_for(track: Track, sim: SourceSim, p: Params, rng: np.random.Generator) -> EpisodeDriver:
        return OnPolicy(policy, noise, rng)

    frames, dropped = [], []
    try:
        with progress(f"dagger round {round_index}", episodes, "episodes") as bar:
            for i in range(episodes):
                ep = round_index * ROUND_OFFSET + i
                df, why = run_episode(sim, params, ep, driver_for)
                if df is None:
                    dropped.append({"episode": ep, "reason": why})
                else:
                    frames.append(df)
                bar.advance()
    finally:
        drop_worker_sim()
    if not frames:
        raise RuntimeError(f"dagger round {round_index}: every episode was dropped ({dropped[:3]} ...)")
    rows = pd.concat(frames, ignore_index=True)
    path = out / shard_name(0)
    write_shard(path, rows, {"s3_round": str(round_index), "s3_provenance": json.dumps(who, sort_keys=True)})
    manifest = {
        "s3_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "simulator": params.sim.backend,
        "control_dt": params.sim.control_dt,
        "rows": len(rows),
        "episodes": len(frames),
        "episodes_dropped": len(dropped),
        "dropped": dropped,
        "shards": [{"file": path.name, "rows": len(rows), "episodes": len(frames), "sha256": sha256_file(path)}],
        "columns": {name: {"unit": unit, "description": desc} for name, (_, unit, desc) in COLUMNS.items()},
        "params": data_params(params),
        "provenance": who,
    }
    return write_manifest(out, manifest)
