"""A hand-written centerline follower that reads only the policy observation.

`PurePursuit` steers toward the centerline point one lookahead distance ahead (taken from the
observation's body-frame preview) and tracks a speed limited by the curvature ahead and the
braking distance to it, with a P controller on the longitudinal command. It is the sanity check
of the distilled environment (and of the observation layout): a car model that is roughly right
lets it lap a track. It returns the 2-D policy action (steer, longitudinal) in [-1, 1].
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from s3.task.layout import ObsLayout


class PurePursuit:
    """Pure pursuit steering + curvature-limited speed target + P speed control, batched."""

    def __init__(
        self,
        layout: ObsLayout,
        wheelbase: float = 2.6,
        max_steer: float = 0.45,
        lookahead_time: float = 0.8,
        min_lookahead: float = 6.0,
        lateral_accel: float = 4.0,
        brake_accel: float = 3.0,
        max_speed: float = 18.0,
        kp: float = 0.5,
    ) -> None:
        self.layout = layout
        self.wheelbase, self.max_steer = wheelbase, max_steer
        self.lookahead_time, self.min_lookahead = lookahead_time, max(min_lookahead, layout.preview_spacing)
        self.lateral_accel, self.brake_accel, self.max_speed, self.kp = lateral_accel, brake_accel, max_speed, kp

    def __call__(self, obs: Tensor) -> Tensor:
        g, lay = self.layout.groups, self.layout
        n, p, spacing = obs.shape[0], lay.preview_points, lay.preview_spacing
        vx = obs[:, g["state"].start]
        pts = obs[:, g["preview_xy"]].reshape(n, p, 2)
        dists = spacing * torch.arange(1, p + 1, device=obs.device, dtype=obs.dtype)
        # steering: the preview point at the lookahead distance (linear between preview points)
        look = (self.lookahead_time * vx).clamp(self.min_lookahead, float(dists[-1]))
        pos = (look / spacing - 1.0).clamp(0.0, p - 1.0)
        i = pos.floor().long().clamp(max=max(p - 2, 0))
        f = (pos - i)[:, None]
        j = (i + 1).clamp(max=p - 1)
        tgt = pts[torch.arange(n), i] * (1 - f) + pts[torch.arange(n), j] * f
        kappa = 2.0 * tgt[:, 1] / tgt.square().sum(dim=1).clamp(min=1e-6)
        steer = torch.atan(self.wheelbase * kappa) / self.max_steer
        # speed: curvature of the preview polyline (car position prepended), braking-distance limited
        poly = torch.cat([torch.zeros(n, 1, 2, device=obs.device, dtype=obs.dtype), pts], dim=1)
        a, b, c = poly[:, :-2], poly[:, 1:-1], poly[:, 2:]
        ab, bc, ac = b - a, c - b, c - a
        cross = ab[..., 0] * bc[..., 1] - ab[..., 1] * bc[..., 0]
        den = ab.norm(dim=-1) * bc.norm(dim=-1) * ac.norm(dim=-1)
        curv = (2.0 * cross.abs() / den.clamp(min=1e-6)).clamp(min=1e-4)  # at preview points 0..P-2
        v_corner = torch.sqrt(self.lateral_accel / curv)
        reach = torch.sqrt(v_corner.square() + 2.0 * self.brake_accel * (dists[: p - 1] - spacing).clamp(min=0.0))
        target = reach.min(dim=1).values.clamp(max=self.max_speed)
        lon = self.kp * (target - vx)
        return torch.stack([steer.clamp(-1, 1), lon.clamp(-1, 1)], dim=1)


def straight_line(throttle: float = 0.5) -> Callable[[Tensor], Tensor]:
    """Zero steering, constant throttle (for tests)."""

    def act(obs: Tensor) -> Tensor:
        out = torch.zeros(obs.shape[0], 2, device=obs.device)
        out[:, 1] = throttle
        return out

    return act
