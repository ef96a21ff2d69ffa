"""Tests of the distilled RL environment (s3.rl.env), its observation, rollouts and track pools.

The car model is a `bicycle` fitted by least squares on synthetic rollouts of the known
single-track car (tests/doubles/synthetic_car.py); one torch thread, a few cars.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from s3.dynamics.base import DynamicsModel
from s3.rl.controllers import PurePursuit, straight_line
from s3.rl.env import DistilledEnv
from s3.rl.params import TrackPoolParams, TrainParams
from s3.rl.rollout import EpisodeBatch, drive_lap, run_episodes
from s3.rl.tracks import VALIDATION_SEED_BASE, TrackPool, circuit_track, dry_runs, mirrored, start_grid
from s3.task.actions import command_to_policy, policy_to_command
from s3.task.layout import obs_layout
from s3.task.observation import Observer
from s3.task.params import EnvParams
from s3.task.rules import BACKWARDS, MODEL_INVALID, OFF_TRACK, STALLED, TIME_OUT
from s3.tracks.generate import procedural_track
from s3.tracks.track import FrictionPatch, Track

torch.set_num_threads(1)

N = 8


@pytest.fixture(scope="module")
def tracks() -> list:
    return [procedural_track(i) for i in range(3)]


def make_env(model: DynamicsModel, tracks: list, n: int = N, **kw) -> DistilledEnv:
    return DistilledEnv(model, tracks, EnvParams(num_envs=n, **kw), device="cpu", seed=0)


class NaNModel(DynamicsModel):
    """Wraps a model; rows in `bad` come out NaN, rows in `fast` at an absurd speed."""

    family = "nan_test"

    def __init__(self, inner: DynamicsModel, bad: list[int], fast: list[int]) -> None:
        super().__init__(inner.history, inner.dt, use_mu=True)
        self.inner, self.bad, self.fast, self.armed = inner, bad, fast, False

    def forward_step(self, hs, ha, a, mu):
        assert mu is not None and torch.isfinite(mu).all()  # the label is fed when the model uses it
        out = self.inner.step(hs, ha, a, None).clone()
        if self.armed:
            out[self.bad] = float("nan")
            out[self.fast, 0] = 500.0
        return out


# ---------------------------------------------------------------------------- shapes and layout
@pytest.mark.parametrize("surface", [False, True])
def test_shapes_dtypes_and_layout(bicycle, tracks, surface: bool) -> None:
    env = make_env(bicycle, tracks, surface_label=surface)
    lay = env.layout
    obs = env.get_observations()["policy"]
    assert obs.shape == (N, lay.dim) == (N, env.num_obs) and obs.dtype == torch.float32
    expected = 4 + 3 + 7 * 4 + 4 + 4 * 20 + (6 if surface else 0)
    assert lay.dim == expected
    stops = [s.stop for s in lay.groups.values()]
    starts = [s.start for s in lay.groups.values()]
    assert starts[0] == 0 and starts[1:] == stops[:-1]  # contiguous, in order
    js = lay.to_json()
    assert all(len(g["names"]) == g["stop"] - g["start"] for g in js["groups"].values())
    td, rew, dones, extras = env.step(torch.zeros(N, 2))
    assert td.batch_size == torch.Size([N]) and td["policy"].shape == (N, lay.dim)
    assert rew.shape == (N,) and rew.dtype == torch.float32
    assert dones.shape == (N,) and dones.dtype == torch.bool
    assert extras["time_outs"].shape == (N,) and extras["time_outs"].dtype == torch.bool
    assert env.num_actions == 2 and env.max_episode_length == 600 and env.episode_length_buf.shape == (N,)
    if surface:
        mu = td["policy"][:, lay.groups["surface"]]
        assert ((mu > 0) & (mu <= 2)).all()


class MuSpy(DynamicsModel):
    """Records the friction label the env feeds (a model trained with the label)."""

    family = "mu_spy"

    def __init__(self, inner: DynamicsModel) -> None:
        super().__init__(inner.history, inner.dt, use_mu=True)
        self.inner, self.seen = inner, None

    def forward_step(self, hs, ha, a, mu):
        self.seen = mu.clone()
        return self.inner.step(hs, ha, a, None)


def test_friction_under_the_car_comes_from_the_track(bicycle) -> None:
    track = procedural_track(0)
    p = track.patches[0]
    s_mid = (p.s_start + (p.s_end - p.s_start) % track.length / 2) % track.length
    d_mid = float(np.clip((p.d_min + p.d_max) / 2, -2.0, 2.0))
    expect = float(track.friction_at(np.array(track.pose_at(np.array([s_mid]), np.array([d_mid]))[:2]).T)[0])
    spy = MuSpy(bicycle)
    env = DistilledEnv(spy, [track], EnvParams(num_envs=2, surface_label=True), seed=0)
    obs = env.reset_to(
        torch.tensor([0, 0]),
        torch.tensor([s_mid, (s_mid + track.length / 2) % track.length]),
        torch.tensor([d_mid, 0.0]),
        0.0,
        5.0,
    )["policy"]
    assert expect < 0.5 and abs(float(obs[0, env.layout.groups["surface"].start]) - expect) < 1e-5
    env.step(torch.zeros(2, 2))
    assert spy.seen is not None and abs(float(spy.seen[0]) - expect) < 1e-5  # the model got the label at time t


def test_action_maps() -> None:
    a = torch.tensor([[0.3, 0.5], [-2.0, -0.25], [0.0, 3.0]])
    cmd = policy_to_command(a)
    assert torch.allclose(cmd, torch.tensor([[0.3, 0.5, 0.0], [-1.0, 0.0, 0.25], [0.0, 1.0, 0.0]]))
    assert torch.allclose(command_to_policy(cmd), torch.tensor([[0.3, 0.5], [-1.0, -0.25], [0.0, 1.0]]))


def test_speed_sensitive_steering() -> None:
    """Full range up to steer_full_speed, then (v0 / v)^2: the same lateral acceleration at any speed."""
    from s3.task.actions import split_action, steer_range

    vx = torch.tensor([0.0, 6.0, 12.0, 24.0, -24.0, 48.0])
    assert torch.allclose(steer_range(vx, 12.0), torch.tensor([1.0, 1.0, 1.0, 0.25, 0.25, 0.0625]))
    a = torch.tensor([[1.0, 0.5]]).expand(6, 2)
    cmd = policy_to_command(a, vx, 12.0)
    assert torch.allclose(cmd[:, 0], steer_range(vx, 12.0)) and torch.allclose(
        cmd[:, 1:], torch.tensor([0.5, 0.0]).expand(6, 2)
    )
    lat = cmd[2:, 0] * vx[2:].square()  # ~ lateral acceleration asked for at full steer
    assert torch.allclose(lat.abs(), torch.full((4,), 144.0))
    assert torch.equal(policy_to_command(a, vx, 0.0), policy_to_command(a))
    with pytest.raises(ValueError, match="vx"):
        policy_to_command(a, None, 12.0)
    pol, src_cmd = split_action(a.clone(), vx, 12.0)  # what both envs (the source's: `direct`) apply
    assert torch.equal(src_cmd, cmd) and torch.equal(pol, a)


def test_env_steers_with_the_speed_sensitive_map(bicycle, tracks) -> None:
    """A policy action in the env equals the command the map gives at the car's observed speed."""
    env_a, env_b = (make_env(bicycle, tracks, n=3, steer_full_speed=10.0) for _ in range(2))
    starts = (torch.tensor([0, 1, 2]), torch.tensor([10.0, 50.0, 100.0]), 0.0, 0.0, torch.tensor([5.0, 20.0, 30.0]))
    obs = env_a.reset_to(*starts)["policy"]
    env_b.reset_to(*starts)
    a = torch.tensor([[0.8, 0.2], [0.8, 0.2], [-0.8, -0.2]])
    cmd = policy_to_command(a, obs[:, 0], 10.0)
    assert torch.allclose(cmd[:, 0], torch.tensor([0.8, 0.2, -0.8 / 9.0]))
    o_a = env_a.step(a)[0]["policy"]
    o_b = env_b.step(cmd)[0]["policy"]
    assert torch.allclose(o_a, o_b)
    assert torch.allclose(o_a[:, env_a.layout.groups["command"]], cmd)


def test_reset_state_history_and_observation(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=3)
    obs = env.reset_to(
        torch.tensor([0, 1, 2]), torch.tensor([10.0, 50.0, 100.0]), 0.0, 0.0, torch.tensor([0.0, 8.0, 15.0])
    )["policy"]
    g = env.layout.groups
    assert torch.allclose(obs[:, g["state"]][:, 0], torch.tensor([0.0, 8.0, 15.0]))
    assert torch.allclose(obs[:, g["state"]][:, 1:], torch.zeros(3, 3))
    hold = env.hold_throttle(torch.tensor([0.0, 8.0, 15.0]))
    assert hold[0] == 0 and (hold[1:] > 0).all() and (hold <= 1).all()
    assert torch.allclose(obs[:, g["command"]], torch.stack([torch.zeros(3), hold, torch.zeros(3)], 1))
    # the history is the initial (state, command) repeated: a steady state
    hist = obs[:, g["history"]].reshape(3, -1, 7)
    now = torch.cat([obs[:, g["state"]], obs[:, g["command"]]], 1)
    assert torch.allclose(hist, now[:, None].expand_as(hist))
    assert torch.allclose(env.hs, env.hs[:, -1:].expand_as(env.hs)) and torch.allclose(
        env.ha, env.ha[:, -1:].expand_as(env.ha)
    )
    tr = obs[:, g["track"]]
    assert tr[:, 0].abs().max() < 0.05 and tr[:, 1].abs().max() < 0.02 and (tr[:, 2:] > 0).all()
    first = obs[:, g["preview_xy"]].reshape(3, -1, 2)
    assert (first[:, 0, 0] - 5.0).abs().max() < 0.5 and first[:, 0, 1].abs().max() < 1.0  # ~5 m straight ahead
    assert (first[:, 1:, 0] > first[:, :-1, 0] - 5.0).all()
    # holding the tabulated throttle keeps the speed (that is what makes the window a steady state)
    cmd = torch.stack([torch.zeros(3), hold, torch.zeros(3)], 1)
    env.step(cmd)
    assert torch.allclose(env.hs[:, -1, 0], torch.tensor([0.0, 8.0, 15.0]), atol=0.15)


def test_projection_matches_trackbatch(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=64)
    g = torch.Generator().manual_seed(3)
    tb = env.tracks
    ti = torch.randint(0, len(tb), (64,), generator=g)
    s = torch.rand(64, generator=g) * tb.length[ti]
    d = (torch.rand(64, generator=g) - 0.5) * 8.0
    x, y, h = tb.pose_at(ti, s, d)
    xy = torch.stack([x, y], 1)
    hint = torch.minimum(
        (s * tb.count[ti] / tb.length[ti]).long() + torch.randint(-3, 4, (64,), generator=g), tb.count[ti] - 1
    ).clamp(min=0)
    yaw = h + 0.3
    ours = env.frame.project(xy, ti, hint, yaw)
    ref = tb.project(xy, ti, hint=hint, window=env.params.projection_window, yaw=yaw)
    for name in ("s", "d", "heading", "heading_error", "w_left", "w_right"):
        assert torch.allclose(getattr(ours, name), getattr(ref, name), atol=1e-4), name
    assert torch.equal(ours.segment, ref.segment)
    assert torch.allclose(ours.d, d, atol=0.05)


# ---------------------------------------------------------------------------- dynamics of an episode
def test_reward_positive_forward_and_backwards_terminates(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=2)
    env.auto_reset = False
    env.reset_to(torch.tensor([0, 0]), torch.tensor([20.0, 20.0]), 0.0, torch.tensor([0.0, math.pi]), 10.0)
    _, rew, dones, extras = env.step(torch.tensor([[0.0, 0.3], [0.0, 0.3]]))
    assert rew[0] > 0 and extras["progress"][0] > 0.5 and not dones[0]  # forward along the centerline
    assert rew[1] < 0 and extras["progress"][1] < 0 and dones[1]  # driving the wrong way
    assert extras["reason"][1] == BACKWARDS and not extras["time_outs"][1]


def test_progress_reward_sums_to_distance(bicycle, tracks) -> None:
    env = DistilledEnv(
        bicycle,
        tracks,
        EnvParams(num_envs=4).model_copy(update={"reward": EnvParams().reward.model_copy(update={"action_rate": 0.0})}),
        seed=1,
    )
    env.auto_reset = False
    env.reset_to(torch.arange(4) % 3, torch.zeros(4), 0.0, 0.0, 5.0)
    pp, total = PurePursuit(env.layout), torch.zeros(4)
    obs = env.get_observations()["policy"]
    for _ in range(30):
        td, rew, dones, _ = env.step(pp(obs))
        obs, total = td["policy"], total + rew
        assert not dones.any()
    assert torch.allclose(total, env.params.reward.progress * env.progress, atol=1e-3)
    assert (env.progress > 15.0).all()


def test_leaving_the_track_terminates_with_penalty(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=2)
    env.auto_reset = False
    env.reset_to(torch.tensor([1, 1]), torch.tensor([0.0, 0.0]), 0.0, torch.tensor([0.0, 1.2]), 10.0)
    act = torch.tensor([[0.0, 0.2], [0.0, 0.2]])
    for _ in range(30):
        _, rew, dones, extras = env.step(act)
        if dones[1]:
            break
    assert dones[1] and extras["reason"][1] == OFF_TRACK and rew[1] < -1.0
    assert not extras["time_outs"][1]
    d = env.track_feats[1, 0]
    assert d > env.track_feats[1, 2] or -d > env.track_feats[1, 3]  # really beyond an edge


def test_time_limit_is_a_time_out(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=4, episode_seconds=0.5)
    env.reset_to(torch.arange(4) % 3, torch.zeros(4), 0.0, 0.0, 5.0)
    pp = PurePursuit(env.layout)
    obs = env.get_observations()["policy"]
    for _ in range(5):
        td, _, dones, extras = env.step(pp(obs))
        obs = td["policy"]
    assert dones.all() and extras["time_outs"].all() and (extras["reason"] == TIME_OUT).all()
    assert (env.episode_length_buf == 0).all()  # auto-reset


def test_a_parked_car_is_stalled(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=2, stall_seconds=3.0)
    env.auto_reset = False
    env.reset_to(torch.tensor([0, 0]), torch.tensor([10.0, 10.0]), 0.0, 0.0, 0.0)
    act = torch.tensor([[0.0, -1.0], [0.0, 1.0]])  # car 0 stands on the brake, car 1 drives off
    for k in range(30):
        _, rew, dones, extras = env.step(act)
        if k < 29:
            assert not dones.any()
    assert dones.tolist() == [True, False] and extras["reason"][0] == STALLED and rew[0] < -1.0


def test_auto_reset_touches_only_finished_envs(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=6)
    # cars 1 and 4 start beyond the left edge: they finish on the first step
    env.reset_to(
        torch.zeros(6, dtype=torch.long), torch.full((6,), 30.0), torch.tensor([0.0, 9.0, 0.0, 0.0, 9.0, 0.0]), 0.0, 6.0
    )
    before = env.pose.clone()
    td, _, dones, extras = env.step(torch.tensor([[0.0, 0.3]] * 6))
    assert dones.tolist() == [False, True, False, False, True, False]
    assert (extras["reason"][[1, 4]] == OFF_TRACK).all()
    keep = torch.tensor([0, 2, 3, 5])
    assert (env.episode_length_buf[keep] == 1).all() and (env.episode_length_buf[[1, 4]] == 0).all()
    assert (env.progress[[1, 4]] == 0).all() and (env.progress[keep] > 0).all()
    assert ((env.pose[keep, :2] - before[keep, :2]).norm(dim=1) > 0.3).all()  # the others just drove on
    fresh = env.track_feats[[1, 4]]
    assert (fresh[:, 0].abs() <= 0.5 * torch.maximum(fresh[:, 2], fresh[:, 3]) + 1e-4).all()  # restarted on the road
    assert torch.isfinite(td["policy"]).all()


def test_nan_model_output_terminates_only_those_envs_and_is_counted(bicycle, tracks) -> None:
    model = NaNModel(bicycle, bad=[1, 3], fast=[5])
    env = DistilledEnv(model, tracks, EnvParams(num_envs=7), seed=0)
    env.reset_to(torch.arange(7) % 3, torch.full((7,), 10.0), 0.0, 0.0, 8.0)
    model.armed = True
    td, rew, dones, extras = env.step(torch.tensor([[0.0, 0.3]] * 7))
    assert dones.tolist() == [False, True, False, True, False, True, False]
    assert (extras["reason"][[1, 3, 5]] == MODEL_INVALID).all()
    assert env.invalid_model_steps == 3 and extras["log"]["Env/model_invalid"] == 3
    assert torch.isfinite(td["policy"]).all() and torch.isfinite(rew).all()
    assert (rew[[1, 3, 5]] == 0).all() and (rew[[0, 2, 4, 6]] > 0).all()
    assert torch.isfinite(env.hs).all() and (env.hs[:, -1, 0].abs() < 80).all()
    model.armed = False
    _, _, dones, _ = env.step(torch.tensor([[0.0, 0.3]] * 7))
    assert not dones.any() and env.invalid_model_steps == 3


def test_rollouts_run_under_inference_mode_and_outside(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=4, episode_seconds=0.3)
    with torch.inference_mode():  # as in rsl_rl's rollout
        for _ in range(4):
            env.step(torch.rand(4, 2) * 2 - 1)
    env.reset()  # outside inference mode, after inference-mode steps
    env.set_tracks(tracks[:2])
    assert int(env.track_idx.max()) <= 1
    env.step(torch.zeros(4, 2))


def test_replacing_some_tracks_restarts_only_their_cars(bicycle, tracks) -> None:
    env = make_env(bicycle, tracks, n=6)
    env.reset_to(torch.tensor([0, 1, 2, 0, 1, 2]), torch.full((6,), 15.0), 0.0, 0.0, 8.0)
    for _ in range(3):
        env.step(torch.tensor([[0.0, 0.3]] * 6))
    pose, length = env.pose.clone(), env.episode_length_buf.clone()
    restarted = env.set_tracks([tracks[0], procedural_track(7), tracks[2]], changed=[1])
    assert restarted.tolist() == [False, True, False, False, True, False]
    keep = ~restarted
    assert torch.equal(env.pose[keep], pose[keep]) and (env.episode_length_buf[keep] == length[keep]).all()
    assert (env.episode_length_buf[restarted] == 0).all()
    assert torch.allclose(env.obs[keep], env.observer.compute()[keep])
    _, _, dones, _ = env.step(torch.tensor([[0.0, 0.3]] * 6))
    assert not dones[keep].any() and (env.progress[keep] > 3.0).all()


# ---------------------------------------------------------------------------- driving laps
def test_pure_pursuit_completes_a_lap_in_the_distilled_bicycle(bicycle) -> None:
    track = procedural_track(0)
    lap = drive_lap(PurePursuit(obs_layout(EnvParams())), bicycle, track, EnvParams())
    assert lap.completed and lap.reason == "lap", lap
    assert lap.lap_time is not None and lap.lap_length / 25.0 < lap.lap_time < lap.lap_length / 3.0
    traj = lap.trajectory
    assert len(traj["x"]) == len(traj["t"]) > 10 and np.isfinite(traj["x"]).all()
    assert traj["progress"][-1] >= lap.lap_length - 1e-3
    assert np.abs(traj["d"]).max() < 4.0
    again = drive_lap(PurePursuit(obs_layout(EnvParams())), bicycle, track, EnvParams())
    assert again.lap_time == lap.lap_time  # deterministic


def test_run_episodes_reports_each_car(bicycle, tracks) -> None:
    ti, s = start_grid(tracks, 2)
    out = run_episodes(straight_line(0.6), bicycle, tracks, ti, s, max_seconds=40.0, record=True)
    assert out.completed.shape == (6,) and not out.completed.any()
    assert set(out.reason) <= {"off_track", "backwards", "stalled", "max_time"} and "off_track" in out.reason
    assert out.trajectory is not None and out.trajectory["x"].shape[1] == 6
    assert ((out.completion >= 0) & (out.completion < 1)).all()
    pp = run_episodes(PurePursuit(obs_layout(EnvParams())), bicycle, tracks, ti, s, max_seconds=400.0)
    assert pp.completed.all() and np.isfinite(pp.lap_time).all() and pp.summary()["completion_rate"] == 1.0


def test_the_summary_splits_runs_by_surface() -> None:
    """score_dry / score_ice: the mean share of a lap on the tracks without and with a friction patch."""
    road = procedural_track(0)
    dry = Track("dry", road.centerline, road.w_left, road.w_right)
    icy = Track("icy", road.centerline, road.w_left, road.w_right, [FrictionPatch(0.0, road.length, -9, 9, 0.1)])
    tracks = [dry, icy]
    ti, _ = start_grid(tracks, 2)
    assert dry_runs(tracks, ti).tolist() == [True, True, False, False]
    out = EpisodeBatch(
        completed=np.array([True, False, False, False]),
        lap_time=np.array([80.0, np.nan, np.nan, np.nan]),
        progress=np.array([1000.0, 500.0, 250.0, 0.0]),
        lap_length=np.full(4, 1000.0),
        reason=["lap", "off_track", "off_track", "stalled"],
        steps=np.array([800, 300, 200, 50]),
    )
    summary = out.summary(dry_runs(tracks, ti))
    assert (summary["score_dry"], summary["score_ice"]) == (pytest.approx(0.75), pytest.approx(0.125))
    assert (summary["runs_dry"], summary["runs_ice"]) == (2, 2)
    assert summary["mean_completion"] == pytest.approx(0.4375)
    assert "score_dry" not in out.summary()
    only_dry = out.part(slice(0, 2)).summary(np.ones(2, dtype=bool))
    assert only_dry["score_ice"] is None and only_dry["runs_ice"] == 0 and only_dry["score_dry"] == 0.75


def test_observation_builder_reproduces_the_env_observation(bicycle, tracks) -> None:
    """What the source-simulator evaluation will use: same observation from externally driven cars."""
    params = EnvParams(num_envs=3, surface_label=True)
    env = DistilledEnv(bicycle, tracks, params, seed=0)
    env.auto_reset = False
    obs = env.reset_to(torch.arange(3), torch.tensor([5.0, 40.0, 80.0]), torch.tensor([0.5, -1.0, 0.0]), 0.05, 7.0)[
        "policy"
    ]
    builder = Observer.for_params(tracks, params, num_cars=3)
    builder.start(torch.arange(3), torch.arange(3), env.pose, env.hs[:, -1], env.ha[:, -1])
    assert torch.equal(builder.compute(), obs)
    pp = PurePursuit(env.layout)
    for _ in range(25):
        obs = env.step(pp(obs))[0]["policy"]
        builder.observe(env.pose, env.hs[:, -1], env.ha[:, -1])
        assert torch.equal(builder.compute(), obs)
    assert torch.equal(builder.frame.progress, env.progress) and not builder.frame.off_track(0.0).any()


# ---------------------------------------------------------------------------- pools and params
def test_track_pool_refreshes_and_keeps_validation_held_out() -> None:
    params = TrackPoolParams(pool_size=6, refresh_fraction=0.5, validation_tracks=3, base_mu_min=0.8, base_mu_max=1.1)
    pool = TrackPool(params, seed=4)
    names = [t.name for t in pool.tracks]
    assert len(names) == 6 and all(0.8 <= t.base_mu <= 1.1 for t in pool.tracks)
    replaced = pool.refresh()
    assert len(replaced) == 3 and [t.name for t in pool.tracks] != names
    val = pool.validation_tracks()
    expected = ["circuit_{}", "circuit_{}_mirrored", "procedural_{}"]  # round(0.5 * 3) circuits first
    assert [t.name for t in val] == [n.format(VALIDATION_SEED_BASE + 4000 + i) for i, n in enumerate(expected)]
    train_seeds = {int(t.name.split("_")[1]) for t in pool.tracks}
    assert max(train_seeds) < VALIDATION_SEED_BASE
    assert [t.name for t in TrackPool(params, seed=4).tracks] == names  # reproducible


def test_circuit_tracks_close_and_include_hairpins() -> None:
    t = circuit_track(3)
    assert t.name == "circuit_3" and 800.0 <= t.length <= 3600.0
    assert np.linalg.norm(t.centerline[0] - t.centerline[-1]) < 3.0  # closed: last point next to the first
    r = t.resampled(1.0)
    turn = np.abs(np.convolve(r.curvature, np.ones(60), mode="same")).max()  # rad turned within 60 m
    assert 1.0 / np.abs(r.curvature).max() >= 10.0
    assert np.degrees(turn) > 100.0
    assert circuit_track(3).centerline.tobytes() == t.centerline.tobytes()  # a pure function of the seed
    hairpins = [
        np.degrees(np.abs(np.convolve(circuit_track(k).resampled(1.0).curvature, np.ones(60), mode="same")).max())
        for k in range(6)
    ]
    assert max(hairpins) > 140.0


def test_mirrored_track_turns_the_other_way() -> None:
    t = procedural_track(0)
    m = mirrored(t)
    assert np.isclose(m.length, t.length) and np.allclose(m.curvature, -t.curvature)
    assert np.allclose(m.w_left, t.w_right) and len(m.patches) == len(t.patches)
    xy = t.centerline[::7] + np.array([0.0, 0.0])
    ref = t.project(xy)
    mir = m.project(xy * np.array([1.0, -1.0]))
    assert np.allclose(mir.d, -ref.d, atol=1e-6) and np.allclose(mir.s, ref.s, atol=1e-6)
    assert np.allclose(m.friction_at(xy * np.array([1.0, -1.0])), t.friction_at(xy))


def test_params_forbid_unknown_keys_and_check_bounds() -> None:
    with pytest.raises(ValidationError):
        TrainParams.model_validate({"env": {"num_env": 4}})
    with pytest.raises(ValidationError):
        TrainParams.model_validate({"env": {"init_speed_min": 10, "init_speed_max": 5}})
    with pytest.raises(ValidationError):
        TrainParams.model_validate({"ppo": {"actor_hidden": []}})
    with pytest.raises(ValidationError):
        TrainParams.model_validate({"ppo": {"policy": "lstm"}})
    with pytest.raises(ValidationError):
        TrainParams.model_validate({"tracks": {"procedural": {"patch_mu_min": 0.5, "patch_mu_max": 0.2}}})
    p = TrainParams.model_validate({"env": {"surface_label": True}, "ppo": {"policy": "gru"}})
    assert p.env.surface_label and p.ppo.policy == "gru"
