"""Throughput of the distilled environment and of PPO inside it.

    bench_env(family, models_dir, sizes=(256, 1024, 4096), device="cpu") -> dict

For each N: `env_steps_per_s` steps random actions through `DistilledEnv.step` (observation,
reward, terminations and auto-reset included) for about `env_seconds`; `train_steps_per_s` runs
the full rsl_rl PPO loop (rollout + update, `train_iterations` iterations after one warm-up
iteration) with the train params' PPO settings. Peak memory: on CUDA the peak tensor memory
allocated while benchmarking that N; on CPU the process's peak resident set so far (a
high-water mark: it only grows with N). The source-simulator comparison lives in s3.sim.bench.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from s3.dynamics.base import DynamicsModel
from s3.rl.env import DistilledEnv, resolve_device
from s3.rl.params import TrainParams
from s3.rl.ppo import make_runner, quiet
from s3.tracks.generate import procedural_track


def _peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_env(
    family: str,
    models_dir: str | Path = "models",
    sizes: Sequence[int] = (256, 1024, 4096),
    device: str | torch.device = "cpu",
    params: TrainParams | None = None,
    env_seconds: float = 2.0,
    train_iterations: int = 2,
    n_tracks: int = 16,
    model: DynamicsModel | None = None,
) -> dict[str, Any]:
    """Environment and PPO steps per second for each N in `sizes` (see the module docstring)."""
    params = params or TrainParams()
    dev = resolve_device(device)
    if model is None:
        from s3.dynamics.checkpoint import load_checkpoint

        model = load_checkpoint(Path(models_dir) / family, family, dev)
    tracks = [procedural_track(i, params.tracks.procedural) for i in range(n_tracks)]
    out: dict[str, Any] = {
        "family": family,
        "device": str(dev),
        "torch_threads": torch.get_num_threads(),
        "dt": model.dt,
        "obs_dim": None,
        "env_steps_per_s": {},
        "train_steps_per_s": {},
        "peak_memory_mb": {},
        "memory_kind": "cuda_max_allocated" if dev.type == "cuda" else "process_max_rss",
        "num_steps_per_env": params.ppo.num_steps_per_env,
        "policy": params.ppo.policy,
    }
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    for n in sizes:
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        env = DistilledEnv(model, tracks, params.env, num_envs=n, device=dev, seed=0)
        out["obs_dim"] = env.num_obs
        for _ in range(3):
            env.step(torch.rand(n, 2, device=dev, generator=g) * 2 - 1)
        _sync(dev)
        steps, t0 = 0, time.perf_counter()
        while True:
            env.step(torch.rand(n, 2, device=dev, generator=g) * 2 - 1)
            steps += 1
            if steps % 5 == 0:
                _sync(dev)
                if time.perf_counter() - t0 >= env_seconds:
                    break
        _sync(dev)
        out["env_steps_per_s"][str(n)] = round(steps * n / (time.perf_counter() - t0))
        runner = make_runner(env, params.ppo, dev)
        with quiet():
            runner.learn(1)
            _sync(dev)
            t0 = time.perf_counter()
            runner.learn(train_iterations)
            _sync(dev)
        wall = time.perf_counter() - t0
        out["train_steps_per_s"][str(n)] = round(train_iterations * params.ppo.num_steps_per_env * n / wall)
        out["peak_memory_mb"][str(n)] = round(_peak_mb(dev), 1)
        del runner, env
    return out
