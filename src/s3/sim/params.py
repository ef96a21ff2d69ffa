"""The `sim:` section of params.yaml: which source simulator, its control period, the car's driver
aids, and the vehicle and physics parameters of the embedded MuJoCo car (a rear-wheel-drive sedan).

One validated model so that a config file or an experiment sweep cannot silently produce a car
that the physics loop cannot integrate (negative masses, a relaxation length of zero, ...).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from s3.sim.backends import sim_backend
from s3.sim.beamng_params import BeamngParams


class MujocoCarParams(BaseModel):
    """Everything the MJCF builder and the tyre kernel need; SI units, angles in radians."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # integration
    timestep: float = Field(0.002, gt=0.0, le=0.005, description="physics step, s (notes: 2 ms is the stable choice)")

    # mass and geometry
    mass: float = Field(1500.0, ge=500.0, le=4000.0, description="total vehicle mass, kg")
    unsprung_mass: float = Field(35.0, ge=5.0, le=150.0, description="per corner (upright + wheel), kg")
    yaw_inertia: float = Field(2700.0, ge=200.0, le=10000.0, description="sprung body Izz, kg m^2")
    pitch_inertia: float = Field(2500.0, ge=200.0, le=10000.0, description="sprung body Iyy, kg m^2")
    roll_inertia: float = Field(550.0, ge=50.0, le=3000.0, description="sprung body Ixx, kg m^2")
    wheelbase: float = Field(2.7, ge=1.5, le=4.5, description="m")
    front_weight_fraction: float = Field(0.55, ge=0.3, le=0.7, description="static load share on the front axle")
    track_width: float = Field(1.6, ge=1.0, le=2.2, description="m, same front and rear")
    cg_height: float = Field(0.5, ge=0.2, le=1.2, description="sprung centre of mass above the ground at rest, m")
    body_length: float = Field(4.7, ge=2.5, le=6.0, description="collision/visual box, m")
    body_width: float = Field(1.8, ge=1.2, le=2.5, description="m")
    body_height: float = Field(0.5, ge=0.2, le=1.5, description="collision/visual box, m")
    wheel_radius: float = Field(0.33, ge=0.2, le=0.6, description="m (sphere wheels)")
    wheel_inertia: float = Field(1.0, ge=0.2, le=5.0, description="spin inertia per wheel, kg m^2")

    # suspension (per corner)
    suspension_stiffness: float = Field(50000.0, ge=5000.0, le=300000.0, description="N/m")
    suspension_damping: float = Field(3500.0, ge=200.0, le=30000.0, description="N s/m")
    suspension_travel: float = Field(0.12, ge=0.03, le=0.3, description="bump and rebound from static, m")

    # steering (road-wheel angles)
    max_steer: float = Field(0.55, gt=0.05, le=0.8, description="rad")
    steer_rate: float = Field(1.0, gt=0.05, le=5.0, description="rad/s, road wheel")
    ackermann: float = Field(
        1.0, ge=0.0, le=1.0, description="0 parallel steer, 1 full Ackermann (inner wheel steers more)"
    )
    steer_kp: float = Field(5000.0, gt=0.0, le=100000.0, description="steering servo stiffness, N m/rad")
    steer_kv: float = Field(120.0, gt=0.0, le=5000.0, description="steering servo damping, N m s/rad")

    # powertrain: rear-wheel drive through an open differential (equal torque per side)
    drive_torque_max: float = Field(1700.0, gt=0.0, le=10000.0, description="peak total wheel torque, N m")
    drive_power_max: float = Field(105000.0, gt=0.0, le=1000000.0, description="W at the wheels")
    max_wheel_speed: float = Field(70.0, gt=5.0, le=150.0, description="rev limit as driven-wheel rim speed, m/s")
    brake_torque_max: float = Field(10000.0, gt=0.0, le=30000.0, description="all four wheels together, N m")
    brake_bias_front: float = Field(0.7, ge=0.0, le=1.0, description="front share of brake torque")

    # resistances
    drag_area: float = Field(0.7, ge=0.0, le=3.0, description="Cd * A, m^2")
    air_density: float = Field(1.2, ge=0.0, le=2.0, description="kg/m^3")
    rolling_resistance: float = Field(0.012, ge=0.0, le=0.1, description="coefficient (torque = c Fz R)")

    # tyre: Magic Formula F = mu Fz sin(C atan(B s - E (B s - atan(B s)))) on the combined slip s
    mf_b: float = Field(10.0, gt=1.0, le=30.0, description="stiffness factor")
    mf_c: float = Field(1.9, gt=1.0, le=2.0, description="shape factor")
    mf_e: float = Field(0.97, ge=-2.0, le=1.0, description="curvature factor")
    relax_long: float = Field(0.2, gt=0.01, le=2.0, description="longitudinal relaxation length, m")
    relax_lat: float = Field(0.4, gt=0.01, le=2.0, description="lateral relaxation length, m")
    low_speed: float = Field(2.0, gt=0.1, le=10.0, description="below this the slip damping fades in, m/s")
    low_speed_damping: float = Field(1500.0, ge=0.0, le=4000.0, description="slip damping at rest, N s/m per wheel")
    default_mu: float = Field(1.0, gt=0.0, le=2.0, description="peak friction when no track is given")
    friction_grid_res: float = Field(0.25, gt=0.01, le=5.0, description="raster cell of the friction map, m")


class DriverAidsParams(BaseModel):
    """The `sim.driver_aids:` section. The class default is the bare car (both off); params.yaml's
    default (SimParams) turns both on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    traction_control: bool = Field(False, description="cut throttle while a driven (rear) wheel spins")
    abs: bool = Field(False, description="ease the brakes while a wheel locks")
    slip_limit: float = Field(0.12, gt=0.0, le=1.0, description="allowed longitudinal wheel slip ratio")
    min_speed: float = Field(2.0, ge=0.0, le=20.0, description="below this forward speed (m/s) the aids stay out")

    @property
    def enabled(self) -> bool:
        return self.traction_control or self.abs


class SimParams(BaseModel):
    """Which source simulator, its control period, and the car's driver aids (the same car for every stage)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["mujoco", "beamng"] = "mujoco"
    control_dt: float = Field(0.1, gt=0.0, le=1.0, description="control period (s)")
    mujoco: MujocoCarParams = MujocoCarParams()
    beamng: BeamngParams = BeamngParams()
    driver_aids: DriverAidsParams = Field(
        default_factory=lambda: DriverAidsParams(traction_control=True, abs=True),
        description="traction control / ABS of the one car everything drives: collection, probes, direct, "
        "evaluation (s3.sim.aids); both off = the bare car (an ablation). The embedded car only: a BeamNG vehicle "
        "brings its own ESC / ABS (its part config)",
    )

    def aids(self) -> DriverAidsParams | None:
        """s3's driver aids on this backend's car, or None: off, or BeamNG, whose vehicles carry their
        own (jbeam ESC / ABS; s3's slip-based aids would need the per-wheel speeds BeamNG's
        electrics do not report)."""
        return self.driver_aids if sim_backend(self).driver_aids and self.driver_aids.enabled else None

    @model_validator(mode="after")
    def _whole_physics_steps(self) -> SimParams:
        sim_backend(self).check_control_dt(self)
        return self
