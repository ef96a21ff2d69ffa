"""Family name -> model class, and construction from DistillParams."""

from __future__ import annotations

from typing import Any

from s3.dynamics.base import DynamicsModel
from s3.dynamics.bicycle import BicycleModel
from s3.dynamics.ddm import DDMModel
from s3.dynamics.dytr import DyTrModel
from s3.dynamics.params import DistillParams
from s3.dynamics.transformer import TransformerModel

FAMILY_CLASSES: dict[str, type[DynamicsModel]] = {
    "bicycle": BicycleModel,
    "ddm": DDMModel,
    "transformer": TransformerModel,
    "dytr": DyTrModel,
}


def build_model(family: str, config: dict[str, Any]) -> DynamicsModel:
    """A model of `family` from its stored `config()`."""
    if family not in FAMILY_CLASSES:
        raise ValueError(f"unknown model family {family!r}; choose from {', '.join(FAMILY_CLASSES)}")
    return FAMILY_CLASSES[family](**config)


def new_model(family: str, params: DistillParams, dt: float, fit: dict[str, float]) -> DynamicsModel:
    """A fresh model of `family` sized by `params`; `fit` is the bicycle least-squares fit."""
    common = {"history": params.history, "dt": dt, "use_mu": params.use_friction_label}
    sub, slip = params.single_track_substeps, params.combined_slip
    if family == "bicycle":
        return BicycleModel(**common, fit=fit)
    if family == "ddm":
        return DDMModel(**common, fit=fit, substeps=sub, combined_slip=slip, **params.ddm.model_dump())
    if family == "transformer":
        return TransformerModel(**common, **params.transformer.model_dump())
    if family == "dytr":
        return DyTrModel(**common, fit=fit, substeps=sub, combined_slip=slip, **params.dytr.model_dump())
    raise ValueError(f"unknown model family {family!r}; choose from {', '.join(FAMILY_CLASSES)}")
