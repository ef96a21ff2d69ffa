"""A distilled route's measured wall clock: what the report sets beside `direct`'s.

    route_budget(records_dir, policy, model) -> {budget_s, collect_s, distill_s, train_s, policy, model, from}

The route is the collection (records/collect.json `wall_seconds_total`), the distillation of the model
(records/distill/<model>.json `total_wall_s`) and the training of every seed of the policy
(records/train/<policy>.json `seed_selection.rl_wall_s`, or `train.wall_s` for one seed); `budget_s` is
their sum. The report's rule for `direct` (s3.evaluate.ttq_routes.budget_rule) lists it for every family
beside direct's own wall clock, and, for a `direct` given a fixed `train.direct.budget_s`, checks that
budget against the slowest family's route. A record that is missing or lacks its number is an error
naming the file and the stage that writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class RouteNotMeasured(RuntimeError):
    """A record the route's wall clock needs is missing or has no wall clock."""


def _number(path: Path, stage: str, *keys: tuple[str, ...]) -> float:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RouteNotMeasured(
            f"{path}: {e.__class__.__name__}: the route's wall clock reads it: run `dvc repro {stage}` first"
        ) from None
    for key in keys:  # the first path that holds a number
        value: Any = record
        for k in key:
            value = value.get(k) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return float(value)
    raise RouteNotMeasured(f"{path}: no wall clock at {' or '.join('.'.join(k) for k in keys)} (written by {stage})")


def route_budget(records_dir: str | Path, policy: str, model: str) -> dict[str, Any]:
    """The measured wall clock (s) of collect + distill@model + train@policy (every seed), and its parts."""
    records = Path(records_dir)
    collect = _number(records / "collect.json", "collect", ("wall_seconds_total",), ("wall_seconds_this_run",))
    distill = _number(records / "distill" / f"{model}.json", f"distill@{model}", ("total_wall_s",))
    train = _number(
        records / "train" / f"{policy}.json", f"train@{policy}", ("seed_selection", "rl_wall_s"), ("train", "wall_s")
    )
    return {
        "budget_s": round(collect + distill + train, 1),
        "collect_s": collect,
        "distill_s": distill,
        "train_s": train,
        "policy": policy,
        "model": model,
        "from": "records/collect.json, records/distill/<model>.json, records/train/<policy>.json",
    }
