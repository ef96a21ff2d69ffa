"""The command line: one-line errors for bad tracks, JSON from the benchmark."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from s3.cli import app


def test_bad_track_csv_gives_one_line_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "circuit.csv"
    bad.write_text("# x_m,y_m,w_tr_right_m,w_tr_left_m\n0,0,5,5\n100,0,5,5\n100,100,nan,5\n0,100,5,5\n")
    result = CliRunner().invoke(app, ["track", "show", str(bad)])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "circuit.csv" in lines[0] and "NaN" in lines[0], result.output


def test_track_show_plots_the_road_course(tmp_path: Path) -> None:
    out = tmp_path / "course.png"
    result = CliRunner().invoke(app, ["track", "show", "road_course", "--condition", "ice", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "7 friction patches" in result.output
    assert out.stat().st_size > 10_000


def test_bench_env_refuses_a_bad_size() -> None:
    result = CliRunner().invoke(app, ["bench", "env", "--family", "bicycle", "--seconds", "0", "--size", "0"])
    assert result.exit_code != 0
    assert "--size must be >= 1" in result.output


def test_bench_sim_prints_one_json_object() -> None:
    result = CliRunner().invoke(app, ["bench", "sim", "--json", "--seconds", "0.3"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["control_steps_per_s"] > 0
    assert abs(out["realtime_factor"] - out["control_steps_per_s"] * out["control_dt"]) < 1e-6 * out["realtime_factor"]
    assert out["substeps"] == round(out["control_dt"] / out["timestep"])


def test_evaluate_takes_any_racing_csv(tmp_path: Path, monkeypatch) -> None:
    """`s3 evaluate --track my.csv`: the pid laps a user's circuit, nominal and with ice placed by the rule."""
    import shutil
    from importlib import resources

    with resources.as_file(resources.files("s3.tracks") / "data" / "short.csv") as src:
        shutil.copyfile(src, tmp_path / "my_circuit.csv")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("S3_MLFLOW", "0")
    args = [
        "evaluate",
        "--family",
        "pid",
        "--track",
        "my_circuit.csv",
        "--set",
        "evaluate.start_fractions=[0.0]",
        "--set",
        "evaluate.workers=1",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "records/eval/pid.json").exists()  # the pipeline's suite result is not overwritten
    ev = json.loads((tmp_path / "records/eval/tracks/pid_my_circuit.json").read_text())
    assert set(ev["summary"]) == {"suite", "my_circuit"} and ev["suite"]["my_circuit"]["spec"] == "my_circuit.csv"
    assert ev["summary"]["my_circuit"]["nominal"]["completion_rate"]["estimate"] == 1.0
    ice = [r for r in ev["runs"] if r["condition"] == "ice"]
    assert len(ice) == 1 and ice[0]["patches_attempted"] >= 3  # the rule's patches lie on the lap
    missing = CliRunner().invoke(app, ["evaluate", "--family", "pid", "--track", "nowhere.csv"])
    assert missing.exit_code == 2 and "nowhere.csv: no such file" in missing.output
