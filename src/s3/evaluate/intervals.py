"""Intervals over training seeds: a policy's quality on a metric, and the difference of two policies.

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

The evaluate stage summarises every policy with these (s3.evaluate.suite); the report reads a claim's
verdict, the seeds it would need and the correlation across models from them (s3.report.stats).

Caveat on few seeds: with K = 3 the seed level of the bootstrap has only 10 distinct resamples of
the seeds, and a percentile bootstrap over few clusters is known to be too narrow: the interval of a
single condition is roughly the range of its 3 seed means. In a simulation (hierarchical normal,
between-seed sd = within-seed sd, 12 runs per seed, 400 data sets, 2000 resamples) the 95 % interval
of one condition covered the true mean in about 77 % of the data sets at K = 3, 90-92 % at K = 5-10
and 94 % at K = 30; with no true difference, a claim of either direction "held" in about 7 % of the
data sets at K = 3 (nominal 2.5 %), 3-5 % from K = 5 on. Intervals and verdicts always state n_seeds;
treat K = 3 verdicts as provisional, and use `seeds_needed` (s3.report.stats) to plan the K that would settle them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

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


def percentiles(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    """The two-sided percentile interval of `confidence` (e.g. 0.95: the 2.5 / 97.5 % quantiles) of 1-d `draws`."""
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
    low, high = percentiles(draws, confidence)
    if k == 1:
        method = (
            f"percentile bootstrap over the {n_units} runs of the only seed ({n_resamples} resamples, seed {seed}): "
            "no seed-to-seed spread in it, so it understates the uncertainty about the policy"
        )
    else:
        method = (
            f"two-level percentile bootstrap: {k} seeds with replacement, then runs within each drawn seed "
            f"({n_resamples} resamples, seed {seed})"
        )
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
    low, high = percentiles(draws, confidence)
    method = (
        f"difference of two-level percentile bootstraps, A ({ka} seeds) and B ({kb} seeds) resampled independently "
        f"({n_resamples} resamples, seed {seed})"
    )
    if min(ka, kb) == 1:
        method += "; a side with one seed has no seed-to-seed spread in it, so the interval understates the uncertainty"
    return Interval(estimate, low, high, ka + kb, n_units, confidence, method, **sizes)
