"""The asymmetric critic (env.critic_surface): in training the critic reads the friction label, the actor never does.

The car model is the `bicycle` fitted on synthetic rollouts (tests/conftest.py); one torch thread, a few cars.
"""

from __future__ import annotations

import torch

from s3.rl.env import DistilledEnv
from s3.rl.loop import PPOTrainer
from s3.rl.params import PPOParams
from s3.rl.ppo import POLICY, PRIVILEGED, build_actor
from s3.task.params import EnvParams
from s3.tracks.generate import procedural_track

torch.set_num_threads(1)

PPO = PPOParams(actor_hidden=[16], critic_hidden=[16], num_steps_per_env=4, learning_epochs=1, mini_batches=2)


def _env(model, **kw) -> DistilledEnv:
    return DistilledEnv(model, [procedural_track(0)], EnvParams(num_envs=4, **kw), device="cpu", seed=0)


def _same_start(env: DistilledEnv):
    """Every car on the one track, spread along the lap (on and off its ice), at 5 m/s."""
    s = torch.linspace(0.0, float(env.frame.length()[0]), 5)[:4]
    return env.reset_to(torch.zeros(4, dtype=torch.long), s, torch.zeros(4), 0.0, 5.0)


def test_the_critic_observes_the_label_and_the_actor_does_not(bicycle) -> None:
    blind, labelled = _env(bicycle, critic_surface=True), _env(bicycle, surface_label=True)
    ob, ol = _same_start(blind), _same_start(labelled)
    surface = labelled.layout.groups["surface"]
    assert blind.num_obs == labelled.num_obs - (surface.stop - surface.start)  # the actor's layout stays blind
    assert set(ob.keys()) == {POLICY, PRIVILEGED} and set(ol.keys()) == {POLICY}
    torch.testing.assert_close(ob[PRIVILEGED], ol[POLICY][:, surface])  # the label, as the oracle would see it
    torch.testing.assert_close(ob[POLICY], ol[POLICY][:, : surface.start])
    assert float(ob[PRIVILEGED].min()) < 0.5 < float(ob[PRIVILEGED].max())  # some cars see ice, some do not

    trainer = PPOTrainer(blind, PPO, "cpu")
    assert trainer.alg.actor.obs_dim == blind.num_obs
    assert trainer.alg.critic.obs_dim == blind.num_obs + surface.stop - surface.start
    curve = trainer.iterate(2)
    assert all(torch.isfinite(torch.tensor(v)) for _, _, v in curve)
    # the exported actor is rebuilt from the policy group alone: the label never reaches the driver
    actor = build_actor(blind.num_obs, 2, trainer.cfg["actor"])
    actor.load_state_dict(trainer.alg.actor.state_dict())
    assert actor.obs_dim == blind.num_obs


def test_without_the_switch_both_read_the_policy_group(bicycle) -> None:
    env = _env(bicycle)
    assert set(env.get_observations().keys()) == {POLICY}
    trainer = PPOTrainer(env, PPO, "cpu")
    assert trainer.alg.actor.obs_dim == trainer.alg.critic.obs_dim == env.num_obs
