"""MJCF of the embedded car: a sprung chassis on four suspended, steerable, spinning wheels.

MuJoCo only supplies the rigid-body dynamics, the suspension and the vertical wheel contacts;
every horizontal tyre force comes from the slip model in `s3.sim.tyre`. Wheel and ground
contacts are therefore frictionless (condim=1 on both, since MuJoCo uses the larger condim of a
pair): MuJoCo's own contact friction makes sliding tyres hop (see NOTES.md). Wheels are spheres
because cylinders flip between one and two contacts as they tilt.
"""

from __future__ import annotations

import math

from s3.sim.params import MujocoCarParams

GRAVITY = 9.81
WHEELS = ("fl", "fr", "rl", "rr")
FRONT = ("fl", "fr")
WHEEL_MASS_SHARE = 0.6  # of the unsprung corner mass; the rest is the upright
CLEARANCE = 0.15  # chassis box bottom above the ground at rest, m
# brakes are joint friction: the hardest constraint MuJoCo allows keeps a locked wheel's creep
# (rotation under a torque below the brake's limit) near 1 mm/s instead of 0.5 m/s
BRAKE_SOLIMP = "0.999 0.9999 0.001"


def axle_positions(p: MujocoCarParams) -> tuple[float, float]:
    """Longitudinal positions (front, rear) of the axles relative to the centre of mass."""
    a = (1.0 - p.front_weight_fraction) * p.wheelbase
    return a, a - p.wheelbase


def max_wheel_steer(p: MujocoCarParams) -> float:
    """Largest road-wheel angle of either front wheel: the inner one at full lock with Ackermann."""
    t = math.tan(p.max_steer)
    inner = math.atan(p.wheelbase * t / (p.wheelbase - 0.5 * p.track_width * t))
    return p.max_steer + p.ackermann * (inner - p.max_steer)


def corner_spring_loads(p: MujocoCarParams) -> dict[str, float]:
    """Static spring force per corner (the sprung weight it carries), N."""
    front = 0.5 * p.mass * GRAVITY * p.front_weight_fraction - p.unsprung_mass * GRAVITY
    rear = 0.5 * p.mass * GRAVITY * (1.0 - p.front_weight_fraction) - p.unsprung_mass * GRAVITY
    return {w: (front if w in FRONT else rear) for w in WHEELS}


def _corner(p: MujocoCarParams, w: str, x: float, y: float, z: float, spring_load: float) -> str:
    """One corner: suspension slide (q=0 is the static ride height), optional steer hinge, wheel."""
    travel = p.suspension_travel
    steer = ""
    if w in FRONT:
        lim = max_wheel_steer(p) + 0.05
        steer = f'<joint name="steer_{w}" type="hinge" axis="0 0 1" range="{-lim} {lim}" armature="0.05"/>'
    upright = (1.0 - WHEEL_MASS_SHARE) * p.unsprung_mass
    wheel = WHEEL_MASS_SHARE * p.unsprung_mass
    side = 0.6 * p.wheel_inertia
    r = p.wheel_radius
    return f"""
      <body name="corner_{w}" pos="{x} {y} {z}">
        <inertial pos="0 0 0" mass="{upright}" diaginertia="0.3 0.3 0.3"/>
        <joint name="susp_{w}" type="slide" axis="0 0 1" range="{-travel} {travel}"
               stiffness="{p.suspension_stiffness}" damping="{p.suspension_damping}"
               springref="{-spring_load / p.suspension_stiffness}"/>
        {steer}
        <body name="wheel_{w}">
          <inertial pos="0 0 0" mass="{wheel}" diaginertia="{side} {p.wheel_inertia} {side}"/>
          <joint name="spin_{w}" type="hinge" axis="0 1 0" solreffriction="{2 * p.timestep} 1"
                 solimpfriction="{BRAKE_SOLIMP}"/>
          <geom name="tyre_{w}" type="sphere" size="{r}" condim="1" contype="1" conaffinity="0" rgba=".1 .1 .1 1"/>
          <site name="patch_{w}" type="sphere" size="{1.1 * r}" rgba="0 0 0 0"/>
        </body>
      </body>"""


def build_mjcf(p: MujocoCarParams) -> str:
    """The MJCF string; the chassis frame origin is the sprung centre of mass."""
    xf, xr = axle_positions(p)
    half_t = 0.5 * p.track_width
    zc = p.wheel_radius - p.cg_height  # wheel centre relative to the centre of mass
    loads = corner_spring_loads(p)
    where = {"fl": (xf, half_t), "fr": (xf, -half_t), "rl": (xr, half_t), "rr": (xr, -half_t)}
    corners = "".join(_corner(p, w, *where[w], zc, loads[w]) for w in WHEELS)
    sprung = p.mass - 4.0 * p.unsprung_mass
    box_z = CLEARANCE + 0.5 * p.body_height - p.cg_height
    box_x = 0.5 * (xf + xr)
    box_size = f"{0.5 * p.body_length} {0.5 * p.body_width} {0.5 * p.body_height}"  # half extents, m
    steer_act = "".join(
        f'<position name="steer_{w}" joint="steer_{w}" kp="{p.steer_kp}" kv="{p.steer_kv}" '
        f'ctrlrange="{-max_wheel_steer(p)} {max_wheel_steer(p)}"/>'
        for w in FRONT
    )
    touch = "".join(f'<touch name="touch_{w}" site="patch_{w}"/>' for w in WHEELS)
    return f"""<mujoco model="s3_car">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{p.timestep}" integrator="implicitfast" solver="Newton" cone="elliptic"
          impratio="10" jacobian="dense" gravity="0 0 {-GRAVITY}">
    <flag autoreset="disable"/>
  </option>
  <worldbody>
    <geom name="ground" type="plane" size="0 0 1" condim="1" contype="0" conaffinity="1" rgba=".5 .5 .5 1"/>
    <body name="chassis" pos="0 0 {p.cg_height}">
      <freejoint name="root"/>
      <inertial pos="0 0 0" mass="{sprung}" diaginertia="{p.roll_inertia} {p.pitch_inertia} {p.yaw_inertia}"/>
      <geom name="body" type="box" pos="{box_x} 0 {box_z}" size="{box_size}"
            condim="1" contype="1" conaffinity="0" rgba=".7 .1 .1 1"/>{corners}
    </body>
  </worldbody>
  <actuator>{steer_act}</actuator>
  <sensor>{touch}</sensor>
</mujoco>
"""
