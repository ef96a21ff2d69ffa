"""BeamNG backend end to end: the real beamngpy client, the adapter, and the protocol stand-in.

The stand-in (`s3.sim.beamng_standin`) shares its physics with the embedded MuJoCo car, so any
difference between the two backends on the same track and controls comes from the adapter's
conversions (axes, heading, steering sign, units) or the protocol, which is what these tests
pin down.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from s3.config import load_params
from s3.data.collect import collect
from s3.data.rollouts import load_rollouts, read_manifest
from s3.data.schema import COLUMNS
from s3.sim.base import Control, SimulatorError, SimulatorLost, SimulatorRejected, SourceSim
from s3.sim.beamng import BeamngSim
from s3.sim.beamng_params import BeamngParams
from s3.sim.beamng_standin import FRICTION_RE, PROTOCOL_VERSION, BeamngStandin, recv_frame, send_frame
from s3.sim.beamng_wire import FRICTION_LUA, friction_check_lua, friction_lua, yaw_to_rot_quat
from s3.sim.factory import drop_worker_sim, make_sim
from s3.sim.mujoco_car import MujocoCar
from s3.tracks.track import FrictionPatch, Track

pytestmark = pytest.mark.timeout(60)
TIMEOUT = 10.0  # s, beamngpy socket timeout (sim.beamng.request_timeout) in these tests


@pytest.fixture(scope="module")
def standin() -> BeamngStandin:
    with BeamngStandin() as server:
        yield server


@pytest.fixture(scope="module")
def sim(standin: BeamngStandin) -> BeamngSim:
    s = BeamngSim(BeamngParams(port=standin.port, request_timeout=TIMEOUT))
    yield s
    s.close()


def circle_track(radius: float = 300.0, n: int = 600, patches: tuple[FrictionPatch, ...] = ()) -> Track:
    a = np.linspace(0.0, 2.0 * np.pi, n, endpoint=False)
    xy = np.stack([radius * np.cos(a) + 40.0, radius * np.sin(a) - 25.0], axis=1)
    return Track("circle", xy, np.full(n, 5.0), np.full(n, 4.0), patches)


def raw_client(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# -- protocol ----------------------------------------------------------------------------------
def test_protocol_version_is_the_one_beamngpy_speaks(standin: BeamngStandin) -> None:
    """A beamngpy upgrade that changes the wire protocol must fail here, not in a user's lab."""
    import beamngpy
    from beamngpy.connection import Connection

    assert beamngpy.__version__.startswith("1.36")
    assert Connection.PROTOCOL_VERSION == PROTOCOL_VERSION == "v1.27"
    with raw_client(standin.port) as c:
        send_frame(c, {"type": "Hello", "protocolVersion": "v1.27", "_id": 0})
        assert recv_frame(c) == {"type": "Hello", "protocolVersion": "v1.27", "_id": 0}
        send_frame(c, {"type": "GetEnvironmentPaths", "_id": 1})
        assert recv_frame(c)["_id"] == 1


def test_wrong_version_is_rejected(standin: BeamngStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    with raw_client(standin.port) as c:
        send_frame(c, {"type": "Hello", "protocolVersion": "v1.26", "_id": 0})
        assert recv_frame(c)["protocolVersion"] == "v1.27"
        assert recv_frame(c) is None  # then the stand-in hangs up
    from beamngpy import BeamNGpy
    from beamngpy.connection import Connection
    from beamngpy.logging import BNGError

    monkeypatch.setattr(Connection, "PROTOCOL_VERSION", "v1.26")
    with pytest.raises(BNGError, match="Mismatching"):
        BeamNGpy("127.0.0.1", standin.port, quit_on_close=False, socket_timeout=TIMEOUT).open(launch=False)


def test_strict_about_hello_and_request_ids(standin: BeamngStandin) -> None:
    with raw_client(standin.port) as c:
        send_frame(c, {"type": "GetSystemInfo", "_id": 0})
        assert "Hello" in recv_frame(c)["bngError"]
        assert recv_frame(c) is None
    with raw_client(standin.port) as c:
        send_frame(c, {"type": "Hello", "protocolVersion": "v1.27", "_id": 0})
        recv_frame(c)
        send_frame(c, {"type": "GetSystemInfo", "_id": 5})
        reply = recv_frame(c)
        assert reply["_id"] == 5 and "out of sequence" in reply["bngError"]


def test_unknown_message_raises_in_beamngpy(standin: BeamngStandin) -> None:
    from beamngpy import BeamNGpy
    from beamngpy.logging import BNGError

    bng = BeamNGpy("127.0.0.1", standin.port, quit_on_close=False, socket_timeout=TIMEOUT).open(launch=False)
    try:
        with pytest.raises(BNGError, match="Unknown message type: GameStateRequest"):
            bng.control.get_gamestate()
        with pytest.raises(BNGError, match="friction chunks"):
            bng.control.queue_lua_command("print('hello')")
        assert bng.system.get_environment_paths()["home"]  # the socket is still usable afterwards
    finally:
        bng.disconnect()


def test_an_error_reply_is_a_rejection_not_a_lost_connection(
    standin: BeamngStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BeamNG answering a request with bngError is SimulatorRejected (never retried), not SimulatorLost."""
    s = BeamngSim(BeamngParams(port=standin.port, request_timeout=TIMEOUT))
    try:
        s.reset(circle_track(), 340.0, -25.0, np.pi / 2, 5.0)
        monkeypatch.setattr(
            s._vehicle, "control", lambda **kw: s._bng.control.get_gamestate()
        )  # answered with bngError
        with pytest.raises(SimulatorRejected, match=r"rejected the step: BNGError: .*Unknown message type") as e:
            s.step(Control(0.0, 0.2, 0.0))
        assert not isinstance(e.value, SimulatorLost)
    finally:
        s.close()


def test_unreachable_simulator_is_a_simulator_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(SimulatorError, match="cannot reach BeamNG.tech"):
        BeamngSim(BeamngParams(port=port, request_timeout=2.0))


def test_a_frozen_simulator_is_lost_within_twice_the_request_timeout() -> None:
    """A BeamNG.tech that stops answering: the step fails as a lost simulator (retried elsewhere)
    within request_timeout, doubled by beamngpy's one reconnect, not after the load timeout."""
    with BeamngStandin(freeze_after_steps=6) as frozen:
        s = BeamngSim(BeamngParams(port=frozen.port, request_timeout=1.0, load_timeout=30.0))
        try:
            s.reset(circle_track(), 340.0, -25.0, np.pi / 2, 0.0)
            t0 = time.monotonic()
            with pytest.raises(SimulatorLost, match="BeamNG step failed"):
                for _ in range(10):
                    s.step(Control(0.0, 0.3, 0.0))
            waited = time.monotonic() - t0
        finally:
            frozen.thaw()
            s.close()
    assert 1.0 <= waited < 2 * 1.0 + 2.0


def test_every_connection_is_bounded_by_the_request_timeout(standin: BeamngStandin) -> None:
    """beamngpy 1.36 sets no timeout on vehicle sockets: s3 sets request_timeout on both connections
    (load_timeout only while a scenario loads), and stops loudly when beamngpy's internals differ."""
    from s3.sim.beamng_wire import set_socket_timeout

    s = BeamngSim(BeamngParams(port=standin.port, request_timeout=7.0, load_timeout=30.0))
    try:
        s.reset(circle_track(), 340.0, -25.0, np.pi / 2, 0.0)
        assert s._bng.connection.skt.skt.gettimeout() == 7.0
        assert s._vehicle.connection.skt.skt.gettimeout() == 7.0
    finally:
        s.close()

    class Changed:  # a beamngpy whose Connection keeps its socket elsewhere
        skt = None

    with pytest.raises(
        SimulatorError, match=r"cannot bound the test connection to 60 s: beamngpy .* no longer has Connection.skt.skt"
    ):
        set_socket_timeout(Changed(), 60.0, "the test connection")


def test_the_self_check_catches_a_flipped_rotation(standin: BeamngStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    """An injected convention error (the heading's sign flipped) stops the reset with one line that
    names it; so do a displaced origin and a start speed that did not take."""
    import s3.sim.beamng as adapter

    s = BeamngSim(BeamngParams(port=standin.port, request_timeout=TIMEOUT))
    try:
        right = adapter.yaw_to_rot_quat
        monkeypatch.setattr(adapter, "yaw_to_rot_quat", lambda yaw, safe_spawn: right(-yaw, safe_spawn))
        with pytest.raises(
            adapter.BeamngMismatch,
            match=r"^BeamNG reset \(teleport\): asked heading 30.0 deg, got -30.0 deg: rotation convention$",
        ):
            s.reset(circle_track(), 340.0, -25.0, math.radians(30.0), 0.0)
        monkeypatch.setattr(adapter, "yaw_to_rot_quat", right)
        s._origin = s._origin + 2.0  # s3 thinks the track lies elsewhere in the level
        with pytest.raises(
            adapter.BeamngMismatch, match=r"asked \(340.00, -25.00\) m, got \(338.00, -27.00\) m, 2.83 m away"
        ):
            s.reset(circle_track(), 340.0, -25.0, np.pi / 2, 0.0)
    finally:
        s.close()
    s = BeamngSim(BeamngParams(port=standin.port, request_timeout=TIMEOUT))
    try:
        s.reset(circle_track(), 340.0, -25.0, np.pi / 2, 0.0)  # connects the vehicle
        monkeypatch.setattr(s._vehicle, "set_velocity", lambda v, dt: None)  # the start speed never arrives
        with pytest.raises(
            adapter.BeamngMismatch, match=r"run-up to 12 m/s\): asked 12.00 m/s forward, got -?0.00 m/s"
        ):
            s.reset(circle_track(), 340.0, -25.0, np.pi / 2, 12.0)
    finally:
        s.close()


def test_friction_template_is_fixed_and_parsed_exactly() -> None:
    chunk = friction_lua("ASPHALT", 0.25)
    m = FRICTION_RE.fullmatch(chunk)
    assert m and m["gm"] == "ASPHALT" and float(m["scale"]) == 0.25
    assert "be:setGroundModel(name, gm.cdata)" in chunk and "core_environment.groundModels" in chunk
    assert FRICTION_RE.fullmatch(chunk.replace("* k", "* 2")) is None
    assert FRICTION_LUA.count("{gm}") == 1 and FRICTION_LUA.count("{scale}") == 1


# -- BeamNG's rotation conventions, from its Lua (s3.sim.beamng_standin.rotation; docs/beamng.md) ------
def test_lua_rotates_a_vector_by_the_inverse_quaternion() -> None:
    """mathlib.lua: (0, 0, sin(a/2), cos(a/2)) * v turns v by -a about z; (a * b) * v = b * (a * v)."""
    from s3.sim.beamng_standin.rotation import lua_mul, lua_rotate

    a = 0.7
    qa = (0.0, 0.0, math.sin(a / 2), math.cos(a / 2))
    np.testing.assert_allclose(lua_rotate(qa, (1.0, 0.0, 0.0)), [math.cos(a), -math.sin(a), 0.0], atol=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(20):
        q1, q2 = (tuple(q / np.linalg.norm(q)) for q in rng.normal(size=(2, 4)))
        v = rng.normal(size=3)
        np.testing.assert_allclose(lua_rotate(lua_mul(q1, q2), v), lua_rotate(q2, lua_rotate(q1, v)), atol=1e-12)


def test_quat_from_dir_worked_examples() -> None:
    """mathlib.lua quatFromDir: dir +Y is the identity, dir +X is (0, 0, 0.7071, 0.7071); q * (0, 1, 0) = dir."""
    from s3.sim.beamng_standin.rotation import lua_rotate, quat_from_dir

    np.testing.assert_allclose(quat_from_dir((0.0, 1.0, 0.0)), (0.0, 0.0, 0.0, 1.0), atol=1e-12)
    np.testing.assert_allclose(quat_from_dir((1.0, 0.0, 0.0)), (0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5)), atol=1e-12)
    for d in ((0.3, -0.8, 0.0), (-1.0, 0.2, 0.1)):
        np.testing.assert_allclose(
            lua_rotate(quat_from_dir(d), (0.0, 1.0, 0.0)), np.array(d) / np.linalg.norm(d), atol=1e-12
        )


def test_a_teleport_quaternion_gives_the_dir_beamng_lua_gives() -> None:
    """handleTeleport + spawn.safeTeleport: the identity rotation faces -Y without safe_spawn and +Y
    with it (safeTeleport's quat(0, 0, 1, 0)); (0, 0, 0.7071, 0.7071) faces -X and +X."""
    from s3.sim.beamng_standin.rotation import heading, teleport_rotation

    here = (0.0, 0.0, 0.0, 1.0)
    cases = [
        ((0.0, 0.0, 0.0, 1.0), False, -90.0),
        ((0.0, 0.0, 0.0, 1.0), True, 90.0),
        ((0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5)), False, 180.0),
        ((0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5)), True, 0.0),
        ((0.0, 0.0, 1.0, 0.0), False, 90.0),
        ((0.0, 0.0, 1.0, 0.0), True, -90.0),
    ]
    for rot, safe, deg in cases:
        got = math.degrees(heading(teleport_rotation(rot, safe, here)))
        assert abs(((got - deg + 180.0) % 360.0) - 180.0) < 1e-9, (rot, safe, got, deg)


@pytest.mark.parametrize("safe_spawn", [True, False])
def test_the_adapter_quaternion_faces_the_asked_heading(safe_spawn: bool) -> None:
    """s3's rotation for yaw psi gives dir = (cos psi, sin psi) by BeamNG's conventions, with and
    without safe_spawn; the textbook rotation by psi + pi/2 (the adapter before issue 26) gives -psi
    with safe_spawn and pi - psi without, right only at psi = 0 or pi."""
    from s3.sim.beamng_standin.rotation import heading, teleport_rotation

    def wrapped(a: float) -> float:
        return (a + math.pi) % (2 * math.pi) - math.pi

    here = (0.0, 0.0, 0.0, 1.0)
    for yaw in (0.0, 0.5, math.pi / 2, -2.5, math.pi, math.radians(30.0)):
        assert abs(wrapped(heading(teleport_rotation(yaw_to_rot_quat(yaw, safe_spawn), safe_spawn, here)) - yaw)) < 1e-9
        old = (0.0, 0.0, math.sin((yaw + math.pi / 2) / 2), math.cos((yaw + math.pi / 2) / 2))
        expect = -yaw if safe_spawn else math.pi - yaw
        assert abs(wrapped(heading(teleport_rotation(old, safe_spawn, here)) - expect)) < 1e-9


@pytest.mark.parametrize("safe_spawn", [True, False])
def test_reset_at_four_headings_reads_back_as_asked(standin: BeamngStandin, safe_spawn: bool) -> None:
    """Through beamngpy and the stand-in: a reset asked to face psi reads back dir = (cos psi, sin psi)."""
    s = BeamngSim(BeamngParams(port=standin.port, request_timeout=TIMEOUT, safe_spawn=safe_spawn))
    try:
        for deg in (30.0, 120.0, -150.0, -60.0):
            st = s.reset(circle_track(), 340.0, -25.0, math.radians(deg), 0.0)
            d = s._vehicle.sensors["state"]["dir"]
            np.testing.assert_allclose(d[:2], [math.cos(math.radians(deg)), math.sin(math.radians(deg))], atol=1e-3)
            assert abs(math.degrees(st.yaw) - deg) < 0.1
    finally:
        s.close()


# -- the adapter against the embedded simulator ---------------------------------------------------
CONTROLS = [Control(0.0, 0.7, 0.0)] * 8 + [Control(0.4, 0.5, 0.0)] * 10 + [Control(-0.5, 0.0, 0.3)] * 12


def drive(s: SourceSim, track: Track, s0: float, speed: float) -> list:
    x, y, h = (float(v[0]) for v in track.pose_at(np.array([s0]), np.array([0.5])))
    states = [s.reset(track, x, y, h, speed)]
    states += [s.step(c) for c in CONTROLS]
    return states


def as_array(states: list) -> np.ndarray:
    cols = [
        (st.time, st.x, st.y, st.yaw, st.vx, st.vy, st.yaw_rate, st.steer, np.mean(st.wheel_speed)) for st in states
    ]
    return np.array(cols)


@pytest.mark.parametrize("speed", [0.0, 12.0])
def test_episode_matches_embedded_simulator(sim: BeamngSim, standin: BeamngStandin, speed: float) -> None:
    """Same track, pose and controls: the adapter's states equal the MuJoCo car's (shared physics)."""
    track = circle_track()
    ours = as_array(drive(sim, track, 100.0, speed))
    ref = as_array(drive(MujocoCar(), track, 100.0, speed))
    road = standin.track  # the road arrived intact: its middle, half a metre left of the centerline, 9 m wide
    assert road is not None and np.allclose(road.w_left, 4.5) and np.allclose(road.w_right, 4.5)
    assert np.allclose(track.project(road.centerline).d, 0.5, atol=1e-4)
    np.testing.assert_allclose(ours[:, 0], ref[:, 0], atol=1e-9)  # time
    assert np.hypot(ours[:, 1] - ref[:, 1], ours[:, 2] - ref[:, 2]).max() < 0.01  # m
    assert np.abs(ours[:, 3] - ref[:, 3]).max() < 2e-3  # yaw, rad
    assert np.abs(ours[:, 4:6] - ref[:, 4:6]).max() < 0.01  # vx, vy, m/s
    assert np.abs(ours[:, 6] - ref[:, 6]).max() < 0.03  # yaw rate over the last 10 ms vs instantaneous
    assert np.abs(ours[:, 7] - ref[:, 7]).max() < 1e-4  # steering angle, rad
    assert np.abs(ours[:, 8] - ref[:, 8]).max() < 0.05  # mean wheel speed, m/s (braking: near lock)
    # the controls did something, so a flipped sign or swapped axis cannot pass
    assert ours[:, 4].max() > speed + 1.5 and ours[18, 3] - ours[8, 3] > 0.1 and ours[-1, 7] < -0.2


def test_origin_places_the_track_in_the_level(standin: BeamngStandin) -> None:
    track = circle_track()
    sim = BeamngSim(BeamngParams(port=standin.port, request_timeout=TIMEOUT, origin=(800.0, -1200.0, 0.0)))
    try:
        ours = as_array(drive(sim, track, 50.0, 8.0))
        car_xy = standin.car.data.qpos[:2].copy()
    finally:
        sim.close()
    ref = as_array(drive(MujocoCar(), track, 50.0, 8.0))
    assert np.hypot(ours[:, 1] - ref[:, 1], ours[:, 2] - ref[:, 2]).max() < 0.01
    np.testing.assert_allclose(car_xy, [ours[-1, 1] + 800.0, ours[-1, 2] - 1200.0])
    assert standin.track.centerline[:, 0].min() > 400.0


def test_ice_patch_switches_the_ground_model_by_lua(standin: BeamngStandin) -> None:
    patch = FrictionPatch(40.0, 60.0, -6.0, 6.0, 0.25)
    track = circle_track(patches=(patch,))
    sim = BeamngSim(BeamngParams(port=standin.port, request_timeout=TIMEOUT))
    try:
        x, y, h = (float(v[0]) for v in track.pose_at(np.array([0.0])))
        st = sim.reset(track, x, y, h, 10.0)
        lua0, log0 = len(standin.lua_log), len(standin.friction_log)
        centre_mu, car_mu, labels = [], [], []
        for _ in range(90):
            st = sim.step(Control(0.02, 0.2, 0.0))
            centre_mu.append(float(track.friction_at(np.array([[st.x, st.y]]))[0]))
            car_mu.append(standin.mu)
            labels.append(st.friction.copy())
        check = friction_check_lua("ASPHALT")  # each switch is read back from the engine
        assert standin.lua_log[lua0:] == [friction_lua("ASPHALT", 0.25), check, friction_lua("ASPHALT", 1.0), check]
        assert sim.lua_sent[-2:] == standin.lua_log[-4::2]
        assert [mu for _, mu in standin.friction_log[log0:]] == pytest.approx([0.25, 1.0])
        # after each period the stand-in's grip is the patch's under the car's centre (it acts in the next period)
        np.testing.assert_allclose(car_mu, centre_mu)
        assert min(centre_mu) == 0.25 and centre_mu[-1] == 1.0
        assert np.isclose(np.array(labels), 0.25).any(axis=1).sum() >= 15  # per-wheel labels from s3's geometry
    finally:
        sim.close()
    assert standin.mu == 1.0


def test_an_ice_switch_that_does_not_take_stops_the_run(
    standin: BeamngStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ground model name the level lacks is BeamNG's Lua error (a rejection); a switch the engine
    ignored is caught by the read-back. Either way the data would be mislabelled: one line, no retry."""
    from s3.sim.beamng import BeamngMismatch

    track = circle_track(patches=(FrictionPatch(40.0, 60.0, -6.0, 6.0, 0.25),))
    x, y, h = (float(v[0]) for v in track.pose_at(np.array([0.0])))

    def drive(params: BeamngParams) -> None:
        sim = BeamngSim(params)
        try:
            sim.reset(track, x, y, h, 10.0)
            for _ in range(90):
                sim.step(Control(0.02, 0.2, 0.0))
        finally:
            sim.close()

    with pytest.raises(
        SimulatorRejected, match=r"rejected the reset: BNGError: Lua error: s3: unknown ground model ASPHALT_WET"
    ):
        drive(BeamngParams(port=standin.port, request_timeout=TIMEOUT, ground_model="ASPHALT_WET"))
    monkeypatch.setattr(
        standin.world, "scale_ground_model", lambda gm, scale: standin.world.touched.add(gm)
    )  # the engine ignores it
    with pytest.raises(
        BeamngMismatch,
        match=r"^BeamNG ice: asked ASPHALT friction x0.2500, the engine has x1.0000 static, x1.0000 sliding",
    ):
        drive(BeamngParams(port=standin.port, request_timeout=TIMEOUT))


# -- collect through the factory ------------------------------------------------------------------
TINY = [
    "collect.episodes=2",
    "collect.episode_steps=30",
    "collect.episodes_per_shard=1",
    "collect.workers=1",
    "collect.n_tracks=1",
]


@pytest.mark.timeout(120)
def test_collect_with_beamng_backend(standin: BeamngStandin, tmp_path: Path) -> None:
    def run(backend: str) -> tuple[Path, object]:
        out = tmp_path / backend
        params = load_params(
            None,
            [
                *TINY,
                f"sim.backend={backend}",
                "sim.beamng.host=127.0.0.1",
                f"sim.beamng.port={standin.port}",
                f"sim.beamng.request_timeout={TIMEOUT}",
                # the raw physics of the two backends compared (s3's aids wrap only the embedded car; a BeamNG
                # vehicle brings its own)
                "sim.driver_aids.traction_control=false",
                "sim.driver_aids.abs=false",
                f"collect.out_dir={out}/rollouts",
                f"collect.plot_dir={out}/plots",
            ],
        )
        try:
            collect(params, quiet=True)
        finally:
            drop_worker_sim()  # the per-process simulator cache holds a connection
        return out / "rollouts", load_rollouts(out / "rollouts")

    bng_dir, bng = run("beamng")
    _, mj = run("mujoco")
    m = read_manifest(bng_dir)
    assert list(bng.columns) == list(COLUMNS) and (bng.dtypes == mj.dtypes).all()
    assert m["simulator"] == "beamng" and m["simulator_version"].startswith("beamngpy 1.36 (protocol v1.27)")
    assert m["episodes"] == 2 and len(bng) == len(mj) > 20
    assert (bng[["episode", "step", "track_id"]].to_numpy() == mj[["episode", "step", "track_id"]].to_numpy()).all()
    # the same driver on the same tracks: close trajectories (the driver reacts to the state)
    assert np.hypot(bng.x - mj.x, bng.y - mj.y).max() < 0.3
    assert np.abs(bng.vx - mj.vx).max() < 0.3
    assert np.abs(bng.yaw_rate - mj.yaw_rate).max() < 0.05
    wheels = ["wheel_speed_fl", "wheel_speed_fr", "wheel_speed_rl", "wheel_speed_rr"]
    assert (bng[wheels].to_numpy() == bng[["wheel_speed_fl"]].to_numpy()).all()  # BeamNG reports one wheel speed
    assert np.abs(bng.wheel_speed_fl - mj[wheels].mean(axis=1)).max() < 0.3


def test_factory_makes_the_beamng_backend(standin: BeamngStandin) -> None:
    params = load_params(
        None, ["sim.backend=beamng", f"sim.beamng.port={standin.port}", "sim.beamng.request_timeout=5"]
    )
    assert params.sim.driver_aids.enabled and params.sim.aids() is None  # a BeamNG vehicle brings its own ESC / ABS
    sim = make_sim(params.sim)
    try:
        assert isinstance(sim, BeamngSim) and isinstance(sim, SourceSim)
        assert (sim.wheelbase, sim.max_steer, sim.control_dt, sim.steps) == (2.7, 0.55, 0.1, 10)
    finally:
        sim.close()
    with pytest.raises(Exception, match="whole number of BeamNG steps"):
        load_params(None, ["sim.backend=beamng", "sim.beamng.steps_per_second=75"])


def test_first_contact_check_passes_on_beamng_conventions_and_names_a_flipped_one(
    standin: BeamngStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`s3 beamng check`: every check passes against the stand-in (whose conventions come from
    BeamNG's Lua); with the rotation flipped the resets fail, say why, and the command exits 1."""
    from typer.testing import CliRunner

    import s3.sim.beamng as adapter
    from s3.cli import app

    ok = CliRunner().invoke(
        app,
        [
            "beamng",
            "check",
            "--set",
            f"sim.beamng.port={standin.port}",
            "--set",
            f"sim.beamng.request_timeout={TIMEOUT}",
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert ok.output.count("ok ") == 7 and "verdict: ready for s3" in ok.output
    right = adapter.yaw_to_rot_quat
    monkeypatch.setattr(adapter, "yaw_to_rot_quat", lambda yaw, safe_spawn: right(-yaw, safe_spawn))
    bad = CliRunner().invoke(
        app,
        [
            "beamng",
            "check",
            "--set",
            f"sim.beamng.port={standin.port}",
            "--set",
            f"sim.beamng.request_timeout={TIMEOUT}",
        ],
    )
    assert bad.exit_code == 1
    assert (
        "FAIL reset heading 30 deg: BeamNG reset (teleport): asked heading 30.0 deg, got -30.0 deg: rotation convention"
        in bad.output
    )
    assert "ok   reset heading 0 deg" in bad.output  # a sign flip is invisible at 0 (and 180) deg
    assert "verdict: NOT ready" in bad.output and "ok   ice switch" in bad.output


def test_standin_command_line() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3.sim.beamng_standin", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line and "v1.27" in line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        with raw_client(port) as c:
            send_frame(c, {"type": "Hello", "protocolVersion": "v1.27", "_id": 0})
            assert recv_frame(c)["protocolVersion"] == "v1.27"
            send_frame(c, {"type": "Quit", "_id": 1})
            assert recv_frame(c)["type"] == "Quit"
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()


@pytest.mark.slow  # nightly (make test-all): keeps make test within its 15 minutes
@pytest.mark.timeout(240)
def test_evaluate_with_beamng_backend(standin: BeamngStandin, tmp_path: Path) -> None:
    """The pid baseline evaluated through beamngpy + stand-in laps the road course like the embedded car."""
    from s3.evaluate.evaluate import evaluate_baseline

    def run(backend: str) -> dict:
        params = load_params(
            None,
            [
                f"sim.backend={backend}",
                "sim.beamng.host=127.0.0.1",
                f"sim.beamng.port={standin.port}",
                f"sim.beamng.request_timeout={TIMEOUT}",
                "evaluate.conditions=[nominal]",
                "evaluate.start_fractions=[0.0]",
                "evaluate.tracks=[road_course]",
                "evaluate.gif=false",
            ],
        )
        return evaluate_baseline("pid", params, tmp_path / f"{backend}.json", None)

    bng, mj = run("beamng"), run("mujoco")
    assert bng["simulator"]["version"].startswith("beamngpy 1.36")
    b, m = bng["summary"]["suite"]["nominal"], mj["summary"]["suite"]["nominal"]
    assert b["completed"] == m["completed"] == 1
    assert abs(b["lap_time_s"]["estimate"] - m["lap_time_s"]["estimate"]) < 2.0
    assert abs(b["mean_abs_lateral_error_m"]["estimate"] - m["mean_abs_lateral_error_m"]["estimate"]) < 0.2
