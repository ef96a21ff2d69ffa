"""Training of the learned families with Lightning: one-step + H-step autoregressive loss.

    states, poses = model.rollout(history, next H commands, mu)       [B, H, S], [B, H, 3]
    one_step   = mean(((states[:, 0] - true[:, 0]) / delta_std)^2)      normalised one-step change
    multi_step = mean(((states - true) / state_std)^2)                  whole H-step rollout
    position   = mean(|xy - true xy|^2)                                 m^2, H-step integrated pose
    loss = w1 one_step + w2 multi_step + w3 position
Early stopping watches `val/multi_step`; `KeepBest` keeps the weights of the best validation in
memory; a non-finite training loss raises `NonFiniteLossError` at once.
"""

from __future__ import annotations

import copy
import math

import lightning as L
import torch
from torch import Tensor

from s3.dynamics.base import DynamicsModel
from s3.dynamics.params import DistillParams
from s3.progress import Progress


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf."""


def rollout_losses(model: DynamicsModel, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The three loss terms on one batch (see the module docstring)."""
    norm = model.norm
    mu = batch["mu"] if model.use_mu else None
    states, poses = model.rollout(batch["hist_states"], batch["hist_actions"], batch["actions"], mu)
    true = batch["states"]
    return {
        "one_step": (((states[:, 0] - true[:, 0]) / norm.delta_std) ** 2).mean(),
        "multi_step": (((states - true) / norm.state_std) ** 2).mean(),
        "position": ((poses[..., :2] - batch["poses"][..., :2]) ** 2).sum(-1).mean(),
        "fde": (poses[:, -1, :2] - batch["poses"][:, -1, :2]).norm(dim=-1).mean(),
    }


class DynamicsLitModule(L.LightningModule):
    """Wraps any learned `DynamicsModel` for training."""

    def __init__(self, model: DynamicsModel, params: DistillParams) -> None:
        super().__init__()
        self.model, self.p = model, params

    def _loss(self, terms: dict[str, Tensor]) -> Tensor:
        w = self.p.loss
        return w.one_step * terms["one_step"] + w.multi_step * terms["multi_step"] + w.position * terms["position"]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        terms = rollout_losses(self.model, batch)
        loss = self._loss(terms)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"{self.model.family}: non-finite training loss at epoch {self.current_epoch}, step {self.global_step} "
                f"(one_step={terms['one_step'].item():.3g}, multi_step={terms['multi_step'].item():.3g})"
            )
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["states"]))
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        terms = rollout_losses(self.model, batch)
        n = len(batch["states"])
        self.log("val/loss", self._loss(terms), batch_size=n)
        self.log("val/one_step", terms["one_step"], batch_size=n)
        self.log("val/multi_step", terms["multi_step"], prog_bar=True, batch_size=n)
        self.log("val/fde_m", terms["fde"], prog_bar=True, batch_size=n)

    def configure_optimizers(self):
        # global physical parameters (geometry, the dytr prior's coefficients) are few scalars
        # shared by every sample: they get a larger step and no weight decay
        named = list(self.model.named_parameters())
        phys = [p for n, p in named if n.endswith(("geom_logits", "prior_logits"))]
        rest = [p for n, p in named if not n.endswith(("geom_logits", "prior_logits"))]
        groups = [{"params": rest}]
        if phys:
            groups.append({"params": phys, "lr": self.p.lr * self.p.physics_lr_factor, "weight_decay": 0.0})
        opt = torch.optim.AdamW(groups, lr=self.p.lr, weight_decay=self.p.weight_decay)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val/multi_step"}}


class KeepBest(L.Callback):
    """Keeps a copy of the weights at the best `val/multi_step` so far (the last good state)."""

    def __init__(self, monitor: str = "val/multi_step") -> None:
        self.monitor = monitor
        self.best = float("inf")
        self.best_epoch = -1
        self.state: dict[str, Tensor] | None = None
        self.history: list[dict[str, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        self.history.append({"epoch": trainer.current_epoch, **metrics})
        value = metrics.get(self.monitor, float("nan"))
        if value == value and value < self.best:  # finite-or-inf, not NaN
            self.best, self.best_epoch = value, trainer.current_epoch
            self.state = copy.deepcopy({k: v.detach().cpu() for k, v in pl_module.model.state_dict().items()})


class ProgressFeed(L.Callback):
    """The training batches done / max_epochs x batches per epoch, shown as the stage's progress
    (s3.progress: a bar on a terminal, a status line every 30 s otherwise), the epoch and the best
    validation error so far as its note. Early stopping ends it short of the total. `close()` after fit."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.progress: Progress | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.close()
        per_epoch = trainer.num_training_batches
        total = trainer.max_epochs * per_epoch if math.isfinite(per_epoch) and trainer.max_epochs > 0 else None
        self.progress = Progress(self.stage, total, "batches")

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if self.progress is not None:
            self.progress.advance()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        value = trainer.callback_metrics.get("val/multi_step")
        if self.progress is not None and not trainer.sanity_checking and value is not None:
            self.progress.note(
                f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}, val multi-step {float(value):.4g}"
            )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None
