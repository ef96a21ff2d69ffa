"""The driving task is one: the distilled env, the source env and the policy driver agree exactly.

The same cars (poses and states from a distilled env run) go through the three consumers of
s3.task: the distilled env itself, the source env (its simulator workers replaced by a replay of
those states) and one policy driver per car. Observations, rewards and reasons must be identical.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from s3.evaluate.drivers import TrackState
from s3.evaluate.policy_driver import PolicyDriver
from s3.rl import source_env
from s3.rl.controllers import PurePursuit
from s3.rl.env import DistilledEnv
from s3.sim.base import VehicleState
from s3.sim.params import SimParams
from s3.task.params import EndRules, EnvParams, RewardParams
from s3.task.rules import BACKWARDS, OFF_TRACK, STALLED, TIME_OUT, Rules

N, STEPS = 8, 90


class ReplayWorkers:
    """Stands in for the env's pool (s3.compute.sim_pool.SimPool): answers every request with recorded
    states [T, N, 7]."""

    def __init__(self, frames: np.ndarray) -> None:
        self.frames, self.k = frames, 0
        self.bounds = np.array([0, frames.shape[1]])

    def __len__(self) -> int:
        return 1

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return np.zeros(len(ids), dtype=np.int64)

    def call(self, requests: dict) -> dict:
        method, args = requests[0]
        if method == "reset":
            self.k = 0
            return {0: self.frames[0][args[0]]}
        if method == "step":
            self.k += 1
            return {0: (self.frames[self.k].copy(), np.zeros(self.frames.shape[1], dtype=bool))}
        raise AssertionError(method)

    def close(self) -> None:
        pass


def _actions(env: DistilledEnv) -> list[torch.Tensor]:
    """Pure pursuit with perturbations (some cars leave the road, brake to a stop, turn round)."""
    pp, out = PurePursuit(env.layout, max_speed=18.0), []
    bias = torch.tensor([0.0, 0.6, 0.0, -1.0, 0.0, 0.2, 0.0, 1.0])
    lon = torch.tensor([0.0, 0.0, -2.0, -0.5, 0.0, 0.0, 0.3, -0.5])
    obs = env.get_observations()["policy"]
    for k in range(STEPS):
        a = pp(obs)
        a[:, 0] += bias if k > 10 else 0.0
        a[:, 1] += lon
        out.append(a)
        obs = env.step(a)[0]["policy"]
    return out


@pytest.fixture(scope="module")
def run(bicycle, tracks_with_ice):
    careful = RewardParams(lateral_limit=1.0)  # the lateral term on: the source env prices it from its own state
    params = EnvParams(num_envs=N, surface_label=True, stall_seconds=3.0, episode_seconds=8.0, reward=careful)
    start = (
        torch.arange(N) % len(tracks_with_ice),
        30.0 * torch.arange(N),
        torch.linspace(-1.0, 1.0, N),
        torch.linspace(-2.0, 2.0, N),
        0.0,
    )

    def fresh() -> DistilledEnv:
        env = DistilledEnv(bicycle, tracks_with_ice, params, seed=0, auto_reset=False)
        env.reset_to(*start)
        return env

    actions = _actions(fresh())
    env = fresh()
    rec = {
        "obs": [env.obs.clone()],
        "frames": [torch.cat([env.pose, env.hs[:, -1]], 1).clone()],
        "reward": [],
        "reason": [],
        "done": [],
        "lateral": [],
    }
    for a in actions:
        td, rew, done, extras = env.step(a)
        rec["lateral"].append(extras["log"]["reward/lateral"].clone())
        rec["obs"].append(td["policy"].clone())
        rec["frames"].append(torch.cat([env.pose, env.hs[:, -1]], 1).clone())
        rec["reward"].append(rew.clone())
        rec["reason"].append(extras["reason"].clone())
        rec["done"].append(done.clone())
    return params, start, actions, {k: torch.stack(v) for k, v in rec.items()}


@pytest.fixture(scope="module")
def tracks_with_ice():
    from s3.tracks.generate import ProceduralTrackParams, procedural_track

    return [
        procedural_track(seed, ProceduralTrackParams(patch_probability=1.0, patches_min=3, patches_max=5))
        for seed in (3, 4)
    ]


def test_the_run_ends_by_several_rules(run) -> None:
    *_, rec = run
    assert {OFF_TRACK, BACKWARDS, STALLED, TIME_OUT} & set(rec["reason"][rec["done"]].tolist()) >= {OFF_TRACK, STALLED}


def test_source_env_gives_the_distilled_envs_observations_rewards_and_reasons(
    run, tracks_with_ice, monkeypatch
) -> None:
    params, start, actions, rec = run
    frames = rec["frames"].double().numpy()
    monkeypatch.setattr(source_env, "open_sim_pool", lambda *a, **k: ReplayWorkers(frames))
    env = source_env.SourceVecEnv(tracks_with_ice, SimParams(), params, num_envs=N, auto_reset=False)
    obs = env.reset_to(*start)["policy"]
    assert torch.equal(obs, rec["obs"][0])
    for k, a in enumerate(actions):
        td, rew, done, extras = env.step(a)
        assert torch.equal(td["policy"], rec["obs"][k + 1]), k
        assert torch.equal(rew, rec["reward"][k]), k
        assert torch.equal(extras["reason"], rec["reason"][k]) and torch.equal(done, rec["done"][k]), k
    assert (rec["lateral"] < 0).any()  # the replayed run did corner above the limit


def test_policy_driver_gives_the_distilled_envs_observations(run, tracks_with_ice) -> None:
    params, start, actions, rec = run
    frames = rec["frames"].numpy()
    where = TrackState(0.0, 0.0, 0.0, 0.0, 5.0, 5.0, 0, 0.0)  # unused by the policy driver
    for car in range(N):
        replay = iter(a[car : car + 1] for a in actions)  # the env's actions for this car, in order
        drv = PolicyDriver(lambda replay=replay: lambda obs: next(replay), params)
        for k in range(STEPS):
            x, y, yaw, vx, vy, r, steer = (float(v) for v in frames[k, car])
            state = VehicleState(0.1 * k, x, y, yaw, vx, vy, r, steer)
            if k == 0:
                drv.reset(tracks_with_ice[int(start[0][car])], state)
            drv.act(state, where)
            assert np.array_equal(drv._last_obs, rec["obs"][k, car].numpy()), (car, k)


def test_reward_terms_sum_to_the_reward_and_are_zero_for_void_steps() -> None:
    from s3.task.frame import TrackFrame
    from s3.tracks.generate import procedural_track

    frame = TrackFrame([procedural_track(1)], 3)
    ids = torch.arange(3)
    x, y, h = frame.tracks.pose_at(
        torch.zeros(3, dtype=torch.long), torch.tensor([10.0, 20.0, 30.0]), torch.tensor([0.0, 30.0, 0.0])
    )
    frame.place(ids, torch.zeros(3, dtype=torch.long), torch.stack([x, y, h], 1))
    rules = Rules(3, 0.1, EndRules.training(EnvParams()), EnvParams().reward, max_steps=100)
    ds = frame.advance(frame.pose.clone())
    out = rules.judge(
        frame,
        ds + torch.tensor([1.0, 0.0, 0.0]),
        torch.ones(3, 2),
        torch.zeros(3, 2),
        torch.tensor([False, False, True]),
    )
    total = sum(out.terms.values())
    assert torch.allclose(total, out.reward) and out.reward[2] == 0 and all(t[2] == 0 for t in out.terms.values())
    assert out.reason.tolist() == [0, OFF_TRACK, 3] and out.off.tolist() == [False, True, False]
    assert out.terms["off_track"][1] == -EnvParams().reward.off_track and out.terms["action_rate"][0] == pytest.approx(
        -0.04
    )


def test_a_pace_caps_the_progress_a_step_is_paid_for() -> None:
    """reward.pace 10 m/s at dt 0.1: a step pays for at most 1 m of progress; slower steps and losses as before."""
    from s3.task.frame import TrackFrame
    from s3.tracks.generate import procedural_track

    frame = TrackFrame([procedural_track(1)], 3)
    ids = torch.arange(3)
    x, y, h = frame.tracks.pose_at(torch.zeros(3, dtype=torch.long), torch.full((3,), 10.0), torch.zeros(3))
    frame.place(ids, torch.zeros(3, dtype=torch.long), torch.stack([x, y, h], 1))
    ds = torch.tensor([2.5, 0.4, -0.3])  # 25 m/s, 4 m/s, backwards
    still = (torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    paced = EnvParams().reward.model_copy(update={"pace": 10.0})
    out = Rules(3, 0.1, EndRules.training(EnvParams()), paced, max_steps=100).judge(frame, ds, *still)
    assert out.terms["progress"].tolist() == pytest.approx([0.1 * 1.0, 0.1 * 0.4, 0.1 * -0.3])
    free = Rules(3, 0.1, EndRules.training(EnvParams()), EnvParams().reward, max_steps=100).judge(frame, ds, *still)
    assert free.terms["progress"].tolist() == pytest.approx([0.25, 0.04, -0.03])  # pace 0: every metre


def test_a_grip_pace_caps_progress_on_ice_and_not_on_asphalt(tracks_with_ice) -> None:
    """reward.grip_pace 35 at dt 0.1: a step on a patch of friction mu pays for at most 3.5 mu m of progress; on
    asphalt (mu about 1) 25 m/s is paid in full; with `pace` too the lower cap pays."""
    from s3.task.frame import TrackFrame

    track = tracks_with_ice[0]
    patch = track.patches[0]
    s = torch.tensor([0.5 * (patch.s_start + patch.s_end), 0.5 * (patch.s_start + patch.s_end), 0.0])
    d = torch.tensor([0.5 * (patch.d_min + patch.d_max), 0.5 * (patch.d_min + patch.d_max), 0.0])
    frame = TrackFrame([track], 3)
    x, y, h = frame.tracks.pose_at(torch.zeros(3, dtype=torch.long), s, d)
    frame.place(torch.arange(3), torch.zeros(3, dtype=torch.long), torch.stack([x, y, h], 1))
    mu = frame.mu.clone()
    assert mu[0] == pytest.approx(patch.mu) and mu[2] > 0.9  # on the patch, on asphalt
    ds = torch.tensor([2.5, 0.1 * patch.mu, 2.5])  # 25 m/s on ice, 1 mu m/s on ice, 25 m/s on asphalt
    still = (torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    ends = EndRules.training(EnvParams())
    careful = EnvParams().reward.model_copy(update={"grip_pace": 35.0})
    out = Rules(3, 0.1, ends, careful, max_steps=100).judge(frame, ds, *still)
    assert out.terms["progress"].tolist() == pytest.approx([0.1 * 3.5 * patch.mu, 0.1 * 0.1 * patch.mu, 0.25])
    both = careful.model_copy(update={"pace": 10.0})
    out = Rules(3, 0.1, ends, both, max_steps=100).judge(frame, ds, *still)
    assert out.terms["progress"].tolist() == pytest.approx([0.1 * 3.5 * patch.mu, 0.1 * 0.1 * patch.mu, 0.1])


def test_a_lateral_limit_prices_cornering_harder_than_it(bicycle, tracks_with_ice) -> None:
    """reward.lateral_limit 2 m/s^2, weight 0.1: a step at |vx r| = 5 costs 0.3, at 1.5 nothing; off: no term."""
    from s3.task.frame import TrackFrame
    from s3.tracks.generate import procedural_track

    frame = TrackFrame([procedural_track(1)], 3)
    x, y, h = frame.tracks.pose_at(torch.zeros(3, dtype=torch.long), torch.full((3,), 10.0), torch.zeros(3))
    frame.place(torch.arange(3), torch.zeros(3, dtype=torch.long), torch.stack([x, y, h], 1))
    ds, still = torch.full((3,), 0.5), (torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    state = torch.tensor([[10.0, 0.0, 0.5, 0.0], [10.0, 0.3, -0.15, 0.0], [-5.0, 0.0, 0.6, 0.0]])  # vx, vy, r, steer
    careful = EnvParams().reward.model_copy(update={"lateral_limit": 2.0, "lateral": 0.1})
    out = Rules(3, 0.1, EndRules.training(EnvParams()), careful, max_steps=100).judge(frame, ds, *still, state=state)
    assert out.terms["lateral"].tolist() == pytest.approx([-0.3, 0.0, -0.1])
    assert torch.allclose(sum(out.terms.values()), out.reward)
    off = Rules(3, 0.1, EndRules.training(EnvParams()), EnvParams().reward, max_steps=100)
    assert "lateral" not in off.judge(frame, ds, *still, state=state).terms
    env = DistilledEnv(bicycle, tracks_with_ice, EnvParams(num_envs=4, reward=careful), auto_reset=False)
    env.reset_to(torch.tensor([0]), torch.tensor([50.0]), 0.0, 0.0, 15.0)
    log = env.step(torch.tensor([[1.0, 0.5]]).expand(4, 2))[3]["log"]
    assert log["reward/lateral"] < 0  # the env hands the rules its body state: full lock at 15 m/s is priced


def test_runs_are_judged_by_the_judging_rules_inside_the_model(bicycle, tracks_with_ice) -> None:
    """Training ends a turned-round car at once; the judging rules (source and model alike) let it drive on."""
    from s3.rl.controllers import straight_line
    from s3.rl.rollout import run_episodes
    from s3.task.params import JudgeParams

    args = (straight_line(0.0), bicycle, tracks_with_ice, [0], [50.0])  # parked: no progress at all
    assert run_episodes(*args, max_seconds=6.0).reason == ["stalled"]  # training: 5 s without 2 m of progress
    assert run_episodes(*args, max_seconds=6.0, ends=JudgeParams().ends()).reason == ["max_time"]  # judged: 8 s
    env = DistilledEnv(bicycle, tracks_with_ice, EnvParams(num_envs=1), auto_reset=False)
    env.reset_to(torch.tensor([0]), torch.tensor([50.0]), 0.0, 2.0, 3.0)  # facing 2 rad off the road
    assert env.step(torch.tensor([[0.0, 0.2]]))[3]["reason"].item() == BACKWARDS
    env = DistilledEnv(bicycle, tracks_with_ice, EnvParams(num_envs=1), auto_reset=False, ends=JudgeParams().ends())
    env.reset_to(torch.tensor([0]), torch.tensor([50.0]), 0.0, 2.0, 3.0)
    assert env.step(torch.tensor([[0.0, 0.2]]))[3]["reason"].item() == 0
