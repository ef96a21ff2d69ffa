"""Kinematic bicycle fitted by least squares: no gradient learning.

Fitted on consecutive training-row pairs (s[t], a[t]) -> s[t+1]:
- steering actuator:  steer[t+1] = steer_decay * steer[t] + steer_gain * steering_cmd[t]
- longitudinal map:   (vx[t+1] - vx[t]) / dt = k_thr thr min(1, v_knee / |vx|) - k_brake brk tanh(vx/0.3)
                                               - k_roll tanh(vx/0.5) - k_drag vx|vx|
  (constant drive force up to the power limit's knee speed, constant power above it; every
  coefficient non-negative, so the car has a top speed where drive power meets drag)
- kinematics:         yaw_rate = vx tan(steer) / L, capped at |vx yaw_rate| <= ay_max;  vy = lr yaw_rate
The longitudinal map, L and lr are fitted on the high-grip rows where the car is not sliding
(|vy| < 0.1 vx): the regime a kinematic model describes. L and lr are *effective* values: they
absorb the understeer and body slip of the data's fast cornering, so they differ from the car's
geometry (`wheelbase`, `lr`, fitted separately for the single-track models). ay_max is the 99th
percentile of |vx yaw_rate| on those rows: the model corners no harder than the data ever did.
The model ignores the history beyond the current state and the friction label: this is the
baseline that fails on ice, by construction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from scipy.optimize import lsq_linear
from torch import Tensor

from s3.catalog import BICYCLE
from s3.dynamics.base import DynamicsModel

if TYPE_CHECKING:
    from s3.dynamics.params import DistillParams

FIT_NAMES = (
    "steer_decay",
    "steer_gain",
    "k_thr",
    "v_knee",
    "k_brake",
    "k_roll",
    "k_drag",
    "inv_wheelbase",
    "lr_eff",
    "ay_max",
    "wheelbase",
    "lr",
)
V_KNEE_GRID = np.arange(4.0, 60.0, 0.5)  # m/s, searched for the power limit's knee


def _lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(x, y, rcond=None)[0]


def _slope(x: np.ndarray, y: np.ndarray, default: float) -> float:
    """Least-squares y = k x through the origin (default when x carries no signal)."""
    xx = float(x @ x)
    return float(x @ y) / xx if xx > 1e-9 else default


def drive_feature(thr: np.ndarray, vx: np.ndarray, v_knee: float) -> np.ndarray:
    """Throttle's share of the peak drive force: 1 up to the knee speed, v_knee / |vx| above."""
    return thr * np.minimum(1.0, v_knee / np.maximum(np.abs(vx), 1e-3))


def fit_longitudinal(vx0: np.ndarray, thr: np.ndarray, brk: np.ndarray, acc: np.ndarray) -> tuple[float, np.ndarray]:
    """(v_knee, [k_thr, k_brake, k_roll, k_drag] >= 0): non-negative least squares per knee speed."""
    best: tuple[float, float, np.ndarray] | None = None
    rest = np.stack([-brk * np.tanh(vx0 / 0.3), -np.tanh(vx0 / 0.5), -vx0 * np.abs(vx0)], 1)
    for v_knee in V_KNEE_GRID:
        feats = np.concatenate([drive_feature(thr, vx0, v_knee)[:, None], rest], 1)
        sol = lsq_linear(feats, acc, bounds=(0.0, np.inf))
        cost = float(sol.cost)
        if best is None or cost < best[0]:
            best = (cost, float(v_knee), sol.x)
    assert best is not None
    return best[1], best[2]


def fit_bicycle(
    s0: np.ndarray, a0: np.ndarray, s1: np.ndarray, dt: float, grip: np.ndarray | None = None
) -> dict[str, float]:
    """Least-squares fit on M consecutive pairs: s0, s1 [M, 4] states, a0 [M, 3] commands.

    `grip` [M] bool marks high-friction rows (mu_mean >= 0.5); when given, everything but the
    steering actuator is fitted on those rows only (the nominal car), otherwise on all rows.
    Besides the bicycle's own coefficients, returns the geometry for the single-track model
    (`wheelbase`, `lr`), regressed with an understeer term on quasi-steady cornering rows:
        vx tan(steer) = L r + K r vx^2,   vy = lr r - K' r vx^2.
    """
    grip = np.ones(len(s0), dtype=bool) if grip is None or grip.sum() < 200 else grip
    vx0, d0, vx1, vy1, r1, d1 = s0[:, 0], s0[:, 3], s1[:, 0], s1[:, 1], s1[:, 2], s1[:, 3]
    steer_cmd, thr, brk = a0[:, 0], a0[:, 1], a0[:, 2]
    decay, gain = _lstsq(np.stack([d0, steer_cmd], 1), d1)
    # the kinematic regime: moving forward without sliding (selected on the sideslip, never on
    # the yaw rate being predicted, which would bias the slope towards zero)
    rolling = grip & (vx1 > 3.0) & (np.abs(vy1) < 0.1 * vx1)
    if rolling.sum() < 50:
        rolling = grip & (vx1 > 1.0)
    v_knee, k = fit_longitudinal(vx0[rolling], thr[rolling], brk[rolling], ((vx1 - vx0) / dt)[rolling])
    turn = (vx1 * np.tan(d1))[rolling]
    inv_l = _slope(turn, r1[rolling], 1 / 2.7)
    lr_eff = _slope(r1[rolling], vy1[rolling], 0.0)
    ay_max = float(np.percentile(np.abs(vx1 * r1)[rolling], 99)) if rolling.any() else 9.0
    tan_d = np.tan(d1)
    # geometry with the understeer terms separated out, on quasi-steady rows (slow changes of
    # yaw rate, steering and speed), loosened until enough rows qualify
    wheelbase, lr = 1 / max(inv_l, 1e-3), 0.5 / max(inv_l, 1e-3)
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
        "v_knee": v_knee,
        "k_brake": float(k[1]),
        "k_roll": float(k[2]),
        "k_drag": float(k[3]),
        "inv_wheelbase": float(np.clip(inv_l, 1 / 20.0, 1 / 0.5)),
        "lr_eff": float(np.clip(lr_eff, -5.0, 5.0)),
        "ay_max": float(np.clip(ay_max, 1.0, 30.0)),
        "wheelbase": wheelbase,
        "lr": lr,
    }


class BicycleModel(DynamicsModel):
    """Kinematic bicycle with a fitted actuator and acceleration map."""

    family = BICYCLE
    fitted_only = True

    def __init__(self, history: int, dt: float, use_mu: bool, fit: dict[str, float] | None = None, **kw: Any) -> None:
        super().__init__(history, dt, use_mu=False, **kw)  # the bicycle never uses the label
        fit = fit or {n: 0.0 for n in FIT_NAMES}  # set_fit() fills it in
        self.register_buffer("coef", torch.tensor([fit[n] for n in FIT_NAMES], dtype=torch.float32))

    @classmethod
    def from_params(cls, params: DistillParams, dt: float, fit: dict[str, float]) -> BicycleModel:
        return cls(params.history, dt, params.use_friction_label, fit=fit)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "fit": dict(zip(FIT_NAMES, self.coef.tolist()))}

    def distill_summary(self, test_batch: Callable[[], Mapping[str, Tensor]], fit: dict[str, float]) -> dict[str, Any]:
        return {"fit": fit}

    def set_fit(self, fit: dict[str, float]) -> None:
        self.coef.copy_(torch.tensor([fit[n] for n in FIT_NAMES], dtype=torch.float32))

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        c = self.coef
        s = hs[:, -1]  # [N, S] current state
        vx, d = s[:, 0], s[:, 3]
        d1 = c[0] * d + c[1] * a[:, 0]
        drive = a[:, 1] * torch.clamp(c[3] / vx.abs().clamp_min(1e-3), max=1.0)
        acc = c[2] * drive - c[4] * a[:, 2] * torch.tanh(vx / 0.3) - c[5] * torch.tanh(vx / 0.5) - c[6] * vx * vx.abs()
        vx1 = vx + self.dt * acc
        r_cap = c[9] / vx1.abs().clamp_min(1.0)  # [N] the fitted cornering limit as a yaw rate
        r1 = torch.clamp(c[7] * vx1 * torch.tan(d1), -r_cap, r_cap)
        return torch.stack([vx1, c[8] * r1, r1, d1], dim=1)  # [N, 4]
