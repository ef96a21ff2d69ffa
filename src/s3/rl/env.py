"""The distilled environment: N cars driven by a learned dynamics model on procedural tracks.

`DistilledEnv` implements rsl_rl's `VecEnv`. Every quantity is a tensor [N, ...] on one device
(CPU or CUDA); there is no Python loop over cars. Per car it keeps the model's history window
(states [N, K, 4] and the commands that led into them [N, K, 3]), the world pose (integrated with
`s3.dynamics.base.integrate_pose`), its track index, the last projection segment (the hint for the
next projection), the arc length and the net progress of the episode.

Actions. The policy emits a = (steer, longitudinal) in [-1, 1]^2 (rsl_rl samples an unbounded
Gaussian: the env clips), mapped to the command by s3.task.actions (steering_cmd = steer, scaled
down above `steer_full_speed` when that is set; throttle = max(u, 0), brake = max(-u, 0)).
`step` also accepts a 3-D command [N, 3] directly (controllers, exported policies); it is
clipped to [-1, 1] x [0, 1] x [0, 1].

One step (control period dt of the model):
    s[t+1] = model.step(history, command, mu)   mu = peak friction under the car at time t, from
                                                the track's patches (fed only if the model uses it)
With an ensemble model (s3.dynamics.ensemble), each car drives one member, drawn at random at each
of its resets; with `disagreement_penalty` > 0 every member steps every car, and the step's reward
loses penalty x the members' disagreement (logged as reward/disagreement and Env/disagreement).
    pose   = integrate_pose(pose, s[t], s[t+1])
then the task (s3.task) observes the car, rewards the step (named terms, logged as
extras["log"]["reward/<term>"]) and ends it: by default by the env params' training rules
(`EndRules.training`), or by the rules passed as `ends` (evaluation passes its judging rules).
A model output that is non-finite or absurd (|(vx, vy)| > max_speed, |yaw rate| > max_yaw_rate
or |steer| > max_steer) is never propagated: the car keeps its previous state, gets zero reward, ends as
"model_invalid" and is counted (`invalid_model_steps`, extras["log"]["Env/model_invalid"]). The
time limit is reported in extras["time_outs"] (rsl_rl bootstraps it) and is not a failure.
Finished cars are reset in place (auto-reset) and the returned observation is the first of their
new episode.

Reset. A car starts at a random start (s3.task.starts), driving straight (vy = yaw rate =
steer = 0). The model needs a history window; it is filled with that initial state repeated K
times, each with the command that holds it: zero steering, no brake, and the throttle at which
*this model* keeps the speed constant (tabulated once per env by solving model.step(...)[vx] = vx
on a speed grid, with mu = 1). The window is thus a steady state of the model itself rather than
an impossible history (a coasting command under a constant speed). At zero speed it is all
zeros. The observation history is filled the same way.

All public methods run under torch.inference_mode (rsl_rl collects rollouts under it): every env
tensor is an inference tensor, created and updated only there.

Speed (CPU first; every shortcut is checked against the plain formulation in
tests/test_env_speed_equivalence.py). A step is a fixed sequence of batched tensor ops: no Python
loop over cars, no host sync besides the count of finished cars. The history windows slide over
preallocated buffers (one row written per step; `hs`, `ha`, `hist` are views into them, which
later steps overwrite: clone what you keep); the track side is s3.task.frame's tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor

from s3.dynamics.base import DynamicsModel, integrate_pose
from s3.dynamics.ensemble import Ensemble, disagreement
from s3.rl.task_env import TaskVecEnv
from s3.task.actions import split_action
from s3.task.observation import Observer
from s3.task.params import EndRules, EnvParams
from s3.task.rules import Rules
from s3.task.starts import Starts, sample_starts, start_pose
from s3.task.window import Window
from s3.tracks.torch_track import TrackBatch
from s3.tracks.track import Track

DISAGREEMENT_CAP = 10.0  # ten typical steps' change: members this far apart are all off the data


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class DistilledEnv(TaskVecEnv):
    """Batched driving environment over any dynamics family (see the module docstring)."""

    def __init__(
        self,
        model: DynamicsModel,
        tracks: Sequence[Track],
        params: EnvParams | None = None,
        num_envs: int | None = None,
        device: str | torch.device | None = "cpu",
        seed: int = 0,
        auto_reset: bool = True,
        ends: EndRules | None = None,
    ) -> None:
        self.params = params = params or EnvParams()
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.model.inference_compile = params.compile_model
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.dt = float(model.dt)
        self.num_envs = n = int(num_envs or params.num_envs)
        self.max_episode_length = max(1, int(round(params.episode_seconds / self.dt)))
        self.auto_reset = auto_reset
        self.cfg: dict[str, Any] = {"env": params.model_dump(mode="json"), "family": model.family, "dt": self.dt}
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        self._hold_v, self._hold_u = self._hold_throttle_table()
        self._hold_dv = float(self._hold_v[1] - self._hold_v[0])
        with torch.inference_mode():
            self.observer = Observer.for_params(
                TrackBatch(list(tracks), ds=params.track_ds, device=self.device), params, n, self.device
            )
            self.frame = self.observer.frame
            self.layout = self.observer.layout
            self.num_obs = self.layout.dim
            self.rules = Rules(
                n, self.dt, ends or EndRules.training(params), params.reward, self.max_episode_length, self.device
            )
            k, dev = self.model.history, self.device
            self._hs, self._ha = Window(n, k, 4, dev), Window(n, k, 3, dev)
            self.action_prev = torch.zeros(n, 2, device=dev)
            self.reason = torch.zeros(n, dtype=torch.long, device=dev)
            self.invalid_count = torch.zeros((), dtype=torch.long, device=dev)
            self.episode_count = torch.zeros((), dtype=torch.long, device=dev)
            self.obs = torch.zeros(n, self.num_obs, device=dev)
            self.member = torch.zeros(n, dtype=torch.long, device=dev)  # each car's ensemble member
        self.members = len(self.model) if isinstance(self.model, Ensemble) else 1
        self.reset()

    # ------------------------------------------------------------------ state (views)
    @property
    def hs(self) -> Tensor:
        """States [N, K, 4] the model sees, oldest first (a view, overwritten by later steps)."""
        return self._hs.view

    @property
    def ha(self) -> Tensor:
        """Commands [N, K, 3] that led into those states (a view, overwritten by later steps)."""
        return self._ha.view

    @property
    def hist(self) -> Tensor:
        """(state, command) [N, H + 1, 7] of the observation, oldest first (a view, as `hs`)."""
        return self.observer.hist

    @property
    def tracks(self) -> TrackBatch:
        return self.frame.tracks

    @property
    def pose(self) -> Tensor:
        """World (x, y, yaw) [N, 3]."""
        return self.frame.pose

    @property
    def track_idx(self) -> Tensor:
        return self.frame.track_idx

    @property
    def progress(self) -> Tensor:
        """Net metres along the centerline since the episode began [N]."""
        return self.frame.progress

    @property
    def track_feats(self) -> Tensor:
        """(d, heading error, w_left, w_right) [N, 4] (s3.task.frame)."""
        return self.frame.feats

    @torch.no_grad()
    def _hold_throttle_table(self, v_max: float = 45.0, n_v: int = 46, n_u: int = 51) -> tuple[Tensor, Tensor]:
        """Throttle [n_v] that keeps each speed of a grid [n_v] constant under this model (mu = 1)."""
        dev, k = self.device, self.model.history
        v = torch.linspace(0.0, v_max, n_v, device=dev)
        u = torch.linspace(0.0, 1.0, n_u, device=dev)
        vv, uu = (t.reshape(-1) for t in torch.meshgrid(v, u, indexing="ij"))
        zero = torch.zeros_like(vv)
        state = torch.stack([vv, zero, zero, zero], dim=1)
        cmd = torch.stack([zero, uu, zero], dim=1)
        mu = torch.ones_like(vv) if self.model.use_mu else None
        vx1 = self.model.step(
            state[:, None].expand(-1, k, -1).contiguous(), cmd[:, None].expand(-1, k, -1).contiguous(), cmd, mu
        )[:, 0]
        f = (vx1 - vv).reshape(n_v, n_u)
        f = torch.where(torch.isfinite(f), f, torch.full_like(f, float("inf")))
        above = f >= 0
        j = torch.where(above.any(dim=1), above.float().argmax(dim=1), torch.full((n_v,), n_u - 1, device=dev))
        jm = (j - 1).clamp(min=0)
        f0, f1 = f.gather(1, jm[:, None])[:, 0], f.gather(1, j[:, None])[:, 0]
        frac = torch.where(
            (j > 0) & torch.isfinite(f1) & (f1 > f0), -f0 / (f1 - f0).clamp(min=1e-9), torch.zeros_like(f0)
        )
        hold = (u[jm] + frac.clamp(0, 1) * (u[j] - u[jm])).clamp(0.0, 1.0)
        hold = torch.where(above.any(dim=1), hold, torch.ones_like(hold))
        hold[0] = 0.0  # at rest: all zeros
        return v, hold

    def hold_throttle(self, v: Tensor) -> Tensor:
        """Interpolated steady-speed throttle for speeds v [M] (clamped to the grid)."""
        grid, table = self._hold_v, self._hold_u
        pos = (v / self._hold_dv).clamp(0.0, len(grid) - 1.0)
        i = pos.floor().long().clamp(max=len(grid) - 2)
        f = pos - i
        return table.index_select(0, i) * (1 - f) + table.index_select(0, i + 1) * f

    @torch.inference_mode()
    def set_tracks(self, tracks: Sequence[Track] | TrackBatch, changed: Sequence[int] | None = None) -> Tensor:
        """Use these tracks from now on; returns the mask [N] of cars that were reset onto them.

        With `changed` (indices of the tracks that differ from the current ones; same number of
        tracks), only the cars on those tracks restart and the others drive on; otherwise every
        car restarts.
        """
        old_count = len(self.frame.tracks)
        tb = self.frame.load(tracks)
        if changed is None or len(tb) != old_count:
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        else:
            mask = torch.isin(self.track_idx, torch.as_tensor(list(changed), dtype=torch.long, device=self.device))
        ids = mask.nonzero(as_tuple=False).squeeze(1)
        if ids.numel():
            self._reset_idx(ids, sample_starts(tb, ids.numel(), self.params, self.generator))
        self.obs = self.observer.compute()
        return mask

    # ------------------------------------------------------------------ VecEnv
    @torch.inference_mode()
    def reset(self) -> TensorDict:
        """Reset every car (random starts) and return the observations."""
        self._reset_idx(
            torch.arange(self.num_envs, device=self.device),
            sample_starts(self.tracks, self.num_envs, self.params, self.generator),
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
        """Deterministic reset of every car to the given starts (evaluation); returns observations."""
        n, dev = self.num_envs, self.device
        full = lambda x: torch.as_tensor(x, dtype=torch.float32, device=dev).expand(n).clone()
        track = torch.as_tensor(track_idx, dtype=torch.long, device=dev).expand(n).clone()
        self._reset_idx(torch.arange(n, device=dev), Starts(track, full(s), full(d), full(heading_offset), full(speed)))
        self.obs = self.observer.compute()
        return self.get_observations()

    @torch.inference_mode()
    def step(self, actions: Tensor) -> tuple[TensorDict, Tensor, Tensor, dict[str, Any]]:
        p = self.params
        hs = self.hs
        s0 = hs[:, -1]
        pol, cmd = split_action(actions.to(self.device, torch.float32), s0[:, 0], p.steer_full_speed)
        s1, dis = self._model_step(hs, cmd)
        invalid = ~torch.isfinite(s1).all(dim=1)
        invalid |= torch.hypot(s1[:, 0], s1[:, 1]) > p.max_speed
        invalid |= s1[:, 2].abs() > p.max_yaw_rate
        invalid |= s1[:, 3].abs() > p.max_steer
        s1 = torch.where(invalid[:, None], s0, s1)  # never propagate a broken prediction
        pose = integrate_pose(self.pose, s0, s1, self.dt)
        ds = self.observer.observe(pose, s1, cmd, frozen=invalid)
        out = self.rules.judge(self.frame, ds, pol, self.action_prev, invalid, state=s1)
        if dis is not None:
            cost = torch.where(invalid, 0.0, p.disagreement_penalty * dis)
            out = out._replace(reward=out.reward - cost)
        self._hs.push(s1)
        self._ha.push(cmd)
        self.action_prev = pol
        self.reason = out.reason
        dones = out.done
        n_invalid = invalid.sum()
        self.invalid_count += n_invalid
        self.episode_count += dones.sum()
        log = {
            "Env/model_invalid": n_invalid.float(),
            "Env/off_track_rate": out.off.float().mean(),
            "Env/speed": s1[:, 0].mean(),
            "Env/progress_per_step": ds.mean(),
            **{f"reward/{k}": v.mean() for k, v in out.terms.items()},
        }
        if dis is not None:
            log["Env/disagreement"] = dis.mean()
            log["reward/disagreement"] = -cost.mean()
        extras: dict[str, Any] = {
            "time_outs": out.time_out,
            "log": log,
            "reason": out.reason,
            "progress": self.progress.clone(),
        }
        if self.auto_reset:
            ids = dones.nonzero(as_tuple=False).squeeze(1)
            if ids.numel():
                log["Env/episode_progress_m"] = self.progress[ids].mean()
                self._reset_idx(ids, sample_starts(self.tracks, ids.numel(), self.params, self.generator))
        self.obs = self.observer.compute()
        return self.get_observations(), out.reward, dones, extras

    # ------------------------------------------------------------------ internals
    def _model_step(self, hs: Tensor, cmd: Tensor) -> tuple[Tensor, Tensor | None]:
        """Next states [N, 4] and, with an ensemble under a disagreement penalty, the disagreement [N]."""
        mu = self.frame.mu if self.model.use_mu else None
        if self.members == 1:
            return self.model.step(hs, self.ha, cmd, mu), None
        if self.params.disagreement_penalty == 0:
            return self.model.step_assigned(hs, self.ha, cmd, mu, self.member), None
        preds = self.model.members_step(hs, self.ha, cmd, mu)  # [M, N, 4]
        s1 = preds.gather(0, self.member[None, :, None].expand(1, -1, preds.shape[-1]))[0]
        dis = disagreement(preds, self.model.norm.delta_std)  # a member gone non-finite: the cap, never NaN
        return s1, torch.nan_to_num(dis, nan=DISAGREEMENT_CAP, posinf=DISAGREEMENT_CAP).clamp(max=DISAGREEMENT_CAP)

    def _reset_idx(self, ids: Tensor, st: Starts) -> None:
        """Cars `ids` start at `st`, driving straight, their windows holding the steady state."""
        pose, hint = start_pose(self.tracks, st)
        zero = torch.zeros_like(st.speed)
        state = torch.stack([st.speed, zero, zero, zero], dim=1)
        thr = self.hold_throttle(st.speed)
        cmd = torch.stack([zero, thr, zero], dim=1)
        self._hs.fill(ids, state)
        self._ha.fill(ids, cmd)
        self.observer.start(ids, st.track, pose, state, cmd, hint)
        self.rules.restart(ids)
        self.action_prev[ids] = torch.stack([zero, thr], dim=1)
        if self.members > 1:  # a single model draws nothing: its random stream is as without ensembles
            self.member[ids] = torch.randint(self.members, (ids.numel(),), generator=self.generator, device=self.device)

    # ------------------------------------------------------------------ reporting
    @property
    def invalid_model_steps(self) -> int:
        """Model outputs rejected (non-finite or absurd) since construction."""
        return int(self.invalid_count)
