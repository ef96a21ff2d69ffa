"""The quick pipeline end to end through `dvc repro` in a scratch copy of the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FAMILIES = ("bicycle", "ddm", "transformer", "dytr")
POLICIES = (*FAMILIES, "oracle", "direct")
STAGES = (
    "collect",
    *(f"distill@{f}" for f in FAMILIES),
    *(f"train@{p}" for p in POLICIES if p != "direct"),
    "train_direct",
    *(f"evaluate@{p}" for p in POLICIES),
    "evaluate_baseline@pid",
    "evaluate_baseline@pid_blind",
    "evaluate_baseline@pid_cautious",
    "report",
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(1200),
]  # the whole quick pipeline: ~4 min on 2 idle cores; `make test` runs it


def _dvc(ws: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "dvc"), *args], cwd=ws, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from s3.platform.workspace import prepare_workspace

    ws = prepare_workspace(ROOT, tmp_path_factory.mktemp("quick") / "ws", "params_quick.yaml", share_cache=False)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "MLFLOW_TRACKING_URI": f"sqlite:///{ws / 'mlflow.db'}",
        "S3_MLFLOW": "1",
    }
    env.pop("S3_MLFLOW_PARENT_RUN_ID", None)
    t0 = time.perf_counter()
    first = _dvc(ws, "repro", env=env)
    t1 = time.perf_counter()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = _dvc(ws, "repro", env=env)
    t2 = time.perf_counter()
    print(f"\ndvc repro (quick): {t1 - t0:.1f} s; second dvc repro: {t2 - t1:.1f} s")
    return {"ws": ws, "env": env, "first": first, "second": second}


def test_repro_runs_every_stage_then_skips(quick: dict) -> None:
    ws, first, second = quick["ws"], quick["first"], quick["second"]
    for stage in STAGES:
        assert f"Running stage '{stage}'" in first.stdout, stage
    assert (ws / "data/rollouts/manifest.json").exists()
    assert (ws / "plots/collect/sample_episodes.png").exists()
    for f in FAMILIES:
        assert (ws / "models" / f / "model.safetensors").exists()
        assert json.loads((ws / "records/distill" / f"{f}.json").read_text())["family"] == f
        assert (ws / "plots/distill" / f"{f}_error_vs_horizon.png").exists()
    for name in POLICIES:
        assert (ws / "policies" / name / "policy.onnx").exists()
        ev = json.loads((ws / "records/eval" / f"{name}.json").read_text())
        assert set(ev["summary"]) == {"suite", "short"} and set(ev["summary"]["suite"]) == {"nominal", "ice"}
        assert len(ev["seeds"]) == (1 if name == "direct" else 2)  # every seed evaluated
        assert ("transfer_gap" in ev) == (name != "direct")
    for name in (
        "pid",
        "pid_cautious",
    ):  # the quick circuit is one the pid laps: completions and lap shares can regress
        ev = json.loads((ws / "records/eval" / f"{name}.json").read_text())
        assert ev["summary"]["short"]["nominal"]["completion_rate"]["estimate"] == 1.0, name
    report = json.loads((ws / "records/report.json").read_text())
    primary = [c["claim"][0] for c in report["claims"] if c["role"] == "primary"]
    assert primary == ["1", *["2"] * 4, "3", "4"]  # claim 2: two grounded families x nominal, ice
    assert {c["role"] for c in report["claims"]} == {"primary", "secondary", "sensitivity"}
    assert report["claim_rules"] and all(c["test"] for c in report["claims"] if c["verdict"] != "not run")
    assert (ws / "reports/report.md").exists() and (ws / "plots/report").is_dir()
    assert (ws / "plots/report/error_vs_horizon.png").exists()  # every family's curve: the report stage's, declared
    assert not (ws / "plots/distill/error_vs_horizon.png").exists()  # no distill@<family> writes an undeclared figure
    assert json.dumps(report, allow_nan=False)
    lock = (ws / "dvc.lock").read_text()
    assert "distill@dytr" in lock and "collect" in lock
    assert second.returncode == 0 and "Running stage" not in second.stdout
    assert "Data and pipelines are up to date" in second.stdout


@pytest.mark.slow
def test_quick_outputs_match_the_golden_digests(quick: dict) -> None:
    """The content of every output (rollout rows, model and policy tensors, evaluation outcomes) is
    pinned by tests/golden/quick.json, per machine kind (bit for bit on one kind of CPU only), so
    `slow`: run before resolving an issue, and by the nightly flow; a deliberate change regenerates it
    in its own commit. Runs before the tests below, which change params and re-run stages."""
    sys.path.insert(0, str(ROOT / "tests"))
    from golden.quick_digest import digest, machine_kind
    from golden.quick_digest import pinned as pinned_here

    pinned = pinned_here()
    if pinned is None:
        pytest.skip(f"no digests pinned for {machine_kind()}: tests/golden/quick_digest.py <workspace> --write")
    got = digest(quick["ws"])
    assert sorted(got) == sorted(pinned)
    moved = {k for k in pinned if got[k] != pinned[k]}
    assert not moved, f"outputs whose content moved: {sorted(moved)}"


def test_family_param_reruns_only_that_family(quick: dict) -> None:
    ws, env = quick["ws"], quick["env"]
    params = ws / "params.yaml"
    orig = params.read_text()
    try:
        params.write_text(orig.replace("transformer: {d_model: 16, layers: 1", "transformer: {d_model: 16, layers: 2"))
        status = _dvc(ws, "status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert set(json.loads(status.stdout)) == {"distill@transformer"}
        params.write_text(
            orig.replace("\n  history: 4\n", "\n  history: 5\n")
        )  # distill.history, not train.env.obs_history
        changed = set(json.loads(_dvc(ws, "status", "--json", env=env).stdout))
        assert changed == {f"distill@{f}" for f in FAMILIES}
    finally:
        params.write_text(orig)
    assert json.loads(_dvc(ws, "status", "--json", env=env).stdout) == {}


def test_metrics_show_and_mlflow_runs_carry_accuracy(quick: dict) -> None:
    ws, env = quick["ws"], quick["env"]
    shown = _dvc(ws, "metrics", "show", "--json", env=env)
    assert shown.returncode == 0 and "fde_1s" in shown.stdout
    # the headlines: small, flat, numbers only; the detail stays in records/ (s3.headline)
    files = next(iter(json.loads(shown.stdout).values()))["data"]  # the one revision: the workspace
    values = {f: d["data"] for f, d in files.items()}
    assert {f"metrics/eval/{n}.json" for n in (*POLICIES, "pid")} <= set(values) and "metrics/report.json" in values
    flat = [v for d in values.values() for v in d.values()]
    assert flat and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat)
    assert not any(f.startswith("records/") for f in files)
    for name in POLICIES:  # curves as data, for dvc plots diff
        head = (ws / "plots/train" / f"{name}.csv").read_text().splitlines()[0]
        assert head == "env_steps,score,laps_completed"
    assert {p.stem for p in (ws / "plots/time_to_quality").glob("*.csv")} == set(POLICIES)  # one per route

    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = c.get_experiment_by_name("s3")
    runs = c.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("s3.kind") == "pipeline"]
    children = {r.data.tags["s3.family"]: r for r in runs if r.data.tags.get("s3.kind") == "family"}
    children = {
        n: r for n, r in children.items() if not n.endswith("(selected)")
    }  # seed_selection: source adds the chosen seeds' rows
    assert len(parents) == 1 and set(children) == {*POLICIES, "pid", "pid_blind", "pid_cautious"}
    parent = parents[0]
    assert "s3.git_commit" in parent.data.tags and parent.data.tags["s3.dvc_lock_sha"] != "none"
    assert parent.data.metrics["collect/rows"] > 0
    for name, run in children.items():  # both halves of the comparison, side by side
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        ev = json.loads((ws / "records/eval" / f"{name}.json").read_text())
        logged = run.data.metrics["eval/summary.suite.nominal.completion_rate.estimate"]
        assert logged == pytest.approx(ev["summary"]["suite"]["nominal"]["completion_rate"]["estimate"])
        if name in POLICIES:
            assert "train/wall_s" in run.data.metrics or "train/train.wall_s" in run.data.metrics, sorted(
                run.data.metrics
            )[:20]
    for fam in FAMILIES:
        run = children[fam]
        m = run.data.metrics
        metrics = json.loads((ws / "records/distill" / f"{fam}.json").read_text())
        assert m["distill/one_step_rmse.vx"] == pytest.approx(metrics["one_step_rmse"]["vx"])
        assert "distill/rollout.all.fde_1s" in m and "distill/throughput_steps_per_s.16" in m
        assert run.data.params["distill.history"] == "4"
        others = set(FAMILIES) - {fam, "bicycle"}
        assert not any(k.startswith(tuple(f"distill.{o}." for o in others)) for k in run.data.params)
        arts = {a.path for a in c.list_artifacts(run.info.run_id, "distill")}
        assert f"distill/{fam}_error_vs_horizon.png" in arts


def test_one_policys_train_param_changes_its_train_alone_and_what_reads_it(quick: dict) -> None:
    """One policy's train params make its train stage alone out of date; DVC then re-runs the
    stages that read its outputs, and only those (the graph's): its evaluation, time to quality
    (its first seed's checkpoints) and the report. Read from the graph, not by a re-run."""
    import networkx as nx
    from dvc.repo import Repo

    ws, env = quick["ws"], quick["env"]
    params = ws / "params.yaml"
    orig = params.read_text()
    assert "    ddm: {}\n" in orig
    params.write_text(orig.replace("    ddm: {}\n", "    ddm: {seed: 1}\n", 1))
    try:
        status = _dvc(ws, "status", "--json", env=env)
        with Repo(str(ws)) as repo:
            graph = repo.index.graph
            train = next(s for s in graph if s.name == "train@ddm")
            downstream = {s.name for s in nx.ancestors(graph, train)}  # the stages that depend on it
    finally:
        params.write_text(orig)
    assert status.returncode == 0 and set(json.loads(status.stdout)) == {"train@ddm"}
    assert downstream == {"evaluate@ddm", "time_to_quality", "report"}
    assert json.loads(_dvc(ws, "status", "--json", env=env).stdout) == {}
