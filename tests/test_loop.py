"""s3.rl.loop: one PPO loop over rsl_rl's public steps, the budgets, the checkpoint hooks."""

from __future__ import annotations

import pytest
import torch

from s3.rl.env import DistilledEnv
from s3.rl.loop import Hooks, NonFiniteUpdate, PPOTrainer, StepBudget, WallClockBudget, train_loop
from s3.rl.params import PPOParams
from s3.rl.ppo import make_runner, quiet
from s3.task.params import EnvParams
from s3.tracks.generate import procedural_track

PPO = PPOParams(actor_hidden=[32, 32], critic_hidden=[32], num_steps_per_env=8, learning_epochs=2, mini_batches=2)


def _env(bicycle) -> DistilledEnv:
    return DistilledEnv(bicycle, [procedural_track(0), procedural_track(1)], EnvParams(num_envs=32), seed=0)


def test_the_loop_trains_the_weights_rsl_rl_learn_trains(bicycle) -> None:
    """Same seeds: PPOTrainer.iterate and OnPolicyRunner.learn give the same weights, bit for bit."""
    torch.manual_seed(0)
    runner = make_runner(_env(bicycle), PPO, "cpu")
    with quiet():
        runner.learn(3)
    torch.manual_seed(0)
    trainer = PPOTrainer(_env(bicycle), PPO, "cpu")
    curve = trainer.iterate(3)
    for (k, a), (_, b) in zip(runner.alg.get_policy().state_dict().items(), trainer.actor.state_dict().items()):
        assert torch.equal(a, b), k
    tags = {t for t, _, _ in curve}
    assert {"Loss/value", "Loss/learning_rate", "Policy/mean_std", "Env/speed", "reward/progress"} <= tags
    assert sorted({i for _, i, _ in curve}) == [0, 1, 2] and trainer.iteration == 3


def test_a_non_finite_update_stops_with_the_curve_so_far(bicycle, monkeypatch) -> None:
    trainer = PPOTrainer(_env(bicycle), PPO, "cpu")
    trainer.iterate(1)
    real = trainer.alg.update
    calls = {"n": 0}

    def poisoned():
        calls["n"] += 1
        losses = real()
        return {**losses, "value": float("nan")} if calls["n"] == 2 else losses

    monkeypatch.setattr(trainer.alg, "update", poisoned)
    with pytest.raises(NonFiniteUpdate, match="iteration 2") as e:
        trainer.iterate(3)
    assert e.value.what == "loss (value)" and {i for _, i, _ in e.value.curve} == {1}


class _Keep:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def after_chunk(self, trainer, done):
        self.seen.append(done)
        return {"done": done}

    def choose(self, trainer):
        return {"iteration": self.seen[-1] - 1}


def test_a_step_budget_runs_its_chunks_and_refreshes_only_between_them(bicycle) -> None:
    trainer, choice, calls = PPOTrainer(_env(bicycle), PPO, "cpu"), _Keep(), []
    hooks = Hooks(
        on_chunk=lambda d, c, r: calls.append(("chunk", d, r["done"])),
        between=lambda: calls.append(("between",)),
        after=lambda d: calls.append(("after", d)),
    )
    out = train_loop(trainer, StepBudget(max_iterations=5, chunk=2, max_seconds=1e9), choice, hooks)
    assert out.iterations == 5 and choice.seen == [2, 4, 5] and out.stopped_by == "max_env_steps"
    assert calls == [
        ("chunk", 2, 2),
        ("between",),
        ("after", 2),
        ("chunk", 4, 4),
        ("between",),
        ("after", 4),
        ("chunk", 5, 5),
        ("after", 5),
    ]
    capped = StepBudget(max_iterations=5, chunk=2, max_seconds=0.0)
    assert (
        train_loop(PPOTrainer(_env(bicycle), PPO, "cpu"), capped, _Keep()).iterations == 2
        and capped.stopped_by == "max_minutes"
    )


def test_a_step_budget_ends_on_a_plateau_of_the_validation_score() -> None:
    b = StepBudget(max_iterations=100, chunk=10, max_seconds=1e9, plateau_chunks=2, plateau_delta=0.02)
    for done, score in ((10, 0.1), (20, 0.5), (30, 0.51), (40, 0.55)):  # 0.51: no gain; 0.55: a gain again
        b.saw({"score": score})
        assert b.next_chunk(done) == 10 and b.more(done)
    b.saw({})  # a chunk without a score (a choice that validates at the end) does not count
    for _ in range(2):  # chunks ending at 50 and 60 within 0.02 of the best
        b.saw({"score": 0.56})
    assert b.next_chunk(60) == 0 and not b.more(60) and b.stopped_by == "plateau"
    off = StepBudget(max_iterations=30, chunk=10, max_seconds=1e9)  # plateau_chunks 0: only the steps end it
    for done in (10, 20):
        off.saw({"score": 0.0})
        assert off.next_chunk(done) == 10
    assert off.next_chunk(30) == 0 and off.stopped_by == "max_env_steps"
    floor = StepBudget(100, 10, 1e9, plateau_chunks=2, plateau_delta=0.02, plateau_min_iterations=50)
    for done, score in ((10, 0.7), (20, 0.4), (30, 0.5), (40, 0.6)):  # an early best stands for 3 chunks
        floor.saw({"score": score})
        assert floor.next_chunk(done) == 10  # ... but the floor keeps the run going
    floor.saw({"score": 0.65})
    assert floor.next_chunk(50) == 0 and floor.stopped_by == "plateau"  # at the floor, the plateau counts


def test_a_wall_clock_budget_measures_then_fills_what_is_left() -> None:
    b = WallClockBudget(budget_s=100.0, chunk=10, reserve_s=5.0, validate=True)
    assert b.next_chunk(0) == 1
    b.ran(1, 4.0)  # 4 s per iteration
    b.t_start -= 49.0  # 49 s gone: just under 46 s left before the reserve
    b.validated(13.0)
    assert b.next_chunk(1) == 8  # (46 - 13) // 4
    b.t_start -= 46.5  # past the reserve: nothing more, not even a refresh
    assert b.next_chunk(9) == 0 and not b.more(9)
