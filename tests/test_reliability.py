"""Reliability of the simulators, inputs and workspace (docs/reliability.md): each test injects
one fault and checks that nothing is lost or silently wrong; tiny sizes throughout. Training's
faults are in test_reliability_training.py; the tests that live beside their stages are listed
in docs/reliability.md.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from s3.cli import app
from s3.config import Params, load_params
from s3.data.collect import FAULT_EXIT_ENV, collect
from s3.data.rollouts import MANIFEST, load_rollouts, read_manifest, sha256_file, shard_name
from s3.sim.beamng_standin import BeamngStandin, recv_frame, send_frame
from s3.sim.factory import drop_worker_sim

pytestmark = pytest.mark.timeout(180)
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
SOCKET_TIMEOUT = 5.0
FAST_RETRY = ["compute.retry.retry_backoff_s=0.01"]


def _tiny(out: Path, *extra: str) -> Params:
    base = ["collect.episodes=2", "collect.episode_steps=30", "collect.episodes_per_shard=1", "collect.n_tracks=1"]
    return load_params(
        None, [*base, *FAST_RETRY, f"collect.out_dir={out}/rollouts", f"collect.plot_dir={out}/plots", *extra]
    )


def _collect(params: Params) -> tuple[pd.DataFrame | None, dict]:
    """Collect; return (rows or None when nothing was kept, manifest with the run record under "run");
    never keep a cached simulator."""
    out = Path(params.collect.out_dir)
    try:
        collect(params, quiet=True, metrics_path=out.parent / "collect.json")
    finally:
        drop_worker_sim()
    m = {**read_manifest(out), "run": json.loads((out.parent / "collect.json").read_text())}
    return (load_rollouts(out) if m["shards"] else None), m


# ---------------------------------------------------------------- simulator drops: embedded worker dies
@pytest.fixture(scope="module")
def mujoco_ref(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """An uninterrupted tiny collection (in-process)."""
    df, m = _collect(_tiny(tmp_path_factory.mktemp("ref"), "collect.workers=1"))
    assert m["episodes"] == 2 and not m["lost"]
    return df


def test_worker_process_death_is_retried_and_the_data_is_unchanged(
    mujoco_ref, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker dies (os._exit) once while driving episode 1: its shard is re-run, nothing is lost,
    and the dataset equals the uninterrupted one row for row."""
    monkeypatch.setenv(FAULT_EXIT_ENV, f"1:{tmp_path / 'died'}")
    df, m = _collect(_tiny(tmp_path, "collect.workers=2"))
    assert (tmp_path / "died").exists(), "the fault was injected"
    assert m["lost"] == [] and m["episodes_lost"] == 0
    retried = m["run"]["retried_this_run"]  # the run's record: retries do not change the dataset's bytes
    assert {r["shard"] for r in retried} >= {1} and all(set(r["causes"]) == {"worker process died"} for r in retried)
    pd.testing.assert_frame_equal(df, mujoco_ref)


def test_worker_that_always_dies_is_reported_lost_and_recovered_by_a_rerun(
    mujoco_ref, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard whose worker dies every time is retried `compute.retry.retries` times, then reported lost;
    the other shard is kept; a re-run collects the lost episode and keeps the kept shard."""
    monkeypatch.setenv(FAULT_EXIT_ENV, "1:")
    params = _tiny(tmp_path, "collect.workers=2", "compute.retry.retries=1")
    df, m = _collect(params)
    out = tmp_path / "rollouts"
    assert m["episodes_lost"] == 1 and m["lost"] == [{"episode": 1, "reason": "worker process died 2 times"}]
    assert m["episodes"] == 1 and [s["file"] for s in m["shards"]] == [shard_name(0)]
    assert not (out / shard_name(1)).exists()
    pd.testing.assert_frame_equal(df, mujoco_ref[mujoco_ref.episode == 0].reset_index(drop=True))
    kept = (out / shard_name(0)).stat().st_mtime_ns
    monkeypatch.delenv(FAULT_EXIT_ENV)
    df, m = _collect(params)
    assert m["lost"] == [] and (out / shard_name(0)).stat().st_mtime_ns == kept
    pd.testing.assert_frame_equal(df, mujoco_ref)


# ---------------------------------------------------------------- simulator drops: BeamNG closes its socket
def _bng(out: Path, port: int, *extra: str) -> Params:
    return _tiny(
        out,
        "collect.workers=1",
        "sim.backend=beamng",
        f"sim.beamng.port={port}",
        f"sim.beamng.request_timeout={SOCKET_TIMEOUT}",
        *extra,
    )


@pytest.fixture(scope="module")
def beamng_ref(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    with BeamngStandin() as server:
        df, m = _collect(_bng(tmp_path_factory.mktemp("bref"), server.port))
    assert m["episodes"] == 2 and len(df) > 20
    return df


def test_beamng_drop_mid_episode_is_retried_and_the_data_is_unchanged(beamng_ref, tmp_path: Path) -> None:
    with BeamngStandin(drop_after_steps=25) as server:
        df, m = _collect(_bng(tmp_path, server.port))
    assert server.dropped == 1
    assert m["lost"] == [] and m["run"]["retried_this_run"] == [
        {"shard": 0, "episodes": [0, 0], "retries": 1, "causes": ["simulator lost"]}
    ]
    pd.testing.assert_frame_equal(df, beamng_ref)


def test_beamng_drop_that_persists_loses_the_episode_and_collection_goes_on(beamng_ref, tmp_path: Path) -> None:
    """Two drops with retries=1: episode 0 is lost (and said so), episode 1 is collected; once the
    simulator behaves, a re-run fills the gap."""
    with BeamngStandin(drop_after_steps=20, drops=2) as server:
        params = _bng(tmp_path, server.port, "compute.retry.retries=1")
        df, m = _collect(params)
        assert server.dropped == 2
        assert (
            m["episodes_lost"] == 1
            and m["lost"][0]["episode"] == 0
            and "simulator lost 2 times" in m["lost"][0]["reason"]
        )
        assert m["episodes"] == 1 and df is not None and set(df.episode) == {1}
        df, m = _collect(params)
    assert m["lost"] == []
    pd.testing.assert_frame_equal(df, beamng_ref)


def _four(out: Path, *instances: int) -> Params:
    return _tiny(
        out,
        "collect.episodes=4",
        "sim.backend=beamng",
        f"sim.beamng.request_timeout={SOCKET_TIMEOUT}",
        f"sim.beamng.instances=[{', '.join(f'127.0.0.1:{p}' for p in instances)}]",
    )


def test_two_instances_serve_one_collection_and_survive_losing_one(tmp_path: Path) -> None:
    """Two stand-ins, one worker each: the data equals one instance's. One is killed mid-collection
    (its listening socket closed, as a crashed BeamNG.tech): only its shard is re-run, on the other."""
    import threading

    with BeamngStandin() as one:
        ref, m = _collect(_four(tmp_path / "one", one.port))
    assert m["episodes"] == 4 and m["run"]["workers"] == 1
    with BeamngStandin() as a, BeamngStandin() as b:
        both, m = _collect(_four(tmp_path / "both", a.port, b.port))
        assert a.received.count("Step") > 0 and b.received.count("Step") > 0  # both served
    assert m["run"]["workers"] == 2 and m["lost"] == []
    pd.testing.assert_frame_equal(both, ref)

    with BeamngStandin() as a, BeamngStandin() as b:

        def kill_b() -> None:
            while b.received.count("Step") < 40:
                time.sleep(0.005)
            b.stop()

        killer = threading.Thread(target=kill_b, daemon=True)
        killer.start()
        survived, m = _collect(_four(tmp_path / "kill", a.port, b.port))
        killer.join(timeout=5)
    assert not killer.is_alive() and b.received.count("Step") >= 40  # b died mid-collection
    assert m["lost"] == [] and [r["causes"] for r in m["run"]["retried_this_run"]] == [["simulator lost"]]
    pd.testing.assert_frame_equal(survived, ref)


def test_evaluation_over_two_instances_scores_like_one(tmp_path: Path) -> None:
    from s3.evaluate.evaluate import evaluate_baseline

    def run(name: str, *ports: int) -> dict:
        params = _bng(
            tmp_path,
            ports[0],
            "evaluate.tracks=[short]",
            "evaluate.conditions=[nominal, ice]",
            "evaluate.gif=false",
            "evaluate.start_fractions=[0.0, 0.5]",
            "evaluate.max_lap_seconds=5",
            f"sim.beamng.instances=[{', '.join(f'127.0.0.1:{p}' for p in ports)}]",
        )
        try:
            return evaluate_baseline("pid", params, tmp_path / f"{name}.json", None)
        finally:
            drop_worker_sim()

    with BeamngStandin() as one:
        ref = run("one", one.port)
    with BeamngStandin() as a, BeamngStandin() as b:
        both = run("both", a.port, b.port)
        assert a.received.count("Step") > 0 and b.received.count("Step") > 0

    def scored(out: dict) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in out["runs"]]

    assert scored(both) == scored(ref)
    assert len(ref["runs"]) == 2 * 2 and ref["lost"] == both["lost"] == []


def test_collect_fails_when_the_lost_share_reaches_its_threshold(tmp_path: Path) -> None:
    """Any loss is reported; all lost is an error (exit 2 from the CLI), and so is a share at or above
    `compute.fail_at_lost_share`. The manifest still says what was lost."""
    from s3.compute.retry import TooMuchLost

    # every episode drops, every time
    with (
        BeamngStandin(drop_after_steps=20, drops=100) as server,
        pytest.raises(TooMuchLost, match=r"collect: 2 of 2 lost .*simulator lost 1 time"),
    ):
        _collect(_bng(tmp_path / "all", server.port, "compute.retry.retries=0"))
    assert json.loads((tmp_path / "all" / "rollouts" / MANIFEST).read_text())["episodes_lost"] == 2
    # episode 0 lost, episode 1 kept
    with (
        BeamngStandin(drop_after_steps=20, drops=2) as server,
        pytest.raises(TooMuchLost, match=r"collect: 1 of 2 lost .*fail_at_lost_share 0.5"),
    ):
        _collect(_bng(tmp_path / "half", server.port, "compute.retry.retries=1", "compute.fail_at_lost_share=0.5"))


def test_evaluate_fails_when_every_run_is_lost(tmp_path: Path) -> None:
    from s3.compute.retry import TooMuchLost
    from s3.evaluate.evaluate import evaluate_baseline

    with BeamngStandin(drop_after_steps=5, drops=100) as server:
        params = _bng(
            tmp_path,
            server.port,
            "compute.retry.retries=0",
            "evaluate.tracks=[short]",
            "evaluate.conditions=[nominal]",
            "evaluate.start_fractions=[0.0, 0.5]",
            "evaluate.gif=false",
        )
        with pytest.raises(TooMuchLost, match=r"evaluate pid: 2 of 2 lost"):
            evaluate_baseline("pid", params, tmp_path / "eval.json", None)
    assert not (tmp_path / "eval.json").exists()  # no metrics that stand for nothing


def test_unreachable_simulator_stops_collect_and_evaluate_after_bounded_retries(tmp_path: Path) -> None:
    """Nobody listening: a bounded number of attempts, then one clear error; no dataset is claimed."""
    from s3.evaluate.evaluate import evaluate_baseline
    from s3.sim.base import SimulatorError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    params = _bng(
        tmp_path, port, "compute.retry.retries=1", "evaluate.tracks=[short]", "evaluate.start_fractions=[0.0]"
    )
    t0 = time.monotonic()
    with pytest.raises(SimulatorError, match=rf"cannot reach BeamNG.tech at 127.0.0.1:{port}.*2 attempts"):
        _collect(params)
    assert not (tmp_path / "rollouts" / MANIFEST).exists()
    with pytest.raises(SimulatorError, match="cannot reach BeamNG.tech"):
        evaluate_baseline("pid", params, tmp_path / "eval.json", None)
    assert not (tmp_path / "eval.json").exists() and time.monotonic() - t0 < 30


def test_evaluation_retries_a_lost_run_then_reports_runs_lost(tmp_path: Path) -> None:
    """Evaluation re-makes the simulator after a drop: a run that succeeds on retry scores exactly
    like an undisturbed one; a run lost on every attempt is left out of the metrics and listed."""
    from s3.evaluate.evaluate import evaluate_baseline

    def run(server: BeamngStandin, name: str) -> dict:
        params = load_params(
            None,
            [
                "sim.backend=beamng",
                f"sim.beamng.port={server.port}",
                f"sim.beamng.request_timeout={SOCKET_TIMEOUT}",
                "evaluate.conditions=[nominal]",
                "evaluate.start_fractions=[0.0, 0.5]",
                "evaluate.tracks=[road_course]",
                "evaluate.gif=false",
                "evaluate.max_lap_seconds=5",
                "compute.retry.retries=1",
                *FAST_RETRY,
            ],
        )
        return evaluate_baseline("pid", params, tmp_path / f"{name}.json", None)

    def scores(out: dict) -> list[tuple]:
        return [(r["start_index"], r["distance_m"], r["reason"], r["steps"]) for r in out["runs"]]

    with BeamngStandin() as server:
        clean = run(server, "clean")
    with BeamngStandin(drop_after_steps=40) as server:
        once = run(server, "once")
    assert server.dropped == 1 and once["lost"] == []
    assert [(r["start_index"], r["retries"]) for r in once["retried"]] == [(0, 1)]
    assert scores(once) == scores(clean) and clean["lost"] == [] and clean["retried"] == []
    with BeamngStandin(drop_after_steps=20, drops=2) as server:
        lossy = run(server, "lossy")
    assert [(r["start_index"], r["attempts"]) for r in lossy["lost"]] == [(0, 2)] and "BeamNG" in lossy["lost"][0][
        "error"
    ]
    assert scores(lossy) == scores(clean)[1:] and lossy["summary"]["suite"]["nominal"]["runs"] == 1
    assert json.loads((tmp_path / "lossy.json").read_text())["lost"] == lossy["lost"]


def test_standin_command_line_drops_the_connection_on_request() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3.sim.beamng_standin", "--port", "0", "--drop-after-steps", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT) as c:
            send_frame(c, {"type": "Hello", "protocolVersion": "v1.27", "_id": 0})
            assert recv_frame(c)["type"] == "Hello"
            send_frame(c, {"type": "Step", "count": 1, "_id": 1})
            assert recv_frame(c) is None, "the stand-in hangs up instead of answering"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---------------------------------------------------------------- corrupted inputs
@pytest.fixture(scope="module")
def one_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid one-episode, one-shard rollout folder."""
    params = _tiny(tmp_path_factory.mktemp("one"), "collect.workers=1", "collect.episodes=1")
    _collect(params)
    return Path(params.collect.out_dir)


def _rewrite(shard: Path, table: pa.Table) -> None:
    pq.write_table(table, shard)


def _truncate(shard: Path) -> None:
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def _drop_column(shard: Path) -> None:
    t = pq.read_table(shard)
    _rewrite(shard, t.drop(["yaw_rate"]).replace_schema_metadata(t.schema.metadata))


def _extra_column(shard: Path) -> None:
    t = pq.read_table(shard)
    _rewrite(shard, t.append_column("bonus", pa.array(np.zeros(len(t)))).replace_schema_metadata(t.schema.metadata))


@pytest.mark.parametrize(
    "damage, sync_manifest, expected",
    [
        (_truncate, True, "not a readable Parquet file"),
        (
            lambda s: s.write_bytes(bytes(b ^ 0x5A if i == 40 else b for i, b in enumerate(s.read_bytes()))),
            False,
            "content differs",
        ),
        (_drop_column, True, "missing ['yaw_rate']"),
        (_extra_column, True, "extra ['bonus']"),
        (lambda s: s.unlink(), False, "listed in"),
        ("rows", False, "rows, manifest says"),
    ],
    ids=["truncated", "bit-flipped", "missing-column", "extra-column", "missing-shard", "manifest-rows"],
)
def test_bad_rollouts_stop_distill_with_one_line_naming_the_file(
    one_shard: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage, sync_manifest: bool, expected: str
) -> None:
    """Each damage stops `s3 distill` before any model is trained: exit 2, one line, the file named."""
    out = tmp_path / "data"
    out.mkdir()
    for f in one_shard.glob("*.parquet"):
        (out / f.name).write_bytes(f.read_bytes())
    manifest = json.loads((one_shard / MANIFEST).read_text())
    shard = out / shard_name(0)
    if damage == "rows":
        manifest["shards"][0]["rows"] += 1
    else:
        damage(shard)
    if sync_manifest:  # the damage is in the shard itself, not only a hash mismatch
        manifest["shards"][0]["sha256"] = sha256_file(shard)
    (out / MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["distill", "--family", "bicycle", "--quiet", "--set", f"collect.out_dir={out}"])
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and expected in lines[0] and (str(shard) in lines[0] or str(out / MANIFEST) in lines[0]), (
        result.output
    )
    assert not (tmp_path / "models").exists(), "nothing downstream ran"


RING = [(30 * math.cos(t), 30 * math.sin(t)) for t in np.linspace(0, 2 * np.pi, 40, endpoint=False)]
FIGURE_EIGHT = [(60 * math.sin(2 * t), 40 * math.sin(t)) for t in np.linspace(0, 2 * np.pi, 80, endpoint=False)]


@pytest.mark.parametrize(
    "pts, expected",
    [
        (FIGURE_EIGHT, "intersects itself"),
        (RING[:10] + [RING[9]] + RING[10:], "duplicate consecutive points"),
        (RING[:5] + [(float("nan"), 0.0)] + RING[6:], "NaN in x_m"),
    ],
    ids=["self-intersection", "duplicate", "nan"],
)
def test_bad_track_csv_is_one_cli_line_naming_the_file(
    tmp_path: Path, pts: list[tuple[float, float]], expected: str
) -> None:
    bad = tmp_path / "circuit.csv"
    bad.write_text("# x_m,y_m,w_tr_right_m,w_tr_left_m\n" + "".join(f"{x:.4f},{y:.4f},4.0,4.0\n" for x, y in pts))
    result = CliRunner().invoke(app, ["track", "show", str(bad)])
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert str(bad) in lines[0] and expected in lines[0], result.output


# ---------------------------------------------------------------- concurrency
def test_two_dvc_repro_on_one_workspace_second_fails_fast(tmp_path: Path) -> None:
    dvc = str(Path(sys.executable).with_name("dvc"))
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=ws, env=env, check=True)
    stage = (
        f"{sys.executable} -c \"import pathlib, time; pathlib.Path('started').touch(); time.sleep(5); "
        "pathlib.Path('out.txt').write_text('ok')\""
    )
    (ws / "dvc.yaml").write_text(f"stages:\n  slow:\n    cmd: {json.dumps(stage)}\n    outs:\n      - out.txt\n")
    first = subprocess.Popen(
        [dvc, "repro"], cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 60
    while not (ws / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    second = subprocess.run([dvc, "repro"], cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    waited = time.monotonic() - t0
    assert second.returncode != 0 and waited < 4.5, (second.returncode, waited)
    assert re.search(r"lock", second.stdout + second.stderr, re.I), second.stderr
    assert first.wait(timeout=60) == 0, first.stdout.read()
    assert (ws / "out.txt").read_text() == "ok"


def test_two_s3_collect_on_one_folder_second_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`s3 collect` runs in a subprocess; a second `s3 collect` (another process: this one) on the
    same folder exits 2 at once with one line, and the first finishes with a valid dataset."""
    out = tmp_path / "rollouts"
    sets = [
        a
        for o in [
            "collect.episodes=4",
            "collect.episode_steps=60",
            "collect.episodes_per_shard=1",
            "collect.n_tracks=1",
            "collect.workers=1",
            f"collect.out_dir={out}",
            f"collect.plot_dir={tmp_path}/plots",
        ]
        for a in ("--set", o)
    ]
    env = {**os.environ, "S3_MLFLOW": "0", "OMP_NUM_THREADS": "1"}
    from s3.cli.base import _known_errors

    _known_errors()  # the CLI imports every stage's error type on its first error: do that before timing
    first = subprocess.Popen(
        [sys.executable, "-m", "s3", "collect", "--quiet", *sets],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lock = out / ".s3_lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.01)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("S3_MLFLOW", "0")
    t0 = time.monotonic()
    second = CliRunner().invoke(app, ["collect", "--quiet", *sets])
    assert time.monotonic() - t0 < 2.0 and first.poll() is None, "the second gave up while the first was still running"
    lines = [ln for ln in second.output.splitlines() if ln.strip()]
    assert second.exit_code == 2 and len(lines) == 1 and "already running" in lines[0] and str(out) in lines[0], lines
    assert first.wait(timeout=120) == 0, first.stdout.read()
    m = read_manifest(out)
    assert m["episodes"] + m["episodes_dropped"] == 4 and len(load_rollouts(out)) == m["rows"] > 0


# ---------------------------------------------------------------- untrusted files, servers
def test_no_pickle_of_external_files_and_servers_bind_loopback() -> None:
    """Checkpoints load with weights_only=True or from safetensors; nothing unpickles files; the
    servers the project starts listen on 127.0.0.1 by default."""
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "flows").rglob("*.py")]:
        text = path.read_text()
        for m in re.finditer(r"torch\.load\(([^()]|\([^()]*\))*\)", text):
            assert "weights_only=True" in m.group(0), f"{path}: {m.group(0)}"
        assert not re.search(r"\bpickle\.loads?\(|\bjoblib\.load\(|allow_pickle=True|\bdill\.", text), path
    from s3.sim.beamng_standin.__main__ import main as standin_main

    assert inspect.signature(BeamngStandin).parameters["host"].default == "127.0.0.1"
    assert 'add_argument("--host", default="127.0.0.1"' in inspect.getsource(standin_main)
    make = (ROOT / "Makefile").read_text()
    servers = [ln for ln in make.splitlines() if re.search(r"prefect server start|mlflow (ui|server)", ln)]
    assert servers and all("--host 127.0.0.1" in ln for ln in servers), servers


# ---------------------------------------------------------------- determinism
def test_same_seed_gives_the_same_distilled_model_metrics_on_cpu(tmp_path: Path) -> None:
    """Same seed and data on CPU: the same learned model and the same prediction metrics."""
    from s3.dynamics.distill import distill
    from s3.dynamics.params import DistillParams

    from doubles.synthetic_car import generate_rollouts

    df = generate_rollouts(n_episodes=10, episode_steps=120, seed=2)
    p = DistillParams(
        history=5,
        horizon=5,
        batch_size=64,
        train_windows_per_epoch=256,
        val_windows=128,
        max_epochs=2,
        max_minutes=10.0,
        progress_bar=False,
        device="cpu",
        throughput_sizes=[1],
        eval_stride=20,
        transformer={"d_model": 16, "layers": 1, "heads": 2},
    )

    def timing_free(x: object) -> object:
        if isinstance(x, dict):
            return {k: timing_free(v) for k, v in x.items() if "wall" not in k and "throughput" not in k}
        return x

    runs = [distill("transformer", df, tmp_path / f"m{i}", tmp_path / f"x{i}", tmp_path / f"p{i}", p) for i in range(2)]
    assert timing_free(runs[0]) == timing_free(runs[1])
    from safetensors.torch import load_file

    w0, w1 = (load_file(str(tmp_path / f"m{i}" / "transformer" / "model.safetensors")) for i in range(2))
    assert w0.keys() == w1.keys() and all(torch.equal(w0[k], w1[k]) for k in w0)
