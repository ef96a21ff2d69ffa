"""The study's statistics: intervals over training seeds, the verdict on a claim, seeds needed, model correlation.

The unit of a policy's quality is the training seed. A condition (a policy family, a setting)
is trained with K seeds (K = 3 by default); each seed is evaluated on the same units
(tracks x starts, e.g. 3 x 4 = 12 runs), giving one value per run: 0/1 lap completed, lap share
in [0, 1], lap time of a completed run, a smoothness metric. Runs of one seed share its weights,
so they are not independent draws of the policy's quality: pooling all K x 12 runs as if they
were overstates the precision by up to a factor sqrt(12). Everything here therefore keeps the
runs grouped by seed: `groups` is always a sequence over seeds of sequences of per-run values.

Definitions (fixed before looking at any results):

- quality of a condition on a metric = the mean over seeds of the within-seed mean over its runs
  (`seed_means`). Every seed weighs the same however many of its runs gave a finite value; a
  value of None / NaN / inf is "no value" (e.g. the lap time of a lap not completed), and a seed
  with no value at all drops out. A metric defined only on completed runs is conditional on
  completion: read it next to the completion rate.
- its 95 % interval = a two-level percentile bootstrap (`two_level_bootstrap`): each of 10000
  resamples draws K seeds with replacement, then, within each drawn seed, its runs with
  replacement, and takes the mean of the within-seed means; the interval is the 2.5 / 97.5 %
  percentiles of those 10000 numbers. numpy Generator, seed 0: the same data give the same
  interval, on every machine and every run.
- a comparison of condition A with condition B on a metric = effect mean(A) - mean(B) with its
  95 % interval from the same two-level bootstrap, A's seeds and B's seeds resampled independently
  (`difference_bootstrap`): the two policies are trained separately, their seed k's share
  nothing but a number. (Where the seeds are genuinely paired, pass the per-seed differences as
  one set of groups to `two_level_bootstrap` instead.)
- the verdict on a claim (`verdict`). A claim names the metric and its direction before the
  results are seen: direction +1 = "A is higher than B" (e.g. completion, lap share), -1 = "A is
  lower" (e.g. lap time, steering jerk). With the two-sided 95 % interval [low, high] of the effect:
      holds          the interval excludes 0 on the claimed side (+1: low > 0; -1: high < 0)
      does not hold  the interval excludes 0 on the other side (the opposite is supported)
      cannot tell    the interval contains 0, a bound is missing, or the interval does not
                     carry the seed-to-seed spread (fewer than 2 seeds on a side of it)
  "does not hold" is a finding, not a failure to find: it says the data support the opposite.
  Every claim stated beforehand is reported with its verdict; none is dropped or re-aimed after
  the fact, and there is no correction for the number of claims, so read several "holds" of one
  family together, not as independent evidence.
- seeds needed (`seeds_needed`): how many seeds the observed seed-to-seed spread would need for a
  normal-approximation 95 % interval of half-width below the observed effect; "cannot tell"
  together with this number is the honest report of an underpowered comparison.
- prediction error vs policy quality across models (`model_correlation`): Spearman's rho over the
  models, its two-sided p from the permutation distribution of the pairings (exact over all n!
  orderings when n! <= n_resamples), and a paired bootstrap interval over the models.

Caveat on few seeds: with K = 3 the seed level of the bootstrap has only 10 distinct resamples of
the seeds, and a percentile bootstrap over few clusters is known to be too narrow: the interval of a
single condition is roughly the range of its 3 seed means. In a simulation (hierarchical normal,
between-seed sd = within-seed sd, 12 runs per seed, 400 data sets, 2000 resamples) the 95 % interval
of one condition covered the true mean in about 77 % of the data sets at K = 3, 90-92 % at K = 5-10
and 94 % at K = 30; with no true difference, a claim of either direction "held" in about 7 % of the
data sets at K = 3 (nominal 2.5 %), 3-5 % from K = 5 on. Intervals and verdicts always state n_seeds;
treat K = 3 verdicts as provisional, and use `seeds_needed` to plan the K that would settle them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

Verdict = Literal["holds", "does not hold", "cannot tell"]
Direction = Literal[1, -1]

N_RESAMPLES = 10_000
CONFIDENCE = 0.95
_CHUNK = 4_000_000  # the most run indices drawn at once (memory bound of the within-seed level)


@dataclass(frozen=True)
class Interval:
    """A point estimate and its interval, with how much data they rest on.

    estimate/low/high: floats, or None when there is no data. n_seeds: the seeds that gave at
    least one finite value (for a difference, n_seeds_a + n_seeds_b, the two sides being in
    n_seeds_a / n_seeds_b; both None for a single condition). n_units: the runs with a finite value,
    over all those seeds (both sides for a difference). confidence: the two-sided level of
    [low, high]. method: how the interval was made, in words (says so when it degraded).
    """

    estimate: float | None
    low: float | None
    high: float | None
    n_seeds: int
    n_units: int
    confidence: float = CONFIDENCE
    method: str = ""
    n_seeds_a: int | None = None
    n_seeds_b: int | None = None

    def to_json(self) -> dict[str, Any]:
        """{estimate, ci95: [low, high] or None, n_seeds, n_units, method}; a difference adds n_seeds_a,
        n_seeds_b, and an interval at another level than 95 % adds `confidence` (ci95 then holds that level)."""
        ci = None if self.low is None or self.high is None else [float(self.low), float(self.high)]
        out: dict[str, Any] = {
            "estimate": None if self.estimate is None else float(self.estimate),
            "ci95": ci,
            "n_seeds": int(self.n_seeds),
            "n_units": int(self.n_units),
            "method": self.method,
        }
        if self.n_seeds_a is not None or self.n_seeds_b is not None:
            out["n_seeds_a"], out["n_seeds_b"] = self.n_seeds_a, self.n_seeds_b
        if self.confidence != CONFIDENCE:
            out["confidence"] = float(self.confidence)
        return out


def wilson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Wilson score interval of a proportion: k successes in n independent trials; None when n == 0.

    Valid only for runs of ONE seed (one set of weights, independent starts): runs of different
    seeds are clustered, and a Wilson interval over pooled seeds is too narrow; use
    `two_level_bootstrap` on the 0/1 values grouped by seed for a policy's completion rate.
    """
    if n == 0:
        return None
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def _finite_groups(groups: Sequence[Sequence[float | None]]) -> list[np.ndarray]:
    """One float array per seed of its finite values; seeds with none are dropped."""
    out = []
    for i, g in enumerate(groups):
        if isinstance(g, (str, bytes)) or not hasattr(g, "__iter__"):
            raise TypeError(f"groups must be a sequence over seeds of sequences of per-run values; seed {i} is {g!r}")
        a = np.array([np.nan if v is None else float(v) for v in g], dtype=float)
        a = a[np.isfinite(a)]
        if len(a):
            out.append(a)
    return out


def seed_means(groups: Sequence[Sequence[float | None]]) -> list[float]:
    """The within-seed mean of each seed's finite per-run values.

    groups: a sequence over seeds, each a sequence of per-run values (one per unit = track x start);
    None / NaN / inf are dropped, and a seed left with no value is dropped. Returns one float per
    remaining seed, in order.
    """
    return [float(a.mean()) for a in _finite_groups(groups)]


def _two_level_draws(arrays: list[np.ndarray], n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """n_resamples draws of the mean over seeds of the within-seed mean: K seeds with replacement,
    then the runs of each drawn seed with replacement. Loops over the seeds, not the resamples."""
    k = len(arrays)
    picks = rng.integers(0, k, size=(n_resamples, k))
    total = np.zeros(n_resamples)
    for s, vals in enumerate(arrays):
        rows = np.nonzero(picks == s)[0]  # resample index of every time seed s was drawn
        n = len(vals)
        if n == 1:
            total += np.bincount(rows, minlength=n_resamples) * vals[0]
            continue
        means = np.empty(len(rows))
        step = max(1, _CHUNK // n)
        for start in range(0, len(rows), step):
            m = min(step, len(rows) - start)
            means[start : start + m] = vals[rng.integers(0, n, size=(m, n))].mean(axis=1)
        total += np.bincount(rows, weights=means, minlength=n_resamples)
    return total / k


def _percentiles(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = 1.0 - confidence
    lo, hi = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def _check(n_resamples: int, confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")


def _constant(arrays: list[np.ndarray]) -> float | None:
    """The one value of all the runs, when they all have the same value; else None."""
    first = arrays[0][0]
    return float(first) if all(np.all(a == first) for a in arrays) else None


def two_level_bootstrap(
    groups: Sequence[Sequence[float | None]],
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """Mean over seeds of the within-seed mean, with its two-level percentile bootstrap interval.

    groups: a sequence over seeds (K of them) of sequences of per-run values (see `seed_means`
    for what is dropped). Each of the n_resamples resamples draws K seeds with replacement, then
    within each drawn seed its n_k runs with replacement, and takes the mean of the within-seed
    means; [low, high] are the (1 - confidence)/2 and (1 + confidence)/2 percentiles.
    Deterministic: numpy Generator seeded with `seed`.

    Degenerate cases: one seed -> the runs of that seed are resampled (the method says so; the
    interval has no seed-to-seed spread in it); no finite value at all -> estimate/low/high None;
    all values equal to v -> [v, v].
    """
    _check(n_resamples, confidence)
    arrays = _finite_groups(groups)
    k, n_units = len(arrays), int(sum(len(a) for a in arrays))
    if k == 0:
        return Interval(None, None, None, 0, 0, confidence, "no data: no seed has a finite value")
    v = _constant(arrays)
    if v is not None:
        return Interval(v, v, v, k, n_units, confidence, f"all {n_units} values equal: zero-width interval")
    estimate = float(np.mean([a.mean() for a in arrays]))
    draws = _two_level_draws(arrays, n_resamples, np.random.default_rng(seed))
    low, high = _percentiles(draws, confidence)
    if k == 1:
        method = (
            f"percentile bootstrap over the {n_units} runs of the only seed ({n_resamples} resamples, seed {seed}): "
            "no seed-to-seed spread in it, so it understates the uncertainty about the policy"
        )
    else:
        method = f"two-level percentile bootstrap: {k} seeds with replacement, then runs within each drawn seed ({n_resamples} resamples, seed {seed})"
    return Interval(estimate, low, high, k, n_units, confidence, method)


def difference_bootstrap(
    a_groups: Sequence[Sequence[float | None]],
    b_groups: Sequence[Sequence[float | None]],
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """Effect mean(A) - mean(B) of two conditions, each the mean over its seeds of the within-seed mean,
    with a percentile interval from resampling A and B independently, two levels each (see
    `two_level_bootstrap`). a_groups / b_groups: sequences over seeds of per-run values; the two may
    have different numbers of seeds and runs. n_seeds = n_seeds_a + n_seeds_b (kept separately too);
    n_units = the runs of both. Either side without data -> estimate/low/high None; both sides
    constant -> the zero-width interval at the difference.
    """
    _check(n_resamples, confidence)
    a, b = _finite_groups(a_groups), _finite_groups(b_groups)
    ka, kb = len(a), len(b)
    n_units = int(sum(len(x) for x in a) + sum(len(x) for x in b))
    sizes: dict[str, Any] = {"n_seeds_a": ka, "n_seeds_b": kb}
    if ka == 0 or kb == 0:
        side = "A" if ka == 0 else "B"
        return Interval(
            None, None, None, ka + kb, n_units, confidence, f"no data: no seed of {side} has a finite value", **sizes
        )
    va, vb = _constant(a), _constant(b)
    if va is not None and vb is not None:
        d = va - vb
        return Interval(
            d, d, d, ka + kb, n_units, confidence, "all values of A equal, and all of B: zero-width interval", **sizes
        )
    estimate = float(np.mean([x.mean() for x in a]) - np.mean([x.mean() for x in b]))
    rng = np.random.default_rng(seed)
    draws = _two_level_draws(a, n_resamples, rng) - _two_level_draws(b, n_resamples, rng)
    low, high = _percentiles(draws, confidence)
    method = f"difference of two-level percentile bootstraps, A ({ka} seeds) and B ({kb} seeds) resampled independently ({n_resamples} resamples, seed {seed})"
    if min(ka, kb) == 1:
        method += "; a side with one seed has no seed-to-seed spread in it, so the interval understates the uncertainty"
    return Interval(estimate, low, high, ka + kb, n_units, confidence, method, **sizes)


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


def _spearman_rho(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
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
    out["rho"] = float(_spearman_rho(xs, ys))
    rng = np.random.default_rng(seed)
    # Only x is permuted (one sample): the null is the n! orderings of x against the fixed y, exact when
    # n! <= n_resamples. Permuting both samples would give (n!)^2 orderings, exact only up to 4 models.
    perm = stats.permutation_test(
        (xs,),
        lambda px, axis=-1: _spearman_rho(px, np.broadcast_to(ys, px.shape), axis=axis),
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
            _spearman_rho,
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
        out["ci95"] = list(_percentiles(ok, confidence))
    return out
