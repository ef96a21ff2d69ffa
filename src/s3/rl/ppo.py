"""rsl_rl 5.x glue: the PPO configuration, building it quietly, and rebuilding a saved actor.

The 5.x config format: top-level num_steps_per_env / save_interval / obs_groups, an `algorithm`
section (class_name PPO), `actor` and `critic` sections (rsl_rl.models MLPModel or RNNModel with
rnn_type "gru"; the actor carries a GaussianDistribution). The environment has a single
observation group, "policy", used by both, unless it also has "privileged" (env.critic_surface):
then the critic reads both (an asymmetric critic) and the actor still reads "policy" alone.
The training loop is s3.rl.loop's.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict

from s3.rl.params import PPOParams

POLICY, PRIVILEGED = "policy", "privileged"  # the env's observation groups (s3.rl.task_env)
OBS_GROUPS = {"actor": [POLICY], "critic": [POLICY]}
Curve = list[tuple[str, int, float]]  # rsl_rl's scalars in the order reported: (tag, iteration, value)


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


def obs_groups(privileged: bool) -> dict[str, list[str]]:
    """Which observation groups the actor and the critic read: the critic also reads PRIVILEGED if the env has it."""
    groups = {k: list(v) for k, v in OBS_GROUPS.items()}
    if privileged:
        groups["critic"].append(PRIVILEGED)
    return groups


def runner_config(ppo: PPOParams, privileged: bool = False) -> dict[str, Any]:
    """The full OnPolicyRunner configuration (a fresh dict: rsl_rl mutates it); `privileged`: the env
    observes the group PRIVILEGED for the critic."""
    cfg: dict[str, Any] = {
        "num_steps_per_env": ppo.num_steps_per_env,
        "save_interval": 10**9,  # checkpoints are ours (best by validation), not the runner's
        "obs_groups": obs_groups(privileged),
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
    return cfg


@contextlib.contextmanager
def quiet(enabled: bool = True) -> Iterator[None]:
    """Swallow rsl_rl's per-iteration console report (and its model printouts)."""
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def make_runner(env: Any, ppo: PPOParams, device: str | torch.device, silent: bool = True) -> Any:
    """An OnPolicyRunner on `env`, built for its PPO (`runner.alg`, `runner.cfg`); it logs nothing."""
    from rsl_rl.runners import OnPolicyRunner

    with quiet(silent):
        privileged = PRIVILEGED in env.get_observations()
        return OnPolicyRunner(env, runner_config(ppo, privileged), log_dir=None, device=str(device))


def build_actor(
    obs_dim: int, num_actions: int, actor_cfg: dict[str, Any], device: str | torch.device = "cpu"
) -> torch.nn.Module:
    """An untrained actor of the given config (for loading saved weights)."""
    from rsl_rl.utils import resolve_class

    cls, kwargs = resolve_class(actor_cfg)
    obs = TensorDict({"policy": torch.zeros(1, obs_dim)}, batch_size=[1])
    return cls(obs, {k: list(v) for k, v in OBS_GROUPS.items()}, "actor", num_actions, **kwargs).to(device)
