"""Reliability of training (the faults of docs/reliability.md that hit PPO): a NaN loss, a kill and
the resume after it, the pool workers of a killed stage, a resume file from other params. Each
test injects one fault and checks that nothing is lost or silently wrong; tiny sizes throughout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.timeout(180)
torch.set_num_threads(1)

# ---------------------------------------------------------------- RL: NaN loss, resume after a kill
TRAIN_TINY = {
    "seed": 1,
    "device": "cpu",
    "torch_threads": 1,
    "max_env_steps": 32 * 8 * 10,  # 10 PPO iterations ...
    "chunk_iterations": 2,  # ... in 5 chunks
    "validation_min_speed": 15.0,
    "road_course_check": False,
    "progress_bar": True,
    "env": {"num_envs": 32, "episode_seconds": 10.0},
    "tracks": {"pool_size": 2, "validation_tracks": 1, "validation_starts": 1, "circuit_fraction": 0.0},
    "ppo": {
        "num_steps_per_env": 8,
        "actor_hidden": [16],
        "critic_hidden": [16],
        "learning_epochs": 1,
        "mini_batches": 1,
    },
}


def _mlflow_uri(tmp: Path) -> str:
    """A file store: a fresh SQLite store costs ~10 s of migrations, which these tests do not test."""
    return (tmp / "mlruns").as_uri()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models/bicycle: a bicycle fitted on synthetic rollouts (as in test_train)."""
    from s3.dynamics.checkpoint import save_checkpoint

    from doubles.synthetic_car import fitted_bicycle

    root = tmp_path_factory.mktemp("rl")
    save_checkpoint(fitted_bicycle(n_episodes=6, episode_steps=120), root / "models" / "bicycle")
    return root / "models"


def test_nan_ppo_loss_stops_training_and_keeps_the_last_good_state(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsl_rl.algorithms import PPO

    from s3 import tracking
    from s3.rl.params import TrainParams
    from s3.rl.resume import resume_path
    from s3.rl.train import TrainError, train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", _mlflow_uri(tmp_path))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("S3_MLFLOW", "1")
    run = tracking.family_run("bicycle", tmp_path)
    real, calls = PPO.update, {"n": 0}

    def poisoned(self: PPO) -> dict:
        calls["n"] += 1
        if calls["n"] == 4:  # iteration 3, in the second chunk: the loss itself becomes NaN
            self.value_loss_coef = float("nan")
        return real(self)

    monkeypatch.setattr(PPO, "update", poisoned)
    with pytest.raises(TrainError) as e:
        train(
            "bicycle",
            model_dir,
            tmp_path / "policies",
            tmp_path / "plots",
            TrainParams.model_validate({**TRAIN_TINY, "progress_bar": False}),
            run=run,
        )
    msg, resume = str(e.value), resume_path(tmp_path / "policies" / "bicycle")
    assert (
        "non-finite PPO loss" in msg
        and "iteration 3" in msg
        and str(resume) in msg
        and "iteration 2" in msg
        and "\n" not in msg
    )
    state = torch.load(resume, weights_only=True)
    assert state["done_it"] == 2
    assert all(torch.isfinite(v).all() for v in state["trainer"]["alg"]["actor_state_dict"].values())
    assert not (tmp_path / "policies" / "bicycle" / "policy.json").exists()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=_mlflow_uri(tmp_path))
    assert sorted(m.step for m in client.get_metric_history(run.run_id, "train/Loss/value")) == [
        0,
        1,
        2,
    ]  # the curve up to the failure


def test_training_resumes_from_its_last_checkpoint_after_sigkill(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL `train` once a chunk is saved; the re-run picks up at that iteration (not 0), ends at
    the full budget, validates the killed run's checkpoints with its own, and removes the resume file."""
    from s3.rl.params import TrainParams
    from s3.rl.resume import resume_path
    from s3.rl.train import train

    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": _mlflow_uri(tmp_path),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "OMP_NUM_THREADS": "1",
    }
    script = (
        "import json, sys; from s3.rl.params import TrainParams; from s3.rl.train import train; "
        "train('bicycle', sys.argv[1], sys.argv[2], sys.argv[3], TrainParams.model_validate(json.loads(sys.argv[4])))"
    )
    cmd = [
        sys.executable,
        "-c",
        script,
        str(model_dir),
        str(tmp_path / "policies"),
        str(tmp_path / "plots"),
        json.dumps(TRAIN_TINY),
    ]
    resume = resume_path(tmp_path / "policies" / "bicycle")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not resume.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = torch.load(resume, weights_only=True)  # tensors and plain types only
    saved = state["done_it"]
    assert 2 <= saved < 10, "killed after the first chunk and before the end"
    killed = [c["iteration"] for c in state["checkpoints"]]  # one per finished chunk of 2 iterations
    assert killed == list(range(1, saved, 2))
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.setenv(key, env[key])
    capfd.readouterr()
    train(
        "bicycle", model_dir, tmp_path / "policies", tmp_path / "plots", TrainParams.model_validate(TRAIN_TINY)
    )  # the re-run
    assert f"resuming from {resume} at iteration {saved}/10" in capfd.readouterr().err
    meta = json.loads((tmp_path / "policies" / "bicycle" / "policy.json").read_text())
    assert meta["train"]["resumed_from_iteration"] == saved and meta["train"]["iterations"] == 10
    assert [h["iteration"] for h in meta["history"]] == [1, 3, 5, 7, 9]
    # the killed run's first checkpoint is the one validated: alone it scores what it scored in the batch
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.rl.export import load_actor
    from s3.rl.tracks import validation_tracks
    from s3.rl.validation import validate

    params = TrainParams.model_validate(TRAIN_TINY)
    actor, _ = load_actor(tmp_path / "policies" / "bicycle")
    actor.load_state_dict(state["checkpoints"][0]["actor"])
    alone = validate(
        actor,
        load_checkpoint(model_dir / "bicycle", "bicycle"),
        validation_tracks(params.tracks, params.seed),
        params,
        torch.device("cpu"),
    )
    assert (
        alone["score"] == meta["history"][0]["score"]
        and alone["completion_rate"] == meta["history"][0]["completion_rate"]
    )
    assert not resume.exists()


def _children_end_with(proc: subprocess.Popen, ready: Callable[[], bool]) -> None:
    """SIGKILL `proc` once its pool workers run and `ready()`; its child processes must end too."""
    import psutil

    deadline = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert proc.poll() is None and children, "the workers were running when the parent was killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(children, timeout=15)
    for p in alive:
        p.kill()
    assert not alive, f"orphaned workers kept running: {[p.pid for p in alive]}"


@pytest.mark.slow  # ~11 s; nightly (make test-all)
def test_seed_workers_end_when_train_is_killed(model_dir: Path, tmp_path: Path) -> None:
    """Before s3.workers, a killed `s3 train` left its seed workers training as orphans."""
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": _mlflow_uri(tmp_path),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "OMP_NUM_THREADS": "1",
    }
    params = {
        **TRAIN_TINY,
        "max_env_steps": 32 * 8 * 10_000,
        "seeds": 2,
        "seed_workers": 2,
        "seed_selection": "model",
    }  # hours, unless killed
    script = (
        "import json, sys; from pathlib import Path; from s3.rl.params import TrainParams; from s3.rl.seeds import "
        "train_seeds; train_seeds('bicycle', 'bicycle', Path(sys.argv[1]) / 'bicycle', sys.argv[2], sys.argv[3], "
        "TrainParams.model_validate(json.loads(sys.argv[4])))"
    )
    out = tmp_path / "policies"
    cmd = [
        sys.executable,
        "-c",
        script,
        str(model_dir),
        str(out),
        str(tmp_path / "plots" / "bicycle.png"),
        json.dumps(params),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _children_end_with(proc, lambda: len(list(out.rglob("*.pt"))) >= 2)  # both seeds saved a chunk


@pytest.mark.slow  # nightly (make test-all): keeps make test within its 15 minutes
def test_collect_workers_end_when_collect_is_killed(tmp_path: Path) -> None:
    """The collection pool's workers end with `s3 collect` too (the same initializer as the seeds')."""
    out = tmp_path / "rollouts"
    sets = [
        a
        for o in [
            "collect.episodes=400",
            "collect.episode_steps=300",
            "collect.episodes_per_shard=1",
            "collect.n_tracks=1",
            "collect.workers=2",
            f"collect.out_dir={out}",
            f"collect.plot_dir={tmp_path}/plots",
        ]
        for a in ("--set", o)
    ]
    env = {**os.environ, "S3_MLFLOW": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3", "collect", "--quiet", *sets],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _children_end_with(
        proc, lambda: len(list(out.glob("shard-*.parquet"))) >= 2
    )  # minutes of episodes left, unless killed


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_a_pool_worker_ends_when_the_process_it_watches_ends(pidfd: bool) -> None:
    """exit_with_parent watches any process, not only the parent (a forkserver worker's parent is
    the server); without pidfd_open (Linux < 5.3) it polls the pid."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    script = (
        "import os, sys, time\n"
        + ("" if pidfd else "del os.pidfd_open\n")
        + "from s3.workers import exit_with_parent\nexit_with_parent(int(sys.argv[1]))\ntime.sleep(120)"
    )
    watcher = subprocess.Popen([sys.executable, "-c", script, str(sleeper.pid)])
    try:
        time.sleep(1.5)
        assert watcher.poll() is None, "the watcher ended while the process it watches was running"
        sleeper.kill()
        sleeper.wait()
        assert watcher.wait(timeout=10) == 1
    finally:
        for p in (sleeper, watcher):
            p.kill()
            p.wait()


def test_resume_file_from_other_params_is_ignored(model_dir: Path, tmp_path: Path) -> None:
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.rl.params import TrainParams
    from s3.rl.resume import RESUME_FORMAT, load_resume, resume_fingerprint

    model = load_checkpoint(model_dir / "bicycle", "bicycle")
    a = TrainParams.model_validate(TRAIN_TINY)
    b = TrainParams.model_validate({**TRAIN_TINY, "seed": 2})
    path = tmp_path / "resume.pt"
    torch.save({"format": RESUME_FORMAT, "fingerprint": resume_fingerprint(a, "bicycle", model)}, path)
    said: list[str] = []
    assert load_resume(path, resume_fingerprint(a, "bicycle", model), torch.device("cpu"), said.append) is not None
    assert load_resume(path, resume_fingerprint(b, "bicycle", model), torch.device("cpu"), said.append) is None
    assert "other params" in said[-1] and str(path) in said[-1]
    torch.save({"format": RESUME_FORMAT, "code": torch.nn.Linear(2, 2)}, path)  # a pickled object: refused
    assert load_resume(path, "x", torch.device("cpu"), said.append) is None and "unreadable" in said[-1]
