"""One PPO runner for every place PPO runs: inside a distilled model (s3.rl.train) and inside the
source simulator (s3.rl.direct). A route differs only by its env, its budget, its checkpoint choice
and what it reports; the rest is here:

    say = prepare(tp)                                    # torch threads, seeds; the progress printer
    ppo = setup(name, env, pool, tp, ppo_params, device, run=..., say=..., t_start=..., log_params=...,
                resume=Resume(...) | None, chunk_checkpoints=folder | None)
    loop = ppo.loop(budget, choice, on_chunk)            # s3.rl.loop.train_loop, with the pool refresh
    best = ppo.choose(choice)                            # the kept checkpoint, loaded, actor in eval mode
    meta = ppo.export(folder, validation=..., train=..., history=..., params=...)   # s3.rl.export.write_policy

`setup` logs the run's params into MLflow (`run`, an s3.tracking.Run; None touches no
MLflow code), builds the trainer (s3.rl.loop.PPOTrainer), clears the per-chunk checkpoint folder
(`chunk_checkpoints`: every chunk's actor added as the run goes, s3.rl.checkpoints) and, given a
`Resume`, puts a killed run's state back (s3.rl.resume; distilled envs only). `loop` sends each
chunk's rsl_rl scalars to `run` (`train/<tag>`, step = iteration), calls the route's `on_chunk`,
refreshes the track pool between chunks (cars on replaced tracks restart) and, with a resume file,
saves the state after each chunk; a non-finite PPO update logs the curve so far and raises
TrainError naming the folder. `export` writes the policy (policy.json in its one schema,
s3.rl.export.policy_meta), the chunks' checkpoints it is given and drops the resume file.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.rl.checkpoints import add_checkpoint, clear, write_checkpoints
from s3.rl.export import policy_meta, write_policy
from s3.rl.loop import Budget, CheckpointChoice, Hooks, LoopResult, NonFiniteUpdate, PPOTrainer, train_loop
from s3.rl.params import PPOParams, TrainParams
from s3.rl.ppo import Curve
from s3.rl.resume import load_resume, restore, resume_state, save_resume
from s3.rl.tracks import TrackPool
from s3.tracking import Run

Say = Callable[[str], None]


class TrainError(RuntimeError):
    """A PPO run cannot go on (no distilled model, a non-finite update, ...); one line naming the file."""


def prepare(tp: TrainParams) -> Say:
    """Before the env is built: torch's threads and seed, numpy's seed; returns the progress printer
    (one line to stderr per call when `tp.progress_bar`, else silent)."""
    if tp.torch_threads:
        torch.set_num_threads(tp.torch_threads)
    torch.manual_seed(tp.seed)
    np.random.seed(tp.seed)
    return (lambda msg: print(msg, file=sys.stderr, flush=True)) if tp.progress_bar else (lambda msg: None)


@contextlib.contextmanager
def flushed(run: Run | None) -> Iterator[None]:
    """Flush `run` however the training ends: a worker process may end right after, its writes must be done."""
    try:
        yield
    finally:
        if run is not None:
            run.flush()


@dataclass
class Resume:
    """A run that keeps its state in `file` after every chunk (s3.rl.resume) and resumes a saved state of
    the same `fingerprint`; `iterations`: the run's total, for the progress line."""

    file: Path
    fingerprint: str
    iterations: int


@dataclass
class PPORun:
    """One PPO training run, set up by `setup`: its env, trainer and where it reports."""

    name: str
    env: Any  # an s3 VecEnv: DistilledEnv or SourceVecEnv
    pool: TrackPool
    params: TrainParams
    trainer: PPOTrainer
    run: Run | None
    say: Say
    t_start: float  # the run's clock: perf_counter at its start (a resumed run's includes the killed run's wall)
    folder: Path
    resume: Resume | None = None
    chunk_checkpoints: Path | None = None
    done: int = 0  # iterations done (a resumed run starts at the saved count)
    ppo_s: float = 0.0  # PPO seconds before this process (a resumed run's)
    refreshes: int = 0
    resumed_from: int | None = None
    restored_checkpoints: list[dict[str, Any]] = field(default_factory=list)
    curve: Curve = field(default_factory=list)  # rsl_rl's scalars of this process's iterations

    @property
    def steps_per_iteration(self) -> int:
        return self.trainer.steps_per_iteration

    @property
    def policy_spec(self) -> dict[str, Any]:
        """policy.json's "policy" (without "export"): what rebuilds the actor."""
        ppo = self.trainer.ppo
        return {
            "type": ppo.policy,
            "recurrent": ppo.policy == "gru",
            "num_actions": self.env.num_actions,
            "actor_cfg": self.trainer.cfg["actor"],
            "critic_cfg": self.trainer.cfg["critic"],
        }

    def _head(self) -> dict[str, Any]:
        """What loading a checkpoint needs (s3.rl.checkpoints)."""
        return {
            "obs": self.env.layout.to_json(),
            "policy": self.policy_spec,
            "params": {"env": self.params.env.model_dump(mode="json")},
        }

    def loop(
        self, budget: Budget, choice: CheckpointChoice, on_chunk: Callable[[int, Curve, dict[str, Any]], None]
    ) -> LoopResult:
        """PPO chunks until `budget` stops them (s3.rl.loop.train_loop); `on_chunk(done, chunk curve, the
        choice's report)` is the route's own reporting. With a resume file, `choice.checkpoints` are saved too."""
        head = self._head() if self.chunk_checkpoints is not None else None
        saved_at = [self.done]  # the iteration count of the last resume file written

        def chunk(done: int, curve: Curve, report: dict[str, Any]) -> None:
            self.curve.extend(curve)
            if self.run is not None:
                self.run.log_curve(curve, prefix="train/")
            on_chunk(done, curve, report)
            if head is not None:
                steps = done * self.steps_per_iteration
                add_checkpoint(self.chunk_checkpoints, self.trainer.actor.state_dict(), done - 1, steps, head)

        def refresh() -> None:
            if self.params.tracks.refresh_fraction > 0:
                changed = self.pool.refresh()
                self.refreshes += 1
                self.trainer.restart(self.env.set_tracks(self.pool.tracks, changed))  # cars on replaced tracks restart

        def save(done: int) -> None:
            saved_at[0] = done
            wall = time.perf_counter() - self.t_start
            t_ppo = self.ppo_s + self.trainer.seconds
            state = resume_state(
                self.resume.fingerprint, self.trainer, self.env, done, t_ppo, wall, self.refreshes, choice.checkpoints
            )
            save_resume(self.resume.file, state)

        try:
            result = train_loop(
                self.trainer,
                budget,
                choice,
                Hooks(chunk, refresh, None if self.resume is None else save),
                done=self.done,
            )
        except NonFiniteUpdate as e:
            if self.run is not None:  # the learning curve up to the failure
                self.run.log_curve(e.curve, prefix="train/")
            kept = ""
            if self.resume is not None:
                kept = (
                    f", kept the last good state in {self.resume.file} (iteration {saved_at[0]})"
                    if self.resume.file.exists()
                    else ", no good state had been saved yet"
                )
            raise TrainError(f"{self.folder}: {e}; training stopped{kept}") from None
        self.done, self.ppo_s = result.iterations, self.ppo_s + result.ppo_s
        return result

    def choose(self, choice: CheckpointChoice) -> dict[str, Any]:
        """The checkpoint `choice` keeps, loaded into the trainer (actor in eval mode); its description."""
        best = choice.choose(self.trainer)
        self.trainer.actor.eval()
        return best

    def export(
        self,
        *,
        validation: dict[str, Any],
        train: dict[str, Any],
        history: list[dict[str, Any]],
        params: dict[str, Any],
        dynamics_model: dict[str, Any] | None = None,
        source_simulator: dict[str, Any] | None = None,
        road_course_nominal: dict[str, Any] | None = None,
        checkpoints: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Write the kept policy to the run's folder (s3.rl.export.write_policy) and, when given, the chunks'
        `checkpoints` beside it (s3.rl.checkpoints.write_checkpoints); drop the resume file; returns the meta."""
        meta = policy_meta(
            family=self.name,
            dt=self.env.dt,
            obs=self.env.layout.to_json(),
            policy=self.policy_spec,
            dynamics_model=dynamics_model,
            source_simulator=source_simulator,
            validation=validation,
            road_course_nominal=road_course_nominal,
            train=train,
            history=history,
            params=params,
            mlflow_run_id=None if self.run is None else self.run.run_id,
        )
        write_policy(self.folder, self.trainer.actor, self.trainer.alg.critic, meta)
        if checkpoints is not None:
            write_checkpoints(self.folder, checkpoints, meta)
        if self.resume is not None:
            self.resume.file.unlink(missing_ok=True)  # the policy is written: nothing left to resume
            with contextlib.suppress(OSError):  # other policies still have theirs
                self.resume.file.parent.rmdir()
        return meta

    def plot(self, path: str | Path | None, validation: list[dict[str, Any]], title: str, best_env_steps: int) -> None:
        """The learning curve (s3.viz.train_plots) of this process's iterations, with the validation points,
        and those points as data beside it (`path` with .csv)."""
        if path is not None:
            from s3.viz.train_plots import plot_learning_curve, write_curve_csv

            plot_learning_curve(path, self.curve, validation, self.steps_per_iteration, title, best_env_steps)
            write_curve_csv(Path(path).with_suffix(".csv"), validation)


def setup(
    name: str,
    env: Any,
    pool: TrackPool,
    params: TrainParams,
    ppo: PPOParams,
    device: str | torch.device,
    *,
    folder: Path,
    run: Run | None,
    say: Say,
    t_start: float,
    log_params: dict[str, Any],
    resume: Resume | None = None,
    chunk_checkpoints: bool = False,
) -> PPORun:
    """Set up one PPO run of policy `name` in `env` (built on `pool`'s tracks), writing into `folder`:
    its params into `run`, the trainer, and, given `resume`, a killed run's state put back (the run's
    clock then includes its wall time); with `chunk_checkpoints`, <folder>/checkpoints/ starts empty and
    gains every chunk's actor."""
    if run is not None:
        run.log_params(log_params)
    trainer = PPOTrainer(env, ppo, device)
    out = PPORun(name, env, pool, params, trainer, run, say, t_start, Path(folder), resume)
    if resume is not None:
        saved = load_resume(resume.file, resume.fingerprint, trainer.device, say)
        if saved is not None:
            out.done, out.ppo_s, out.refreshes, out.restored_checkpoints = restore(saved, trainer, env, pool)
            out.resumed_from = out.done
            out.t_start -= float(saved["wall_s"])  # the budget's clock and the reported wall time span both runs
            if run is not None:
                run.log_metrics({"train/resumed_from_iteration": out.done}, step=max(out.done - 1, 0))
            say(f"train {name}: resuming from {resume.file} at iteration {out.done}/{resume.iterations}")
    if chunk_checkpoints:
        out.chunk_checkpoints = out.folder
        clear(out.folder)  # this run's chunk checkpoints only
    return out
