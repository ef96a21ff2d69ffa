"""The report: accuracy joined with policy quality, the rank correlation, the efficiency rows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from s3.report import report as rp
from s3.report.cost import DASH, efficiency
from s3.report.mlflow import log_report_mlflow
from s3.report.ranks import quality_ranks, spearman
from s3.report.render import (
    MAIN_COLUMNS,
    correlation_lines,
    cost_lines,
    efficiency_rows,
    main_rows,
    markdown,
    report_table,
)

ADE2 = {"bicycle": 1.0, "ddm": 0.2, "transformer": 0.5, "dytr": 0.3}  # accuracy order: ddm, dytr, transformer, bicycle
COMPLETION = {"bicycle": 0.25, "ddm": 1.0, "transformer": 0.5, "dytr": 0.75}  # the same order
RL_WALL = {"bicycle": 10.0, "ddm": 20.0, "transformer": 30.0, "dytr": 40.0}
DISTILL_WALL = {"bicycle": 5.0, "ddm": 50.0, "transformer": 60.0, "dytr": 70.0}


def _write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _distill(ade2: float, wall: float) -> dict[str, Any]:
    split = {"windows": 10, "ade_1s": ade2 / 2, "ade_2s": ade2, "fde_2s": 2 * ade2}
    curve = {"t": [0.5, 1.0, 2.0], "all": [ade2 / 4, ade2 / 2, ade2], "ice": [ade2 / 2, ade2, 2 * ade2]}
    return {
        "dt": 0.1,
        "rollout": {"all": split, "ice": {k: 2 * v for k, v in split.items()}},
        "error_vs_horizon": curve,
        "total_wall_s": wall,
    }


def _runs(rate: float, cond: str, lap: float | None, seeds: int = 3, starts: int = 4) -> list[dict[str, Any]]:
    """Per seed, round(rate * starts) completed runs of `starts` (lap time `lap`), the rest half a lap."""
    rows = []
    for seed in range(seeds):
        for i in range(starts):
            done = i < round(rate * starts)
            rows.append(
                {
                    "seed": seed,
                    "track": "road_course",
                    "condition": cond,
                    "start_index": i,
                    "completed": done,
                    "completion_fraction": 1.0 if done else 0.5,
                    "lap_time_s": lap if done else None,
                    "mean_abs_steering_rate": 0.05,
                    "mean_abs_steering_jerk": 0.5,
                    "mean_abs_lateral_jerk": 1.0,
                    "pedal_switches": 12.0,
                    "time_off_track_s": 0.0,
                    "min_edge_margin_m": 1.0,
                    "patch_crossing_rate": 0.5 if cond == "ice" else None,
                }
            )
    return rows


def _eval(nominal: float, ice: float, lap: float | None = 100.0, gap: bool = True) -> dict[str, Any]:
    from s3.evaluate.suite import by_seed, summarise

    runs = _runs(nominal, "nominal", lap) + _runs(ice, "ice", lap)
    out = {
        "simulator": {"control_dt": 0.1},
        "runs": runs,
        "summary": summarise(runs, ["road_course"], ["nominal", "ice"]),
        "by_seed": by_seed(runs, ["nominal", "ice"]),
    }
    if gap:
        g = {
            "completion_rate": {"source": nominal, "distilled": 1.0, "gap": nominal - 1.0},
            "lap_share": {"source": 1.0, "distilled": 1.0, "gap": 0.0},
            "lap_time_s": {"source": lap, "distilled": 90.0, "gap": None if lap is None else lap - 90.0},
        }
        out["transfer_gap"] = {"nominal": g, "ice": g}
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A complete workspace: four families, oracle, direct (reached the lap) and pid."""
    m = tmp_path / "metrics"
    for fam in ADE2:
        _write(m / "distill" / f"{fam}.json", _distill(ADE2[fam], DISTILL_WALL[fam]))
        _write(m / "eval" / f"{fam}.json", _eval(COMPLETION[fam], COMPLETION[fam]))
        _write(m / "train" / f"{fam}.json", {"family": fam, "train": {"wall_s": RL_WALL[fam], "env_steps": 10**6}})
    _write(m / "eval" / "oracle.json", _eval(1.0, 1.0, 90.0))
    _write(m / "train" / "oracle.json", {"policy": "oracle", "family": "dytr", "train": {"wall_s": 25.0}})
    _write(m / "eval" / "direct.json", _eval(1.0, 0.0, gap=False))
    _write(
        m / "train" / "direct.json",
        {"wall_s": 80.0, "budget_s": 300.0, "env_steps": 12000, "env_steps_per_s": 150.0, "workers": 2},
    )
    _write(m / "eval" / "pid.json", _eval(1.0, 1.0, 120.0, gap=False))
    manifest = {"control_dt": 0.1, "rows": 5000, "simulator": "mujoco", "params": {"collect": {"workers": 0}}}
    _write(tmp_path / "data" / "rollouts" / "manifest.json", manifest)
    _write(
        m / "collect.json", {"wall_seconds_this_run": 60.0, "wall_seconds_total": 100.0, "workers": 4}
    )  # the run's clock, not the data's
    return tmp_path


def _strict(path: Path) -> Any:
    def refuse(c: str) -> None:
        raise ValueError(f"non-strict JSON constant {c}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_table_joins_accuracy_and_quality(ws: Path) -> None:
    rep = rp.build_report(ws / "metrics")
    assert list(rep["rows"]) == ["bicycle", "ddm", "transformer", "dytr", "oracle", "direct", "pid"]
    ddm = rep["rows"]["ddm"]
    assert (
        ddm["prediction"]["ade_2s_all"] == 0.2
        and ddm["prediction"]["ade_1s_ice"] == 0.2
        and ddm["prediction"]["ade_2s_ice"] == 0.4
    )
    assert ddm["policy"]["nominal"]["completion_rate"] == 1.0 and ddm["policy"]["ice"]["patch_crossing_rate"] == 0.5
    assert ddm["transfer_gap"]["nominal"] == {"completion_rate": 0.0, "lap_share": 0.0, "lap_time_s": 10.0}
    nominal = ddm["policy"]["nominal"]
    assert (
        nominal["seeds"] == 3
        and nominal["runs"] == 12
        and nominal["lap_time_n"] == 12
        and nominal["completion_ci95"] == [1.0, 1.0]
    )
    bicycle = rep["rows"]["bicycle"]["policy"][
        "nominal"
    ]  # 1 of 4 laps per seed: 0.25 with a zero-width seed interval, lap share 0.625
    assert bicycle["completion_rate"] == 0.25 and bicycle["lap_share"] == 0.625 and bicycle["lap_time_n"] == 3
    assert rep["rows"]["oracle"]["prediction_from"] == "dytr"  # the oracle drives dytr's model
    assert rep["rows"]["oracle"]["prediction"]["ade_2s_all"] == 0.3
    assert rep["rows"]["pid"]["prediction"]["ade_2s_all"] is None

    rows = {r[0]: r for r in main_rows(rep)}
    assert rows["ddm"][1:5] == ["0.10", "0.20", "0.20", "0.40"]
    assert rows["ddm"][5:7] == [DASH, DASH]  # no manoeuvre probes in these evals
    assert rows["ddm"][7:13] == [
        "100 [100, 100] (n=3/12)",
        "100 [100, 100] (n=3/12)",
        "100 [100, 100]",
        "100 [100, 100]",
        "100.0 [100.0, 100.0] (n=12)",
        "100.0 [100.0, 100.0] (n=12)",
    ]
    assert rows["ddm"][16] == "+0% / +10.0 s" and rows["ddm"][18] == "1.0"
    assert rows["pid"][1] == DASH and rows["pid"][16] == DASH and rows["pid"][18] == DASH
    assert "oracle (dytr model)" in rows
    assert rows["bicycle"][7] == "25 [0, 50] (n=3/12)" and rows["bicycle"][11] == "100.0 [100.0, 100.0] (n=3)"
    table = report_table(rep)
    assert table.row_count == 7 and len(table.columns) == len(MAIN_COLUMNS)


def test_manoeuvre_probes_join_the_table_and_the_correlation(ws: Path) -> None:
    """The probes' errors come from each policy's eval; the worst ice probe drives best here (rho +1)."""
    ice_err = {"bicycle": 4.0, "ddm": 1.0, "transformer": 3.0, "dytr": 2.0}  # the accuracy order of ADE2
    for fam, c in COMPLETION.items():
        ev = _eval(c, c)
        ev["probes"] = {
            "summary": {
                "pos_err_3s_asphalt": 0.5,
                "pos_err_3s_ice": 5.0 - ice_err[fam],
                "slides_agreed": 6,
                "manoeuvres": 8,
            }
        }
        _write(ws / "metrics" / "eval" / f"{fam}.json", ev)
    rep = rp.build_report(ws / "metrics")
    pred = rep["rows"]["ddm"]["prediction"]
    assert pred["probe_3s_ice"] == 4.0 and pred["probe_3s_asphalt"] == 0.5 and pred["probe_slides_agreed"] == 0.75
    assert rep["rows"]["pid"]["prediction"]["probe_3s_ice"] is None
    assert rep["correlation"]["probe_3s_ice"]["rho"] == pytest.approx(1.0)
    assert rep["correlation"]["ade_2s_all"]["rho"] == pytest.approx(-1.0)  # the more accurate, the better: -1
    assert rep["correlation"]["probe_3s_asphalt"]["rho"] is None  # all equal: no ranking
    rows = {r[0]: r for r in main_rows(rep)}
    assert rows["ddm"][5:7] == ["0.5 / 4.0", "75%"]
    assert any(line.startswith("probe_3s_ice: rho = +1.00") for line in correlation_lines(rep))


@pytest.mark.parametrize(
    ("completion", "rho"), [(COMPLETION, -1.0), ({f: 1.25 - c for f, c in COMPLETION.items()}, 1.0)]
)
def test_spearman_sign_convention(ws: Path, completion: dict[str, float], rho: float) -> None:
    """-1: the most accurate family drives best; +1: the least accurate drives best (claim 3's convention)."""
    for fam, c in completion.items():
        _write(ws / "metrics" / "eval" / f"{fam}.json", _eval(c, c))
    corr = rp.build_report(ws / "metrics")["correlation"]
    assert corr["headline"] == "ade_2s_all"
    assert corr["ade_2s_all"]["rho"] == pytest.approx(rho) and corr["ade_2s_all"]["n"] == 4
    assert corr["ade_2s_all"]["families"] == ["bicycle", "ddm", "transformer", "dytr"]


def test_quality_ties_break_on_lap_time_and_average() -> None:
    def row(score: float | None, nominal: float | None, ice: float | None) -> dict[str, Any]:
        return {"quality": {"score": score}, "policy": {"nominal": {"lap_time_s": nominal}, "ice": {"lap_time_s": ice}}}

    ranks = quality_ranks(
        {
            "a": row(1.0, 110.0, 150.0),
            "b": row(1.0, 100.0, 150.0),
            "c": row(0.5, None, None),
            "d": row(0.5, None, None),
            "e": row(None, 90.0, 90.0),
        }
    )
    assert ranks == {"b": 1.0, "a": 2.0, "c": 3.5, "d": 3.5}


def test_quality_ties_on_completion_break_on_the_lap_share_driven() -> None:
    """Policies that never finish are still ordered: the one that drives further ranks better."""

    def row(shares: tuple[float, float] | None) -> dict[str, Any]:
        conds = dict(zip(("nominal", "ice"), shares or (None, None)))
        return {
            "quality": {"score": 0.0},
            "policy": {c: {"lap_time_s": None, "lap_share": v} for c, v in conds.items()},
        }

    ranks = quality_ranks(
        {"far": row((0.6, 0.3)), "near": row((0.1, 0.1)), "mid": row((0.3, 0.2)), "unknown": row(None)}
    )
    assert ranks == {"far": 1.0, "mid": 2.0, "near": 3.0, "unknown": 4.0}


def test_spearman_needs_three_families_and_variation() -> None:
    few = spearman({"ddm": 0.1, "dytr": 0.2, "bicycle": None}, {"ddm": 1.0, "dytr": 2.0, "bicycle": 3.0})
    assert few["rho"] is None and few["n"] == 2 and "3 families" in few["reason"]
    flat = spearman({"ddm": 0.1, "dytr": 0.2, "bicycle": 0.3}, {"ddm": 2.0, "dytr": 2.0, "bicycle": 2.0})
    assert flat["rho"] is None and "policy quality" in flat["reason"]


def _ttq(ws: Path, direct_reached: bool = True) -> None:
    """records/time_to_quality.json: each family reaches quality after its RL_WALL (collect 100 s + its distill
    first), the oracle after 25 s in dytr's model; direct at 80 s (600 s at real time), or never within 300 s."""
    routes: dict[str, Any] = {
        fam: {"reached": True, "offset_s": 100.0 + DISTILL_WALL[fam], "t_to_quality_s": 100.0 + DISTILL_WALL[fam] + t}
        for fam, t in RL_WALL.items()
    }
    routes["oracle"] = {"reached": True, "offset_s": 170.0, "t_to_quality_s": 195.0}
    routes["direct"] = (
        {"reached": True, "t_to_quality_s": 80.0, "t_to_quality_real_time_s": 600.0}
        if direct_reached
        else {"reached": False, "not_reached_within_s": 300.0, "not_reached_within_real_time_s": 600.0}
    )
    _write(ws / "metrics" / "time_to_quality.json", routes)


def test_efficiency_arithmetic(ws: Path) -> None:
    """The efficiency table reads claim 1's curves: RL time to quality, not the training's whole wall clock."""
    _ttq(ws)
    eff = rp.build_report(ws / "metrics")["efficiency"]
    assert eff["control_dt"] == 0.1
    c, d = eff["collect"], eff["direct"]
    assert c["wall_s"] == 100.0 and c["workers"] == 4 and c["real_time_car_s"] == pytest.approx(500.0)
    assert c["wall_s_source"] == "records/collect.json wall_seconds_total"  # the whole dataset, reused shards included
    assert c["real_time_wall_s"] == pytest.approx(125.0) and c["real_time_factor_per_worker"] == pytest.approx(1.25)
    assert d["reached"] is True and d["t_to_policy_s"] == 80.0
    assert d["real_time_wall_s"] == pytest.approx(600.0)  # 12000 steps x 0.1 s / 2 workers
    ddm = eff["families"]["ddm"]
    assert ddm["one_time_cost_s"] == 150.0  # collect 100 + distill 50
    assert ddm["speedup"] == pytest.approx(4.0) and ddm["speedup_bound"] == "exact" and ddm["speedup_text"] == "4.0x"
    assert (
        ddm["break_even_n"] == pytest.approx(2.5)
        and ddm["break_even_policies"] == 3
        and ddm["break_even_bound"] == "exact"
    )
    rt = eff["real_time"]["ddm"]
    assert rt["one_time_cost_s"] == pytest.approx(175.0)  # 125 + 50
    assert rt["speedup"] == pytest.approx(30.0)  # 600 / 20
    assert rt["break_even_n"] == pytest.approx(175.0 / 580.0) and rt["break_even_policies"] == 1
    assert eff["families"]["oracle"]["distill_wall_s"] == 70.0  # dytr's model
    assert eff["families"]["dytr"]["break_even_n"] == pytest.approx(170.0 / 40.0)
    rows = {r[0]: r for r in efficiency_rows(rp.build_report(ws / "metrics"))}
    assert rows["ddm"][1:6] == ["20 s", "80 s", "4.0x", "2.5 min", "3 (n = 2.50)"]
    (ws / "metrics" / "time_to_quality.json").unlink()  # no curves: not measured, whatever the suite says
    eff = rp.build_report(ws / "metrics")["efficiency"]
    assert eff["direct"]["reached"] is None and eff["families"]["ddm"]["speedup"] is None


def test_rl_wall_counts_every_seed_trained_side_by_side(ws: Path) -> None:
    seeds = {"selected_seed": 1, "wall_s": 40.0, "seeds": [{"seed": 0, "wall_s": 38.0}, {"seed": 1, "wall_s": 25.0}]}
    _write(
        ws / "metrics" / "train" / "oracle.json",
        {"policy": "oracle", "family": "dytr", "train": {"wall_s": 25.0}, "seed_selection": seeds},
    )
    eff = rp.build_report(ws / "metrics")["efficiency"]
    assert eff["families"]["oracle"]["rl_wall_s"] == 40.0  # the whole seed stage, not the kept seed's 25 s
    assert eff["families"]["ddm"]["rl_wall_s"] == 20.0  # one seed: its own wall clock


def test_a_run_cut_by_the_wall_clock_is_marked_truncated(ws: Path) -> None:
    from s3.report.render import main_rows, markdown

    seeds = [{"seed": k, "stopped_by": "max_minutes" if k == 2 else "max_env_steps"} for k in range(3)]
    _write(ws / "metrics" / "train" / "oracle.json", {"policy": "oracle", "seed_selection": {"seeds": seeds}})
    rep = rp.build_report(ws / "metrics")
    assert rep["rows"]["oracle"]["truncated_seeds"] == 1 and rep["rows"]["ddm"]["truncated_seeds"] == 0
    labels = [row[0] for row in main_rows(rep)]
    assert "oracle †" in labels and "ddm" in labels
    text = markdown(rep, [], ws / "reports")
    assert "†Truncated: the wall-clock safety cap (`train.max_minutes`) stopped training" in text
    assert "for oracle (1 seed);" in text


def test_a_seed_chosen_in_the_source_is_a_separate_row_with_its_cost(ws: Path) -> None:
    """seed_selection 'source': the row of the chosen seed beside the policy's every-seed row, its source runs at real
    time."""
    ev = _eval(0.5, 0.5)
    for r in ev["runs"]:  # seed 1 completes everything, the others nothing
        r["completed"] = r["seed"] == 1
        r["completion_fraction"] = 1.0 if r["seed"] == 1 else 0.2
        r["lap_time_s"] = 100.0 if r["seed"] == 1 else None
    from s3.evaluate.suite import summarise

    ev["summary"] = summarise(ev["runs"], ["road_course"], ["nominal", "ice"])
    _write(ws / "metrics" / "eval" / "ddm.json", ev)
    seeds = [{"seed": k, "source": {"score": float(k == 1), "car_steps": 1000}} for k in range(3)]
    sel = {"in": "source", "selected_seed": 1, "rule": "best lap share in the source", "seeds": seeds}
    _write(ws / "metrics" / "train" / "ddm.json", {"family": "ddm", "train": {"wall_s": 20.0}, "seed_selection": sel})
    rep = rp.build_report(ws / "metrics")
    every, chosen = rep["rows"]["ddm"], rep["rows"]["ddm (selected)"]
    assert (
        every["policy"]["nominal"]["completion_rate"] == pytest.approx(1 / 3)
        and every["policy"]["nominal"]["seeds"] == 3
    )
    assert (
        chosen["kind"] == "selected"
        and chosen["policy"]["nominal"]["completion_rate"] == 1.0
        and chosen["policy"]["nominal"]["seeds"] == 1
    )
    assert chosen["selection"]["source_car_steps"] == 3000 and chosen["selection"][
        "source_real_time_one_instance_s"
    ] == pytest.approx(300.0)  # 3000 x 0.1 s
    assert (
        every["quality"]["rank"] is not None and chosen["quality"]["rank"] is None
    )  # the ranks compare families, every seed


def test_efficiency_bounds_when_direct_never_completes(ws: Path) -> None:
    _ttq(ws, direct_reached=False)
    eff = rp.build_report(ws / "metrics")["efficiency"]
    assert eff["direct"]["reached"] is False and eff["direct"]["t_to_policy_s"] == 300.0  # the budget
    assert eff["direct"]["text"] == "not reached within 5.0 min"
    ddm = eff["families"]["ddm"]
    assert (
        ddm["speedup"] == pytest.approx(15.0) and ddm["speedup_bound"] == "lower" and ddm["speedup_text"] == ">= 15.0x"
    )
    # t_direct > B, so n = C / (B - t) over-estimates: an upper bound
    assert ddm["break_even_n"] == pytest.approx(150.0 / 280.0) and ddm["break_even_bound"] == "upper"
    assert ddm["break_even_text"].startswith("<= 1 ")


def test_efficiency_edge_cases() -> None:
    assert efficiency(20.0, False, 80.0, True, 150.0)["speedup_text"] == "not reached"
    slower = efficiency(100.0, True, 80.0, True, 150.0)
    assert (
        slower["speedup"] == pytest.approx(0.8)
        and slower["break_even_n"] is None
        and slower["break_even_text"].startswith("never")
    )
    unknown = efficiency(20.0, True, None, None, 150.0)
    assert unknown["speedup"] is None and unknown["speedup_text"] == DASH and unknown["break_even_text"] == DASH
    no_cost = efficiency(20.0, True, 80.0, True, None)
    assert no_cost["speedup"] == pytest.approx(4.0) and no_cost["break_even_n"] is None


def test_missing_inputs_are_not_measured(tmp_path: Path) -> None:
    rep = rp.build_report(tmp_path / "metrics")
    assert list(rep["rows"]) == ["bicycle", "ddm", "transformer", "dytr"]
    assert all(v is None for r in rep["rows"].values() for v in r["prediction"].values())
    assert rep["correlation"]["ade_2s_all"]["rho"] is None
    eff = rep["efficiency"]
    assert eff["control_dt"] is None and eff["collect"]["wall_s"] is None and eff["direct"]["reached"] is None
    assert eff["families"]["ddm"]["speedup"] is None and eff["families"]["ddm"]["break_even_text"] == DASH
    assert any("manifest.json" in m for m in rep["missing"])
    assert all(c == DASH for r in main_rows(rep) for c in r[1:])
    paths = rp.write_report(rep, tmp_path / "metrics", tmp_path / "reports", tmp_path / "plots")
    assert all(p.exists() for p in paths)
    assert _strict(tmp_path / "metrics" / "report.json")["rows"]["ddm"]["quality"]["rank"] is None


def test_nan_and_unknown_workers_never_become_numbers(ws: Path) -> None:
    d = _distill(math.nan, 50.0)
    (ws / "metrics" / "distill" / "ddm.json").write_text(json.dumps(d))  # NaN as Python's json writes it
    _write(
        ws / "metrics" / "collect.json", {"wall_seconds_this_run": 100.0}
    )  # no workers recorded, none configured (0 = per core)
    (ws / "metrics" / "train" / "direct.json").unlink()
    rep = rp.build_report(ws / "metrics")
    assert rep["rows"]["ddm"]["prediction"]["ade_2s_all"] is None
    assert rep["correlation"]["ade_2s_all"]["n"] == 3
    c = rep["efficiency"]["collect"]
    assert c["workers"] is None and c["real_time_wall_s"] is None and c["real_time_car_s"] == pytest.approx(500.0)
    assert rep["efficiency"]["direct"]["reached"] is None and rep["efficiency"]["families"]["ddm"]["speedup"] is None
    rp.write_report(rep, ws / "metrics", ws / "reports", ws / "plots")
    _strict(ws / "metrics" / "report.json")


def test_entry_point_writes_prints_and_logs(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3 import tracking

    calls: list[tuple[str, str | None, dict[str, Any], list[Path]]] = []
    monkeypatch.setattr(
        tracking,
        "log_stage_safely",
        lambda stage, fam, params, metrics, artifacts: calls.append((stage, fam, metrics, list(artifacts))) or "run",
    )
    _ttq(ws)
    console = Console(record=True, width=300)
    rep = rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=console)
    saved = _strict(ws / "metrics" / "report.json")
    assert saved["rows"]["ddm"]["quality"]["rank"] == rep["rows"]["ddm"]["quality"]["rank"] == 1.0
    md = (ws / "reports" / "report.md").read_text()
    assert "![accuracy_vs_quality](../plots/report/accuracy_vs_quality.png)" in md
    assert "| ddm | 0.10 | 0.20 |" in md and "## Definitions" in md and "rho = -1.00" in md
    assert (ws / "plots" / "report" / "accuracy_vs_quality.png").stat().st_size > 1000
    assert (
        "![error_vs_horizon](../plots/report/error_vs_horizon.png)" in md
    )  # every family's curve: the report stage's figure
    elsewhere = {**rep, "generated_at": "2000-01-01T00:00:00+00:00", "machine": "another-host (x86_64, Linux, 64 CPUs)"}
    assert markdown(elsewhere, [], ws / "reports") == markdown(
        rep, [], ws / "reports"
    )  # the same metrics, the same bytes
    assert (ws / "plots" / "report" / "error_vs_horizon.png").stat().st_size > 1000
    text = console.export_text()
    assert "transformer" in text and "4.0x" in text
    by_run = {fam: m for _, fam, m, _ in calls}
    assert set(by_run) == {"bicycle", "ddm", "transformer", "dytr", "oracle", None}
    assert (
        by_run["ddm"]["prediction"]["ade_2s_all"] == 0.2
        and by_run["ddm"]["policy"]["nominal"]["completion_rate"] == 1.0
    )
    assert by_run["ddm"]["efficiency"]["speedup"] == pytest.approx(4.0)
    assert by_run[None]["correlation"]["ade_2s_all"]["rho"] == pytest.approx(-1.0)
    assert by_run[None]["baselines"]["pid"]["policy"]["ice"]["lap_time_s"] == 120.0
    assert all(len(a) == 4 for *_, a in calls)


def test_mlflow_is_off_inside_pytest(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3_MLFLOW", raising=False)
    ids = log_report_mlflow(rp.build_report(ws / "metrics"))
    assert set(ids.values()) == {None}


def test_spearman_p_value_is_exact_for_four_families() -> None:
    """Four families in perfect order: 2 of the 24 orderings are as extreme, so p = 1/12, not 0."""
    errors = {"bicycle": 0.9, "ddm": 0.2, "transformer": 0.4, "dytr": 0.1}
    perfect = spearman(errors, {"bicycle": 4.0, "ddm": 2.0, "transformer": 3.0, "dytr": 1.0})
    assert perfect["rho"] == pytest.approx(1.0) and perfect["p_value"] == pytest.approx(2 / 24)
    swapped = spearman(errors, {"bicycle": 4.0, "ddm": 3.0, "transformer": 2.0, "dytr": 1.0})
    assert swapped["rho"] == pytest.approx(0.8)
    assert swapped["p_value"] == pytest.approx(
        8 / 24
    )  # |rho| >= 0.8: each order, its reverse, and their 3 adjacent swaps


def test_the_claims_verdicts_from_their_inputs(ws: Path) -> None:
    """Each claim read from its own input: time to quality (claim 1), the seeds' runs (2), the models (3), the ablation
    (4)."""
    from s3.evaluate.suite import summarise

    def with_rate(rate_of_seed: dict[int, float]) -> dict:
        ev = _eval(1.0, 1.0)
        for r in ev["runs"]:
            r["mean_abs_steering_rate"] = rate_of_seed[r["seed"]] + 0.01 * r["start_index"]
        ev["summary"] = summarise(ev["runs"], ["road_course"], ["nominal", "ice"])
        return ev

    _write(ws / "metrics" / "eval" / "transformer.json", with_rate({0: 0.50, 1: 0.55, 2: 0.60}))
    _write(ws / "metrics" / "eval" / "ddm.json", with_rate({0: 0.10, 1: 0.12, 2: 0.14}))  # smoother: holds
    _write(ws / "metrics" / "eval" / "dytr.json", with_rate({0: 0.90, 1: 0.95, 2: 1.00}))  # rougher: does not hold
    ttq = {
        "direct": {"t_to_quality_s": None, "not_reached_within_s": 900.0, "t_to_quality_real_time_s": None},
        "distilled_best": {"policy": "ddm", "t_to_quality_s": 600.0, "t_to_quality_real_time_s": 700.0},
        "budget_rule": {"holds": False, "budget_s": 900.0, "max_family_route_s": 950.0},
    }
    _write(ws / "metrics" / "time_to_quality.json", ttq)

    def variant(share: float) -> dict:
        ev = _eval(0.0, 0.0)
        for r in ev["runs"]:
            r["completion_fraction"] = share + 0.02 * r["seed"] + 0.01 * r["start_index"]
        return {"params": {}, "distill": {}, "train": {}, "eval": ev}

    _write(ws / "metrics" / "experiments" / "ablation" / "diverse_blind.json", variant(0.8))
    _write(ws / "metrics" / "experiments" / "ablation" / "narrow_matched_blind.json", variant(0.2))  # primary: holds
    _write(ws / "metrics" / "experiments" / "ablation" / "narrow_blind.json", variant(0.7))
    _write(
        ws / "metrics" / "experiments" / "ablation" / "diverse_model_label.json", variant(0.3)
    )  # blind better: holds
    _write(
        ws / "metrics" / "experiments" / "ablation" / "diverse_policy_label.json", variant(0.8)
    )  # the same: cannot tell
    rep = rp.build_report(ws / "metrics")
    assert rep["efficiency"]["direct_budget_rule"]["holds"] is False  # read from the one check, time_to_quality's
    assert "NOT met" in "\n".join(cost_lines(rep))
    one = rep["claims"][0]  # direct never reached quality within 900 s, ddm did at 600 s: at least 300 s sooner
    assert (
        one["claim"] == "1 efficiency" and one["effect"] == 300.0 and one["detail"]["measured"]["kind"] == "lower bound"
    )
    assert one["effect_text"] == "at least 300 s sooner" and one["unit"] == "s"
    assert one["verdict"] == "cannot tell" and one["n"] == "1 seed per route" and one["k"] == 1  # no test at one seed
    primary = [c for c in rep["claims"] if c["role"] == "primary"]
    rate = {c["statement"].split(":")[0]: c for c in primary if c["claim"].startswith("2")}
    assert set(rate) == {f"{f} vs transformer, {c}" for f in ("ddm", "dytr") for c in ("nominal", "ice")}
    nominal = rate["ddm vs transformer, nominal"]
    assert nominal["verdict"] == "holds" and nominal["effect"] == pytest.approx(-0.43) and nominal["k"] == 3
    assert nominal["n"] == "3 vs 3 seeds, 12 vs 12 common laps" and nominal["test"].startswith("difference of seed")
    assert rate["dytr vs transformer, ice"]["verdict"] == "does not hold"
    assert rate["dytr vs transformer, ice"]["effect"] == pytest.approx(0.40)
    secondary = [c for c in rep["claims"] if c["role"] == "secondary" and c["claim"].startswith("2")]
    assert len(secondary) == 4 * 5  # per pair and condition: four smoothness metrics and the completion rate
    assert all(c["verdict"] == "cannot tell" and "Holm over 5" in c["test"] for c in secondary)  # equal in the fixture
    friction = [c for c in rep["claims"] if c["claim"].startswith("4") and c["role"] != "sensitivity"]
    four, unmatched, model, policy, both = friction
    assert four["role"] == "primary" and "as much ice" in four["statement"]
    assert four["effect"] == pytest.approx(0.6) and four["verdict"] == "holds"
    assert four["n"] == "3 vs 3 seeds, 12 vs 12 ice runs"
    assert unmatched["role"] == "secondary" and unmatched["effect"] == pytest.approx(0.1)
    assert model["statement"].endswith("for the model") and model["effect"] == pytest.approx(0.5)
    assert model["verdict"] == "holds" and "Holm over 3 secondaries" in model["test"]  # diverse_labelled not run
    assert policy["effect"] == pytest.approx(0.0) and policy["verdict"] == "cannot tell"
    assert both["verdict"] == "not run" and both["claim"] == four["claim"]
    assert rep["experiments"] == {
        "ablation": [
            "diverse_blind",
            "diverse_model_label",
            "diverse_policy_label",
            "narrow_blind",
            "narrow_matched_blind",
        ]
    }
    # every run is on road_course here: without it, the sensitivity rows have nothing to read
    sensitivity = [c for c in rep["claims"] if c["role"] == "sensitivity"]
    assert len(sensitivity) == 4 + 1 + 1 and all("[without road_course]" in c["statement"] for c in sensitivity)
    assert {c["verdict"] for c in sensitivity} == {"not run"}
    # each claim's verdict from its primaries: claim 2 has one that holds and one that does not: does not hold
    verdicts = rep["claim_verdicts"]
    two = verdicts["2 smoother, safer"]
    assert two["verdict"] == "does not hold" and two["primaries"] == 4
    assert verdicts["4 friction diversity transfers"]["verdict"] == "holds"
    assert verdicts["1 efficiency"] == {"verdict": "cannot tell", "primaries": 1, "with_data": 1}
    from s3.report.render_claims import verdict_rows

    assert ["2 smoother, safer", "does not hold", "4 / 4"] in verdict_rows(rep)


def test_direct_budget_rule_and_the_claims_verdicts(ws: Path) -> None:
    """Without time to quality the budget rule is not checked; claim 3: four families whose accuracy orders their
    quality, no pair inverted but not every pair decided (cannot tell); the association's exact p over 4 models is
    2/24 at best (cannot tell)."""
    rep = rp.build_report(ws / "metrics")
    assert rep["efficiency"]["direct_budget_rule"] is None and "not checked" in "\n".join(cost_lines(rep))
    primary = {c["claim"][0]: c for c in rep["claims"] if c["role"] == "primary" and not c["claim"].startswith("2")}
    three = primary["3"]
    assert three["verdict"] == "cannot tell" and three["k"] == 3
    # the fixture's three seeds of a family are identical: no spread between seeds, so no pair can be tested
    assert [p["order"] for p in three["detail"]["pairs"]] == [None] * 6
    assert all(p["p_value"] is None and p["effect"] > 0 for p in three["detail"]["pairs"])  # accuracy's order
    association = next(c for c in rep["claims"] if c["claim"].startswith("3") and c["role"] == "secondary")
    assert association["effect"] == pytest.approx(-1.0) and association["detail"]["p_value"] == pytest.approx(2 / 24)
    assert association["verdict"] == "cannot tell"
    assert primary["1"]["verdict"] == "not run" and primary["4"]["verdict"] == "not run"  # no ttq file, no ablation
    two = [c for c in rep["claims"] if c["claim"].startswith("2") and c["role"] != "sensitivity"]
    smooth = [c for c in two if "completion_rate" not in c["statement"]]
    assert len(two) == 4 * 6 and len(smooth) == 4 * 5
    assert all(c["verdict"] == "cannot tell" and c["effect"] == 0.0 for c in smooth)  # identical smoothness
    done = next(c for c in two if c["statement"] == "ddm vs transformer, nominal: completion_rate higher")
    assert done["effect"] == pytest.approx(0.5)  # failures counted apart: 12/12 vs 6/12 laps
    assert done["verdict"] == "cannot tell" and done["p_value"] is None  # three identical seeds a side: no Welch test


def test_the_seeds_a_policy_would_need() -> None:
    """Per policy and condition: the seeds at which its observed spread of lap share gives a 95 % interval of +-0.1."""
    from s3.report.rows import policy_columns

    ev = {
        "by_seed": {
            "0": {"ice": {"lap_share": 0.2}},
            "1": {"ice": {"lap_share": 0.5}},
            "2": {"ice": {"lap_share": 0.8}},
        }
    }
    assert policy_columns(ev)["ice"]["seeds_for_lap_share_0_1"] == 35  # sd 0.3: (1.96 x 0.3 / 0.1)^2 = 34.6
    assert (
        policy_columns({"by_seed": {"0": {"ice": {"lap_share": 0.2}}}})["ice"]["seeds_for_lap_share_0_1"] is None
    )  # one seed: no spread


def _lever(
    overrides: dict[str, Any],
    ice: list[float],
    dry: list[float],
    suite_ice: float,
    members: int = 1,
    policy: str = "ddm",
    family: str = "ddm",
    lap_s: float = 60.0,
) -> dict:
    seeds = [
        {"seed": i, "wall_s": 60.0 * (i + 1), "source": {"score_ice": a, "score_dry": b, "mean_lap_time_s": lap_s + i}}
        for i, (a, b) in enumerate(zip(ice, dry))
    ]
    distill = {"train": {"wall_s": 300.0 * members}, **({"ensemble": {"members": members}} if members > 1 else {})}
    return {
        "params": {"train.seeds": 3, **overrides},
        "distill": distill,
        "eval": _eval(1.0, suite_ice, 150.0),
        "train": {"policy": policy, "family": family, "seed_selection": {"seeds": seeds}},
    }


def test_the_ice_levers_section_reads_the_ice_set(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """records/experiments/ice/<variant>.json -> one row each: the hold-out (choice) figures with their
    seeds' range and n, the suite's (report) ones beside the cautious PID, the costs; nothing without the set."""
    monkeypatch.setattr(rp, "log_report_mlflow", lambda *a, **k: None)
    rep = rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=Console(file=None, width=200))
    assert rep["levers"] == [] and "Ice levers" not in (ws / "reports" / "report.md").read_text()
    ex = ws / "metrics" / "experiments" / "ice"
    _write(ex / "plain.json", _lever({}, [0.5, 0.6, 0.4], [1.0, 0.9, 0.8], 0.25))
    _write(ex / "ensemble.json", _lever({"distill.ddm.members": 5}, [0.9, 0.8, 1.0], [1.0, 1.0, 1.0], 1.0, members=5))
    _write(ws / "metrics" / "eval" / "pid_cautious.json", _eval(1.0, 1.0, 240.0, gap=False))
    rep = rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=Console(file=None, width=200))
    rows = {r["variant"]: r for r in rep["levers"]}
    assert rows["plain"]["overrides"] == {} and rows["ensemble"]["overrides"] == {"distill.ddm.members": 5}
    assert rows["ensemble"]["holdout_ice"] == pytest.approx({"mean": 0.9, "min": 0.8, "max": 1.0, "n": 3})
    assert rows["plain"]["holdout_dry"]["mean"] == pytest.approx(0.9)
    assert rows["plain"]["suite_ice_completion"]["estimate"] == pytest.approx(0.25)
    assert rows["ensemble"]["cautious_ice_lap_time_s"] == pytest.approx(240.0)
    assert rows["ensemble"]["train_wall_per_seed_s"] == pytest.approx(120.0) and rows["ensemble"]["members"] == 5
    md = (ws / "reports" / "report.md").read_text()
    assert "## Ice levers" in md
    assert "| ensemble | `distill.ddm.members=5` | 0.90 [0.80, 1.00] (n=3) |" in md
    assert "150.0 vs 240.0 | 150.0 |" in md and "25.0 (5 members)" in md  # ice beside the pid's, then nominal
    assert rep["levers"][0]["variant"] == "plain"  # the reference first, whatever the files' order
    assert rows["plain"]["holdout_lap_time_s"] == pytest.approx({"mean": 61.0, "min": 60.0, "max": 62.0, "n": 3})
    # the targets: ensemble is the blind variant chosen (lowest seed .8 > plain's .4), short of .90 by .10
    t = {x["target"].split(",")[0]: x for x in rep["lever_targets"]}
    assert t["icy hold-out lap share"]["variant"] == "ensemble"
    assert t["icy hold-out lap share"]["met"] is False and t["icy hold-out lap share"]["short_by"] == pytest.approx(0.1)
    assert t["suite ice laps completed"]["met"] is True  # 100 % >= 95 %
    assert t["suite ice lap time (s)"]["met"] is True  # 150 s < the cautious PID's 240 s
    assert (
        t["dry hold-out lap share (mean)"]["needed"] == pytest.approx(0.88)
        and t["dry hold-out lap share (mean)"]["met"]
    )
    assert "suite ice laps completed" in t and not any(x["variant"] == "oracle_grip" for x in rep["lever_targets"])
    assert "| icy hold-out lap share, lowest seed | ensemble | 0.80 | 0.90 | **no** | 0.10 |" in md
    # a variant whose policy sees the surface is never the blind one, however well it scores; it has its own target
    _write(ex / "oracle_grip.json", _lever({"x": 1}, [1.0, 1.0, 1.0], [1.0] * 3, 0.5, policy="oracle", family="dytr"))
    rep = rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=Console(file=None, width=200))
    t = {x["target"]: x for x in rep["lever_targets"]}
    assert t["icy hold-out lap share, lowest seed"]["variant"] == "ensemble"
    seeing = t["suite ice laps completed, seeing the surface"]
    assert seeing["variant"] == "oracle_grip" and seeing["met"] is False and seeing["short_by"] == pytest.approx(0.45)
    assert "| oracle_grip (oracle in dytr) |" in (ws / "reports" / "report.md").read_text()
    assert rows["plain"]["seed_points"][2] == {"seed": 2, "ice": 0.4, "dry": 0.8, "lap_time_s": 62.0}
    assert (ws / "plots" / "report" / "ice_levers.png").stat().st_size > 10_000  # the trade-off figure


def test_an_ensemble_variant_gets_its_calibration_figure(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's calibration plot comes from the run that distilled the ensemble: an experiment set's variant
    (the main run distils one model per family); two variants of the same ensemble get one figure."""
    monkeypatch.setattr(rp, "log_report_mlflow", lambda *a, **k: None)
    cell = {"windows": 40, "spearman_rho": 0.4, "p_value": 0.01, "spread_m": [0.1 * i for i in range(1, 11)]}
    cal = {split: {**cell, "error_m": [0.2 * i for i in range(1, 11)]} for split in ("all", "asphalt", "ice")}
    ens = {"members": 5, "horizon_s": 2.0, "calibration": cal}
    ex = ws / "metrics" / "experiments" / "ice"
    for name in ("ensemble", "ensemble_penalty"):
        v = _lever({"distill.ddm.members": 5}, [0.5], [1.0], 0.5, members=5)
        v["distill"] = {**v["distill"], "family": "ddm", "ensemble": ens}
        _write(ex / f"{name}.json", v)
    rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=Console(file=None, width=200))
    figures = sorted(p.name for p in (ws / "plots" / "report").glob("calibration_*.png"))
    assert figures == ["calibration_ddm_ice_ensemble.png"]
    assert "calibration_ddm_ice_ensemble.png" in (ws / "reports" / "report.md").read_text()


def test_a_lever_keeps_its_overrides_when_plain_has_not_run() -> None:
    from s3.report.levers import lever_rows

    only = {"ensemble": _lever({"distill.ddm.members": 5}, [0.9], [1.0], 1.0, members=5)}
    assert lever_rows(only, {})[0]["overrides"] == {"train.seeds": 3, "distill.ddm.members": 5}


def _dagger_seed(seed: int, in_model: float, dry: float | None, ice: float | None) -> dict[str, Any]:
    src = {"source": {"score": None, "score_dry": dry, "score_ice": ice}} if dry is not None else {}
    return {"seed": seed, "validation_score": in_model, **src}


def test_the_dagger_section_reads_every_round(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """records/dagger/<policy>.json -> one row per round: the kept policy's hold-out, its seeds', the model's error
    on the rows its policy drove beside its test error (round 0's: records/distill); nothing without a record."""
    monkeypatch.setattr(rp, "log_report_mlflow", lambda *a, **k: None)
    console = Console(file=None, width=200)
    rep = rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=console)
    assert rep["dagger"] == [] and "DAgger" not in (ws / "reports" / "report.md").read_text()
    m = ws / "metrics"
    kept0 = {"score": 0.7, "score_dry": 1.0, "score_ice": 0.5, "runs_dry": 22, "runs_ice": 42}
    kept1 = {"score": 0.8, "score_dry": 1.0, "score_ice": 0.7, "runs_dry": 22, "runs_ice": 42}
    record = {
        "policy": "ddm",
        "family": "ddm",
        "rounds": [
            {
                "round": 0,
                "source": kept0,
                "seeds": [_dagger_seed(0, 0.7, 1.0, 0.5), _dagger_seed(1, 0.6, 0.9, 0.4)],
                "error_on_own_rows": {"ade_2s": 0.9},
            },
            {
                "round": 1,
                "source": kept1,
                "distill_test_ade_2s": 0.19,
                "seeds": [_dagger_seed(s, 0.8, 1.0, x) for s, x in enumerate((0.7, 0.6, 0.8))],
                "wall_s": 1200.0,
            },
        ],
    }
    _write(m / "dagger" / "ddm.json", record)
    rep = rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=console)
    zero, one = rep["dagger"]
    assert (zero["round"], one["round"]) == (0, 1)
    assert zero["seeds"]["source_ice"] == pytest.approx({"mean": 0.45, "min": 0.4, "max": 0.5, "n": 2})
    assert zero["ade_2s_own_rows"] == 0.9 and zero["ade_2s_test"] == pytest.approx(ADE2["ddm"])  # distill@ddm's
    assert one["seeds"]["source_ice"] == pytest.approx({"mean": 0.7, "min": 0.6, "max": 0.8, "n": 3})
    assert one["ade_2s_own_rows"] is None and one["ade_2s_test"] == 0.19 and one["kept"]["score_ice"] == 0.7
    md = (ws / "reports" / "report.md").read_text()
    assert "## DAgger rounds" in md
    assert "| ddm | 0 | 1.00 / 0.50 (22 / 42) | 0.65 [0.60, 0.70] (n=2) |" in md
    assert "| 0.70 [0.60, 0.80] (n=3) | — / 0.190 | 20.0 |" in md
    # an experiment variant that ran the rounds: its rows labelled by set and variant, round 0's test error from the
    # variant's own distill record; no ice-levers row for it (its train and eval records are round 0's)
    variant = _lever({"dagger.policies": ["ddm"]}, [0.5, 0.5], [1.0, 1.0], 0.25)
    variant["distill"] = {**variant["distill"], "rollout": {"all": {"ade_2s": 0.21}}}
    variant["dagger"] = record
    _write(m / "experiments" / "ice" / "dagger.json", variant)
    _write(m / "experiments" / "ice" / "plain.json", _lever({}, [0.5, 0.5], [1.0, 1.0], 0.25))
    rep = rp.report(ws / "metrics", ws / "reports", ws / "plots" / "report", console=console)
    assert [(r["policy"], r["round"]) for r in rep["dagger"]] == [("ddm", 0), ("ddm", 1), ("ddm (ice/dagger)", 0),
                                                                   ("ddm (ice/dagger)", 1)]  # fmt: skip
    assert rep["dagger"][2]["ade_2s_test"] == pytest.approx(0.21)
    assert [r["variant"] for r in rep["levers"]] == ["plain"]
    assert "| ddm (ice/dagger) | 1 | 1.00 / 0.70 (22 / 42) |" in (ws / "reports" / "report.md").read_text()


def test_training_section_every_seed_its_end_and_its_curve(ws: Path) -> None:
    """Every seed's kept hold-out score (all / dry), its steps and what ended it, from records/train; its curve from
    its seed folder's policy.json history (the kept checkpoint found by iteration); direct's from its own record."""
    dry, score = [1.0, 0.9, 0.8], [0.7, 0.6, 0.5]
    ends = ["plateau", "plateau", "max_minutes"]
    seeds = [
        {"seed": k, "validation_score": score[k], "validation_score_dry": dry[k], "iteration": 39,
         "env_steps": 3_000_000 + k, "stopped_by": ends[k], "wall_s": 120.0 * (k + 1)}
        for k in range(3)
    ]  # fmt: skip
    _write(ws / "metrics" / "train" / "ddm.json", {"family": "ddm", "train": {}, "seed_selection": {"seeds": seeds}})
    for k in (0, 1):  # seed 2's folder is missing: no curve, still a row
        hist = [
            {
                "iteration": it,
                "env_steps": (it + 1) * 50_000,
                "score": 0.2 * j,
                "score_dry": 0.3 * j,
                "score_ice": 0.1 * j,
            }
            for j, it in enumerate((19, 39, 59), start=1)
        ]
        _write(ws / "policies" / "ddm" / "seeds" / f"seed{k}" / "policy.json", {"history": hist})
    direct = json.loads((ws / "metrics" / "train" / "direct.json").read_text())
    direct |= {
        "stopped_by": "plateau",
        "validation": {"score": 0.66, "score_dry": 1.0, "env_steps": 2000},
        "learning_curve": [
            {"iteration": 1, "env_steps": 1000, "val_score": 0.3},
            {"env_steps": 2000, "val_score": None},
        ],
    }
    _write(ws / "metrics" / "train" / "direct.json", direct)
    rep = rp.build_report(ws / "metrics")
    rows = {r["policy"]: r for r in rep["training"]}
    assert list(rows) == ["ddm", "direct"]  # no seeds recorded for the others: no row
    ddm = rows["ddm"]
    assert ddm["in"] == "model" and [s["stopped_by"] for s in ddm["seeds"]] == ends
    assert (
        ddm["dry"]["min"] == 0.8 and ddm["dry"]["mean"] == pytest.approx(0.9) and ddm["dry"]["sd"] == pytest.approx(0.1)
    )
    assert [s["kept_env_steps"] for s in ddm["seeds"]] == [2_000_000, 2_000_000, None]
    assert [p["score_dry"] for p in ddm["seeds"][0]["curve"]] == pytest.approx([0.3, 0.6, 0.9])
    d = rows["direct"]
    assert d["in"] == "source simulator" and d["seeds"][0]["score"] == 0.66 and d["dry"]["sd"] is None
    assert [p["score"] for p in d["seeds"][0]["curve"]] == [0.3]  # a point without a score is left out
    rp.write_report(rep, ws / "metrics", ws / "reports", ws / "plots" / "report")
    md = (ws / "reports" / "report.md").read_text()
    section = md.split("## Training, every seed")[1].split("\n## ")[0]
    assert (
        "| ddm | model | 0.70 / 0.60 / 0.50 | 1.00 / 0.90 / 0.80 | 0.80 / 0.90 / 0.10 (n=3) "
        "| 2.0 of 3.0 / 2.0 of 3.0 / — of 3.0 |" in section
    )
    assert "| plateau, plateau, max_minutes | 2.0 / 4.0 / 6.0 |" in section
    assert "| direct | source simulator | 0.66 | 1.00 | 1.00 / 1.00 / — (n=1) |" in section
    assert "![training_curves](../plots/report/training_curves.png)" in section
    assert (ws / "plots" / "report" / "training_curves.png").stat().st_size > 1000
