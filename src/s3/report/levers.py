"""The ice levers' rows: one per variant of the `ice` experiment set (studies/ice.yaml).

    lever_rows(variants, baseline_evals) -> [row, ...]      (variants: records/experiments/ice/*.json)
    lever_targets(rows) -> [target, ...]                     issue #38's targets, met or short by how much

A variant that ran DAgger rounds (its result has a "dagger" record) has no row here: its train and eval
records are round 0's, the policy before any round; s3.report.dagger renders its rounds.

Each row: the variant's overrides (less the set's own: those of its `plain` variant); the choice
figures, on the icy and the dry procedural hold-out in the source (every training seed's `source`
score of records/train, so the set trains with `train.seed_selection: source`), mean with the
seeds' range and their n; the report figures, on the evaluation suite's ice and nominal conditions
(completion with its interval and n, the ice lap time), beside the cautious PID's ice lap time (the
blind baseline to beat on ice); and the cost: the distillation wall clock (every member of an
ensemble) and the mean wall clock of one training seed. The hold-out chooses, the suite reports
(docs/protocol.md).

The targets: the blind variant chosen on the hold-out (highest lowest-seed icy score, then highest
mean; a variant whose policy observes the surface is not blind) against ICE_EVERY_SEED there, and
on the suite against SUITE_ICE and the cautious PID's ice lap time; the best variant that sees the
surface against SUITE_ICE; and the chosen variant's dry figures against `plain`'s, at most
NOMINAL_DROP lower.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from s3.catalog import PID_CAUTIOUS, observes_surface
from s3.dagger import DAGGER

SET = "ice"  # records/experiments/<SET>/, studies/<SET>.yaml
PLAIN = "plain"  # the set's variant without a lever: its overrides are the set's own
ICE_EVERY_SEED = 0.90  # lap share on the icy procedural hold-out, every seed of the best blind variant
SUITE_ICE = 0.95  # completion on the evaluation suite's ice: the best blind variant, and the one that sees
NOMINAL_DROP = 0.02  # the most the chosen variant's dry figures may fall below plain's


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
    """One row per variant, `plain` first, the others in the order given (see the module docstring)."""
    cautious_ev = baseline_evals.get(PID_CAUTIOUS) or {}
    cautious = _suite(cautious_ev, "ice", "lap_time_s")["estimate"]
    cautious_done = _suite(cautious_ev, "ice", "completion_rate")["estimate"]
    shared = dict((variants.get(PLAIN) or {}).get("params") or {})  # the set's own overrides: plain has no other
    rows = []
    for name, v in sorted(variants.items(), key=lambda kv: kv[0] != PLAIN):
        if v.get(DAGGER):  # its rounds: s3.report.dagger
            continue
        train, ev, distill = v.get("train") or {}, v.get("eval") or {}, v.get("distill") or {}
        seeds = (train.get("seed_selection") or {}).get("seeds") or []
        walls = [float(s["wall_s"]) for s in seeds if s.get("wall_s") is not None]
        points = [_point(s) for s in seeds]
        laps = [float(p["lap_time_s"]) for p in points if p["lap_time_s"]]
        params = v.get("params") or {}
        policy = train.get("policy", ev.get("driver"))
        rows.append(
            {
                "variant": name,
                "policy": policy,
                "family": train.get("family"),
                "sees_surface": observes_surface(str(policy)) is True or params.get("train.env.surface_label") is True,
                "overrides": {k: x for k, x in params.items() if k not in shared},
                "holdout_ice": spread(seed_scores(seeds, "score_ice")),
                "holdout_dry": spread(seed_scores(seeds, "score_dry")),
                "holdout_lap_time_s": spread(laps),
                "suite_ice_completion": _suite(ev, "ice", "completion_rate"),
                "suite_nominal_completion": _suite(ev, "nominal", "completion_rate"),
                "suite_ice_lap_time_s": _suite(ev, "ice", "lap_time_s"),
                "suite_nominal_lap_time_s": _suite(ev, "nominal", "lap_time_s"),
                "cautious_ice_lap_time_s": cautious,
                "cautious_ice_completion": cautious_done,
                "seed_points": points,
                "distill_wall_s": (distill.get("train") or {}).get("wall_s"),
                "members": (distill.get("ensemble") or {}).get("members", 1),
                "train_wall_per_seed_s": sum(walls) / len(walls) if walls else None,
            }
        )
    return rows


def _point(seed: Mapping[str, Any]) -> dict[str, Any]:
    """One training seed on the source hold-out: its icy and dry lap share and its mean lap time (s)."""
    src = seed.get("source") or {}
    return {
        "seed": seed.get("seed"),
        "ice": src.get("score_ice"),
        "dry": src.get("score_dry"),
        "lap_time_s": src.get("mean_lap_time_s"),
    }


def _best(rows: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The row with the highest lowest-seed icy hold-out score (then mean), among rows that have one."""
    scored = [r for r in rows if r["holdout_ice"]["n"]]
    return max(scored, key=lambda r: (r["holdout_ice"]["min"], r["holdout_ice"]["mean"]), default=None)


def _target(target: str, variant: str | None, measured: Any, needed: Any, above: bool = True) -> dict[str, Any]:
    """Met when measured >= needed (`above`), else when measured < needed; short_by >= 0; None when unmeasured."""
    row = {"target": target, "variant": variant, "measured": measured, "needed": needed, "met": None, "short_by": None}
    if measured is not None and needed is not None:
        row["met"] = measured >= needed if above else measured < needed
        row["short_by"] = max(0.0, needed - measured) if above else max(0.0, measured - needed)
    return row


def lever_targets(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Issue #38's targets on the set's rows (see the module docstring); empty when no blind variant was scored."""
    blind = _best([r for r in rows if not r["sees_surface"]])
    if blind is None:
        return []
    seeing = _best([r for r in rows if r["sees_surface"]])
    plain = next((r for r in rows if r["variant"] == PLAIN), None)
    name = blind["variant"]
    out = [
        _target("icy hold-out lap share, lowest seed", name, blind["holdout_ice"]["min"], ICE_EVERY_SEED),
        _target("suite ice laps completed", name, blind["suite_ice_completion"].get("estimate"), SUITE_ICE),
        _target(
            "suite ice lap time (s), below the cautious PID's",
            name,
            blind["suite_ice_lap_time_s"].get("estimate"),
            blind.get("cautious_ice_lap_time_s"),
            above=False,
        ),
    ]
    if seeing is not None:
        completion = seeing["suite_ice_completion"].get("estimate")
        out.append(_target("suite ice laps completed, seeing the surface", seeing["variant"], completion, SUITE_ICE))
    if plain is not None:
        for label, key, field in (
            ("dry hold-out lap share (mean)", "holdout_dry", "mean"),
            ("suite nominal laps completed", "suite_nominal_completion", "estimate"),
        ):
            ref = plain[key].get(field)
            floor = None if ref is None else ref - NOMINAL_DROP
            out.append(_target(f"{label}, at most {NOMINAL_DROP} below plain's", name, blind[key].get(field), floor))
    return out
