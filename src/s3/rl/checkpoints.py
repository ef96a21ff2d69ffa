"""Training checkpoints kept on disk: one per chunk, the actor only (what the time-to-quality curve drives).

    write_checkpoints(folder, checkpoints, meta)      all of a finished run's (distilled: its first seed)
    add_checkpoint(folder, actor_state, iteration, env_steps, meta)   one more, as a run goes (`direct`)
    read_index(folder) -> index | None
    load_checkpoint_fn(folder, entry) -> (obs -> command callable, the index)

<policy folder>/checkpoints/
    <env_steps>.safetensors   the rsl_rl actor's state dict (observation normaliser included), as trained
    index.json                {"format", "obs", "policy", "params": {"env"}: what loading needs (policy.json's
                               keys of the same names), "checkpoints": [{"env_steps", "iteration", "file"}]
                               in increasing env_steps}

Byte-stable like the policy beside it: the same weights give the same files, so no wall clock is
written here (a distilled run's go to its stage metrics, records/train/<name>.json "checkpoints";
`direct`'s per-chunk wall clock is its metrics' learning_curve). A checkpoint is deployed exactly as
the policy is (s3.rl.export.deployable): deterministic mean action, the steering map it trained under.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from s3.io import atomic_path, write_json_atomic
from s3.rl.export import as_callable, deployable, saved_steer_full_speed

DIR, INDEX = "checkpoints", "index.json"
FORMAT = "s3-checkpoints-1"
State = dict[str, torch.Tensor]


def _header(meta: dict[str, Any]) -> dict[str, Any]:
    """What loading a checkpoint needs, from a policy's meta (policy.json's content)."""
    pol = meta["policy"]
    return {
        "format": FORMAT,
        "obs": meta["obs"],
        "policy": {k: pol[k] for k in ("type", "recurrent", "num_actions", "actor_cfg")},
        "params": {"env": meta["params"]["env"]},
    }


def _save_state(path: Path, state: State) -> None:
    with atomic_path(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp), metadata={"format": FORMAT})


def write_checkpoints(folder: str | Path, checkpoints: Iterable[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Replace <folder>/checkpoints/ with `checkpoints` (each {"iteration", "env_steps", "actor": state}); returns
    it."""
    out = Path(folder) / DIR
    shutil.rmtree(out, ignore_errors=True)
    entries = []
    for c in sorted(checkpoints, key=lambda c: int(c["env_steps"])):
        name = f"{int(c['env_steps'])}.safetensors"
        _save_state(out / name, c["actor"])
        entries.append({"env_steps": int(c["env_steps"]), "iteration": int(c["iteration"]), "file": name})
    write_json_atomic(out / INDEX, {**_header(meta), "checkpoints": entries})
    return out


def add_checkpoint(
    folder: str | Path, actor_state: State, iteration: int, env_steps: int, meta: dict[str, Any]
) -> None:
    """Add one checkpoint to <folder>/checkpoints/ (weights first, then the index: a killed run leaves a readable
    index)."""
    out = Path(folder) / DIR
    index = read_index(folder) or {**_header(meta), "checkpoints": []}
    name = f"{int(env_steps)}.safetensors"
    _save_state(out / name, actor_state)
    entries = [e for e in index["checkpoints"] if e["env_steps"] != int(env_steps)]
    entries.append({"env_steps": int(env_steps), "iteration": int(iteration), "file": name})
    write_json_atomic(out / INDEX, {**index, "checkpoints": sorted(entries, key=lambda e: e["env_steps"])})


def clear(folder: str | Path) -> None:
    """Remove <folder>/checkpoints/ (a new run starts its own)."""
    shutil.rmtree(Path(folder) / DIR, ignore_errors=True)


def read_index(folder: str | Path) -> dict[str, Any] | None:
    """<folder>/checkpoints/index.json, or None when there is none (or it is not one)."""
    try:
        index = json.loads((Path(folder) / DIR / INDEX).read_text())
    except (OSError, ValueError):
        return None
    return index if isinstance(index, dict) and index.get("format") == FORMAT else None


def load_checkpoint_actor(
    folder: str | Path, entry: dict[str, Any], index: dict[str, Any] | None = None, device: str | torch.device = "cpu"
) -> torch.nn.Module:
    """The rsl_rl actor of checkpoint `entry` (an item of the index's "checkpoints"), in eval mode."""
    from s3.rl.ppo import build_actor

    index = index or read_index(folder)
    if index is None:
        raise FileNotFoundError(f"{Path(folder) / DIR / INDEX}: no checkpoint index")
    actor = build_actor(index["obs"]["dim"], index["policy"]["num_actions"], index["policy"]["actor_cfg"], device)
    actor.load_state_dict(load_file(str(Path(folder) / DIR / entry["file"]), device=str(device)), strict=True)
    return actor.eval()


def load_checkpoint_fn(
    folder: str | Path, entry: dict[str, Any], index: dict[str, Any] | None = None, device: str | torch.device = "cpu"
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A ready obs -> command callable of checkpoint `entry`, deployed as the policy is (fresh recurrent state)."""
    index = index or read_index(folder)
    actor = load_checkpoint_actor(folder, entry, index, device)
    module = deployable(actor, saved_steer_full_speed(index)).to(device)  # type: ignore[arg-type]
    return as_callable(module, bool(index["policy"]["recurrent"]))  # type: ignore[index]
