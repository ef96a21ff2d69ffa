"""Headline metrics (s3.headline): small, flat, numeric, and the committed record's fit on one screen."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from s3 import headline

ROOT = Path(__file__).resolve().parents[1]


def test_twin_maps_records_to_metrics_and_nothing_else():
    assert headline.twin("records/eval/ddm.json") == Path("metrics/eval/ddm.json")
    assert headline.twin("/w/records/x/records/a.json") == Path("/w/records/x/metrics/a.json")  # the last one
    assert headline.twin("/tmp/out/ddm.json") is None


def test_clean_keeps_finite_numbers_and_names_a_text_key():
    assert headline.clean({"b": True, "a": 1.23456789, "n": None, "nan": math.nan, "inf": math.inf}) == {
        "a": 1.234568,
        "b": 1,
    }
    with pytest.raises(ValueError, match="'why'"):
        headline.clean({"why": "max_minutes"})


def test_write_record_writes_the_record_and_its_headline(tmp_path):
    rec = tmp_path / "records" / "distill" / "ddm.json"
    record = {
        "one_step_rmse": {"vx": 0.1, "vy": 0.2, "yaw_rate": 0.3, "steer": 0.4},
        "rollout": {"all": {"ade_1s": 1.0, "fde_1s": 2.0, "ade_2s": None, "fde_2s": 4.0}},
        "definition": "text stays in the record",
    }
    assert headline.write_record(rec, record, headline.distill) == rec
    assert json.loads(rec.read_text())["definition"] == "text stays in the record"
    head = json.loads((tmp_path / "metrics" / "distill" / "ddm.json").read_text())
    # a value the record holds as null is left out of the headline
    assert head == {"ade_1s": 1.0, "fde_1s": 2.0, "fde_2s": 4.0, "rmse_1step.vx": 0.1, "rmse_1step.vy": 0.2} | {
        "rmse_1step.yaw_rate": 0.3
    }
    out = tmp_path / "elsewhere.json"
    headline.write_record(out, record, headline.distill)
    assert out.exists() and not (tmp_path / "metrics" / "elsewhere.json").exists()


def test_train_counts_seeds_a_wall_clock_cap_stopped():
    seeds = [
        {"validation_score": 0.5, "validation_score_dry": 0.9, "stopped_by": "max_env_steps"},
        {"validation_score": 0.7, "validation_score_dry": 1.0, "stopped_by": "max_minutes", "source": {"score": 0.4}},
    ]
    seeds[1]["source"] |= {"score_dry": 0.8, "score_ice": 0.2}
    h = headline.train({"seed_selection": {"seeds": seeds, "wall_s": 9.0}, "train": {"env_steps": 100}})
    assert h == {
        "env_steps": 100,
        "score_in_model": 0.6,
        "score_in_source": 0.4,
        "nominal_in_model": 0.95,
        "nominal_in_model_min": 0.9,  # the worst seed: issue #37's rule reads every seed
        "nominal_in_source": 0.8,
        "nominal_in_source_min": 0.8,
        "ice_in_source": 0.2,
        "plateau_seeds": 0,
        "seeds": 2,
        "truncated_seeds": 1,
        "wall_s": 9.0,
    }
    direct = {"validation": {"score": 0.3, "in": "source simulator"}, "env_steps": 5, "wall_s": 2.0}
    assert headline.train(direct)["score_in_source"] == 0.3
    assert headline.train({"skipped": "BeamNG runs in real time"}) == {}


def test_evaluate_gives_intervals_only_over_several_seeds():
    cond = {
        "completion_rate": {"estimate": 0.5, "ci95": [0.25, 0.75]},
        "lap_share": {"estimate": 0.8, "ci95": [0.7, 0.9]},
        "lap_time_s": {"estimate": None, "ci95": None},
    }
    policy = headline.evaluate({"seeds": [0, 1, 2], "summary": {"suite": {"ice": cond}}})
    assert policy == {
        "ice.completed": 0.5,
        "ice.completed_hi": 0.75,
        "ice.completed_lo": 0.25,
        "ice.lap_share": 0.8,
        "ice.lap_share_hi": 0.9,
        "ice.lap_share_lo": 0.7,
    }
    baseline = headline.evaluate({"seeds": [0], "summary": {"suite": {"ice": cond}}})
    assert baseline == {"ice.completed": 0.5, "ice.lap_share": 0.8}


def test_report_takes_each_claims_first_row_and_counts_what_holds():
    claims = [
        {"claim": "2 smoother", "effect": 0.1, "ci95": "[0.05, 0.2]", "verdict": "holds"},
        {"claim": "2 smoother", "effect": 0.3, "ci95": "[-0.1, 0.5]", "verdict": "cannot tell"},
        {"claim": "1 efficiency", "effect": -2.0, "ci95": None, "verdict": "cannot tell"},
    ]
    assert headline.report({"claims": claims}) == {
        "claim1.effect": -2.0,
        "claim1.holds": 0,
        "claim1.rows": 1,
        "claim2.effect": 0.1,
        "claim2.effect_hi": 0.2,
        "claim2.effect_lo": 0.05,
        "claim2.holds": 1,
        "claim2.rows": 2,
    }


def _values(d: object) -> list[object]:
    return [v for x in d.values() for v in _values(x)] if isinstance(d, dict) else [d]


def test_the_committed_headline_fits_on_one_screen_and_matches_its_records():
    """`dvc metrics show` on the committed record: at most 200 values, every one a number, each
    file the headline of its committed record."""
    files = sorted((ROOT / "metrics").rglob("*.json"))
    assert files, "no committed metrics/"
    values = [v for f in files for v in _values(json.loads(f.read_text()))]
    assert len(values) <= 200, len(values)
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    summarise = {"collect": headline.collect, "time_to_quality": headline.time_to_quality, "report": headline.report}
    summarise |= {"distill": headline.distill, "train": headline.train, "eval": headline.evaluate}
    for f in files:
        rel = f.relative_to(ROOT / "metrics")
        record = json.loads((ROOT / "records" / rel).read_text())
        fn = summarise[rel.parts[0] if len(rel.parts) > 1 else rel.stem]
        assert json.loads(f.read_text()) == headline.clean(fn(record)), rel
