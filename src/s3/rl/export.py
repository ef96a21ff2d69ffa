"""Deployable policies: raw observation in, clipped command out, observation normalisation inside.

policies/<family>/
    policy.safetensors   actor + critic weights (keys "actor.*", "critic.*"), normaliser included
    policy.ts            TorchScript: the deterministic actor, loadable without s3 or rsl_rl
    policy.json          obs layout, action spec, params, validation score, training summary

The TorchScript module maps obs [B, D] (float32, the layout in policy.json) to the command
[B, 3] = (steering_cmd in [-1, 1], throttle_cmd in [0, 1], brake_cmd in [0, 1]):
    MLP:  cmd = policy(obs)
    GRU:  cmd, h = policy(obs, h)      with h = policy.initial_state(B) at the start of an episode
It applies the running observation normaliser learned in training, takes the Gaussian's mean,
clips it to [-1, 1]^2 and maps (steer, longitudinal) onto the command (s3.task.actions, with the
speed-sensitive steering the policy trained under, read from its observation's vx).
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from s3.io import atomic_path, write_json_atomic
from s3.task.actions import policy_to_command

WEIGHTS, SCRIPT, META = "policy.safetensors", "policy.ts", "policy.json"


class DeployedPolicy(nn.Module):
    """Normaliser + MLP (mean action) + clip + command map."""

    def __init__(self, actor: nn.Module, steer_full_speed: float = 0.0) -> None:
        super().__init__()
        self.normalizer = copy.deepcopy(actor.obs_normalizer)
        self.mlp = copy.deepcopy(actor.mlp)
        self.steer_full_speed = float(steer_full_speed)

    def forward(self, obs: Tensor) -> Tensor:
        return policy_to_command(self.mlp(self.normalizer(obs)), obs[:, 0], self.steer_full_speed)


class DeployedRecurrentPolicy(nn.Module):
    """Normaliser + GRU + MLP (mean action) + clip + command map, hidden state explicit."""

    def __init__(self, actor: nn.Module, steer_full_speed: float = 0.0) -> None:
        super().__init__()
        self.normalizer = copy.deepcopy(actor.obs_normalizer)
        self.steer_full_speed = float(steer_full_speed)
        self.gru = copy.deepcopy(actor.rnn.rnn)
        self.mlp = copy.deepcopy(actor.mlp)
        self.num_layers = int(self.gru.num_layers)
        self.hidden_size = int(self.gru.hidden_size)

    def forward(self, obs: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        x, h1 = self.gru(self.normalizer(obs).unsqueeze(0), h)
        return policy_to_command(self.mlp(x.squeeze(0)), obs[:, 0], self.steer_full_speed), h1

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        return torch.zeros(self.num_layers, batch, self.hidden_size, device=self.mlp[0].weight.device)


def deployable(actor: nn.Module, steer_full_speed: float = 0.0) -> nn.Module:
    """The deployable module for an rsl_rl actor (MLPModel or RNNModel with a GRU), in eval mode.

    `steer_full_speed` is the env's (s3.task.actions): a policy must be deployed with the map it trained under.
    """
    dist = type(getattr(actor, "distribution", None)).__name__
    if dist != "GaussianDistribution":
        raise ValueError(f"export supports GaussianDistribution actors, got {dist}")
    if getattr(actor, "is_recurrent", False):
        if not isinstance(actor.rnn.rnn, nn.GRU):
            raise ValueError("export supports GRU recurrent actors only")
        return DeployedRecurrentPolicy(actor, steer_full_speed).eval()
    return DeployedPolicy(actor, steer_full_speed).eval()


def as_callable(module: nn.Module | torch.jit.ScriptModule, recurrent: bool) -> Callable[[Tensor], Tensor]:
    """A stateful obs -> command callable (a GRU's state starts at zero: make one per episode batch)."""
    if not recurrent:
        return lambda obs: module(obs)
    state: dict[str, Tensor] = {}

    def act(obs: Tensor) -> Tensor:
        h = state.get("h")
        if h is None or h.shape[1] != obs.shape[0]:
            h = module.initial_state(obs.shape[0]).to(obs.device)
        cmd, state["h"] = module(obs, h)
        return cmd

    return act


def save_policy(folder: str | Path, actor: nn.Module, critic: nn.Module, meta: dict[str, Any]) -> Path:
    """Write weights, the TorchScript export and the JSON (each atomically); returns the folder."""
    folder = Path(folder)
    state = {f"actor.{k}": v.detach().cpu().contiguous() for k, v in actor.state_dict().items()}
    state.update({f"critic.{k}": v.detach().cpu().contiguous() for k, v in critic.state_dict().items()})
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(state, str(tmp), metadata={"format": "s3-policy-1"})
    module = deployable(actor, saved_steer_full_speed(meta)).cpu()  # deployable copies the submodules it needs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(module)
        with atomic_path(folder / SCRIPT) as tmp:
            scripted.save(str(tmp))
    write_json_atomic(folder / META, meta)
    return folder


def load_exported(folder: str | Path, device: str | torch.device = "cpu") -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
    """The TorchScript policy and its JSON."""
    folder = Path(folder)
    meta = json.loads((folder / META).read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(folder / SCRIPT), map_location=str(device))
    return module.eval(), meta


def load_deployed(folder: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """The deployable policy rebuilt from policy.safetensors + policy.json: plain weights, so no
    code from the file runs (TorchScript, like pickle, would); the module equals policy.ts."""
    actor, meta = load_actor(folder, device)
    return deployable(actor, saved_steer_full_speed(meta)).to(device), meta


def load_policy_fn(folder: str | Path, device: str | torch.device = "cpu") -> tuple[Callable[[Tensor], Tensor], dict[str, Any]]:
    """A ready obs -> command callable from policies/<name>/ (fresh recurrent state)."""
    module, meta = load_deployed(folder, device)
    return as_callable(module, meta["policy"]["recurrent"]), meta


def saved_steer_full_speed(meta: dict[str, Any]) -> float:
    """The steering map a saved policy trained under (0 for policies saved before it existed)."""
    return float(meta.get("params", {}).get("env", {}).get("steer_full_speed", 0.0))


def policy_env_params(meta: dict[str, Any]) -> Any:
    """The EnvParams a saved policy was trained with (its observation layout depends on them)."""
    from s3.rl.params import EnvParams

    return EnvParams.model_validate(meta["params"]["env"])


def load_actor(folder: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """The rsl_rl actor rebuilt from policy.json and policy.safetensors (for fine-tuning or analysis)."""
    from s3.rl.ppo import build_actor

    folder = Path(folder)
    meta = json.loads((folder / META).read_text())
    actor = build_actor(meta["obs"]["dim"], meta["policy"]["num_actions"], meta["policy"]["actor_cfg"], device)
    state = load_file(str(folder / WEIGHTS), device=str(device))
    actor.load_state_dict({k[len("actor.") :]: v for k, v in state.items() if k.startswith("actor.")}, strict=True)
    return actor.eval(), meta
