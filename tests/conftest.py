"""Fixtures shared by the PPO tests (test_train, test_seeds), and the order tests run in."""

from __future__ import annotations

import pytest

from s3.dynamics.bicycle import BicycleModel

from doubles.synthetic_car import fitted_bicycle


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end pipeline (marked e2e, minutes long) first: under `make test`'s two workers
    (pytest-xdist, a file to a worker) it then runs beside the rest of the suite, not after it."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable: the rest keep their order


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
