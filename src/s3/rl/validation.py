"""Choosing a distilled run's checkpoint: validation on held-out procedural tracks, in the model.

Every chunk's checkpoint drives the held-out *procedural* validation tracks (disjoint seeds, see
s3.rl.tracks; never an evaluation circuit), all in one batched run, and the latest checkpoint whose
score (mean share of a lap driven before leaving the road, turning around or running out of time
at `validation_min_speed`) is within `validation_tolerance` of the best is kept.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from s3.dynamics.base import DynamicsModel
from s3.rl.export import as_callable, deployable
from s3.rl.loop import PPOTrainer
from s3.rl.params import TrainParams
from s3.rl.rollout import EpisodeBatch, run_episodes
from s3.rl.tracks import dry_runs, start_grid


def validate(
    actor: torch.nn.Module, model: DynamicsModel, tracks: list, params: TrainParams, device: torch.device
) -> dict[str, Any]:
    """Deterministic episodes of `actor` on the validation tracks; the summary and the score."""
    return validate_checkpoints(actor, [actor.state_dict()], model, tracks, params, device)[0]


def validate_checkpoints(
    actor: torch.nn.Module,
    states: list[dict[str, torch.Tensor]],
    model: DynamicsModel,
    tracks: list,
    params: TrainParams,
    device: torch.device,
) -> list[dict[str, Any]]:
    """Each actor state in `states` driven on the validation tracks: one summary with its score per state.

    All checkpoints drive in one env (`drive_checkpoints`): a 64-car env step is almost all
    per-step overhead, so 13 checkpoints at once cost about what 2-3 cost one by one.
    """
    out = drive_checkpoints(actor, states, model, tracks, params, device)
    m = len(out.completed) // len(states)  # runs per checkpoint
    dry = dry_runs(tracks, start_grid(tracks, params.tracks.validation_starts)[0])
    summaries = []
    for j in range(len(states)):
        summary = out.part(slice(j * m, (j + 1) * m)).summary(dry)
        summary["score"] = summary["mean_completion"]
        summaries.append(summary)
    return summaries


def drive_checkpoints(
    actor: torch.nn.Module,
    states: list[dict[str, torch.Tensor]],
    model: DynamicsModel,
    tracks: list,
    params: TrainParams,
    device: torch.device,
) -> EpisodeBatch:
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
            policy,
            model,
            tracks,
            np.tile(ti, k),
            np.tile(s, k),
            params.env.model_copy(update={"compile_model": False}),
            max_seconds=max_seconds,
            device=device,
        )
    finally:
        model.inference_compile = compiled  # the model is shared with the training env


def kept_index(scores: list[float], tolerance: float) -> int:
    """The checkpoint to keep: the latest whose validation score is within `tolerance` of the best.

    0 keeps the best (the latest of equal scores), the distilled policies' rule: with the plateau end a
    run stops a few chunks after its best, and a tolerance of 0.1 kept the last one, which completed fewer
    laps in the source (docs/decisions/checkpoint-selection.md). `direct` validates on 16 noisy source
    runs and keeps a tolerance of 0.1 (params.yaml per_policy.direct), so that noise does not pick.
    Applied after every chunk it keeps the same checkpoint as applied once at the end.
    """
    top = max(scores)
    return max(i for i, s in enumerate(scores) if s >= top - tolerance)


class ValidateAtEnd:
    """The checkpoint choice of a distilled run (s3.rl.loop.CheckpointChoice): every chunk's
    checkpoint is kept; at the end all drive the held-out procedural validation tracks in one
    batched run, and the latest within `validation_tolerance` of the best is loaded (`kept_index`).
    With a plateau rule (`train.plateau_chunks` > 0) each checkpoint is validated as its chunk ends
    instead, and its score reported to the budget (s3.rl.loop.StepBudget); the choice is the same."""

    def __init__(
        self,
        model: DynamicsModel,
        tracks: list,
        params: TrainParams,
        device: torch.device,
        t_start: float,
        checkpoints: list | None = None,
    ) -> None:
        self.model, self.tracks, self.params, self.device, self.t_start = model, tracks, params, device, t_start
        self.checkpoints: list[dict[str, Any]] = list(checkpoints or [])  # iteration, env_steps, wall_s, actor, critic
        self.history: list[dict[str, Any]] = []
        self.scored: dict[int, dict[str, Any]] = {}  # checkpoint index -> its validation summary (eager)
        self.seconds = 0.0

    def after_chunk(self, trainer: PPOTrainer, done: int) -> dict[str, Any]:
        wall = round(time.perf_counter() - self.t_start, 2)
        self.checkpoints.append(
            {
                "iteration": done - 1,
                "env_steps": done * trainer.steps_per_iteration,
                "wall_s": wall,
                **trainer.snapshot(),
            }
        )
        if self.params.plateau_chunks <= 0:
            return {}
        t0 = time.perf_counter()
        last = len(self.checkpoints) - 1
        self.scored[last] = validate_checkpoints(
            trainer.actor, [self.checkpoints[last]["actor"]], self.model, self.tracks, self.params, self.device
        )[0]
        self.seconds += time.perf_counter() - t0
        return {"score": self.scored[last]["score"]}

    def choose(self, trainer: PPOTrainer) -> dict[str, Any]:
        t0 = time.perf_counter()
        todo = [i for i in range(len(self.checkpoints)) if i not in self.scored]  # all, unless validated eagerly
        states = [self.checkpoints[i]["actor"] for i in todo]
        if todo:
            found = validate_checkpoints(trainer.actor, states, self.model, self.tracks, self.params, self.device)
            self.scored.update(zip(todo, found))
        scores = [self.scored[i] for i in range(len(self.checkpoints))]
        self.history = [
            {**summary, **{k: c[k] for k in ("iteration", "env_steps", "wall_s")}}
            for c, summary in zip(self.checkpoints, scores)
        ]
        self.seconds += time.perf_counter() - t0
        kept = kept_index([h["score"] for h in self.history], self.params.validation_tolerance)
        trainer.load(self.checkpoints[kept])
        h = self.history[kept]
        return {"score": h["score"], "iteration": h["iteration"], "env_steps": h["env_steps"], "summary": h}
