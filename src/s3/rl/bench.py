"""Throughput of the distilled environment and of PPO inside it.

    bench_env(family, models_dir, sizes=(256, 1024, 4096), device="cpu") -> dict

For each N: `env_steps_per_s` steps random actions through `DistilledEnv.step` (observation,
reward, terminations and auto-reset included) for about `env_seconds`; `train_steps_per_s` runs
the full rsl_rl PPO loop (rollout + update, `train_iterations` iterations after one warm-up
iteration) with the train params' PPO settings, and where one iteration's time goes
(`iteration_s[N]`: `collect`, stepping the env with the policy acting; `update`, the PPO epochs and
minibatches) and what validating one checkpoint on the held-out procedural tracks costs
(`validation_s[N]`, s3.rl.validation at the train params' track counts; training validates one
checkpoint per `chunk_iterations` iterations: `validation_share[N]` is its share of a chunk).
Peak memory: on CUDA the peak tensor memory
allocated while benchmarking that N; on CPU the process's peak resident set so far (a
high-water mark: it only grows with N).

The same run also measures the source simulator (skipped with source_seconds=0):
`source_control_steps_per_s` is one process stepping one car (s3.sim.bench.bench_sim, about
`source_seconds`); `direct_env_steps_per_s` and `direct_ppo_steps_per_s` step
`train.direct.num_envs` cars in `direct_workers` worker processes (0 = one per core) with random
actions and with the direct baseline's PPO loop (s3.rl.source_env.SourceVecEnv, about
`direct_seconds` each, after the workers have started). The ratios: `env_vs_source[N]` =
env_steps_per_s[N] / source_control_steps_per_s (batched env against one source core) and
`ppo_vs_direct[N]` = train_steps_per_s[N] / direct_ppo_steps_per_s (PPO in the distilled env
against PPO on the source simulator using every core).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from s3.catalog import DIRECT
from s3.dynamics.base import DynamicsModel
from s3.rl.env import DistilledEnv, resolve_device
from s3.rl.loop import PPOTrainer
from s3.rl.params import TrainParams
from s3.rl.tracks import validation_tracks
from s3.rl.validation import validate
from s3.tracks.generate import procedural_track

if TYPE_CHECKING:
    from s3.sim.params import SimParams


SOURCE_KEYS = (
    "source_control_steps_per_s",
    "direct_env_steps_per_s",
    "direct_ppo_steps_per_s",
    "direct_workers",
    "direct_num_envs",
    "direct_num_steps_per_env",
    "env_vs_source",
    "ppo_vs_direct",
)


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
    sim: SimParams | None = None,
    source_seconds: float = 2.0,
    direct_seconds: float = 3.0,
    direct_workers: int = 0,
) -> dict[str, Any]:
    """Environment and PPO steps per second for each N in `sizes`, against the source simulator (see the module
    docstring)."""
    params = params or TrainParams()
    dev = resolve_device(device)
    if model is None:
        from s3.dynamics.checkpoint import load_checkpoint

        model = load_checkpoint(Path(models_dir) / family, family, dev)
    tracks = [procedural_track(i, params.tracks.procedural) for i in range(n_tracks)]
    val_tracks = validation_tracks(params.tracks, params.seed)
    out: dict[str, Any] = {
        "family": family,
        "device": str(dev),
        "torch_threads": torch.get_num_threads(),
        "dt": model.dt,
        "obs_dim": None,
        "env_steps_per_s": {},
        "train_steps_per_s": {},
        "iteration_s": {},
        "validation_s": {},
        "validation_share": {},
        "peak_memory_mb": {},
        "memory_kind": "cuda_max_allocated" if dev.type == "cuda" else "process_max_rss",
        "num_steps_per_env": params.ppo.num_steps_per_env,
        "policy": params.ppo.policy,
        "compile_model": params.env.compile_model,
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
        trainer = PPOTrainer(env, params.ppo, dev)
        trainer.iterate(1)
        _sync(dev)
        t0 = time.perf_counter()
        curve = trainer.iterate(train_iterations)
        _sync(dev)
        wall = time.perf_counter() - t0
        out["train_steps_per_s"][str(n)] = round(train_iterations * params.ppo.num_steps_per_env * n / wall)
        split = {k: [v for t, _, v in curve if t == f"Perf/{k}_time"] for k in ("collection", "learning")}
        it_s = {
            "collect": sum(split["collection"]) / train_iterations,
            "update": sum(split["learning"]) / train_iterations,
        }
        out["iteration_s"][str(n)] = {k: round(v, 4) for k, v in it_s.items()}
        t0 = time.perf_counter()
        validate(trainer.actor, model, val_tracks, params, dev)
        _sync(dev)
        val_s = time.perf_counter() - t0
        out["validation_s"][str(n)] = round(val_s, 3)
        chunk_s = params.chunk_iterations * sum(it_s.values())
        out["validation_share"][str(n)] = round(val_s / (chunk_s + val_s), 3)
        out["peak_memory_mb"][str(n)] = round(_peak_mb(dev), 1)
        del trainer, env
    if source_seconds > 0:
        from s3.sim.params import SimParams

        out.update(bench_source(sim or SimParams(), params, source_seconds, direct_seconds, direct_workers, tracks[:4]))
        one, ppo = out["source_control_steps_per_s"], out["direct_ppo_steps_per_s"]
        out["env_vs_source"] = {n: round(v / one, 2) for n, v in out["env_steps_per_s"].items()}
        out["ppo_vs_direct"] = {n: round(v / ppo, 2) for n, v in out["train_steps_per_s"].items()}
    else:
        out.update(dict.fromkeys(SOURCE_KEYS))
    return out


def bench_source(
    sim: SimParams,
    params: TrainParams,
    source_seconds: float,
    direct_seconds: float,
    workers: int,
    tracks: Sequence[Any],
) -> dict[str, Any]:
    """Single-process control steps/s of the source simulator, then its parallel env and PPO rates."""
    from s3.compute.sim_pool import resolve_workers
    from s3.rl.source_env import SourceVecEnv
    from s3.sim.bench import bench_sim

    one = bench_sim(source_seconds, sim.mujoco, sim.control_dt)["control_steps_per_s"]
    d = params.direct
    own = params.for_policy(DIRECT)  # direct's own PPO settings (per_policy.direct), as s3.rl.direct trains it
    ppo = own.ppo.model_copy(update={"num_steps_per_env": d.num_steps_per_env})
    w = resolve_workers(workers, d.num_envs)
    g = torch.Generator().manual_seed(0)
    with SourceVecEnv(tracks, sim, params.env, d.num_envs, w, seed=0) as env:
        steps, t0 = 0, time.perf_counter()
        while steps == 0 or time.perf_counter() - t0 < direct_seconds:
            env.step(torch.rand(d.num_envs, 2, generator=g) * 2 - 1)
            steps += 1
        env_rate = steps * d.num_envs / (time.perf_counter() - t0)
        trainer = PPOTrainer(env, ppo, "cpu")
        trainer.iterate(1)
        its, t0 = 0, time.perf_counter()
        while its == 0 or time.perf_counter() - t0 < direct_seconds:
            trainer.iterate(1)
            its += 1
        ppo_rate = its * ppo.num_steps_per_env * d.num_envs / (time.perf_counter() - t0)
    return {
        "source_control_steps_per_s": round(one, 1),
        "direct_env_steps_per_s": round(env_rate, 1),
        "direct_ppo_steps_per_s": round(ppo_rate, 1),
        "direct_workers": w,
        "direct_num_envs": d.num_envs,
        "direct_num_steps_per_env": ppo.num_steps_per_env,
    }
