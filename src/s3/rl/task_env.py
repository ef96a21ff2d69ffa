"""What the distilled env and the source env share as rsl_rl VecEnvs over the task (s3.task).

Subclasses set `num_envs`, `device`, `obs` [N, D] (the current observations), `observer`
(an s3.task Observer, whose frame holds where the cars are) and `rules` (s3.task Rules, whose step
count rsl_rl sees as `episode_length_buf`).
"""

from __future__ import annotations

from rsl_rl.env import VecEnv
from tensordict import TensorDict
from torch import Tensor

from s3.rl.ppo import POLICY, PRIVILEGED
from s3.task.observation import Observer
from s3.task.rules import Rules


class TaskVecEnv(VecEnv):
    """An rsl_rl VecEnv whose task is s3.task's (see the module docstring)."""

    num_actions = 2  # (steer, longitudinal) in [-1, 1]^2 (s3.task.actions)
    observer: Observer
    rules: Rules
    obs: Tensor

    def get_observations(self) -> TensorDict:
        """The group "policy" [N, D] (actor and critic), and "privileged" [N, 1 + Q] (the critic's alone)
        where the observer has it (s3.rl.ppo.obs_groups)."""
        groups = {POLICY: self.obs}
        if (p := self.observer.privileged()) is not None:
            groups[PRIVILEGED] = p
        return TensorDict(groups, batch_size=[self.num_envs], device=self.device)

    @property
    def episode_length_buf(self) -> Tensor:
        """Steps into the episode [N] (rsl_rl reads and may randomise it)."""
        return self.rules.steps

    @episode_length_buf.setter
    def episode_length_buf(self, value: Tensor) -> None:
        self.rules.steps = value

    def track_length(self) -> Tensor:
        """Lap length [N] of each car's current track (as resampled in the track frame)."""
        return self.observer.frame.length()
