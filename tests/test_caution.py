"""The off-track constraint (train.off_track, s3.rl.caution): a Lagrange multiplier on the off-track rate.

Its arithmetic on given rates, that the env's reward charges the multiplier, and a tiny distilled run in
which a strict target raises the penalty it ends with. The car model is the fitted `bicycle`
(tests/conftest.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from pydantic import ValidationError
from test_train import TINY

from s3.rl.caution import OffTrackMultiplier, chunk_rate
from s3.rl.env import DistilledEnv
from s3.rl.params import OffTrackConstraint, TrainParams
from s3.rl.train import train_policy
from s3.task.params import EnvParams
from s3.task.rules import OFF_TRACK
from s3.tracks.generate import procedural_track

torch.set_num_threads(1)


def test_the_multiplier_rises_with_violation_and_falls_back_to_the_reward_penalty() -> None:
    m = OffTrackMultiplier(OffTrackConstraint(rate=1e-3, step=2.0, max_penalty=20.0), base=5.0)
    assert m.on and m.value == 5.0
    assert m.update(3e-3) == pytest.approx(9.0)  # 5 + 2 * (3e-3 - 1e-3) / 1e-3
    assert m.update(2e-3) == pytest.approx(11.0)
    assert m.update(0.5e-3) == pytest.approx(10.0)  # under the target: falls by 2 * 0.5
    assert m.update(1.0) == 20.0  # capped
    assert m.update(math.nan) == 20.0  # no rate logged: unchanged
    for _ in range(30):
        m.update(0.0)
    assert m.value == 5.0  # never below the reward's own penalty
    off = OffTrackMultiplier(OffTrackConstraint(), base=5.0)
    assert not off.on and off.update(1.0) == 5.0
    assert chunk_rate([("Env/off_track_rate", 0, 0.1), ("Env/speed", 0, 9.0), ("Env/off_track_rate", 1, 0.3)]) == (
        pytest.approx(0.2)
    )
    with pytest.raises(ValidationError, match="rate"):
        TrainParams.model_validate({"off_track": {"rate": -1.0}})


def test_the_reward_charges_the_multiplier_for_leaving_the_road(bicycle) -> None:
    env = DistilledEnv(bicycle, [procedural_track(0)], EnvParams(num_envs=4), device="cpu", seed=0)
    env.reset_to(torch.arange(4) * 0, torch.zeros(4), torch.tensor([0.0, 0.0, 50.0, 50.0]), 0.0, 5.0)
    env.rules.off_track_weight = 42.0
    _, reward, done, extras = env.step(torch.zeros(4, 2))
    off = extras["reason"] == OFF_TRACK  # the cars placed 50 m off the centerline
    assert off.tolist() == [False, False, True, True] and done[2:].all()
    assert (reward[off] < -41.0).all() and (reward[~off] > -1.0).all()


def test_a_strict_target_raises_the_penalty_a_run_ends_with(bicycle, tmp_path) -> None:
    params = TrainParams.model_validate({**TINY, "off_track": {"rate": 1e-6, "step": 0.001, "max_penalty": 60.0}})
    train_policy(bicycle, tmp_path / "p", None, params, "bicycle")
    meta = json.loads((tmp_path / "p" / "policy.json").read_text())
    # 3 chunks of random-ish early driving leave the road far more often than once per million steps
    assert params.env.reward.off_track < meta["train"]["off_track_penalty"] <= 60.0
    free = TrainParams.model_validate(TINY)
    assert free.off_track.rate == 0.0  # off by default: the penalty stays the reward's
