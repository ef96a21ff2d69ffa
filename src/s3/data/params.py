"""Parameters of the `collect` stage and its exploration driver."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from s3.tracks.generate import ProceduralTrackParams


class DriverParams(BaseModel):
    """The exploration driver: pure pursuit plus speed PI, perturbed so the data covers the limit."""

    model_config = ConfigDict(extra="forbid")

    lookahead_gain: float = Field(0.6, gt=0, le=3, description="pure-pursuit lookahead per m/s of speed (s)")
    lookahead_min: float = Field(5.0, gt=0, le=50, description="shortest lookahead (m)")
    max_speed: tuple[float, float] = Field((12.0, 35.0), description="per-episode speed cap range (m/s)")
    lateral_accel: tuple[float, float] = Field(
        (4.0, 10.0), description="per-episode cornering target range (m/s^2): above ~9 the car slides"
    )
    knows_ice_prob: float = Field(0.5, ge=0, le=1, description="chance the driver slows for ice patches")
    line_offset: float = Field(0.35, ge=0, le=1, description="racing-line wander as a fraction of half-width")
    steer_noise: float = Field(0.08, ge=0, le=1, description="std of the Ornstein-Uhlenbeck steering noise")
    pedal_noise: float = Field(0.15, ge=0, le=1, description="std of the OU throttle/brake noise")
    noise_tau: float = Field(0.5, gt=0, le=10, description="OU noise correlation time (s)")
    event_rate: float = Field(0.15, ge=0, le=5, description="aggressive events per second")
    event_duration: tuple[float, float] = Field((0.4, 2.0), description="event length range (s)")
    speed_kp: float = Field(0.25, gt=0, le=5, description="speed PI proportional gain (1 per m/s)")
    speed_ki: float = Field(0.05, ge=0, le=5, description="speed PI integral gain")

    @model_validator(mode="after")
    def _ranges_ordered(self) -> DriverParams:
        for name in ("max_speed", "lateral_accel", "event_duration"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise ValueError(f"{name} must be an increasing pair of positive numbers, got [{lo}, {hi}]")
        return self


class CollectParams(BaseModel):
    """How much data, from which tracks, written where."""

    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(1150, ge=1, le=1_000_000)
    episode_steps: int = Field(300, ge=2, le=100_000, description="control steps per episode at most")
    episodes_per_shard: int = Field(25, ge=1, le=100_000)
    workers: int = Field(0, ge=0, le=256, description="simulator processes; 0 = one per core")
    n_tracks: int = Field(60, ge=1, le=100_000, description="size of the procedural track pool")
    ice_episode_fraction: float = Field(
        0.6, ge=0, le=1, description="share of episodes run with their track's friction patches"
    )
    start_speed: tuple[float, float] = Field((0.0, 25.0), description="initial speed range (m/s)")
    off_track_margin: float = Field(
        4.0, ge=0, le=100, description="episode ends once the car is this far outside the edge (m)"
    )
    out_dir: str = "data/rollouts"
    plot_dir: str = "plots/collect"
    tracks: ProceduralTrackParams = ProceduralTrackParams(
        patch_probability=1.0, patches_min=2, patches_max=6, patch_length_max=120.0
    )
    driver: DriverParams = DriverParams()

    @model_validator(mode="after")
    def _start_speed_ordered(self) -> CollectParams:
        lo, hi = self.start_speed
        if not 0 <= lo <= hi:
            raise ValueError(f"start_speed must be an increasing pair of non-negative numbers, got [{lo}, {hi}]")
        return self
