"""Kinematic bicycle fitted by least squares: no gradient learning.

Fitted on consecutive training-row pairs (s[t], a[t]) -> s[t+1]:
- steering actuator:  steer[t+1] = steer_decay * steer[t] + steer_gain * steering_cmd[t]
- longitudinal map:   (vx[t+1] - vx[t]) / dt = k_thr thr + k_thr_v thr vx - k_brake brk tanh(vx/0.3)
                                               - k_roll tanh(vx/0.5) - k_drag vx|vx|
- kinematics:         yaw_rate = vx tan(steer) / L,  vy = lr_frac vx tan(steer)
                      (effective L and lr_frac: least squares on the linear-regime rows)
The model then ignores the history beyond the current state and the friction label: this is the
baseline that fails on ice, by construction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from s3.dynamics.base import DynamicsModel

FIT_NAMES = ("steer_decay", "steer_gain", "k_thr", "k_thr_v", "k_brake", "k_roll", "k_drag", "inv_wheelbase", "lr_frac", "wheelbase", "lr")


def _lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(x, y, rcond=None)[0]


def fit_bicycle(s0: np.ndarray, a0: np.ndarray, s1: np.ndarray, dt: float, grip: np.ndarray | None = None) -> dict[str, float]:
    """Least-squares fit on M consecutive pairs: s0, s1 [M, 4] states, a0 [M, 3] commands.

    `grip` [M] bool marks high-friction rows (mu_mean >= 0.5); when given, the acceleration map
    and the geometry are fitted on those rows only (the nominal car), otherwise on all rows.
    Besides the bicycle's own coefficients, returns the geometry for the single-track model
    (`wheelbase`, `lr`), regressed with an understeer term on quasi-steady cornering rows:
        vx tan(steer) = L r + K r vx^2,   vy = lr r - K' r vx^2.
    """
    grip = np.ones(len(s0), dtype=bool) if grip is None or grip.sum() < 200 else grip
    vx0, d0, vx1, vy1, r1, d1 = s0[:, 0], s0[:, 3], s1[:, 0], s1[:, 1], s1[:, 2], s1[:, 3]
    steer_cmd, thr, brk = a0[:, 0], a0[:, 1], a0[:, 2]
    decay, gain = _lstsq(np.stack([d0, steer_cmd], 1), d1)
    feats = np.stack([thr, thr * vx0, -brk * np.tanh(vx0 / 0.3), -np.tanh(vx0 / 0.5), -vx0 * np.abs(vx0)], 1)
    k = _lstsq(feats[grip], ((vx1 - vx0) / dt)[grip])
    tan_d = np.tan(d1)
    lin = grip & (vx1 > 2.0) & (np.abs(vx1 * r1) < 3.0)
    if lin.sum() < 50:  # fall back to every forward-moving row
        lin = vx1 > 1.0
    # the bicycle's own, effective wheelbase (its best one-step fit of the yaw rate)
    inv_l = float(_lstsq((vx1 * tan_d)[lin, None], r1[lin])[0]) if lin.any() else 1 / 2.7
    lr_frac = float(_lstsq((vx1 * tan_d)[lin, None], vy1[lin])[0]) if lin.any() else 0.5
    # geometry with the understeer terms separated out, on quasi-steady rows (slow changes of
    # yaw rate, steering and speed), loosened until enough rows qualify
    wheelbase, lr = 1 / inv_l, 0.5 / inv_l
    for loosen in (1.0, 2.0, 4.0, 8.0):
        steady = (
            grip
            & (vx1 > 2.0)
            & (np.abs(vx1 * r1) < 4.0)
            & (np.abs(r1 - s0[:, 2]) < 0.2 * dt * loosen)
            & (np.abs(d1 - d0) < 0.05 * dt * loosen)
            & (np.abs(vx1 - vx0) < 2.0 * dt * loosen)
        )
        if steady.sum() >= 100:
            rr, v2 = r1[steady], vx1[steady] ** 2
            wheelbase = float(_lstsq(np.stack([rr, rr * v2], 1), (vx1 * tan_d)[steady])[0])
            lr = float(_lstsq(np.stack([rr, rr * v2], 1), vy1[steady])[0])
            break
    wheelbase = float(np.clip(wheelbase, 0.5, 10.0))
    lr = float(np.clip(lr, 0.3 * wheelbase, 0.7 * wheelbase))
    return {
        "steer_decay": float(decay),
        "steer_gain": float(gain),
        "k_thr": float(k[0]),
        "k_thr_v": float(k[1]),
        "k_brake": float(k[2]),
        "k_roll": float(k[3]),
        "k_drag": float(k[4]),
        "inv_wheelbase": float(np.clip(inv_l, 1 / 10.0, 1 / 0.5)),
        "lr_frac": float(np.clip(lr_frac, -1.0, 1.0)),
        "wheelbase": wheelbase,
        "lr": lr,
    }


class BicycleModel(DynamicsModel):
    """Kinematic bicycle with a fitted actuator and acceleration map."""

    family = "bicycle"

    def __init__(self, history: int, dt: float, use_mu: bool, fit: dict[str, float] | None = None, **kw: Any) -> None:
        super().__init__(history, dt, use_mu=False, **kw)  # the bicycle never uses the label
        fit = fit or {n: 0.0 for n in FIT_NAMES}  # set_fit() fills it in
        self.register_buffer("coef", torch.tensor([fit[n] for n in FIT_NAMES], dtype=torch.float32))

    def config(self) -> dict[str, Any]:
        return {**super().config(), "fit": dict(zip(FIT_NAMES, self.coef.tolist()))}

    def set_fit(self, fit: dict[str, float]) -> None:
        self.coef.copy_(torch.tensor([fit[n] for n in FIT_NAMES], dtype=torch.float32))

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        c = self.coef
        s = hs[:, -1]  # [N, S] current state
        vx, d = s[:, 0], s[:, 3]
        d1 = c[0] * d + c[1] * a[:, 0]
        acc = (
            c[2] * a[:, 1]
            + c[3] * a[:, 1] * vx
            - c[4] * a[:, 2] * torch.tanh(vx / 0.3)
            - c[5] * torch.tanh(vx / 0.5)
            - c[6] * vx * vx.abs()
        )
        vx1 = vx + self.dt * acc
        t = vx1 * torch.tan(d1)
        return torch.stack([vx1, c[8] * t, c[7] * t, d1], dim=1)  # [N, 4]
