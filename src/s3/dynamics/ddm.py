"""Deep Dynamics Model: a GRU reads the history and outputs the single-track model's coefficients.

    tokens [N, K, S+A(+1)] --GRU--> h [N, Hd] --MLP--> logits [N, P] --sigmoid into ranges--> c [N, P]
    s[t+1] = SingleTrack(s[t], a[t], c, mu)          (RK4 over the control period)

The coefficients (Pacejka B, C, D, E front/rear, Cm1, Cm2, Cr0, Cr2, Cb, yaw inertia, steering
gain and lag) stay inside physical bounds and can be inspected with `coefficients()`. The head
starts at the nominal coefficients (from the bicycle fit), so training starts from a sane car.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from s3.catalog import DDM
from s3.dynamics.base import DynamicsModel
from s3.dynamics.single_track import COEFF_NAMES, P, SingleTrack, bound, coeff_bounds, nominal_coeffs, unbound
from s3.dynamics.transformer import history_tokens

if TYPE_CHECKING:
    from s3.dynamics.params import DistillParams

INFERENCE_CHUNK = 1024  # sequences per chunk in the no-grad GRU (keeps its gates in the CPU's cache)


def fast_tanh(x: Tensor) -> Tensor:
    """tanh(x), on CPU as 2 sigmoid(2 x) - 1 (within 2e-7): torch's CPU sigmoid is vectorised, its tanh ~5x slower."""
    if x.device.type != "cpu":
        return x.tanh()
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


class DDMModel(DynamicsModel):
    """History -> bounded physical coefficients -> integrated single-track model."""

    family = DDM

    def __init__(
        self,
        history: int,
        dt: float,
        use_mu: bool,
        fit: dict[str, float] | None = None,
        gru_hidden: int = 48,
        mlp_hidden: int = 64,
        substeps: int = 2,
        combined_slip: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(history, dt, use_mu, **kw)
        self.fit = dict(fit) if fit else None
        self.sizes = {
            "gru_hidden": gru_hidden,
            "mlp_hidden": mlp_hidden,
            "substeps": substeps,
            "combined_slip": bool(combined_slip),
        }
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
        self.model = SingleTrack(wb, fit["lr"] if fit else wb / 2, dt, substeps, combined_slip=combined_slip)

    @classmethod
    def from_params(cls, params: DistillParams, dt: float, fit: dict[str, float]) -> DDMModel:
        return cls(
            params.history,
            dt,
            params.use_friction_label,
            fit=fit,
            substeps=params.single_track_substeps,
            combined_slip=params.combined_slip,
            **params.ddm.model_dump(exclude={"members"}),
        )

    def config(self) -> dict[str, Any]:
        return {**super().config(), "fit": self.fit, **self.sizes}

    def coefficients(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        """Physical coefficients [N, P] (order: single_track.COEFF_NAMES)."""
        tokens = history_tokens(self, hs, ha, a, mu)  # [N, K, F]
        if torch.is_grad_enabled():
            return bound(self.head(self.gru(tokens)[1][0]), self.c_lo, self.c_hi)
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=self.inference_bf16):
            if tokens.device.type == "cpu":  # the same maths by cache-sized chunks of the batch
                h = torch.cat(
                    [
                        self._gru_last(tokens[i : i + INFERENCE_CHUNK])
                        for i in range(0, tokens.shape[0], INFERENCE_CHUNK)
                    ]
                )
                lin1, _, lin2 = self.head
                logits = lin2(fast_tanh(lin1(h)))
            else:
                logits = self.head(self.gru(tokens)[1][0])
        return bound(logits.float(), self.c_lo, self.c_hi)

    def _gru_last(self, x: Tensor) -> Tensor:
        """The GRU's last hidden state [n, Hd] for tokens x [n, K, F], from h = 0 (inference).

        torch's GRU cell (gates r, z, n; h' = (h - n) z + n) with fused ops, the first step's
        hidden gates reduced to their bias (h = 0), and `fast_tanh`.
        """
        g, hd = self.gru, self.gru.hidden_size
        h = None
        for t in range(x.shape[1]):
            gi = F.linear(x[:, t], g.weight_ih_l0, g.bias_ih_l0)  # [n, 3 Hd] input gates
            gh = g.bias_hh_l0.expand_as(gi) if h is None else F.linear(h, g.weight_hh_l0, g.bias_hh_l0)  # hidden gates
            rz = torch.add(gh[:, : 2 * hd], gi[:, : 2 * hd]).sigmoid_()  # [n, 2 Hd] reset, update
            n = fast_tanh(torch.addcmul(gi[:, 2 * hd :], gh[:, 2 * hd :], rz[:, :hd]))  # [n, Hd]
            h = n - n * rz[:, hd:] if h is None else torch.addcmul(n, h - n, rz[:, hd:])
        return h

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        c = self.coefficients(hs, ha, a, mu)  # [N, P]
        return self.model(hs[:, -1], a, c, mu)

    def distill_summary(self, test_batch: Callable[[], Mapping[str, Tensor]], fit: dict[str, float]) -> dict[str, Any]:
        """The mean coefficients it predicts over (up to) the first 1024 test windows."""
        b, device = test_batch(), self.norm.state_mean.device
        mean = self.describe(
            b["hist_states"].to(device),
            b["hist_actions"].to(device),
            b["actions"][:, 0].to(device),
            b["mu"][:, 0].to(device),
        )
        return {"mean_coefficients_test": mean}

    def describe(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None = None) -> dict[str, float]:
        """Mean predicted coefficients over a batch, plus the learned geometry (for reports)."""
        with torch.no_grad():
            c = self.coefficients(hs, ha, a, mu if self.use_mu else None).mean(0)
            lf, lr = self.model.geometry()
        return {**dict(zip(COEFF_NAMES, c.tolist())), "lf": float(lf), "lr": float(lr)}
