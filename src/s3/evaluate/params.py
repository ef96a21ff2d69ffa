"""Parameters of the evaluate stage (the `evaluate:` section of params.yaml).

Evaluation drives each driver (every training seed of a policy) back in the source simulator on
the evaluation suite: held-out circuits (built-in or racing CSVs, s3.tracks.evaluation_circuits),
each nominal and with ice, from starts spread around the lap. The car and policy are
deterministic, so the starts are not perturbed: the variation that matters is the seeds'.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from s3.task.params import JudgeParams


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PidParams(_Section):
    """The `pid` baseline: pure pursuit on the centerline + PID on a curvature speed profile.

    Hand-tuned on procedural tracks only (see s3.evaluate.tune_pid); never on the road course.
    """

    lookahead_min: float = Field(6.0, gt=0.0, le=50.0, description="shortest pure-pursuit lookahead (m)")
    lookahead_gain: float = Field(0.45, ge=0.0, le=3.0, description="extra lookahead per m/s of speed (s)")
    yaw_gain: float = Field(
        0.3, ge=0.0, le=5.0, description="extra road-wheel angle (rad) per rad/s of yaw-rate error vs the pursuit arc"
    )
    lateral_accel: float = Field(
        8.0, gt=0.5, le=15.0, description="cornering limit of the speed profile at mu = 1 (m/s^2)"
    )
    brake_accel: float = Field(
        6.0, gt=0.5, le=15.0, description="deceleration assumed in braking zones at mu = 1 (m/s^2)"
    )
    drive_accel: float = Field(
        4.0, gt=0.1, le=15.0, description="acceleration assumed out of corners at mu = 1 (m/s^2)"
    )
    max_speed: float = Field(45.0, gt=1.0, le=100.0, description="speed cap (m/s)")
    curvature_window: float = Field(6.0, ge=0.0, le=50.0, description="half window (m) of the max-|curvature| filter")
    preview_time: float = Field(0.6, ge=0.0, le=5.0, description="the speed target is read this far ahead (s)")
    kp: float = Field(0.35, gt=0.0, le=10.0, description="speed PID proportional gain (1 per m/s)")
    ki: float = Field(0.08, ge=0.0, le=10.0, description="speed PID integral gain (1 per m)")
    kd: float = Field(0.02, ge=0.0, le=10.0, description="speed PID derivative gain (s per m/s)")
    brake_gain: float = Field(0.5, gt=0.0, le=5.0, description="brake command per unit of negative PID output")
    integral_limit: float = Field(5.0, ge=0.0, le=100.0, description="anti-windup clamp of the integral term (m)")
    pedal_deadband: float = Field(0.03, ge=0.0, le=0.5, description="|u| below this coasts (no throttle/brake chatter)")
    knows_ice: bool = Field(True, description="the speed profile slows for known friction patches (the map's mu)")
    ice_margin: float = Field(
        2.5, ge=0.0, le=10.0, description="lateral half band (m) around the centerline scanned for patches"
    )
    assume_mu: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="if set: the profile's friction everywhere (accelerations times it; map ice ignored)",
    )
    traction_control: bool = Field(
        True, description="its own traction control and ABS (s3.sim.aids), when the car has none"
    )
    slip_limit: float = Field(0.12, gt=0.0, le=1.0, description="allowed longitudinal wheel slip ratio")


class EvaluateParams(_Section):
    """Where, how often and how strictly drivers are evaluated in the source simulator."""

    tracks: list[str] = Field(
        default_factory=lambda: ["road_course", "street", "flowing"],
        description="the evaluation suite: built-in circuits (road_course, street, flowing, short) or paths to "
        "racing CSVs (x_m, y_m, w_tr_right_m, w_tr_left_m; ice from a <name>.ice.csv sidecar or placed by the "
        "documented rule)",
    )
    conditions: list[Literal["nominal", "ice"]] = Field(default_factory=lambda: ["nominal", "ice"])
    start_fractions: list[float] = Field(
        default_factory=lambda: [0.0, 0.25, 0.5, 0.75],
        description="start positions as fractions of the lap length (arc length from the start line)",
    )
    start_speed: float = Field(
        5.0, ge=0.0, le=40.0, description="initial forward speed (m/s), on the centerline along the road"
    )
    workers: int = Field(
        0, ge=0, le=256, description="runs at once, one simulator process each; 0 = one per core (BeamNG: always 1)"
    )
    max_lap_seconds: float = Field(600.0, gt=1.0, le=7200.0, description="a lap not finished by then is a time-out")
    off_track_tolerance: float = Field(
        0.0, ge=-3.0, le=10.0, description="car centre this far beyond the road edge (m) still counts as on track"
    )
    judge: JudgeParams = Field(
        default_factory=JudgeParams,
        description="when a run ends, in the source and inside a distilled model alike (s3.task.rules)",
    )
    out_dir: str = "records/eval"
    plot_dir: str = "plots/eval"
    gif: bool = Field(False, description="write a top-down animation of one lap (slow: off by default)")
    gif_frame_seconds: float = Field(2.0, gt=0.0, le=10.0, description="simulated seconds between GIF frames")
    gif_fps: int = Field(12, ge=1, le=60)
    pid: PidParams = PidParams()

    @model_validator(mode="after")
    def _check(self) -> EvaluateParams:
        if not self.conditions:
            raise ValueError("conditions needs at least one of 'nominal', 'ice'")
        if len(set(self.conditions)) != len(self.conditions):
            raise ValueError("conditions must not repeat")
        if not self.start_fractions or any(not 0.0 <= f < 1.0 for f in self.start_fractions):
            raise ValueError("start_fractions needs 1+ values in [0, 1)")
        if not self.tracks or len(set(self.tracks)) != len(self.tracks):
            raise ValueError("tracks needs 1+ distinct circuits")
        from s3.tracks.evaluation_circuits import BUILTIN

        for spec in self.tracks:
            if spec not in BUILTIN and not spec.endswith(".csv"):
                raise ValueError(
                    f"tracks: {spec!r} is neither a built-in circuit ({', '.join(BUILTIN)}) nor a .csv file"
                )
        if self.judge.off_track_distance <= self.off_track_tolerance:
            raise ValueError("judge.off_track_distance must exceed off_track_tolerance")
        return self


class TimeToQualityParams(_Section):
    """The time-to-quality curves (s3.evaluate.time_to_quality, claim 1): their hold-out set."""

    seed: int = Field(
        7,
        ge=0,
        le=2**31 - 1,
        description="generator seed of the hold-out set (7 = the set `s3 holdout` shows, looked at while recipes were "
        "chosen; params_study.yaml: 11, a seed no choice used)",
    )
