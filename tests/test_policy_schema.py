"""policy.json's schema, pinned: the exact keys and value types that every PPO route writes
(s3.rl.export.policy_meta through s3.rl.runner): PPO inside a distilled model (s3.rl.train), PPO
inside the source simulator (s3.rl.direct), and the kept one of several seeds (s3.rl.seeds:
export.copy_policy adds "seed_selection"). A key added, removed or of another type fails here:
change the schema on purpose, here and in its readers (s3.evaluate, s3.rl.seeds, the report)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from s3.dynamics.checkpoint import save_checkpoint
from s3.rl.export import META, copy_policy
from s3.rl.params import TrainParams

torch.set_num_threads(1)

NONE = type(None)
OPT_FLOAT, OPT_STR, OPT_INT, OPT_BOOL = (float, NONE), (str, NONE), (int, NONE), (bool, NONE)
EPISODES = {"episodes": int, "completion_rate": float, "mean_completion": float, "mean_lap_time_s": OPT_FLOAT}
SURFACES = {"score_dry": OPT_FLOAT, "score_ice": OPT_FLOAT, "runs_dry": int, "runs_ice": int}  # s3.rl.tracks.dry_runs
COMMON = {
    "format": str,
    "s3_version": str,
    "family": str,
    "dt": float,
    "obs": {
        "dim": int,
        "history": int,
        "preview_points": int,
        "preview_spacing_m": float,
        "surface_label": bool,
        "surface_ahead_m": list,
        "groups": dict,
        "action": dict,
    },
    "policy": {
        "type": str,
        "recurrent": bool,
        "num_actions": int,
        "actor_cfg": dict,
        "critic_cfg": dict,
        "export": {"file": str, "format": str, "opset": int, "inputs": list, "outputs": list, "signature": str},
    },
    "history": [dict],
    "params": {name: object for name in TrainParams.model_fields},
}
VALIDATION = {
    "score": OPT_FLOAT,
    "score_definition": str,
    "selection": str,
    "iteration": int,
    "env_steps": int,
    "track_seeds": list,
    "starts_per_track": int,
    "min_speed_m_s": float,
    **EPISODES,
    **SURFACES,
    "reasons": dict,
}
DISTILLED = {
    **COMMON,
    "dynamics_model": {"folder": OPT_STR, "sha256": OPT_STR, "use_mu": bool, "history": int},
    "validation": VALIDATION,
    "road_course_nominal": {
        "completed": OPT_BOOL,
        "lap_time_s": OPT_FLOAT,
        "completion": OPT_FLOAT,
        "reason": str,
        "length_m": OPT_FLOAT,
    },
    "train": {
        "env_steps": int,
        "iterations": int,
        "stopped_by": str,
        "invalid_model_steps": int,
        "off_track_penalty": float,
        "episodes": int,
        "resumed_from_iteration": OPT_INT,
        "device": str,
        "torch_threads": int,
    },
    "history": [{**EPISODES, **SURFACES, "score": float, "iteration": int, "env_steps": int}],
}
SOURCE = {
    **COMMON,
    "dynamics_model": NONE,
    "source_simulator": {"backend": str, "control_dt": float},
    "validation": {**VALIDATION, "in": str, "episode_cap_s": OPT_FLOAT},
    "train": {
        "budget_s": OPT_FLOAT,
        "stopped_by": str,
        "env_steps": int,
        "simulated_car_steps": int,
        "iterations": int,
        "workers": int,
        "num_envs": int,
        "num_steps_per_env": int,
        "sim_errors": int,
        "episodes": int,
        "device": str,
        "torch_threads": int,
    },
    "history": [
        {
            "iteration": int,
            "env_steps": int,
            "episodes": int,
            "mean_return": OPT_FLOAT,
            "mean_episode_steps": OPT_FLOAT,
            "mean_episode_progress_m": OPT_FLOAT,
            "mean_speed_m_s": OPT_FLOAT,
            "val_score": float,
            "val_completion_rate": float,
        }
    ],
}
SEED_SELECTION = {"selected_seed": int, "in": str, "rule": str, "seeds": list}


def mismatches(value: Any, schema: Any, path: str = "policy.json") -> list[str]:
    """Where `value` departs from `schema`: a dict of key -> schema (exact key set), [item schema]
    (every item), a type or a tuple of types (bool is not an int), or object (anything)."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        out = [f"{path}.{k}: written, not in the schema" for k in value.keys() - schema.keys()]
        out += [f"{path}.{k}: in the schema, not written" for k in schema.keys() - value.keys()]
        return out + [m for k in schema.keys() & value.keys() for m in mismatches(value[k], schema[k], f"{path}.{k}")]
    if isinstance(schema, list):
        if not isinstance(value, list) or not value:
            return [f"{path}: not a non-empty list"]
        return [m for i, v in enumerate(value) for m in mismatches(v, schema[0], f"{path}[{i}]")]
    if schema is object:
        return []
    types = schema if isinstance(schema, tuple) else (schema,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        return [f"{path}: {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}"]
    return []


def test_the_schema_check_fails_on_a_key_added_removed_or_retyped() -> None:
    meta = {"a": 1, "b": {"c": "x"}}
    schema = {"a": int, "b": {"c": str}}
    assert mismatches(meta, schema) == []
    assert mismatches({**meta, "new": 1}, schema) == ["policy.json.new: written, not in the schema"]
    assert mismatches({"a": 1, "b": {}}, schema) == ["policy.json.b.c: in the schema, not written"]
    assert mismatches({"a": True, "b": {"c": "x"}}, schema) == ["policy.json.a: bool, not int"]


@pytest.fixture(scope="module")
def distilled(bicycle, tmp_path_factory) -> Path:
    """A tiny distilled-env policy (road-course check on), trained by s3.rl.train."""
    from s3.rl.train import train

    root = tmp_path_factory.mktemp("schema")
    save_checkpoint(bicycle, root / "models" / "bicycle")
    params = TrainParams.model_validate(
        {
            "seed": 1,
            "device": "cpu",
            "torch_threads": 1,
            "max_env_steps": 64 * 8 * 4,
            "chunk_iterations": 2,
            "validation_min_speed": 15.0,
            "road_course_check": True,
            "progress_bar": False,
            "env": {"num_envs": 64, "episode_seconds": 10.0},
            "tracks": {"pool_size": 2, "validation_tracks": 1, "validation_starts": 1},
            "ppo": {"num_steps_per_env": 8, "actor_hidden": [32], "critic_hidden": [32], "learning_epochs": 1},
        }
    )
    train("bicycle", root / "models", root / "policies", root / "plots", params)
    return root / "policies" / "bicycle"


def test_a_distilled_policy_writes_the_pinned_schema(distilled: Path) -> None:
    assert mismatches(json.loads((distilled / META).read_text()), DISTILLED) == []


def test_the_kept_seed_adds_only_its_selection(distilled: Path, tmp_path: Path) -> None:
    selection = {"selected_seed": 1, "in": "model", "rule": "best", "seeds": [{"seed": 1, "wall_s": 3.0}]}
    copy_policy(distilled, tmp_path, seed_selection=selection)
    assert mismatches(json.loads((tmp_path / META).read_text()), {**DISTILLED, "seed_selection": SEED_SELECTION}) == []


def test_a_policy_trained_in_the_source_simulator_writes_the_pinned_schema(tmp_path, monkeypatch) -> None:
    """`direct` with a budget of two validated one-iteration chunks whatever the clock says."""
    import s3.rl.direct
    from s3.config import Params
    from s3.rl.loop import WallClockBudget

    class TwoChunks(WallClockBudget):
        def next_chunk(self, done: int) -> int:
            return 1 if done < 2 else 0

        def left(self) -> float:
            return math.inf

    monkeypatch.setattr(s3.rl.direct, "WallClockBudget", TwoChunks)
    tiny = {
        "progress_bar": False,
        "torch_threads": 1,
        "ppo": {"actor_hidden": [16], "critic_hidden": [16], "learning_epochs": 1, "mini_batches": 1},
        "tracks": {"pool_size": 2, "validation_tracks": 1, "validation_starts": 1},
        "direct": {"num_envs": 2, "workers": 1, "pool_size": 2, "num_steps_per_env": 4, "validation_seconds": 1.0},
    }
    s3.rl.direct.train_direct(Params.model_validate({"train": tiny}), tmp_path, None, None, budget_s=60.0)
    meta = json.loads((tmp_path / "direct" / META).read_text())
    assert mismatches(meta, SOURCE) == [] and meta["train"]["iterations"] == 2
