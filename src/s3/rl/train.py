"""The train stage: PPO (rsl_rl) inside one family's distilled environment.

    train(family, models_dir, out_dir, plots_dir, params, metrics_dir=None, run=None) -> summary
    train_many(families, models_dir, out_dir, plots_dir, params, metrics_dir=None) -> {family: summary}
    train_policy(model, folder, plot_path, params, family, run=None) -> summary   (model in memory)
    train_policy_curve(...the same...) -> (summary, learning curve)
writes
    <out_dir>/<family>/policy.safetensors, policy.onnx, policy.json   (see s3.rl.export)
    <plots_dir>/<family>.png                                          (learning curve)
    <metrics_dir>/<family>.json                                       (if metrics_dir is given)
MLflow: given `run` (an s3.platform.tracking.Run), training logs into it its params (`family`,
`train.*`), rsl_rl's scalars of every PPO iteration (`train/Train/mean_reward`, `train/Loss/value`,
...: the learning curve, sent after each chunk), the validation score of every chunk's checkpoint
(`val/score`, step = iteration), the final numbers, policy.json and the plot, and flushes it; it
never ends the run (its creator does). With run=None it touches no MLflow code at all.

Loop: learn `chunk_iterations` PPO iterations and keep that checkpoint; replace part of the
training-track pool (every car on a replaced track restarts); stop at max_env_steps, the budget
that keeps a run deterministic, or at the max_minutes safety cap (recorded as `train.stopped_by`:
a run cut by the clock depends on how busy the machine was). Then every chunk's checkpoint drives
the held-out *procedural* validation tracks (disjoint seeds, see s3.rl.tracks; never the road
course), all in one batched run (`validate_checkpoints`), and the latest checkpoint whose
validation score (mean share of a lap driven before leaving the road, turning around or running
out of time at `validation_min_speed`) is within `validation_tolerance` of the best is kept
(`kept_index`: the same choice as applying it after every chunk). It is saved and exported, and,
for information only, it drives one lap of the built-in road course (nominal) inside the same
distilled env.

Crashes. After every chunk the runner state (actor, critic, optimizer, iteration, the chunks'
checkpoints, how often the track pool was refreshed, RNG states) is written atomically to
<out_dir>/.resume/<family>.pt (beside the policy folder, not in it: `dvc repro` deletes a stage's
outputs before running it): tensors and plain types only, read back with
`torch.load(weights_only=True)`. A re-run with the same params and the same dynamics model (a
fingerprint of both is stored) resumes at that iteration; anything else starts fresh and says
why. The resumed run replays the pool refreshes, so it trains on the same tracks, but its cars
restart and their random stream continues from the saved state: the result is a valid run, not
bit-identical to an uninterrupted one. The file is removed once the policy is written.
A non-finite PPO loss (or weights) stops training with a TrainError naming the iteration; the
last good state stays in resume.pt.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3 import __version__
from s3.dynamics.base import DynamicsModel
from s3.io import atomic_path, json_safe, write_json_atomic
from s3.platform.tracking import Run
from s3.rl.env import DistilledEnv, resolve_device
from s3.rl.export import as_callable, deployable, save_policy
from s3.rl.params import SELECTION_ONLY, TrainParams
from s3.rl.ppo import CURVE_WRITER, Curve, chunk_curve, learn_chunk, make_runner, quiet
from s3.rl.rollout import EpisodeBatch, drive_lap, run_episodes
from s3.rl.tracks import VALIDATION_SEED_BASE, TrackPool, start_grid, validation_tracks
from s3.tracks.road_course import road_course

RESUME_FORMAT = "s3-train-resume-2"  # 2: the chunks' checkpoints, validated at the end


class TrainError(RuntimeError):
    """The train stage cannot run (e.g. no distilled model); one line naming the file."""


class NonFiniteUpdate(RuntimeError):
    """A PPO update produced a non-finite loss or weights (raised from inside rsl_rl's learn)."""

    def __init__(self, iteration: int, what: str) -> None:
        super().__init__(f"non-finite PPO {what} at iteration {iteration}")
        self.iteration, self.what = iteration, what


def _guard_updates(runner: Any, first_iteration: int) -> None:
    """Make every PPO update check its losses and the new weights; stop at the first non-finite one."""
    update = runner.alg.update
    count = {"n": 0}

    def checked() -> dict[str, Any]:
        losses = update()
        it = first_iteration + count["n"]
        count["n"] += 1
        bad = sorted(k for k, v in losses.items() if v is not None and not math.isfinite(float(v)))
        if bad:
            raise NonFiniteUpdate(it, f"loss ({', '.join(bad)})")
        for name in ("actor", "critic"):
            if not all(bool(torch.isfinite(p).all()) for p in getattr(runner.alg, name).parameters()):
                raise NonFiniteUpdate(it, f"loss ({name} weights became non-finite)")
        return losses

    runner.alg.update = checked


def resume_fingerprint(params: TrainParams, family: str, model: DynamicsModel, validation_seed: int | None = None) -> str:
    """What a resumed run must share with the killed one: params, family, validation tracks, dynamics model, s3 version."""
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


def _save_resume(path: Path, state: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_resume(path: Path, fingerprint: str, device: torch.device, say: Callable[[str], None]) -> dict[str, Any] | None:
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


def validate(actor: torch.nn.Module, model: DynamicsModel, tracks: list, params: TrainParams, device: torch.device) -> dict[str, Any]:
    """Deterministic episodes of `actor` on the validation tracks; the summary and the score."""
    return validate_checkpoints(actor, [actor.state_dict()], model, tracks, params, device)[0]


def validate_checkpoints(actor: torch.nn.Module, states: list[dict[str, torch.Tensor]], model: DynamicsModel, tracks: list,
                         params: TrainParams, device: torch.device) -> list[dict[str, Any]]:  # fmt: skip
    """Each actor state in `states` driven on the validation tracks: one summary with its score per state.

    All checkpoints drive in one env (`drive_checkpoints`): a 64-car env step is almost all
    per-step overhead, so 13 checkpoints at once cost about what 2-3 cost one by one.
    """
    out = drive_checkpoints(actor, states, model, tracks, params, device)
    m = len(out.completed) // len(states)  # runs per checkpoint
    summaries = []
    for j in range(len(states)):
        summary = out.part(slice(j * m, (j + 1) * m)).summary()
        summary["score"] = summary["mean_completion"]
        summaries.append(summary)
    return summaries


def drive_checkpoints(actor: torch.nn.Module, states: list[dict[str, torch.Tensor]], model: DynamicsModel, tracks: list,
                      params: TrainParams, device: torch.device) -> EpisodeBatch:  # fmt: skip
    """The validation episodes of every state (loaded into `actor`, left holding the last), k * m cars:
    checkpoint j drives rows j*m .. (j+1)*m - 1, from the same start grid.

    A car's episode does not depend on which checkpoints share the batch: the env runs eager (the
    transformer families always ran their <= 64 validation cars eager, below one compiled chunk,
    and compiled chunks round differently), so a checkpoint scores the same bit for bit alone or
    with others (tests/test_train.py).
    """
    ti, s = start_grid(tracks, params.tracks.validation_starts)
    m, k = len(ti), len(states)
    recurrent = bool(getattr(actor, "is_recurrent", False))
    policies = []
    for state in states:  # deployable() copies the weights
        actor.load_state_dict(state)
        policies.append(as_callable(deployable(actor, params.env.steer_full_speed).to(device), recurrent))

    def policy(obs: torch.Tensor) -> torch.Tensor:  # obs [k * m, D]
        return torch.cat([p(obs[j * m : (j + 1) * m]) for j, p in enumerate(policies)])

    max_seconds = np.tile(np.array([tracks[i].length for i in ti]) / params.validation_min_speed, k)
    compiled = model.inference_compile
    try:
        return run_episodes(
            policy, model, tracks, np.tile(ti, k), np.tile(s, k), params.env.model_copy(update={"compile_model": False}), max_seconds=max_seconds, device=device
        )
    finally:
        model.inference_compile = compiled  # the model is shared with the training env


def kept_index(scores: list[float], tolerance: float) -> int:
    """The checkpoint to keep: the latest whose validation score is within `tolerance` of the best.

    Why not simply the best: on 64 validation runs one checkpoint's score has a standard error of
    about 0.04 (measured), so a gap under ~0.1 between two checkpoints is noise, while later
    checkpoints were faster on held-out source tracks, with as many laps overall (README "Pace").
    The tolerance makes validation a guard against a real collapse rather than a pick among noise.
    Applied after every chunk it keeps the same checkpoint as applied once at the end.
    """
    top = max(scores)
    return max(i for i, s in enumerate(scores) if s >= top - tolerance)


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 (hex), or None if it does not exist (how policy.json names its dynamics model)."""
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _clone_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


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
) -> tuple[dict[str, Any], Curve]:
    """`train_policy`, returning (summary, learning curve): the curve is rsl_rl's scalars of every
    PPO iteration (s3.rl.ppo.Curve), for a caller that logs it elsewhere (s3.rl.seeds)."""
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
        return _train(model, env, pool, val_tracks, validation_seed, folder, plot_path, params, family, run, model_folder, device, t_start, say)
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
) -> tuple[dict[str, Any], Curve]:
    """The body of train_policy_curve."""
    if run is not None:
        run.log_params({"family": family, "train": params.model_dump(mode="json")})
    curve: Curve = []

    steps_per_it = env.num_envs * params.ppo.num_steps_per_env
    max_it = max(1, math.ceil(params.max_env_steps / steps_per_it))
    checkpoints: list[dict[str, Any]] = []  # one per chunk: iteration, env_steps, wall_s, actor, critic
    resume_file = resume_path(folder)
    fingerprint = resume_fingerprint(params, family, model, validation_seed)
    saved = load_resume(resume_file, fingerprint, device, say)
    with tempfile.TemporaryDirectory(prefix="s3-rsl-") as log_dir:
        runner = make_runner(env, params.ppo, device, log_dir=log_dir, logger=CURVE_WRITER)
        done_it, t_ppo, refreshes = 0, 0.0, 0
        resumed_from: int | None = None
        if saved is not None:
            done_it, t_ppo, refreshes, checkpoints = _restore(saved, runner, env, pool)
            resumed_from = done_it
            t_start -= float(saved["wall_s"])  # max_minutes and the reported wall time span both runs
            if run is not None:
                run.log_metrics({"train/resumed_from_iteration": done_it}, step=max(done_it - 1, 0))
            say(f"train {family}: resuming from {resume_file} at iteration {done_it}/{max_it}")
        _guard_updates(runner, done_it)
        stopped_by = "max_env_steps"
        while done_it < max_it:
            n_it = min(params.chunk_iterations, max_it - done_it)
            t0 = time.perf_counter()
            try:
                with quiet():
                    chunk = learn_chunk(runner, n_it)
            except NonFiniteUpdate as e:
                if run is not None:  # the learning curve up to the failure
                    run.log_curve(chunk_curve(runner), prefix="train/")
                kept = f"kept the last good state in {resume_file} (iteration {done_it})" if resume_file.exists() else "no good state had been saved yet"
                raise TrainError(f"{folder}: {e}; training stopped, {kept}") from None
            t_ppo += time.perf_counter() - t0
            done_it += n_it
            checkpoints.append({"iteration": done_it - 1, "env_steps": done_it * steps_per_it, "wall_s": round(time.perf_counter() - t_start, 2),
                                "actor": _clone_state(runner.alg.get_policy()), "critic": _clone_state(runner.alg.critic)})  # fmt: skip
            curve += chunk
            rewards = [v for t, _, v in curve if t == "Train/mean_reward"]
            if run is not None:
                run.log_curve(chunk, prefix="train/")
                run.log_metrics({"train/env_steps": done_it * steps_per_it, "train/invalid_model_steps": env.invalid_model_steps}, step=done_it - 1)
            say(
                f"train {family}: it {done_it}/{max_it}  {done_it * steps_per_it / 1e6:.2f} M steps  reward {rewards[-1] if rewards else float('nan'):.2f}  {time.perf_counter() - t_start:.0f} s"
            )
            if done_it < max_it and time.perf_counter() - t_start >= 60.0 * params.max_minutes:
                stopped_by = "max_minutes"  # the result now depends on how fast the machine was
                break
            if done_it < max_it and params.tracks.refresh_fraction > 0:
                changed = pool.refresh()
                refreshes += 1
                restarted = env.set_tracks(pool.tracks, changed)  # cars on replaced tracks restart
                with torch.inference_mode():  # the recurrent states were made in rsl_rl's rollout
                    runner.alg.actor.reset(restarted)
                    runner.alg.critic.reset(restarted)
                    runner.logger.cur_reward_sum[restarted] = 0.0
                    runner.logger.cur_episode_length[restarted] = 0.0
            wall_s = time.perf_counter() - t_start
            _save_resume(resume_file, _resume_state(fingerprint, runner, env, done_it, t_ppo, wall_s, refreshes, checkpoints))
        actor, critic = runner.alg.get_policy(), runner.alg.critic
        t_val = time.perf_counter()
        history = [
            {**summary, **{key: c[key] for key in ("iteration", "env_steps", "wall_s")}}
            for c, summary in zip(checkpoints, validate_checkpoints(actor, [c["actor"] for c in checkpoints], model, val_tracks, params, device))
        ]
        t_val = time.perf_counter() - t_val
        if run is not None:
            for h in history:
                run.log_metrics(
                    {"val/score": h["score"], "val/completion_rate": h["completion_rate"], "val/mean_lap_time_s": h["mean_lap_time_s"]}, h["iteration"]
                )
        kept = kept_index([h["score"] for h in history], params.validation_tolerance)
        best = {"score": history[kept]["score"], "iteration": history[kept]["iteration"], "env_steps": history[kept]["env_steps"], "summary": history[kept]}
        actor.load_state_dict(checkpoints[kept]["actor"])
        critic.load_state_dict(checkpoints[kept]["critic"])
        actor.eval()
        say(f"train {family}: validated {len(history)} checkpoints in {t_val:.0f} s: " + " ".join(f"{h['score']:.2f}" for h in history))

        # road course, nominal: information only (never used for selection)
        road: dict[str, Any] = {"completed": None, "lap_time_s": None, "completion": None, "reason": "not run", "length_m": None}
        if params.road_course_check:
            policy = as_callable(deployable(actor, params.env.steer_full_speed).to(device), bool(getattr(actor, "is_recurrent", False)))
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
                "folder": str(model_folder) if model_folder else None,
                "sha256": file_sha256(model_folder / "model.safetensors") if model_folder else None,
                "use_mu": model.use_mu,
                "history": model.history,
            },
            "obs": env.layout.to_json(),
            "policy": {
                "type": params.ppo.policy,
                "recurrent": params.ppo.policy == "gru",
                "num_actions": env.num_actions,
                "actor_cfg": runner.cfg["actor"],
                "critic_cfg": runner.cfg["critic"],
            },
            "validation": {
                "score": best["score"],
                "score_definition": "mean share of a lap driven on held-out procedural tracks before failing or running out of time",
                "selection": f"the latest checkpoint scoring within {params.validation_tolerance} of the best ({max(h['score'] for h in history):.4f})",
                "iteration": best["iteration"],
                "env_steps": best["env_steps"],
                "track_seeds": [VALIDATION_SEED_BASE + validation_seed * 1000 + i for i in range(params.tracks.validation_tracks)],
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
        resume_file.unlink(missing_ok=True)  # the policy is written: nothing left to resume
        try:
            resume_file.parent.rmdir()
        except OSError:  # other policies still have theirs
            pass

    if plot_path is not None:
        from s3.viz.train_plots import plot_learning_curve

        plot_learning_curve(plot_path, curve, history, steps_per_it, f"{family}: PPO in the distilled environment", best["env_steps"])
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
    return {k: meta[k] for k in ("family", "validation", "road_course_nominal", "train", "mlflow_run_id")}, curve


def _resume_state(fingerprint: str, runner: Any, env: DistilledEnv, done_it: int, t_ppo: float, wall_s: float,
                  refreshes: int, checkpoints: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """Everything a killed run needs to go on: tensors and plain types only (weights_only-loadable)."""
    return {
        "format": RESUME_FORMAT,
        "fingerprint": fingerprint,
        "done_it": done_it,
        "t_ppo": t_ppo,
        "wall_s": wall_s,
        "refreshes": refreshes,
        "current_learning_iteration": int(runner.current_learning_iteration),
        "runner": runner.alg.save(),
        "checkpoints": checkpoints,
        "torch_rng": torch.get_rng_state(),
        "env_rng": env.generator.get_state(),
        "env_counts": {"invalid": int(env.invalid_count), "episodes": int(env.episode_count)},
    }


def _restore(state: dict[str, Any], runner: Any, env: DistilledEnv, pool: TrackPool) -> tuple[int, float, int, list[dict[str, Any]]]:
    """Put a saved runner state back: weights, optimizer, iteration, track pool, RNG, counters, the chunks' checkpoints."""
    runner.alg.load(state["runner"], None, strict=True)
    runner.current_learning_iteration = int(state["current_learning_iteration"])
    for _ in range(int(state["refreshes"])):  # the pool is a pure function of its seed and refresh count
        pool.refresh()
    torch.set_rng_state(state["torch_rng"].cpu())
    env.generator.set_state(state["env_rng"].cpu())  # generator states are CPU byte tensors, whatever the device
    env.set_tracks(pool.tracks)  # every car restarts on the pool as it was at the save
    with torch.inference_mode():  # the env's counters are inference tensors once it has stepped
        env.invalid_count.fill_(int(state["env_counts"]["invalid"]))
        env.episode_count.fill_(int(state["env_counts"]["episodes"]))
    return int(state["done_it"]), float(state["t_ppo"]), int(state["refreshes"]), list(state["checkpoints"])


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
    summary = train_policy(model, Path(out_dir) / family, Path(plots_dir) / f"{family}.png", params, family, run, model_folder)
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
