"""Caution as a constraint: a PPO-Lagrangian on the training cars' off-track rate.

    mult = OffTrackMultiplier(params.off_track, base=params.env.reward.off_track)
    env.rules.off_track_weight = mult.update(rate)   # after each chunk; rate = its mean Env/off_track_rate

The off-track penalty is the Lagrange multiplier of the constraint "off-track ends per car and control
step <= rate". After each chunk it moves by `step` per unit of relative violation, (rate_seen - rate) /
rate, clipped to [base, max_penalty]: it rises while the cars leave the road too often and falls back,
never below the reward's own penalty (`base`), when they keep to it. The progress reward is unchanged,
so the policy trades pace for staying on the road only as far as the constraint asks.
"""

from __future__ import annotations

import math

from s3.rl.params import OffTrackConstraint
from s3.rl.ppo import Curve

RATE_TAG = "Env/off_track_rate"  # s3.rl.env's per-step share of cars that left the road


class OffTrackMultiplier:
    """The off-track penalty as a multiplier (see the module docstring); `value` is the current penalty."""

    def __init__(self, params: OffTrackConstraint, base: float, value: float | None = None) -> None:
        self.params, self.base = params, float(base)
        self.value = float(base if value is None else value)

    @property
    def on(self) -> bool:
        return self.params.rate > 0.0

    def update(self, rate: float) -> float:
        """One chunk's mean off-track rate in; the penalty for the next chunk out (unchanged when off or
        the rate is not finite)."""
        if self.on and math.isfinite(rate):
            violation = (rate - self.params.rate) / self.params.rate
            self.value = min(self.params.max_penalty, max(self.base, self.value + self.params.step * violation))
        return self.value


def chunk_rate(chunk: Curve) -> float:
    """The mean per-step off-track rate of one chunk's iterations (nan if none was logged)."""
    values = [v for tag, _, v in chunk if tag == RATE_TAG]
    return sum(values) / len(values) if values else math.nan
