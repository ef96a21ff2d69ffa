"""The model families the code implements: one line each, "module:class".

A new family: its name and what it is in s3.catalog, its module in s3/dynamics (a `DynamicsModel`
subclass with `family`, `from_params` and `config`), one line in FAMILY_CLASSES, and an entry under
`families` in params.yaml (the families the pipeline distils, trains and evaluates). The names are the
catalog's (tests/test_literals.py checks that this map covers exactly s3.catalog.FAMILIES); the
"module:class" strings are the one place a family's module is named. Importing this module imports no model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from s3.catalog import BICYCLE, DDM, DYTR, TRANSFORMER

if TYPE_CHECKING:
    from s3.dynamics.base import DynamicsModel
    from s3.dynamics.params import DistillParams

FAMILY_CLASSES = {
    BICYCLE: "s3.dynamics.bicycle:BicycleModel",
    DDM: "s3.dynamics.ddm:DDMModel",
    TRANSFORMER: "s3.dynamics.transformer:TransformerModel",
    DYTR: "s3.dynamics.dytr:DyTrModel",
}
FAMILIES = tuple(FAMILY_CLASSES)  # the families the code implements: s3.catalog.FAMILIES, in its order


def family_class(family: str) -> type[DynamicsModel]:
    """The model class of `family`; ValueError naming the known families."""
    if family not in FAMILY_CLASSES:
        raise ValueError(f"unknown model family {family!r}; choose from {', '.join(FAMILY_CLASSES)}")
    module, name = FAMILY_CLASSES[family].split(":")
    cls = getattr(importlib.import_module(module), name)
    if cls.family != family:
        raise ValueError(f"{FAMILY_CLASSES[family]}.family is {cls.family!r}, registered as {family!r}")
    return cls


def build_model(family: str, config: dict[str, Any]) -> DynamicsModel:
    """A model of `family` from its stored `config()`."""
    return family_class(family)(**config)


def new_model(family: str, params: DistillParams, dt: float, fit: dict[str, float]) -> DynamicsModel:
    """A fresh model of `family` sized by `params`; `fit` is the bicycle least-squares fit."""
    return family_class(family).from_params(params, dt, fit)
