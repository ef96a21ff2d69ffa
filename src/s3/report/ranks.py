"""The families ranked by policy quality, and the rank correlation of prediction error with that rank.

    quality_ranks(rows) -> {name: rank}        rank 1 = best, equal keys share their average rank
    spearman(errors, quality) -> {rho, p_value, n, families, reason}   quality: higher = better (minus the rank)

The definitions the report states (records/report.json `definitions`: quality_rank, spearman)
are the contract of these two functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from s3.report.inputs import get, num
from s3.report.rows import CONDITIONS

EXACT_P_MAX_N = 8  # up to 8! = 40320 orderings


def quality_ranks(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Rank 1 = best: higher mean completion, then lap share driven, then shorter nominal, then ice lap time; ties
    averaged."""

    def key(r: Mapping[str, Any]) -> tuple[float, ...]:
        shares = [get(r, "policy", c, "lap_share") for c in CONDITIONS]
        share = -sum(shares) / len(shares) if all(x is not None for x in shares) else 0.0
        laps = [get(r, "policy", c, "lap_time_s") for c in CONDITIONS]
        return (-r["quality"]["score"], share, *(math.inf if t is None else t for t in laps))

    scored = {n: key(r) for n, r in rows.items() if r["quality"]["score"] is not None}
    ordered = sorted(scored.values())
    ranks = {}
    for name, k in scored.items():
        positions = [i + 1 for i, o in enumerate(ordered) if o == k]
        ranks[name] = sum(positions) / len(positions)
    return ranks


def spearman(errors: Mapping[str, float | None], ranks: Mapping[str, float]) -> dict[str, Any]:
    """rho of (error, quality) over the families with both (see the report's definitions['spearman']); `ranks`
    is any higher-is-better quality order (the report passes minus the quality rank, so rho < 0 = accuracy pays)."""
    from scipy.stats import spearmanr

    names = [n for n in errors if errors.get(n) is not None and n in ranks]
    out: dict[str, Any] = {"rho": None, "p_value": None, "n": len(names), "families": names, "reason": None}
    x, y = [errors[n] for n in names], [ranks[n] for n in names]
    if len(names) < 3:
        out["reason"] = f"needs >= 3 families with both prediction error and policy quality, have {len(names)}"
    elif len(set(x)) == 1 or len(set(y)) == 1:
        out["reason"] = "constant input: all families tie on " + (
            "prediction error" if len(set(x)) == 1 else "policy quality"
        )
    elif len(names) <= EXACT_P_MAX_N:
        out["rho"], out["p_value"] = (num(v) for v in _spearman_exact(x, y))
    else:
        res = spearmanr(x, y)
        out["rho"], out["p_value"] = num(float(res.statistic)), num(float(res.pvalue))
    return out


def _spearman_exact(x: list[float], y: list[float]) -> tuple[float, float]:
    """rho and its exact two-sided p over every ordering of y: with four families scipy's t
    approximation says p = 0 for rho = 1, where the chance of a perfect (or reversed) order is 2/24."""
    import itertools

    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    rho = float(np.corrcoef(rx, ry)[0, 1])
    null = np.array([np.corrcoef(rx, perm)[0, 1] for perm in itertools.permutations(ry)])
    return rho, float(np.mean(np.abs(null) >= abs(rho) - 1e-9))
