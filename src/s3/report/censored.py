"""Times to an event where some runs never get there: claim 1's time to quality, one per training seed.

    censored(rows, time_key, bound_key) -> (times, bounds)   a reached seed's time, else its bound (censored)
    km_median(times, bounds) -> (median, reached)              Kaplan-Meier median, or the largest time
                                                               when fewer than half got there
    compare(a_rows, b_rows, time_key, bound_key) -> {p_value, median_a, median_b, ...}   log-rank test, two-sided

A seed that never reached quality is right-censored at the time it ran (its end or budget, or its
route's last checkpoint): it says "later than this", never "at this time". The log-rank test
(scipy.stats.logrank) compares the two routes' whole time-to-quality curves under censoring; the
medians are the Kaplan-Meier ones (scipy.stats.ecdf), a median that the data do not reach is
reported as a lower bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats


def censored(rows: Sequence[dict[str, Any]], time_key: str, bound_key: str) -> tuple[list[float], list[float]] | None:
    """(times of the rows that reached, bounds of those that did not): rows[time_key] when it reached, else
    rows[bound_key], right-censored; None when a row has neither."""
    reached, bounds = [], []
    for r in rows:
        t, b = r.get(time_key), r.get(bound_key)
        if t is not None and math.isfinite(t):
            reached.append(float(t))
        elif b is not None and math.isfinite(b):
            bounds.append(float(b))
        else:
            return None
    return reached, bounds


def km_median(reached: Sequence[float], bounds: Sequence[float]) -> tuple[float, bool]:
    """The Kaplan-Meier median time and whether the curve reaches it; when it does not (fewer than half reached),
    the largest observed time, a lower bound of the median."""
    largest = max([*reached, *bounds])
    if not reached:
        return largest, False
    sf = stats.ecdf(stats.CensoredData(uncensored=list(reached), right=list(bounds))).sf
    below = np.flatnonzero(sf.probabilities <= 0.5)
    return (float(sf.quantiles[below[0]]), True) if len(below) else (largest, False)


def compare(
    a_rows: Sequence[dict[str, Any]], b_rows: Sequence[dict[str, Any]], time_key: str, bound_key: str
) -> dict[str, Any] | None:
    """Log-rank test of route A's against route B's times (two-sided), with both Kaplan-Meier medians; None when a
    side has fewer than 2 rows or a row has no time."""
    a, b = censored(a_rows, time_key, bound_key), censored(b_rows, time_key, bound_key)
    if a is None or b is None or sum(map(len, a)) < 2 or sum(map(len, b)) < 2:
        return None
    (ma, ra), (mb, rb) = km_median(*a), km_median(*b)
    if a[0] or b[0]:
        data = [stats.CensoredData(uncensored=x[0], right=x[1]) for x in (a, b)]
        p = float(stats.logrank(data[0], data[1], alternative="two-sided").pvalue)
    else:
        p = 1.0  # no seed of either route reached quality: nothing to compare
    return {
        "p_value": p,
        "median_a_s": ma,
        "median_a_reached": ra,
        "median_b_s": mb,
        "median_b_reached": rb,
        "n_a": sum(map(len, a)),
        "n_b": sum(map(len, b)),
        "reached_a": len(a[0]),
        "reached_b": len(b[0]),
    }
