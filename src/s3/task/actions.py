"""The policy's action and the car's command: one map, shared by training and deployment.

A policy emits a = (steer, longitudinal) in [-1, 1]^2; the car takes (steering_cmd, throttle_cmd,
brake_cmd) = (steer * k(vx), max(u, 0), max(-u, 0)). k(vx) is the steering range at forward
speed vx: 1 up to `steer_full_speed`, then (steer_full_speed / vx)^2 (speed-sensitive steering).

Why the range shrinks with speed: the lateral acceleration a steering angle asks for grows as
v^2. With a fixed range, PPO's exploration noise on the steering (std 0.1-0.35 of the range)
asks for 10-40 m/s^2 at 25-30 m/s, several times the grip, so the stochastic policy learns to
stay slow. Above steer_full_speed the full range asks for the same lateral acceleration as full
lock does at steer_full_speed, at any speed. 0 (the default) keeps the raw command.

Every user applies the same function: the distilled env, the source env (`direct`), and the
deployed policy (the ONNX export included), which reads vx from its observation's first entry.
"""

from __future__ import annotations

import torch
from torch import Tensor


def steer_range(vx: Tensor, steer_full_speed: float) -> Tensor:
    """k(vx) [N]: 1 up to steer_full_speed (m/s), then (steer_full_speed / |vx|)^2."""
    return (steer_full_speed / vx.abs().clamp(min=steer_full_speed)).square()


def policy_to_command(a: Tensor, vx: Tensor | None = None, steer_full_speed: float = 0.0) -> Tensor:
    """(steer, longitudinal) [N, 2] -> (steering_cmd, throttle_cmd, brake_cmd) [N, 3], clipped."""
    a = a.clamp(-1.0, 1.0)
    steer = a[:, 0]
    if steer_full_speed > 0.0:
        if vx is None:
            raise ValueError("speed-sensitive steering needs the forward speed vx")
        steer = steer * steer_range(vx, steer_full_speed)
    return torch.stack([steer, a[:, 1].clamp(min=0.0), (-a[:, 1]).clamp(min=0.0)], dim=1)


def command_to_policy(cmd: Tensor) -> Tensor:
    """(steering_cmd, throttle - brake) [N, 2]: the action-rate penalty's view of a given command."""
    return torch.stack([cmd[:, 0], cmd[:, 1] - cmd[:, 2]], dim=1)


def split_action(a: Tensor, vx: Tensor, steer_full_speed: float = 0.0) -> tuple[Tensor, Tensor]:
    """(policy action [N, 2], command [N, 3]) from a policy action at forward speeds vx [N], or
    from a 3-D command [N, 3] (controllers, exported policies), clipped to [-1, 1] x [0, 1] x [0, 1]."""
    if a.shape[1] == 3:
        cmd = torch.stack([a[:, 0].clamp(-1, 1), a[:, 1].clamp(0, 1), a[:, 2].clamp(0, 1)], dim=1)
        return command_to_policy(cmd), cmd
    pol = a.clamp(-1.0, 1.0)
    return pol, policy_to_command(pol, vx, steer_full_speed)
