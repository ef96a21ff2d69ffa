"""The driving task's parameters: the env (observation, episode, terminations, starts), the reward
and the judging rules (the `train.env` and `evaluate.judge` sections of params.yaml).

The task owns them; the learner (s3.rl.params), evaluation and the data driver import them from
here. Every field is bounded; unknown keys are refused. SI units.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RewardParams(_Section):
    """Reward per control step (see s3.task.rules for the formula)."""

    progress: float = Field(0.1, ge=0.0, le=100.0, description="reward per metre of progress along the centerline")
    pace: float = Field(
        0.0,
        ge=0.0,
        le=100.0,
        description="progress pays for at most this speed along the centerline (m/s): a step's paid progress is "
        "min(ds, pace x dt), so beyond it speed buys nothing but risk (caution as an objective, issue #38); 0 = off",
    )
    grip_pace: float = Field(
        0.0,
        ge=0.0,
        le=1000.0,
        description="progress pays for at most grip_pace x mu m/s, mu the peak friction under the car (about 1 on "
        "asphalt, 0.1-0.3 on ice): care where the road is slippery and nowhere else, at 35 about 7 m/s on mu 0.2 and "
        "no cap on asphalt (caution as an objective, issue #38; the reward may use the surface, a blind actor does not "
        "observe it); with `pace` too, the lower cap pays; 0 = off",
    )
    lateral_limit: float = Field(
        0.0,
        ge=0.0,
        le=100.0,
        description="lateral acceleration |vx x yaw rate| (m/s^2) above which a step costs `lateral` per m/s^2 of "
        "excess: care in corners, the centreline follower's rule that laps the icy hold-out (caution as an objective, "
        "issue #38); 0 = off",
    )
    lateral: float = Field(
        0.1, ge=0.0, le=100.0, description="cost per control step per m/s^2 of lateral acceleration above lateral_limit"
    )
    off_track: float = Field(5.0, ge=0.0, le=1000.0, description="penalty when leaving the road (terminates)")
    backwards: float = Field(5.0, ge=0.0, le=1000.0, description="penalty when turned around or reversing (terminates)")
    stall: float = Field(5.0, ge=0.0, le=1000.0, description="penalty when stalled (terminates)")
    action_rate: float = Field(
        0.02, ge=0.0, le=100.0, description="penalty weight on |a[t] - a[t-1]|^2 (policy action)"
    )


class EnvParams(_Section):
    """The distilled environment: episode, observation, terminations and domain randomisation."""

    num_envs: int = Field(1024, ge=1, le=262144, description="vehicles stepped together")
    episode_seconds: float = Field(60.0, gt=0.0, le=3600.0, description="time limit (reported as time-out)")
    obs_history: int = Field(4, ge=0, le=50, description="past (state, command) pairs in the observation")
    preview_points: int = Field(20, ge=1, le=200, description="centerline preview points")
    preview_spacing: float = Field(5.0, gt=0.0, le=50.0, description="metres between preview points")
    surface_label: bool = Field(False, description="observe the friction under and ahead of the car")
    critic_surface: bool = Field(
        False,
        description="asymmetric critic: in training the critic also observes the friction under and ahead of the car "
        "(the surface label's 1 + len(surface_ahead) values, as the extra observation group 'privileged'); the actor, "
        "and so the exported policy, does not (unless surface_label)",
    )
    surface_ahead: list[float] = Field(
        default_factory=lambda: [5.0, 10.0, 20.0, 35.0, 50.0], description="metres ahead for the friction preview"
    )
    steer_full_speed: float = Field(
        0.0,
        ge=0.0,
        le=100.0,
        description="speed-sensitive steering: above this (m/s) the steering range shrinks as 1/v^2 "
        "(s3.task.actions); 0 = off",
    )
    off_track_margin: float = Field(
        0.0, ge=-5.0, le=10.0, description="metres beyond the road edge still counted on track (car centre)"
    )
    backwards_heading: float = Field(
        1.75, gt=0.5, le=3.15, description="|heading error| (rad) that ends an episode as 'backwards'"
    )
    backwards_distance: float = Field(
        5.0, gt=0.0, le=1000.0, description="net reverse progress (m) that ends an episode"
    )
    stall_seconds: float = Field(
        5.0, gt=0.0, le=3600.0, description="an episode ends if progress stays below stall_distance this long"
    )
    stall_distance: float = Field(2.0, gt=0.0, le=1000.0, description="metres of progress that restart the stall clock")
    max_speed: float = Field(80.0, gt=1.0, le=1000.0, description="|(vx, vy)| above this is an absurd model output")
    max_yaw_rate: float = Field(15.0, gt=0.1, le=1000.0, description="|yaw rate| above this is an absurd model output")
    max_steer: float = Field(
        1.5, gt=0.1, le=10.0, description="|steer| (road-wheel angle, rad) above this is an absurd model output"
    )
    init_speed_min: float = Field(0.0, ge=0.0, le=60.0, description="initial speed range (m/s)")
    init_speed_max: float = Field(15.0, ge=0.0, le=60.0)
    init_lateral: float = Field(
        0.5, ge=0.0, le=1.0, description="initial lateral offset as a fraction of the half width"
    )
    init_heading: float = Field(0.15, ge=0.0, le=1.0, description="initial heading error range (rad, uniform +-)")
    projection_window: int = Field(8, ge=2, le=256, description="segments searched either side of the last projection")
    track_ds: float = Field(1.0, gt=0.05, le=10.0, description="resampling of the tracks inside the env (m)")
    compile_model: bool = Field(
        False,
        description="torch.compile the transformer families' network (~1.2-1.3x env steps/s on CPU; compiles on the "
        "first step)",
    )
    disagreement_penalty: float = Field(
        0.0,
        ge=0.0,
        le=100.0,
        description="distilled env on an ensemble (distill.ensemble): each step's reward minus this x the members' "
        "one-step disagreement (s3.dynamics.ensemble; about 1 = members differ by a typical step's change). 0 = off: "
        "each car then runs its own member only",
    )
    reward: RewardParams = RewardParams()

    @model_validator(mode="after")
    def _ranges(self) -> EnvParams:
        if self.init_speed_min > self.init_speed_max:
            raise ValueError("init_speed_min must not exceed init_speed_max")
        if not self.surface_ahead or any(d < 0 or d > 500 for d in self.surface_ahead):
            raise ValueError("surface_ahead needs 1+ distances in [0, 500] m")
        if self.projection_window * self.track_ds < 3.0:
            raise ValueError("projection_window * track_ds must cover at least 3 m (one step at 30 m/s)")
        return self


@dataclass(frozen=True)
class EndRules:
    """The thresholds that end an episode (see s3.task.rules); SI units."""

    off_track_margin: float
    backwards_distance: float
    backwards_heading: float | None  # rad; None: heading is not a rule
    stall_seconds: float
    stall_distance: float

    @classmethod
    def training(cls, params: EnvParams) -> EndRules:
        """The distilled env's training terminations."""
        return cls(
            params.off_track_margin,
            params.backwards_distance,
            params.backwards_heading,
            params.stall_seconds,
            params.stall_distance,
        )


class JudgeParams(BaseModel):
    """How a run is judged wherever it is scored (source simulator or distilled model)."""

    model_config = ConfigDict(extra="forbid")

    off_track_distance: float = Field(
        4.0, gt=0.0, le=100.0, description="the run ends once the car centre is this far beyond the road edge (m)"
    )
    backwards_distance: float = Field(10.0, gt=0.0, le=1000.0, description="net reverse progress (m) that ends a run")
    stall_seconds: float = Field(
        8.0, gt=0.0, le=600.0, description="a run ends after this long with less than stall_distance of progress"
    )
    stall_distance: float = Field(2.0, gt=0.0, le=100.0, description="metres of progress that restart the stall clock")
    track_ds: float = Field(
        1.0,
        gt=0.05,
        le=10.0,
        description="resampling of the track the run is judged on (m); inside a distilled model the policy's own",
    )
    projection_window: int = Field(16, ge=2, le=512, description="segments searched either side of the last projection")

    @model_validator(mode="after")
    def _window(self) -> JudgeParams:
        if self.projection_window * self.track_ds < 5.0:
            raise ValueError("projection_window * track_ds must cover at least 5 m (one control period at 50 m/s)")
        return self

    def ends(self) -> EndRules:
        return EndRules(self.off_track_distance, self.backwards_distance, None, self.stall_seconds, self.stall_distance)
