"""Dynamic single-track model with Pacejka lateral tyres, integrated with RK4 substeps (torch).

Shared by `ddm` (coefficients from a network, per sample) and `dytr` (fixed fitted
coefficients as the physics prior). Every force is per unit mass, so the mass is fixed
implicitly (it cancels): tyre peaks are friction coefficients times the static axle load,
drivetrain terms are accelerations, and the yaw inertia is a factor on m * lf * lr.

    alpha_f = steer - atan2(vy + lf r, u),  alpha_r = -atan2(vy - lr r, u),   u = max(|vx|, v_lo)
    fy_f = Df mu g lr/L sin(Cf atan(Bf a - Ef (Bf a - atan(Bf a))))        (and rear, lf/L)
    ax   = amax tanh(((Cm1 - Cm2 vx)+ thr - Cb brk tanh(vx/0.3)) / amax),   amax = mu g (Df lr + Dr lf)/L
    dvx  = ax - Cr0 tanh(vx/0.5) - Cr2 vx|vx| - fy_f sin(steer) + vy r
    dvy  = fy_r + fy_f cos(steer) - vx r
    dr   = (lf fy_f cos(steer) - lr fy_r) / (Iz lf lr)
    dsteer = (steer_gain steering_cmd - steer) / steer_tau
With `combined_slip` each axle's lateral force shrinks on a friction ellipse with the share of its
peak that its longitudinal force uses (rear-wheel drive; brakes split evenly between the axles, a
fixed split, where the source car's is 70/30):
    fy_f *= sqrt(1 - rho_f^2),  rho_f = min(|brk_f| / kf, 1),  kf = Df mu g lr/L  (rear: drive - brk_r)
so full power on ice frees the rear axle (the car spins) and locked fronts stop steering, as the
source car does (manoeuvre probes, s3.evaluate.probes); without it the two are independent.
Below v_lo the lateral states relax (time constant 0.05 s) to the kinematic bicycle; between
v_lo and v_hi the two are blended, which keeps RK4 stable at the control period for every
coefficient inside its bounds.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

G = 9.81

# name: (low, high, nominal) -- the bounded physical ranges the ddm's sigmoid maps into
COEFFS: dict[str, tuple[float, float, float]] = {
    "Bf": (3.0, 20.0, 10.0),  # 1/rad Pacejka stiffness factor, front
    "Cf": (0.8, 2.0, 1.4),  # shape factor
    "Df": (0.05, 1.5, 1.0),  # peak friction coefficient (times the label mu when it is used)
    "Ef": (-1.0, 0.9, 0.0),  # curvature factor
    "Br": (3.0, 20.0, 10.0),
    "Cr": (0.8, 2.0, 1.4),
    "Dr": (0.05, 1.5, 1.0),
    "Er": (-1.0, 0.9, 0.0),
    "Cm1": (0.0, 15.0, 5.0),  # m/s^2 drive acceleration at full throttle, at rest
    "Cm2": (0.0, 0.5, 0.1),  # 1/s drive fade with speed
    "Cr0": (0.0, 1.5, 0.2),  # m/s^2 rolling resistance
    "Cr2": (0.0, 0.01, 0.001),  # 1/m aerodynamic drag
    "Cb": (0.0, 20.0, 8.0),  # m/s^2 brake deceleration demand at full brake
    "Iz": (0.4, 2.5, 1.0),  # yaw inertia / (m lf lr)
    "steer_gain": (0.05, 1.2, 0.4),  # rad road-wheel angle per unit steering command
    "steer_tau": (0.03, 0.6, 0.1),  # s steering actuator time constant
}
COEFF_NAMES = tuple(COEFFS)
P = len(COEFF_NAMES)


def coeff_bounds() -> tuple[Tensor, Tensor]:
    lo = torch.tensor([v[0] for v in COEFFS.values()])
    hi = torch.tensor([v[1] for v in COEFFS.values()])
    return lo, hi


def bound(logits: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Unbounded [N, P] -> physical coefficients inside [lo, hi]."""
    return lo + (hi - lo) * torch.sigmoid(logits)


def unbound(values: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Inverse of `bound` (values clamped just inside the range)."""
    u = ((values - lo) / (hi - lo)).clamp(1e-3, 1 - 1e-3)
    return torch.log(u) - torch.log1p(-u)


def nominal_coeffs(fit: dict[str, float] | None = None, dt: float = 0.1) -> Tensor:
    """Nominal coefficients [P], actuator and drivetrain terms taken from a bicycle fit if given."""
    v = {k: c[2] for k, c in COEFFS.items()}
    if fit:
        v["Cm1"], v["Cm2"] = fit["k_thr"], -fit.get("k_thr_v", 0.0)  # k_thr_v: older, linear fits
        v["Cb"], v["Cr0"], v["Cr2"] = fit["k_brake"], fit["k_roll"], fit["k_drag"]
        decay = min(max(fit["steer_decay"], 1e-3), 0.999)
        v["steer_gain"] = fit["steer_gain"] / (1 - decay)
        v["steer_tau"] = -dt / math.log(decay)
    return torch.tensor([min(max(v[k], COEFFS[k][0]), COEFFS[k][1]) for k in COEFF_NAMES])


def _pacejka(alpha: Tensor, b: Tensor, c: Tensor, e: Tensor) -> Tensor:
    ba = b * alpha
    return torch.sin(c * torch.atan(ba - e * (ba - torch.atan(ba))))


WHEELBASE_RANGE = (1.0, 6.0)  # m
LR_FRAC_RANGE = (0.25, 0.75)  # lr / wheelbase
ELLIPSE_MAX_USE = 0.999  # rho cap: keeps sqrt(1 - rho^2) and its gradient finite


class SingleTrack(nn.Module):
    """x[t+1] = RK4^substeps(x[t], a[t], coeffs, mu) for x = (vx, vy, yaw_rate, steer).

    The geometry (wheelbase, lr / wheelbase) is one global, bounded, learnable pair, initialised
    from the bicycle fit: a vehicle's geometry does not change from sample to sample.
    """

    def __init__(
        self,
        wheelbase: float,
        lr: float,
        dt: float,
        substeps: int = 2,
        v_blend: tuple[float, float] = (1.0, 3.0),
        combined_slip: bool = False,
    ) -> None:
        super().__init__()
        self.dt, self.substeps = float(dt), int(substeps)
        self.combined_slip = bool(combined_slip)
        self.v_lo, self.v_hi = float(v_blend[0]), float(v_blend[1])
        init = torch.tensor([wheelbase, lr / wheelbase])
        lo, hi = (
            torch.tensor([WHEELBASE_RANGE[0], LR_FRAC_RANGE[0]]),
            torch.tensor([WHEELBASE_RANGE[1], LR_FRAC_RANGE[1]]),
        )
        self.register_buffer("geom_lo", lo)
        self.register_buffer("geom_hi", hi)
        self.geom_logits = nn.Parameter(unbound(init, lo, hi))

    def geometry(self) -> tuple[Tensor, Tensor]:
        """(lf, lr) in m, 0-dim tensors."""
        wb, frac = bound(self.geom_logits, self.geom_lo, self.geom_hi).unbind(0)
        return wb * (1 - frac), wb * frac

    def derivs(self, x: Tensor, a: Tensor, c: Tensor, mu: Tensor, lf: Tensor, lr: Tensor) -> Tensor:
        """x [N, 4], a [N, 3], c [N, P] physical coefficients, mu [N], lf, lr [] -> dx/dt [N, 4]."""
        k = self._constants(a, c, mu, lf, lr)
        return torch.stack(self._derivs(x.unbind(1), k), dim=1)

    def _constants(self, a: Tensor, c: Tensor, mu: Tensor, lf: Tensor, lr: Tensor) -> dict[str, Tensor]:
        """What `_derivs` needs that does not change within a control period (each [N] or [])."""
        steer_cmd, thr, brk = a.unbind(1)
        # [P, N] rows (contiguous, so the elementwise ops below vectorise) or P scalars for [P]
        bf, cf, df, ef, br, cr, dr_, er, cm1, cm2, cr0, cr2, cb, iz, sg, st = (
            c.unbind(0) if c.dim() == 1 else c.t().contiguous().unbind(0)
        )
        wb = lf + lr
        return {
            "lf": lf,
            "lr": lr,
            "wb": wb,
            "bf": bf,
            "cf": cf,
            "ef": ef,
            "br": br,
            "cr": cr,
            "er": er,
            "cm1": cm1,
            "cm2": cm2,
            "cr0": cr0,
            "cr2": cr2,
            "st": st,
            "thr": thr,
            "kf": df * mu * (G * lr / wb),  # front tyre peak [m/s^2]
            "kr": dr_ * mu * (G * lf / wb),
            "amax": (mu * G * (df * lr + dr_ * lf) / wb).clamp(min=0.05),
            "brake": cb * brk,
            "iz": iz * lf * lr,
            "steer": sg * steer_cmd,
        }

    def _derivs(self, x: tuple[Tensor, ...], k: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The state derivative, component by component: x = (vx, vy, r, d) each [N]."""
        vx, vy, r, d = x
        lf, lr, wb = k["lf"], k["lr"], k["wb"]
        u = vx.abs().clamp(min=self.v_lo)
        fy_f = k["kf"] * _pacejka(d - torch.atan2(vy + lf * r, u), k["bf"], k["cf"], k["ef"])  # [N] m/s^2
        fy_r = k["kr"] * _pacejka(-torch.atan2(vy - lr * r, u), k["br"], k["cr"], k["er"])
        amax = k["amax"]
        drive, brake = torch.relu(k["cm1"] - k["cm2"] * vx) * k["thr"], k["brake"] * torch.tanh(vx / 0.3)
        if self.combined_slip:  # friction ellipse per axle (module docstring)
            use_f = (0.5 * brake.abs() / k["kf"].clamp(min=1e-3)).clamp(max=ELLIPSE_MAX_USE)
            use_r = ((drive - 0.5 * brake).abs() / k["kr"].clamp(min=1e-3)).clamp(max=ELLIPSE_MAX_USE)
            fy_f = fy_f * torch.sqrt(1 - use_f * use_f)
            fy_r = fy_r * torch.sqrt(1 - use_r * use_r)
        ax = amax * torch.tanh((drive - brake) / amax) - k["cr0"] * torch.tanh(vx / 0.5) - k["cr2"] * vx * vx.abs()
        cd, sd = torch.cos(d), torch.sin(d)
        dvx = ax - fy_f * sd + vy * r
        dvy_dyn = fy_r + fy_f * cd - vx * r
        dr_dyn = (lf * fy_f * cd - lr * fy_r) / k["iz"]
        td = torch.tan(d)
        lam = ((vx.abs() - self.v_lo) / (self.v_hi - self.v_lo)).clamp(0.0, 1.0)
        dvy = lam * dvy_dyn + (1 - lam) * (vx * td * lr / wb - vy) / 0.05
        dr = lam * dr_dyn + (1 - lam) * (vx * td / wb - r) / 0.05
        dd = (k["steer"] - d) / k["st"]
        return dvx, dvy, dr, dd

    def forward(self, x: Tensor, a: Tensor, c: Tensor, mu: Tensor | None = None) -> Tensor:
        """One control period: x [N, 4], a [N, 3], c [N, P] (or [P]), mu [N] | None -> [N, 4].

        The state is carried as four contiguous [N] tensors and the per-period constants are
        computed once: the arithmetic of stepping `derivs` on [N, 4], in far fewer tensor ops.
        """
        mu = x.new_ones(x.shape[0]) if mu is None else mu
        h = self.dt / self.substeps
        k = self._constants(a, c, mu, *self.geometry())
        xs = x.t().contiguous().unbind(0)  # 4 x [N]
        for _ in range(self.substeps):
            k1 = self._derivs(xs, k)
            k2 = self._derivs(tuple(xi + 0.5 * h * ki for xi, ki in zip(xs, k1)), k)
            k3 = self._derivs(tuple(xi + 0.5 * h * ki for xi, ki in zip(xs, k2)), k)
            k4 = self._derivs(tuple(xi + h * ki for xi, ki in zip(xs, k3)), k)
            xs = tuple(xi + (h / 6) * (a1 + 2 * a2 + 2 * a3 + a4) for xi, a1, a2, a3, a4 in zip(xs, k1, k2, k3, k4))
        return torch.stack(xs, dim=1)
