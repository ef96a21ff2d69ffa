"""Claim 3, as the paper states it: predictive accuracy alone does not fully characterize a model's
suitability as an RL training environment; it must also be judged by the policies it enables.

    accuracy(rows, evals, families, graded, role=PRIMARY) -> [primary row, secondary row]
    models(rows, evals, families, graded) -> {model: Model}
    within_family_correlation(models) -> {rho, p_value, exact, orderings, families}

Models are the families and the graded-accuracy variants (a family's model distilled for fewer
epochs: `graded` = {variant: records/experiments/graded/<variant>.json}). Accuracy = ADE over 2 s on
the held-out test windows (lower = more accurate; the same windows for every model, so ADE is taken
as a point value: its own sampling error is not in the tests). Quality = lap share per run in the
source simulator on the evaluation suite, per training seed (the unit).

- primary, inversions: for every pair of models whose ADE differs, the more accurate one's quality
  minus the other's (difference of seed means; Welch's p on the seed means), Holm-corrected over the pairs.
  holds = at least one pair in which the more accurate model trains decidedly worse policies (adjusted
  p < 0.05, effect < 0): accuracy does not order quality. does not hold = every pair decided the other
  way (accuracy orders every pair, at this n). cannot tell otherwise. The effect is the deciding pair's
  difference (the most significant inversion; without one, the most negative difference), with its interval,
  and its power (s3.report.stats.power_plan) at Holm's strictest level, 0.05 / the number of pairs.
- secondary, association: Spearman rho of (ADE, quality); rho < 0 = lower error, better policies (the
  report's one sign convention). With graded variants: within family, the mean of the per-family rho
  over the families with at least 3 models, p from permuting quality within each family (exact over
  every ordering when there are at most N_ORDERINGS, else as many random ones, and said so); with the
  families only: over the families, p from permuting the models (s3.report.stats.model_correlation).
  Verdict: p < 0.05 with rho < 0 holds, with rho > 0 does not hold, cannot tell otherwise.
- detail: per model its ADE, quality and exploitation gap (in-model minus source lap share on the
  suite, records/eval transfer_gap, mean of nominal and ice; bicycle: 1.0 inside, 0.0 in the source).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from s3.evaluate.intervals import CONFIDENCE, difference_bootstrap
from s3.evaluate.suite import groups
from s3.report.claim_row import PRIMARY, SECONDARY, claim_row, runs, seed_means
from s3.report.inputs import get, num
from s3.report.rows import CONDITIONS
from s3.report.stats import holm, model_correlation, p_verdict, power_plan, spearman_rho, welch_p

CLAIM = "3 accuracy alone does not characterize"
HEADLINE_ERROR = "ade_2s_all"
N_ORDERINGS = 10_000
PRIMARY_TEST = "every pair of models by ADE: difference of seed means of lap share, Welch p, Holm over the pairs"


@dataclass(frozen=True)
class Model:
    """One model of claim 3: its family, ADE 2 s (m), lap share per run grouped by seed, exploitation gap."""

    family: str
    ade: float
    seeds: list[list[float]]
    gap: float | None

    @property
    def quality(self) -> float | None:
        m = seed_means(self.seeds)
        return sum(m) / len(m) if m else None


def _gap(ev: Mapping[str, Any] | None) -> float | None:
    vals = [num(get(ev, "transfer_gap", c, "lap_share", "gap")) for c in CONDITIONS]
    return None if None in vals else -sum(vals) / len(vals)  # type: ignore[arg-type]  # in-model minus source


def models(
    rows: Mapping[str, Mapping[str, Any]],
    evals: Mapping[str, Mapping[str, Any] | None],
    families: Sequence[str],
    graded: Mapping[str, Mapping[str, Any]],
) -> dict[str, Model]:
    """Every model with an ADE and at least one evaluated seed, families first."""
    out = {}
    for fam in families:
        x, ev = num(get(rows.get(fam), "prediction", HEADLINE_ERROR)), evals.get(fam)
        if x is not None and seed_means(groups(runs(ev), "lap_share")):
            out[fam] = Model(fam, x, groups(runs(ev), "lap_share"), _gap(ev))
    for name, v in graded.items():
        x, ev = num(get(v.get("distill"), "rollout", "all", "ade_2s")), v.get("eval")
        fam = get(v.get("distill"), "family") or name
        if x is not None and seed_means(groups(runs(ev), "lap_share")):
            out[name] = Model(fam, x, groups(runs(ev), "lap_share"), _gap(ev))
    return out


def inversions(ms: Mapping[str, Model]) -> list[dict[str, Any]]:
    """Per pair with different ADE: the more accurate model's quality minus the other's (interval), Welch's p on the
    seed means and Holm's adjusted p over the pairs (a pair without a p counts with p = 1); order: kept / inverted /
    None (undecided)."""
    pairs = []
    for a, b in itertools.combinations(ms, 2):
        better, worse = (a, b) if ms[a].ade < ms[b].ade else (b, a)
        if ms[a].ade != ms[b].ade:
            pairs.append({"more_accurate": better, "less_accurate": worse})
    for p in pairs:
        sa, sb = ms[p["more_accurate"]].seeds, ms[p["less_accurate"]].seeds
        p |= {"interval": difference_bootstrap(sa, sb), "p_value": welch_p(seed_means(sa), seed_means(sb))}
    adjusted = holm([1.0 if p["p_value"] is None else p["p_value"] for p in pairs])
    for p, adj in zip(pairs, adjusted, strict=True):
        decided = p_verdict(adj, p["interval"].estimate, +1)
        p |= {"p_adjusted": adj, "order": {"holds": "kept", "does not hold": "inverted"}.get(decided)}
    return pairs


def within_family_correlation(ms: Mapping[str, Model], seed: int = 0) -> dict[str, Any]:
    """The mean over families with >= 3 models of Spearman rho (ADE, quality), p by permuting quality within each."""
    fams: dict[str, list[Model]] = {}
    for m in ms.values():
        if m.quality is not None:
            fams.setdefault(m.family, []).append(m)
    used = {  # a family whose ADEs or qualities all tie has no rho: it says nothing about the association
        f: v for f, v in fams.items() if len(v) >= 3 and len({m.ade for m in v}) > 1 and len({m.quality for m in v}) > 1
    }
    if not used:
        return {"rho": None, "p_value": None, "families": [], "reason": "no family has 3 models that vary on both"}
    xs = [np.array([m.ade for m in v]) for v in used.values()]
    ys = [np.array([m.quality for m in v], dtype=float) for v in used.values()]
    stat = float(np.mean([spearman_rho(x, y) for x, y in zip(xs, ys, strict=True)]))
    total = math.prod(math.factorial(len(y)) for y in ys)
    exact = total <= N_ORDERINGS
    if exact:
        orders = itertools.product(*(itertools.permutations(range(len(y))) for y in ys))
    else:
        rng = np.random.default_rng(seed)
        orders = ([rng.permutation(len(y)) for y in ys] for _ in range(N_ORDERINGS - 1))
    null = [np.mean([spearman_rho(x, y[list(o)]) for x, y, o in zip(xs, ys, order, strict=True)]) for order in orders]
    null_abs = np.abs(np.array(null, dtype=float))  # no NaN: every family used varies on both sides
    if exact:
        p = float(np.mean(null_abs >= abs(stat) - 1e-9))
    else:
        p = float((np.sum(null_abs >= abs(stat) - 1e-9) + 1) / N_ORDERINGS)
    return {
        "rho": stat,
        "p_value": p,
        "exact": exact,
        "orderings": total if exact else N_ORDERINGS,
        "families": {f: [m.ade for m in v] for f, v in used.items()},
        "reason": None,
    }


def accuracy(
    rows: Mapping[str, Mapping[str, Any]],
    evals: Mapping[str, Mapping[str, Any] | None],
    families: Sequence[str],
    graded: Mapping[str, Mapping[str, Any]],
    role: str = PRIMARY,
) -> list[dict[str, Any]]:
    """Claim 3's primary row (inversions), then its secondary (association) unless role is a sensitivity."""
    ms = models(rows, evals, families, graded)
    k = min((len(seed_means(m.seeds)) for m in ms.values()), default=None)
    n = f"{len(ms)} models ({sum(n not in families for n in ms)} graded-accuracy variants)"  # k: the fewest seeds
    statement = "some more accurate model (lower ADE 2 s) trains decidedly worse policies (lap share)"
    detail = {"models": {n: {"ade_2s": m.ade, "quality": m.quality, "exploitation_gap": m.gap} for n, m in ms.items()}}
    pairs = inversions(ms) if len(ms) >= 2 else []
    if not pairs:
        why = "fewer than 2 models" if len(ms) < 2 else "every model has the same ADE: no pair to order"
        status = "not run" if len(ms) < 2 else "cannot tell"
        out = [claim_row(CLAIM, statement, -1, None, n, detail | {"reason": why}, status, role=role, test=PRIMARY_TEST)]
    else:
        orders = [p["order"] for p in pairs]
        status = "holds" if "inverted" in orders else "does not hold" if all(o == "kept" for o in orders) else None
        inverted = [p for p in pairs if p["order"] == "inverted"]
        shown = (  # the pair that decides (the most significant inversion), else the most negative difference
            min(inverted, key=lambda p: p["p_adjusted"])
            if inverted
            else min(pairs, key=lambda p: p["interval"].estimate if p["interval"].estimate is not None else math.inf)
        )
        detail["pairs"] = [
            {**{k: v for k, v in p.items() if k != "interval"}, "effect": p["interval"].estimate} for p in pairs
        ]
        which = "the most significant inversion" if inverted else "the most negative difference"
        detail["effect_is"] = f"{shown['more_accurate']} minus {shown['less_accurate']} ({which} of {len(pairs)} pairs)"
        detail["p_adjusted"] = shown["p_adjusted"]
        a, b = (seed_means(ms[shown[side]].seeds) for side in ("more_accurate", "less_accurate"))
        # the deciding pair's power at Holm's strictest level, alpha / (pairs): what this K detects in any one pair
        power = power_plan(a, b, shown["interval"].estimate, confidence=1 - (1 - CONFIDENCE) / len(pairs))
        out = [
            claim_row(
                CLAIM,
                statement,
                -1,
                shown["interval"],
                n,
                detail,
                status or "cannot tell",
                role=role,
                test=PRIMARY_TEST,
                k=k,
                p_value=shown["p_value"],
                power=power,
            )
        ]
    if role != PRIMARY:
        return out
    graded_ms = any(n not in families for n in ms)
    res = (
        within_family_correlation(ms)
        if graded_ms
        else model_correlation([m.ade for m in ms.values()], [m.quality for m in ms.values()])
    )
    how = (
        "within family: mean Spearman rho, quality permuted within each family "
        f"({'exact' if res.get('exact') else 'sampled'})"
        if graded_ms
        else "over the families: Spearman rho, models permuted (exact)"
    )
    p, rho = res.get("p_value"), res.get("rho")
    out.append(
        claim_row(
            CLAIM,
            "lower ADE 2 s goes with better policies (Spearman rho < 0)",
            -1,
            None if rho is None else {"estimate": rho},
            n,
            res,
            p_verdict(p, rho, -1) if len(ms) >= 3 else "not run",
            role=SECONDARY,
            test=how,
            k=k,
            p_value=p,
        )
    )
    return out
