"""The `direct` baseline: PPO trained in the source simulator itself, to its own plateau.

    train_direct(params, out_dir, plots_dir, metrics_dir, budget_s=None, run=None) -> summary
writes
    <out_dir>/direct/policy.safetensors, policy.onnx, policy.json   (s3.rl.export; loads with
                                                                    s3.evaluate.policy_driver.policy_factory)
    <out_dir>/direct/checkpoints/                                   every chunk's actor (s3.rl.checkpoints; the
                                                                    chunk's wall clock: the metrics' learning_curve)
    <plots_dir>/direct.png                                          (learning curve)
    <metrics_dir>/direct.json                                       (budget, throughput, curve, validation)

This is the efficiency comparison: PPO in the slow source simulator, against the distilled route
(collect + distill + train). It trains `direct.seeds` runs one after another
(s3.rl.direct_seeds when more than one: every seed kept under seeds/seed<k>/).
It drives the one car every stage uses (`sim.driver_aids`: traction control and ABS, or none).
Everything else is the distilled training's: reward, observation and terminations
(s3.rl.source_env.SourceVecEnv mirrors DistilledEnv), PPO settings (train.ppo, except the rollout
length `direct.num_steps_per_env`: a few dozen cars instead of a thousand), the track generator
and its refresh between chunks (a smaller pool, `direct.pool_size`), the held-out validation
tracks and the keep-best rule.

The end. By default (`direct.budget_s` none) the distilled policies' end, on direct's own terms: a
s3.rl.loop.StepBudget of train.max_env_steps, chunks of `direct.chunk_iterations`, the plateau rule
(train.plateau_chunks, plateau_delta, plateau_min_env_steps) and the max_minutes safety cap, with
train.per_policy.direct's values; every chunk is validated, and the record says why the run ended
(train.stopped_by: plateau, max_env_steps or max_minutes). Its result is then the same on any machine.
With a `budget_s` (s), a s3.rl.loop.WallClockBudget: the clock starts when train_direct is called and
covers everything (track generation, worker start, PPO, validation, export); the first chunk is one
iteration (it measures the iteration time), each later chunk as many iterations (at most
`direct.chunk_iterations`) as fit into what is left with its validation and the export; at least one
iteration always runs, so a policy is written even when the budget is tiny.

The run is s3.rl.runner's (set up, loop, checkpoint choice, export); this route gives it the source
envs, the budget and ValidateInSource. Validation (s3.rl.source_validation) runs in the
source simulator (its own workers) on the same held-out procedural tracks and start grid as the
distilled training, from rest, deterministic policy. Each episode ends at
the lap, a failure, or the lap-length / validation_min_speed clock (and, only if set,
`direct.validation_seconds`), the distilled training's rule; the score is the mean share of a
lap driven (as in s3.rl.train).
The latest checkpoint within train.validation_tolerance of the best is kept; a chunk that ran out of a
wall-clock budget before its validation is not eligible. With `direct.validation: false` the last checkpoint is kept.

MLflow: given `run` (an s3.tracking.Run), it logs its params, rsl_rl's scalars of every
iteration (`train/<tag>`, sent after each chunk) and the final numbers there, and flushes it; it
never ends the run. With run=None it touches no MLflow code.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from s3 import headline
from s3.catalog import DIRECT
from s3.compute.sim_pool import resolve_workers
from s3.io import json_safe
from s3.progress import progress
from s3.rl.direct_skip import skip_reason, write_skipped
from s3.rl.loop import ENV_STEPS, StepBudget, WallClockBudget
from s3.rl.ppo import Curve
from s3.rl.runner import PPORun, flushed, prepare, setup
from s3.rl.source_env import SourceVecEnv, prestart
from s3.rl.source_validation import ValidateInSource
from s3.rl.tracks import VALIDATION_SEED_BASE, TrackPool, validation_tracks
from s3.tracking import Run

if TYPE_CHECKING:
    from s3.config import Params

NAME = DIRECT
EXPORT_RESERVE_S = 5.0  # export, plot and MLflow at the end (measured ~2-4 s on two cores)


def train_direct(
    params: Params,
    out_dir: str | Path,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    budget_s: float | None = None,
    run: Run | None = None,
) -> dict[str, Any]:
    """PPO in the source simulator to its plateau, or for `budget_s` s (default train.direct.budget_s), logging into
    `run`; see the module docstring. One seed: with train.direct.seeds > 1 the stage calls
    s3.rl.direct_seeds.train_direct_seeds, which checks the same way."""
    checked = check(params, out_dir, metrics_dir, budget_s)
    if isinstance(checked, dict):
        return checked
    return train_one_seed(params, Path(out_dir) / NAME, plots_dir, metrics_dir, checked, run)


def check(
    params: Params, out_dir: str | Path, metrics_dir: str | Path | None, budget_s: float | None
) -> float | dict[str, Any] | None:
    """The wall-clock budget to train for (None: to its plateau, by the step budget), or, when direct cannot run on
    this source simulator, the skipped summary (written)."""
    reason = skip_reason(params)
    if reason is not None:
        print(f"train direct: skipped: {reason}", file=sys.stderr, flush=True)
        return write_skipped(params, out_dir, metrics_dir, reason)
    budget = budget_s if budget_s is not None else params.train.direct.budget_s
    if budget is None:
        return None
    budget = float(budget)
    if not budget > 0:
        raise ValueError(f"train_direct: budget_s must be positive, got {budget_s}")
    return budget


def end_of(params: Params, budget_s: float | None, steps_per_iteration: int) -> StepBudget | WallClockBudget:
    """The run's end: `budget_s` of wall clock, or (None) train.max_env_steps with the plateau rule and the
    max_minutes safety, in chunks of direct.chunk_iterations (s3.rl.loop)."""
    tp, d = params.train, params.train.direct
    if budget_s is not None:
        return WallClockBudget(budget_s, d.chunk_iterations, EXPORT_RESERVE_S, d.validation)
    return StepBudget(
        max(1, tp.max_env_steps // steps_per_iteration),
        d.chunk_iterations,
        60.0 * tp.max_minutes,
        plateau_chunks=tp.plateau_chunks if d.validation else 0,
        plateau_delta=tp.plateau_delta,
        plateau_min_iterations=math.ceil(tp.plateau_min_env_steps / steps_per_iteration),
    )


def train_one_seed(
    params: Params,
    folder: Path,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    budget: float | None,
    run: Run | None,
    validation_seed: int | None = None,
) -> dict[str, Any]:
    """One PPO run of train.seed into `folder`, to its plateau (`budget` None) or for `budget` s, validated on the
    tracks of `validation_seed` (default train.seed)."""
    per_iteration = params.train.direct.num_envs * params.train.direct.num_steps_per_env
    clock = end_of(params, budget, per_iteration)
    prestart()
    say = prepare(params.train)
    seed = params.train.seed
    label = f"train {NAME} seed {seed}"
    with (
        flushed(run),
        progress(label, clock.budget_s, "s", follow=lambda: clock.elapsed)
        if isinstance(clock, WallClockBudget)
        else progress(label, clock.max_iterations * per_iteration, ENV_STEPS),  # fed by s3.rl.loop
    ):
        return _train_direct(
            params,
            folder,
            plots_dir,
            metrics_dir,
            clock,
            run,
            say,
            seed if validation_seed is None else validation_seed,
        )


def _train_direct(
    params: Params,
    folder: Path,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    clock: StepBudget | WallClockBudget,
    run: Run | None,
    say: Callable[[str], None],
    validation_seed: int,
) -> dict[str, Any]:
    """The body of train_direct: the source envs, then the PPO run (s3.rl.runner)."""
    tp, d = params.train, params.train.direct
    pool = TrackPool(tp.tracks.model_copy(update={"pool_size": d.pool_size}), tp.seed)
    aids = params.sim.driver_aids  # the one car
    workers = resolve_workers(d.workers, d.num_envs)
    source = {"sim": params.sim, "params": tp.env, "seed": tp.seed, "timeout_s": d.worker_timeout_s, "aids": aids}
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(
            SourceVecEnv(pool.tracks, num_envs=d.num_envs, workers=workers, compute=params.compute, **source)
        )
        workers = len(env.workers)  # on Ray: as many actors as the cluster had room for
        val = None
        if d.validation:
            val_tracks = validation_tracks(tp.tracks, validation_seed)  # every seed's: those of the first
            n_val = len(val_tracks) * tp.tracks.validation_starts
            val_env = SourceVecEnv(
                val_tracks,
                num_envs=n_val,
                workers=min(workers, n_val),
                auto_reset=False,
                compute=params.compute,
                holds_cpus=False,  # it steps only while the training env waits
                **source,
            )
            val = (stack.enter_context(val_env), val_tracks)
        say(
            f"train {NAME}: {d.num_envs} source cars in {workers} workers ready after {clock.elapsed:.0f} s "
            f"({_end_text(clock, tp)})"
        )
        ppo = setup(
            NAME,
            env,
            pool,
            tp,
            tp.ppo.model_copy(update={"num_steps_per_env": d.num_steps_per_env}),
            "cpu",
            folder=folder,
            run=run,
            say=say,
            t_start=clock.t_start,
            log_params={
                "family": NAME,
                "budget_s": _budget_s(clock),
                "train": tp.model_dump(mode="json"),
                "sim": params.sim.model_dump(mode="json"),
                "driver_aids": aids.model_dump(mode="json"),
            },
            chunk_checkpoints=True,
        )
        wall_clock = clock if isinstance(clock, WallClockBudget) else None
        choice = ValidateInSource(val, params, wall_clock, ppo.steps_per_iteration, env.dt)
        curve: list[dict[str, Any]] = []  # one point per chunk: the metrics' learning_curve

        def on_chunk(done: int, _: Curve, report: dict[str, Any]) -> None:
            point = {
                "iteration": done - 1,
                "env_steps": done * ppo.steps_per_iteration,
                **env.pop_stats(),
                **{f"val_{k}": v for k, v in report.items()},  # val_score, val_completion_rate
                "wall_s": round(clock.elapsed, 2),
            }
            curve.append(point)
            say(
                f"train {NAME}: it {done}  {point['env_steps'] / 1e3:.0f} k steps  "
                f"return {_fmt(point['mean_return'])}  "
                f"speed {_fmt(point['mean_speed_m_s'])} m/s  val {_fmt(point.get('val_score'))}  "
                f"{clock.elapsed:.0f} s"
            )

        ppo.loop(clock, choice, on_chunk)
        best = ppo.choose(choice)
        return _finish(ppo, best, curve, params, plots_dir, metrics_dir, clock, workers, validation_seed)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _budget_s(clock: StepBudget | WallClockBudget) -> float | None:
    """The wall-clock budget, s; None for a run to its plateau."""
    return clock.budget_s if isinstance(clock, WallClockBudget) else None


def _end_text(clock: StepBudget | WallClockBudget, tp: Any) -> str:
    if isinstance(clock, WallClockBudget):
        return f"budget {clock.budget_s:.0f} s"
    rule = (
        f"{clock.plateau_chunks} chunks within {clock.plateau_delta} after {tp.plateau_min_env_steps / 1e6:g} M steps"
        if clock.plateau_chunks
        else "no plateau rule"
    )
    return f"to its plateau ({rule}), at most {tp.max_env_steps / 1e6:g} M steps or {tp.max_minutes:g} min"


def _finish(
    ppo: PPORun,
    best: dict[str, Any],
    curve: list[dict[str, Any]],
    params: Params,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    clock: StepBudget | WallClockBudget,
    workers: int,
    validation_seed: int,
) -> dict[str, Any]:
    """Export the kept checkpoint (s3.rl.runner), write the metrics JSON and the plot, log to MLflow."""
    tp, d, env, run = params.train, params.train.direct, ppo.env, ppo.run
    env_steps = ppo.done * ppo.steps_per_iteration
    rewards = [(it, v) for t, it, v in ppo.curve if t == "Train/mean_reward"]
    validation = {
        "score": best["score"],
        "score_definition": "mean share of a lap driven on held-out procedural tracks (source simulator) "
        "before failing, running out of time or reaching the validation_seconds cap",
        "iteration": best["iteration"],
        "env_steps": best["env_steps"],
        "in": "source simulator" if d.validation else "none (last checkpoint kept)",
        "selection": f"the latest validated checkpoint scoring within {tp.validation_tolerance} of the best"
        if d.validation
        else "the last",
        "track_seeds": [VALIDATION_SEED_BASE + validation_seed * 1000 + i for i in range(tp.tracks.validation_tracks)]
        if d.validation
        else [],
        "starts_per_track": tp.tracks.validation_starts,
        "min_speed_m_s": tp.validation_min_speed,
        "episode_cap_s": d.validation_seconds,
        **{k: v for k, v in best["summary"].items() if k != "score"},
    }
    train = {
        "budget_s": _budget_s(clock),
        "stopped_by": clock.stopped_by,  # plateau, max_env_steps or max_minutes; budget_s for a wall-clock budget
        "wall_s": round(clock.elapsed, 1),
        "ppo_wall_s": round(ppo.ppo_s, 1),
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / max(clock.elapsed, 1e-9), 1),
        "ppo_steps_per_s": round(env_steps / max(ppo.ppo_s, 1e-9)),
        "simulated_car_steps": env.car_steps,
        "iterations": ppo.done,
        "workers": workers,
        "num_envs": env.num_envs,
        "num_steps_per_env": ppo.trainer.ppo.num_steps_per_env,
        "sim_errors": env.sim_errors,
        "episodes": env.episode_count,
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
    }
    ppo.export(
        source_simulator={"backend": params.sim.backend, "control_dt": params.sim.control_dt},
        validation=validation,
        train=train,
        history=curve,
        params=tp.model_dump(mode="json"),
    )
    val_points = [
        {"env_steps": p["env_steps"], "mean_completion": p["val_score"], "completion_rate": p["val_completion_rate"]}
        for p in curve
        if "val_score" in p
    ]
    title = f"{NAME}: PPO in the source simulator (ended by {clock.stopped_by})"
    ppo.plot(None if plots_dir is None else Path(plots_dir) / f"{NAME}.png", val_points, title, best["env_steps"])
    wall = clock.elapsed
    train.update(
        {
            "wall_s": round(wall, 1),
            "env_steps_per_s": round(env_steps / max(wall, 1e-9), 1),
            "over_budget_s": None if _budget_s(clock) is None else round(max(0.0, wall - clock.budget_s), 1),
        }
    )
    summary = json_safe(
        {
            "family": NAME,
            **train,
            "validation": validation,
            "learning_curve": curve,
            "reward_curve": [
                {"iteration": it, "env_steps": (it + 1) * ppo.steps_per_iteration, "mean_reward": v}
                for it, v in rewards
            ],
            "policy_folder": str(ppo.folder),
            "mlflow_run_id": None if run is None else run.run_id,
        }
    )
    if metrics_dir is not None:
        headline.write_record(Path(metrics_dir) / f"{NAME}.json", summary, headline.train)
    if run is not None:
        run.log_metrics(
            {
                "val/best_score": best["score"],
                "train/wall_s": wall,
                "train/env_steps": float(env_steps),
                "train/ppo_steps_per_s": train["ppo_steps_per_s"],
                **({} if _budget_s(clock) is None else {"train/budget_s": clock.budget_s}),
            },
            step=max(ppo.done - 1, 0),
        )
    ppo.say(
        f"train {NAME}: kept iteration {best['iteration']} (val {_fmt(best['score'])}); {env_steps} steps in "
        f"{wall:.0f} s ({clock.stopped_by}) -> {ppo.folder}"
    )
    return summary
