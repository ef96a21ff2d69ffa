"""Validation in the source simulator: a policy's deterministic episodes on held-out procedural tracks.

    source_episodes(env, policy, obs, limit) -> EpisodeBatch     every car from `obs` to its lap, failure or limit
    validate_source(actor, env, tracks, params) -> summary        (summary["score"]: mean share of a lap driven)
    ValidateInSource(val, params, clock, steps_per_it, dt)       `direct`'s checkpoint choice (s3.rl.loop)

The envs are s3.rl.source_env.SourceVecEnv built without auto-reset on the validation tracks; an
episode ends at the lap, a failure, or its step limit (the lap length at `validation_min_speed`,
capped by `direct.validation_seconds` when set), the rules of s3.rl.rollout. Used by `direct`
(s3.rl.direct), the choice among seeds (s3.rl.source_selection) and the evaluation's source runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from s3.rl.export import as_callable, deployable
from s3.rl.loop import PPOTrainer, WallClockBudget
from s3.rl.rollout import EpisodeBatch, lap_loop
from s3.rl.source_env import SourceVecEnv
from s3.rl.tracks import dry_runs, start_grid
from s3.rl.validation import kept_index
from s3.tracks.track import Track

if TYPE_CHECKING:
    from s3.config import Params
    from s3.rl.params import TrainParams


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
    summary = source_episodes(env, policy, obs, torch.ceil(seconds / env.dt).long()).summary(dry_runs(tracks, ti))
    summary["score"] = summary["mean_completion"]
    return summary


@torch.inference_mode()
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
    """The checkpoint choice of `direct` (s3.rl.loop.CheckpointChoice): after each chunk, validate in the
    source simulator (with a wall-clock `clock`, only when what is left still holds a validation; None: always);
    at the end keep the latest
    checkpoint within `train.validation_tolerance` of the best (s3.rl.validation.kept_index, the
    distilled policies' rule); with no validation, the last checkpoint."""

    def __init__(
        self,
        val: tuple[SourceVecEnv, list[Track]] | None,
        params: Params,
        clock: WallClockBudget | None,
        steps_per_it: int,
        dt: float,
    ) -> None:
        self.val, self.params, self.clock, self.steps_per_it = val, params, clock, steps_per_it
        self.car_steps = _validation_car_steps(val[1], params, dt) if val is not None else 0.0
        self.validated: list[dict[str, Any]] = []  # score, iteration, env_steps, summary, actor, critic
        self.last: dict[str, Any] = {}

    def after_chunk(self, trainer: PPOTrainer, done: int) -> dict[str, Any]:
        point: dict[str, Any] = {}
        self.last = {"iteration": done - 1, "env_steps": done * self.steps_per_it}
        if self.val is None:
            return point
        if self.clock is not None:
            self.clock.guess_validation(self.car_steps, self.steps_per_it)
        if self.clock is None or self.clock.left() >= self.clock.val_s:
            t0 = time.perf_counter()
            res = validate_source(trainer.actor, self.val[0], self.val[1], self.params.train)
            if self.clock is not None:
                self.clock.validated(time.perf_counter() - t0)
            point = {"score": res["score"], "completion_rate": res["completion_rate"]}  # the plateau rule reads score
            self.validated.append({"score": res["score"], **self.last, "summary": res, **trainer.snapshot()})
        return point

    def choose(self, trainer: PPOTrainer) -> dict[str, Any]:
        if not self.validated:  # no validation: the last checkpoint
            return {"score": None, **self.last, "summary": {}}
        kept = self.validated[kept_index([v["score"] for v in self.validated], self.params.train.validation_tolerance)]
        trainer.load(kept)
        return kept


def _validation_car_steps(tracks: Sequence[Track], params: Params, dt: float) -> float:
    """Most car steps one validation can take (every car drives until its clock runs out)."""
    tp = params.train
    cap = math.inf if tp.direct.validation_seconds is None else tp.direct.validation_seconds
    per_start = [math.ceil(min(t.length / tp.validation_min_speed, cap) / dt) for t in tracks]
    return float(sum(per_start) * tp.tracks.validation_starts)
