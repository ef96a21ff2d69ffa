"""The ice levers' rows: one per variant of the `ice` experiment set (studies/ice.yaml).

    lever_rows(variants, baseline_evals) -> [row, ...]      (variants: records/experiments/ice/*.json)

Each row: the variant's overrides (less the set's own: those of its `plain` variant); the choice
figures, on the icy and the dry procedural hold-out in the source (every training seed's `source`
score of records/train, so the set trains with `train.seed_selection: source`), mean with the
seeds' range and their n; the report figures, on the evaluation suite's ice and nominal conditions
(completion with its interval and n, the ice lap time), beside the cautious PID's ice lap time (the
blind baseline to beat on ice); and the cost: the distillation wall clock (every member of an
ensemble) and the mean wall clock of one training seed. The hold-out chooses, the suite reports
(docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from s3.catalog import PID_CAUTIOUS

SET = "ice"  # records/experiments/<SET>/, studies/<SET>.yaml
PLAIN = "plain"  # the set's variant without a lever: its overrides are the set's own


def seed_scores(seeds: list[Mapping[str, Any]], key: str) -> list[float]:
    """Each seed's source hold-out score `key` (score, score_dry, score_ice), where the seed choice measured it."""
    return [float(s["source"][key]) for s in seeds if (s.get("source") or {}).get(key) is not None]


def spread(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _suite(ev: Mapping[str, Any], condition: str, metric: str) -> dict[str, Any]:
    cell = (((ev.get("summary") or {}).get("suite") or {}).get(condition) or {}).get(metric) or {}
    return {k: cell.get(k) for k in ("estimate", "ci95", "n_seeds", "n_units")}


def lever_rows(variants: Mapping[str, Mapping[str, Any]], baseline_evals: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per variant, in the order given (see the module docstring)."""
    cautious = _suite(baseline_evals.get(PID_CAUTIOUS) or {}, "ice", "lap_time_s")["estimate"]
    shared = dict((variants.get(PLAIN) or {}).get("params") or {})  # the set's own overrides: plain has no other
    rows = []
    for name, v in variants.items():
        train, ev, distill = v.get("train") or {}, v.get("eval") or {}, v.get("distill") or {}
        seeds = (train.get("seed_selection") or {}).get("seeds") or []
        walls = [float(s["wall_s"]) for s in seeds if s.get("wall_s") is not None]
        rows.append(
            {
                "variant": name,
                "overrides": {k: x for k, x in (v.get("params") or {}).items() if k not in shared},
                "holdout_ice": spread(seed_scores(seeds, "score_ice")),
                "holdout_dry": spread(seed_scores(seeds, "score_dry")),
                "suite_ice_completion": _suite(ev, "ice", "completion_rate"),
                "suite_nominal_completion": _suite(ev, "nominal", "completion_rate"),
                "suite_ice_lap_time_s": _suite(ev, "ice", "lap_time_s"),
                "cautious_ice_lap_time_s": cautious,
                "distill_wall_s": (distill.get("train") or {}).get("wall_s"),
                "members": (distill.get("ensemble") or {}).get("members", 1),
                "train_wall_per_seed_s": sum(walls) / len(walls) if walls else None,
            }
        )
    return rows
