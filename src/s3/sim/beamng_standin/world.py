"""The simulated BeamNG level: scenarios, the one loaded, the simulation mode, the car, the ground.

Physics is the embedded `MujocoCar` (one car, one world shared by all sockets). A deterministic
step is 1 / fps s of MuJoCo time, a whole number of MuJoCo steps. The road of a scenario's
prefab becomes an `s3.tracks.track.Track` (`World.track`); the level is one flat surface whose
ground model (`surface`, "ASPHALT") gives the car its friction: mu = car default_mu * static
friction / original static friction. Wire conventions: world x/y/z unchanged; steering input
+1 = right; electrics `steering` = steering-wheel degrees (+ = left), `wheelspeed` = the mean
of the four wheels (m/s); the rotations are `rotation`'s. A rule broken by a request (no
scenario, wrong mode) raises `ProtocolError`, which the server answers with a bngError.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from s3.sim.base import Control
from s3.sim.beamng_standin.rotation import (
    bng_orientation,
    chassis_yaw,
    heading,
    object_rotation,
    teleport_rotation,
    yaw_from_matrix,
)
from s3.sim.beamng_standin.wire import ProtocolError
from s3.sim.mujoco_car import MujocoCar
from s3.sim.params import MujocoCarParams
from s3.tracks.friction_grid import FrictionGrid
from s3.tracks.track import Track, TrackError

STEERING_WHEEL_LOCK = 450.0  # deg of steering wheel at full input, the stand-in vehicle's
GROUND_MODELS = {  # name: (staticFrictionCoefficient, slidingFrictionCoefficient)
    "ASPHALT": (0.98, 0.70),
    "ICE": (0.10, 0.08),
    "GRASS": (0.70, 0.55),
}
_TRAILING_COMMA = re.compile(r",\s*([\]}])")


def parse_prefab(prefab: str) -> list[dict[str, Any]]:
    """The objects of a beamngpy prefab: one JSON object per line, trailing commas allowed."""
    objects = []
    for k, line in enumerate(prefab.splitlines()):
        if not line.strip():
            continue
        try:
            obj = json.loads(_TRAILING_COMMA.sub(r"\1", line))
        except json.JSONDecodeError as e:
            raise ProtocolError(f"CreateScenario: prefab line {k + 1} is not a scene object ({e.msg})") from None
        if not isinstance(obj, dict) or "class" not in obj:
            raise ProtocolError(f"CreateScenario: prefab line {k + 1} has no class")
        objects.append(obj)
    return objects


@dataclass
class Scenario:
    """A created scenario: its DecalRoad and BeamNGVehicle prefab objects."""

    level: str
    name: str
    path: str
    roads: list[dict[str, Any]]
    vehicles: list[dict[str, Any]]


@dataclass
class _Ramp:
    """SetVelocity in progress: forward speed from `start` to `target` m/s over `duration` s."""

    start: float
    target: float
    duration: float
    elapsed: float = 0.0


class World:
    """The level's state; the server calls it with its lock held, one request at a time."""

    def __init__(self, car_params: MujocoCarParams, surface: str = "ASPHALT") -> None:
        self.car_params = car_params
        self.surface = surface
        self.ground_models = {k: list(v) for k, v in GROUND_MODELS.items()}
        self._ground_models0 = {k: tuple(v) for k, v in GROUND_MODELS.items()}
        self.touched: set[str] = set()  # ground models the friction chunk scaled (its s3_mu0 keys)
        self.scenarios: dict[str, Scenario] = {}
        self.scenario: Scenario | None = None
        self.track: Track | None = None
        self.started = False
        self.paused = False
        self.deterministic = False
        self.fps: int | None = None
        self.car: MujocoCar | None = None
        self._car_fps: int | None = None
        self.control = {"steering": 0.0, "throttle": 0.0, "brake": 0.0, "parkingbrake": 0.0}
        self._ramp: _Ramp | None = None
        self._spawn = (0.0, 0.0, 0.0)
        self.steps_taken = 0
        self.friction_log: list[tuple[int, float]] = []  # (steps_taken, car mu) at each friction change

    @property
    def mu(self) -> float:
        """Peak friction the car currently gets from the surface."""
        static0 = self._ground_models0[self.surface][0]
        return self.car_params.default_mu * self.ground_models[self.surface][0] / static0

    # -- scenarios --------------------------------------------------------------------------
    def create_scenario(self, level: str, name: str, prefab: str) -> str:
        """Keep a scenario built from a prefab; its path, as BeamNG names it."""
        objects = parse_prefab(prefab)
        roads = [o for o in objects if o["class"] == "DecalRoad"]
        vehicles = [o for o in objects if o["class"] == "BeamNGVehicle"]
        for v in vehicles:
            if len(v.get("position", [])) != 3 or len(v.get("rotationMatrix", [])) != 9:
                raise ProtocolError(f"CreateScenario: vehicle {v.get('name')!r} lacks position or rotationMatrix")
        path = f"/levels/{level}/scenarios/{name}/{name}.json"
        self.scenarios[path] = Scenario(level, name, path, roads, vehicles)
        return path

    def load_scenario(self, path: Any) -> None:
        """Make the scenario at `path` the loaded one (not started); `spawn` then places its car."""
        sc = self.scenarios.get(path)
        if sc is None:
            raise ProtocolError(f"LoadScenario: no scenario at {path!r}")
        if len(sc.vehicles) != 1:
            raise ProtocolError(f"the stand-in simulates exactly one vehicle, the scenario has {len(sc.vehicles)}")
        self.scenario = sc
        self.track = self._road_track(sc)
        self.started = self.paused = False

    def spawn(self) -> None:
        """Put the loaded scenario's car at its prefab pose (now, if the step rate is known)."""
        v = self.vehicle()
        self._spawn = (float(v["position"][0]), float(v["position"][1]), yaw_from_matrix(v["rotationMatrix"]))
        if self.fps is not None:
            self._place(*self._spawn)

    def _road_track(self, sc: Scenario) -> Track | None:
        if not sc.roads:
            return None
        nodes = np.asarray(sc.roads[0].get("nodes", []), dtype=np.float64)
        if nodes.ndim != 2 or nodes.shape[1] != 4:
            raise ProtocolError("DecalRoad nodes must be [x, y, z, width] rows")
        try:
            return Track(sc.roads[0].get("name", "road"), nodes[:, :2], 0.5 * nodes[:, 3], 0.5 * nodes[:, 3])
        except TrackError as e:
            raise ProtocolError(f"road is not a drivable loop: {e}") from None

    def vehicle(self) -> dict[str, Any]:
        """The loaded scenario's one vehicle (its prefab object)."""
        if self.scenario is None:
            raise ProtocolError("no scenario loaded")
        return self.scenario.vehicles[0]

    def start_scenario(self) -> None:
        if self.scenario is None:
            raise ProtocolError("StartScenario: no scenario loaded")
        self.started, self.paused = True, False

    def stop_scenario(self) -> None:
        self.scenario, self.started = None, False

    def set_fps(self, fps: int) -> None:
        """Steps per second of a deterministic step; 1/fps must be whole MuJoCo steps."""
        n = 1.0 / fps / self.car_params.timestep
        if abs(n - round(n)) > 1e-9:
            raise ProtocolError(f"the stand-in needs 1/fps to be whole {self.car_params.timestep} s MuJoCo steps")
        self.fps = fps

    # -- simulation -------------------------------------------------------------------------
    def step(self, count: int) -> None:
        """Advance `count` deterministic steps under the current control (and SetVelocity ramp)."""
        if not self.started:
            raise ProtocolError("Step: no scenario running")
        if not (self.deterministic and self.fps):
            raise ProtocolError("Step: set deterministic mode and steps per second first")
        if not self.paused:
            raise ProtocolError("Step: pause the simulation first")
        car = self._car()
        cmd = Control(
            -float(self.control["steering"]), float(self.control["throttle"]), float(self.control["brake"])
        )  # BeamNG: +1 = right
        h = 1.0 / self.fps
        for _ in range(count):
            r = self._ramp
            if r is not None:  # the ramp's speed at mid-step: the distance covered is exact for a linear ramp
                self._set_forward_speed(r.start + (r.target - r.start) * min(1.0, (r.elapsed + 0.5 * h) / r.duration))
            car.step(cmd)
            self.steps_taken += 1
            if r is not None:
                r.elapsed += h
                if r.elapsed >= r.duration - 1e-9:
                    self._set_forward_speed(r.target)
                    self._ramp = None

    def teleport(self, x: float, y: float, rot: list[float] | None, safe_spawn: bool) -> None:
        """Teleport with reset: the car at rest at (x, y) with the object rotation techCore's
        handleTeleport gives it (rotation.teleport_rotation; safe_spawn turns it by 180 deg about z),
        heading where that rotation points its local -Y. The stand-in's ground is flat and empty,
        so safe_spawn moves nothing else."""
        current = object_rotation(chassis_yaw(self._car().data.qpos[3:7]))
        self._place(x, y, heading(teleport_rotation(rot, safe_spawn, current)))

    def ramp_speed(self, v: float, dt: float) -> None:
        """SetVelocity: ramp the forward speed linearly from now to v m/s over dt s of stepping
        (BeamNG applies forces; the ramp is the stand-in's model of them)."""
        st = self._car()._state()
        self._ramp = _Ramp(float(st.vx), float(v), float(dt))

    def scale_ground_model(self, gm: str, scale: float) -> None:
        """Scale a ground model's static and sliding friction to `scale` times the original;
        `apply_surface` then gives the car its new grip."""
        if gm not in self.ground_models:
            raise ProtocolError(f"Lua error: s3: unknown ground model {gm}")
        s0, k0 = self._ground_models0[gm]
        self.ground_models[gm] = [s0 * scale, k0 * scale]
        self.touched.add(gm)

    def ground_model_factors(self, gm: str) -> str:
        """The read-back chunk's answer: "static sliding" factors of ground model `gm` against the
        values first seen; "unset" before the friction chunk scaled it (or when it does not exist)."""
        if gm not in self.touched:  # s3_mu0 only holds ground models the friction chunk found
            return "unset"
        (s, k), (s0, k0) = self.ground_models[gm], self._ground_models0[gm]
        return f"{s / s0:.6f} {k / k0:.6f}"

    def apply_surface(self) -> None:
        """Give the car the surface's friction (logged in friction_log); no car yet: nothing."""
        if self.car is not None:
            self.car.set_friction_grid(FrictionGrid.uniform(self.mu))
            self.friction_log.append((self.steps_taken, self.mu))

    def _car(self) -> MujocoCar:
        """The car, built afresh when the step rate changed."""
        if self.fps is None:
            raise ProtocolError("set steps per second (FPSLimit) first")
        if self.car is None or self._car_fps != self.fps:
            self.car = MujocoCar(self.car_params, control_dt=1.0 / self.fps)
            self._car_fps = self.fps
            self.apply_surface()
            if self.scenario is not None:
                x, y, yaw = self._spawn
                self.car.reset(None, x, y, yaw, 0.0)
        return self.car

    def _place(self, x: float, y: float, yaw: float) -> None:
        car = self._car()
        car.reset(None, x, y, yaw, 0.0)
        self.control.update(steering=0.0, throttle=0.0, brake=0.0)
        self._ramp = None

    def _set_forward_speed(self, v: float) -> None:
        """SetVelocity's effect: the chassis' forward speed becomes v, wheels rolling with it."""
        car = self._car()
        d = car.data
        yaw = chassis_yaw(d.qpos[3:7])
        f = np.array([math.cos(yaw), math.sin(yaw)])
        d.qvel[0:2] += (v - float(d.qvel[0:2] @ f)) * f
        d.qvel[car._spin_dof] = v / car.params.wheel_radius

    # -- sensors ----------------------------------------------------------------------------
    def state_sensor(self) -> dict[str, Any]:
        """BeamNG's State sensor: time (s), pos, dir, up, vel (world frame, m and m/s), front
        (the nose's centre), rotation (x, y, z, w)."""
        car = self._car()
        d = car.data
        fwd, up, rotation = bng_orientation(d.qpos[3:7])
        pos = d.qpos[0:3]
        return {
            "time": float(d.time),
            "pos": [float(v) for v in pos],
            "dir": [float(v) for v in fwd],
            "up": [float(v) for v in up],
            "vel": [float(v) for v in d.qvel[0:3]],
            "front": [float(v) for v in pos + 0.5 * car.params.body_length * fwd],
            "rotation": rotation,
        }

    def electrics(self) -> dict[str, Any]:
        """BeamNG's Electrics sensor values for the car and its current inputs."""
        car = self._car()
        st = car._state()
        c = self.control
        return {
            "steering": st.steer / car.params.max_steer * STEERING_WHEEL_LOCK,
            "steering_input": c["steering"],
            "throttle": c["throttle"],
            "throttle_input": c["throttle"],
            "brake": c["brake"],
            "brake_input": c["brake"],
            "parkingbrake": c["parkingbrake"],
            "wheelspeed": float(np.mean(st.wheel_speed)),
            "airspeed": float(np.linalg.norm(car.data.qvel[0:3])),
            "gear": "D",
            "running": True,
        }
