"""Resuming a killed training run: the state file beside the policy folder.

After every chunk the trainer state (actor, critic, optimizer, iteration), the chunks'
checkpoints, how often the track pool was refreshed and the RNG states are written atomically to
<out_dir>/.resume/<name>.pt (beside the policy folder, not in it: `dvc repro` deletes a stage's
outputs before running it): tensors and plain types only, read back with
`torch.load(weights_only=True)`. A re-run with the same params and the same dynamics model (a
fingerprint of both is stored) resumes at that iteration; anything else starts fresh and says why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from s3 import __version__
from s3.dynamics.base import DynamicsModel
from s3.io import atomic_path
from s3.rl.env import DistilledEnv
from s3.rl.loop import PPOTrainer
from s3.rl.params import SELECTION_ONLY, TrainParams
from s3.rl.tracks import TrackPool

RESUME_FORMAT = "s3-train-resume-3"  # 3: s3.rl.loop's trainer state


def resume_fingerprint(
    params: TrainParams, family: str, model: DynamicsModel, validation_seed: int | None = None
) -> str:
    """What a resumed run must share with the killed one: params, family, validation tracks, dynamics model, s3
    version."""
    h = hashlib.sha256()
    blob = {"params": params.model_dump(mode="json", exclude=SELECTION_ONLY), "family": family, "s3": __version__}
    if validation_seed is not None and validation_seed != params.seed:
        blob["validation_seed"] = validation_seed
    h.update(json.dumps(blob, sort_keys=True).encode())
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def resume_path(folder: str | Path) -> Path:
    """Where training into `folder` keeps its resume state: beside it, so that DVC leaves it alone."""
    folder = Path(folder)
    return folder.parent / ".resume" / f"{folder.name}.pt"


def save_resume(path: Path, state: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_resume(
    path: Path, fingerprint: str, device: torch.device, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """The saved runner state if it belongs to this run (weights_only: no code from the file runs)."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:
        say(f"train: {path}: unreadable ({type(e).__name__}); starting fresh")
        return None
    if not isinstance(state, dict) or state.get("format") != RESUME_FORMAT:
        say(f"train: {path}: not an s3 resume file; starting fresh")
        return None
    if state.get("fingerprint") != fingerprint:
        say(f"train: {path}: saved with other params or another dynamics model; starting fresh")
        return None
    return state


def resume_state(
    fingerprint: str,
    trainer: PPOTrainer,
    env: DistilledEnv,
    done_it: int,
    t_ppo: float,
    wall_s: float,
    refreshes: int,
    checkpoints: list[dict[str, Any]],
) -> dict[str, Any]:
    """Everything a killed run needs to go on: tensors and plain types only (weights_only-loadable)."""
    return {
        "format": RESUME_FORMAT,
        "fingerprint": fingerprint,
        "done_it": done_it,
        "t_ppo": t_ppo,
        "wall_s": wall_s,
        "refreshes": refreshes,
        "trainer": trainer.state(),
        "checkpoints": checkpoints,
        "torch_rng": torch.get_rng_state(),
        "env_rng": env.generator.get_state(),
        "env_counts": {"invalid": int(env.invalid_count), "episodes": int(env.episode_count)},
        "off_track_weight": float(env.rules.off_track_weight),  # the constraint's multiplier (s3.rl.caution)
    }


def restore(
    state: dict[str, Any], trainer: PPOTrainer, env: DistilledEnv, pool: TrackPool
) -> tuple[int, float, int, list[dict[str, Any]]]:
    """Put a saved state back: weights, optimizer, iteration, track pool, RNG, counters, the chunks' checkpoints."""
    trainer.restore(state["trainer"])
    for _ in range(int(state["refreshes"])):  # the pool is a pure function of its seed and refresh count
        pool.refresh()
    torch.set_rng_state(state["torch_rng"].cpu())
    env.generator.set_state(state["env_rng"].cpu())  # generator states are CPU byte tensors, whatever the device
    env.set_tracks(pool.tracks)  # every car restarts on the pool as it was at the save
    with torch.inference_mode():  # the env's counters are inference tensors once it has stepped
        env.invalid_count.fill_(int(state["env_counts"]["invalid"]))
        env.episode_count.fill_(int(state["env_counts"]["episodes"]))
    env.rules.off_track_weight = float(state.get("off_track_weight", env.rules.off_track_weight))
    return int(state["done_it"]), float(state["t_ppo"]), int(state["refreshes"]), list(state["checkpoints"])
