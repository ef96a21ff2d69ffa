"""A trained policy (or any obs -> action callable) as a source-simulator `Driver`.

The driver is a one-car client of the task's observation builder (s3.task.observation.Observer):
the observation is computed by the code the distilled env uses, from the state the source
simulator reports, on the track resampled at the policy's `track_ds` with its projection window.
At a reset the history holds the start state beside the command (0, 0, 0), as in every
source-simulator client (the source has no steady-speed throttle table).

    driver = PolicyDriver(make_policy, env_params)           # make_policy() -> fresh obs -> action callable
    factory = policy_factory("policies/dytr")                 # a DriverFactory for evaluate_driver
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.compute.files import Files, pack, unpacked
from s3.evaluate.drivers import DriverFactory, TrackState
from s3.sim.base import Control, SourceSim, VehicleState
from s3.task.observation import Observer
from s3.task.params import EnvParams
from s3.tracks.track import Track

Policy = Callable[[torch.Tensor], torch.Tensor]
_ONE = torch.zeros(1, dtype=torch.long)


def _tensors(state: VehicleState) -> tuple[torch.Tensor, torch.Tensor]:
    """pose [1, 3] and (vx, vy, yaw_rate, steer) [1, 4] of one car."""
    pose = torch.tensor([[state.x, state.y, state.yaw]], dtype=torch.float32)
    return pose, torch.tensor([[state.vx, state.vy, state.yaw_rate, state.steer]], dtype=torch.float32)


class PolicyDriver:
    """Runs `make_policy()`'s callable on observations built from source-simulator states."""

    def __init__(self, make_policy: Callable[[], Policy], env_params: EnvParams) -> None:
        self.make_policy = make_policy
        self.params = env_params
        self._observers: dict[int, tuple[Track, Observer]] = {}
        self.observer: Observer | None = None
        self._policy: Policy | None = None
        self._last_cmd = torch.zeros(1, 3)
        self._first = True
        self._last_obs: np.ndarray | None = None

    def reset(self, track: Track, state: VehicleState) -> None:
        key = id(track)
        if key not in self._observers or self._observers[key][0] is not track:
            self._observers[key] = (track, Observer.for_params([track], self.params, 1))
        self.observer = self._observers[key][1]
        self._policy = self.make_policy()
        pose, st = _tensors(state)
        self._last_cmd = torch.zeros(1, 3)
        self.observer.start(_ONE, _ONE, pose, st, self._last_cmd)
        self._first = True

    def observation(self, state: VehicleState) -> np.ndarray:
        """The flat observation [D] for `state` (the car has moved one period, unless just reset)."""
        assert self.observer is not None, "reset() first"
        if not self._first:
            pose, st = _tensors(state)
            self.observer.observe(pose, st, self._last_cmd)
        self._first = False
        return self.observer.compute()[0].numpy()

    @torch.inference_mode()
    def act(self, state: VehicleState, where: TrackState) -> Control:
        assert self._policy is not None, "reset() first"
        self._last_obs = self.observation(state)
        obs = torch.as_tensor(self._last_obs)[None]
        out = self._policy(obs).detach().cpu().numpy().reshape(-1).astype(np.float64)
        if not np.isfinite(out).all():  # a broken policy file: never send NaN to a simulator
            raise ValueError(
                f"the policy's action is not finite ({out.tolist()}): its weights or normalizer are broken"
            )
        if len(out) == 2:
            a = np.clip(out, -1.0, 1.0)
            cmd = np.array([a[0], max(a[1], 0.0), max(-a[1], 0.0)])
        else:
            cmd = np.array([np.clip(out[0], -1, 1), np.clip(out[1], 0, 1), np.clip(out[2], 0, 1)])
        self._last_cmd = torch.as_tensor(cmd, dtype=torch.float32)[None]
        return Control(float(cmd[0]), float(cmd[1]), float(cmd[2]))


class PolicyFactory:
    """A DriverFactory for the exported policy in `folder` (policies/<name>/); picklable, loads on first use.

    Refuses a simulator whose control period differs from the one the policy was trained at.
    `shipped()` is the same factory carrying the policy's files, for a worker that cannot read
    `folder` (s3.compute: a Ray node); `folder` then only names it.
    """

    def __init__(self, folder: str | Path, device: str = "cpu", files: Files | None = None) -> None:
        self.folder, self.device, self.files = str(folder), device, files
        self._loaded: tuple[Any, dict[str, Any], EnvParams] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "device": self.device, "files": self.files, "_loaded": None}

    def shipped(self) -> PolicyFactory:
        from s3.rl.export import META, WEIGHTS

        return PolicyFactory(self.folder, self.device, pack(self.folder, [META, WEIGHTS]))

    def __call__(self, sim: SourceSim) -> PolicyDriver:
        from s3.rl.export import as_callable, load_deployed, policy_env_params

        if self._loaded is None:
            if self.files is None:
                module, meta = load_deployed(self.folder, self.device)
            else:
                with unpacked(self.files) as folder:
                    module, meta = load_deployed(folder, self.device)
            self._loaded = (module, meta, policy_env_params(meta))
        module, meta, env_params = self._loaded
        if abs(float(meta["dt"]) - sim.control_dt) > 1e-9:
            raise ValueError(f"{self.folder}: policy trained at dt={meta['dt']} s, simulator steps {sim.control_dt} s")
        recurrent = bool(meta["policy"]["recurrent"])
        return PolicyDriver(lambda: as_callable(module, recurrent), env_params)


def policy_factory(folder: str | Path, device: str = "cpu") -> DriverFactory:
    """A DriverFactory for an exported policy in `folder` (policies/<family>/)."""
    return PolicyFactory(folder, device)
