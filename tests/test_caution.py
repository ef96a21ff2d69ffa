"""Caution as an objective (#38): the off-track constraint (train.off_track, s3.rl.caution), a Lagrange
multiplier on the off-track rate, and the grip curriculum (train.tracks.grip_curriculum).

The multiplier's arithmetic on given rates, that the env's reward charges it, a tiny distilled run in
which a strict target raises the penalty it ends with; the curriculum's eased tracks. The car model is
the fitted `bicycle` (tests/conftest.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from pydantic import ValidationError
from test_train import TINY

from s3.rl.caution import OffTrackMultiplier, chunk_rate
from s3.rl.env import DistilledEnv
from s3.rl.params import OffTrackConstraint, TrackPoolParams, TrainParams
from s3.rl.tracks import TrackPool
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


def test_the_grip_curriculum_eases_new_tracks_toward_dry_until_its_end() -> None:
    plain = TrackPool(TrackPoolParams(pool_size=8, refresh_fraction=0.5), seed=3)
    eased = TrackPool(TrackPoolParams(pool_size=8, refresh_fraction=0.5, grip_curriculum=4), seed=3)
    icy = [i for i, t in enumerate(plain.tracks) if t.patches]
    assert icy and eased.severity == 0.0
    for i in icy:  # the same tracks and patches, drawn by the same generator: only their grip differs
        assert [p.s_start for p in eased.tracks[i].patches] == [p.s_start for p in plain.tracks[i].patches]
        assert all(p.mu == 1.0 for p in eased.tracks[i].patches) and min(p.mu for p in plain.tracks[i].patches) < 0.5
    for n in (1, 2, 3, 4, 5):
        new_plain, new_eased = plain.refresh(), eased.refresh()
        assert new_plain == new_eased and eased.severity == min(1.0, n / 4)
        for i in new_plain:
            for a, b in zip(plain.tracks[i].patches, eased.tracks[i].patches, strict=True):
                assert b.mu == pytest.approx(1.0 + (a.mu - 1.0) * min(1.0, n / 4))
    assert [t.name for t in eased.validation_tracks()] == [t.name for t in plain.validation_tracks()]
    assert eased.validation_tracks()[0].patches == plain.validation_tracks()[0].patches  # never eased
    with pytest.raises(ValidationError, match="grip_curriculum"):
        TrackPoolParams(grip_curriculum=4, refresh_fraction=0.0)
