"""An ensemble of M distilled models of one family: one drawn per car, their disagreement measured.

    ens = Ensemble([m0, m1, ...])             # members: same family, history, dt and label use
    ens.step(hs, ha, a, mu)                   # [N, S]: the members' mean (metrics, probes, tables)
    ens.step_assigned(hs, ha, a, mu, member)  # [N, S]: car i runs on member[i] (one pass per car in all)
    preds = ens.members_step(hs, ha, a, mu)   # [M, N, S]: every member on every car (M passes)
    disagreement(preds, ens.norm.delta_std)   # [N]: spread of the members' next-state change

Disagreement of one step is the members' standard deviation of the next-state change, each state
dimension in units of its training-set change std (Normalizer.delta_std), root-mean-squared over
the dimensions: 0 when the members agree, about 1 when they differ by a typical step's change.
Off the data's support the members, trained from different initialisations on different orders
of the same windows, extrapolate differently, so it rises there (tests/test_ensemble.py).

`calibration` checks that it means something on held-out source data: per surface, the members'
spread of the predicted position after h seconds against the mean prediction's real error there
(Spearman rho and the error by decile of spread).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from scipy import stats
from torch import Tensor, nn

from s3.dynamics.base import DynamicsModel


class Ensemble(DynamicsModel):
    """M members of one family behind the DynamicsModel interface (module docstring)."""

    def __init__(self, members: list[DynamicsModel]) -> None:
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
        first = members[0]
        keys = {(m.family, m.history, m.dt, m.use_mu, m.state_dim, m.action_dim) for m in members}
        if len(keys) != 1:
            raise ValueError(f"ensemble members differ in family, history, dt or label use: {sorted(keys)}")
        super().__init__(first.history, first.dt, first.use_mu, first.state_dim, first.action_dim)
        self.family = first.family  # an ensemble of ddm is a ddm model to every consumer
        self.fitted_only = first.fitted_only
        self.members = nn.ModuleList(members)
        self.norm.load_state_dict(first.norm.state_dict())  # the shared training-set statistics

    def __len__(self) -> int:
        return len(self.members)

    def config(self) -> dict[str, Any]:
        return self.members[0].config()

    @property
    def inference_compile(self) -> bool:  # type: ignore[override]
        return bool(self.members[0].inference_compile)

    @inference_compile.setter
    def inference_compile(self, value: bool) -> None:
        for m in self.members:
            m.inference_compile = value

    def members_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None = None) -> Tensor:
        """Every member's next state [M, N, S]."""
        return torch.stack([m.step(hs, ha, a, mu) for m in self.members])

    def forward_step(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None) -> Tensor:
        """The members' mean next state [N, S]."""
        return self.members_step(hs, ha, a, mu).mean(dim=0)

    def step_assigned(self, hs: Tensor, ha: Tensor, a: Tensor, mu: Tensor | None, member: Tensor) -> Tensor:
        """Car i's next state from member[i] [N] (long): each member runs on its own cars only."""
        out = hs.new_empty(hs.shape[0], self.state_dim)
        for j, model in enumerate(self.members):  # M small; the cars are batched
            ids = (member == j).nonzero(as_tuple=False).squeeze(1)
            if ids.numel():
                out[ids] = model.step(hs[ids], ha[ids], a[ids], None if mu is None else mu[ids])
        return out


def disagreement(preds: Tensor, delta_std: Tensor) -> Tensor:
    """[M, N, S] member predictions -> [N]: RMS over S of the members' std, in units of delta_std [S]."""
    return (preds.std(dim=0, unbiased=False) / delta_std).pow(2).mean(dim=-1).sqrt()


@torch.inference_mode()
def member_rollouts(ens: Ensemble, batch: dict[str, Tensor]) -> Tensor:
    """Each member's open-loop positions [M, W, H, 2] over a batch of test windows (s3.dynamics.dataset)."""
    mu = batch["mu"] if ens.use_mu else None
    return torch.stack(
        [m.rollout(batch["hist_states"], batch["hist_actions"], batch["actions"], mu)[1][..., :2] for m in ens.members]
    )


def calibration(
    spread: np.ndarray, error: np.ndarray, labels: np.ndarray, splits: tuple[str, ...], bins: int = 10
) -> dict[str, Any]:
    """Spread [W] of the members' positions against the mean prediction's error [W] (m), per split of
    `labels` [W] ('all' = every window): Spearman rho with its p-value, and per decile of spread its
    mean spread and mean error (None where a split has fewer than `bins` windows)."""
    out: dict[str, Any] = {}
    for split in splits:
        m = np.ones(len(spread), bool) if split == "all" else labels == split
        if m.sum() < bins:
            out[split] = None
            continue
        s, e = spread[m], error[m]
        rho, p = stats.spearmanr(s, e)
        edges = np.quantile(s, np.linspace(0, 1, bins + 1))
        which = np.clip(np.searchsorted(edges, s, side="right") - 1, 0, bins - 1)
        out[split] = {
            "windows": int(m.sum()),
            "spearman_rho": float(rho),
            "p_value": float(p),
            "spread_m": [float(s[which == b].mean()) if (which == b).any() else None for b in range(bins)],
            "error_m": [float(e[which == b].mean()) if (which == b).any() else None for b in range(bins)],
        }
    return out
