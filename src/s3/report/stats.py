"""The report's statistics: the verdict on a claim, the seeds a comparison needs, the correlation across models.

They read the intervals of s3.evaluate.intervals (a condition's quality and the difference of two
conditions, over training seeds). Definitions (fixed before looking at any results):

- the verdict on a claim (`verdict`). A claim names the metric and its direction before the
  results are seen: direction +1 = "A is higher than B" (e.g. completion, lap share), -1 = "A is
  lower" (e.g. lap time, steering jerk). With the two-sided 95 % interval [low, high] of the effect:
      holds          the interval excludes 0 on the claimed side (+1: low > 0; -1: high < 0)
      does not hold  the interval excludes 0 on the other side (the opposite is supported)
      cannot tell    the interval contains 0, a bound is missing, or the interval does not
                     carry the seed-to-seed spread (fewer than 2 seeds on a side of it)
  "does not hold" is a finding, not a failure to find: it says the data support the opposite.
  Every claim stated beforehand is reported with its verdict; none is dropped or re-aimed after
  the fact. The primary rows of different claims are not corrected for each other (each claim is
  its own question); the secondary rows of one claim are (Holm, below).
- seeds needed (`seeds_needed`): how many seeds the observed seed-to-seed spread would need for a
  normal-approximation 95 % interval of half-width below the observed effect; "cannot tell"
  together with this number is the honest report of an underpowered comparison.
- power (`power_plan`): for a difference of two conditions' seed means, the smallest |difference|
  a two-sided test at 5 % detects with 80 % power at the K run (the detectable effect), and the K
  per side the observed effect would need for that power; normal approximation from the seeds'
  spread. It plans K; an sd from 3 seeds is itself uncertain.
- power of a log-rank test (`logrank_power`, claim 1): Schoenfeld's approximation for two groups of
  equal size, the smallest hazard ratio a two-sided test at 5 % detects with 80 % power from the
  events observed (seeds that reached quality, both routes): exp(2 z / sqrt(events)).
- secondary rows (`welch_p`, `holm`, `p_verdict`): a claim with several metrics names one primary,
  whose verdict is the claim's (the interval rule above); its secondaries are judged together with
  Holm's step-down correction, at a family-wise 5 %, of the two-sided p of Welch's t-test on the two
  sides' seed means (the seed is the unit; a percentile bootstrap's p over 2-3 seeds can be 0 and
  rejects far too often, which Holm cannot repair): a secondary holds when its adjusted p is below
  0.05 with the effect on the claimed side, does not hold when below 0.05 on the other side, cannot
  tell otherwise (and with fewer than 2 seeds on a side, where Welch's test is undefined).
- prediction error vs policy quality across models (`model_correlation`): Spearman's rho over the
  models, its two-sided p from the permutation distribution of the pairings (exact over all n!
  orderings when n! <= n_resamples), and a paired bootstrap interval over the models.

With K = 3 seeds the intervals are too narrow and a verdict is provisional (s3.evaluate.intervals, the caveat).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from scipy import stats

from s3.evaluate.intervals import CONFIDENCE, Interval, percentiles

Verdict = Literal["holds", "does not hold", "cannot tell"]
Direction = Literal[1, -1]


def verdict(interval: Interval | Sequence[float | None], direction: Direction) -> Verdict:
    """The verdict on a claim (see the module docstring), from the two-sided 95 % interval of its effect.

    interval: an `Interval` (at confidence 0.95) or a (low, high) pair. direction: +1 when the claim
    is that the effect is positive, -1 when negative. "holds" when the interval excludes 0 on the
    claimed side, "does not hold" when it excludes 0 on the other side, "cannot tell" otherwise: it
    contains 0, a bound is None/NaN, or (an Interval only) fewer than 2 seeds on a side carry it.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    if isinstance(interval, Interval):
        if not math.isclose(interval.confidence, CONFIDENCE):
            raise ValueError(f"the verdict rule reads a two-sided 95 % interval, got confidence {interval.confidence}")
        seeds = [interval.n_seeds] if interval.n_seeds_a is None else [interval.n_seeds_a, interval.n_seeds_b or 0]
        if min(seeds) < 2:
            return "cannot tell"
        low, high = interval.low, interval.high
    else:
        low, high = interval
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return "cannot tell"
    if low > high:
        raise ValueError(f"interval bounds out of order: low {low} > high {high}")
    if low > 0:
        return "holds" if direction == 1 else "does not hold"
    if high < 0:
        return "holds" if direction == -1 else "does not hold"
    return "cannot tell"


def seeds_needed(
    seed_values: Sequence[float | None], effect: float | None, confidence: float = CONFIDENCE
) -> int | None:
    """Seeds at which the observed seed-to-seed spread would give a normal-approximation interval of
    half-width below |effect|: ceil((z * sd / |effect|)^2), at least 2.

    seed_values: one number per seed: the seed means of a condition, or the per-seed differences of
    a paired comparison (None/NaN dropped); sd is their sample standard deviation (ddof 1). z: the
    two-sided normal quantile of `confidence` (1.96 at 95 %). None when sd is undefined (fewer than
    2 values) or effect is None/0/NaN; a spread of 0 -> 2.

    The n is for the interval of ONE mean. For an unpaired difference of two conditions with n seeds
    each, the spread of the difference is sqrt(sd_a^2 + sd_b^2) / sqrt(n): with equal spreads, each side
    needs about twice the n this returns for one condition's seed means. The sd from 3 seeds is itself
    very uncertain, so the number is a planning guide, not a guarantee.
    """
    if effect is None or not math.isfinite(effect) or effect == 0:
        return None
    vals = np.array([np.nan if v is None else float(v) for v in seed_values], dtype=float)
    vals = vals[np.isfinite(vals)]
    if len(vals) < 2:
        return None
    sd = float(np.std(vals, ddof=1))
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    return max(2, math.ceil((z * sd / abs(effect)) ** 2))


ALPHA = 0.05


def welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p of Welch's t-test of mean(a) = mean(b) on seed means; None with fewer than 2 finite values on a
    side or no spread on either (a deterministic driver: no test)."""
    va, vb = (np.array([float(x) for x in v if x is not None and math.isfinite(float(x))]) for v in (a, b))
    if len(va) < 2 or len(vb) < 2 or (np.var(va) == 0 and np.var(vb) == 0):
        return None
    with warnings.catch_warnings():  # nearly equal seeds: scipy warns of precision loss; the p stands
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(va, vb, equal_var=False).pvalue)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the input order (None stays None and does not count towards m).

    With the m finite p's sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j));
    rejecting where the adjusted p < alpha keeps the family-wise error at alpha for any dependence."""
    idx = [i for i, p in enumerate(p_values) if p is not None and math.isfinite(p)]
    order = sorted(idx, key=lambda i: p_values[i])  # type: ignore[arg-type,return-value]
    m, running = len(order), 0.0
    out: list[float | None] = [None] * len(p_values)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))  # type: ignore[arg-type]
        out[i] = running
    return out


def p_verdict(p: float | None, estimate: float | None, direction: Direction, alpha: float = ALPHA) -> Verdict:
    """A (Holm-adjusted) two-sided p and the effect's sign: holds / does not hold below alpha, cannot tell otherwise."""
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction!r}")
    if p is None or estimate is None or not math.isfinite(p) or not math.isfinite(estimate):
        return "cannot tell"
    if p >= alpha or estimate == 0:
        return "cannot tell"
    return "holds" if (estimate > 0) == (direction == 1) else "does not hold"


POWER = 0.8


def _z(confidence: float, power: float) -> float:
    """z_(1 - alpha/2) + z_power for a two-sided test at alpha = 1 - confidence."""
    return float(stats.norm.ppf(0.5 + confidence / 2) + stats.norm.ppf(power))


def power_plan(
    a: Sequence[float], b: Sequence[float], effect: float | None, power: float = POWER, confidence: float = CONFIDENCE
) -> dict[str, Any] | None:
    """A two-sided comparison of two conditions by their seed means a [K_a], b [K_b] (module docstring):

        sd = sqrt(sd_a^2 + sd_b^2) (ddof 1),  z = z_(1 - alpha/2) + z_power,  k = min(K_a, K_b)
        detectable_effect = z * sd / sqrt(k)                     (same unit as the effect)
        seeds_needed      = ceil((z * sd / |effect|)^2), at least 2   (per side; None without an effect)

    `alpha` (1 - confidence) is kept: a row tested at a corrected level says so. None with fewer than 2 seeds on a
    side (no spread to plan from)."""
    va, vb = (np.array([float(x) for x in v if x is not None and math.isfinite(float(x))]) for v in (a, b))
    if len(va) < 2 or len(vb) < 2:
        return None
    sd = math.sqrt(float(np.var(va, ddof=1)) + float(np.var(vb, ddof=1)))
    z = _z(confidence, power)
    k = min(len(va), len(vb))
    need = None
    if effect is not None and math.isfinite(effect) and effect != 0:
        need = max(2, math.ceil((z * sd / abs(effect)) ** 2))
    alpha = 1 - confidence
    detectable = z * sd / math.sqrt(k)
    return {"k": k, "power": power, "alpha": alpha, "sd": sd, "detectable_effect": detectable, "seeds_needed": need}


def logrank_power(
    events: int, n_a: int, n_b: int, power: float = POWER, confidence: float = CONFIDENCE
) -> dict[str, Any] | None:
    """The smallest hazard ratio (> 1) a two-sided log-rank test detects with `power` from `events` observed events
    in groups of n_a and n_b (Schoenfeld: events = z^2 / (q (1 - q) ln(HR)^2), q = n_a / (n_a + n_b), z = z_(1 -
    alpha/2) + z_power; equal groups: exp(2 z / sqrt(events))); printed as a ratio, not a difference. None without
    an event or a group."""
    if events < 1 or n_a < 1 or n_b < 1:
        return None
    q = n_a / (n_a + n_b)
    hr = math.exp(_z(confidence, power) / math.sqrt(events * q * (1 - q)))
    k = min(n_a, n_b)
    text = f"hazard ratio {hr:.1f} ({events} events) at K = {k}"
    out = {"k": k, "power": power, "alpha": 1 - confidence, "events": events, "detectable_effect": hr}
    return {**out, "seeds_needed": None, "text": text}


def spearman_rho(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho along `axis` (vectorised: batches of resamples); NaN where a side is constant."""
    rx, ry = stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis)
    rx = rx - rx.mean(axis=axis, keepdims=True)
    ry = ry - ry.mean(axis=axis, keepdims=True)
    num = (rx * ry).sum(axis=axis)
    den = np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def model_correlation(
    x: Sequence[float | None],
    y: Sequence[float | None],
    n_resamples: int = 9999,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """Spearman's rho of a per-model x (e.g. prediction error) against a per-model y (policy quality).

    x, y: one number per model, the same order; a model with None/NaN on either side is left out.
    Returns {rho, p_value, ci95, n_models, reason, ci95_dropped}:
    - p_value: two-sided, from scipy.stats.permutation_test over the pairings (exact over all n!
      orderings when n! <= n_resamples; with 5 models a perfect order gives 2/120);
    - ci95: percentile interval of rho from a paired bootstrap over the models (scipy.stats.bootstrap,
      paired=True). Resamples in which a side is constant have no rho and are left out of the
      percentiles; when more than half are, or none is left, ci95 is None and reason says why. With few
      models the interval is coarse and mostly descriptive (a perfect order gives [1, 1]); the p-value
      is the inference.
    - ci95_dropped: the share of bootstrap resamples left out that way (present once rho is);
    - reason: None, or why rho / ci95 is None (fewer than 3 models, a constant side, ...).
    """
    xs = np.array([np.nan if v is None else float(v) for v in x], dtype=float)
    ys = np.array([np.nan if v is None else float(v) for v in y], dtype=float)
    if xs.shape != ys.shape:
        raise ValueError(f"x and y need one value per model each, got {len(xs)} and {len(ys)}")
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    n = len(xs)
    out: dict[str, Any] = {"rho": None, "p_value": None, "ci95": None, "n_models": n, "reason": None}
    if n < 3:
        out["reason"] = f"needs >= 3 models with both values, have {n}"
        return out
    if np.all(xs == xs[0]) or np.all(ys == ys[0]):
        out["reason"] = "constant input: all models tie on " + ("x" if np.all(xs == xs[0]) else "y")
        return out
    out["rho"] = float(spearman_rho(xs, ys))
    rng = np.random.default_rng(seed)
    # Only x is permuted (one sample): the null is the n! orderings of x against the fixed y, exact when
    # n! <= n_resamples. Permuting both samples would give (n!)^2 orderings, exact only up to 4 models.
    perm = stats.permutation_test(
        (xs,),
        lambda px, axis=-1: spearman_rho(px, np.broadcast_to(ys, px.shape), axis=axis),
        permutation_type="pairings",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=rng,
    )
    out["p_value"] = float(perm.pvalue)
    with warnings.catch_warnings():  # scipy warns when a resample's rho is NaN; those are handled below
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        boot = stats.bootstrap(
            (xs, ys),
            spearman_rho,
            paired=True,
            vectorized=True,
            method="percentile",
            n_resamples=n_resamples,
            confidence_level=confidence,
            rng=rng,
        )
    dist = np.asarray(boot.bootstrap_distribution, dtype=float)
    ok = dist[np.isfinite(dist)]
    dropped = 1.0 - len(ok) / len(dist)
    out["ci95_dropped"] = round(dropped, 6)
    if len(ok) == 0 or dropped > 0.5:
        out["reason"] = f"no bootstrap interval: {dropped:.0%} of the resamples have a constant side"
    else:
        out["ci95"] = list(percentiles(ok, confidence))
    return out
