"""Parameters of the distill stage (the `distill:` section of params.yaml).

Defaults are sized so that all four families train on ~200k rows in well under 15 minutes on
two CPU cores: each epoch samples `train_windows_per_epoch` windows rather than every window,
models are small. The budget is `max_epochs` (with early stopping), so a family distils to the
same weights however busy the machine is; `max_minutes` is only a safety cap on its wall time.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Network(_Section):
    """A learned family's section: its size, and how many models it distils."""

    members: int = Field(
        1,
        ge=1,
        le=16,
        description="ensemble members (1 = one model): M models from seeds seed .. seed + M - 1, on the same split "
        "in different window orders (s3.dynamics.ensemble)",
    )


class TransformerParams(_Network):
    """Size of the black-box causal transformer."""

    d_model: int = Field(64, ge=8, le=1024, description="token width")
    layers: int = Field(2, ge=1, le=12)
    heads: int = Field(4, ge=1, le=16, description="must divide d_model")
    mlp_ratio: int = Field(2, ge=1, le=8)


class DdmParams(_Network):
    """Size of the Deep Dynamics Model's coefficient network."""

    gru_hidden: int = Field(48, ge=4, le=1024)
    mlp_hidden: int = Field(64, ge=4, le=1024)


class DytrParams(_Network):
    """Size of the residual transformer on top of the single-track prior."""

    d_model: int = Field(48, ge=8, le=1024)
    layers: int = Field(2, ge=1, le=12)
    heads: int = Field(4, ge=1, le=16)
    mlp_ratio: int = Field(2, ge=1, le=8)


class LossWeights(_Section):
    """Weights of the training loss terms (all errors are normalised, see lightning_module)."""

    one_step: float = Field(1.0, ge=0.0, description="one-step state-change error")
    multi_step: float = Field(1.0, ge=0.0, description="H-step autoregressive state error")
    position: float = Field(0.1, ge=0.0, description="H-step integrated position error (m^2)")


class DistillParams(_Section):
    """Everything the distill stage needs besides the rollouts."""

    seed: int = Field(0, ge=0, le=2**31 - 1)
    history: int = Field(10, ge=1, le=200, description="K: history length in control steps")
    horizon: int = Field(20, ge=1, le=500, description="H: training rollout length in control steps")
    use_friction_label: bool = Field(True, description="feed the surface label mu_mean to the models")
    extra_rollouts: list[str] = Field(
        default_factory=list,
        description="rollout folders read beside the collected data (DAgger rounds, s3.dagger.round: rows where a "
        "policy drove); their episodes only train, the split of the collected data stays as without them. [] = the "
        "collected data alone",
    )
    val_fraction: float = Field(0.1, gt=0.0, lt=0.5, description="share of episodes for validation")
    test_fraction: float = Field(0.1, gt=0.0, lt=0.5, description="share of episodes held out for metrics")
    batch_size: int = Field(256, ge=1, le=65536)
    max_epochs: int = Field(14, ge=1, le=10000)
    train_windows_per_epoch: int = Field(8192, ge=0, description="windows sampled per epoch (0 = all)")
    val_windows: int = Field(2048, ge=1, description="fixed validation windows (evenly spread)")
    lr: float = Field(2e-3, gt=0.0, le=1.0)
    physics_lr_factor: float = Field(5.0, gt=0.0, le=1000.0, description="lr multiplier of global physical parameters")
    weight_decay: float = Field(1e-4, ge=0.0, le=1.0)
    grad_clip: float = Field(1.0, gt=0.0)
    patience: int = Field(5, ge=1, le=1000, description="early stopping: validations without improvement")
    max_minutes: float = Field(
        15.0,
        gt=0.0,
        description="safety cap on one family's training wall time (the result then depends on the machine)",
    )
    transformer: TransformerParams = TransformerParams()
    ddm: DdmParams = DdmParams()
    dytr: DytrParams = DytrParams()
    single_track_substeps: int = Field(2, ge=1, le=50, description="RK4 substeps per control period")
    combined_slip: bool = Field(
        False,
        description="friction ellipse per axle in the single-track physics of ddm and dytr (drive and brake use up "
        "lateral grip)",
    )
    loss: LossWeights = LossWeights()
    eval_stride: int = Field(5, ge=1, description="steps between open-loop test rollout starts")
    divergence_seconds: float = Field(10.0, gt=0.0)
    throughput_sizes: list[int] = Field(default_factory=lambda: [1, 256, 4096])
    device: Literal["auto", "cpu", "cuda"] = "auto"
    torch_threads: int = Field(0, ge=0, le=256, description="torch intra-op threads (0 = torch default)")
    progress_bar: bool = True

    def members(self, family: str) -> int:
        """How many models `family` distils: its section's `members` (1: one model, no ensemble)."""
        section = getattr(self, family, None)
        return int(getattr(section, "members", 1))
