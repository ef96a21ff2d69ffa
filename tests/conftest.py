"""Fixtures shared by the PPO tests (test_train, test_seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from s3.dynamics.bicycle import BicycleModel, fit_bicycle

from doubles.synthetic_car import generate_rollouts


@pytest.fixture(scope="module")
def bicycle() -> BicycleModel:
    """A bicycle fitted on synthetic rollouts of the known single-track car (as in test_rl_env)."""
    df = generate_rollouts(n_episodes=16, episode_steps=200, seed=1).sort_values(["episode", "step"])
    s = df[["vx", "vy", "yaw_rate", "steer"]].to_numpy(np.float32)
    a = df[["steering_cmd", "throttle_cmd", "brake_cmd"]].to_numpy(np.float32)
    same = df["episode"].to_numpy()[1:] == df["episode"].to_numpy()[:-1]
    fit = fit_bicycle(s[:-1][same], a[:-1][same], s[1:][same], 0.1, df["mu_mean"].to_numpy()[:-1][same] >= 0.5)
    return BicycleModel(history=5, dt=0.1, use_mu=False, fit=fit)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    """A workspace with its own MLflow database (and the cwd there, so nothing lands in the repo)."""
    root = tmp_path_factory.mktemp("train")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    mp.chdir(root)
    yield root
    mp.undo()
