"""Parameters of the BeamNG.tech source simulator (`sim.backend: beamng`), reached through beamngpy.

Kept free of beamngpy imports so that validating params.yaml never pays beamngpy's import time.
The vehicle geometry fields (wheelbase, track width, steering) describe the BeamNG vehicle to s3:
the exploration driver and the per-wheel friction labels use them, and the steering angle is
converted with them. Their defaults equal the embedded MuJoCo car (which the protocol stand-in
drives); set them for the vehicle you use in BeamNG.tech.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

INSTANCE_RE = r"^[A-Za-z0-9_.\-]+:[0-9]{1,5}$"


class BeamngParams(BaseModel):
    """How to reach BeamNG.tech, what to spawn there, and how to realise ice patches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # connection
    host: str = Field("127.0.0.1", min_length=1, description="host of a running BeamNG.tech (its research port)")
    port: int = Field(25252, ge=1, le=65535, description="BeamNG.tech research port (-tport)")
    instances: tuple[str, ...] = Field(
        (),
        description="several running BeamNG.tech instances as host:port; collection and evaluation spread their "
        "episodes over them, one worker each (an instance that dies costs only its own episodes, re-run on the "
        "others); empty: host:port",
    )
    request_timeout: float = Field(
        60.0,
        gt=0.0,
        le=3600.0,
        description="s; a step, sensor poll or control without a reply in this time is a lost simulator",
    )
    load_timeout: float = Field(
        300.0, gt=0.0, le=7200.0, description="s; the same for loading a level or scenario (slow)"
    )
    bng_home: str | None = Field(
        None, description="BeamNG.tech install folder: if set and nothing listens on host:port, launch it there"
    )

    # scenario
    level: str = Field("smallgrid", min_length=1, description="a flat level; s3's track is laid out on it as a road")
    road_material: str = Field("track_editor_C_center", min_length=1, description="DecalRoad material of the track")
    origin: tuple[float, float, float] = Field(
        (0.0, 0.0, 0.0), description="world position (m) of s3's track origin in the level; z = ground height"
    )
    vehicle_model: str = Field("etk800", min_length=1, description="BeamNG vehicle model (jbeam name)")
    part_config: str | None = Field(None, description="optional .pc part configuration of the vehicle")
    vehicle_id: str = Field("s3_ego", pattern=r"^[A-Za-z0-9_]+$")
    shift_mode: Literal["arcade", "realistic_automatic", "realistic_manual", "realistic_manual_auto_clutch"] | None = (
        Field(None, description="gearbox mode sent once per scenario; None keeps BeamNG's default (arcade)")
    )

    # time
    steps_per_second: int = Field(
        100, ge=10, le=2000, description="deterministic-mode steps per simulated second; control_dt must be whole steps"
    )
    runup_time: float = Field(
        1.0, gt=0.0, le=30.0, description="s; a reset with speed > 0 accelerates the car (set_velocity) over this"
    )
    settle_steps: int = Field(
        2, ge=1, le=1000, description="steps run with zero inputs after a standstill teleport, before the state is read"
    )
    safe_spawn: bool = Field(True, description="let BeamNG put the teleported car onto the ground")

    # the self-check after every reset (docs/beamng.md): beyond these, the reset stops the stage
    check_position_m: float = Field(0.5, gt=0.0, le=50.0, description="m, asked vs read-back position")
    check_heading_deg: float = Field(5.0, gt=0.0, le=180.0, description="deg, asked vs read-back heading")
    check_speed_m_s: float = Field(0.5, gt=0.0, le=50.0, description="m/s, asked vs read-back forward speed")

    # surface friction
    friction_mode: Literal["lua", "level"] = Field(
        "lua",
        description="lua: scale ground_model's friction by GE Lua while the car's centre is on an ice patch; "
        "level: the level's own materials provide the ice (user-supplied level), nothing is sent",
    )
    ground_model: str = Field(
        "ASPHALT",
        pattern=r"^[A-Z0-9_]{1,31}$",
        description="ground model under the car that lua mode makes icy (BeamNG's upper-case name)",
    )

    # the vehicle as s3 sees it
    wheelbase: float = Field(2.7, ge=1.5, le=4.5, description="m")
    track_width: float = Field(1.6, ge=1.0, le=2.2, description="m, for the per-wheel friction labels")
    max_steer: float = Field(0.55, gt=0.05, le=1.0, description="rad, road-wheel angle at full steering input")
    steering_wheel_lock: float = Field(
        450.0, gt=0.0, le=1800.0, description="deg, steering-wheel angle at full input (the jbeam steeringWheelLock)"
    )

    @field_validator("instances")
    @classmethod
    def _instances(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        import re

        bad = [x for x in v if not re.fullmatch(INSTANCE_RE, x) or not 1 <= int(x.rsplit(":", 1)[1]) <= 65535]
        if bad:
            raise ValueError(f"each instance is host:port, e.g. 127.0.0.1:25252 (got {bad})")
        if len(set(v)) != len(v):
            raise ValueError(f"an instance is listed twice ({list(v)})")
        return v

    def addresses(self) -> tuple[str, ...]:
        """The instances to drive: `instances`, or host:port alone."""
        return self.instances or (f"{self.host}:{self.port}",)

    def at(self, address: str) -> BeamngParams:
        """These params pointed at one instance (host:port)."""
        host, port = address.rsplit(":", 1)
        return self.model_copy(update={"host": host, "port": int(port), "instances": ()})
