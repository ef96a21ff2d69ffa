"""Tests of PPO in the distilled environment: a tiny training run, the saved and exported policy,
MLflow logging and the throughput benchmark. One torch thread, a bicycle fitted on synthetic data
(the `bicycle` and `root` fixtures are in conftest.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from s3.dynamics.checkpoint import save_checkpoint
from s3.rl.bench import bench_env
from s3.rl.env import DistilledEnv
from s3.rl.export import EXPORT, WEIGHTS, deployable, load_actor, load_policy_fn, write_policy
from s3.rl.loop import PPOTrainer
from s3.rl.params import PPOParams, TrainParams
from s3.rl.train import train, train_policy
from s3.rl.validation import kept_index
from s3.task.actions import policy_to_command
from s3.task.params import EnvParams
from s3.tracks.generate import procedural_track

torch.set_num_threads(1)

TINY = {
    "seed": 1,
    "device": "cpu",
    "max_env_steps": 128 * 16 * 24,  # 24 PPO iterations
    "chunk_iterations": 8,
    "validation_min_speed": 15.0,
    "road_course_check": False,
    "progress_bar": False,
    "env": {"num_envs": 128, "episode_seconds": 20.0},
    "tracks": {"pool_size": 4, "validation_tracks": 2, "validation_starts": 1},
    "ppo": {
        "num_steps_per_env": 16,
        "actor_hidden": [64, 64],
        "critic_hidden": [64, 64],
        "learning_epochs": 3,
        "mini_batches": 2,
    },
}


@pytest.fixture(scope="module")
def tracks() -> list:
    return [procedural_track(i) for i in range(3)]


@pytest.fixture(scope="module")
def trained(bicycle, root) -> dict:
    """One tiny `train` stage run from a saved checkpoint, logging into bicycle's family run (MLflow on)."""
    from s3 import tracking

    save_checkpoint(bicycle, root / "models" / "bicycle")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("S3_MLFLOW", "1")
        run = tracking.family_run("bicycle")
    summary = train(
        "bicycle",
        root / "models",
        root / "policies",
        root / "plots",
        TrainParams.model_validate(TINY),
        metrics_dir=root / "metrics",
        run=run,
    )
    run.finish()  # the run's owner ends it, not the training
    return {"root": root, "summary": summary, "run": run}


def test_a_run_ends_when_its_validation_score_stops_improving(bicycle, tmp_path) -> None:
    """plateau_chunks 1 with an unreachable plateau_delta: every chunk after the first is no gain, so the
    run ends after its second chunk, says so, and kept the validation of every chunk it ran."""
    params = TrainParams.model_validate({**TINY, "plateau_chunks": 1, "plateau_delta": 1.0})
    summary = train_policy(bicycle, tmp_path / "p", None, params, "bicycle")
    meta = json.loads((tmp_path / "p" / "policy.json").read_text())
    assert meta["train"]["stopped_by"] == "plateau" and meta["train"]["iterations"] == 16  # 2 chunks of 8
    assert len(meta["history"]) == 2 and summary["validation"]["score"] in [h["score"] for h in meta["history"]]


def _mean_step_reward(env: DistilledEnv, policy, steps: int = 60) -> float:
    env.generator.manual_seed(7)
    obs = env.reset()["policy"]
    total = 0.0
    for _ in range(steps):
        td, rew, _, _ = env.step(policy(obs))
        obs, total = td["policy"], total + float(rew.mean())
    return total / steps


def test_tiny_ppo_beats_random_and_writes_policy_files(trained, bicycle, tracks) -> None:
    root, summary = trained["root"], trained["summary"]
    folder = root / "policies" / "bicycle"
    for name in (WEIGHTS, EXPORT, "policy.json"):
        assert (folder / name).stat().st_size > 0
    assert (root / "plots" / "bicycle.png").stat().st_size > 0
    assert json.loads((root / "metrics" / "bicycle.json").read_text())["family"] == "bicycle"
    meta = json.loads((folder / "policy.json").read_text())
    assert meta["obs"]["dim"] == 119 and meta["policy"]["type"] == "mlp"
    assert 0.0 <= meta["validation"]["score"] <= 1.0 and meta["validation"]["score"] == summary["validation"]["score"]
    assert meta["train"]["env_steps"] == 24 * 128 * 16 and len(meta["history"]) == 3
    assert meta["train"]["stopped_by"] == "max_env_steps"  # the budget, not the safety cap, ended it
    scores = [h["score"] for h in meta["history"]]
    rule = meta["params"]["validation_tolerance"]  # the default rule
    assert meta["validation"]["iteration"] == meta["history"][kept_index(scores, rule)]["iteration"]
    assert meta["dynamics_model"]["sha256"] and meta["params"]["env"]["num_envs"] == 128
    # the trained policy earns more per step than random actions, in the same env and starts
    env = DistilledEnv(bicycle, tracks, EnvParams(num_envs=32), seed=3)
    policy, _ = load_policy_fn(folder)
    trained_r = _mean_step_reward(env, policy)
    g = torch.Generator().manual_seed(0)
    random_r = _mean_step_reward(env, lambda obs: torch.rand(obs.shape[0], 2, generator=g) * 2 - 1)
    assert trained_r > random_r + 0.05, (trained_r, random_r)
    assert trained_r > 0.1  # > 1 m/s of mean progress


def test_kept_checkpoint_is_the_latest_within_tolerance_of_the_best() -> None:
    scores = [0.2, 0.9, 0.85, 0.5, 0.82, 0.4]
    assert kept_index(scores, 0.0) == 1  # the best
    assert kept_index(scores, 0.1) == 4  # 0.82 is within 0.1 of 0.9; the collapse to 0.4 is not
    assert kept_index(scores, 0.05) == 2
    assert kept_index([0.5, 0.7, 0.7], 0.0) == 2  # ties: the later one
    # decided after every chunk (as train does), the rule keeps what it keeps when applied once at the end
    rng = torch.Generator().manual_seed(0)
    for _ in range(200):
        seq = torch.rand(int(torch.randint(1, 12, (1,), generator=rng)), generator=rng).tolist()
        online = 0
        for n in range(1, len(seq) + 1):
            if kept_index(seq[:n], 0.1) == n - 1:
                online = n - 1
        assert online == kept_index(seq, 0.1), seq


@pytest.mark.slow  # nightly (make test-all): keeps make test within its 15 minutes
def test_checkpoints_validated_together_drive_as_they_drive_alone() -> None:
    """drive_checkpoints drives k checkpoints in one env, each on its own rows: each car's episode is
    the one it drives alone, bit for bit. For a transformer set to compile, validation stays eager:
    at k * 32 > 256 cars its env would otherwise run compiled chunks, which round differently from
    the eager path of a lone validation (measured: lap shares 1e-4 apart on the eighth run's policies)."""
    import numpy as np

    from s3.dynamics.transformer import INFERENCE_CHUNK, TransformerModel
    from s3.rl.tracks import validation_tracks
    from s3.rl.validation import drive_checkpoints, validate, validate_checkpoints

    torch.manual_seed(0)
    model = TransformerModel(10, 0.1, True)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # random weights (its head starts at zero), and a car that speeds up
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
        model.head.bias[0] += 1.0
    params = TrainParams.model_validate(
        {
            **TINY,
            "env": {"num_envs": 8, "compile_model": True, "max_steer": 10.0},
            "tracks": {"pool_size": 2, "validation_tracks": 8, "validation_starts": 4},
        }
    )
    tracks, dev = validation_tracks(params.tracks, params.seed), torch.device("cpu")
    actor = PPOTrainer(DistilledEnv(model, tracks[:2], params.env, seed=0), params.ppo, "cpu").actor
    states = []
    for k in range(9):
        g = torch.Generator().manual_seed(k)
        states.append(
            {
                n: v + 0.5 * torch.randn(v.shape, generator=g) if n.startswith("mlp") else v.clone()
                for n, v in actor.state_dict().items()
            }
        )
    assert len(states) * 8 * 4 > INFERENCE_CHUNK
    calls = []
    model.net._compiled = lambda *a: calls.append(len(a[0])) or model.net._forward(*a)  # stands for the compiled chunk
    assert (
        DistilledEnv(model, tracks, params.env.model_copy(update={"num_envs": 288}), seed=0).step(torch.zeros(288, 2))
        and calls
    )  # a training env uses it
    calls.clear()
    together = drive_checkpoints(actor, states, model, tracks, params, dev)
    assert (
        not calls and model.inference_compile is True
    )  # validation ran eager; the setting is left as the training env set it
    distinct = {together.part(slice(32 * k, 32 * k + 32)).progress.tobytes() for k in range(9)}
    assert len(distinct) >= 8  # the checkpoints drive differently (two random ones may coincide)
    summaries = validate_checkpoints(actor, states, model, tracks, params, dev)
    for k in (0, 8):
        alone = drive_checkpoints(actor, [states[k]], model, tracks, params, dev)
        part = together.part(slice(32 * k, 32 * k + 32))
        assert (
            np.array_equal(part.progress, alone.progress)
            and np.array_equal(part.steps, alone.steps)
            and part.reason == alone.reason
        )
        actor.load_state_dict(states[k])
        assert validate(actor, model, tracks, params, dev) == summaries[k]


def test_learning_curve_is_in_mlflow(trained) -> None:
    from mlflow.tracking import MlflowClient

    root, run_id = trained["root"], trained["summary"]["mlflow_run_id"]
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    run = client.get_run(run_id)
    assert run_id == trained["run"].run_id  # the run it was given, not one of its own
    assert (
        run.info.status == "FINISHED"
        and run.data.tags["s3.family"] == "bicycle"
        and run.data.tags["s3.kind"] == "family"
    )
    assert client.get_run(run.data.tags["mlflow.parentRunId"]).data.tags["s3.kind"] == "pipeline"
    assert all(
        "mlflow.parentRunId" in r.data.tags
        for r in client.search_runs([run.info.experiment_id])
        if r.data.tags.get("s3.kind") != "pipeline"
    )
    assert run.data.params["train.env.num_envs"] == "128"
    rewards = client.get_metric_history(run_id, "train/Train/mean_reward")
    assert len(rewards) >= 20 and sorted(m.step for m in rewards) == [m.step for m in rewards]
    losses = client.get_metric_history(
        run_id, "train/Loss/value"
    )  # one per PPO update: every batch written, the last too
    assert sorted(m.step for m in losses) == list(range(trained["summary"]["train"]["iterations"]))
    assert len(client.get_metric_history(run_id, "val/score")) == 3
    assert "val/best_score" in run.data.metrics and "train/Loss/value" in run.data.metrics
    assert list((root / "mlartifacts").rglob("policy.json"))  # artifacts beside the database
    assert not (root / "mlruns").exists()


def test_gru_policy_with_surface_label_trains_in_chunks(bicycle, root) -> None:
    params = TrainParams.model_validate(
        {
            **TINY,
            "max_env_steps": 64 * 8 * 6,
            "chunk_iterations": 2,
            "validation_tolerance": 1.0,  # every score is within 1 of the best: the last checkpoint is kept
            "env": {"num_envs": 64, "surface_label": True},
            "ppo": {**TINY["ppo"], "policy": "gru", "rnn_hidden": 16, "num_steps_per_env": 8},
        }
    )
    summary = train_policy(bicycle, root / "policies" / "gru", None, params, "bicycle")
    meta = json.loads((root / "policies" / "gru" / "policy.json").read_text())
    assert meta["policy"]["recurrent"] and meta["obs"]["surface_label"] and meta["obs"]["dim"] == 125
    assert summary["train"]["iterations"] == 6 and len(meta["history"]) == 3
    assert meta["validation"]["iteration"] == 5 and meta["validation"]["score"] == meta["history"][-1]["score"]
    policy, _ = load_policy_fn(root / "policies" / "gru")
    env = DistilledEnv(bicycle, [procedural_track(0)], params.env, num_envs=5)
    cmd = policy(env.get_observations()["policy"])
    assert cmd.shape == (5, 3) and torch.isfinite(cmd).all()


def test_the_wall_clock_cap_stops_after_a_chunk_and_says_so(bicycle, root) -> None:
    """A cap shorter than one chunk ends training after that chunk, and the policy says the clock, not the budget,
    stopped it."""
    params = TrainParams.model_validate(
        {
            **TINY,
            "max_env_steps": 64 * 8 * 6,
            "max_minutes": 1e-6,
            "chunk_iterations": 2,
            "env": {"num_envs": 64},
            "ppo": {**TINY["ppo"], "num_steps_per_env": 8},
        }
    )
    summary = train_policy(bicycle, root / "policies" / "capped", None, params, "bicycle")
    assert summary["train"]["iterations"] == 2 and summary["train"]["env_steps"] == 2 * 64 * 8
    assert summary["train"]["stopped_by"] == "max_minutes"


def test_a_slow_machine_trains_the_same_policy(bicycle, root, monkeypatch) -> None:
    """The budget is env steps: a run whose clock reads 100x the real time keeps bit-identical weights."""
    import time as real_time
    from types import SimpleNamespace

    import s3.rl.train as train_mod

    params = TrainParams.model_validate(
        {
            **TINY,
            "max_env_steps": 64 * 8 * 4,
            "chunk_iterations": 2,
            "env": {"num_envs": 64},
            "ppo": {**TINY["ppo"], "num_steps_per_env": 8},
        }
    )
    fast = train_policy(bicycle, root / "policies" / "fast", None, params, "bicycle")
    t0 = real_time.perf_counter()
    monkeypatch.setattr(
        train_mod, "time", SimpleNamespace(perf_counter=lambda: t0 + 100.0 * (real_time.perf_counter() - t0))
    )
    slow = train_policy(bicycle, root / "policies" / "slow", None, params, "bicycle")
    assert slow["train"]["wall_s"] > 20.0 * fast["train"]["wall_s"]  # the clock did run slow
    assert fast["train"]["stopped_by"] == slow["train"]["stopped_by"] == "max_env_steps"
    assert (root / "policies" / "fast" / WEIGHTS).read_bytes() == (root / "policies" / "slow" / WEIGHTS).read_bytes()


def test_oracle_with_one_seed_trains_in_its_family_model_named_for_itself(bicycle, root, monkeypatch) -> None:
    from mlflow.tracking import MlflowClient

    from s3.config import Params
    from s3.rl.stage import train_one

    monkeypatch.setenv("S3_MLFLOW", "1")
    save_checkpoint(bicycle, root / "models" / "bicycle")
    tiny = {
        **TINY,
        "max_env_steps": 64 * 8 * 2,
        "chunk_iterations": 2,
        "env": {"num_envs": 64},
        "ppo": {**TINY["ppo"], "num_steps_per_env": 8},
    }
    params = Params.model_validate(
        {"train": {**tiny, "seeds": 1}, "policies_in_models": {"oracle": {"model": "bicycle"}}}
    )
    summary = train_one("oracle", params, root / "models", root / "policies", root / "plots", root / "metrics")
    meta = json.loads((root / "policies" / "oracle" / "policy.json").read_text())
    assert summary["policy"] == "oracle" and summary["family"] == "bicycle" and meta["obs"]["surface_label"]
    run = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}").get_run(summary["mlflow_run_id"])
    assert (
        run.info.run_name == "oracle"
        and run.data.tags["s3.family"] == "oracle"
        and run.data.tags["s3.kind"] == "family"
    )
    assert run.info.status == "FINISHED" and run.data.params["family"] == "bicycle"
    assert {"train/Train/mean_reward", "train/train.wall_s"} <= set(
        run.data.metrics
    )  # the PPO curve and the stage's summary, one run
    assert json.loads((root / "metrics" / "oracle.json").read_text())["policy"] == "oracle"


def test_switched_off_training_makes_no_mlflow_client_and_no_file(bicycle, tmp_path, monkeypatch, capsys) -> None:
    """S3_MLFLOW=0: the train stage (run lookup, PPO, validation, summary) never makes an MlflowClient
    and writes no MLflow file. Switched on, the same patched client is reached."""
    from mlflow.tracking import MlflowClient

    from s3 import tracking
    from s3.config import Params
    from s3.rl.stage import train_one

    made: list[int] = []

    def no_client(*args, **kwargs) -> None:
        made.append(1)
        raise RuntimeError("an MlflowClient was made")

    monkeypatch.setattr(MlflowClient, "__init__", no_client)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("S3_MLFLOW", "0")
    save_checkpoint(bicycle, tmp_path / "models" / "bicycle")
    tiny = {
        **TINY,
        "max_env_steps": 64 * 8 * 2,
        "chunk_iterations": 2,
        "env": {"num_envs": 64},
        "ppo": {**TINY["ppo"], "num_steps_per_env": 8},
    }
    summary = train_one(
        "bicycle", Params.model_validate({"train": {**tiny, "seeds": 1}}), "models", "policies", "plots", "metrics"
    )
    assert summary["mlflow_run_id"] is None and (tmp_path / "policies" / "bicycle" / "policy.json").exists()
    assert made == [] and "MLflow" not in capsys.readouterr().err
    assert not [p for p in tmp_path.rglob("*") if p.name in ("mlflow.db", "mlruns", "mlartifacts")]
    monkeypatch.setenv("S3_MLFLOW", "1")
    assert tracking.family_run_safely("bicycle") is None and made == [
        1
    ]  # on, the stage's first MLflow step reaches the client


def _onnx_policy(path):
    """policy.onnx as a numpy callable, read with onnx's reference evaluator only: no s3 class, no
    torch, no rsl_rl (a GRU's state starts at zeros of the shape the model's metadata gives)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(str(path))
    assert {o.domain for o in model.opset_import} <= {"", "ai.onnx"}  # standard operators only
    props = {p.key: p.value for p in model.metadata_props}
    run = ReferenceEvaluator(model)
    names = [i.name for i in model.graph.input]
    state: dict = {}

    def act(obs):
        if names == ["obs"]:
            return run.run(None, {"obs": obs})[0]
        if "h" not in state or state["h"].shape[1] != obs.shape[0]:
            layers, _, hidden = json.loads(props["s3.state_shape"])
            state["h"] = np.zeros((layers, obs.shape[0], hidden), np.float32)
        cmd, state["h"] = run.run(None, {"obs": obs, "h": state["h"]})
        return cmd

    return act


@pytest.mark.parametrize(("kind", "steer_full_speed"), [("mlp", 0.0), ("mlp", 6.0), ("gru", 6.0)])
def test_exported_policy_reproduces_the_in_memory_policy(
    bicycle, tracks, tmp_path, kind: str, steer_full_speed: float
) -> None:
    """policy.onnx, run without s3, gives the in-memory actor's commands (normaliser, mean action, clip,
    command map with speed-sensitive steering, and a GRU's state carried over steps); the export is
    byte-stable (the same weights twice, in one process, give the same bytes)."""
    env_params = EnvParams(num_envs=16, surface_label=kind == "gru", steer_full_speed=steer_full_speed)
    env = DistilledEnv(bicycle, tracks, env_params, seed=0)
    ppo = PPOParams(
        policy=kind,
        actor_hidden=[32, 32],
        critic_hidden=[32],
        rnn_hidden=16,
        num_steps_per_env=8,
        learning_epochs=1,
        mini_batches=1,
    )
    trainer = PPOTrainer(env, ppo, "cpu")
    trainer.iterate(2)  # moves the weights and the observation normaliser away from their init
    actor = trainer.actor
    actor.eval()
    assert float(actor.obs_normalizer.count) > 0
    meta = {
        "obs": env.layout.to_json(),
        "policy": {"recurrent": kind == "gru", "num_actions": 2, "actor_cfg": trainer.cfg["actor"]},
        "params": {"env": env_params.model_dump()},
        "train": {"env_steps": 64, "wall_s": 12.5, "ppo_steps_per_s": 900},
        "mlflow_run_id": "0123abcd",
    }
    write_policy(tmp_path / "a", actor, trainer.alg.critic, meta)
    write_policy(tmp_path / "b", actor, trainer.alg.critic, meta)
    for name in (WEIGHTS, EXPORT, "policy.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    saved = json.loads((tmp_path / "a" / "policy.json").read_text())
    assert saved["policy"]["export"]["file"] == EXPORT
    assert "mlflow_run_id" not in saved and saved["train"] == {
        "env_steps": 64
    }  # the run's clock and id: records/train only
    assert saved["policy"]["export"]["inputs"] == (["obs", "h"] if kind == "gru" else ["obs"])
    exported = _onnx_policy(tmp_path / "a" / EXPORT)
    rebuilt, _ = load_actor(tmp_path / "a")
    deployed = load_policy_fn(tmp_path / "a")[
        0
    ]  # what evaluation drives: rebuilt from the weights, map from policy.json
    actor.reset()
    rebuilt.reset()
    obs = env.reset()["policy"]
    assert steer_full_speed == 0.0 or bool((obs[:, 0] > 1.5 * steer_full_speed).any())  # the map scales some cars
    for _ in range(5):  # a few steps, so a GRU's state matters
        with torch.inference_mode():
            td = TensorDict({"policy": obs}, batch_size=[obs.shape[0]])
            mem = policy_to_command(actor(td), obs[:, 0], steer_full_speed)
            again = policy_to_command(rebuilt(td), obs[:, 0], steer_full_speed)
            dep = deployed(obs)
        out = torch.from_numpy(exported(obs.numpy()))
        assert (
            torch.allclose(out, mem, atol=1e-5)
            and torch.allclose(again, mem, atol=1e-5)
            and torch.allclose(dep, mem, atol=1e-5)
        )
        assert ((out[:, 1:] >= 0) & (out[:, 1:] <= 1)).all() and (out[:, 0].abs() <= 1).all()
        obs = env.step(out)[0]["policy"]
    assert exported(obs[:3].numpy()).shape == (3, 3)  # any batch size
    assert isinstance(deployable(actor), torch.nn.Module)


def test_bench_env_reports_throughput(bicycle) -> None:
    params = TrainParams.model_validate({"ppo": {"num_steps_per_env": 4, "learning_epochs": 1, "mini_batches": 1}})
    out = bench_env(
        "bicycle",
        sizes=(16, 32),
        params=params,
        env_seconds=0.1,
        train_iterations=1,
        n_tracks=2,
        model=bicycle,
        source_seconds=0,
    )
    for key in ("env_steps_per_s", "train_steps_per_s", "peak_memory_mb"):
        assert set(out[key]) == {"16", "32"} and all(v > 0 for v in out[key].values())
    for n in ("16", "32"):  # where an iteration's time goes, and one checkpoint's validation
        assert out["iteration_s"][n]["collect"] > 0 and out["iteration_s"][n]["update"] > 0
        assert out["validation_s"][n] > 0 and 0 < out["validation_share"][n] < 1
    assert out["obs_dim"] == 119 and out["device"] == "cpu"
    json.dumps(out)


def test_evaluate_policy_measures_the_transfer_gap(trained) -> None:
    """The source-sim evaluation and the same starts in the policy's own distilled env, and their gap."""
    from s3.config import Params
    from s3.evaluate.params import EvaluateParams
    from s3.evaluate.policy_eval import evaluate_policy

    root = trained["root"]
    ep = EvaluateParams(
        tracks=["road_course"],
        conditions=["nominal", "ice"],
        start_fractions=[0.0, 0.5],
        max_lap_seconds=15.0,
        gif=False,
    )
    params = Params().model_copy(update={"evaluate": ep})
    out = evaluate_policy(
        "bicycle", root / "policies" / "bicycle", params, root / "eval" / "bicycle.json", None, root / "models"
    )
    on_disk = json.loads((root / "eval" / "bicycle.json").read_text())
    assert on_disk["transfer_gap"] == out["transfer_gap"] and set(out["transfer_gap"]) == {"nominal", "ice"}
    for cond in ("nominal", "ice"):
        dist = out["distilled"]["suite"][cond]
        assert dist["runs"] == 2 and dist["seeds"] == 1
        gap = out["transfer_gap"][cond]["lap_share"]
        src = out["summary"]["suite"][cond]["lap_share"]["estimate"]
        assert gap["source"] == src and gap["distilled"] == dist["lap_share"]["estimate"]
        assert gap["gap"] == pytest.approx(src - gap["distilled"])
        assert 0.0 < gap["distilled"] < 0.2  # 15 s from 5 m/s on 2.8 km: the car moved, at a sane speed
    probes = on_disk["probes"]
    assert probes["summary"]["manoeuvres"] == 8 and 0 <= probes["summary"]["slides_agreed"] <= 8
    assert all(0.0 <= row["pos_err_3s"] < 100.0 for row in probes["manoeuvres"].values())
