"""The train stage: PPO (rsl_rl) inside one family's distilled environment.

    train(family, models_dir, out_dir, plots_dir, params, metrics_dir=None, run=None) -> summary
    train_policy(model, folder, plot_path, params, family, run=None) -> summary   (model in memory)
    train_policy_curve(...the same...) -> (summary, learning curve)
writes
    <out_dir>/<family>/policy.safetensors, policy.onnx, policy.json   (see s3.rl.export)
    <out_dir>/<family>/checkpoints/                                   every chunk's actor (s3.rl.checkpoints; with
                                                                      several seeds, the first seed's only)
    <plots_dir>/<family>.png                                          (learning curve)
    <metrics_dir>/<family>.json                                       (if metrics_dir is given)
MLflow: given `run` (an s3.tracking.Run), training logs into it its params (`family`,
`train.*`), the scalars of every PPO iteration (`train/Train/mean_reward`, `train/Loss/value`,
...: the learning curve, sent after each chunk), the validation score of every chunk's checkpoint
(`val/score`, step = iteration), the final numbers, policy.json and the plot, and flushes it; it
never ends the run (its creator does). With run=None it touches no MLflow code at all.

The run is s3.rl.runner's (set up, loop, checkpoint choice, export); what is this route's: the env
(DistilledEnv), the budget, the choice and the road-course check. Loop (s3.rl.loop):
`chunk_iterations` PPO iterations at a time, each chunk's checkpoint kept; part of the training-
track pool replaced between chunks (every car on a replaced track restarts); the budget is
`StepBudget`: max_env_steps, which keeps a run deterministic, or earlier a plateau of the
validation score (`plateau_chunks`, off by default), with the max_minutes safety cap (recorded as
`train.stopped_by`: plateau, max_env_steps or max_minutes; a run cut by the clock depends on how busy
the machine was). The checkpoint choice is `ValidateAtEnd` (s3.rl.validation: in-model validation on
held-out procedural tracks; every chunk as it ends under a plateau rule). The kept policy is saved
and exported and, for information only, drives one lap of the built-in road course (nominal) inside
the same distilled env.

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
import time
from pathlib import Path
from typing import Any

import torch

from s3 import headline
from s3.dynamics.base import DynamicsModel
from s3.rl.caution import OffTrackMultiplier, chunk_rate
from s3.rl.env import DistilledEnv, resolve_device
from s3.rl.export import as_callable, deployable
from s3.rl.loop import StepBudget
from s3.rl.params import TrainParams
from s3.rl.ppo import Curve
from s3.rl.resume import resume_fingerprint, resume_path
from s3.rl.rollout import drive_lap
from s3.rl.runner import PPORun, Resume, TrainError, flushed, prepare, setup
from s3.rl.tracks import VALIDATION_SEED_BASE, TrackPool, validation_tracks
from s3.rl.validation import ValidateAtEnd
from s3.tracking import Run
from s3.tracks.road_course import road_course

__all__ = ["TrainError", "file_sha256", "train", "train_policy", "train_policy_curve"]

SCORE_DEFINITION = "mean share of a lap driven on held-out procedural tracks before failing or running out of time"


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
    say = prepare(params)
    device = resolve_device(params.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainError("train.device is 'cuda' but torch sees no CUDA device")
    t_start = time.perf_counter()
    pool = TrackPool(params.tracks, params.seed)
    env = DistilledEnv(model, pool.tracks, params.env, device=device, seed=params.seed)
    max_it = max(1, math.ceil(params.max_env_steps / (env.num_envs * params.ppo.num_steps_per_env)))
    with flushed(run):
        ppo = setup(
            family,
            env,
            pool,
            params,
            params.ppo,
            device,
            folder=folder,
            run=run,
            say=say,
            t_start=t_start,
            log_params={"family": family, "train": params.model_dump(mode="json")},
            resume=Resume(resume_path(folder), resume_fingerprint(params, family, model, validation_seed), max_it),
        )
        budget = StepBudget(
            max_it,
            params.chunk_iterations,
            60.0 * params.max_minutes,
            ppo.t_start,
            plateau_chunks=params.plateau_chunks,
            plateau_delta=params.plateau_delta,
            plateau_min_iterations=math.ceil(params.plateau_min_env_steps / ppo.steps_per_iteration),
        )
        val_tracks = validation_tracks(params.tracks, validation_seed)
        choice = ValidateAtEnd(model, val_tracks, params, device, ppo.t_start, ppo.restored_checkpoints)
        caution = OffTrackMultiplier(params.off_track, params.env.reward.off_track, env.rules.off_track_weight)

        def on_chunk(done: int, chunk: Curve, _: dict[str, Any]) -> None:
            if caution.on:
                env.rules.off_track_weight = caution.update(chunk_rate(chunk))
            _on_chunk(ppo, done, max_it, caution)

        ppo.loop(budget, choice, on_chunk)
        best = ppo.choose(choice)
        history = choice.history
        _log_validation(ppo, history, choice.seconds)
        road = _road_course(ppo, model, params, device)
        wall = time.perf_counter() - ppo.t_start
        env_steps = ppo.done * ppo.steps_per_iteration
        model_folder = Path(model_folder) if model_folder is not None else None
        # the first seed (or a lone run; every seed with keep_checkpoints: all) keeps every chunk's checkpoint
        kept = choice.checkpoints if validation_seed == params.seed or params.keep_checkpoints == "all" else None
        meta = ppo.export(
            dynamics_model={
                "folder": model_label or (str(model_folder) if model_folder else None),
                "sha256": file_sha256(model_folder / "model.safetensors") if model_folder else None,
                "use_mu": model.use_mu,
                "history": model.history,
            },
            validation={
                "score": best["score"],
                "score_definition": SCORE_DEFINITION,
                "selection": f"the latest checkpoint scoring within {params.validation_tolerance} of the best "
                f"({max(h['score'] for h in history):.4f})",
                "iteration": best["iteration"],
                "env_steps": best["env_steps"],
                "track_seeds": [
                    VALIDATION_SEED_BASE + validation_seed * 1000 + i for i in range(params.tracks.validation_tracks)
                ],
                "starts_per_track": params.tracks.validation_starts,
                "min_speed_m_s": params.validation_min_speed,
                **{k: v for k, v in best["summary"].items() if k not in ("score",)},
            },
            road_course_nominal=road,
            train={
                "wall_s": round(wall, 1),
                "ppo_wall_s": round(ppo.ppo_s, 1),
                "validation_wall_s": round(choice.seconds, 1),
                "env_steps": env_steps,
                "iterations": ppo.done,
                "stopped_by": budget.stopped_by,
                "ppo_steps_per_s": round(env_steps / max(ppo.ppo_s, 1e-9)),
                "invalid_model_steps": env.invalid_model_steps,
                "off_track_penalty": caution.value,  # at the end: the constraint's multiplier, else the reward's
                "episodes": int(env.episode_count),
                "resumed_from_iteration": ppo.resumed_from,
                "device": str(device),
                "torch_threads": torch.get_num_threads(),
            },
            history=[{k: v for k, v in h.items() if k != "reasons"} for h in history],
            params=params.model_dump(mode="json"),
            checkpoints=kept,
        )
        ppo.plot(plot_path, history, f"{family}: PPO in the distilled environment", best["env_steps"])
        return _finish(ppo, meta, best, road, wall, plot_path, kept), ppo.curve


def _on_chunk(ppo: PPORun, done: int, max_it: int, caution: OffTrackMultiplier) -> None:
    """A chunk's env counters (and the off-track constraint's penalty) into MLflow and its progress line."""
    steps = done * ppo.steps_per_iteration
    if ppo.run is not None:
        metrics = {"train/env_steps": steps, "train/invalid_model_steps": ppo.env.invalid_model_steps}
        if caution.on:
            metrics["train/off_track_penalty"] = caution.value
        ppo.run.log_metrics(metrics, step=done - 1)
    rewards = [v for t, _, v in ppo.curve if t == "Train/mean_reward"]
    ppo.say(
        f"train {ppo.name}: it {done}/{max_it}  {steps / 1e6:.2f} M steps  "
        f"reward {rewards[-1] if rewards else float('nan'):.2f}  {time.perf_counter() - ppo.t_start:.0f} s"
        + (f"  off-track penalty {caution.value:.1f}" if caution.on else "")
    )


def _log_validation(ppo: PPORun, history: list[dict[str, Any]], seconds: float) -> None:
    """Every checkpoint's validation into MLflow (step = its iteration) and a progress line."""
    if ppo.run is not None:
        for h in history:
            ppo.run.log_metrics(
                {
                    "val/score": h["score"],
                    "val/completion_rate": h["completion_rate"],
                    "val/mean_lap_time_s": h["mean_lap_time_s"],
                },
                h["iteration"],
            )
    scores = " ".join(f"{h['score']:.2f}" for h in history)
    ppo.say(f"train {ppo.name}: validated {len(history)} checkpoints in {seconds:.0f} s: {scores}")


def _road_course(ppo: PPORun, model: DynamicsModel, params: TrainParams, device: torch.device) -> dict[str, Any]:
    """The kept policy's lap of the nominal road course in the same distilled env: information only,
    never used for selection ("not run" unless train.road_course_check)."""
    if not params.road_course_check:
        return {"completed": None, "lap_time_s": None, "completion": None, "reason": "not run", "length_m": None}
    actor = ppo.trainer.actor
    policy = as_callable(
        deployable(actor, params.env.steer_full_speed).to(device), bool(getattr(actor, "is_recurrent", False))
    )
    lap = drive_lap(policy, model, road_course("nominal"), params.env, device=device)
    return {
        "completed": lap.completed,
        "lap_time_s": lap.lap_time,
        "completion": round(min(lap.progress / lap.lap_length, 1.0), 4),
        "reason": lap.reason,
        "length_m": round(lap.lap_length, 1),
    }


def _finish(
    ppo: PPORun,
    meta: dict[str, Any],
    best: dict[str, Any],
    road: dict[str, Any],
    wall: float,
    plot_path: str | Path | None,
    checkpoints: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The final numbers into MLflow, with policy.json and the plot; the summary (with the kept
    `checkpoints`' wall clocks, which their byte-stable index leaves out)."""
    if ppo.run is not None:  # a Run never raises: MLflow trouble cannot lose the trained policy
        ppo.run.log_metrics(
            {
                "val/best_score": best["score"],
                "road_course_nominal/completed": None if road["completed"] is None else float(road["completed"]),
                "road_course_nominal/lap_time_s": road["lap_time_s"],
                "train/wall_s": wall,
                "train/ppo_steps_per_s": meta["train"]["ppo_steps_per_s"],
            },
            step=ppo.done - 1,
        )
        ppo.run.log_artifacts([ppo.folder / "policy.json", *([plot_path] if plot_path else [])], "train")
    ppo.say(
        f"train {ppo.name}: kept iteration {best['iteration']} (val {best['score']:.3f}); road course nominal: "
        f"{road['reason']} {road['lap_time_s']} s; {wall:.0f} s -> {ppo.folder}"
    )
    summary = {k: meta[k] for k in ("family", "validation", "road_course_nominal", "train", "mlflow_run_id")}
    if checkpoints is not None:  # the train clock at each chunk's end
        summary["checkpoints"] = {
            "folder": "checkpoints",
            "points": [{k: c[k] for k in ("iteration", "env_steps", "wall_s")} for c in checkpoints],
            "ppo_steps_per_s": meta["train"]["ppo_steps_per_s"],
        }
    return summary


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
        headline.write_record(Path(metrics_dir) / f"{family}.json", summary, headline.train)
    return summary
