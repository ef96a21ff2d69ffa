"""Time to quality (s3.evaluate.time_to_quality) and the chunk checkpoints it drives (s3.rl.checkpoints).

A tiny distilled training (3 chunks) and a tiny `direct` run (a few seconds of budget) keep their
checkpoints; the curves are built from them on a one-run hold-out set in the MuJoCo car, and, with the
driving replaced by synthetic lap shares, the time axis, the offsets and the "half the laps" rule are
checked by value. One torch thread; the `bicycle` and `root` fixtures are in conftest.py.
"""

from __future__ import annotations

import json

import pytest
import torch

from s3.config import Params
from s3.dynamics.checkpoint import save_checkpoint
from s3.evaluate import time_to_quality as ttq
from s3.evaluate import ttq_routes
from s3.evaluate.ttq_routes import first_reaching
from s3.rl.checkpoints import DIR, load_checkpoint_actor, load_checkpoint_fn, read_index
from s3.rl.export import load_actor, load_policy_fn
from s3.rl.params import TrainParams
from s3.rl.train import train, train_policy

torch.set_num_threads(1)

TRAIN = {
    "seed": 1,
    "device": "cpu",
    "torch_threads": 1,
    "max_env_steps": 64 * 8 * 6,  # 6 PPO iterations in 3 chunks
    "chunk_iterations": 2,
    "validation_min_speed": 15.0,
    "road_course_check": False,
    "progress_bar": False,
    "env": {"num_envs": 64, "episode_seconds": 10.0},
    "tracks": {"pool_size": 2, "validation_tracks": 1, "validation_starts": 1},
    "ppo": {
        "num_steps_per_env": 8,
        "actor_hidden": [32],
        "critic_hidden": [32],
        "learning_epochs": 1,
        "mini_batches": 1,
    },
}
DIRECT = {
    "progress_bar": False,
    "validation_min_speed": 15.0,
    "ppo": {"actor_hidden": [32], "critic_hidden": [32], "learning_epochs": 1, "mini_batches": 1},
    "tracks": {"pool_size": 2, "validation_tracks": 1, "validation_starts": 1},
    "direct": {
        "num_envs": 4,
        "workers": 2,
        "pool_size": 2,
        "num_steps_per_env": 8,
        "chunk_iterations": 2,
        "validation_seconds": 1.0,
    },
}
COLLECT = {"wall_seconds_total": 20.0, "workers": 2}
DISTILL = {"total_wall_s": 30.0, "rows": 5000}


@pytest.fixture(scope="module")
def runs(bicycle, root) -> dict:
    """A tiny distilled `train` of bicycle and a tiny `direct` run, in one workspace with the metrics time_to_quality
    reads."""
    from s3.rl.direct import train_direct

    save_checkpoint(bicycle, root / "models" / "bicycle")
    summary = train(
        "bicycle",
        root / "models",
        root / "policies",
        root / "plots",
        TrainParams.model_validate(TRAIN),
        root / "metrics" / "train",
    )
    direct = train_direct(
        Params.model_validate({"train": DIRECT}), root / "policies", None, root / "metrics" / "train", budget_s=8.0
    )
    (root / "metrics" / "distill").mkdir(parents=True, exist_ok=True)
    (root / "metrics" / "distill" / "bicycle.json").write_text(json.dumps(DISTILL))
    (root / "metrics" / "collect.json").write_text(json.dumps(COLLECT))
    return {"root": root, "summary": summary, "direct": direct}


def _params(**extra) -> Params:
    return Params.model_validate(
        {"families": {"bicycle": {}}, "train": {"seed": 1, "validation_min_speed": 15.0}, **extra}
    )


def test_a_distilled_run_keeps_every_chunks_actor_and_they_load(runs) -> None:
    root, summary = runs["root"], runs["summary"]
    folder = root / "policies" / "bicycle"
    index = read_index(folder)
    steps = [e["env_steps"] for e in index["checkpoints"]]
    assert steps == [2 * 512, 4 * 512, 6 * 512] and [e["iteration"] for e in index["checkpoints"]] == [1, 3, 5]
    assert all((folder / DIR / e["file"]).stat().st_size > 0 for e in index["checkpoints"])
    # the index is byte-stable (no clocks); the chunks' wall clocks and the PPO throughput are in the stage's metrics
    assert "wall_s" not in json.dumps(index)
    points = summary["checkpoints"]["points"]
    assert [p["env_steps"] for p in points] == steps and points == sorted(points, key=lambda p: p["wall_s"])
    assert summary["checkpoints"]["ppo_steps_per_s"] == summary["train"]["ppo_steps_per_s"] > 0
    assert (
        json.loads((root / "metrics" / "train" / "bicycle.json").read_text())["checkpoints"] == summary["checkpoints"]
    )
    # the kept policy is one of the checkpoints, bit for bit, and deploys the same
    meta = json.loads((folder / "policy.json").read_text())
    kept = next(e for e in index["checkpoints"] if e["iteration"] == meta["validation"]["iteration"])
    actor, _ = load_actor(folder)
    for (k, a), (_, b) in zip(actor.state_dict().items(), load_checkpoint_actor(folder, kept).state_dict().items()):
        assert torch.equal(a, b), k
    obs = torch.randn(3, meta["obs"]["dim"])
    assert torch.equal(load_checkpoint_fn(folder, kept)(obs), load_policy_fn(folder)[0](obs))


def test_only_the_first_seed_keeps_checkpoints(runs, bicycle) -> None:
    """A later seed (validating on the first seed's tracks) keeps none: the curve is the first seed's."""
    folder = runs["root"] / "policies_other_seed" / "bicycle"
    params = TrainParams.model_validate({**TRAIN, "seed": 2, "max_env_steps": 64 * 8 * 2})
    summary = train_policy(bicycle, folder, None, params, "bicycle", validation_seed=1)
    assert (folder / "policy.json").exists() and not (folder / DIR).exists() and "checkpoints" not in summary


def test_direct_keeps_a_checkpoint_per_chunk(runs) -> None:
    root, direct = runs["root"], runs["direct"]
    index = read_index(root / "policies" / "direct")
    assert [e["env_steps"] for e in index["checkpoints"]] == [p["env_steps"] for p in direct["learning_curve"]]
    steps = [e["env_steps"] for e in index["checkpoints"]]
    assert steps == sorted(set(steps)) and steps[-1] == direct["env_steps"]
    obs = torch.zeros(2, index["obs"]["dim"])
    assert load_checkpoint_fn(root / "policies" / "direct", index["checkpoints"][-1])(obs).shape == (2, 3)


def test_the_half_the_laps_rule() -> None:
    def curve(*shares: float) -> list[dict]:
        return [{"env_steps": 100 * (i + 1), "lap_share": s} for i, s in enumerate(shares)]

    assert first_reaching(curve(0.0, 7 / 16, 8 / 16, 1.0))["env_steps"] == 300  # exactly half counts
    assert first_reaching(curve(0.0, 0.75, 0.25, 0.5))["env_steps"] == 200  # the earliest, even if a later one drops
    assert first_reaching(list(reversed(curve(0.0, 0.6, 1.0))))["env_steps"] == 200  # by env steps, whatever the order
    assert first_reaching(curve(0.0, 7 / 16, 0.49)) is None
    assert first_reaching([]) is None
    assert first_reaching(curve(0.2, 0.3), share=0.25)["env_steps"] == 200


def b_rate_is(out: dict, rate: float) -> bool:
    return out["bicycle"]["env_steps_per_s"] == pytest.approx(rate)


def test_times_offsets_and_the_rule_on_synthetic_lap_shares(runs, monkeypatch) -> None:
    """Driving replaced by lap shares chosen per checkpoint: every number of the result checked by value."""
    monkeypatch.setattr(
        ttq_routes, "MIN_SPACING_STEPS", 0
    )  # the tiny runs' checkpoints are a few thousand steps apart: drive them all
    root = runs["root"]
    shares = {"bicycle": [0.25, 0.5, 1.0], "direct": 0.0}

    def drive(folder, entries, tracks, params, starts=2, workers=0):
        s = shares["direct" if folder.name == "direct" else "bicycle"]
        return [
            {"laps": None, "runs": 16, "lap_share": s if isinstance(s, float) else s[i], "completion": 0.5}
            for i in range(len(entries))
        ]

    monkeypatch.setattr(ttq_routes, "drive_checkpoints", drive)
    params = _params(
        policies_in_models={"oracle": {"model": "bicycle"}}
    )  # the oracle has no policy here: reported missing
    out = ttq.time_to_quality(params, root / "policies", root / "metrics", out_path=root / "ttq.json")
    assert json.loads((root / "ttq.json").read_text()) == out
    seeds = runs["summary"]["seed_selection"]["seeds"] if "seed_selection" in runs["summary"] else []
    first = next(
        (r for r in seeds if r["seed"] == 1), None
    )  # train.seed 1: its env steps over its whole training wall clock
    rate = (
        first["env_steps"] / first["wall_s"]
        if first
        else runs["summary"]["train"]["env_steps"] / runs["summary"]["train"]["wall_s"]
    )
    assert b_rate_is(out, rate)
    offset, offset_rt = 20.0 + 30.0, 5000 * 0.1 / 2 + 30.0  # collect + distill; collect rows x dt / workers + distill
    b = out["bicycle"]
    assert (
        b["offset_s"] == offset and b["offset_real_time_s"] == offset_rt and b["model"] == "bicycle" and b["seed"] == 1
    )
    assert [p["t_s"] for p in b["curve"]] == pytest.approx([offset + n / rate for n in (1024, 2048, 3072)])
    assert [p["t_real_time_s"] for p in b["curve"]] == pytest.approx([offset_rt + n / rate for n in (1024, 2048, 3072)])
    assert (
        b["reached"]
        and b["env_steps_to_quality"] == 2048
        and b["t_to_quality_s"] == pytest.approx(offset + 2048 / rate)
    )
    assert b["t_to_quality_real_time_s"] == pytest.approx(offset_rt + 2048 / rate) and b["not_reached_within_s"] is None
    d, dm = out["direct"], runs["direct"]
    assert [p["t_s"] for p in d["curve"]] == pytest.approx(
        [p["env_steps"] / dm["env_steps_per_s"] for p in dm["learning_curve"]]
    )
    assert [p["t_real_time_s"] for p in d["curve"]] == pytest.approx(
        [p["env_steps"] * 0.1 / 2 for p in dm["learning_curve"]]
    )
    assert [p["wall_s"] for p in d["curve"]] == [p["wall_s"] for p in dm["learning_curve"]]
    assert d["offset_s"] == 0.0 and d["budget_s"] == 8.0
    assert (
        d["reached"] is False
        and d["t_to_quality_s"] is None
        and d["t_to_quality_real_time_s"] is None
        and d["not_reached_within_s"] == 8.0
    )
    for route in (b, d):
        ts = [p["t_s"] for p in route["curve"]]
        assert ts == sorted(set(ts))
    assert out["oracle"]["curve"] == [] and "missing" in out["oracle"] and out["oracle"]["t_to_quality_s"] is None
    best = out["distilled_best"]
    assert best["policy"] == "bicycle" and best["t_to_quality_s"] == b["t_to_quality_s"] and best["over"] == ["bicycle"]
    assert out["budget_rule"]["holds"] is False  # 8 s < collect + distill + training
    shares["bicycle"] = [0.0, 0.4, 0.45]
    none = ttq.time_to_quality(params, root / "policies", root / "metrics", out_path=root / "ttq.json")
    assert none["bicycle"]["t_to_quality_s"] is None and none["bicycle"]["not_reached_within_s"] == pytest.approx(
        offset + 3072 / rate
    )
    assert none["distilled_best"]["policy"] is None and none["distilled_best"]["t_to_quality_s"] is None
    assert none["distilled_best"]["not_reached_within_s"] == none["bicycle"]["end_s"]


def test_every_checkpoint_drives_the_same_hold_out_runs(runs, monkeypatch) -> None:
    """The real thing on a one-track, one-start set: each checkpoint's run in the source, the JSON and the figure."""
    monkeypatch.setattr(ttq_routes, "MIN_SPACING_STEPS", 0)
    root = runs["root"]
    out = ttq.time_to_quality(
        _params(),
        root / "policies",
        root / "metrics",
        root / "ttq_real.json",
        root / "plots" / "ttq.png",
        n_tracks=1,
        starts=1,
        workers=1,
    )
    assert out["tracks"]["runs"] == 1 and out["tracks"]["list"][0]["surface"] == "heavy_ice"
    for name in ("bicycle", "direct"):
        curve = out[name]["curve"]
        assert len(curve) == len(read_index(root / "policies" / name)["checkpoints"])
        for p in curve:
            assert (
                p["runs"] == 1 and p["laps"] in (0, 1) and p["lap_share"] == p["laps"] and 0.0 <= p["completion"] <= 1.0
            )
        assert (out[name]["t_to_quality_s"] is None) == all(p["lap_share"] < 0.5 for p in curve)
    assert (root / "plots" / "ttq.png").stat().st_size > 0


@pytest.mark.slow  # ~11 s; the quick pipeline in make test runs the stage
def test_the_command_writes_the_metrics_and_the_figure(runs) -> None:
    """`s3 time-to-quality` in the workspace (the default set: 8 tracks x 2 starts); one line per route."""
    from typer.testing import CliRunner

    from s3.cli import app

    root = runs["root"]
    yaml = root / "ttq_params.yaml"
    yaml.write_text(
        "families: {bicycle: {model: bicycle, distill: [distill.history, distill.horizon, distill.seed]}}\n"
        "policies_in_models: {bicycle: {model: bicycle}}\n"
        "train: {seed: 1, validation_min_speed: 15.0, per_policy: {bicycle: {}, direct: {}}}\n"
    )
    other = CliRunner().invoke(app, ["time-to-quality", "--params", str(yaml), "--set", "sim.backend=beamng"])
    assert other.exit_code == 0, other.output  # not measured, said so, and the report still runs (claim 1: not run)
    assert "sim.backend 'mujoco'" in json.loads((root / "records" / "time_to_quality.json").read_text())["not_run"]
    res = CliRunner().invoke(app, ["time-to-quality", "--params", str(yaml)])
    assert res.exit_code == 0, res.output
    out = json.loads((root / "records" / "time_to_quality.json").read_text())
    assert (
        out["tracks"]["runs"] == 16
        and [t["surface"] for t in out["tracks"]["list"]] == ["heavy_ice", "dry", "dry", "heavy_ice"] * 2
    )
    assert set(out) >= {"direct", "bicycle", "distilled_best", "rule", "budget_rule"} and all(
        p["runs"] == 16 for p in out["direct"]["curve"]
    )
    assert (
        (root / "plots" / "time_to_quality.png").stat().st_size > 0
        and "bicycle:" in res.output
        and "direct:" in res.output
    )


def test_checkpoints_are_driven_at_least_100k_steps_apart() -> None:
    from s3.evaluate.ttq_checkpoints import spaced

    entries = [{"env_steps": n} for n in range(25_000, 400_001, 25_000)]  # direct's pace
    assert [e["env_steps"] for e in spaced(entries)] == [25_000, 125_000, 225_000, 325_000, 400_000]  # the last always
    distilled = [{"env_steps": n} for n in (491_520, 983_040, 1_474_560)]
    assert spaced(distilled) == distilled


def test_the_budget_rule_reads_how_direct_ended(tmp_path) -> None:
    """Trained to its plateau, the rule holds only when the plateau rule ended direct (a cap did not); with a fixed
    wall clock, when the budget covers the slowest measured family route. Every family's route is listed."""
    from s3.report.render import _budget_line

    for path, record in (
        ("collect.json", {"wall_seconds_total": 360.0}),
        ("distill/ddm.json", {"total_wall_s": 530.5}),
        ("train/ddm.json", {"seed_selection": {"rl_wall_s": 800.0}}),
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps(record))
    params = Params()
    ran = {"budget_s": None, "wall_s": 2400.0, "env_steps": 2_048_000}
    plateau = ttq_routes.budget_rule({**ran, "stopped_by": "plateau"}, tmp_path, params)
    assert plateau["holds"] is True and plateau["max_family_route_s"] == 1690.5
    assert plateau["family_route_s"]["ddm"] == 1690.5 and plateau["family_route_s"]["dytr"] is None  # unmeasured
    line = _budget_line(plateau)
    assert "ended by plateau after 2.05 M env steps, 40.0 min" in line and line.endswith(": met")
    assert ttq_routes.budget_rule({**ran, "stopped_by": "max_env_steps"}, tmp_path, params)["holds"] is False
    assert ttq_routes.budget_rule({**ran, "stopped_by": "max_minutes"}, tmp_path, params)["holds"] is False
    assert ttq_routes.budget_rule(ran, tmp_path, params)["holds"] is None  # no record of how it ended
    fixed = {"wall_s": 1000.0, "env_steps": 900_000, "stopped_by": "budget_s"}
    assert ttq_routes.budget_rule({**fixed, "budget_s": 1000.0}, tmp_path, params)["holds"] is False  # < 1690.5
    assert ttq_routes.budget_rule({**fixed, "budget_s": 1700.0}, tmp_path, params)["holds"] is True
    assert "NOT met" in _budget_line(ttq_routes.budget_rule({**fixed, "budget_s": 1000.0}, tmp_path, params))
