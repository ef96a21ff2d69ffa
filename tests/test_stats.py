"""The study's statistics (s3.evaluate.intervals, s3.report.stats): known answers, closed forms and a coverage
simulation."""

from __future__ import annotations

import itertools
import json
import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats as sps

from s3.evaluate.intervals import Interval, difference_bootstrap, seed_means, two_level_bootstrap, wilson
from s3.report.stats import model_correlation, seeds_needed, verdict

Z95 = NormalDist().inv_cdf(0.975)


def wilson_closed_form(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    return centre - half, centre + half


def hierarchical(
    rng: np.random.Generator, k: int, n: int = 12, sd_between: float = 1.0, sd_within: float = 1.0, mean: float = 0.0
) -> np.ndarray:
    """k seeds x n runs: mean + seed effect + run noise."""
    return mean + rng.normal(0.0, sd_between, (k, 1)) + rng.normal(0.0, sd_within, (k, n))


def two_level_sd(groups: np.ndarray) -> float:
    """The exact sd of the two-level bootstrap statistic: Var = (S_b^2 + mean_s(s_s^2 / n_s)) / K, population
    variances."""
    k, n = groups.shape
    return math.sqrt((np.var(groups.mean(axis=1)) + np.mean(np.var(groups, axis=1) / n)) / k)


# --- wilson -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "n", "expected"), [(0, 10, (0.0, 0.2775)), (5, 10, (0.2366, 0.7634)), (12, 12, (0.7575, 1.0)), (3, 12, None)]
)
def test_wilson_matches_the_closed_form(k, n, expected):
    low, high = wilson(k, n)
    ref = wilson_closed_form(k, n)
    assert low == pytest.approx(ref[0], abs=1e-9) and high == pytest.approx(ref[1], abs=1e-9)
    if expected is not None:
        assert (low, high) == pytest.approx(expected, abs=1e-4)


def test_wilson_without_trials_and_at_another_level():
    assert wilson(0, 0) is None
    z90 = NormalDist().inv_cdf(0.95)
    assert wilson(5, 10, confidence=0.90) == pytest.approx(wilson_closed_form(5, 10, z90), abs=1e-9)


# --- seed_means / data handling ---------------------------------------------------------------


def test_seed_means_drop_missing_runs_and_empty_seeds():
    groups = [[1.0, None, 3.0], [float("nan"), None], [0.5, float("inf"), 1.5, 1.0], []]
    assert seed_means(groups) == [2.0, 1.0]
    iv = two_level_bootstrap(groups, n_resamples=500)
    assert (iv.n_seeds, iv.n_units) == (2, 5)
    assert iv.estimate == pytest.approx(1.5)


def test_a_flat_list_is_refused():
    with pytest.raises(TypeError, match="sequence over seeds"):
        seed_means([0.1, 0.2, 0.3])


def test_no_data_gives_no_interval():
    for groups in ([], [[None, None], [float("nan")]]):
        iv = two_level_bootstrap(groups)
        assert (iv.estimate, iv.low, iv.high, iv.n_seeds, iv.n_units) == (None, None, None, 0, 0)
        assert iv.to_json()["ci95"] is None
        assert verdict(iv, 1) == "cannot tell"


@pytest.mark.parametrize("v", [0.1, 1.0, 0.0, 37.25])
def test_constant_data_give_a_zero_width_interval_at_the_value(v):
    iv = two_level_bootstrap([[v] * 12, [v] * 12, [v] * 7])
    assert (iv.estimate, iv.low, iv.high) == (v, v, v)
    assert (iv.n_seeds, iv.n_units) == (3, 31)


def test_to_json_is_serialisable_with_the_stated_keys():
    iv = two_level_bootstrap([[0, 1, 1], [1, 1, 1], [0, 0, 1]], n_resamples=1000)
    j = iv.to_json()
    assert set(j) == {"estimate", "ci95", "n_seeds", "n_units", "method"}
    assert j["ci95"] == [iv.low, iv.high] and j["n_seeds"] == 3 and j["n_units"] == 9
    json.dumps(j)
    d = difference_bootstrap([[1, 1], [0, 1]], [[0, 0], [0, 1], [1, 0]], n_resamples=500).to_json()
    assert (d["n_seeds"], d["n_seeds_a"], d["n_seeds_b"], d["n_units"]) == (5, 2, 3, 10)
    json.dumps(d)


def test_deterministic_for_a_seed():
    g = hierarchical(np.random.default_rng(3), 3).tolist()
    assert two_level_bootstrap(g) == two_level_bootstrap(g)
    assert two_level_bootstrap(g, seed=1) != two_level_bootstrap(g, seed=0)


# --- two_level_bootstrap ----------------------------------------------------------------------


def test_identical_runs_within_seeds_reduce_to_a_bootstrap_of_the_seed_means():
    means = np.array([0.0, 3.0, 1.0, 7.0, 2.0, 5.0, 4.0, 9.0, 6.0, 8.0])
    iv = two_level_bootstrap([[m] * 12 for m in means])
    ref = sps.bootstrap(
        (means,), np.mean, method="percentile", n_resamples=10000, rng=np.random.default_rng(1)
    ).confidence_interval
    assert iv.estimate == pytest.approx(means.mean())
    tol = (
        0.05 * means.std() / math.sqrt(len(means)) * 4
    )  # well above the Monte Carlo error of both, far below the width
    assert iv.low == pytest.approx(ref.low, abs=tol) and iv.high == pytest.approx(ref.high, abs=tol)
    assert iv.high - iv.low > 3.0


def test_interval_width_matches_the_two_level_variance():
    g = hierarchical(np.random.default_rng(7), 30, sd_between=2.0, sd_within=3.0)
    iv = two_level_bootstrap(g.tolist())
    sd = two_level_sd(g)
    assert (iv.high - iv.low) / (2 * Z95) == pytest.approx(sd, rel=0.05)
    assert (iv.low + iv.high) / 2 == pytest.approx(iv.estimate, abs=0.1 * sd)
    # the within-seed level matters: the seed means alone give a narrower interval here
    seed_only = two_level_bootstrap([[m] for m in g.mean(axis=1)])
    assert seed_only.high - seed_only.low < 0.95 * (iv.high - iv.low)


def test_coverage_of_the_true_mean():
    rng = np.random.default_rng(2024)
    hits = 0
    for i in range(200):
        iv = two_level_bootstrap(hierarchical(rng, 30).tolist(), n_resamples=2000, seed=i)
        hits += iv.low <= 0.0 <= iv.high
    assert 0.88 <= hits / 200 <= 0.99


def test_width_shrinks_as_one_over_root_k():
    base = hierarchical(np.random.default_rng(11), 10)
    narrow = two_level_bootstrap(np.tile(base, (4, 1)).tolist())  # same empirical distribution, 4x the seeds
    wide = two_level_bootstrap(base.tolist())
    assert (wide.high - wide.low) / (narrow.high - narrow.low) == pytest.approx(2.0, rel=0.08)


def test_one_seed_resamples_its_runs_and_says_so():
    runs = np.array([0.2, 0.9, 0.4, 0.7, 0.5, 0.1, 0.8, 0.3, 0.6, 1.0, 0.0, 0.55])
    iv = two_level_bootstrap([runs.tolist()])
    ref = sps.bootstrap(
        (runs,), np.mean, method="percentile", n_resamples=10000, rng=np.random.default_rng(1)
    ).confidence_interval
    assert iv.n_seeds == 1 and "only seed" in iv.method
    assert iv.low == pytest.approx(ref.low, abs=0.01) and iv.high == pytest.approx(ref.high, abs=0.01)
    assert verdict(iv, 1) == "cannot tell"  # low > 0, but one seed carries no seed-to-seed spread


# --- difference_bootstrap ---------------------------------------------------------------------


def test_difference_of_identical_groups_is_centred_on_zero():
    g = hierarchical(np.random.default_rng(5), 5)
    iv = difference_bootstrap(g.tolist(), g.tolist())
    assert iv.estimate == 0.0
    assert iv.low < 0 < iv.high
    assert abs(iv.low + iv.high) < 0.1 * (iv.high - iv.low)
    sd = math.sqrt(2) * two_level_sd(g)  # A and B resampled independently: the variances add
    assert (iv.high - iv.low) / (2 * Z95) == pytest.approx(sd, rel=0.1)


def test_difference_of_shifted_groups_is_centred_on_the_shift():
    g = hierarchical(np.random.default_rng(5), 5)
    same = difference_bootstrap(g.tolist(), g.tolist())
    shifted = difference_bootstrap((g + 2.0).tolist(), g.tolist())
    assert shifted.estimate == pytest.approx(2.0)
    assert shifted.low == pytest.approx(same.low + 2.0, abs=1e-9) and shifted.high == pytest.approx(
        same.high + 2.0, abs=1e-9
    )
    assert verdict(shifted, 1) == "holds" and verdict(shifted, -1) == "does not hold"
    down = difference_bootstrap(g.tolist(), (g + 2.0).tolist())
    assert down.estimate == pytest.approx(-2.0) and verdict(down, -1) == "holds"


def test_difference_edge_cases():
    empty = difference_bootstrap([[None]], [[1.0, 0.0]])
    assert (empty.estimate, empty.low, empty.high, empty.n_seeds_a, empty.n_seeds_b) == (None, None, None, 0, 1)
    const = difference_bootstrap([[1.0] * 12] * 3, [[0.25] * 12] * 3)
    assert (const.estimate, const.low, const.high) == (0.75, 0.75, 0.75)
    assert verdict(const, 1) == "holds"
    one_side_one_seed = difference_bootstrap([[1.0, 0.9, 0.8]], [[0.0, 0.1], [0.2, 0.0]], n_resamples=500)
    assert one_side_one_seed.low > 0 and verdict(one_side_one_seed, 1) == "cannot tell"


# --- verdict ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bounds", "direction", "expected"),
    [
        ((0.1, 0.5), 1, "holds"),
        ((0.1, 0.5), -1, "does not hold"),
        ((-0.5, -0.1), -1, "holds"),
        ((-0.5, -0.1), 1, "does not hold"),
        ((-0.1, 0.5), 1, "cannot tell"),
        ((-0.1, 0.5), -1, "cannot tell"),
        ((0.0, 0.5), 1, "cannot tell"),  # touching zero does not exclude it
        ((-0.5, 0.0), -1, "cannot tell"),
        ((0.0, 0.0), 1, "cannot tell"),
        ((None, 0.5), 1, "cannot tell"),
        ((0.1, None), 1, "cannot tell"),
        ((float("nan"), 0.5), 1, "cannot tell"),
        ((0.3, 0.3), 1, "holds"),
    ],
)
def test_verdict_truth_table(bounds, direction, expected):
    assert verdict(bounds, direction) == expected
    assert verdict(Interval(0.0, bounds[0], bounds[1], n_seeds=3, n_units=36), direction) == expected


def test_verdict_refuses_what_the_rule_does_not_cover():
    with pytest.raises(ValueError, match="direction"):
        verdict((0.1, 0.2), 0)
    with pytest.raises(ValueError, match="95"):
        verdict(Interval(0.2, 0.1, 0.3, 3, 36, confidence=0.9), 1)
    with pytest.raises(ValueError, match="out of order"):
        verdict((0.3, 0.1), 1)


def test_verdict_needs_two_seeds_on_each_side():
    assert verdict(Interval(0.2, 0.1, 0.3, 1, 12), 1) == "cannot tell"
    assert verdict(Interval(0.2, 0.1, 0.3, 4, 36, n_seeds_a=1, n_seeds_b=3), 1) == "cannot tell"
    assert verdict(Interval(0.2, 0.1, 0.3, 4, 48, n_seeds_a=2, n_seeds_b=2), 1) == "holds"


# --- seeds_needed -----------------------------------------------------------------------------


def test_seeds_needed_known_numbers():
    sd2 = [-2.0, 0.0, 2.0]  # sample sd exactly 2
    assert seeds_needed(sd2, 1.0) == 16  # (1.96 * 2 / 1)^2 = 15.37
    assert seeds_needed(sd2, -1.0) == 16
    assert seeds_needed(sd2, 2.0) == 4  # 3.84
    assert seeds_needed(sd2, 0.5) == 62  # 61.46
    assert seeds_needed(sd2, 10.0) == 2  # at least 2
    assert seeds_needed(sd2, 1.0, confidence=0.90) == 11  # (1.645 * 2)^2 = 10.82
    assert seeds_needed([0.4, 0.4, 0.4], 0.1) == 2  # no spread
    assert seeds_needed([-2.0, None, 0.0, float("nan"), 2.0], 1.0) == 16


def test_seeds_needed_undefined():
    assert seeds_needed([0.3], 0.1) is None
    assert seeds_needed([], 0.1) is None
    assert seeds_needed([0.1, 0.5], 0.0) is None
    assert seeds_needed([0.1, 0.5], None) is None
    assert seeds_needed([0.1, 0.5], float("nan")) is None


# --- model_correlation ------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "sign"), [(5, 1), (4, 1), (5, -1), (6, 1)])
def test_perfect_order_has_rho_one_and_the_exact_p(n, sign):
    x = [0.5 * i for i in range(n)]
    y = [10.0 + sign * i**2 for i in range(n)]  # monotone, not linear
    r = model_correlation(x, y)
    assert r["rho"] == pytest.approx(sign)
    assert r["p_value"] == pytest.approx(2 / math.factorial(n))
    assert r["n_models"] == n and r["reason"] is None
    assert r["ci95"] == pytest.approx([sign, sign])


def test_rho_and_p_against_spearmanr_and_enumeration():
    rng = np.random.default_rng(9)
    x = rng.normal(size=6)
    y = np.round(x + rng.normal(size=6), 0)  # ties on y
    r = model_correlation(x.tolist(), y.tolist())
    rho = sps.spearmanr(x, y).statistic
    assert r["rho"] == pytest.approx(rho)
    null = np.array([sps.spearmanr(np.array(p), y).statistic for p in itertools.permutations(x)])
    eps = 1e-12
    p_ref = min(1.0, 2 * min(np.mean(null >= rho - eps), np.mean(null <= rho + eps)))
    assert r["p_value"] == pytest.approx(p_ref)
    low, high = r["ci95"]
    assert -1.0 <= low <= r["rho"] <= high <= 1.0


def test_model_correlation_without_enough_information():
    short = model_correlation([0.1, 0.2, None], [1.0, 2.0, 3.0])
    assert short["rho"] is None and short["n_models"] == 2 and "3 models" in short["reason"]
    flat = model_correlation([0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0])
    assert flat["rho"] is None and "constant" in flat["reason"]
    with pytest.raises(ValueError):
        model_correlation([0.1, 0.2, 0.3], [1.0, 2.0])


def test_power_plan_gives_the_detectable_effect_and_the_seeds_an_effect_needs() -> None:
    from s3.report.stats import power_plan

    a, b = [0.0, 0.2, 0.4], [0.1, 0.3, 0.5]  # sd 0.2 each: sd of the difference sqrt(0.08)
    p = power_plan(a, b, effect=0.1)
    z = 1.959964 + 0.841621  # two-sided 5 %, 80 % power
    assert p["k"] == 3 and p["sd"] == pytest.approx(math.sqrt(0.08))
    assert p["detectable_effect"] == pytest.approx(z * math.sqrt(0.08) / math.sqrt(3), rel=1e-5)
    assert p["seeds_needed"] == math.ceil((z * math.sqrt(0.08) / 0.1) ** 2) == 63
    assert power_plan(a, b, effect=0.0)["seeds_needed"] is None
    assert power_plan([0.1], b, effect=0.1) is None  # no spread on one side: nothing to plan from
    # ten times the seeds shrink the detectable effect by sqrt(10)
    many = power_plan(a * 10, b * 10, effect=0.1)
    assert many["k"] == 30 and many["detectable_effect"] < p["detectable_effect"] / 2.5
