"""Deep Dynamics Model: a GRU reads the history and outputs the single-track model's coefficients.

    tokens [N, K, S+A(+1)] --GRU--> h [N, Hd] --MLP--> logits [N, P] --sigmoid into ranges--> c [N, P]
    s[t+1] = SingleTrack(s[t], a[t], c, mu)          (RK4 over the control period)

The coefficients (Pacejka B, C, D, E front/rear, Cm1, Cm2, Cr0, Cr2, Cb, yaw inertia, steering
gain and lag) stay inside physical bounds and can be inspected with `coefficients()`. The head
starts at the nominal coefficients (from the bicycle fit), so training starts from a sane car.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from s3.dynamics.base import DynamicsModel
from s3.dynamics.single_track import COEFF_NAMES, P, SingleTrack, bound, coeff_bounds, nominal_coeffs, unbound
from s3.dynamics.transformer import history_tokens


class DDMModel(DynamicsModel):
    """History -> bounded physical coefficients -> integrated single-track model."""

    family = "ddm"

    def __init__(
        self,
        history: int,
        dt: float,
        use_mu: bool,
        fit: dict[str, float] | None = None,
        gru_hidden: int = 48,
        mlp_hidden: int = 64,
        substeps: int = 2,
        **kw: Any,
    ) -> None:
        super().__init__(history, dt, use_mu, **kw)
        self.fit = dict(fit) if fit else None
        self.sizes = {"gru_hidden": gru_hidden, "mlp_hidden": mlp_hidden, "substeps": substeps}
        in_dim = self.state_dim + self.action_dim + int(use_mu)
        self.gru = nn.GRU(in_dim, gru_hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(gru_hidden, mlp_hidden), nn.Tanh(), nn.Linear(mlp_hidden, P))
        lo, hi = coeff_bounds()
        self.register_buffer("c_lo", lo)
        self.register_buffer("c_hi", hi)
        with torch.no_grad():  # start at the nominal car
            self.head[-1].weight.mul_(0.01)
            self.head[-1].bias.copy_(unbound(nominal_coeffs(fit, dt), lo, hi))
        wb = fit["wheelbase"] if fit else 2.7
        self.model = SingleTrack(wb, fit["lr"] if fit else wb / 2, dt, substeps)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "fit": self.fit, **self.sizes}

    def coefficients(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        """Physical coefficients [N, P] (order: single_track.COEFF_NAMES)."""
        _, h = self.gru(history_tokens(self, hs, ha, a, mu))  # h [1, N, Hd]
        return bound(self.head(h[0]), self.c_lo, self.c_hi)

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        c = self.coefficients(hs, ha, a, mu)  # [N, P]
        return self.model(hs[:, -1], a, c, mu)

    def describe(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None = None) -> dict[str, float]:
        """Mean predicted coefficients over a batch, plus the learned geometry (for reports)."""
        with torch.no_grad():
            c = self.coefficients(hs, ha, a, mu if self.use_mu else None).mean(0)
            lf, lr = self.model.geometry()
        return {**dict(zip(COEFF_NAMES, c.tolist())), "lf": float(lf), "lr": float(lr)}
