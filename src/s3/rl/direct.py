"""The `direct` baseline: PPO trained in the source simulator itself for a fixed wall-clock budget.

    train_direct(params, out_dir, plots_dir, metrics_dir, budget_s=None, run=None) -> summary
writes
    <out_dir>/direct/policy.safetensors, policy.onnx, policy.json   (s3.rl.export; loads with
                                                                    s3.evaluate.policy_driver.policy_factory)
    <out_dir>/direct/checkpoints/                                   every chunk's actor (s3.rl.checkpoints; the
                                                                    chunk's wall clock: the metrics' learning_curve)
    <plots_dir>/direct.png                                          (learning curve)
    <metrics_dir>/direct.json                                       (budget, throughput, curve, validation)

This is the efficiency comparison: the same wall clock that one family spends on distill + train
(`train.direct.budget_s`: at least one family's collect + distill + train on the same machine)
spent on PPO in the slow source simulator instead. It trains one seed: its budget is the machine's wall clock.
It drives the one car every stage uses (`sim.driver_aids`: traction control and ABS, or none).
Everything else is the distilled training's: reward, observation and terminations
(s3.rl.source_env.SourceVecEnv mirrors DistilledEnv), PPO settings (train.ppo, except the rollout
length `direct.num_steps_per_env`: a few dozen cars instead of a thousand), the track generator
and its refresh between chunks (a smaller pool, `direct.pool_size`), the held-out validation
tracks and the keep-best rule.

Budget. The clock starts when train_direct is called and covers everything: track generation,
worker start, PPO, validation and export. The first chunk is a single PPO iteration (it measures
the iteration time); each later chunk gets as many iterations (at most `direct.chunk_iterations`)
as fit into what is left together with its validation and the final export. At least one
iteration always runs, so a policy is written even when the budget is tiny.

Validation runs in the source simulator (its own workers) on the same held-out procedural tracks
and start grid as the distilled training, from rest, deterministic policy. Each episode ends at
the lap, a failure, or the lap-length / validation_min_speed clock (and, only if set,
`direct.validation_seconds`), the distilled training's rule; the score is the mean share of a
lap driven (as in s3.rl.train).
The best-scoring checkpoint is kept (ties to the later one); a chunk that ran out of budget before
its validation is not eligible. With `direct.validation: false` the last checkpoint is kept.

MLflow: given `run` (an s3.platform.tracking.Run), it logs its params, rsl_rl's scalars of every
iteration (`train/<tag>`, sent after each chunk) and the final numbers there, and flushes it; it
never ends the run. With run=None it touches no MLflow code.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from s3 import __version__
from s3.io import json_safe, write_json_atomic
from s3.platform.tracking import Run
from s3.progress import progress
from s3.rl.checkpoints import add_checkpoint, clear
from s3.rl.export import as_callable, deployable, save_policy
from s3.rl.loop import Hooks, PPOTrainer, WallClockBudget, train_loop
from s3.rl.ppo import Curve
from s3.rl.rollout import EpisodeBatch, lap_loop
from s3.rl.source_env import SourceVecEnv, prestart, resolve_workers
from s3.rl.tracks import VALIDATION_SEED_BASE, TrackPool, start_grid
from s3.rl.validation import kept_index
from s3.tracks.track import Track

if TYPE_CHECKING:
    from s3.config import Params
    from s3.rl.params import TrainParams

NAME = "direct"
EXPORT_RESERVE_S = 5.0  # export, plot and MLflow at the end (measured ~2-4 s on two cores)


@torch.inference_mode()
def validate_source(
    actor: torch.nn.Module, env: SourceVecEnv, tracks: Sequence[Track], params: TrainParams
) -> dict[str, Any]:
    """Deterministic episodes of `actor` in `env` (built on `tracks`, no auto-reset) from the validation start grid."""
    ti, s = start_grid(tracks, params.tracks.validation_starts)
    policy = as_callable(
        deployable(actor, env.params.steer_full_speed).cpu(), bool(getattr(actor, "is_recurrent", False))
    )
    obs = env.reset_to(torch.as_tensor(ti), torch.as_tensor(s, dtype=torch.float32))["policy"]
    seconds = env.track_length() / params.validation_min_speed
    if params.direct.validation_seconds is not None:
        seconds = torch.clamp(seconds, max=params.direct.validation_seconds)
    summary = source_episodes(env, policy, obs, torch.ceil(seconds / env.dt).long()).summary()
    summary["score"] = summary["mean_completion"]
    return summary


def source_episodes(
    env: SourceVecEnv, policy: Callable[[torch.Tensor], torch.Tensor], obs: torch.Tensor, limit: torch.Tensor
) -> EpisodeBatch:
    """Drive every car of `env` from `obs` until its lap, failure or `limit` [N] steps (s3.rl.rollout's rules)."""

    def step(active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal obs
        td, _, _, extras = env.step(policy(obs), active)  # finished cars stand still in their workers
        obs = td["policy"]
        return extras["progress"], extras["reason"]

    return lap_loop(step, env.track_length(), limit, env.dt)


class ValidateInSource:
    """The checkpoint choice of `direct` (s3.rl.loop.CheckpointChoice): after each chunk, when the
    budget still holds a validation, validate in the source simulator; at the end keep the latest
    checkpoint within `train.validation_tolerance` of the best (s3.rl.validation.kept_index, the
    distilled policies' rule); with no validation, the last checkpoint."""

    def __init__(
        self,
        val: tuple[SourceVecEnv, list[Track]] | None,
        params: Params,
        budget: WallClockBudget,
        steps_per_it: int,
        dt: float,
    ) -> None:
        self.val, self.params, self.budget, self.steps_per_it = val, params, budget, steps_per_it
        self.car_steps = _validation_car_steps(val[1], params, dt) if val is not None else 0.0
        self.validated: list[dict[str, Any]] = []  # score, iteration, env_steps, summary, actor, critic
        self.last: dict[str, Any] = {}

    def after_chunk(self, trainer: PPOTrainer, done: int) -> dict[str, Any]:
        point: dict[str, Any] = {}
        self.last = {"iteration": done - 1, "env_steps": done * self.steps_per_it}
        if self.val is None:
            return point
        self.budget.guess_validation(self.car_steps, self.steps_per_it)
        if self.budget.left() >= self.budget.val_s:
            t0 = time.perf_counter()
            res = validate_source(trainer.actor, self.val[0], self.val[1], self.params.train)
            self.budget.validated(time.perf_counter() - t0)
            point = {"val_score": res["score"], "val_completion_rate": res["completion_rate"]}
            self.validated.append({"score": res["score"], **self.last, "summary": res, **trainer.snapshot()})
        return point

    def choose(self, trainer: PPOTrainer) -> dict[str, Any]:
        if not self.validated:  # no validation: the last checkpoint
            return {"score": None, **self.last, "summary": {}}
        kept = self.validated[kept_index([v["score"] for v in self.validated], self.params.train.validation_tolerance)]
        trainer.load(kept)
        return kept


SKIPPED = "skipped.json"  # policies/direct/skipped.json: why direct was not trained (no policy.json then)


def skip_reason(params: Params) -> str | None:
    """Why `direct` is not trained with this source simulator, or None: it steps many cars of the
    embedded simulator side by side; one BeamNG.tech instance steps one car at about real time,
    so a PPO budget of minutes would train nothing (and days would be needed)."""
    if params.sim.backend == "mujoco":
        return None
    return (
        f"direct (PPO inside the source simulator) needs many cars stepped side by side, i.e. sim.backend 'mujoco'; "
        f"one {params.sim.backend} instance steps one car at about real time, so it is not run"
    )


def write_skipped(params: Params, out_dir: str | Path, metrics_dir: str | Path | None, reason: str) -> dict[str, Any]:
    """The record of a skipped `direct`: <out_dir>/direct/skipped.json and <metrics_dir>/direct.json."""
    summary = {"policy": NAME, "skipped": reason, "source_simulator": {"backend": params.sim.backend}}
    folder = Path(out_dir) / NAME
    shutil.rmtree(folder, ignore_errors=True)  # no policy of an earlier run stands in for this one
    write_json_atomic(folder / SKIPPED, summary)
    if metrics_dir is not None:
        write_json_atomic(Path(metrics_dir) / f"{NAME}.json", summary)
    return summary


def train_direct(
    params: Params,
    out_dir: str | Path,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    budget_s: float | None = None,
    run: Run | None = None,
) -> dict[str, Any]:
    """PPO in the source simulator for `budget_s` (default train.direct.budget_s), logging into `run`; see the module docstring."""
    reason = skip_reason(params)
    if reason is not None:
        print(f"train direct: skipped: {reason}", file=sys.stderr, flush=True)
        return write_skipped(params, out_dir, metrics_dir, reason)
    budget = float(budget_s if budget_s is not None else params.train.direct.budget_s)
    if not budget > 0:
        raise ValueError(f"train_direct: budget_s must be positive, got {budget_s}")
    clock = WallClockBudget(
        budget, params.train.direct.chunk_iterations, EXPORT_RESERVE_S, params.train.direct.validation
    )
    prestart()
    tp = params.train
    if tp.torch_threads:
        torch.set_num_threads(tp.torch_threads)
    torch.manual_seed(tp.seed)
    np.random.seed(tp.seed)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if tp.progress_bar else (lambda msg: None)
    try:
        with progress(f"train {NAME}", clock.budget_s, "s", follow=lambda: clock.elapsed):  # the wall-clock budget
            return _train_direct(params, Path(out_dir), plots_dir, metrics_dir, clock, run, say)
    finally:
        if run is not None:
            run.flush()


def _train_direct(
    params: Params,
    out_dir: Path,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    clock: WallClockBudget,
    run: Run | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The body of train_direct."""
    tp, d = params.train, params.train.direct
    ppo = tp.ppo.model_copy(update={"num_steps_per_env": d.num_steps_per_env})
    pool = TrackPool(tp.tracks.model_copy(update={"pool_size": d.pool_size}), tp.seed)
    aids = params.sim.driver_aids  # the one car
    if run is not None:
        run.log_params(
            {
                "family": NAME,
                "budget_s": clock.budget_s,
                "train": tp.model_dump(mode="json"),
                "sim": params.sim.model_dump(mode="json"),
                "driver_aids": aids.model_dump(mode="json"),
            }
        )
    workers = resolve_workers(d.workers, d.num_envs)
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(
            SourceVecEnv(
                pool.tracks,
                params.sim,
                tp.env,
                d.num_envs,
                workers,
                tp.seed,
                timeout_s=d.worker_timeout_s,
                aids=aids,
                compute=params.compute,
            )
        )
        workers = len(env.workers)  # on Ray: as many actors as the cluster had room for
        val = None
        if d.validation:
            val_tracks = pool.validation_tracks()
            n_val = len(val_tracks) * tp.tracks.validation_starts
            val = (
                stack.enter_context(
                    SourceVecEnv(
                        val_tracks,
                        params.sim,
                        tp.env,
                        n_val,
                        min(workers, n_val),
                        tp.seed,
                        auto_reset=False,
                        timeout_s=d.worker_timeout_s,
                        aids=aids,
                        compute=params.compute,
                        holds_cpus=False,  # it steps only while the training env waits
                    )
                ),
                val_tracks,
            )
        say(
            f"train {NAME}: {d.num_envs} source cars in {workers} workers ready after {clock.elapsed:.0f} s (budget {clock.budget_s:.0f} s)"
        )
        clear(out_dir / NAME)  # this run's chunk checkpoints only
        loop = _loop(env, val, pool, ppo, params, clock, run, say, out_dir / NAME)
        return _finish(loop, env, params, ppo, out_dir, plots_dir, metrics_dir, clock, run, workers, say)


def _loop(
    env: SourceVecEnv,
    val: tuple[SourceVecEnv, list[Track]] | None,
    pool: TrackPool,
    ppo: Any,
    params: Params,
    clock: WallClockBudget,
    run: Run | None,
    say: Callable[[str], None],
    folder: Path | None = None,
) -> dict[str, Any]:
    """PPO chunks until the budget is spent (s3.rl.loop); returns the trainer, the kept checkpoint, the
    per-chunk curve and the per-iteration scalars (`scalars`, also sent to `run` after each chunk).
    Every chunk's actor goes to <folder>/checkpoints/ (s3.rl.checkpoints) when `folder` is given."""
    trainer = PPOTrainer(env, ppo, "cpu")
    steps_per_it = trainer.steps_per_iteration
    head = {
        "obs": env.layout.to_json(),
        "policy": {
            "type": ppo.policy,
            "recurrent": ppo.policy == "gru",
            "num_actions": env.num_actions,
            "actor_cfg": trainer.cfg["actor"],
        },
        "params": {"env": params.train.env.model_dump(mode="json")},
    }
    choice = ValidateInSource(val, params, clock, steps_per_it, env.dt)
    curve: list[dict[str, Any]] = []

    def on_chunk(done: int, chunk: Curve, report: dict[str, Any]) -> None:
        if run is not None:
            run.log_curve(chunk, prefix="train/")
        point = {
            "iteration": done - 1,
            "env_steps": done * steps_per_it,
            **env.pop_stats(),
            **report,
            "wall_s": round(clock.elapsed, 2),
        }
        curve.append(point)
        if folder is not None:
            add_checkpoint(folder, trainer.actor.state_dict(), done - 1, done * steps_per_it, head)
        say(
            f"train {NAME}: it {done}  {point['env_steps'] / 1e3:.0f} k steps  return {_fmt(point['mean_return'])}  "
            f"speed {_fmt(point['mean_speed_m_s'])} m/s  val {_fmt(point.get('val_score'))}  {clock.elapsed:.0f}/{clock.budget_s:.0f} s"
        )

    def refresh() -> None:
        if params.train.tracks.refresh_fraction > 0:
            changed = pool.refresh()
            trainer.restart(env.set_tracks(pool.tracks, changed))  # cars on replaced tracks restart

    loop = train_loop(trainer, clock, choice, Hooks(on_chunk, refresh))
    best = choice.choose(trainer)
    return {
        "trainer": trainer,
        "best": best,
        "curve": curve,
        "scalars": loop.curve,
        "iterations": loop.iterations,
        "ppo_wall_s": loop.ppo_s,
        "steps_per_it": steps_per_it,
    }


def _validation_car_steps(tracks: Sequence[Track], params: Params, dt: float) -> float:
    """Most car steps one validation can take (every car drives until its clock runs out)."""
    tp = params.train
    cap = math.inf if tp.direct.validation_seconds is None else tp.direct.validation_seconds
    per_start = [math.ceil(min(t.length / tp.validation_min_speed, cap) / dt) for t in tracks]
    return float(sum(per_start) * tp.tracks.validation_starts)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _finish(
    loop: dict[str, Any],
    env: SourceVecEnv,
    params: Params,
    ppo: Any,
    out_dir: Path,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    clock: WallClockBudget,
    run: Run | None,
    workers: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Export the kept checkpoint, write the metrics JSON and the plot, log to MLflow."""
    tp, d = params.train, params.train.direct
    trainer, best = loop["trainer"], loop["best"]
    actor, critic = trainer.actor, trainer.alg.critic
    actor.eval()
    env_steps = loop["iterations"] * loop["steps_per_it"]
    rewards = [(it, v) for t, it, v in loop["scalars"] if t == "Train/mean_reward"]
    validation = {
        "score": best["score"],
        "score_definition": "mean share of a lap driven on held-out procedural tracks (source simulator) before failing, "
        "running out of time or reaching the validation_seconds cap",
        "iteration": best["iteration"],
        "env_steps": best["env_steps"],
        "in": "source simulator" if d.validation else "none (last checkpoint kept)",
        "selection": f"the latest validated checkpoint scoring within {tp.validation_tolerance} of the best"
        if d.validation
        else "the last",
        "track_seeds": [VALIDATION_SEED_BASE + tp.seed * 1000 + i for i in range(tp.tracks.validation_tracks)]
        if d.validation
        else [],
        "starts_per_track": tp.tracks.validation_starts,
        "min_speed_m_s": tp.validation_min_speed,
        "episode_cap_s": d.validation_seconds,
        **{k: v for k, v in best["summary"].items() if k != "score"},
    }
    train = {
        "budget_s": clock.budget_s,
        "wall_s": round(clock.elapsed, 1),
        "ppo_wall_s": round(loop["ppo_wall_s"], 1),
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / max(clock.elapsed, 1e-9), 1),
        "ppo_steps_per_s": round(env_steps / max(loop["ppo_wall_s"], 1e-9)),
        "simulated_car_steps": env.car_steps,
        "iterations": loop["iterations"],
        "workers": workers,
        "num_envs": env.num_envs,
        "num_steps_per_env": ppo.num_steps_per_env,
        "sim_errors": env.sim_errors,
        "episodes": env.episode_count,
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
    }
    meta = json_safe(
        {
            "format": "s3-policy-1",
            "s3_version": __version__,
            "family": NAME,
            "dt": env.dt,
            "dynamics_model": None,
            "source_simulator": {"backend": params.sim.backend, "control_dt": params.sim.control_dt},
            "obs": env.layout.to_json(),
            "policy": {
                "type": ppo.policy,
                "recurrent": ppo.policy == "gru",
                "num_actions": env.num_actions,
                "actor_cfg": trainer.cfg["actor"],
                "critic_cfg": trainer.cfg["critic"],
            },
            "validation": validation,
            "train": train,
            "history": loop["curve"],
            "params": tp.model_dump(mode="json"),
            "mlflow_run_id": None if run is None else run.run_id,
        }
    )
    folder = save_policy(out_dir / NAME, actor, critic, meta)
    if plots_dir is not None:
        from s3.viz.train_plots import plot_learning_curve

        val_points = [
            {
                "env_steps": p["env_steps"],
                "mean_completion": p["val_score"],
                "completion_rate": p["val_completion_rate"],
            }
            for p in loop["curve"]
            if "val_score" in p
        ]
        plot_learning_curve(
            Path(plots_dir) / f"{NAME}.png",
            loop["scalars"],
            val_points,
            loop["steps_per_it"],
            f"{NAME}: PPO in the source simulator ({clock.budget_s:.0f} s budget)",
            best["env_steps"],
        )
    wall = clock.elapsed
    train.update(
        {
            "wall_s": round(wall, 1),
            "env_steps_per_s": round(env_steps / max(wall, 1e-9), 1),
            "over_budget_s": round(max(0.0, wall - clock.budget_s), 1),
        }
    )
    summary = json_safe(
        {
            "family": NAME,
            **train,
            "validation": validation,
            "learning_curve": loop["curve"],
            "reward_curve": [
                {"iteration": it, "env_steps": (it + 1) * loop["steps_per_it"], "mean_reward": v} for it, v in rewards
            ],
            "policy_folder": str(folder),
            "mlflow_run_id": None if run is None else run.run_id,
        }
    )
    if metrics_dir is not None:
        write_json_atomic(Path(metrics_dir) / f"{NAME}.json", summary)
    if run is not None:
        run.log_metrics(
            {
                "val/best_score": best["score"],
                "train/wall_s": wall,
                "train/env_steps": float(env_steps),
                "train/ppo_steps_per_s": train["ppo_steps_per_s"],
                "train/budget_s": clock.budget_s,
            },
            step=max(loop["iterations"] - 1, 0),
        )
    say(
        f"train {NAME}: kept iteration {best['iteration']} (val {_fmt(best['score'])}); {env_steps} steps in {wall:.0f} s of {clock.budget_s:.0f} s -> {folder}"
    )
    return summary
