"""The Prefect flow over the DVC pipeline: stages from DVC, their edges recorded in Prefect, one log
line per stage, a cached second run, one line when no server answers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `flows` lives at the repository root

pytestmark = pytest.mark.slow
FAMILIES = ("bicycle", "ddm", "transformer", "dytr")
DISTILL = [f"distill@{f}" for f in FAMILIES]  # the flow tests run collect + distill (test_pipeline runs it all)


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory):
    """One temporary Prefect server and result store for the whole session (~17 s)."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"  # no network here; quieter logs
    with (
        temporary_settings({PREFECT_LOCAL_STORAGE_PATH: tmp_path_factory.mktemp("prefect-results")}),
        prefect_test_harness(server_startup_timeout=120),
    ):
        yield


def _task_states(flow_state) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as c:
        runs = c.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_state.state_details.flow_run_id]))
        )
    return {tr.name: tr.state.name for tr in runs}


def _edges_and_lines(flow_state) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """What the dashboard reads back: each task run's upstream task runs (by name) and its log lines."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)  # logs reach the API in batches
    fid = flow_state.state_details.flow_run_id
    with get_client(sync_client=True) as c:
        runs = c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[fid])))
        logs = c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[fid])))
    name = {tr.id: tr.name for tr in runs}
    edges = {tr.name: {name[i.id] for i in tr.task_inputs.get("wait_for", [])} for tr in runs}
    lines: dict[str, list[str]] = {tr.name: [] for tr in runs}
    for log in logs:
        if log.task_run_id in name:
            lines[name[log.task_run_id]].append(log.message)
    return edges, lines


def test_generations_come_from_dvc() -> None:
    from flows.pipeline import stage_generations

    gens = stage_generations(str(ROOT))
    assert "collect" in gens[0] and "train_direct" in gens[0]  # stages without upstream run first
    assert set(DISTILL) <= set(gens[1])
    assert stage_generations(str(ROOT), ["distill@ddm"]) == [["collect"], ["distill@ddm"]]
    flat = [s for g in gens for s in g]
    assert flat[-1] == "report" and len(gens) >= 5
    for p in ("bicycle", "ddm", "transformer", "dytr", "oracle"):
        assert flat.index(f"train@{p}") < flat.index(f"evaluate@{p}") < flat.index("report")
    assert flat.index("distill@dytr") < flat.index("train@oracle")

    from flows.pipeline import stage_upstream

    up = stage_upstream(str(ROOT))
    assert list(up) == flat and up["collect"] == [] and up["train@oracle"] == ["distill@dytr"]
    assert up["evaluate@ddm"] == ["train@ddm"] and "time_to_quality" in up["report"]


def test_flow_runs_stages_then_serves_them_from_cache(
    prefect_harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.pipeline import pipeline
    from s3.platform.workspace import prepare_workspace

    ws = prepare_workspace(ROOT, tmp_path / "ws", "params_quick.yaml", share_cache=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("S3_MLFLOW", "1")

    first = pipeline(root=str(ws), targets=DISTILL, return_state=True)
    assert first.is_completed(), first
    ran = first.result()
    assert ran == {"collect": True, **{f"distill@{f}": True for f in FAMILIES}}
    states = _task_states(first)
    assert set(states) == set(ran) and set(states.values()) == {"Completed"}
    edges, lines = _edges_and_lines(first)  # the flow-run graph's edges, as the API serves them
    assert edges == {"collect": set(), **{d: {"collect"} for d in DISTILL}}
    assert all(ls == [f"{n}: ran", "Finished in state Completed()"] for n, ls in lines.items()), lines

    second = pipeline(root=str(ws), targets=DISTILL, return_state=True)
    assert second.is_completed()
    assert set(_task_states(second).values()) == {"Cached"}
    edges, lines = _edges_and_lines(second)
    assert edges["distill@ddm"] == {"collect"}
    assert all(len(ls) == 1 and ls[0].startswith("Finished in state Cached") for ls in lines.values()), lines

    # a DVC-level change re-runs exactly that stage; the rest stay cached
    params = ws / "params.yaml"
    params.write_text(
        params.read_text().replace("transformer: {d_model: 16, layers: 1", "transformer: {d_model: 16, layers: 2")
    )
    third = pipeline(root=str(ws), targets=DISTILL, return_state=True)
    states = _task_states(third)
    assert states.pop("distill@transformer") == "Completed" and set(states.values()) == {"Cached"}

    # outputs deleted behind Prefect's back: DVC says changed, so the key is not trusted
    import shutil

    shutil.rmtree(ws / "models" / "ddm")
    fourth = pipeline(root=str(ws), targets=DISTILL, return_state=True)
    states = _task_states(fourth)
    assert states.pop("distill@ddm") == "Completed" and set(states.values()) == {"Cached"}
    assert (ws / "models" / "ddm" / "model.safetensors").exists()

    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    runs = c.search_runs([c.get_experiment_by_name("s3").experiment_id])
    parents = {r.info.run_id: r for r in runs if r.data.tags.get("s3.kind") == "pipeline"}
    assert len(parents) == 4 and all(
        r.info.status == "FINISHED" and r.data.tags["s3.runner"] == "prefect" for r in parents.values()
    )
    fam = [r for r in runs if r.data.tags.get("s3.kind") == "family"]
    assert {r.data.tags["s3.family"] for r in fam} == set(FAMILIES)
    assert all(r.data.tags["mlflow.parentRunId"] in parents for r in fam)
    assert all("distill/rollout.all.fde_1s" in r.data.metrics for r in fam)


def test_nightly_regression_fails_on_degraded_metrics(
    prefect_harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Record a baseline from one nightly run, degrade it, and the next nightly run fails."""
    import json

    from flows.nightly import RegressionFailed, nightly_regression

    monkeypatch.setenv("S3_MLFLOW", "0")
    ws = tmp_path / "nightly"
    ws.mkdir()
    base = tmp_path / "baseline.json"
    kw = {
        "source": str(ROOT),
        "workdir": str(ws),
        "baseline": str(base),
        "share_cache": False,
        "mlflow": False,
        "targets": ["distill@bicycle"],
        "slow_tests": False,
    }
    msg = nightly_regression(record=True, **kw)  # bicycle only keeps this quick
    assert "recorded" in msg and set(json.loads(base.read_text())["metrics"]) == {"records/distill/bicycle.json"}
    assert "no regression" in nightly_regression(**kw)
    b = json.loads(base.read_text())
    b["metrics"]["records/distill/bicycle.json"]["rollout.all.fde_1s"] /= 2
    base.write_text(json.dumps(b))
    state = nightly_regression(return_state=True, **kw)
    assert state.is_failed()
    with pytest.raises(RegressionFailed, match="REGRESSION"):
        state.result()


def test_the_nightly_flow_runs_the_slow_tests_and_fails_with_them(tmp_path: Path) -> None:
    """run_slow_tests is pytest -m slow in the given tree: a failing slow test fails it, with its summary."""
    from flows.nightly import SlowTestsFailed, run_slow_tests

    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.slow\ndef test_a():\n    assert 1 == 2\n\ndef test_b():\n    pass\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    with pytest.raises(SlowTestsFailed, match="1 failed, 1 deselected"):
        run_slow_tests(tmp_path)
    (tmp_path / "test_x.py").write_text("import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n")
    assert "1 passed" in run_slow_tests(tmp_path)


def test_flow_without_a_server_says_so_in_one_line() -> None:
    import subprocess

    env = {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api"}  # nothing listens on port 9
    r = subprocess.run([sys.executable, "-m", "flows.pipeline"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "no Prefect server answers at http://127.0.0.1:9/api: start one with `make ui` (another terminal), "
        "then run this again"
    ]
