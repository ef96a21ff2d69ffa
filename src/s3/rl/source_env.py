"""The source simulator as an rsl_rl `VecEnv`: N cars stepped in W worker processes.

`SourceVecEnv` is the environment of the `direct` baseline (s3.rl.direct). The task is the
distilled env's, from the same code (s3.task), so that the two trainings differ only in the
simulator: the observation (`Observer`, fed the poses, states and commands the source simulator
reports), reward and terminations (`Rules` with the env params' training thresholds), the start
distribution (`sample_starts`) and auto-reset.
Differences, all forced by the source simulator:
- a simulator failure (SimulatorError, non-finite or absurd state) takes the place of an invalid
  model output: the car keeps its last state, gets zero reward, ends as "model_invalid" and is
  counted in `sim_errors`;
- the observation history at a reset holds the start state beside the command (0, 0, 0), as in
  every source-simulator client (s3.task.observation), because the source simulator has no
  cheap "hold this speed" throttle table.

Processes. The cars live in a pool of source simulators (s3.compute.backend.open_sim_pool): W
worker processes holding N/W cars each, from a forkserver that has imported SOURCE_WORKER_PRELOAD
once, or with `compute` naming the `ray` backend, Ray actors (s3.compute.ray_sim_pool). The main
process samples starts, batches commands and states as tensors and computes everything else. A
worker that dies or reports an error raises `SourceWorkerError` naming it; `close()` (or the
context manager) stops them all. An env built with `holds_cpus=False` (direct's validation env,
which steps only while the training env waits) has Ray actors that hold no CPUs, as its local
processes share the cores. The simulator must step cars side by side (s3.sim.backends).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from s3.catalog import DIRECT
from s3.compute import sim_pool
from s3.compute.backend import open_sim_pool
from s3.compute.sim_pool import STATE_COLUMNS, SimPool, SourceWorkerError, resolve_workers
from s3.rl import SOURCE_WORKER_PRELOAD
from s3.rl.task_env import TaskVecEnv
from s3.sim.backends import side_by_side_names, sim_backend
from s3.task.actions import split_action
from s3.task.observation import Observer
from s3.task.params import EndRules, EnvParams
from s3.task.rules import Rules
from s3.task.starts import Starts, sample_starts, start_pose
from s3.tracks.track import Track

if TYPE_CHECKING:
    from s3.compute.params import ComputeParams
    from s3.sim.params import DriverAidsParams, SimParams

__all__ = ["STATE_COLUMNS", "SourceVecEnv", "SourceWorkerError", "prestart", "resolve_workers"]


def prestart() -> None:
    """Start the source workers' forkserver now, so that its one-time import overlaps the caller's own setup."""
    sim_pool.prestart(SOURCE_WORKER_PRELOAD)


class SourceVecEnv(TaskVecEnv):
    """rsl_rl VecEnv over N source-simulator cars in worker processes (see the module docstring)."""

    def __init__(
        self,
        tracks: Sequence[Track],
        sim: SimParams,
        params: EnvParams | None = None,
        num_envs: int = 32,
        workers: int = 0,
        seed: int = 0,
        auto_reset: bool = True,
        timeout_s: float = 300.0,
        aids: DriverAidsParams | None = None,
        compute: ComputeParams | None = None,
        holds_cpus: bool = True,
    ) -> None:
        backend = sim_backend(sim)
        if not backend.side_by_side:
            raise ValueError(
                f"SourceVecEnv steps many cars in parallel: it needs sim.backend {side_by_side_names()}, not "
                f"{sim.backend!r} ({backend.not_side_by_side})"
            )
        self.params = params = params or EnvParams()
        self.device = torch.device("cpu")  # the simulators live on the CPU; rsl_rl moves obs to its device
        self.num_envs = int(num_envs)
        self.dt = float(sim.control_dt)
        self.max_episode_length = max(1, int(round(params.episode_seconds / self.dt)))
        self.auto_reset = auto_reset
        self.cfg: dict[str, Any] = {
            "env": params.model_dump(mode="json"),
            "family": DIRECT,
            "dt": self.dt,
            "sim": sim.backend,
        }
        self.generator = torch.Generator()
        self.generator.manual_seed(int(seed))
        n = self.num_envs
        with torch.inference_mode():
            self.observer = Observer.for_params(list(tracks), params, n)
            self.rules = Rules(n, self.dt, EndRules.training(params), params.reward, self.max_episode_length)
            self.action_prev = torch.zeros(n, 2)
            self.reason = torch.zeros(n, dtype=torch.long)
            self.ep_return = torch.zeros(n)
        self.frame = self.observer.frame
        self.layout = self.observer.layout
        self.num_obs = self.layout.dim
        self.obs = torch.zeros(n, self.num_obs)
        self.sim_errors = 0
        self.car_steps = 0
        self.episode_count = 0
        self._stats = _Stats()
        self.workers: SimPool = open_sim_pool(
            sim, tracks, n, resolve_workers(workers, n), timeout_s, aids, compute, holds_cpus, SOURCE_WORKER_PRELOAD
        )
        try:
            self.reset()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        if getattr(self, "workers", None) is not None:
            self.workers.close()
            self.workers = None  # type: ignore[assignment]

    def __enter__(self) -> SourceVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ VecEnv
    @torch.inference_mode()
    def reset(self) -> TensorDict:
        """Every car to a random start (DistilledEnv's distribution); returns the observations."""
        self._restart(
            torch.arange(self.num_envs), sample_starts(self.frame.tracks, self.num_envs, self.params, self.generator)
        )
        self.obs = self.observer.compute()
        return self.get_observations()

    @torch.inference_mode()
    def reset_to(
        self,
        track_idx: Tensor,
        s: Tensor,
        d: Tensor | float = 0.0,
        heading_offset: Tensor | float = 0.0,
        speed: Tensor | float = 0.0,
    ) -> TensorDict:
        """Deterministic starts for every car (validation); returns the observations."""
        n = self.num_envs
        full = lambda x: torch.as_tensor(x, dtype=torch.float32).expand(n).clone()
        track = torch.as_tensor(track_idx, dtype=torch.long).expand(n).clone()
        self._restart(torch.arange(n), Starts(track, full(s), full(d), full(heading_offset), full(speed)))
        self.obs = self.observer.compute()
        return self.get_observations()

    @torch.inference_mode()
    def set_tracks(self, tracks: Sequence[Track], changed: Sequence[int] | None = None) -> Tensor:
        """New pool (same count when `changed` lists the replaced indices); returns the cars restarted."""
        tracks = list(tracks)
        old = len(self.frame.tracks)
        tb = self.frame.load(tracks)
        every = changed is None or len(tracks) != old
        changed = range(len(tracks)) if every else list(changed)
        self.workers.call({w: ("set_tracks", ({k: tracks[k] for k in changed},)) for w in range(len(self.workers))})
        mask = (
            torch.ones(self.num_envs, dtype=torch.bool)
            if every
            else torch.isin(self.frame.track_idx, torch.as_tensor(list(changed), dtype=torch.long))
        )
        ids = mask.nonzero(as_tuple=False).squeeze(1)
        if ids.numel():
            self._restart(ids, sample_starts(tb, ids.numel(), self.params, self.generator))
        self.obs = self.observer.compute()
        return mask

    @torch.inference_mode()
    def step(self, actions: Tensor, active: Tensor | None = None) -> tuple[TensorDict, Tensor, Tensor, dict[str, Any]]:
        """One control period; `active` [N] (default all) limits which cars are simulated at all."""
        pol, cmd = split_action(actions.detach().to("cpu", torch.float32), self.obs[:, 0], self.params.steer_full_speed)
        act = torch.ones(self.num_envs, dtype=torch.bool) if active is None else active.to("cpu", torch.bool)
        state, ds, invalid = self._advance(cmd, act)
        out = self.rules.judge(self.frame, ds, pol, self.action_prev, invalid, act, state)
        self.action_prev = torch.where(act[:, None], pol, self.action_prev)
        self.reason, dones = out.reason, out.done
        self.ep_return += out.reward
        self.sim_errors += int(invalid.sum())
        self.car_steps += int(act.sum())
        self.episode_count += int(dones.sum())
        progress = self.frame.progress
        self._stats.add(state[:, 0], act, dones, self.ep_return, self.episode_length_buf, progress)
        log = {
            "Env/model_invalid": invalid.float().sum(),
            "Env/off_track_rate": out.off.float().mean(),
            "Env/speed": state[act, 0].mean() if act.any() else torch.zeros(()),
            "Env/progress_per_step": ds.mean(),
            **{f"reward/{k}": v.mean() for k, v in out.terms.items()},
        }
        extras: dict[str, Any] = {
            "time_outs": out.time_out,
            "log": log,
            "reason": out.reason,
            "progress": progress.clone(),
        }
        if self.auto_reset:
            ids = dones.nonzero(as_tuple=False).squeeze(1)
            if ids.numel():
                log["Env/episode_progress_m"] = progress[ids].mean()
                self._restart(ids, sample_starts(self.frame.tracks, ids.numel(), self.params, self.generator))
        self.obs = self.observer.compute()
        return self.get_observations(), out.reward, dones, extras

    def _advance(self, cmd: Tensor, act: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Simulate the active cars and feed the observer: (state [N, 4], progress ds [N], invalid [N]).

        A failed or absurd simulator state is never propagated (the car keeps its last one, as
        DistilledEnv does with an invalid model output); inactive cars stand still and keep their
        observation history.
        """
        p, ob = self.params, self.observer
        prev_pose, prev_state, hist0 = self.frame.pose.clone(), ob.hist[:, -1, :4].clone(), ob.hist.clone()
        states, failed = self._simulate(cmd, act)
        absurd = (torch.hypot(states[:, 3], states[:, 4]) > p.max_speed) | (states[:, 5].abs() > p.max_yaw_rate)
        invalid = act & (failed | ~torch.isfinite(states).all(dim=1) | absurd)
        keep = invalid | ~act
        pose = torch.where(keep[:, None], prev_pose, states[:, :3])
        state = torch.where(keep[:, None], prev_state, states[:, 3:])
        ds = ob.observe(pose, state, cmd, frozen=keep)
        ob.hist.copy_(torch.where(act[:, None, None], ob.hist, hist0))  # a view: write in place
        return state, ds, invalid

    # ------------------------------------------------------------------ internals
    def _simulate(self, cmd: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        """Step every worker's cars in parallel; states [N, 7] (float32) and failures [N]."""
        c, a, b = cmd.numpy().astype(np.float64), active.numpy(), self.workers.bounds
        out = self.workers.call(
            {w: ("step", (c[b[w] : b[w + 1]], a[b[w] : b[w + 1]])) for w in range(len(self.workers))}
        )
        states = np.concatenate([out[w][0] for w in range(len(self.workers))])
        failed = np.concatenate([out[w][1] for w in range(len(self.workers))])
        return torch.from_numpy(states).float(), torch.from_numpy(failed)

    def _restart(self, ids: Tensor, st: Starts) -> None:
        """Reset cars `ids` at starts `st` in their workers and start their episodes (history:
        the state the simulator reports, beside the command (0, 0, 0))."""
        pose, _ = start_pose(self.frame.tracks, st)
        start = torch.cat([pose, st.speed[:, None]], dim=1)
        ids_np, track_np, start_np = ids.numpy(), st.track.numpy(), start.double().numpy()
        owner, b = self.workers.owner(ids_np), self.workers.bounds
        sel = {int(w): owner == w for w in np.unique(owner)}
        out = self.workers.call({w: ("reset", (ids_np[m] - b[w], track_np[m], start_np[m])) for w, m in sel.items()})
        states = np.zeros((len(ids_np), len(STATE_COLUMNS)))
        for w, m in sel.items():
            states[m] = out[w]
        sim_state = torch.from_numpy(states).float()
        self.observer.start(ids, st.track, sim_state[:, :3], sim_state[:, 3:], torch.zeros(len(ids_np), 3))
        self.rules.restart(ids)
        self.action_prev[ids] = 0.0
        self.ep_return[ids] = 0.0

    # ------------------------------------------------------------------ reporting
    def pop_stats(self) -> dict[str, float | int | None]:
        """Episodes finished and mean speed since the last call (the direct learning curve)."""
        out = self._stats.summary()
        self._stats = _Stats()
        return out


class _Stats:
    """Running sums for the learning curve between two `pop_stats` calls."""

    def __init__(self) -> None:
        self.speed_sum, self.steps = 0.0, 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.progress: list[float] = []

    def add(self, vx: Tensor, active: Tensor, dones: Tensor, ret: Tensor, length: Tensor, progress: Tensor) -> None:
        self.speed_sum += float(vx[active].sum())
        self.steps += int(active.sum())
        self.returns += ret[dones].tolist()
        self.lengths += length[dones].tolist()
        self.progress += progress[dones].tolist()

    def summary(self) -> dict[str, float | int | None]:
        mean = lambda v: float(np.mean(v)) if v else None
        return {
            "episodes": len(self.returns),
            "mean_return": mean(self.returns),
            "mean_episode_steps": mean(self.lengths),
            "mean_episode_progress_m": mean(self.progress),
            "mean_speed_m_s": self.speed_sum / self.steps if self.steps else None,
        }
