"""rsl_rl 5.x glue: the runner configuration, a quiet runner, the learning curve, and rebuilding a saved actor.

The 5.x config format: top-level num_steps_per_env / save_interval / obs_groups, an `algorithm`
section (class_name PPO), `actor` and `critic` sections (rsl_rl.models MLPModel or RNNModel with
rnn_type "gru"; the actor carries a GaussianDistribution), and an optional `logger` section
(`CURVE_WRITER`: the scalars stay in memory, and whoever trains logs them). The environment has a
single observation group, "policy", used by both.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

import torch
from rsl_rl.utils.log_writer import LogWriter
from tensordict import TensorDict

from s3.rl.params import PPOParams

OBS_GROUPS = {"actor": ["policy"], "critic": ["policy"]}
Curve = list[tuple[str, int, float]]  # rsl_rl's scalars in the order reported: (tag, iteration, value)


class CurveWriter(LogWriter):
    """rsl_rl writer that keeps one `learn` call's scalars in `points`, in order, and sends nothing anywhere.

    Tags are rsl_rl's ("Train/mean_reward", "Loss/value", "Perf/total_fps", "Env/speed", ...); its
    wall-clock-indexed duplicates ("<tag>/time", step = seconds) are dropped. rsl_rl builds a new
    writer at every `learn` call (runner.logger.writer), so `chunk_curve` reads one call's points.
    """

    def __init__(self, log_dir: str | None = None) -> None:
        self.points: Curve = []

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        if not tag.endswith("/time"):
            self.points.append((tag, int(global_step), float(scalar_value)))


CURVE_WRITER = {"class_name": f"{__name__}:CurveWriter"}  # make_runner(..., log_dir=<a folder>, logger=CURVE_WRITER)


def model_config(ppo: PPOParams, role: str) -> dict[str, Any]:
    """The `actor` or `critic` section."""
    hidden = ppo.actor_hidden if role == "actor" else ppo.critic_hidden
    cfg: dict[str, Any] = {
        "class_name": "MLPModel" if ppo.policy == "mlp" else "RNNModel",
        "hidden_dims": list(hidden),
        "activation": ppo.activation,
        "obs_normalization": ppo.obs_normalization,
    }
    if ppo.policy == "gru":
        cfg.update({"rnn_type": "gru", "rnn_hidden_dim": ppo.rnn_hidden, "rnn_num_layers": 1})
    if role == "actor":
        cfg["distribution_cfg"] = {"class_name": "GaussianDistribution", "init_std": ppo.init_std}
    return cfg


def runner_config(ppo: PPOParams, logger: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full OnPolicyRunner configuration (a fresh dict: rsl_rl mutates it)."""
    cfg: dict[str, Any] = {
        "num_steps_per_env": ppo.num_steps_per_env,
        "save_interval": 10**9,  # checkpoints are ours (best by validation), not the runner's
        "obs_groups": {k: list(v) for k, v in OBS_GROUPS.items()},
        "check_for_nan": True,
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": ppo.learning_epochs,
            "num_mini_batches": ppo.mini_batches,
            "clip_param": ppo.clip_param,
            "gamma": ppo.gamma,
            "lam": ppo.lam,
            "value_loss_coef": ppo.value_loss_coef,
            "entropy_coef": ppo.entropy_coef,
            "learning_rate": ppo.learning_rate,
            "max_grad_norm": ppo.max_grad_norm,
            "use_clipped_value_loss": True,
            "schedule": "adaptive",
            "desired_kl": ppo.desired_kl,
        },
        "actor": model_config(ppo, "actor"),
        "critic": model_config(ppo, "critic"),
    }
    if logger is not None:
        cfg["logger"] = dict(logger)
    return cfg


@contextlib.contextmanager
def quiet(enabled: bool = True) -> Iterator[None]:
    """Swallow rsl_rl's per-iteration console report (and its model printouts)."""
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def make_runner(
    env: Any, ppo: PPOParams, device: str | torch.device, log_dir: str | None = None, logger: dict[str, Any] | None = None, silent: bool = True
) -> Any:
    """An OnPolicyRunner on `env`; with log_dir=None rsl_rl logs nothing (and calls no writer)."""
    from rsl_rl.runners import OnPolicyRunner

    with quiet(silent):
        return OnPolicyRunner(env, runner_config(ppo, logger), log_dir=log_dir, device=str(device))


def learn_chunk(runner: Any, iterations: int) -> Curve:
    """`runner.learn(iterations)`, numbering the next chunk's iterations on from this one's; returns
    the chunk's learning curve (`chunk_curve`).

    rsl_rl leaves `current_learning_iteration` at the last iteration it ran, so each further
    `learn` call would log its first iteration under the previous chunk's last index (duplicate
    MLflow steps, the curve one iteration short per chunk). The index only labels logs and saves.
    """
    runner.learn(iterations)
    runner.current_learning_iteration += 1
    return chunk_curve(runner)


def chunk_curve(runner: Any) -> Curve:
    """The scalars a CurveWriter saw in the runner's latest `learn` call, also one that raised
    part-way; [] for a runner without one."""
    writer = runner.logger.writer
    return list(writer.points) if isinstance(writer, CurveWriter) else []


def build_actor(obs_dim: int, num_actions: int, actor_cfg: dict[str, Any], device: str | torch.device = "cpu") -> torch.nn.Module:
    """An untrained actor of the given config (for loading saved weights)."""
    from rsl_rl.utils import resolve_class

    cls, kwargs = resolve_class(actor_cfg)
    obs = TensorDict({"policy": torch.zeros(1, obs_dim)}, batch_size=[1])
    return cls(obs, {k: list(v) for k, v in OBS_GROUPS.items()}, "actor", num_actions, **kwargs).to(device)
