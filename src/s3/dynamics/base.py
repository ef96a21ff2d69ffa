"""The one batched interface all dynamics-model families share.

Conventions (SI units in and out, normalisation happens inside the model):
- state  s = (vx, vy, yaw_rate, steer)            S = 4
- action a = (steering_cmd, throttle_cmd, brake_cmd) A = 3
- At the current time t a model sees
    history_states  [N, K, S] = s[t-K+1 .. t]   (last entry: the current state)
    history_actions [N, K, A] = a[t-K .. t-1]   (entry k: the command that led INTO state k)
    action          [N, A]    = a[t]            (the command applied over the next period)
    mu              [N] or None: surface label at time t (used only if the model was trained with it)
  and returns the state s[t+1] [N, S] one control period `dt` later.
- An RL environment keeps the two histories as ring buffers: after each step push (s[t+1], a[t]).
  At a reset, fill the history with the initial state and zero (or the first) action.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from s3.dynamics.params import DistillParams

STATE_NAMES = ("vx", "vy", "yaw_rate", "steer")
ACTION_NAMES = ("steering_cmd", "throttle_cmd", "brake_cmd")


class Normalizer(nn.Module):
    """Training-set statistics, stored with the model (buffers, so they go into safetensors)."""

    def __init__(self, state_dim: int = 4, action_dim: int = 3) -> None:
        super().__init__()
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        self.register_buffer("action_mean", torch.zeros(action_dim))
        self.register_buffer("action_std", torch.ones(action_dim))
        self.register_buffer("delta_mean", torch.zeros(state_dim))  # s[t+1] - s[t]
        self.register_buffer("delta_std", torch.ones(state_dim))
        self.register_buffer("mu_mean", torch.tensor(0.5))
        self.register_buffer("mu_std", torch.tensor(0.5))

    def set(self, stats: dict[str, Tensor]) -> None:
        for k, v in stats.items():
            getattr(self, k).copy_(torch.as_tensor(v, dtype=torch.float32))

    def state(self, s: Tensor) -> Tensor:
        return (s - self.state_mean) / self.state_std

    def action(self, a: Tensor) -> Tensor:
        return (a - self.action_mean) / self.action_std

    def mu(self, mu: Tensor) -> Tensor:
        return (mu - self.mu_mean) / self.mu_std


def integrate_pose(pose: Tensor, s0: Tensor, s1: Tensor, dt: float) -> Tensor:
    """World pose after one period, midpoint rule on the body-frame velocities.

    pose [N, 3] = (x, y, yaw); s0, s1 [N, S] states at the start and end of the period.
    """
    yaw1 = pose[:, 2] + 0.5 * dt * (s0[:, 2] + s1[:, 2])  # [N]
    yaw_m = 0.5 * (pose[:, 2] + yaw1)
    vx_m, vy_m = 0.5 * (s0[:, 0] + s1[:, 0]), 0.5 * (s0[:, 1] + s1[:, 1])
    c, s = torch.cos(yaw_m), torch.sin(yaw_m)
    x1 = pose[:, 0] + dt * (vx_m * c - vy_m * s)
    y1 = pose[:, 1] + dt * (vx_m * s + vy_m * c)
    return torch.stack([x1, y1, yaw1], dim=1)


def step_actions(history_actions: Tensor, action: Tensor) -> Tensor:
    """The command of each history row: a[t-K+1 .. t] [N, K, A] (the shifted history plus `action`)."""
    return torch.cat([history_actions[:, 1:], action[:, None]], dim=1)


class DynamicsModel(nn.Module):
    """Base class of the four families: a batched one-step model plus rollout and pose.

    `inference_bf16` (default False; a setting, not a weight): without autograd, the network
    families (ddm, transformer, dytr) run their networks under bfloat16 autocast. Meant for GPUs:
    on the 2-core AVX-512 CPU it measured 0.5-1.1x the float32 speed (the casts cost what the
    bf16 matmuls save) and moved one-step predictions by up to ~0.08 of the state-change std
    (~1e-2 m/s), so it is never the default.

    `inference_compile` (default False; a setting, switched on by `train.env.compile_model`):
    without autograd, the transformer families run their network through `torch.compile` in
    cache-sized chunks, with attention written out so that inductor fuses it (transformer.attention).
    Measured on the 2-core CPU at N = 4096, one thread: 1.20x (transformer) and 1.28x (dytr) the
    env steps/s of eager, outputs within 2e-6; the first step pays the compile (seconds with a
    warm inductor cache, up to ~1.5 min cold on a loaded machine). Its kernels are built
    single-threaded (inductor's cpp.threads = 1): built for 2 threads, dytr's env ran 6x slower
    than on one (an OpenMP region per row of its attention reductions) and its outputs depended
    on the thread count; now they do not (tests/test_env_speed_equivalence.py). The GRU (ddm) and
    the single-track integrator measured no gain (0.7-0.9x), so they stay eager.
    """

    family: ClassVar[str] = "base"
    fitted_only: ClassVar[bool] = False  # True: the least-squares fit is the whole model (no gradient training)
    inference_bf16: bool = False
    inference_compile: bool = False

    def __init__(self, history: int, dt: float, use_mu: bool, state_dim: int = 4, action_dim: int = 3) -> None:
        super().__init__()
        self.history, self.dt, self.use_mu = int(history), float(dt), bool(use_mu)
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self.norm = Normalizer(state_dim, action_dim)

    # ---- what a family implements --------------------------------------------------------
    @classmethod
    def from_params(cls, params: DistillParams, dt: float, fit: dict[str, float]) -> DynamicsModel:
        """A fresh model sized by the `distill:` params; `fit` is the bicycle least-squares fit."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """JSON-able constructor arguments (stored beside the weights)."""
        return {
            "history": self.history,
            "dt": self.dt,
            "use_mu": self.use_mu,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
        }

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        """[N, K, S], [N, K, A], [N, A], [N] | None -> next state [N, S]."""
        raise NotImplementedError

    def distill_summary(self, test_batch: Callable[[], Mapping[str, Tensor]], fit: dict[str, float]) -> dict[str, Any]:
        """What records/distill/<family>.json says of the trained model beside its accuracy (its coefficients,
        its fit), as {key: JSON-able value}; none by default. `test_batch()` gives windows of the test split
        (s3.dynamics.dataset: hist_states [N, K, S], hist_actions [N, K, A], actions [N, H, A], mu [N, H], on
        the CPU); `fit` is the bicycle least-squares fit every family starts from."""
        return {}

    # ---- the shared interface -------------------------------------------------------------
    def step(self, history_states: Tensor, history_actions: Tensor, action: Tensor, mu: Tensor | None = None) -> Tensor:
        """Next body-frame state [N, S] one control period later (see the module docstring)."""
        n, k, s = history_states.shape
        if (
            k != self.history
            or s != self.state_dim
            or history_actions.shape != (n, k, self.action_dim)
            or action.shape != (n, self.action_dim)
        ):
            raise ValueError(
                f"{self.family}: expected history_states [N,{self.history},{self.state_dim}], history_actions "
                f"[N,{self.history},{self.action_dim}], action [N,{self.action_dim}]; got "
                f"{tuple(history_states.shape)}, {tuple(history_actions.shape)}, {tuple(action.shape)}"
            )
        if self.use_mu and mu is None:
            raise ValueError(f"{self.family}: this model was trained with the friction label; pass mu [N]")
        return self.forward_step(history_states, history_actions, action, mu if self.use_mu else None)

    def rollout(
        self,
        history_states: Tensor,
        history_actions: Tensor,
        actions: Tensor,
        mu: Tensor | None = None,
        pose: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Autoregressive open-loop rollout over H = actions.shape[1] steps.

        actions [N, H, A]; mu [N, H] (or [N], held) or None; pose [N, 3] or None (zeros).
        Returns states [N, H, S] (s[t+1 .. t+H]) and poses [N, H, 3] integrated from them.
        """
        n, horizon = actions.shape[:2]
        if mu is not None and mu.dim() == 1:
            mu = mu[:, None].expand(n, horizon)
        pose = history_states.new_zeros(n, 3) if pose is None else pose
        hs, ha = history_states, history_actions
        states, poses = [], []
        for h in range(horizon):  # H is small; N is batched
            a = actions[:, h]
            s1 = self.step(hs, ha, a, None if mu is None else mu[:, h])
            pose = integrate_pose(pose, hs[:, -1], s1, self.dt)
            states.append(s1)
            poses.append(pose)
            hs = torch.cat([hs[:, 1:], s1[:, None]], dim=1)
            ha = torch.cat([ha[:, 1:], a[:, None]], dim=1)
        return torch.stack(states, dim=1), torch.stack(poses, dim=1)
