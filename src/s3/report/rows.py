"""One row of the report per policy: its prediction accuracy next to its policy quality.

    policy_row(name, kind, distill, ev, train, prediction_from) -> the row dict of records/report.json

reads one policy's records/distill (its model's), records/eval and records/train dicts; every
value that was not measured is None. The quality rank is left None here (s3.report.ranks
ranks the families against each other).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from s3 import headline
from s3.catalog import BASELINE, FAMILY, ORACLE, ORACLE_KIND
from s3.report.inputs import BASELINES, get, num

CONDITIONS = ("nominal", "ice")
ERROR_METRICS = ("ade_1s_all", "ade_2s_all", "ade_1s_ice", "ade_2s_ice")
PROBE_METRICS = ("probe_3s_asphalt", "probe_3s_ice")  # manoeuvre probes (s3.evaluate.probes), from records/eval
CORRELATED = (*ERROR_METRICS, *PROBE_METRICS)
POLICY_KEYS = (
    "mean_abs_steering_rate",
    "mean_abs_steering_jerk",
    "mean_abs_lateral_jerk",
    "pedal_switches",
    "off_track_events",
    "time_off_track_s",
    "min_edge_margin_m",
    "mean_abs_lateral_error_m",
    "patch_crossing_rate",
)
GAP_KEYS = ("completion_rate", "lap_share", "lap_time_s")


def prediction_columns(
    distill: Mapping[str, Any] | None, ev: Mapping[str, Any] | None = None
) -> dict[str, float | None]:
    """ADE at 1 s / 2 s on all test windows and on ice windows; the manoeuvre probes' errors (from the eval)."""
    out: dict[str, float | None] = {}
    for name in ERROR_METRICS:
        metric, split = name.rsplit("_", 1)
        out[name] = num(get(distill, "rollout", split, metric))
    out["fde_2s_all"] = num(get(distill, "rollout", "all", "fde_2s"))
    for name in PROBE_METRICS:
        out[name] = num(get(ev, "probes", "summary", f"pos_err_3s_{name.rsplit('_', 1)[1]}"))
    agreed, total = num(get(ev, "probes", "summary", "slides_agreed")), num(get(ev, "probes", "summary", "manoeuvres"))
    out["probe_slides_agreed"] = agreed / total if agreed is not None and total else None
    return out


def _ci(b: Mapping[str, Any] | None) -> list[float | None] | None:
    ci = get(b, "ci95")
    return [num(c) for c in ci] if isinstance(ci, list) and len(ci) == 2 else None


PRECISION = 0.1  # the half-width of a lap-share interval that `seeds_for_lap_share_0_1` plans for


def _seeds_for(ev: Mapping[str, Any] | None, cond: str, half_width: float) -> int | None:
    """Seeds at which this policy's observed seed-to-seed spread of lap share would give a 95 % interval of
    +- half_width (s3.report.stats.seeds_needed; None with fewer than 2 seeds)."""
    from s3.report.stats import seeds_needed

    seeds = get(ev, "by_seed") or {}
    return (
        seeds_needed([num(get(v, cond, "lap_share")) for v in seeds.values()], half_width) if len(seeds) >= 2 else None
    )


def policy_columns(ev: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per condition, over the evaluation suite (records/eval `summary.suite`): completion rate, lap
    share and lap time as means over seeds with their two-level 95 % intervals and n, the smoothness
    and safety metrics as means over seeds."""
    out: dict[str, dict[str, Any]] = {}
    for cond in CONDITIONS:
        s = get(ev, "summary", "suite", cond)
        out[cond] = {
            "completion_rate": num(get(s, "completion_rate", "estimate")),
            "completion_ci95": _ci(get(s, "completion_rate")),
            "completed": get(s, "completed"),
            "runs": get(s, "runs"),
            "seeds": get(s, "seeds"),
            "lap_share": num(get(s, "lap_share", "estimate")),
            "lap_share_ci95": _ci(get(s, "lap_share")),
            "lap_time_s": num(get(s, "lap_time_s", "estimate")),
            "lap_time_ci95": _ci(get(s, "lap_time_s")),
            "lap_time_n": get(s, "lap_time_s", "n_units"),
            "seeds_for_lap_share_0_1": _seeds_for(ev, cond, PRECISION),
            **{k: num(get(s, k, "estimate")) for k in POLICY_KEYS},
        }
    return out


def gap_columns(ev: Mapping[str, Any] | None) -> dict[str, dict[str, float | None]]:
    """Source-minus-distilled gaps per condition (the lead adds `transfer_gap` to family evals)."""
    return {cond: {k: num(get(ev, "transfer_gap", cond, k, "gap")) for k in GAP_KEYS} for cond in CONDITIONS}


def quality_score(policy: Mapping[str, Any]) -> float | None:
    """Mean completion rate over nominal and ice; None unless both were measured."""
    rates = [get(policy, c, "completion_rate") for c in CONDITIONS]
    return None if any(r is None for r in rates) else sum(rates) / len(rates)


def policy_row(
    name: str, kind: str, distill: dict | None, ev: dict | None, train: dict | None, prediction_from: str | None
) -> dict[str, Any]:
    """The policy's row: prediction, policy, transfer gap, quality (rank None), RL and distill wall clocks."""
    policy = policy_columns(ev)
    return {
        "kind": kind,
        "prediction_from": prediction_from,
        "prediction": prediction_columns(distill, ev),
        "policy": policy,
        "transfer_gap": gap_columns(ev),
        "quality": {"score": quality_score(policy), "rank": None},
        "rl_wall_s": num(get(train, "seed_selection", "rl_wall_s"))
        or num(get(train, "seed_selection", "wall_s"))
        or num(get(train, "train", "wall_s")),  # all seeds, side by side
        "distill_wall_s": num(get(distill, "total_wall_s")) if distill else None,
        # seeds the wall-clock safety cap stopped before their step budget: their policy depends on the machine
        "truncated_seeds": headline.train(train).get("truncated_seeds") if train else None,
    }


def policy_kind(name: str, families: list[str], models: Mapping[str, str]) -> str:
    """family, oracle, policy (trained in a model), baseline, or other."""
    if name in families:
        return FAMILY
    if name == ORACLE:
        return ORACLE_KIND
    if name in models:
        return "policy"
    return BASELINE if name in BASELINES else "other"


def prediction_source(
    name: str, d: Path, train: dict | None, families: list[str], models: Mapping[str, str]
) -> str | None:
    """Whose distill metrics describe this policy's dynamics model (the oracle drives its model's)."""
    if (d / f"{name}.json").exists():
        return name
    fam = get(train, "family")
    if isinstance(fam, str) and fam in families:
        return fam
    return models.get(name)


def selected_row(
    row: Mapping[str, Any], ev: Mapping[str, Any] | None, train: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """With train.seed_selection 'source': the row of the one seed chosen in the source simulator,
    its quality from that seed's runs only (the same runs as every seed's), and the selection's
    source cost (car steps; the report converts them at the real-time rate). None otherwise."""
    from s3.evaluate.suite import SUITE, summarise

    sel = get(train, "seed_selection")
    if get(sel, "in") != "source" or not ev or not ev.get("runs"):
        return None
    seed = get(sel, "selected_seed")
    runs = [r for r in ev["runs"] if r.get("seed") == seed]
    one = {**ev, "summary": {SUITE: summarise(runs, [], CONDITIONS)[SUITE]}}
    steps = [num(get(s, "source", "car_steps")) for s in get(sel, "seeds") or []]
    return {
        **row,
        "kind": "selected",
        "policy": policy_columns(one),
        "quality": {"score": quality_score(policy_columns(one)), "rank": None},
        "selection": {
            "seed": seed,
            "rule": get(sel, "rule"),
            "source_car_steps": None if None in steps or not steps else sum(steps),
        },
    }
