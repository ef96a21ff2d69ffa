"""The policy observation of the distilled environment: layout and assembly.

One flat float32 vector per car, D = 4 + 3 + 7 H + 4 + 4 P (+ 1 + Q with the surface label),
in this order (H = obs_history, P = preview_points, Q = len(surface_ahead)):

    group          size   content (SI units; body frame x forward, y left)
    state          4      vx, vy [m/s], yaw_rate [rad/s], steer [rad]          (now, time t)
    command        3      steering_cmd, throttle_cmd, brake_cmd: the command applied over the last
                          period, i.e. the one that led into `state` (the previous action)
    history        7 H    (vx, vy, yaw_rate, steer, steering_cmd, throttle_cmd, brake_cmd) at
                          t-1, t-2, ..., t-H, most recent first; each command is the one that led
                          into the state beside it. With `state`/`command` this lets a policy see
                          how the car answered its commands, i.e. infer grip.
    track          4      lateral offset d [m, left +], heading error yaw - track heading [rad,
                          wrapped], road half widths w_left, w_right [m] at the car
    preview_xy     2 P    centerline points at s + k * preview_spacing, k = 1..P, in the body
                          frame, interleaved (x1, y1, x2, y2, ...) [m]
    preview_width  2 P    (w_left, w_right) at those points, interleaved [m]
    surface        1 + Q  only with env.surface_label: peak friction under the car, then at
                          s + surface_ahead[q] at the car's current lateral offset

Normalisation is not applied here: the policy carries its own running normaliser
(rsl_rl EmpiricalNormalization), and the exported policy applies it inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from s3.task.params import EnvParams

STATE_FIELDS = ("vx", "vy", "yaw_rate", "steer")
COMMAND_FIELDS = ("steering_cmd", "throttle_cmd", "brake_cmd")
STEP_FIELDS = STATE_FIELDS + COMMAND_FIELDS  # one history entry (7)


@dataclass(frozen=True)
class ObsLayout:
    """Where each group sits in the flat observation."""

    history: int
    preview_points: int
    preview_spacing: float
    surface_label: bool
    surface_ahead: tuple[float, ...]
    groups: dict[str, slice] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return max(s.stop for s in self.groups.values())

    @property
    def preview_distances(self) -> list[float]:
        return [self.preview_spacing * (k + 1) for k in range(self.preview_points)]

    def to_json(self) -> dict[str, Any]:
        """JSON description: group -> [start, stop) and the names of its entries."""
        names: dict[str, list[str]] = {
            "state": list(STATE_FIELDS),
            "command": list(COMMAND_FIELDS),
            "history": [f"{f}[t-{k + 1}]" for k in range(self.history) for f in STEP_FIELDS],
            "track": ["d", "heading_error", "w_left", "w_right"],
            "preview_xy": [f"{c}@{d:g}m" for d in self.preview_distances for c in ("x", "y")],
            "preview_width": [f"{c}@{d:g}m" for d in self.preview_distances for c in ("w_left", "w_right")],
            "surface": ["mu@0m", *[f"mu@{d:g}m" for d in self.surface_ahead]],
        }
        return {
            "dim": self.dim,
            "history": self.history,
            "preview_points": self.preview_points,
            "preview_spacing_m": self.preview_spacing,
            "surface_label": self.surface_label,
            "surface_ahead_m": list(self.surface_ahead),
            "groups": {g: {"start": s.start, "stop": s.stop, "names": names[g]} for g, s in self.groups.items()},
            "action": {
                "policy": ["steer in [-1, 1]", "longitudinal in [-1, 1]: throttle = max(u, 0), brake = max(-u, 0)"],
                "command": list(COMMAND_FIELDS),
            },
        }


def obs_layout(params: EnvParams) -> ObsLayout:
    """The layout for these env params."""
    sizes = [
        ("state", 4),
        ("command", 3),
        ("history", 7 * params.obs_history),
        ("track", 4),
        ("preview_xy", 2 * params.preview_points),
        ("preview_width", 2 * params.preview_points),
    ]
    if params.surface_label:
        sizes.append(("surface", 1 + len(params.surface_ahead)))
    groups, start = {}, 0
    for name, n in sizes:
        groups[name] = slice(start, start + n)
        start += n
    return ObsLayout(
        history=params.obs_history,
        preview_points=params.preview_points,
        preview_spacing=params.preview_spacing,
        surface_label=params.surface_label,
        surface_ahead=tuple(params.surface_ahead),
        groups=groups,
    )


def interleave(a: Tensor, b: Tensor) -> Tensor:
    """[..., K] x 2 -> [..., K, 2] (a, b pairs): torch.stack(dim=-1), ~8x faster on CPU."""
    return torch.view_as_real(torch.complex(a, b))


def to_body(points: Tensor, pose: Tensor) -> Tensor:
    """World points [N, K, 2] into the body frame of poses [N, 3] (x forward, y left)."""
    c, s = torch.cos(pose[:, 2:3]), torch.sin(pose[:, 2:3])
    dx = points[..., 0] - pose[:, 0:1]
    dy = points[..., 1] - pose[:, 1:2]
    return interleave(c * dx + s * dy, -s * dx + c * dy)


def assemble(
    step_history: Tensor,
    track_feats: Tensor,
    preview_body: Tensor,
    preview_wl: Tensor,
    preview_wr: Tensor,
    surface: Tensor | None,
) -> Tensor:
    """The flat observation [N, D].

    step_history [N, H + 1, 7] oldest first, last row = (state, command) now;
    track_feats [N, 4]; preview_body [N, P, 2]; preview_wl/wr [N, P]; surface [N, 1 + Q] or None.
    """
    return assemble_paired(step_history, track_feats, preview_body, interleave(preview_wl, preview_wr), surface)


def assemble_paired(
    step_history: Tensor, track_feats: Tensor, preview_body: Tensor, preview_widths: Tensor, surface: Tensor | None
) -> Tensor:
    """`assemble` with the widths already paired: preview_widths [N, P, 2] = (w_left, w_right)."""
    n, h1 = step_history.shape[:2]
    newest_first = torch.arange(h1 - 1, -1, -1, device=step_history.device)
    steps = step_history.index_select(1, newest_first).reshape(n, -1)  # (state, command) at t, then t-1, t-2, ...
    parts = [steps, track_feats, preview_body.reshape(n, -1), preview_widths.reshape(n, -1)]
    if surface is not None:
        parts.append(surface)
    return torch.cat(parts, dim=1)
