"""Fixtures shared by the PPO tests (test_train, test_seeds)."""

from __future__ import annotations

import pytest

from s3.dynamics.bicycle import BicycleModel

from doubles.synthetic_car import fitted_bicycle


@pytest.fixture(scope="module")
def bicycle() -> BicycleModel:
    """A bicycle fitted on synthetic rollouts of the known single-track car."""
    return fitted_bicycle()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    """A workspace with its own MLflow database (and the cwd there, so nothing lands in the repo)."""
    root = tmp_path_factory.mktemp("train")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    mp.chdir(root)
    yield root
    mp.undo()
