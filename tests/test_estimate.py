"""s3.platform.estimate: stage times from a run log, the probe's ratio, the forecast per stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3.platform.estimate import REFERENCE, forecast, recorded_minutes, slowdown, stage_minutes

LOG = """23:50:00 PATH=... dvc repro
23:50:02 Running stage 'collect':
23:50:02 > s3 collect --quiet
23:56:02 collected 215681 rows
23:56:05 Running stage 'distill@ddm':
00:03:17 Updating lock file 'dvc.lock'
00:03:17 Running stage 'train_direct':
00:18:20 Use `dvc push` to send your updates to remote storage.
"""


def test_stage_minutes_from_the_running_stage_lines_across_midnight() -> None:
    m = stage_minutes(LOG)
    assert list(m) == ["collect", "distill@ddm", "train_direct"]
    assert m["collect"] == pytest.approx(6.05)
    assert m["distill@ddm"] == pytest.approx(7.2)
    assert m["train_direct"] == pytest.approx(15.05)


def test_slowdown_is_the_geometric_mean_of_the_probe_ratios() -> None:
    there = {"sim_steps_per_s": 1000.0, "torch_steps_per_s": 100.0}
    assert slowdown({"sim_steps_per_s": 500.0, "torch_steps_per_s": 50.0}, there) == pytest.approx(2.0)
    assert slowdown({"sim_steps_per_s": 2000.0, "torch_steps_per_s": 50.0}, there) == pytest.approx(1.0)
    assert slowdown({}, there) == 1.0


def test_forecast_scales_all_but_wall_clock_stages_and_borrows_from_siblings() -> None:
    recorded = {"collect": 6.0, "train@ddm": 12.0, "train@dytr": 14.0, "train_direct": 15.0}
    out = forecast(["collect", "train@oracle", "train_direct", "report"], recorded, 2.0, {"train_direct"})
    assert out == {"collect": 12.0, "train@oracle": 26.0, "train_direct": 15.0, "report": None}


def test_the_reference_gives_minutes_as_written_or_from_its_log(tmp_path) -> None:
    (tmp_path / "run.log").write_text(LOG)
    assert recorded_minutes({"run_log": "run.log"}, tmp_path)["distill@ddm"] == pytest.approx(7.2)
    assert recorded_minutes({"stage_minutes": {"collect": 3}, "run_log": "run.log"}, tmp_path) == {"collect": 3.0}
    import yaml

    root = Path(__file__).resolve().parents[1]
    committed = recorded_minutes(yaml.safe_load((root / REFERENCE).read_text()), root)
    assert {"collect", "train_direct", "report"} <= set(committed) and all(v >= 0 for v in committed.values())
