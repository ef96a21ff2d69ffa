"""One PPO training loop for distilled and direct PPO, over rsl_rl's public steps.

    trainer = PPOTrainer(env, ppo_params, device)   # rsl_rl's PPO on an s3 VecEnv
    result = train_loop(trainer, budget, choice, hooks)

An iteration is rsl_rl's: `num_steps_per_env` times (act, env step, process the step) under
torch.inference_mode, then compute the returns and update. The update's losses and the new
weights are checked; the first non-finite one raises `NonFiniteUpdate` (nothing in rsl_rl is
patched). The learning curve is the scalars rsl_rl's own logger reports, under its tags
("Train/mean_reward" over the last 100 finished episodes, "Train/mean_episode_length",
"Loss/<name>", "Loss/learning_rate", "Policy/mean_std", "Perf/total_fps", and the env's
extras["log"] means: "Env/...", "reward/<term>"), one value per iteration. Given the same seeds,
the weights are those of rsl_rl's `OnPolicyRunner.learn` bit for bit: the same operations draw
the same random numbers.

Each iteration feeds its env steps to the stage's progress (s3.progress.advance, unit ENV_STEPS), in
this process or, from a seed's worker, in the stage's process.

Iterations run in chunks; between two chunks the caller may change the env (a track-pool refresh:
`trainer.restart(ids)` forgets the episodes of the cars it restarted). Two small strategies make
a training run what it is:
- a `Budget` sizes each chunk and says when to stop: `StepBudget` (a number of env steps, with a
  wall-clock safety cap: the distilled runs and `direct`) or `WallClockBudget` (seconds: `direct` with a fixed
  `train.direct.budget_s`);
- a `CheckpointChoice` sees each chunk's end and picks the checkpoint to keep (s3.rl.train,
  s3.rl.direct: validation in the model at the end, or in the source after each chunk).
s3.rl.runner sets a run up around this loop, chooses its checkpoint and exports it.
"""

from __future__ import annotations

import collections
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from rsl_rl.utils import check_nan

from s3.progress import advance
from s3.rl.params import PPOParams
from s3.rl.ppo import Curve, make_runner

State = dict[str, torch.Tensor]
ENV_STEPS = "env steps"  # the unit each iteration feeds to the progress listening (s3.progress)


class NonFiniteUpdate(RuntimeError):
    """A PPO update produced a non-finite loss or weights; `curve`: the learning curve of the
    iterations of that `iterate` call that came before it."""

    def __init__(self, iteration: int, what: str) -> None:
        super().__init__(f"non-finite PPO {what} at iteration {iteration}")
        self.iteration, self.what = iteration, what
        self.curve: Curve = []


class PPOTrainer:
    """rsl_rl's PPO on `env` (built by its OnPolicyRunner, which is not otherwise used)."""

    def __init__(self, env: Any, ppo: PPOParams, device: str | torch.device) -> None:
        runner = make_runner(env, ppo, device)
        self.alg, self.cfg = runner.alg, runner.cfg  # cfg["actor"], cfg["critic"]: the models' configs
        self.env, self.device, self.ppo = env, torch.device(device), ppo
        self.steps_per_env = int(ppo.num_steps_per_env)
        self.iteration = 0  # the next iteration's index
        self.seconds = 0.0  # spent in `iterate`
        n = env.num_envs
        self._return, self._length = torch.zeros(n, device=self.device), torch.zeros(n, device=self.device)
        self._returns: collections.deque[float] = collections.deque(maxlen=100)
        self._lengths: collections.deque[float] = collections.deque(maxlen=100)

    @property
    def actor(self) -> torch.nn.Module:
        return self.alg.get_policy()

    @property
    def steps_per_iteration(self) -> int:
        return self.env.num_envs * self.steps_per_env

    def iterate(self, n: int) -> Curve:
        """n PPO iterations; their learning curve."""
        curve: Curve = []
        obs = self.env.get_observations().to(self.device)
        self.alg.train_mode()
        for _ in range(n):
            t0 = time.perf_counter()
            logs: dict[str, list[torch.Tensor]] = collections.defaultdict(
                list
            )  # kept on the env's device until the iteration ends
            with torch.inference_mode():
                for _ in range(self.steps_per_env):
                    actions = self.alg.act(obs)
                    obs, rewards, dones, extras = self.env.step(actions.to(self.env.device))
                    check_nan(obs, rewards, dones)
                    obs, rewards, dones = obs.to(self.device), rewards.to(self.device), dones.to(self.device)
                    self.alg.process_env_step(obs, rewards, dones, extras)
                    self._book(rewards, dones, extras.get("log", {}), logs)
                t_collect = time.perf_counter() - t0
                self.alg.compute_returns(obs)
            losses = self.alg.update()
            try:
                self._check(losses)
            except NonFiniteUpdate as e:
                e.curve = curve
                raise
            t_total = time.perf_counter() - t0
            self.seconds += t_total
            it = self.iteration
            points = {f"Loss/{k}": float(v) for k, v in losses.items() if v is not None}
            points["Loss/learning_rate"] = float(self.alg.learning_rate)
            points["Policy/mean_std"] = float(self.actor.output_std.detach().mean())
            points["Perf/total_fps"] = self.steps_per_iteration / max(t_total, 1e-9)
            points["Perf/collection_time"], points["Perf/learning_time"] = t_collect, t_total - t_collect
            points.update(
                {k: statistics.fmean(torch.cat(v).tolist()) for k, v in logs.items()}
            )  # one host sync per key and iteration
            if self._returns:
                points["Train/mean_reward"] = statistics.fmean(self._returns)
                points["Train/mean_episode_length"] = statistics.fmean(self._lengths)
            curve += [(tag, it, value) for tag, value in points.items()]
            self.iteration += 1
            advance(self.steps_per_iteration, ENV_STEPS)  # to the stage's progress (s3.progress), if one listens
        return curve

    def _book(
        self, rewards: torch.Tensor, dones: torch.Tensor, log: dict[str, Any], logs: dict[str, list[torch.Tensor]]
    ) -> None:
        """Episode returns and lengths (rsl_rl's bookkeeping), and the env's per-step log values."""
        for key, value in log.items():
            logs[key if "/" in key else f"Episode/{key}"].append(
                torch.as_tensor(value, dtype=torch.float32).reshape(-1)
            )
        self._return += rewards
        self._length += 1
        ended = dones > 0
        if bool(ended.any()):
            self._returns.extend(self._return[ended].tolist())
            self._lengths.extend(self._length[ended].tolist())
            self._return[ended] = 0.0
            self._length[ended] = 0.0

    def _check(self, losses: dict[str, Any]) -> None:
        bad = sorted(k for k, v in losses.items() if v is not None and not math.isfinite(float(v)))
        if bad:
            raise NonFiniteUpdate(self.iteration, f"loss ({', '.join(bad)})")
        for name in ("actor", "critic"):  # the weights and the buffers (the observation normalizer's mean and variance)
            module = getattr(self.alg, name)
            if not all(
                bool(torch.isfinite(p).all())
                for p in (*module.parameters(), *module.buffers())
                if p.is_floating_point()
            ):
                raise NonFiniteUpdate(self.iteration, f"loss ({name} weights or normalizer became non-finite)")

    @torch.inference_mode()
    def restart(self, ids: torch.Tensor) -> None:
        """Cars `ids` began new episodes outside a step (e.g. on replaced tracks)."""
        self.alg.actor.reset(ids)
        self.alg.critic.reset(ids)
        self._return[ids] = 0.0
        self._length[ids] = 0.0

    def snapshot(self) -> dict[str, State]:
        """Copies of the actor's and the critic's weights."""
        clone = lambda m: {k: v.detach().clone() for k, v in m.state_dict().items()}
        return {"actor": clone(self.actor), "critic": clone(self.alg.critic)}

    def load(self, snapshot: dict[str, State]) -> None:
        self.actor.load_state_dict(snapshot["actor"])
        self.alg.critic.load_state_dict(snapshot["critic"])

    def state(self) -> dict[str, Any]:
        """Everything to go on later (weights, optimizer, iteration): tensors and plain types only."""
        return {"alg": self.alg.save(), "iteration": self.iteration}

    def restore(self, state: dict[str, Any]) -> None:
        self.alg.load(state["alg"], None, strict=True)
        self.iteration = int(state["iteration"])


# ---------------------------------------------------------------------------- budgets
class Budget(Protocol):
    stopped_by: str

    def next_chunk(self, done: int) -> int:
        """Iterations for the next chunk after `done` (0: stop)."""
        ...

    def ran(self, n: int, seconds: float) -> None:
        """A chunk of n iterations took `seconds`."""
        ...

    def more(self, done: int) -> bool:
        """Whether training goes on after `done` iterations (worth a refresh between chunks)."""
        ...

    def saw(self, report: dict[str, Any]) -> None:
        """What the checkpoint choice reported of the chunk just ended (its validation `score`, if any)."""
        ...


@dataclass
class StepBudget:
    """`max_iterations`, `chunk` at a time. It stops early, saying why in `stopped_by`, on a plateau
    (`plateau_chunks` > 0: that many validated chunks in a row without a score above the best so far
    + `plateau_delta`, and not before `plateau_min_iterations`) or at the wall-clock safety cap
    (`max_minutes`; the result then depends on how fast the machine was); otherwise at
    `max_env_steps`. A resumed run starts its plateau count afresh (the restored checkpoints carry
    no scores)."""

    max_iterations: int
    chunk: int
    max_seconds: float
    t_start: float = field(default_factory=time.perf_counter)
    stopped_by: str = "max_env_steps"
    plateau_chunks: int = 0
    plateau_delta: float = 0.0
    plateau_min_iterations: int = 0
    best: float | None = None
    since_best: int = 0

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def plateaued(self, done: int) -> bool:
        return 0 < self.plateau_chunks <= self.since_best and done >= self.plateau_min_iterations

    def next_chunk(self, done: int) -> int:
        if done >= self.max_iterations:
            return 0
        if self.plateaued(done):
            self.stopped_by = "plateau"
            return 0
        if done > 0 and time.perf_counter() - self.t_start >= self.max_seconds:
            self.stopped_by = "max_minutes"
            return 0
        return min(self.chunk, self.max_iterations - done)

    def ran(self, n: int, seconds: float) -> None:
        pass

    def more(self, done: int) -> bool:
        clock = time.perf_counter() - self.t_start < self.max_seconds
        return done < self.max_iterations and clock and not self.plateaued(done)

    def saw(self, report: dict[str, Any]) -> None:
        score = report.get("score")
        if not self.plateau_chunks or score is None:
            return
        if self.best is None or score > self.best + self.plateau_delta:
            self.best, self.since_best = float(score), 0
        else:
            self.since_best += 1


@dataclass
class WallClockBudget:
    """Seconds from `t_start`: the first chunk is one measuring iteration, each later one as many
    iterations (at most `chunk`) as fit in what is left, less `reserve_s` for the end and, when
    `validate`, the slowest validation so far (`validated`) or its estimate (`guess_validation`)."""

    budget_s: float
    chunk: int
    reserve_s: float
    validate: bool
    t_start: float = field(default_factory=time.perf_counter)
    stopped_by: str = "budget_s"
    it_s: float | None = None
    val_s: float = 0.0
    val_measured: bool = False

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def left(self) -> float:
        return self.budget_s - self.elapsed - self.reserve_s

    def next_chunk(self, done: int) -> int:
        if done == 0 or self.it_s is None:
            return 1
        room = self.left() - (self.val_s if self.validate else 0.0)
        return max(0, min(self.chunk, int(room // self.it_s)))

    def ran(self, n: int, seconds: float) -> None:
        self.it_s = seconds / n if self.it_s is None else 0.5 * self.it_s + 0.5 * seconds / n

    def more(self, done: int) -> bool:
        return self.left() > 0

    def saw(self, report: dict[str, Any]) -> None:
        pass

    def guess_validation(self, car_steps: float, car_steps_per_it: int) -> None:
        """Before the first validation: its worst case at the training's car-step rate."""
        if not self.val_measured and self.it_s:
            self.val_s = car_steps * self.it_s / car_steps_per_it

    def validated(self, seconds: float) -> None:
        self.val_s = max(self.val_s, seconds) if self.val_measured else seconds
        self.val_measured = True


# ---------------------------------------------------------------------------- checkpoint choice
class CheckpointChoice(Protocol):
    def after_chunk(self, trainer: PPOTrainer, done: int) -> dict[str, Any]:
        """A chunk ended after `done` iterations: note its checkpoint; returns what to report of it."""
        ...

    def choose(self, trainer: PPOTrainer) -> dict[str, Any]:
        """Load the checkpoint to keep into the trainer; returns its description (score, iteration, ...)."""
        ...


# ---------------------------------------------------------------------------- the loop
@dataclass
class Hooks:
    """What the caller does around each chunk (all optional)."""

    on_chunk: Callable[[int, Curve, dict[str, Any]], None] | None = (
        None  # done, the chunk's curve, its checkpoint report
    )
    between: Callable[[], None] | None = None  # change the env before the next chunk (refresh the track pool)
    after: Callable[[int], None] | None = None  # the chunk is complete (save a resume file)


@dataclass
class LoopResult:
    iterations: int
    curve: Curve
    ppo_s: float
    stopped_by: str


def train_loop(
    trainer: PPOTrainer, budget: Budget, choice: CheckpointChoice, hooks: Hooks | None = None, done: int = 0
) -> LoopResult:
    """Chunks of PPO iterations until the budget says stop (from `done` iterations, for a resumed run)."""
    hooks = hooks or Hooks()
    advance(done * trainer.steps_per_iteration, ENV_STEPS, earlier=True)  # a resumed run's: not in the rate
    curve: Curve = []
    ppo_s = 0.0
    while (n := budget.next_chunk(done)) > 0:
        t0 = time.perf_counter()
        chunk = trainer.iterate(n)
        seconds = time.perf_counter() - t0
        budget.ran(n, seconds)
        ppo_s += seconds
        done += n
        curve += chunk
        report = choice.after_chunk(trainer, done)
        budget.saw(report)
        if hooks.on_chunk is not None:
            hooks.on_chunk(done, chunk, report)
        if hooks.between is not None and budget.more(done):
            hooks.between()
        if hooks.after is not None:
            hooks.after(done)
    return LoopResult(done, curve, ppo_s, budget.stopped_by)
