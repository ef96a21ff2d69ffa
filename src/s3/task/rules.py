"""Reward and the end of an episode, for N cars at once: one definition for every simulator.

    rules = Rules(num_cars, dt, EndRules.training(env_params), env_params.reward, max_steps)
    rules.restart(ids)                                      # cars `ids` begin an episode
    out = rules.judge(frame, ds, action, action_prev, invalid, active=None, state=None)

Reward per control step, as named terms (each logged as `reward/<term>`; their sum is the reward):
    progress     +w * min(ds, pace * dt, grip_pace * mu * dt)   ds = signed arc-length change along the centerline
                                               [m]; mu = peak friction under the car; a cap at 0 is off
    action_rate  -w * |a[t] - a[t-1]|^2        a = the policy action (steer, longitudinal)
    off_track    -w * [off track]
    backwards    -w * [backwards and not off track]
    stall        -w * [stalled]
    lateral      -w * max(0, |vx * r| - lateral_limit)   only with lateral_limit > 0 and the body state given
A car whose step was invalid (a rejected model output, a failed simulator step) or that was not
simulated (`active` False) gets 0.

Ends (reason codes REASONS; when several hold, the later one in this list wins):
    time_out       the episode reached max_steps (rsl_rl bootstraps it: not a failure)
    stalled        less than stall_distance metres of progress in the last stall_seconds
    backwards      net progress below -backwards_distance, or |heading error| > backwards_heading
    off_track      the car centre more than off_track_margin metres beyond the road edge
    model_invalid  the step was invalid (the car kept its previous state)
Which thresholds apply is an `EndRules`. Training uses the env params' (`EndRules.training`:
stricter, since a car that leaves the road or parks teaches PPO nothing). Judging a run uses
`JudgeParams` (the `evaluate.judge` params) wherever a run is scored: in the source simulator
(s3.evaluate.run.run_lap) and inside a distilled model (s3.rl.rollout.run_episodes with
`ends=judge.ends()`), so that the transfer gap compares runs ended by the same rules. A judged run
has no heading rule: a car that spins and drives on has not failed.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from s3.task.frame import TrackFrame
from s3.task.params import EndRules, RewardParams

REASONS = ("running", "off_track", "backwards", "model_invalid", "stalled", "time_out")
RUNNING, OFF_TRACK, BACKWARDS, MODEL_INVALID, STALLED, TIME_OUT = range(6)


class Outcome(NamedTuple):
    """One step's judgement [N] each; `terms` holds the reward's named parts [N]."""

    reward: Tensor
    terms: dict[str, Tensor]
    reason: Tensor
    done: Tensor
    time_out: Tensor
    off: Tensor


class Rules:
    """Reward and ends for N cars (see the module docstring); keeps the stall clock and step count."""

    def __init__(
        self,
        num_cars: int,
        dt: float,
        ends: EndRules,
        reward: RewardParams,
        max_steps: int,
        device: torch.device | str = "cpu",
    ) -> None:
        self.ends, self.weights, self.max_steps = ends, reward, int(max_steps)
        self.paid_ds = reward.pace * dt if reward.pace > 0 else None  # the most progress a step is paid for [m]
        self.grip_paid_ds = reward.grip_pace * dt if reward.grip_pace > 0 else None  # ... per unit of friction [m]
        self.lateral_limit = reward.lateral_limit if reward.lateral_limit > 0 and reward.lateral > 0 else None
        self.off_track_weight = float(reward.off_track)  # a training run's constraint may move it (s3.rl.caution)
        self.stall_limit = max(1, int(round(ends.stall_seconds / dt)))
        with torch.inference_mode():
            self.steps = torch.zeros(num_cars, dtype=torch.long, device=device)
            self.stall_ref = torch.zeros(num_cars, device=device)  # progress when the stall clock last restarted
            self.stall_steps = torch.zeros(num_cars, dtype=torch.long, device=device)

    @torch.inference_mode()
    def restart(self, ids: Tensor) -> None:
        self.steps[ids] = 0
        self.stall_ref[ids] = 0.0
        self.stall_steps[ids] = 0

    def _paid(self, ds: Tensor, frame: TrackFrame) -> Tensor:
        """The progress [N] a step is paid for: ds capped by `pace` and by `grip_pace` x the friction under the car."""
        if self.paid_ds is not None:
            ds = ds.clamp(max=self.paid_ds)
        if self.grip_paid_ds is not None:
            ds = torch.minimum(ds, self.grip_paid_ds * frame.mu)
        return ds

    @torch.inference_mode()
    def judge(
        self,
        frame: TrackFrame,
        ds: Tensor,
        action: Tensor,
        action_prev: Tensor,
        invalid: Tensor,
        active: Tensor | None = None,
        state: Tensor | None = None,
    ) -> Outcome:
        """Judge the step that moved every car by ds [N] along its track (frame already advanced);
        `state` [N, >= 3] = (vx, vy, yaw rate, ...) after the step prices the lateral term when it is on."""
        e, w = self.ends, self.weights
        progress = frame.progress
        off = frame.off_track(e.off_track_margin)
        backwards = progress < -e.backwards_distance
        if e.backwards_heading is not None:
            backwards = (frame.feats[:, 1].abs() > e.backwards_heading) | backwards
        moved = progress - self.stall_ref >= e.stall_distance
        self.stall_ref = torch.where(moved, progress, self.stall_ref)
        if active is None:
            self.stall_steps = (self.stall_steps + 1).masked_fill_(moved, 0)
            self.steps += 1
        else:
            off, backwards = active & off, active & backwards
            self.stall_steps = torch.where(moved, torch.zeros_like(self.stall_steps), self.stall_steps + active.long())
            self.steps += active.long()
        failed = off | backwards | invalid
        stalled = (self.stall_steps >= self.stall_limit) & ~failed
        time_out = (self.steps >= self.max_steps) & ~(failed | stalled)
        if active is not None:
            stalled, time_out = active & stalled, active & time_out
        terms = {
            "progress": w.progress * self._paid(ds, frame),
            "action_rate": -(w.action_rate * (action - action_prev).square().sum(dim=1)),
            "off_track": -(self.off_track_weight * off.float()),
            "backwards": -(w.backwards * (backwards & ~off).float()),
            "stall": -(w.stall * stalled.float()),
        }
        if self.lateral_limit is not None and state is not None:
            excess = (state[:, 0] * state[:, 2]).abs() - self.lateral_limit  # lateral acceleration above the limit
            terms["lateral"] = -(w.lateral * excess.clamp(min=0.0))
        void = invalid if active is None else invalid | ~active
        reward = terms["progress"]
        for name in list(terms)[1:]:
            reward = reward + terms[name]
        reward = reward.masked_fill(void, 0.0)
        terms = {k: v.masked_fill(void, 0.0) for k, v in terms.items()}
        reason = time_out.long() * TIME_OUT
        reason = reason.masked_fill_(stalled, STALLED).masked_fill_(backwards, BACKWARDS)
        reason = reason.masked_fill_(off, OFF_TRACK).masked_fill_(invalid, MODEL_INVALID)
        return Outcome(reward, terms, reason, failed | stalled | time_out, time_out, off)
