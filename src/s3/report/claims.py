"""The paper's four claims as rows of the report, each with its test, effect, interval, n, K and verdict.

    claims(evals, rows, families, experiments, ttq) -> [claim row, ...]   (s3.report.claim_row: the row)

Every rule was fixed before the study's run and is stated in docs/statistics.md ("The claims"), whose
text tests/test_claims.py checks against RULES here. Two-sided 95 %; a claim's verdict is its
primary row's (the interval rule of s3.report.stats.verdict unless the claim's rule says otherwise; claim 2's
rule combines its several primaries: claim_verdicts);
secondary rows are Holm-corrected within their claim; a claim whose inputs were not run says "not run".
Then every primary on the evaluation suite without the development circuit (DEVELOPED_ON): the
sensitivity rows, so that no verdict rests on the circuit looked at most.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from s3.catalog import DIRECT
from s3.evaluate.intervals import difference_bootstrap
from s3.evaluate.suite import groups
from s3.report.accuracy import CLAIM as ACCURACY
from s3.report.accuracy import accuracy
from s3.report.censored import compare
from s3.report.claim_row import (
    PRIMARY,
    SECONDARY,
    SENSITIVITY,
    claim_row,
    judge_secondaries,
    quality,
    runs,
    seed_means,
    seeds_p,
    without_tracks,
)
from s3.report.inputs import get, num
from s3.report.smoothness import CLAIM as SMOOTHNESS
from s3.report.smoothness import smoothness
from s3.report.stats import holm, logrank_power, p_verdict, power_plan

EFFICIENCY = "1 efficiency"
# the evaluation circuit looked at most while recipes were developed (docs/decisions/road-course-held-out.md)
DEVELOPED_ON = "road_course"
RULES = {
    EFFICIENCY: "time to a lap-completing checkpoint (lap share >= 0.5 on the time-to-quality hold-out) per seed, a "
    "seed that never gets there censored at the time it ran; with at least 2 seeds per route, a two-sided log-rank "
    "test of direct against the route it is compared with (train.direct.route) decides: holds when p < 0.05 "
    "and the distilled route's Kaplan-Meier median is earlier, does not hold when p < 0.05 and direct's is; with "
    "fewer seeds there is no test and the verdict is cannot tell (the effect, direct minus the best family's "
    "time, is then stated alone)",
    SMOOTHNESS: "per grounded family against each black-box family and per condition, the primary is the mean "
    "absolute steering rate over the laps both complete; secondaries (steering jerk, lateral jerk, time off the "
    "road, minimum edge margin on the same laps; completion rate over every run) are Holm-corrected; the claim "
    "holds when every primary holds (intersection-union, no correction), does not hold when a primary is decided "
    "the other way by its Welch p Holm-corrected over the primaries, and cannot tell otherwise (also when a "
    "primary has no lap both sides complete)",
    ACCURACY: "holds when some pair of models has the more accurate one (lower ADE 2 s) training decidedly worse "
    "policies (Holm-corrected over the pairs); does not hold when every pair is decided the other way; the "
    "association (Spearman rho < 0) is a secondary row",
    "4 friction diversity transfers": "the primary is the ice lap share of diverse friction without labels minus "
    "narrow friction with as much ice, without labels; the unmatched narrow arm and the three label arms are "
    "Holm-corrected secondaries",
}


FRICTION = "4 friction diversity transfers"
FRICTION_TEST = "difference of seed means of the ice lap share, two-level bootstrap 95 % interval"
MATCHED, NARROW, DIVERSE = "narrow_matched_blind", "narrow_blind", "diverse_blind"
LABELLED = (
    ("diverse_model_label", "the model"),
    ("diverse_policy_label", "the policy"),
    ("diverse_labelled", "the model and the policy"),
)


def friction(ablation: Mapping[str, Mapping[str, Any]], role: str = PRIMARY) -> list[dict[str, Any]]:
    """Claim 4 (RULES): ice lap share of diverse friction without labels minus quantity-matched narrow friction
    without labels (the primary); then, Holm-corrected, minus the unmatched narrow arm (more ice on the diverse
    side: diversity and quantity move together) and, on the diverse distribution, without labels minus with them
    for the model, the policy, both."""

    def row(statement: str, hi: Any, lo: Any, detail: Any = None, row_role: str = role) -> dict[str, Any]:
        if hi is None or lo is None:
            return claim_row(FRICTION, statement, +1, None, "—", status="not run", role=row_role, test=FRICTION_TEST)
        a, b = groups(runs(hi.get("eval"), "ice"), "lap_share"), groups(runs(lo.get("eval"), "ice"), "lap_share")
        if not seed_means(a) or not seed_means(b):
            return claim_row(FRICTION, statement, +1, None, "no ice runs", status="not run", role=row_role)
        n = f"{len(a)} vs {len(b)} seeds, {sum(map(len, a))} vs {sum(map(len, b))} ice runs"
        iv = difference_bootstrap(a, b)
        plan, p = power_plan(seed_means(a), seed_means(b), iv.estimate), seeds_p(a, b)
        return claim_row(
            FRICTION, statement, +1, iv, n, detail, power=plan, role=row_role, test=FRICTION_TEST, p_value=p
        )

    blind = ablation.get(DIVERSE)
    primary = row(
        "diverse friction without surface labels gives a higher ice lap share than narrow friction with as much "
        "ice, without labels",
        blind,
        ablation.get(MATCHED),
        {v: quality(d.get("eval")) for v, d in ablation.items()},
    )
    if role != PRIMARY:
        return [primary]
    secondary = [
        row(
            "diverse friction without labels: a higher ice lap share than rare, narrow ice without labels (diversity "
            "and quantity of ice together)",
            blind,
            ablation.get(NARROW),
            row_role=SECONDARY,
        ),
        *(
            row(
                f"diverse friction: a higher ice lap share without surface labels than with them for {who}",
                blind,
                ablation.get(v),
                row_role=SECONDARY,
            )
            for v, who in LABELLED
        ),
    ]
    judge_secondaries(secondary)
    return [primary, *secondary]


def efficiency_claim(ttq: Mapping[str, Any] | None) -> dict[str, Any]:
    """Claim 1 from the time-to-quality curves (records/time_to_quality.json): direct's time to a lap-completing
    checkpoint minus the best family's (collection and distillation included), measured and for a real-time source.
    A route that never reached quality contributes the time it ran (`not_reached_within_s`): the effect is then a
    bound, and reads as one ("at least 300 s sooner"). RULES: one training seed per route is no test."""
    statement = (
        "the distilled route (best family) reaches a lap-completing policy sooner than PPO in the source simulator"
    )
    test = "censored times to quality per seed (a log-rank test needs >= 2 seeds per route)"
    if not ttq or ttq.get("not_run"):
        why = {"reason": (ttq or {}).get("not_run", "records/time_to_quality.json not found")}
        return claim_row(EFFICIENCY, statement, +1, None, "—", why, "not run", test=test)
    detail: dict[str, Any] = {"distilled_policy": get(ttq, "distilled_best", "policy")}
    for suffix, label in (("_s", "measured"), ("_real_time_s", "real_time")):
        d, bound_d = (num(get(ttq, DIRECT, f"{k}{suffix}")) for k in ("t_to_quality", "not_reached_within"))
        b, bound_b = (num(get(ttq, "distilled_best", f"{k}{suffix}")) for k in ("t_to_quality", "not_reached_within"))
        t_direct, t_best = d if d is not None else bound_d, b if b is not None else bound_b
        kind = {(True, True): "exact", (False, True): "lower bound", (True, False): "upper bound"}.get(
            (d is not None, b is not None), "none"
        )
        detail[label] = {
            "direct_s": d,
            "direct_not_reached_within_s": bound_d,
            "distilled_s": b,
            "distilled_not_reached_within_s": bound_b,
            "difference_s": None if t_direct is None or t_best is None or kind == "none" else t_direct - t_best,
            "kind": kind,
        }
    tested = _censored_test(ttq, statement)
    if tested is not None:
        return tested
    diff, kind = detail["measured"]["difference_s"], detail["measured"]["kind"]
    effect = None if diff is None else {"estimate": diff, "low": None, "high": None}
    word = {"exact": "", "lower bound": "at least ", "upper bound": "at most "}.get(kind, "")
    text = None if diff is None else f"{word}{abs(diff):.0f} s {'sooner' if diff >= 0 else 'later'}"
    k = 1  # records/time_to_quality.json holds one training seed per route
    return claim_row(
        EFFICIENCY,
        statement,
        +1,
        effect,
        "1 seed per route",
        detail,
        "cannot tell",
        test=test,
        k=k,
        unit="s",
        effect_text=text,
    )


LOGRANK = "log-rank test of the censored times to quality per seed, two-sided (scipy.stats.logrank)"


def _censored_test(ttq: Mapping[str, Any], statement: str) -> dict[str, Any] | None:
    """Claim 1 by RULES when time to quality followed at least 2 seeds of direct and of its matched route."""
    route = ttq.get("claim_route")
    res = (
        compare(
            get(ttq, route, "seeds") or [], get(ttq, DIRECT, "seeds") or [], "t_to_quality_s", "not_reached_within_s"
        )
        if route
        else None
    )
    if res is None:
        return None
    md, dd = (res["median_a_s"], res["median_a_reached"]), (res["median_b_s"], res["median_b_reached"])
    diff = dd[0] - md[0]  # direct's median minus the distilled route's: > 0 = the distilled route sooner
    if dd[1] and md[1]:
        sooner = None if diff == 0 else diff > 0
        text = f"{abs(diff):.0f} s {'sooner' if diff > 0 else 'later' if diff < 0 else 'apart'} (medians)"
    elif md[1] and diff > 0:  # direct's median not reached: it is later than its largest time
        sooner, text = True, f"at least {diff:.0f} s sooner (direct's median not reached)"
    elif dd[1] and diff < 0:
        sooner, text = False, f"at least {-diff:.0f} s later (the distilled median not reached)"
    else:
        sooner, text = None, "neither median reached" if not (md[1] or dd[1]) else "a bound on the wrong side"
    p = res["p_value"]
    verdict = "cannot tell" if p >= 0.05 or sooner is None else "holds" if sooner else "does not hold"
    n = f"{res['n_a']} vs {res['n_b']} seeds ({route} vs {DIRECT}), {res['reached_a']} vs {res['reached_b']} reached"
    statement = statement.replace("(best family)", f"({route}, the route named for direct)")
    k = min(res["n_a"], res["n_b"])
    detail = {**res, "route": route}
    return claim_row(
        EFFICIENCY,
        statement,
        +1,
        {"estimate": diff},
        n,
        detail,
        verdict,
        test=LOGRANK,
        k=k,
        unit="s",
        effect_text=text,
        p_value=p,
        power=logrank_power(res["reached_a"] + res["reached_b"], res["n_a"], res["n_b"]),
    )


def claim_verdicts(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each claim's verdict from its primary rows (secondary and sensitivity rows never decide a claim). One primary:
    its verdict. Several (claim 2: each grounded family against each black-box one, per condition), by RULES:
    holds when every primary holds (intersection-union: each at 5 %, no correction); does not hold when a primary
    is decided the other way by its Welch p, Holm-corrected over the primaries (s3.report.stats.p_verdict);
    cannot tell otherwise, so also when a primary has no data (no lap both sides complete); not run when none
    ran. `with_data`: the primaries with an effect."""
    out: dict[str, dict[str, Any]] = {}
    for claim in dict.fromkeys(r["claim"] for r in rows):
        prim = [r for r in rows if r["claim"] == claim and r.get("role", PRIMARY) == PRIMARY]
        with_data = sum(r.get("effect") is not None and r["verdict"] != "not run" for r in prim)
        if len(prim) == 1:
            verdict = prim[0]["verdict"]
        elif all(r["verdict"] == "not run" for r in prim):
            verdict = "not run"
        elif all(r["verdict"] == "holds" for r in prim):
            verdict = "holds"
        else:
            adjusted = holm([1.0 if r.get("p_value") is None else r["p_value"] for r in prim])
            against = [
                p_verdict(adj, r.get("effect"), 1 if r.get("direction") == "positive" else -1) == "does not hold"
                for r, adj in zip(prim, adjusted, strict=True)
            ]
            verdict = "does not hold" if any(against) else "cannot tell"
        out[claim] = {"verdict": verdict, "primaries": len(prim), "with_data": with_data}
    return out


def claims(
    evals: Mapping[str, Mapping[str, Any] | None],
    rows: Mapping[str, Mapping[str, Any]],
    families: Sequence[str],
    experiments: Mapping[str, Mapping[str, Mapping[str, Any]]],
    ttq: Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    """Every claim row, in the paper's order, then the sensitivity rows (the primaries without DEVELOPED_ON)."""
    graded, ablation = experiments.get("graded", {}), experiments.get("ablation", {})
    out = [
        efficiency_claim(ttq),
        *smoothness(evals),
        *accuracy(rows, evals, families, graded),
        *friction(ablation),
    ]
    drop = [DEVELOPED_ON]

    def cut(sets: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        return {n: {**v, "eval": without_tracks({n: v.get("eval")}, drop)[n]} for n, v in sets.items()}

    sens = without_tracks(evals, drop)
    sensitivity = [
        *smoothness(sens, SENSITIVITY),
        *accuracy(rows, sens, families, cut(graded), SENSITIVITY),
        *friction(cut(ablation), SENSITIVITY),
    ]
    for r in sensitivity:
        r["statement"] += f" [without {DEVELOPED_ON}]"
    return out + sensitivity
