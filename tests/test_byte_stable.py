"""Byte-stable outputs: the same inputs give byte-identical files.

A tiny collect, a bicycle distill and a tiny PPO training run twice, each time in a fresh
workspace entered as `s3` is (relative paths from the workspace root; the second collection with
another worker count), and every file the stages write under data/, models/, policies/ and plots/
has the same SHA-256 both times. Timings, run ids and the like belong in metrics/ (not compared).
No output may hold its workspace's absolute path.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from s3.config import load_params
from s3.data.collect import collect
from s3.dynamics.distill import distill
from s3.dynamics.params import DistillParams
from s3.rl.params import TrainParams
from s3.rl.train import train

COMPARED = ("data", "models", "policies", "plots")
IGNORED = (".s3_lock",)  # the workspace lock (holds a pid), in .dvcignore
COLLECT = ["collect.episodes=8", "collect.episode_steps=80", "collect.episodes_per_shard=3", "collect.n_tracks=3"]
DISTILL = {
    "history": 5,
    "horizon": 5,
    "val_fraction": 0.2,
    "test_fraction": 0.2,
    "eval_stride": 10,
    "divergence_seconds": 2.0,
    "throughput_sizes": [1],
    "device": "cpu",
    "progress_bar": False,
}
TRAIN = {
    "seed": 1,
    "device": "cpu",
    "torch_threads": 1,
    "max_env_steps": 64 * 8 * 4,  # 4 PPO iterations in 2 chunks
    "chunk_iterations": 2,
    "validation_min_speed": 15.0,
    "road_course_check": False,
    "progress_bar": False,
    "env": {"num_envs": 64, "episode_seconds": 10.0},
    "tracks": {"pool_size": 2, "validation_tracks": 1, "validation_starts": 1},
    "ppo": {
        "num_steps_per_env": 8,
        "actor_hidden": [32],
        "critic_hidden": [32],
        "learning_epochs": 1,
        "mini_batches": 1,
    },
}


def _pipeline(ws: Path, workers: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """collect -> distill bicycle -> train bicycle in `ws`; returns relative path -> sha256 of the outputs."""
    ws.mkdir()
    monkeypatch.chdir(ws)
    torch.set_num_threads(1)
    collect(
        load_params(None, [*COLLECT, f"collect.workers={workers}"]),
        Path("."),
        quiet=True,
        metrics_path=Path("records/collect.json"),
    )
    distill(
        "bicycle",
        Path("data/rollouts"),
        Path("models"),
        Path("records/distill"),
        Path("plots/distill"),
        DistillParams(**DISTILL),
    )
    train(
        "bicycle",
        Path("models"),
        Path("policies"),
        Path("plots/train"),
        TrainParams.model_validate(TRAIN),
        Path("records/train"),
    )
    files = sorted(f for d in COMPARED for f in (ws / d).rglob("*") if f.is_file() and f.name not in IGNORED)
    for f in files:
        assert str(ws).encode() not in f.read_bytes(), f"{f.relative_to(ws)} holds its workspace's absolute path"
    return {str(f.relative_to(ws)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.mark.slow  # ~11 s; nightly (make test-all)
@pytest.mark.timeout(300)
def test_same_inputs_give_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _pipeline(tmp_path / "a", 1, monkeypatch)
    second = _pipeline(tmp_path / "b", 2, monkeypatch)
    expected = {
        "data/rollouts/manifest.json",
        "data/rollouts/shard-00000.parquet",
        "models/bicycle/model.json",
        "models/bicycle/model.safetensors",
        "policies/bicycle/policy.onnx",
        "policies/bicycle/policy.json",
        "policies/bicycle/policy.safetensors",
        "plots/train/bicycle.png",
        "plots/collect/sample_episodes.png",
        "policies/bicycle/checkpoints/index.json",
        "policies/bicycle/checkpoints/1024.safetensors",
    }
    assert expected <= set(first), sorted(first)
    assert set(first) == set(second)
    assert [f for f in first if first[f] != second[f]] == []
    for f in (
        "records/collect.json",
        "records/distill/bicycle.json",
        "records/train/bicycle.json",
    ):  # the timings went here
        assert (tmp_path / "a" / f).exists() and (tmp_path / "b" / f).exists()
