"""s3.tracking: one experiment, a pipeline run with nested family runs, Run handles,
and S3_MLFLOW=0 reaching no MLflow code at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3 import tracking
from s3.tracking.provenance import _sha


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def ws(tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", db)
    monkeypatch.setenv("S3_MLFLOW", "1")
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.delenv(tracking.DVC_EXP_ENV, raising=False)
    monkeypatch.delenv("S3_GIT_COMMIT", raising=False)
    monkeypatch.setenv(tracking.EXPERIMENT_ENV, f"s3-{tmp_path.name}")
    (tmp_path / "params.yaml").write_text("seed: 0\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    return tmp_path


METRICS = {
    "one_step_rmse": {"vx": 0.12, "vy": 0.1},
    "rollout": {"all": {"windows": 30, "fde_1s": 0.2}, "ice": {"fde_1s": None}},
    "error_vs_horizon": {"all": [0.01, 0.02, 0.04]},
    "device": "cpu",
}


def _runs(ws: Path) -> list:
    c = tracking.client(ws)
    return c.search_runs([c.get_experiment_by_name(tracking.experiment_name()).experiment_id])


def test_tracking_uri_is_explicit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////x/y.db")
    assert tracking.tracking_uri(tmp_path) == "sqlite:////x/y.db"


def test_families_share_one_parent_and_carry_accuracy(ws: Path) -> None:
    (ws / "m.json").write_text(json.dumps(METRICS))
    (ws / "plot.png").write_bytes(b"\x89PNG fake")
    rid_a = tracking.log_stage(
        "distill", "ddm", {"history": 10, "ddm": {"gru_hidden": 8}}, ws / "m.json", [ws / "plot.png"]
    )
    rid_b = tracking.log_stage("distill", "transformer", {"history": 10}, METRICS)
    again = tracking.log_stage("train", "ddm", {"steps": 5}, {"reward": 3.0})  # a later stage, same family run
    assert again == rid_a and rid_b != rid_a
    tracking.log_stage("collect", None, {"episodes": 4}, {"rows": 160})

    runs = {r.info.run_id: r for r in _runs(ws)}
    assert len(runs) == 3
    parent = next(r for r in runs.values() if r.data.tags["s3.kind"] == "pipeline")
    assert parent.data.metrics["collect/rows"] == 160 and parent.data.params["collect.episodes"] == "4"
    assert {"s3.git_commit", "s3.dvc_lock_sha"} <= set(parent.data.tags)
    a = runs[rid_a]
    assert a.data.tags["mlflow.parentRunId"] == parent.info.run_id and a.data.tags["s3.family"] == "ddm"
    assert a.data.metrics["distill/one_step_rmse.vx"] == pytest.approx(0.12)
    assert a.data.metrics["distill/rollout.all.fde_1s"] == pytest.approx(0.2)
    assert a.data.metrics["train/reward"] == 3.0
    assert "distill/rollout.ice.fde_1s" not in a.data.metrics  # null (diverged / empty) is skipped
    assert a.data.params["distill.ddm.gru_hidden"] == "8" and a.data.params["train.steps"] == "5"
    hist = tracking.client(ws).get_metric_history(rid_a, "distill/error_vs_horizon.all")
    assert [m.value for m in sorted(hist, key=lambda m: m.step)] == pytest.approx([0.01, 0.02, 0.04])
    assert [f.path for f in tracking.client(ws).list_artifacts(rid_a, "distill")] == ["distill/plot.png"]


def test_rerun_with_other_param_value_keeps_first_and_tags_the_new(ws: Path) -> None:
    rid = tracking.log_stage("distill", "dytr", {"lr": 0.1}, {})
    tracking.log_stage("distill", "dytr", {"lr": 0.2}, {})
    run = tracking.client(ws).get_run(rid)
    assert run.data.params["distill.lr"] == "0.1" and run.data.tags["param_rerun.distill.lr"] == "0.2"


def test_flow_parent_from_env_and_finish(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = tracking.start_pipeline_run(ws, tags={"s3.runner": "test"})
    monkeypatch.setenv(tracking.PARENT_ENV, parent)
    rid = tracking.log_stage("distill", "bicycle", {}, METRICS)
    (ws / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    tracking.finish_pipeline_run(parent, ws)
    c = tracking.client(ws)
    assert c.get_run(rid).data.tags["mlflow.parentRunId"] == parent
    p = c.get_run(parent)
    assert p.info.status == "FINISHED" and p.data.tags["s3.dvc_lock_sha"] == _sha(ws / "dvc.lock")


def test_switched_off_makes_no_client_and_no_file(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With S3_MLFLOW=0 no MlflowClient is made and nothing is written; switched on, the same calls
    do reach MLflow (the patched client raises), so the check can fail."""
    from mlflow.tracking import MlflowClient

    from s3.config import Params

    def no_client(*args: object, **kwargs: object) -> None:
        raise AssertionError("an MlflowClient was made")

    monkeypatch.setattr(MlflowClient, "__init__", no_client)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{ws / 'mlflow.db'}")
    with pytest.raises(AssertionError, match="MlflowClient"):
        tracking.log_stage("distill", "ddm", {}, METRICS)
    monkeypatch.setenv("S3_MLFLOW", "0")
    assert (
        tracking.log_stage("distill", "ddm", {}, METRICS) is None
        and tracking.log_stage_safely("collect", None, {}, {"rows": 1}) is None
    )
    assert (
        tracking.pipeline_run() is None
        and tracking.family_run("ddm") is None
        and tracking.family_run_safely("ddm") is None
    )
    tracking.log_evaluate(Params(), "ddm", {"summary": {"nominal": {"completion_rate": 1.0}}})
    assert sorted(p.name for p in ws.iterdir()) == ["dvc.lock", "params.yaml"]


def test_tracking_trouble_never_fails_a_stage(
    ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://nowhere")
    assert tracking.log_stage_safely("distill", "ddm", {}, METRICS) is None
    assert "MLflow logging skipped" in capsys.readouterr().err


def test_runs_are_closed_and_commit_can_be_given(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_GIT_COMMIT", "abc123")
    rid = tracking.log_stage("distill", "ddm", {}, METRICS)
    c = tracking.client(ws)
    run = c.get_run(rid)
    assert run.info.status == "FINISHED"
    parent = c.get_run(run.data.tags["mlflow.parentRunId"])
    assert parent.data.tags["s3.git_commit"] == "abc123"
    assert tracking.log_stage("evaluate", "ddm", {}, {"completion_rate": 1.0}) == rid  # still the family's run


def test_experiment_opens_as_model_training_in_mlflow_3(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tracking.log_stage("distill", "ddm", {}, METRICS)
    c = tracking.client(ws)
    assert (
        c.get_experiment_by_name(tracking.experiment_name()).tags["mlflow.experimentKind"] == "custom_model_development"
    )
    monkeypatch.setenv(tracking.EXPERIMENT_ENV, f"{tracking.experiment_name()}-old")
    old = c.create_experiment(tracking.experiment_name())  # made before the tag existed
    assert (
        tracking.experiment_id(c) == old
        and c.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"
    )


def test_run_handle_nests_pickles_flushes_and_never_raises(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pickle

    run = tracking.family_run("ddm")
    assert run is not None
    seed = run.child("ddm-seed3", {"s3.kind": "seed", "s3.seed": "3"})
    assert seed is not None
    again = pickle.loads(pickle.dumps(seed))  # what a worker process receives: ids and URI only
    assert (again.uri, again.experiment_id, again.run_id) == (
        seed.uri,
        seed.experiment_id,
        seed.run_id,
    ) and again._client is None
    again.log_curve(
        [("Train/mean_reward", i, float(i)) for i in range(1500)] + [("Loss/value", 0, float("nan"))], prefix="train/"
    )
    again.log_metrics({"val/score": 0.5, "val/none": None, "val/flag": True}, step=2)
    again.finish()  # waits for the asynchronous writes
    c = tracking.client(ws)
    got = c.get_run(seed.run_id)
    assert got.info.status == "FINISHED" and got.data.tags["mlflow.parentRunId"] == run.run_id
    assert len(c.get_metric_history(seed.run_id, "train/Train/mean_reward")) == 1500  # more than one MLflow batch
    assert set(got.data.metrics) == {"train/Train/mean_reward", "val/score"}  # NaN, None and bools are not metrics
    assert tracking.family_run("ddm").run_id == run.run_id  # a seed run is not a family run of the pipeline
    broken = tracking.Run("nosuchscheme://nowhere", "0", "x")
    broken.log_metrics({"a": 1.0})
    broken.log_params({"b": 2})
    broken.finish()
    assert broken.error and capsys.readouterr().err.count("MLflow logging skipped") == 1


def test_the_ui_link_opens_the_runs_view() -> None:
    """MLflow 3.17's UI takes its GenAI / Model training switch from this query parameter."""
    assert tracking.ui_url("http://127.0.0.1:5000/", "7") == (
        "http://127.0.0.1:5000/#/experiments/7?workflowType=machine_learning"
    )
    assert tracking.ui_url("http://h:1").endswith("/#/experiments?workflowType=machine_learning")


def test_make_mlflow_ui_links_the_experiment(ws: Path) -> None:
    from s3.tracking.__main__ import experiment_link

    tracking.log_stage("collect", None, {}, {"rows": 1})
    exp = tracking.client(ws).get_experiment_by_name(tracking.experiment_name())
    assert (
        experiment_link("http://h:1") == f"http://h:1/#/experiments/{exp.experiment_id}?workflowType=machine_learning"
    )


def test_parent_run_name_follows_the_dvc_experiment_else_workspace_params_and_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(tracking.DVC_EXP_ENV, raising=False)
    monkeypatch.delenv("S3_GIT_COMMIT", raising=False)
    ws = tmp_path / "s3-quick"
    ws.mkdir()
    sha = "1a2b3c4d5e6f" * 3
    assert tracking.pipeline_run_name(ws, sha) == "s3-quick/params.yaml @ 1a2b3c4d"
    assert tracking.pipeline_run_name(ws, sha + "-dirty") == "s3-quick/params.yaml @ 1a2b3c4d-dirty"
    assert tracking.pipeline_run_name(ws, "unknown") == "s3-quick/params.yaml"  # no commit: no "@"
    none = {"s3.dvc_experiment": "none", "s3.overrides": "unknown"}  # no git here: nothing to compare with
    assert tracking.pipeline_tags(ws) == {"s3.params_file": "params.yaml", **none}
    info = {"source": "/src", "params_file": "params_quick.yaml", "source_commit": sha}
    (ws / tracking.WORKSPACE_FILE).write_text(json.dumps(info))  # a scratch workspace (git without commits)
    assert tracking.git_commit(ws) == sha  # tmp_path is outside any git repository
    assert tracking.pipeline_run_name(ws) == "s3-quick/params_quick.yaml @ 1a2b3c4d"
    monkeypatch.setenv(tracking.DVC_EXP_ENV, "funny-dado")  # what DVC sets in the stages of `dvc exp run`
    assert tracking.pipeline_run_name(ws, sha) == "funny-dado"
    assert tracking.pipeline_tags(ws) == {
        "s3.params_file": "params_quick.yaml",
        "s3.dvc_experiment": "funny-dado",
        "s3.overrides": "unknown",
    }


def test_parent_runs_are_named_and_tagged_and_one_per_dvc_experiment(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_GIT_COMMIT", "abcdef0123456789")
    plain = tracking.pipeline_run(ws)
    got = tracking.client(ws).get_run(plain.run_id)
    assert got.info.run_name == f"{ws.name}/params.yaml @ abcdef01"
    assert got.data.tags["s3.params_file"] == "params.yaml" and got.data.tags["s3.dvc_experiment"] == "none"
    monkeypatch.setenv(tracking.DVC_EXP_ENV, "funny-dado")
    exp = tracking.pipeline_run(ws)
    assert exp.run_id != plain.run_id and tracking.pipeline_run(ws).run_id == exp.run_id
    got = tracking.client(ws).get_run(exp.run_id)
    assert got.info.run_name == "funny-dado" and got.data.tags["s3.dvc_experiment"] == "funny-dado"
    flow = tracking.client(ws).get_run(tracking.start_pipeline_run(ws))
    assert flow.info.run_name == "funny-dado" and flow.data.tags["s3.params_file"] == "params.yaml"


def test_runs_carry_the_experiment_and_its_overridden_params(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `dvc exp run -S train.ppo.learning_rate=0.0005 -n lr5e-4` leaves: params.yaml changed against
    its commit and DVC_EXP_NAME set; the parent and its family runs are found by either in MLflow."""
    import subprocess

    (ws / "params.yaml").write_text(
        "seed: 0\ntrain:\n  ppo: {learning_rate: 0.001, gamma: 0.99}\n  seeds: [1, 2]\n  per_policy: {ddm: {}}\n"
    )
    for cmd in (
        ["init", "-q"],
        ["add", "params.yaml"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "b"],
    ):
        subprocess.run(["git", *cmd], cwd=ws, check=True)
    assert tracking.overrides(ws) == {}
    assert tracking.pipeline_tags(ws)["s3.overrides"] == "none"
    (ws / "params.yaml").write_text(
        "seed: 0\ntrain:\n  ppo: {learning_rate: 0.0005, gamma: 0.99}\n  seeds: [1, 3]\n"
        "  per_policy: {ddm: {ppo: {gamma: 0.9}}}\n"  # what `-S '+train.per_policy.ddm.ppo.gamma=0.9'` writes
    )
    assert tracking.overrides(ws) == {
        "train.per_policy.ddm.ppo.gamma": "0.9",
        "train.ppo.learning_rate": "0.0005",
        "train.seeds": "[1, 3]",
    }
    monkeypatch.setenv(tracking.DVC_EXP_ENV, "lr5e-4")
    tracking.family_run("ddm", ws)
    c = tracking.client(ws)
    exp_id = c.get_experiment_by_name(tracking.experiment_name()).experiment_id
    found = c.search_runs([exp_id], filter_string="tags.`s3.dvc_experiment` = 'lr5e-4'")
    assert sorted(r.info.run_name for r in found) == ["ddm", "lr5e-4"]
    for r in found:
        assert r.data.tags["s3.overrides"] == (
            "train.per_policy.ddm.ppo.gamma=0.9; train.ppo.learning_rate=0.0005; train.seeds=[1, 3]"
        )
        assert r.data.tags["s3.override.train.ppo.learning_rate"] == "0.0005"
    parent = next(r for r in found if r.info.run_name == "lr5e-4")
    assert parent.data.tags["s3.git_commit"].endswith("-dirty")  # the experiment's baseline commit, changed
    by_value = c.search_runs([exp_id], filter_string="tags.`s3.override.train.ppo.learning_rate` = '0.0005'")
    assert {r.info.run_id for r in by_value} == {r.info.run_id for r in found}


def test_a_queued_experiment_logs_into_its_projects_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dvc exp run --queue` runs stages in a temporary copy: DVC_ROOT names the project (s3.tracking.store)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    copy, project = tmp_path / ".dvc" / "tmp" / "exps" / "tmp123", tmp_path
    monkeypatch.setenv("DVC_ROOT", str(project))
    monkeypatch.delenv(tracking.DVC_EXP_ENV, raising=False)
    assert tracking.tracking_uri(copy) == f"sqlite:///{copy.resolve() / 'mlflow.db'}"  # not an experiment
    monkeypatch.setenv(tracking.DVC_EXP_ENV, "lr5e-4")
    assert tracking.tracking_uri(copy) == f"sqlite:///{project.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert tracking.tracking_uri(copy) == "sqlite:///elsewhere.db"
