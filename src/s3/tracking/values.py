"""Values as MLflow takes them: nested dicts flattened to dotted keys, metrics as (key, step, value).

Only finite real numbers are metrics (`number`); bools, strings, None, NaN and inf are dropped.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any


def number(v: Any) -> float | None:
    """A finite real number as float; None for anything else (bools, strings, None, NaN, inf)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are kept as values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def stage_metrics(metrics: Mapping[str, Any]) -> list[tuple[str, int, Any]]:
    """(key, step, value) of a stage's metrics: numeric leaves at step 0 under their dotted key; a
    list of numbers is a curve (step = index). Other leaves are dropped by `Run.log_curve`."""
    out: list[tuple[str, int, Any]] = []
    for k, v in flatten(metrics).items():
        out += [(k, i, x) for i, x in enumerate(v)] if isinstance(v, list) else [(k, 0, v)]
    return out
