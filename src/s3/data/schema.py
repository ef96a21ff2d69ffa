"""The rollout table: one row per control step, units in the schema itself.

Row t holds the state measured at `time` and the command applied from `time` to `time + dt`;
the next row of the same episode is the state that command produced. The last row of an
episode has no successor. Every row is finite: episodes that produced NaN/inf are dropped.
"""

from __future__ import annotations

import pyarrow as pa

# name -> (arrow type, unit, description)
COLUMNS: dict[str, tuple[pa.DataType, str, str]] = {
    "episode": (pa.int64(), "", "episode id, unique in the dataset"),
    "step": (pa.int32(), "", "control step within the episode, from 0"),
    "time": (pa.float64(), "s", "time since the episode start"),
    "track_id": (pa.string(), "", "track the episode ran on"),
    "x": (pa.float64(), "m", "world x (east)"),
    "y": (pa.float64(), "m", "world y (north)"),
    "yaw": (pa.float64(), "rad", "heading, counter-clockwise from +x, wrapped to (-pi, pi]"),
    "vx": (pa.float64(), "m/s", "body-frame forward velocity"),
    "vy": (pa.float64(), "m/s", "body-frame leftward velocity"),
    "yaw_rate": (pa.float64(), "rad/s", "yaw rate, counter-clockwise positive"),
    "steer": (pa.float64(), "rad", "measured road-wheel steering angle, left positive"),
    "wheel_speed_fl": (pa.float64(), "m/s", "front-left wheel angular speed times radius"),
    "wheel_speed_fr": (pa.float64(), "m/s", "front-right wheel angular speed times radius"),
    "wheel_speed_rl": (pa.float64(), "m/s", "rear-left wheel angular speed times radius"),
    "wheel_speed_rr": (pa.float64(), "m/s", "rear-right wheel angular speed times radius"),
    "steering_cmd": (pa.float64(), "1", "steering command in [-1, 1], left positive"),
    "throttle_cmd": (pa.float64(), "1", "throttle command in [0, 1]"),
    "brake_cmd": (pa.float64(), "1", "brake command in [0, 1]"),
    "mu_fl": (pa.float64(), "1", "peak friction under the front-left wheel"),
    "mu_fr": (pa.float64(), "1", "peak friction under the front-right wheel"),
    "mu_rl": (pa.float64(), "1", "peak friction under the rear-left wheel"),
    "mu_rr": (pa.float64(), "1", "peak friction under the rear-right wheel"),
    "mu_mean": (pa.float64(), "1", "mean of the four: the surface label"),
    "s": (pa.float64(), "m", "arc length of the projection on the centerline"),
    "lateral_offset": (pa.float64(), "m", "signed distance from the centerline, left positive"),
    "off_track": (pa.bool_(), "", "true when the car's centre is outside the track edges"),
}

STATE_COLUMNS = ["vx", "vy", "yaw_rate", "steer"]
WHEEL_COLUMNS = ["wheel_speed_fl", "wheel_speed_fr", "wheel_speed_rl", "wheel_speed_rr"]
COMMAND_COLUMNS = ["steering_cmd", "throttle_cmd", "brake_cmd"]
MU_COLUMNS = ["mu_fl", "mu_fr", "mu_rl", "mu_rr"]
SCHEMA_VERSION = 1


def arrow_schema() -> pa.Schema:
    """The Parquet schema, with each column's unit and meaning in its field metadata."""
    fields = [
        pa.field(name, typ, nullable=False, metadata={"unit": unit, "description": desc})
        for name, (typ, unit, desc) in COLUMNS.items()
    ]
    return pa.schema(fields, metadata={"s3_schema_version": str(SCHEMA_VERSION)})
