"""The train stage: PPO (rsl_rl) inside one family's distilled environment.

    train(family, models_dir, out_dir, plots_dir, params, metrics_dir=None, run=None) -> summary
    train_many(families, models_dir, out_dir, plots_dir, params, metrics_dir=None) -> {family: summary}
    train_policy(model, folder, plot_path, params, family, run=None) -> summary   (model in memory)
    train_policy_curve(...the same...) -> (summary, learning curve)
writes
    <out_dir>/<family>/policy.safetensors, policy.onnx, policy.json   (see s3.rl.export)
    <out_dir>/<family>/checkpoints/                                   every chunk's actor (s3.rl.checkpoints; with
                                                                      several seeds, the first seed's only)
    <plots_dir>/<family>.png                                          (learning curve)
    <metrics_dir>/<family>.json                                       (if metrics_dir is given)
MLflow: given `run` (an s3.platform.tracking.Run), training logs into it its params (`family`,
`train.*`), the scalars of every PPO iteration (`train/Train/mean_reward`, `train/Loss/value`,
...: the learning curve, sent after each chunk), the validation score of every chunk's checkpoint
(`val/score`, step = iteration), the final numbers, policy.json and the plot, and flushes it; it
never ends the run (its creator does). With run=None it touches no MLflow code at all.

Loop (s3.rl.loop): `chunk_iterations` PPO iterations at a time, each chunk's checkpoint kept; part
of the training-track pool replaced between chunks (every car on a replaced track restarts); the
budget is `StepBudget`: max_env_steps, which keeps a run deterministic, with the max_minutes safety
cap (recorded as `train.stopped_by`: a run cut by the clock depends on how busy the machine was).
The checkpoint choice is `ValidateAtEnd` (s3.rl.validation: in-model validation on held-out
procedural tracks). The kept policy is saved and exported and, for information only, drives one
lap of the built-in road course (nominal) inside the same distilled env.

Crashes. After every chunk the run's state goes to a resume file (s3.rl.resume). The resumed run
replays the pool refreshes, so it trains on the same tracks, but its cars restart and their random
stream continues from the saved state: the result is a valid run, not bit-identical to an
uninterrupted one. The file is removed once the policy is written. A non-finite PPO loss (or
weights) stops training with a TrainError naming the iteration; the last good state stays in the
resume file.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3 import __version__
from s3.dynamics.base import DynamicsModel
from s3.io import json_safe, write_json_atomic
from s3.platform.tracking import Run
from s3.rl.checkpoints import write_checkpoints
from s3.rl.env import DistilledEnv, resolve_device
from s3.rl.export import as_callable, deployable, save_policy
from s3.rl.loop import Hooks, NonFiniteUpdate, PPOTrainer, StepBudget, train_loop
from s3.rl.params import TrainParams
from s3.rl.ppo import Curve
from s3.rl.resume import load_resume, restore, resume_fingerprint, resume_path, resume_state, save_resume
from s3.rl.rollout import drive_lap
from s3.rl.tracks import VALIDATION_SEED_BASE, TrackPool, validation_tracks
from s3.rl.validation import ValidateAtEnd
from s3.tracks.road_course import road_course


class TrainError(RuntimeError):
    """The train stage cannot run (e.g. no distilled model); one line naming the file."""


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 (hex), or None if it does not exist (how policy.json names its dynamics model)."""
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_policy(
    model: DynamicsModel,
    folder: str | Path,
    plot_path: str | Path | None,
    params: TrainParams,
    family: str | None = None,
    run: Run | None = None,
    model_folder: str | Path | None = None,
    validation_seed: int | None = None,
) -> dict[str, Any]:
    """Train a policy in `model`'s distilled env and write it to `folder`; returns its summary (see
    the module docstring; `run` is where it logs, None for nowhere).

    `validation_seed` picks the held-out validation tracks (default: params.seed): runs of several
    seeds share one set so that their scores compare.
    """
    return train_policy_curve(model, folder, plot_path, params, family, run, model_folder, validation_seed)[0]


def train_policy_curve(
    model: DynamicsModel,
    folder: str | Path,
    plot_path: str | Path | None,
    params: TrainParams,
    family: str | None = None,
    run: Run | None = None,
    model_folder: str | Path | None = None,
    validation_seed: int | None = None,
    model_label: str | None = None,
) -> tuple[dict[str, Any], Curve]:
    """`train_policy`, returning (summary, learning curve): the curve is rsl_rl's scalars of every
    PPO iteration (s3.rl.ppo.Curve), for a caller that logs it elsewhere (s3.rl.seeds).
    `model_label`: the model folder policy.json names, when `model_folder` is a copy of it."""
    family = family or model.family
    validation_seed = params.seed if validation_seed is None else int(validation_seed)
    folder = Path(folder)
    if params.torch_threads:
        torch.set_num_threads(params.torch_threads)
    torch.manual_seed(params.seed)
    np.random.seed(params.seed)
    device = resolve_device(params.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainError("train.device is 'cuda' but torch sees no CUDA device")
    t_start = time.perf_counter()
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if params.progress_bar else (lambda msg: None)

    pool = TrackPool(params.tracks, params.seed)
    env = DistilledEnv(model, pool.tracks, params.env, device=device, seed=params.seed)

    val_tracks = validation_tracks(params.tracks, validation_seed)
    try:
        return _train(
            model,
            env,
            pool,
            val_tracks,
            validation_seed,
            folder,
            plot_path,
            params,
            family,
            run,
            model_folder,
            device,
            t_start,
            say,
            model_label,
        )
    finally:
        if run is not None:
            run.flush()  # a worker process may end right after: its writes must be done


def _train(
    model: DynamicsModel,
    env: DistilledEnv,
    pool: TrackPool,
    val_tracks: list,
    validation_seed: int,
    folder: Path,
    plot_path: str | Path | None,
    params: TrainParams,
    family: str,
    run: Run | None,
    model_folder: str | Path | None,
    device: torch.device,
    t_start: float,
    say: Callable[[str], None],
    model_label: str | None = None,
) -> tuple[dict[str, Any], Curve]:
    """The body of train_policy_curve."""
    if run is not None:
        run.log_params({"family": family, "train": params.model_dump(mode="json")})
    curve: Curve = []

    trainer = PPOTrainer(env, params.ppo, device)
    steps_per_it = trainer.steps_per_iteration
    max_it = max(1, math.ceil(params.max_env_steps / steps_per_it))
    resume_file = resume_path(folder)
    fingerprint = resume_fingerprint(params, family, model, validation_seed)
    saved = load_resume(resume_file, fingerprint, device, say)
    done_it, t_ppo0, refreshes, resumed_from, checkpoints = 0, 0.0, 0, None, []
    if saved is not None:
        done_it, t_ppo0, refreshes, checkpoints = restore(saved, trainer, env, pool)
        resumed_from = done_it
        t_start -= float(saved["wall_s"])  # max_minutes and the reported wall time span both runs
        if run is not None:
            run.log_metrics({"train/resumed_from_iteration": done_it}, step=max(done_it - 1, 0))
        say(f"train {family}: resuming from {resume_file} at iteration {done_it}/{max_it}")
    budget = StepBudget(max_it, params.chunk_iterations, 60.0 * params.max_minutes, t_start)
    choice = ValidateAtEnd(model, val_tracks, params, device, t_start, checkpoints)
    curve: Curve = []

    def on_chunk(done: int, chunk: Curve, _: dict[str, Any]) -> None:
        curve.extend(chunk)
        rewards = [v for t, _, v in curve if t == "Train/mean_reward"]
        if run is not None:
            run.log_curve(chunk, prefix="train/")
            run.log_metrics(
                {"train/env_steps": done * steps_per_it, "train/invalid_model_steps": env.invalid_model_steps},
                step=done - 1,
            )
        say(
            f"train {family}: it {done}/{max_it}  {done * steps_per_it / 1e6:.2f} M steps  reward {rewards[-1] if rewards else float('nan'):.2f}  {time.perf_counter() - t_start:.0f} s"
        )

    def refresh() -> None:
        nonlocal refreshes
        if params.tracks.refresh_fraction > 0:
            changed = pool.refresh()
            refreshes += 1
            trainer.restart(env.set_tracks(pool.tracks, changed))  # cars on replaced tracks restart

    saved_at = [done_it]  # the iteration count of the last resume file written

    def save(done: int) -> None:
        saved_at[0] = done
        wall = time.perf_counter() - t_start
        save_resume(
            resume_file,
            resume_state(
                fingerprint, trainer, env, done, t_ppo0 + trainer.seconds, wall, refreshes, choice.checkpoints
            ),
        )

    try:
        loop = train_loop(trainer, budget, choice, Hooks(on_chunk, refresh, save), done=done_it)
    except NonFiniteUpdate as e:
        if run is not None:  # the learning curve up to the failure
            run.log_curve(e.curve, prefix="train/")
        kept = (
            f"kept the last good state in {resume_file} (iteration {saved_at[0]})"
            if resume_file.exists()
            else "no good state had been saved yet"
        )
        raise TrainError(f"{folder}: {e}; training stopped, {kept}") from None
    done_it, t_ppo, stopped_by = loop.iterations, t_ppo0 + loop.ppo_s, loop.stopped_by
    best = choice.choose(trainer)
    history, t_val = choice.history, choice.seconds
    actor, critic = trainer.actor, trainer.alg.critic
    actor.eval()
    if run is not None:
        for h in history:
            run.log_metrics(
                {
                    "val/score": h["score"],
                    "val/completion_rate": h["completion_rate"],
                    "val/mean_lap_time_s": h["mean_lap_time_s"],
                },
                h["iteration"],
            )
    say(
        f"train {family}: validated {len(history)} checkpoints in {t_val:.0f} s: "
        + " ".join(f"{h['score']:.2f}" for h in history)
    )

    # road course, nominal: information only (never used for selection)
    road: dict[str, Any] = {
        "completed": None,
        "lap_time_s": None,
        "completion": None,
        "reason": "not run",
        "length_m": None,
    }
    if params.road_course_check:
        policy = as_callable(
            deployable(actor, params.env.steer_full_speed).to(device), bool(getattr(actor, "is_recurrent", False))
        )
        lap = drive_lap(policy, model, road_course("nominal"), params.env, device=device)
        road = {
            "completed": lap.completed,
            "lap_time_s": lap.lap_time,
            "completion": round(min(lap.progress / lap.lap_length, 1.0), 4),
            "reason": lap.reason,
            "length_m": round(lap.lap_length, 1),
        }

    wall = time.perf_counter() - t_start
    env_steps = done_it * steps_per_it
    model_folder = Path(model_folder) if model_folder is not None else None
    meta = {
        "format": "s3-policy-1",
        "s3_version": __version__,
        "family": family,
        "dt": env.dt,
        "dynamics_model": {
            "folder": model_label or (str(model_folder) if model_folder else None),
            "sha256": file_sha256(model_folder / "model.safetensors") if model_folder else None,
            "use_mu": model.use_mu,
            "history": model.history,
        },
        "obs": env.layout.to_json(),
        "policy": {
            "type": params.ppo.policy,
            "recurrent": params.ppo.policy == "gru",
            "num_actions": env.num_actions,
            "actor_cfg": trainer.cfg["actor"],
            "critic_cfg": trainer.cfg["critic"],
        },
        "validation": {
            "score": best["score"],
            "score_definition": "mean share of a lap driven on held-out procedural tracks before failing or running out of time",
            "selection": f"the latest checkpoint scoring within {params.validation_tolerance} of the best ({max(h['score'] for h in history):.4f})",
            "iteration": best["iteration"],
            "env_steps": best["env_steps"],
            "track_seeds": [
                VALIDATION_SEED_BASE + validation_seed * 1000 + i for i in range(params.tracks.validation_tracks)
            ],
            "starts_per_track": params.tracks.validation_starts,
            "min_speed_m_s": params.validation_min_speed,
            **{k: v for k, v in best["summary"].items() if k not in ("score",)},
        },
        "road_course_nominal": road,
        "train": {
            "wall_s": round(wall, 1),
            "ppo_wall_s": round(t_ppo, 1),
            "validation_wall_s": round(t_val, 1),
            "env_steps": env_steps,
            "iterations": done_it,
            "stopped_by": stopped_by,
            "ppo_steps_per_s": round(env_steps / max(t_ppo, 1e-9)),
            "invalid_model_steps": env.invalid_model_steps,
            "episodes": int(env.episode_count),
            "resumed_from_iteration": resumed_from,
            "device": str(device),
            "torch_threads": torch.get_num_threads(),
        },
        "history": [{k: v for k, v in h.items() if k != "reasons"} for h in history],
        "params": params.model_dump(mode="json"),
        "mlflow_run_id": None if run is None else run.run_id,
    }
    meta = json_safe(meta)
    save_policy(folder, actor, critic, meta)
    kept_chunks = None
    if (
        validation_seed == params.seed
    ):  # the first seed (or a lone run) keeps every chunk's checkpoint (s3.rl.checkpoints)
        write_checkpoints(folder, choice.checkpoints, meta)
        kept_chunks = {
            "folder": "checkpoints",
            "points": [{k: c[k] for k in ("iteration", "env_steps", "wall_s")} for c in choice.checkpoints],
            "ppo_steps_per_s": meta["train"]["ppo_steps_per_s"],
        }
    resume_file.unlink(missing_ok=True)  # the policy is written: nothing left to resume
    try:
        resume_file.parent.rmdir()
    except OSError:  # other policies still have theirs
        pass

    if plot_path is not None:
        from s3.viz.train_plots import plot_learning_curve

        plot_learning_curve(
            plot_path, curve, history, steps_per_it, f"{family}: PPO in the distilled environment", best["env_steps"]
        )
    if run is not None:  # a Run never raises: MLflow trouble cannot lose the trained policy
        run.log_metrics(
            {
                "val/best_score": best["score"],
                "road_course_nominal/completed": None if road["completed"] is None else float(road["completed"]),
                "road_course_nominal/lap_time_s": road["lap_time_s"],
                "train/wall_s": wall,
                "train/ppo_steps_per_s": meta["train"]["ppo_steps_per_s"],
            },
            step=done_it - 1,
        )
        run.log_artifacts([folder / "policy.json", *([plot_path] if plot_path else [])], "train")
    say(
        f"train {family}: kept iteration {best['iteration']} (val {best['score']:.3f}); road course nominal: {road['reason']} {road['lap_time_s']} s; {wall:.0f} s -> {folder}"
    )
    summary = {k: meta[k] for k in ("family", "validation", "road_course_nominal", "train", "mlflow_run_id")}
    if (
        kept_chunks is not None
    ):  # their wall clocks (train clock at each chunk's end), which the byte-stable index leaves out
        summary["checkpoints"] = kept_chunks
    return summary, curve


def train(
    family: str,
    models_dir: str | Path,
    out_dir: str | Path,
    plots_dir: str | Path,
    params: TrainParams,
    metrics_dir: str | Path | None = None,
    run: Run | None = None,
) -> dict[str, Any]:
    """Train a policy in models/<family>/'s distilled env; write policies/<family>/ and the plot;
    log into `run` if given."""
    from s3.dynamics.checkpoint import load_checkpoint

    device = resolve_device(params.device)
    model_folder = Path(models_dir) / family
    model = load_checkpoint(model_folder, family, device)
    summary = train_policy(
        model, Path(out_dir) / family, Path(plots_dir) / f"{family}.png", params, family, run, model_folder
    )
    if metrics_dir is not None:
        write_json_atomic(Path(metrics_dir) / f"{family}.json", summary)
    return summary


def train_many(
    families: list[str],
    models_dir: str | Path,
    out_dir: str | Path,
    plots_dir: str | Path,
    params: TrainParams,
    metrics_dir: str | Path | None = None,
) -> dict[str, dict[str, Any]]:
    """`train` each family in turn."""
    return {f: train(f, models_dir, out_dir, plots_dir, params, metrics_dir) for f in families}
