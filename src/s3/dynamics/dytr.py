"""Residual learning: a transformer corrects a fixed-coefficient single-track prior.

    prior  = SingleTrack(s[t], a[t], c_fixed, mu)                   [N, S]   (c_fixed: one set of
             bounded coefficients for the whole dataset, trained jointly, initialised nominal)
    z      = transformer(history tokens, + embedding of the prior's normalised change) [N, D]
    s[t+1] = prior + head(z) * delta_std                             (head starts at zero)

So the model starts as the physics prior and the transformer only learns what the prior misses
(tyre saturation on ice, combined slip, load transfer, actuator limits...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from s3.catalog import DYTR
from s3.dynamics.base import DynamicsModel
from s3.dynamics.single_track import COEFF_NAMES, SingleTrack, bound, coeff_bounds, nominal_coeffs, unbound
from s3.dynamics.transformer import CausalTransformer, history_tokens

if TYPE_CHECKING:
    from s3.dynamics.params import DistillParams


class DyTrModel(DynamicsModel):
    """Single-track prior with fitted fixed coefficients + transformer residual."""

    family = DYTR

    def __init__(
        self,
        history: int,
        dt: float,
        use_mu: bool,
        fit: dict[str, float] | None = None,
        d_model: int = 48,
        layers: int = 2,
        heads: int = 4,
        mlp_ratio: int = 2,
        substeps: int = 2,
        combined_slip: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(history, dt, use_mu, **kw)
        self.fit = dict(fit) if fit else None
        self.sizes = {
            "d_model": d_model,
            "layers": layers,
            "heads": heads,
            "mlp_ratio": mlp_ratio,
            "substeps": substeps,
            "combined_slip": bool(combined_slip),
        }
        lo, hi = coeff_bounds()
        self.register_buffer("c_lo", lo)
        self.register_buffer("c_hi", hi)
        self.prior_logits = nn.Parameter(unbound(nominal_coeffs(fit, dt), lo, hi))  # [P]
        wb = fit["wheelbase"] if fit else 2.7
        self.prior = SingleTrack(wb, fit["lr"] if fit else wb / 2, dt, substeps, combined_slip=combined_slip)
        in_dim = self.state_dim + self.action_dim + int(use_mu)
        self.net = CausalTransformer(in_dim, d_model, layers, heads, mlp_ratio, history)
        self.prior_embed = nn.Linear(self.state_dim, d_model)
        self.head = nn.Linear(d_model, self.state_dim)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_params(cls, params: DistillParams, dt: float, fit: dict[str, float]) -> DyTrModel:
        return cls(
            params.history,
            dt,
            params.use_friction_label,
            fit=fit,
            substeps=params.single_track_substeps,
            combined_slip=params.combined_slip,
            **params.dytr.model_dump(exclude={"members"}),
        )

    def config(self) -> dict[str, Any]:
        return {**super().config(), "fit": self.fit, **self.sizes}

    def prior_coefficients(self) -> Tensor:
        """The prior's physical coefficients [P] (order: single_track.COEFF_NAMES)."""
        return bound(self.prior_logits, self.c_lo, self.c_hi)

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        s0 = hs[:, -1]  # [N, S]
        prior = self.prior(s0, a, self.prior_coefficients(), mu)  # [N, S]
        prior_change = (prior - s0 - self.norm.delta_mean) / self.norm.delta_std
        z = self.net(
            history_tokens(self, hs, ha, a, mu),
            extra_last=self.prior_embed(prior_change),
            bf16=self.inference_bf16,
            compiled=self.inference_compile,
        )  # [N, D]
        return prior + self.head(z) * self.norm.delta_std

    def distill_summary(self, test_batch: Callable[[], Mapping[str, Tensor]], fit: dict[str, float]) -> dict[str, Any]:
        """The prior's coefficients and geometry."""
        return {"prior_coefficients": self.describe()}

    def describe(self) -> dict[str, float]:
        """The prior's coefficients and geometry (for reports)."""
        with torch.no_grad():
            lf, lr = self.prior.geometry()
            return {**dict(zip(COEFF_NAMES, self.prior_coefficients().tolist())), "lf": float(lf), "lr": float(lr)}
