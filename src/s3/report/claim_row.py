"""One row of the report's claims, and the selections of evaluation runs every claim reads.

    claim_row(claim, statement, direction, effect, n, ...)   a row: effect, interval, n, K, test, verdict
    runs(ev, condition=None)                                 the runs of a records/eval file
    judge_secondaries(rows)                                  Holm over a claim's secondary rows, in place
    without_tracks(evals, tracks)                            the same evals, those circuits' runs left out
    quality(ev)                                              mean over seeds of the mean lap share of a seed

A row's `role` says how its verdict counts: "primary" (the claim's verdict: the interval rule of
s3.report.stats.verdict), "secondary" (Holm-corrected within its claim: s3.report.stats.p_verdict) or
"sensitivity" (a primary recomputed without the circuit used most during development). `test` names
the test in words, `k` the fewest seeds on a side (None where seeds are not the unit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from s3.evaluate.intervals import Interval
from s3.evaluate.suite import groups
from s3.report.inputs import get
from s3.report.stats import holm, p_verdict, verdict, welch_p

PRIMARY, SECONDARY, SENSITIVITY = "primary", "secondary", "sensitivity"


def runs(ev: Mapping[str, Any] | None, condition: str | None = None) -> list[dict[str, Any]]:
    """The per-run rows of a records/eval file (one condition, or all)."""
    rows = get(ev, "runs") or []
    return [r for r in rows if condition is None or r.get("condition") == condition]


def without_tracks(
    evals: Mapping[str, Mapping[str, Any] | None], tracks: Sequence[str]
) -> dict[str, dict[str, Any] | None]:
    """Every records/eval dict with the runs on `tracks` left out (the rest of the dict as it is)."""
    out: dict[str, dict[str, Any] | None] = {}
    for name, ev in evals.items():
        out[name] = None if ev is None else {**ev, "runs": [r for r in runs(ev) if r.get("track") not in tracks]}
    return out


def quality(ev: Mapping[str, Any] | None) -> float | None:
    """Mean over seeds of the mean lap share over every run (circuits x conditions x starts) of the seed."""
    g = [v for v in groups(runs(ev), "lap_share") if v]
    return sum(sum(v) / len(v) for v in g) / len(g) if g else None


def seed_means(g: list[list[float]]) -> list[float]:
    """Each seed's mean of its runs (seeds without runs left out)."""
    return [sum(x) / len(x) for x in g if x]


def claim_row(
    claim: str,
    statement: str,
    direction: int,
    effect: Interval | Mapping[str, Any] | None,
    n: str,
    detail: Any = None,
    status: str | None = None,
    power: Mapping[str, Any] | None = None,
    *,
    role: str = PRIMARY,
    test: str = "",
    k: int | None = None,
    unit: str = "",
    effect_text: str | None = None,
    p_value: float | None = None,
) -> dict[str, Any]:
    """One claim row; the verdict is `status` when given (a rule applied by the caller), else the interval
    rule on the Interval (which knows its seeds) or on the (low, high) of `effect`. effect_text: how the
    effect reads when a number would mislead (a bound: "at least 300 s"). p_value: what Holm reads."""
    interval = effect if isinstance(effect, Interval) else None
    if interval is not None:
        if k is None and interval.n_seeds_a is not None:
            k = min(interval.n_seeds_a, interval.n_seeds_b or 0)
        effect = {"estimate": interval.estimate, "low": interval.low, "high": interval.high}
    low, high = (effect or {}).get("low"), (effect or {}).get("high")
    return {
        "claim": claim,
        "statement": statement,
        "role": role,
        "test": test,
        "direction": "positive" if direction > 0 else "negative",
        "effect": None if effect is None else effect.get("estimate"),
        "effect_text": effect_text,
        "unit": unit,
        "ci95": None if low is None or high is None else [low, high],
        "p_value": p_value,  # the row's test's p (s3.report.stats.welch_p for two conditions' seeds), unadjusted
        "n": n,
        "k": k,
        "verdict": status or verdict(interval if interval is not None else (low, high), direction),
        "detail": detail,
        "power": power,  # s3.report.stats.power_plan, for the rows that compare two conditions' seed means
    }


def judge_secondaries(rows: list[dict[str, Any]]) -> None:
    """A claim's secondary rows judged together, in place: Holm's adjusted p (s3.report.stats.holm) over every row
    that ran decides each (p_verdict); a row that ran without a p (no data, no spread) counts in m with p = 1, so m
    never depends on the outcome; a row with fewer than 2 seeds on a side cannot tell. `test` says m and p."""
    ran = [r for r in rows if r["verdict"] != "not run"]
    for r, adj in zip(ran, holm([1.0 if r["p_value"] is None else r["p_value"] for r in ran]), strict=True):
        few = (r["k"] or 0) < 2
        r["verdict"] = "cannot tell" if few else p_verdict(adj, r["effect"], 1 if r["direction"] == "positive" else -1)
        r["p_adjusted"] = adj
        r["test"] += f"; Holm over {len(ran)} secondaries, adjusted p {'—' if adj is None else f'{adj:.3f}'}"


def seeds_p(a: list[list[float]], b: list[list[float]]) -> float | None:
    """Welch's p (s3.report.stats.welch_p) on the seed means of two conditions' per-run groups."""
    return welch_p(seed_means(a), seed_means(b))
