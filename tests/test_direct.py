"""Tests of the `direct` baseline: the source simulator as a VecEnv (s3.rl.source_env) and PPO in it (s3.rl.direct).

A few cars in two worker processes on two procedural tracks; one torch thread. The workers come
from a forkserver that imports s3 once per test session, so the first env pays that start.
"""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
import torch

from s3.compute.sim_pool import SourceWorkerError
from s3.config import Params
from s3.dynamics.bicycle import BicycleModel
from s3.rl.bench import SOURCE_KEYS, bench_env
from s3.rl.controllers import PurePursuit
from s3.rl.env import DistilledEnv
from s3.rl.params import TrainParams
from s3.rl.source_env import SourceVecEnv
from s3.sim.params import SimParams
from s3.task.params import EnvParams
from s3.task.rules import OFF_TRACK
from s3.tracks.generate import procedural_track

torch.set_num_threads(1)

N = 4


@pytest.fixture(scope="module")
def tracks() -> list:
    return [procedural_track(i) for i in range(2)]


@pytest.fixture(scope="module")
def env(tracks):
    with SourceVecEnv(tracks, SimParams(), EnvParams(), num_envs=N, workers=2, seed=0) as e:
        yield e


def _pure_pursuit(e: SourceVecEnv) -> PurePursuit:
    car = SimParams().mujoco
    return PurePursuit(e.layout, wheelbase=car.wheelbase, max_steer=car.max_steer, max_speed=12.0)


def test_observation_is_the_distilled_layout_and_values(env, tracks) -> None:
    """Same EnvParams -> same layout; from the same start pose the track-side groups agree."""
    dist = DistilledEnv(
        BicycleModel(history=5, dt=0.1, use_mu=False), tracks, EnvParams(num_envs=N), device="cpu", seed=0
    )
    assert env.num_obs == dist.num_obs and env.layout.to_json() == dist.layout.to_json()
    assert env.get_observations()["policy"].shape == (N, dist.num_obs)
    start = (torch.tensor([0, 0, 1, 1]), torch.tensor([10.0, 200.0, 50.0, 300.0]), torch.tensor([0.0, 1.0, -1.0, 0.5]))
    a = env.reset_to(*start)["policy"]
    b = dist.reset_to(*start)["policy"]
    for group in ("track", "preview_xy", "preview_width"):
        sl = env.layout.groups[group]
        assert torch.allclose(a[:, sl], b[:, sl], atol=0.05), group
    assert a[:, env.layout.groups["state"]].abs().max() < 0.05  # at rest, straight


def test_driving_along_the_centerline_earns_positive_reward(env) -> None:
    env.reset_to(torch.tensor([0, 0, 1, 1]), torch.tensor([0.0, 400.0, 100.0, 500.0]), 0.0, 0.0, 8.0)
    driver = _pure_pursuit(env)
    obs, total = env.get_observations()["policy"], torch.zeros(N)
    for _ in range(30):
        td, rew, dones, extras = env.step(driver(obs))
        obs, total = td["policy"], total + rew
        assert not dones.any(), extras["reason"]
    assert (total > 0).all() and (extras["progress"] > 15.0).all()
    assert env.sim_errors == 0


def test_leaving_the_road_terminates_with_a_penalty_and_restarts(env) -> None:
    env.reset_to(torch.tensor([0, 0, 1, 1]), torch.tensor([0.0, 400.0, 100.0, 500.0]), 2.0, 0.6, 10.0)
    steer_out = torch.tensor([[0.0, 0.5, 0.0]]).expand(N, 3)
    ended = torch.zeros(N, dtype=torch.bool)
    for _ in range(40):
        _, rew, dones, extras = env.step(steer_out)
        first = dones & ~ended
        assert (extras["reason"][first] == OFF_TRACK).all()
        assert (rew[first] < -EnvParams().reward.off_track + 2.0).all()
        assert (env.episode_length_buf[first] == 0).all()  # auto-reset
        assert not extras["time_outs"].any()
        ended |= dones
        if ended.all():
            break
    assert ended.all()


def test_a_dead_worker_is_named(tracks) -> None:
    e = SourceVecEnv(tracks, SimParams(), EnvParams(), num_envs=2, workers=2, seed=1)
    try:
        pid = e.workers.procs[1].pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SourceWorkerError, match="worker 1"):
            e.step(torch.zeros(2, 2))
    finally:
        e.close()
    assert e.workers is None


TINY = {
    "progress_bar": False,
    "ppo": {"actor_hidden": [32], "critic_hidden": [32], "learning_epochs": 1, "mini_batches": 1},
    "tracks": {"pool_size": 2, "validation_tracks": 2, "validation_starts": 1},
    "direct": {
        "num_envs": 4,
        "workers": 2,
        "pool_size": 2,
        "num_steps_per_env": 8,
        "chunk_iterations": 2,
        "validation_seconds": 1.0,
    },
}


def test_tiny_train_direct_writes_a_policy_the_evaluator_drives(tmp_path, monkeypatch) -> None:
    from s3.evaluate.policy_driver import policy_factory
    from s3.rl.stage import train_one
    from s3.sim.factory import make_sim

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    # the stage, to its own plateau: 32 env steps per iteration, chunks of 2; any score counts as no gain (delta 1),
    # so one chunk without gain ends it, but not before 192 steps (3 chunks); the cap (10 iterations) is not reached
    records = tmp_path / "metrics"
    end = {"max_env_steps": 320, "plateau_chunks": 1, "plateau_delta": 1.0, "plateau_min_env_steps": 192}
    params = Params.model_validate({"train": {**TINY, **end, "direct": {**TINY["direct"], "budget_s": None}}})
    summary = train_one(
        "direct", params, tmp_path / "models", tmp_path / "policies", tmp_path / "plots", records / "train"
    )
    assert (
        summary["mlflow_run_id"] is None and not (tmp_path / "mlflow.db").exists()
    )  # MLflow is off inside pytest: no run, no database
    saved = json.loads((tmp_path / "metrics" / "train" / "direct.json").read_text())
    assert saved["stopped_by"] == "plateau" and saved["iterations"] == 6 and saved["env_steps"] == 192
    assert saved["budget_s"] is None and saved["over_budget_s"] is None
    assert [p["env_steps"] for p in saved["learning_curve"]] == [64, 128, 192]  # every chunk validated
    assert all(0.0 <= p["val_score"] <= 1.0 for p in saved["learning_curve"])
    for key in (
        "wall_s",
        "budget_s",
        "env_steps",
        "env_steps_per_s",
        "workers",
        "num_envs",
        "iterations",
        "validation",
        "learning_curve",
    ):
        assert key in saved, key
    assert saved["workers"] == 2 and saved["num_envs"] == 4
    assert summary["iterations"] >= 1 and saved["env_steps"] == summary["iterations"] * 4 * 8
    assert saved["learning_curve"] and saved["validation"]["iteration"] is not None
    assert (tmp_path / "plots" / "direct.png").exists()
    folder = tmp_path / "policies" / "direct"
    meta = json.loads((folder / "policy.json").read_text())
    assert meta["family"] == "direct" and meta["params"]["env"] == params.train.env.model_dump(mode="json")
    sim = make_sim(params.sim)
    driver = policy_factory(folder)(sim)
    track = procedural_track(7)
    x, y, yaw = (float(v) for v in track.pose_at(0.0, 0.0))
    state = sim.reset(track, x, y, yaw, 5.0)
    driver.reset(track, state)
    for _ in range(5):
        state = sim.step(driver.act(state, None))  # type: ignore[arg-type]
    assert state.is_finite()


def test_bench_reports_source_and_direct_rates() -> None:
    params = TrainParams.model_validate(
        {
            "ppo": {"num_steps_per_env": 4, "learning_epochs": 1, "mini_batches": 1},
            "direct": {"num_envs": 4, "num_steps_per_env": 4},
        }
    )
    out = bench_env(
        "bicycle",
        sizes=(16,),
        params=params,
        env_seconds=0.1,
        train_iterations=1,
        n_tracks=2,
        model=BicycleModel(history=5, dt=0.1, use_mu=False),
        source_seconds=0.3,
        direct_seconds=0.3,
        direct_workers=2,
    )
    for key in SOURCE_KEYS:
        assert out[key] is not None, key
    assert out["direct_workers"] == 2 and set(out["env_vs_source"]) == set(out["ppo_vs_direct"]) == {"16"}
    # the ratios are the rates they claim to compare (rounded to 2 decimals)
    assert out["env_vs_source"]["16"] == pytest.approx(
        out["env_steps_per_s"]["16"] / out["source_control_steps_per_s"], abs=0.006
    )
    assert out["ppo_vs_direct"]["16"] == pytest.approx(
        out["train_steps_per_s"]["16"] / out["direct_ppo_steps_per_s"], abs=0.006
    )
    # PPO steps include the env steps they collect: no faster than stepping the same env alone
    assert (
        out["direct_ppo_steps_per_s"] <= 1.10 * out["direct_env_steps_per_s"]
    )  # two timings of a shared machine: 10 % slack
    assert out["train_steps_per_s"]["16"] <= 1.05 * out["env_steps_per_s"]["16"]
    json.dumps(out, allow_nan=False)


def test_source_validation_scores_deterministic_episodes(tracks) -> None:
    from s3.rl.ppo import build_actor, model_config
    from s3.rl.source_validation import validate_source

    params = TrainParams.model_validate({k: v for k, v in TINY.items()})
    with SourceVecEnv(tracks, SimParams(), params.env, num_envs=2, workers=1, auto_reset=False) as e:
        actor = build_actor(e.num_obs, 2, model_config(params.ppo, "actor"))
        out = validate_source(actor, e, tracks, params)
        again = validate_source(actor, e, tracks, params)
    assert out["episodes"] == 2 and sum(out["reasons"].values()) == 2 and 0.0 <= out["score"] <= 1.0
    assert out["score"] == pytest.approx(again["score"], abs=1e-6)  # deterministic policy, deterministic sim


def test_direct_keeps_its_checkpoint_by_the_distilled_rule() -> None:
    """The latest validated checkpoint within train.validation_tolerance of the best (kept_index),
    as for the distilled policies; not simply the best."""
    from s3.rl.source_validation import ValidateInSource

    class Trainer:
        loaded: dict | None = None

        def load(self, snap: dict) -> None:
            self.loaded = snap

    choice = ValidateInSource.__new__(ValidateInSource)
    choice.params = Params.model_validate({"train": {**TINY, "validation_tolerance": 0.1}})
    choice.last = {"iteration": 7, "env_steps": 256}
    choice.validated = [
        {"score": s, "iteration": i, "env_steps": 32 * i, "summary": {}, "actor": i}
        for i, s in enumerate([0.5, 0.9, 0.85, 0.2])
    ]
    trainer = Trainer()
    kept = choice.choose(trainer)
    assert kept["iteration"] == 2 and trainer.loaded["actor"] == 2  # 0.85 >= 0.9 - 0.1, and later than the best
    choice.validated = []
    assert choice.choose(Trainer())["iteration"] == 7  # no validation: the last checkpoint


def write_route(records, collect: dict, distill: dict, train: dict, policy: str = "ddm") -> None:
    """The three records a route budget reads, under `records` (records/ in a workspace)."""
    for path, record in (
        ("collect.json", collect),
        (f"distill/{policy}.json", distill),
        (f"train/{policy}.json", train),
    ):
        (records / path).parent.mkdir(parents=True, exist_ok=True)
        (records / path).write_text(json.dumps(record))


def test_the_route_budget_is_the_measured_route_and_names_what_is_missing(tmp_path) -> None:
    from s3.rl.route_budget import RouteNotMeasured, route_budget

    write_route(
        tmp_path, {"wall_seconds_total": 360.0}, {"total_wall_s": 530.5}, {"seed_selection": {"rl_wall_s": 800}}
    )
    got = route_budget(tmp_path, "ddm", "ddm")
    assert got["budget_s"] == 1690.5 and (got["collect_s"], got["distill_s"], got["train_s"]) == (360.0, 530.5, 800.0)
    write_route(tmp_path, {"wall_seconds_this_run": 100.0}, {"total_wall_s": 50.0}, {"train": {"wall_s": 25.0}})
    assert route_budget(tmp_path, "ddm", "ddm")["budget_s"] == 175.0  # a killed collect's run, one seed's record
    (tmp_path / "distill" / "ddm.json").write_text(json.dumps({"total_wall_s": None}))
    with pytest.raises(
        RouteNotMeasured, match=r"distill/ddm.json: no wall clock at total_wall_s \(written by distill@ddm"
    ):
        route_budget(tmp_path, "ddm", "ddm")
    (tmp_path / "distill" / "ddm.json").write_text(json.dumps({"total_wall_s": 50.0}))
    with pytest.raises(RouteNotMeasured, match=r"train/oracle.json: FileNotFoundError.*dvc repro train@oracle"):
        route_budget(tmp_path, "oracle", "ddm")
    with pytest.raises(ValueError, match=r"train.direct.route: 'nope' is not one of the families"):
        Params.model_validate({"train": {"direct": {"route": "nope"}}})
    with pytest.raises(ValueError, match=r"train.direct.route: 'oracle' is not one of the families"):
        Params.model_validate({"train": {"direct": {"route": "oracle"}}})  # its model's record is dytr's
    assert Params.model_validate({"train": {"direct": {"budget_s": 60.0}}}).train.direct.route is None  # fixed


def test_a_skipped_direct_is_recorded_by_train_and_evaluate(tmp_path) -> None:
    """With a BeamNG source `direct` is not trained: train writes the reason, evaluate records it (no policy)."""
    from s3.evaluate.policy_eval import skipped_policy
    from s3.rl.direct import train_direct

    params = Params.model_validate({"sim": {"backend": "beamng"}, "train": TINY})
    summary = train_direct(params, tmp_path / "policies", None, tmp_path / "metrics")
    assert "sim.backend 'mujoco'" in summary["skipped"] and not (tmp_path / "policies/direct/policy.json").exists()
    out = skipped_policy(
        "direct", tmp_path / "policies/direct", tmp_path / "eval/direct.json", tmp_path / "plots/direct"
    )
    assert (
        out
        == {"driver": "direct", "skipped": summary["skipped"]}
        == json.loads((tmp_path / "eval/direct.json").read_text())
    )
    assert (tmp_path / "plots/direct/skipped.txt").read_text().strip() == summary["skipped"]
    assert skipped_policy("ddm", tmp_path / "policies/ddm", tmp_path / "eval/ddm.json", tmp_path / "plots/ddm") is None


def test_direct_with_two_seeds_keeps_both_with_their_checkpoints(tmp_path) -> None:
    """train.direct.seeds 2: two runs one after another on the first seed's validation tracks, each kept with its
    checkpoints under seeds/seed<k>/; the best by validation exported; every seed's time to quality (ttq_routes)."""
    from s3.evaluate.suite import policy_seeds
    from s3.evaluate.ttq_checkpoints import ttq_tracks
    from s3.evaluate.ttq_routes import direct_route, seeds_with_checkpoints
    from s3.rl.checkpoints import DIR, read_index
    from s3.rl.stage import train_one

    direct = {**TINY["direct"], "budget_s": 6.0, "seeds": 2}
    params = Params.model_validate({"train": {**TINY, "seed": 3, "direct": direct}})
    records = tmp_path / "records" / "train"
    train_one("direct", params, tmp_path / "models", tmp_path / "policies", tmp_path / "plots", records)
    saved = json.loads((records / "direct.json").read_text())
    sel = saved["seed_selection"]
    assert [r["seed"] for r in sel["seeds"]] == [3, 4] and sel["selected_seed"] in (3, 4)
    assert sel["rl_wall_s"] == pytest.approx(sum(r["wall_s"] for r in sel["seeds"]), abs=0.11)  # one after another
    assert all(r["budget_s"] == 6.0 and r["learning_curve"] for r in sel["seeds"])  # each with the whole budget
    assert all(r["stopped_by"] == "budget_s" for r in sel["seeds"])
    folder = tmp_path / "policies" / "direct"
    assert [s for s, _ in policy_seeds(folder)] == [3, 4]  # evaluation drives both
    metas = [json.loads((folder / "seeds" / f"seed{s}" / "policy.json").read_text()) for s in (3, 4)]
    assert metas[0]["validation"]["track_seeds"] == metas[1]["validation"]["track_seeds"]  # scores compare
    assert [m["params"]["seed"] for m in metas] == [3, 4]  # different PPO seeds
    best = json.loads((folder / "policy.json").read_text())
    assert best["seed_selection"]["selected_seed"] == sel["selected_seed"] and not (folder / DIR).exists()
    for s in (3, 4):
        assert read_index(folder / "seeds" / f"seed{s}")["checkpoints"], s
    assert (tmp_path / "plots" / "direct.png").exists() and (tmp_path / "plots" / "direct.csv").exists()
    assert seeds_with_checkpoints(tmp_path / "policies", "direct", saved, 3) == [3, 4]
    route = direct_route(params, tmp_path / "policies", tmp_path / "records", ttq_tracks(1), 1, 1, seed=4)
    row = next(r for r in sel["seeds"] if r["seed"] == 4)
    assert route["env_steps_per_s"] == row["env_steps_per_s"] and route["curve"]  # seed 4's own time axis
    assert route["checkpoints"].endswith("seeds/seed4/checkpoints")


def test_a_killed_direct_stage_keeps_its_finished_seeds(tmp_path, monkeypatch) -> None:
    """Killed during its second seed, then re-run after `dvc repro` deleted the output: the first seed is not trained
    again (it waited outside the output), the second is, and both end in the output."""
    import s3.rl.direct_seeds as ds
    from s3.rl.stage import train_one

    direct = {**TINY["direct"], "budget_s": 3.0, "seeds": 2}
    params = Params.model_validate({"train": {**TINY, "seed": 3, "direct": direct}})
    trained: list[int] = []
    real = ds.train_one_seed

    def killed_at_4(one, *a, **k):
        if one.train.seed == 4:
            raise KeyboardInterrupt
        trained.append(one.train.seed)
        return real(one, *a, **k)

    monkeypatch.setattr(ds, "train_one_seed", killed_at_4)
    args = (tmp_path / "models", tmp_path / "policies", tmp_path / "plots", tmp_path / "records")
    with pytest.raises(KeyboardInterrupt):
        train_one("direct", params, *args)
    shutil.rmtree(tmp_path / "policies" / "direct", ignore_errors=True)  # what dvc repro does to the stage's output

    def counted(one, *a, **k):
        trained.append(one.train.seed)
        return real(one, *a, **k)

    monkeypatch.setattr(ds, "train_one_seed", counted)
    saved = train_one("direct", params, *args)
    assert trained == [3, 4]  # seed 3 once, in the killed run
    assert [r["seed"] for r in saved["seed_selection"]["seeds"]] == [3, 4]
    for s in (3, 4):
        assert (tmp_path / "policies" / "direct" / "seeds" / f"seed{s}" / "policy.json").exists()
    assert not (tmp_path / "policies" / ".seeds").exists()  # staging moved into the output


def test_direct_ends_like_the_distilled_runs_unless_given_a_wall_clock() -> None:
    """budget_s none: a step budget from the merged train keys (per_policy.direct's override wins), the plateau rule
    only when there is a validation to read; a budget_s: the wall-clock budget."""
    from s3.rl.direct import end_of
    from s3.rl.loop import StepBudget, WallClockBudget

    train = {
        **TINY,
        "max_env_steps": 1000,
        "plateau_chunks": 3,
        "plateau_min_env_steps": 100,
        "per_policy": {"direct": {"max_env_steps": 3200, "max_minutes": 90.0}},
    }
    params = Params.model_validate({"train": train})
    merged = params.model_copy(update={"train": params.train.for_policy("direct")})
    end = end_of(merged, None, 32)
    assert isinstance(end, StepBudget) and end.max_iterations == 100 and end.max_seconds == 5400.0
    assert (end.chunk, end.plateau_chunks, end.plateau_min_iterations) == (2, 3, 4)  # ceil(100 / 32)
    blind = merged.train.model_copy(update={"direct": merged.train.direct.model_copy(update={"validation": False})})
    assert end_of(merged.model_copy(update={"train": blind}), None, 32).plateau_chunks == 0  # no score to plateau
    clock = end_of(merged, 60.0, 32)
    assert isinstance(clock, WallClockBudget) and clock.budget_s == 60.0 and clock.stopped_by == "budget_s"
