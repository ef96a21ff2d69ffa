"""The regression check: passes on equal metrics, fails (exit 1, readable) on degraded ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from s3.cli import app
from s3.platform.params import RegressParams
from s3.platform.regress import compare, record, run_check

BIN = Path(sys.executable).parent


def _eval(rate: float, lap: float | None, cond: str = "nominal", share: float | None = None) -> dict:
    """The shape `s3 evaluate` writes to records/eval/<family>.json (the judged part: s3.evaluate.suite blocks)."""

    def iv(x: float | None) -> dict:
        return {"estimate": x, "ci95": None if x is None else [x, x], "n_seeds": 3, "n_units": 12}

    block = {
        "completion_rate": iv(rate),
        "lap_share": iv(rate if share is None else share),
        "lap_time_s": iv(lap),
        "completed": round(rate * 12),
        "runs": 12,
    }
    return {"summary": {"suite": {cond: block}, "road_course": {cond: block}}}


def _distill_metrics(fde: float = 0.2, rmse: float = 0.1, div: float | None = 0.0) -> dict:
    return {
        "family": "ddm",
        "one_step_rmse": {"vx": rmse, "vy": rmse / 2, "yaw_rate": 0.05, "steer": 0.01},
        "rollout": {
            "all": {"windows": 100, "ade_1s": fde / 2, "fde_1s": fde, "fde_2s": 3 * fde},
            "ice": {"windows": 0, "fde_1s": None},
        },
        "divergence": {"rate": div, "rollouts": 10},
        "throughput_steps_per_s": {"1": 1000.0},
        "error_vs_horizon": {"all": [0.1, 0.2]},
    }


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "records/distill").mkdir(parents=True)
    (tmp_path / "records/eval").mkdir(parents=True)
    (tmp_path / "records/distill/ddm.json").write_text(json.dumps(_distill_metrics()))
    (tmp_path / "records/eval/ddm.json").write_text(json.dumps(_eval(1.0, 120.0)))
    return tmp_path


def _write(ws: Path, name: str, obj: dict) -> None:
    (ws / name).write_text(json.dumps(obj))


def test_equal_metrics_pass_and_degraded_fail(ws: Path) -> None:
    p = RegressParams()
    base = record(ws, p)
    assert base == ws / "baselines/regression.json"
    tracked = json.loads(base.read_text())["metrics"]
    assert "rollout.all.fde_1s" in tracked["records/distill/ddm.json"]
    assert "throughput_steps_per_s.1" not in tracked["records/distill/ddm.json"]  # speed is not judged
    assert set(tracked["records/eval/ddm.json"]) == {
        f"summary.{where}.nominal.{key}.estimate"
        for where in ("suite", "road_course")
        for key in ("completion_rate", "lap_share", "lap_time_s")
    }

    ok, text = run_check(ws, p)
    assert ok and "no regression" in text

    _write(ws, "records/distill/ddm.json", _distill_metrics(fde=0.2 * 1.09))  # within 10 %
    assert run_check(ws, p)[0]
    _write(ws, "records/distill/ddm.json", _distill_metrics(fde=0.2 * 1.5))
    ok, text = run_check(ws, p)
    assert not ok
    assert "FAIL error" in text and "rollout.all.fde_1s" in text and "+50.0 %" in text
    assert text.splitlines()[-1].startswith("REGRESSION")


@pytest.mark.parametrize(
    "evalm, ok",
    [
        (_eval(0.97, 121.0), True),  # within 0.05 and 5 %
        (_eval(0.90, 120.0), False),  # completion dropped
        (_eval(1.0, 130.0), False),  # lap time +8 %
        (_eval(0.0, None), False),  # no lap any more
        (_eval(1.0, 120.0, cond="ice"), False),  # the nominal condition disappeared
        (_eval(0.0, None, share=0.2), False),  # drives less far: the lap share regresses too
    ],
)
def test_policy_quality_tolerances(ws: Path, evalm: dict, ok: bool) -> None:
    p = RegressParams()
    record(ws, p)
    _write(ws, "records/eval/ddm.json", evalm)
    assert run_check(ws, p)[0] is ok


@pytest.mark.parametrize(("ice_err", "ok"), [(1.05, True), (1.3, False)])
def test_manoeuvre_probe_errors_are_judged_as_errors(ws: Path, ice_err: float, ok: bool) -> None:
    """The probes' 3 s errors in records/eval may grow 10 % like any predictive error; their slide count is not
    judged."""

    def with_probes(err: float, agreed: int) -> dict:
        return {
            **_eval(1.0, 120.0),
            "probes": {"summary": {"pos_err_3s_asphalt": 1.0, "pos_err_3s_ice": err, "slides_agreed": agreed}},
        }

    p = RegressParams()
    _write(ws, "records/eval/ddm.json", with_probes(1.0, 8))
    record(ws, p)
    _write(ws, "records/eval/ddm.json", with_probes(ice_err, 5))
    passed, text = run_check(ws, p)
    assert passed is ok
    assert ("FAIL error      records/eval/ddm.json probes.summary.pos_err_3s_ice: 1 -> 1.3" in text) is not ok
    assert "slides_agreed" not in text


def test_diverged_metric_is_a_regression(ws: Path) -> None:
    p = RegressParams()
    record(ws, p)
    _write(ws, "records/distill/ddm.json", _distill_metrics(div=None))
    ok, text = run_check(ws, p)
    assert not ok and "divergence.rate: 0 -> missing/null" in text


def test_cli_exit_codes(ws: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["regress"])
    assert r.exit_code == 2 and "no baseline" in r.output
    assert runner.invoke(app, ["regress", "--record"]).exit_code == 0
    r = runner.invoke(app, ["regress"])
    assert r.exit_code == 0, r.output
    _write(ws, "records/distill/ddm.json", _distill_metrics(rmse=0.5))
    r = runner.invoke(app, ["regress", "--set", "regress.error_growth_pct=1000"])
    assert r.exit_code == 0, r.output  # tolerances come from params
    r = runner.invoke(app, ["regress"])
    assert r.exit_code == 1 and "one_step_rmse.vx" in r.output and "REGRESSION" in r.output


def _commit_metrics(ws: Path) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for cmd in (["init", "-q"], ["add", "records"], ["commit", "-qm", "baseline"]):
        subprocess.run(["git", *cmd], cwd=ws, check=True, env=env)


def test_against_a_git_ref(ws: Path) -> None:
    _commit_metrics(ws)
    p = RegressParams()
    assert run_check(ws, p, ref="HEAD")[0]
    _write(ws, "records/distill/ddm.json", _distill_metrics(fde=1.0))
    ok, text = run_check(ws, p, ref="HEAD")
    assert not ok and "git ref HEAD" in text


def test_a_baseline_without_the_quality_keys_says_so(ws: Path) -> None:
    """Committed metrics in the layout before the evaluation suite (summary.<condition>.completion_rate, no
    estimates) hold none of the judged quality keys: no crash, and the summary and its verdict line say the
    policy quality was not judged rather than passing silently. The other way round, the keys are missing."""
    old_layout = {
        "summary": {"nominal": {"completion_rate": 1.0, "lap_time_s": {"mean": 120.0, "ci95": [119.0, 121.0], "n": 12}}}
    }
    _write(ws, "records/eval/ddm.json", old_layout)
    _commit_metrics(ws)
    p = RegressParams()
    for now in (old_layout, _eval(0.0, None)):  # the old layout again, or a new one (even a policy that laps no more)
        _write(ws, "records/eval/ddm.json", now)
        ok, text = run_check(ws, p, ref="HEAD")
        assert ok, text
        assert (
            "policy quality NOT judged in 1 file(s): the baseline has none of summary.*.completion_rate.estimate"
            in text
        )
        assert "records/eval/ddm.json (an older metrics layout?" in text
        assert (
            text.splitlines()[-1]
            == "no regression against git ref HEAD: 9 checks in 1 file(s) within tolerance; policy quality not "
            "judged in 1 file(s)"
        )
    _write(ws, "records/eval/ddm.json", _eval(1.0, 120.0))
    _commit_metrics(ws)
    _write(ws, "records/eval/ddm.json", old_layout)
    ok, text = run_check(ws, p, ref="HEAD")
    assert (
        not ok
        and "FAIL completion records/eval/ddm.json summary.road_course.nominal.lap_share.estimate: 1 -> missing/null"
        in text
    )
    assert "NOT judged" not in text


def test_compare_reports_new_metrics_without_judging() -> None:
    p = RegressParams()
    checks, new = compare(
        {"records/distill/a.json": {"one_step_rmse.vx": 0.1}},
        {"records/distill/a.json": {"one_step_rmse": {"vx": 0.1, "vy": 9.0}}},
        p,
    )
    assert all(c.ok for c in checks) and new == ["records/distill/a.json one_step_rmse.vy"]


def test_direct_is_left_out_of_the_check() -> None:
    """`direct` trains for a wall-clock budget: its metrics move with the machine's load, so they are not judged by
    default."""
    from s3.platform.regress import tracked_metrics

    files = {"records/eval/direct.json": _eval(1.0, 120.0), "records/eval/ddm.json": _eval(1.0, 120.0)}
    assert set(tracked_metrics(files, RegressParams())) == {"records/eval/ddm.json"}
    assert set(tracked_metrics(files, RegressParams(exclude_files=[]))) == set(files)
