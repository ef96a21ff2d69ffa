"""BeamNG.tech as an s3 source simulator, driven through the public API of beamngpy 1.36.

Connection. `BeamNGpy(host, port, quit_on_close=False, socket_timeout=...).open(launch=False)`
attaches to a BeamNG.tech that is already running with its research port open (when
`bng_home` is set and nothing answers, beamngpy launches that install instead). beamngpy 1.36
speaks protocol "v1.27" and pairs with BeamNG.tech 0.39. `close()` disconnects and leaves the
simulator running.

Scenario. Each track geometry becomes one scenario (s3.sim.beamng_wire.track_scenario): a looped
road and the vehicle on a flat level. A track and its patch-free copy share the geometry, so they
share the scenario; a new geometry costs a scenario load. Off-track, progress and all metrics come from s3's own
`Track`, never from BeamNG.

Time. Deterministic mode at `steps_per_second`; the simulation stays paused and one control
period is `control_dt * steps_per_second` steps (`bng.control.step`). State time counts control
periods since the last reset.

Conventions, BeamNG -> s3 (`s3.sim.base`):
- World: BeamNG is right-handed, z up, metres; its x/y are used unchanged (minus `origin`), so
  s3's x east / y north are the level's +x/+y.
- Vehicle frame: a vehicle faces its local -Y (spawn.lua `localVehForward`). BeamNG's Lua
  rotates a vector by a quaternion with the inverse of the textbook formula (mathlib.lua), and
  safe_spawn turns a teleport's rotation by 180 deg about z first (spawn.safeTeleport); the
  rotation sent for s3 yaw psi is therefore `yaw_to_rot_quat(psi, safe_spawn)` (docs/beamng.md,
  "Conventions", has the sources and the worked examples). Every reset is read back and checked.
- State sensor: `dir` (unit forward vector) and `vel` (m/s) are world frame; `pos` is the
  vehicle's reference node. yaw = atan2(dir_y, dir_x); vx, vy = vel projected on the horizontal
  forward and left axes (the same projection the MuJoCo car uses).
- Yaw rate: the State sensor has no angular velocity. Each control period is stepped as
  (n - 1) steps, a State poll, 1 step, a full poll; yaw_rate = wrap(yaw_end - yaw_before) *
  steps_per_second, the mean over the last step (10 ms at 100 steps/s), i.e. half a step late.
- Steering input: BeamNG's `steering` input is +1 = full RIGHT (vehicle-Lua `input.event`, as in
  BeamNG's AI: `steering = asin(rightVec . target)`), so s3's command (+1 = left) is negated.
- Steering angle: electrics `steering` is the steering-wheel angle in degrees, + = LEFT
  (hydros.lua: `-state_in_input_space * steeringWheelLock`). s3's road-wheel angle is
  `steering / steering_wheel_lock * max_steer` (linear rack assumed); without it,
  `-steering_input * max_steer`.
- Wheel speeds: electrics `wheelspeed` is one value (m/s) for the whole car; it is repeated for
  fl, fr, rl, rr.
- Friction labels: s3's `track.friction_at` at approximate wheel positions (centre +-
  wheelbase/2 forward, +- track_width/2 left), not what BeamNG's surface is.

Reset. `bng.vehicles.teleport(..., reset=True)` resets the vehicle (inputs and velocity) at a
pose. beamngpy cannot set a velocity instantly: `vehicle.set_velocity(v, dt)` accelerates the
car with forces over dt seconds. A reset with speed v > 0 therefore teleports the car
v * T / 2 behind the requested pose on the requested heading (T = max(runup_time, v / 30)),
calls set_velocity(v, T) and steps T seconds with zero inputs; the car arrives at about the
requested pose (straight line, exact heading and lateral position, longitudinal error of the
order of v / (2 steps_per_second)) at about speed v. The run-up happens on the default surface.

Ice patches: the friction Lua chunks of s3.sim.beamng_wire (`friction_mode: lua`), or a level
whose materials are icy where s3's track has patches (`friction_mode: level`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from s3.sim.base import Control, SimulatorError, SimulatorLost, SimulatorRejected, VehicleState
from s3.sim.beamng_params import BeamngParams
from s3.sim.beamng_wire import (
    FRICTION_CHECK_TOLERANCE,
    friction_check_lua,
    friction_lua,
    geometry_key,
    set_socket_timeout,
    sim_version,
    track_scenario,
    wrap_angle,
    yaw_to_rot_quat,
)

if TYPE_CHECKING:
    from s3.tracks.track import Track

SET_VELOCITY_MAX_PER_S = 30.0  # beamngpy: dt = 1 s suits velocities up to 30 m/s


class BeamngMismatch(SimulatorError):
    """BeamNG did not do what s3 asked (a reset's pose or speed, an ice switch): a convention or a
    setting is wrong, and would be wrong again, so the stage stops (never retried)."""


class BeamngSim:
    """BeamNG.tech behind `s3.sim.base.SourceSim` (see the module docstring for conventions)."""

    name = "beamng"

    def __init__(self, params: BeamngParams | None = None, control_dt: float = 0.1) -> None:
        self.params = p = params or BeamngParams()
        self.control_dt = float(control_dt)
        self.steps = int(round(self.control_dt * p.steps_per_second))
        if self.steps < 1 or abs(self.steps - self.control_dt * p.steps_per_second) > 1e-6:
            raise ValueError(f"control_dt {control_dt} s is not a whole number of 1/{p.steps_per_second} s steps")
        self.wheelbase = p.wheelbase
        self.max_steer = p.max_steer
        self.version = sim_version()
        self._origin = np.array(p.origin[:2], dtype=np.float64)
        self._bng: Any = None
        self._vehicle: Any = None
        self._scenario_key: str | None = None
        self._track: Track | None = None
        self._scale = 1.0  # friction factor currently applied to ground_model (lua mode)
        self._k = 0  # control periods since reset
        self._mu_centre = 1.0  # s3 friction at the car's centre in the last state
        self._yaw_prev = 0.0
        self.lua_sent: list[str] = []  # friction chunks sent, in order (for inspection)
        self._connect()

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> None:
        from beamngpy import BeamNGpy

        p = self.params
        bng = BeamNGpy(p.host, p.port, home=p.bng_home, quit_on_close=False, socket_timeout=p.request_timeout)
        try:
            bng.open(launch=p.bng_home is not None)
        except Exception as e:
            raise SimulatorLost(
                f"cannot reach BeamNG.tech at {p.host}:{p.port} ({type(e).__name__}: {e}); start it with its "
                f"research port open (BeamNG.tech -tcom -tport {p.port}) or set sim.beamng.bng_home"
            ) from None
        self._bng = bng
        self._scenario_key = None
        self._scale = 1.0

    def _ensure_scenario(self, track: Track) -> None:
        """Load a scenario with `track`'s road unless the current one already has its geometry."""
        key = geometry_key(track)
        if key == self._scenario_key:
            return
        p, bng = self.params, self._bng
        self._set_friction(1.0)  # the ground model outlives the scenario
        if self._vehicle is not None:
            self._vehicle.disconnect()
            self._vehicle = None
        scenario, vehicle = track_scenario(track, key, p)
        set_socket_timeout(bng.connection, p.load_timeout, "the BeamNG.tech connection")
        scenario.make(bng)
        bng.scenario.load(scenario)
        bng.scenario.start()
        set_socket_timeout(bng.connection, p.request_timeout, "the BeamNG.tech connection")
        set_socket_timeout(
            getattr(vehicle, "connection", None), p.request_timeout, f"vehicle {p.vehicle_id}'s connection"
        )
        bng.settings.set_deterministic(p.steps_per_second)
        bng.control.pause()
        if p.shift_mode is not None:
            vehicle.set_shift_mode(p.shift_mode)
        self._vehicle = vehicle
        self._scenario_key = key
        self._set_friction(1.0, force=True)  # the ground model exists and answers, before any episode

    # -- SourceSim -------------------------------------------------------------------------
    def reset(self, track: Track, x: float, y: float, yaw: float, speed: float) -> VehicleState:
        """Teleport the car to (x, y, yaw) on `track` (loading its road if new) moving at `speed`."""
        try:
            if self._bng is None:
                self._connect()
            self._ensure_scenario(track)
            self._track = track
            self._set_friction(1.0)
            p, veh = self.params, self._vehicle
            speed = max(0.0, float(speed))
            runup = max(p.runup_time, speed / SET_VELOCITY_MAX_PER_S) if speed > 0.05 else 0.0
            back = 0.5 * speed * runup  # the run-up starts this far behind the pose (0 at standstill)
            x0, y0 = x - back * math.cos(yaw), y - back * math.sin(yaw)
            self._teleport(x0, y0, yaw)
            veh.control(steering=0.0, throttle=0.0, brake=0.0, parkingbrake=0.0)
            yaw_rate = self._advance(p.settle_steps)  # BeamNG carries out the teleport before anything else
            self.check_reset(veh.sensors["state"], x0, y0, yaw, 0.0, "teleport")
            if runup > 0.0:  # the speed only once the pose has taken effect
                veh.set_velocity(speed, runup)
                yaw_rate = self._advance(max(1, int(round(runup * p.steps_per_second))))
                self.check_reset(veh.sensors["state"], x, y, yaw, speed, f"run-up to {speed:g} m/s")
            self._k = 0
            state = self._state(yaw_rate)
            self._update_friction()
            return state
        except SimulatorError:
            self._drop()
            raise
        except Exception as e:
            self._drop()
            raise _classify("reset", e) from None

    def step(self, control: Control) -> VehicleState:
        """Hold `control` for one control period of deterministic steps; return the new state."""
        if self._vehicle is None:
            raise SimulatorError("BeamNG: step() before reset()")
        try:
            # BeamNG steering input is +1 = right; s3's is +1 = left
            self._vehicle.control(steering=-control.steering, throttle=control.throttle, brake=control.brake)
            yaw_rate = self._advance(self.steps)
            self._k += 1
            state = self._state(yaw_rate)
            self._update_friction()
            return state
        except SimulatorError:
            self._drop()
            raise
        except Exception as e:
            self._drop()
            raise _classify("step", e) from None

    def switch_friction(self, scale: float) -> None:
        """Scale `ground_model` to `scale` now and read it back (lua mode; `s3 beamng check`)."""
        try:
            self._set_friction(scale)
        except SimulatorError:
            raise
        except Exception as e:
            raise _classify("ice switch", e) from None

    def close(self) -> None:
        """Restore the ground model, disconnect; BeamNG.tech keeps running (quit_on_close=False)."""
        if self._bng is None:
            return
        try:
            self._set_friction(1.0)
        except Exception:
            pass
        try:
            self._bng.close()
        except Exception:
            pass
        self._bng = self._vehicle = None
        self._scenario_key = None

    # -- the self-check ----------------------------------------------------------------------
    def check_reset(self, state: dict[str, Any], x: float, y: float, yaw: float, speed: float, what: str) -> None:
        """Stop (BeamngMismatch, never retried) when BeamNG's State sensor does not show the pose
        and forward speed a reset asked for, within `check_heading_deg`, `check_speed_m_s`,
        `check_position_m` (checked in that order); the message names the mismatch and its likely cause
        (docs/beamng.md)."""
        p = self.params
        pos, vel, got_yaw = self._pose(state)
        turn = math.degrees(wrap_angle(got_yaw - yaw))
        if abs(turn) > p.check_heading_deg:
            cause = (
                "rotation convention"
                if abs(wrap_angle(got_yaw + yaw)) < math.radians(p.check_heading_deg)
                or abs(abs(turn) - 180.0) < p.check_heading_deg
                else "heading"
            )
            raise BeamngMismatch(
                f"BeamNG reset ({what}): asked heading {math.degrees(yaw):.1f} deg, got {math.degrees(got_yaw):.1f} "
                f"deg: {cause}"
            )
        forward = math.cos(got_yaw) * vel[0] + math.sin(got_yaw) * vel[1]
        if abs(forward - speed) > p.check_speed_m_s:
            raise BeamngMismatch(
                f"BeamNG reset ({what}): asked {speed:.2f} m/s forward, got {forward:.2f} m/s "
                f"(> sim.beamng.check_speed_m_s {p.check_speed_m_s:g}): set_velocity"
            )
        off = float(np.hypot(pos[0] - x, pos[1] - y))
        if off > p.check_position_m:
            raise BeamngMismatch(
                f"BeamNG reset ({what}): asked ({x:.2f}, {y:.2f}) m, got ({pos[0]:.2f}, {pos[1]:.2f}) m, {off:.2f} "
                f"m away (> sim.beamng.check_position_m {p.check_position_m:g}): origin or safe_spawn"
            )

    # -- internals -------------------------------------------------------------------------
    def _drop(self) -> None:
        """After a failure the connection state is unknown: reconnect at the next reset."""
        bng, self._bng, self._vehicle, self._scenario_key = self._bng, None, None, None
        if bng is not None:
            try:
                bng.disconnect()
            except Exception:
                pass

    def _teleport(self, x: float, y: float, yaw: float) -> None:
        p = self.params
        pos = (float(x + p.origin[0]), float(y + p.origin[1]), float(p.origin[2]))
        ok = self._bng.vehicles.teleport(
            self._vehicle, pos, rot_quat=yaw_to_rot_quat(yaw, p.safe_spawn), reset=True, safe_spawn=p.safe_spawn
        )
        if not ok:
            raise SimulatorError(f"BeamNG refused to teleport the vehicle to {pos}")

    def _advance(self, n: int) -> float:
        """Step n deterministic steps; return the yaw rate over the last one (rad/s)."""
        bng, veh = self._bng, self._vehicle
        if n > 1:
            bng.control.step(n - 1)
            veh.sensors.poll("state")
            before = self._yaw(veh.sensors["state"])
            bng.control.step(1)
            veh.sensors.poll()
            return wrap_angle(self._yaw(veh.sensors["state"]) - before) * self.params.steps_per_second
        bng.control.step(1)
        veh.sensors.poll()
        return wrap_angle(self._yaw(veh.sensors["state"]) - self._yaw_prev) * self.params.steps_per_second

    @staticmethod
    def _yaw(state: dict[str, Any]) -> float:
        d = state.get("dir")
        if d is None or len(d) < 2:
            raise SimulatorError("BeamNG State sensor returned no direction")
        return math.atan2(float(d[1]), float(d[0]))

    def _pose(self, state: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, float]:
        """From a State sensor reading: s3 position [2] (m, minus `origin`), world velocity [3] (m/s), yaw (rad)."""
        try:
            pos = np.asarray(state["pos"], dtype=np.float64)[:2] - self._origin
            vel = np.asarray(state["vel"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as e:
            raise SimulatorError(f"BeamNG State sensor incomplete: {e}") from None
        return pos, vel, self._yaw(state)

    def _state(self, yaw_rate: float) -> VehicleState:
        p = self.params
        st, el = self._vehicle.sensors["state"], self._vehicle.sensors["electrics"]
        pos, vel, yaw = self._pose(st)
        self._yaw_prev = yaw
        c, s = math.cos(yaw), math.sin(yaw)
        if "steering" in el:
            steer = float(el["steering"]) / p.steering_wheel_lock * p.max_steer
        else:
            steer = -float(el.get("steering_input", 0.0)) * p.max_steer
        ws = float(el.get("wheelspeed", math.nan))
        x, y = float(pos[0]), float(pos[1])
        mu = self._wheel_mu(x, y, yaw)
        self._mu_centre = float(mu[4])
        return VehicleState(
            time=self._k * self.control_dt,
            x=x,
            y=y,
            yaw=yaw,
            vx=float(c * vel[0] + s * vel[1]),
            vy=float(-s * vel[0] + c * vel[1]),
            yaw_rate=float(yaw_rate),
            steer=steer,
            wheel_speed=np.full(4, ws),
            friction=mu[:4],
        )

    def _wheel_mu(self, x: float, y: float, yaw: float) -> np.ndarray:
        """s3's friction at fl, fr, rl, rr (approximate wheel positions) and at the centre."""
        p = self.params
        f = np.array([math.cos(yaw), math.sin(yaw)])
        left = np.array([-f[1], f[0]])
        a, b = 0.5 * p.wheelbase, 0.5 * p.track_width
        pts = np.array([a * f + b * left, a * f - b * left, -a * f + b * left, -a * f - b * left, 0 * f]) + [x, y]
        if self._track is None:
            return np.ones(5)
        return self._track.friction_at(pts)

    def _update_friction(self) -> None:
        if self.params.friction_mode != "lua" or self._track is None:
            return
        self._set_friction(self._mu_centre / self._track.base_mu)

    def _set_friction(self, scale: float, force: bool = False) -> None:
        """Scale `ground_model` to `scale` x its first-seen friction (GE Lua, with a response, so a
        Lua error is BeamNG's bngError: SimulatorRejected), then read the engine's copy back.
        `force`: even when s3 believes it is already at `scale` (a new scenario: check it)."""
        if self.params.friction_mode != "lua" or (abs(scale - self._scale) < 1e-9 and not force) or self._bng is None:
            return
        gm = self.params.ground_model
        chunk = friction_lua(gm, scale)
        self._bng.control.queue_lua_command(chunk, response=True)
        self.lua_sent.append(chunk)
        self._scale = scale
        got = self._bng.control.queue_lua_command(friction_check_lua(gm), response=True)
        try:
            factors = [float(v) for v in str(got).split()]
        except ValueError:
            factors = []
        if len(factors) != 2:
            raise BeamngMismatch(
                f"BeamNG ice: the engine has no ground model {gm} ({got!r}): set sim.beamng.ground_model to the one "
                "under the road (docs/beamng.md)"
            )
        if max(abs(f - scale) for f in factors) > FRICTION_CHECK_TOLERANCE:
            raise BeamngMismatch(
                f"BeamNG ice: asked {gm} friction x{scale:.4f}, the engine has x{factors[0]:.4f} static, "
                f"x{factors[1]:.4f} sliding: be:setGroundModel did not take (docs/beamng.md)"
            )


def _classify(what: str, error: Exception) -> SimulatorError:
    """A beamngpy failure as s3 sees it. An error reply (`bngError` / `bngValueError`, raised by
    beamngpy as BNGError / BNGValueError) is the simulator saying no, and it would say no again:
    SimulatorRejected, never retried. A socket failure (refused, reset, closed, timed out: OSError,
    beamngpy's BNGDisconnectedError) is a lost connection: SimulatorLost, retried. Anything else
    (a garbled reply, a bug) is a SimulatorError, not retried either."""
    from beamngpy.logging import BNGDisconnectedError, BNGError, BNGValueError

    if isinstance(error, (OSError, EOFError, BNGDisconnectedError)):
        return SimulatorLost(f"BeamNG {what} failed: {type(error).__name__}: {error}")
    if isinstance(error, (BNGError, BNGValueError)):
        return SimulatorRejected(f"BeamNG rejected the {what}: {type(error).__name__}: {error}")
    return SimulatorError(f"BeamNG {what}: unexpected {type(error).__name__}: {error}")
