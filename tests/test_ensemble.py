"""Ensembles of distilled models (s3.dynamics.ensemble): members that differ, a disagreement that
rises off the data's support and follows the error, one member per car in the distilled env, the
penalty, the checkpoint and the report's calibration figure. Tiny ddm members on the synthetic car."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from s3.dynamics.checkpoint import load_checkpoint
from s3.dynamics.dataset import RolloutDataModule, WindowTensors
from s3.dynamics.distill import distill
from s3.dynamics.ensemble import Ensemble, disagreement
from s3.dynamics.params import DistillParams
from s3.report.inputs import ensemble_records
from s3.rl.env import DistilledEnv
from s3.task.params import EnvParams
from s3.tracks.generate import procedural_track
from s3.viz.distill_plots import plot_calibration

from doubles.synthetic_car import generate_rollouts, write_rollouts

torch.set_num_threads(1)

FAMILY = "ddm"
TINY = {
    "history": 5,
    "horizon": 10,
    "batch_size": 128,
    "train_windows_per_epoch": 1024,
    "val_windows": 256,
    "progress_bar": False,
    "max_epochs": 6,
    "patience": 4,
    "max_minutes": 0.5,
    "lr": 3e-3,
    "test_fraction": 0.2,
    "ddm": {"gru_hidden": 16, "mlp_hidden": 24},
    "throughput_sizes": [1],
    "eval_stride": 10,
}


@pytest.fixture(scope="module")
def distilled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("ens")
    df = generate_rollouts(n_episodes=30, episode_steps=300, seed=3, ice_fraction=0.25, mixed_fraction=0.45)
    write_rollouts(df, root / "rollouts", dt=0.1, episodes_per_shard=10)
    out = {"root": root}
    for members in (1, 3):
        ws = root / f"m{members}"
        p = DistillParams(**{**TINY, "ddm": {**TINY["ddm"], "members": members}})
        out[members] = {
            "metrics": distill(FAMILY, root / "rollouts", ws / "models", ws / "records", ws / "plots", p),
            "model": load_checkpoint(ws / "models" / FAMILY, FAMILY),
            "records": ws / "records",
            "params": p,
        }
    return out


def test_members_differ_and_the_first_is_the_single_model(distilled: dict) -> None:
    single, ens = distilled[1]["model"], distilled[3]["model"]
    assert not isinstance(single, Ensemble) and isinstance(ens, Ensemble) and len(ens) == 3
    assert ens.family == FAMILY and ens.history == single.history
    first = ens.members[0].state_dict()
    for k, v in single.state_dict().items():  # member 0 is trained exactly as the single model
        assert torch.equal(first[k], v), k
    w = [dict(m.named_parameters()) for m in ens.members]
    for i in range(3):
        for j in range(i + 1, 3):
            assert any(not torch.equal(w[i][k], w[j][k]) for k in w[i]), (i, j)
    m = distilled[3]["metrics"]
    assert [t["stopped_by"] for t in m["train"]["members"]] and len(m["train"]["members"]) == 3
    assert m["train"]["wall_s"] == pytest.approx(sum(t["wall_s"] for t in m["train"]["members"]), abs=0.05)
    assert "ensemble" not in distilled[1]["metrics"]


def test_disagreement_rises_off_the_data_and_follows_the_error(distilled: dict) -> None:
    ens, p = distilled[3]["model"], distilled[3]["params"]
    dm = RolloutDataModule(distilled["root"] / "rollouts", p)
    dm.setup()
    b = WindowTensors(dm.data, ens.history, 1).gather(torch.from_numpy(dm.test_index[:512]))
    hs, ha, a, mu = b["hist_states"], b["hist_actions"], b["actions"][:, 0], b["mu"][:, 0]
    with torch.inference_mode():
        on = disagreement(ens.members_step(hs, ha, a, mu), ens.norm.delta_std)
        far = hs * torch.tensor([3.0, 3.0, 3.0, 1.0])  # three times the speeds and yaw rates the car ever drove
        off = disagreement(ens.members_step(far, ha, a, mu), ens.norm.delta_std)
    assert torch.isfinite(on).all() and on.mean() > 0
    assert off.mean() > 2 * on.mean(), (float(on.mean()), float(off.mean()))
    cal = distilled[3]["metrics"]["ensemble"]["calibration"]
    assert cal["all"]["windows"] > 100 and cal["all"]["spearman_rho"] > 0.2, cal["all"]
    assert len(cal["all"]["spread_m"]) == len(cal["all"]["error_m"]) == 10
    # the top decile of spread has a larger error than the bottom one
    assert cal["all"]["error_m"][-1] > cal["all"]["error_m"][0]


def test_an_ensemble_checkpoint_round_trips(distilled: dict, tmp_path) -> None:
    ens = distilled[3]["model"]
    meta = json.loads((distilled["root"] / "m3" / "models" / FAMILY / "model.json").read_text())
    assert meta["ensemble"] == 3 and meta["family"] == FAMILY
    assert "ensemble" not in json.loads((distilled["root"] / "m1" / "models" / FAMILY / "model.json").read_text())
    g = torch.Generator().manual_seed(0)
    hs = torch.randn(16, ens.history, 4, generator=g) + torch.tensor([8.0, 0, 0, 0])
    ha, a, mu = torch.rand(16, ens.history, 3, generator=g), torch.rand(16, 3, generator=g), torch.ones(16)
    with torch.inference_mode():
        preds = ens.members_step(hs, ha, a, mu)
        assert torch.allclose(ens.step(hs, ha, a, mu), preds.mean(0))
        member = torch.tensor([0, 1, 2, 1] * 4)
        assigned = ens.step_assigned(hs, ha, a, mu, member)
        assert torch.allclose(assigned, preds[member, torch.arange(16)])


def test_the_env_drives_each_car_on_a_member_and_charges_the_disagreement(distilled: dict) -> None:
    ens = distilled[3]["model"]
    tracks = [procedural_track(i) for i in range(2)]
    envs = {lam: DistilledEnv(ens, tracks, EnvParams(num_envs=64, disagreement_penalty=lam), seed=0) for lam in (0, 2)}
    member = envs[0].member.clone()
    assert set(member.tolist()) == {0, 1, 2} and torch.equal(member, envs[2].member)  # drawn at reset, per car
    action = torch.tensor([[0.1, 0.5]]).expand(64, -1)
    with torch.inference_mode():
        hs, ha, mu = envs[0].hs.clone(), envs[0].ha.clone(), envs[0].frame.mu.clone()
        preds = ens.members_step(hs, ha, torch.cat([action[:, :1], action[:, 1:], torch.zeros(64, 1)], 1), mu)
    (_, r0, d0, x0), (_, r2, d2, x2) = envs[0].step(action), envs[2].step(action)
    assert torch.equal(d0, d2)
    dis = disagreement(preds, ens.norm.delta_std)
    assert torch.allclose(r0 - r2, 2 * dis, atol=1e-5)  # the same cars, states and members: only the penalty
    assert x2["log"]["Env/disagreement"] == pytest.approx(float(dis.mean()), rel=1e-5)
    assert "Env/disagreement" not in x0["log"]
    assert torch.allclose(envs[0].hs, envs[2].hs, atol=1e-5)  # subsets vs the whole batch: float rounding only


def test_the_report_draws_the_calibration_of_each_ensemble(distilled: dict, tmp_path) -> None:
    found = ensemble_records(distilled[3]["records"])
    assert list(found) == [FAMILY] and found[FAMILY]["members"] == 3
    assert ensemble_records(distilled[1]["records"]) == {}
    png = plot_calibration(tmp_path / "cal.png", found[FAMILY]["calibration"])
    assert png.stat().st_size > 10_000


def test_members_are_a_bounded_setting_of_the_learned_families() -> None:
    assert DistillParams().members(FAMILY) == 1 and DistillParams().members("bicycle") == 1
    with pytest.raises(ValidationError, match="members"):
        DistillParams(ddm={"members": 0})
    with pytest.raises(ValidationError, match="disagreement_penalty"):
        EnvParams(disagreement_penalty=-1)
    assert np.isfinite(DistillParams(dytr={"members": 5}).members("dytr"))
