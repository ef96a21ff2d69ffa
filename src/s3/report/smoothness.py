"""Claim 2: physically grounded models give smoother, safer policies than a black-box one.

    smoothness(evals, role=PRIMARY) -> [claim row, ...]

Pre-registered (fixed before the study's run; docs/statistics.md, "Claim 2"): for each grounded
family against each black-box family (s3.catalog says which is which), nominal and ice apart:

- primary: PRIMARY's metric, mean absolute steering rate (1/s, lower = smoother), over the laps both
  policies complete: the completed runs on the (circuit, start) pairs that at least one seed of each
  completes, so a failure's last seconds never enter a smoothness figure and both sides drive the same
  roads. Effect = mean(grounded) - mean(black box) over seeds; two-level bootstrap interval; the
  claim's verdict for that pair and condition is this row's (s3.report.stats.verdict).
- secondaries, Holm-corrected together (s3.report.stats.holm, p_verdict): steering jerk, lateral jerk,
  time off the road (lower is better) and minimum edge margin (higher) over the same laps, and the
  completion rate over every run (higher): failures are counted here, apart from the smoothness.
- `role=SENSITIVITY` (the report passes evals without the development circuit): the primaries only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from s3.catalog import BLACK_BOX, GROUNDED
from s3.evaluate.intervals import difference_bootstrap
from s3.evaluate.suite import groups
from s3.report.claim_row import PRIMARY, SECONDARY, claim_row, judge_secondaries, runs, seed_means, seeds_p
from s3.report.rows import CONDITIONS
from s3.report.stats import power_plan

CLAIM = "2 smoother, safer"
PRIMARY_METRIC = ("mean_abs_steering_rate", -1, "1/s")
SECONDARY_METRICS = (
    ("mean_abs_steering_jerk", -1, "1/s^2"),
    ("mean_abs_lateral_jerk", -1, "m/s^3"),
    ("time_off_track_s", -1, "s"),
    ("min_edge_margin_m", +1, "m"),
)
COMPLETION = ("completion_rate", +1, "")  # over every run: the failures, counted apart
TEST = "difference of seed means over the laps both complete, two-level bootstrap 95 % interval"
HOLM_TEST = "difference of seed means, Welch p on the seed means"


def common_laps(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The completed runs of each side on the (track, start_index) pairs that both sides complete at least once."""

    def done(rs: list[dict[str, Any]]) -> set[tuple[Any, Any]]:
        return {(r.get("track"), r.get("start_index")) for r in rs if r.get("completed")}

    both = done(a) & done(b)
    keep = [[r for r in rs if r.get("completed") and (r.get("track"), r.get("start_index")) in both] for rs in (a, b)]
    return keep[0], keep[1]


def _compare(a: list[dict[str, Any]], b: list[dict[str, Any]], metric: str, laps: str) -> dict[str, Any]:
    """claim_row's arguments for metric A - B: the interval, n, the power plan and Welch's p on the seed means."""
    ga, gb = groups(a, metric), groups(b, metric)
    iv = difference_bootstrap(ga, gb)
    n = f"{len(seed_means(ga))} vs {len(seed_means(gb))} seeds, {sum(map(len, ga))} vs {sum(map(len, gb))} {laps}"
    plan = power_plan(seed_means(ga), seed_means(gb), iv.estimate)
    return {"effect": iv, "n": n, "power": plan, "p_value": seeds_p(ga, gb)}


def smoothness(evals: Mapping[str, Mapping[str, Any] | None], role: str = PRIMARY) -> list[dict[str, Any]]:
    """Every row of claim 2 (module docstring): per (grounded, black box, condition) a primary, then its secondaries."""
    out = []
    for fam, base, cond in ((f, b, c) for f in GROUNDED for b in BLACK_BOX for c in CONDITIONS):
        ra, rb = runs(evals.get(fam), cond), runs(evals.get(base), cond)
        metric, direction, unit = PRIMARY_METRIC
        head = f"{fam} vs {base}, {cond}"
        if not ra or not rb:
            out.append(claim_row(CLAIM, f"{head}: {metric} lower", direction, None, "—", status="not run", role=role))
            continue
        ca, cb = common_laps(ra, rb)
        why = None if ca and cb else {"reason": "no lap that both complete: no smoothness to compare"}
        args = _compare(ca, cb, metric, "common laps")
        out.append(
            claim_row(CLAIM, f"{head}: {metric} lower", direction, detail=why, role=role, test=TEST, unit=unit, **args)
        )
        if role != PRIMARY:
            continue
        rows = []
        for metric, direction, unit in (*SECONDARY_METRICS, COMPLETION):
            sides = (ra, rb) if metric == COMPLETION[0] else (ca, cb)
            args = _compare(*sides, metric, "runs" if metric == COMPLETION[0] else "common laps")
            word = "higher" if direction > 0 else "lower"
            where = "every run" if metric == COMPLETION[0] else "the laps both complete"
            test = f"{HOLM_TEST}, over {where}"
            rows.append(
                claim_row(CLAIM, f"{head}: {metric} {word}", direction, role=SECONDARY, unit=unit, test=test, **args)
            )
        judge_secondaries(rows)
        out += rows
    return out
