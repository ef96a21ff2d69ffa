"""The claims' rules (s3.report.claims, smoothness, accuracy): Holm, Welch's p, the laps both complete,
claim 3's inversions and its within-family permutation, the sensitivity rows, and the docs' rules = the code's."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from s3.report.accuracy import Model, accuracy, inversions, within_family_correlation
from s3.report.claims import DEVELOPED_ON, RULES, claim_verdicts, claims
from s3.report.smoothness import common_laps
from s3.report.stats import holm, p_verdict, power_plan, spearman_rho, welch_p

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_state_the_codes_rules_word_for_word() -> None:
    doc = " ".join((ROOT / "docs" / "statistics.md").read_text().split())
    for claim, rule in RULES.items():
        assert f"**{claim}**: {' '.join(rule.split())}." in doc, claim


def test_holm_known_values() -> None:
    # sorted 0.01, 0.02, 0.04 with m = 3: 0.03, 0.04, 0.04 (monotone); None stays out of m
    assert holm([0.04, None, 0.01, 0.02]) == pytest.approx([0.04, None, 0.03, 0.04], nan_ok=True)
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []


def test_p_verdict_reads_the_side_and_the_level() -> None:
    assert p_verdict(0.01, -0.3, -1) == "holds" and p_verdict(0.01, 0.3, -1) == "does not hold"
    assert p_verdict(0.05, -0.3, -1) == "cannot tell" and p_verdict(None, -0.3, -1) == "cannot tell"
    with pytest.raises(ValueError, match="direction"):
        p_verdict(0.01, 1.0, 0)  # type: ignore[arg-type]


def test_welch_p_on_seed_means() -> None:
    a, b = [0.50, 0.55, 0.60], [0.10, 0.12, 0.14]
    assert welch_p(a, b) == pytest.approx(sps.ttest_ind(a, b, equal_var=False).pvalue)
    assert welch_p([0.5], b) is None  # one seed: no spread to test against
    assert welch_p([0.5, 0.5], [0.1, 0.1]) is None  # deterministic drivers: no test
    assert p_verdict(0.01, float("nan"), -1) == "cannot tell"


def test_welch_keeps_its_level_where_the_bootstrap_does_not() -> None:
    """No true difference, K = 3 seeds a side: Welch rejects about 5 % of the time (the percentile bootstrap's p
    would be 0 in about 9 % of these, docs/statistics.md)."""
    rng = np.random.default_rng(0)
    ps = [welch_p(rng.normal(0, 1, 3), rng.normal(0, 1, 3)) for _ in range(2000)]
    assert 0.02 < np.mean(np.array(ps) < 0.05) < 0.08


def _run(seed: int, track: str, start: int, done: bool, rate: float, cond: str = "nominal") -> dict[str, Any]:
    return {
        "seed": seed,
        "track": track,
        "condition": cond,
        "start_index": start,
        "completed": done,
        "completion_fraction": 1.0 if done else 0.4,
        "mean_abs_steering_rate": rate,
    }


def test_smoothness_counts_only_the_laps_both_complete() -> None:
    a = [_run(0, "street", 0, True, 0.1), _run(0, "street", 1, True, 0.1), _run(1, "street", 1, False, 9.0)]
    b = [_run(0, "street", 0, False, 5.0), _run(1, "street", 0, True, 0.3), _run(0, "street", 1, False, 5.0)]
    ca, cb = common_laps(a, b)  # start 0 is completed by both sides (by different seeds); start 1 by a only
    assert [(r["seed"], r["start_index"]) for r in ca] == [(0, 0)] and [(r["seed"], r["start_index"]) for r in cb] == [
        (1, 0)
    ]


def _model(family: str, ade: float, share: float, seeds: int = 3) -> Model:
    """Seed means share - 0.01, share, share + 0.01 (a spread between seeds), two runs each."""
    return Model(family, ade, [[share + 0.01 * (s - 1) + d for d in (-0.01, 0.01)] for s in range(seeds)], None)


def test_an_inverted_pair_decides_claim_3() -> None:
    """The most accurate model trains the worst policies: that pair is inverted; the rest keep accuracy's order."""
    ms = {"a": _model("f", 0.1, 0.2), "b": _model("f", 0.2, 0.9), "c": _model("f", 0.3, 0.6)}
    pairs = {(p["more_accurate"], p["less_accurate"]): p for p in inversions(ms)}
    assert pairs[("a", "b")]["order"] == "inverted" and pairs[("a", "b")]["interval"].estimate == pytest.approx(-0.7)
    assert pairs[("b", "c")]["order"] == "kept" and pairs[("a", "c")]["order"] == "inverted"
    assert all(p["p_adjusted"] >= p["p_value"] for p in pairs.values())  # Holm never lowers a p


def _eval(share_of_seed: dict[int, float], track: str = "street") -> dict[str, Any]:
    runs = [
        {**_run(seed, track, i, share >= 1.0, 0.1, cond), "completion_fraction": min(share, 1.0)}
        for seed, share in share_of_seed.items()
        for i in range(2)
        for cond in ("nominal", "ice")
    ]
    return {"runs": runs}


def test_claim_3_rows_from_records() -> None:
    rows = {f: {"prediction": {"ade_2s_all": ade}} for f, ade in (("x", 0.1), ("y", 0.2), ("z", 0.3))}
    evals = {"x": _eval({0: 0.5, 1: 0.52, 2: 0.54}), "y": _eval({0: 0.9, 1: 0.92}), "z": _eval({0: 0.2, 1: 0.22})}
    primary, association = accuracy(rows, evals, ["x", "y", "z"], {})
    assert primary["verdict"] == "holds" and primary["k"] == 2  # x is more accurate than y and drives worse
    assert primary["effect"] == pytest.approx(0.52 - 0.91) and "x minus y" in primary["detail"]["effect_is"]
    assert association["role"] == "secondary" and association["effect"] == pytest.approx(-0.5)
    assert association["verdict"] == "cannot tell"  # 3 models: the exact p is at best 2/6
    # the deciding pair's power, at Holm's strictest level over the 3 pairs: wider than at 5 %
    x, y = [0.5, 0.52, 0.54], [0.9, 0.92]
    assert primary["power"] == pytest.approx(power_plan(x, y, 0.52 - 0.91, confidence=1 - 0.05 / 3))
    assert primary["power"]["detectable_effect"] > power_plan(x, y, 0.52 - 0.91)["detectable_effect"]
    z = 2.393980 + 0.841621  # two-sided at 0.05 / 3, 80 % power; sd of the difference sqrt(0.02^2 + 0.01414^2)
    assert primary["power"]["detectable_effect"] == pytest.approx(z * math.sqrt(0.0006) / math.sqrt(2), rel=1e-4)
    assert primary["power"]["alpha"] == pytest.approx(0.05 / 3)
    alone = accuracy(rows, {"x": evals["x"]}, ["x", "y", "z"], {})[0]
    assert alone["verdict"] == "not run"


def test_within_family_permutation_is_exact_and_ignores_between_family_differences() -> None:
    """Two families of three models, each in perfect order (rho -1): 2 of the 36 joint orderings are as extreme."""
    ms = {
        **{f"p{i}": _model("p", ade, q) for i, (ade, q) in enumerate([(0.1, 0.9), (0.2, 0.8), (0.3, 0.7)])},
        **{f"q{i}": _model("q", ade, q) for i, (ade, q) in enumerate([(1.1, 0.3), (1.2, 0.2), (1.3, 0.1)])},
    }
    flat = {f"r{i}": _model("r", ade, 0.5) for i, ade in enumerate((0.1, 0.2, 0.3))}  # all tie on quality: no rho
    res = within_family_correlation(ms | flat)
    assert set(res["families"]) == {"p", "q"}
    assert within_family_correlation(flat)["p_value"] is None  # never a verdict from a family that says nothing
    assert res["rho"] == pytest.approx(-1.0) and res["exact"] and res["orderings"] == 36
    assert res["p_value"] == pytest.approx(2 / 36)
    # the same count by brute force over both families' orderings
    stats = [
        np.mean([spearman_rho(np.arange(3.0), np.array(o1, float)), spearman_rho(np.arange(3.0), np.array(o2, float))])
        for o1, o2 in itertools.product(itertools.permutations(range(3)), repeat=2)
    ]
    assert np.mean(np.abs(stats) >= 1 - 1e-9) == pytest.approx(2 / 36)


def test_sensitivity_rows_leave_the_development_circuit_out() -> None:
    """On the road course ddm steers more smoothly than the transformer, elsewhere they are equal: the primary
    holds, its sensitivity row (without road_course) cannot tell."""

    def ev(rate_road: float) -> dict[str, Any]:
        runs = []
        for seed in range(3):
            for track, rate in ((DEVELOPED_ON, rate_road + 0.01 * seed), ("street", 0.5 + 0.01 * seed)):
                runs += [_run(seed, track, i, True, rate + 0.001 * i, c) for i in range(2) for c in ("nominal", "ice")]
        return {"runs": runs}

    evals = {"ddm": ev(0.1), "dytr": ev(0.5), "transformer": ev(0.5)}
    rows = claims(evals, {}, ["ddm", "dytr", "transformer"], {}, None)
    by = {(c["role"], c["statement"]): c for c in rows}
    head = "ddm vs transformer, nominal: mean_abs_steering_rate lower"
    assert by[("primary", head)]["verdict"] == "holds"
    sens = by[("sensitivity", f"{head} [without {DEVELOPED_ON}]")]
    assert sens["verdict"] == "cannot tell" and sens["effect"] == pytest.approx(0.0)
    assert sens["n"] == "3 vs 3 seeds, 6 vs 6 common laps"


def _seed_rows(times: list[float | None], bound: float) -> list[dict[str, Any]]:
    return [
        {"seed": i, "t_to_quality_s": t, "not_reached_within_s": None if t is not None else bound}
        for i, t in enumerate(times)
    ]


def test_claim_1_by_the_censored_times_of_every_seed() -> None:
    """Five seeds per route: the distilled route reaches quality in four, direct in none within its 900 s (censored
    there, never counted as 900 s): the log-rank test decides, the effect is a bound with its unit."""
    from s3.report.censored import compare
    from s3.report.claims import efficiency_claim

    dytr = _seed_rows([500.0, 520.0, 600.0, 650.0, None], 800.0)
    direct = _seed_rows([None] * 5, 900.0)
    ttq = {"claim_route": "dytr", "dytr": {"seeds": dytr}, "direct": {"seeds": direct}, "distilled_best": {}}
    row = efficiency_claim(ttq)
    assert row["verdict"] == "holds" and row["k"] == 5 and row["p_value"] < 0.05
    assert row["effect"] == pytest.approx(900.0 - 600.0) and row["effect_text"].startswith("at least 300 s sooner")
    assert row["n"] == "5 vs 5 seeds (dytr vs direct), 4 vs 0 reached" and "log-rank" in row["test"]
    z = 1.959964 + 0.841621  # Schoenfeld: 4 events, equal groups: the smallest hazard ratio found 80 % of the time
    assert row["power"]["detectable_effect"] == pytest.approx(math.exp(2 * z / math.sqrt(4)), rel=1e-5)
    assert row["power"]["text"] == "hazard ratio 16.5 (4 events) at K = 5"
    from s3.report.stats import logrank_power

    q = 5 / 9  # unequal groups (a seed lost on one side): Schoenfeld's allocation term q (1 - q) < 1/4
    assert logrank_power(4, 5, 4)["detectable_effect"] == pytest.approx(math.exp(z / math.sqrt(4 * q * (1 - q))))
    assert logrank_power(0, 5, 5) is None
    # the other way round: direct reaches quality sooner in every seed
    fast = _seed_rows([100.0, 120.0, 130.0, 140.0, 150.0], 900.0)
    other = efficiency_claim({**ttq, "direct": {"seeds": fast}})
    assert other["verdict"] == "does not hold" and other["effect"] < 0
    # two seeds a side, overlapping: no decision
    tie = efficiency_claim(
        {
            **ttq,
            "dytr": {"seeds": _seed_rows([500.0, 700.0], 800.0)},
            "direct": {"seeds": _seed_rows([600.0, None], 900.0)},
        }
    )
    assert tie["verdict"] == "cannot tell"
    # the medians are Kaplan-Meier's: direct's is not reached (no seed got there), a lower bound
    res = compare(dytr, direct, "t_to_quality_s", "not_reached_within_s")
    assert res["median_a_s"] == 600.0 and res["median_a_reached"] and not res["median_b_reached"]
    assert res["p_value"] == pytest.approx(
        sps.logrank(
            sps.CensoredData(uncensored=[500, 520, 600, 650], right=[800]), sps.CensoredData(right=[900] * 5)
        ).pvalue
    )


def test_a_claim_with_several_primaries_holds_only_when_every_one_does() -> None:
    """Intersection-union for "holds"; "does not hold" needs a primary decided the other way after Holm over the
    primaries; a primary without data leaves the claim at cannot tell; secondaries and sensitivity rows never
    decide."""

    def row(claim: str, verdict: str, role: str = "primary", effect: float | None = -0.1, p: float | None = 0.04):
        out = {"claim": claim, "verdict": verdict, "role": role, "effect": effect, "p_value": p}
        return {**out, "direction": "negative"}

    two = [row("2", "holds"), row("2", "holds"), row("2", "does not hold", "secondary"), row("2", "x", "sensitivity")]
    assert claim_verdicts(two)["2"] == {"verdict": "holds", "primaries": 2, "with_data": 2}
    no_lap = [*two, row("2", "cannot tell", effect=None, p=None)]  # no lap both complete
    assert claim_verdicts(no_lap)["2"] == {"verdict": "cannot tell", "primaries": 3, "with_data": 2}
    # decided the other way beside two at p 0.04: p 0.01 stays below 0.05 after Holm over 3 (0.03); p 0.03 does not
    # (0.09)
    assert claim_verdicts([*two, row("2", "does not hold", effect=0.2, p=0.01)])["2"]["verdict"] == "does not hold"
    assert claim_verdicts([*two, row("2", "does not hold", effect=0.2, p=0.03)])["2"]["verdict"] == "cannot tell"
    one = claim_verdicts([row("3", "cannot tell", effect=None), row("4", "not run", effect=None)])
    assert one["3"]["verdict"] == "cannot tell" and one["4"]["verdict"] == "not run"  # one primary: its own verdict
