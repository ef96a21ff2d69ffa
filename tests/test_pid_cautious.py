"""The `pid_cautious` baseline: the blind pid planning its speed profile for ice everywhere."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from s3.evaluate.drivers import PidDriver, PidFactory, cautious
from s3.evaluate.params import PidParams
from s3.sim.base import VehicleState
from s3.tracks.road_course import road_course


def profile(params: PidParams, condition: str) -> np.ndarray:
    drv = PidDriver(params, wheelbase=2.7, max_steer=0.5, dt=0.1)
    track = road_course(condition)  # type: ignore[arg-type]
    x, y, yaw = (float(a) for a in track.pose_at(np.array(0.0)))
    drv.reset(track, VehicleState(0.0, x, y, yaw, 5.0, 0.0, 0.0, 0.0))
    return drv._v.copy()


def test_cautious_is_the_blind_pid_with_an_assumed_friction() -> None:
    base = PidParams(lookahead_min=7.0)
    p = cautious(base)
    assert p.assume_mu == 0.2 and not p.knows_ice and p.lookahead_min == 7.0
    assert cautious(base, 0.1).assume_mu == 0.1 and PidParams().assume_mu is None
    with pytest.raises(ValidationError):
        cautious(base, 0.0)
    with pytest.raises(ValidationError):
        cautious(base, 1.5)


def test_the_cautious_profile_is_the_dry_one_scaled_everywhere() -> None:
    mu = 0.2
    dry = profile(PidParams(knows_ice=False), "nominal")
    careful = profile(cautious(PidParams(), mu), "ice")
    np.testing.assert_allclose(careful, profile(cautious(PidParams(), mu), "nominal"))  # the map's ice is ignored
    # the same as the dry profile with lateral, brake and drive accelerations times mu
    scaled = PidParams(knows_ice=False, lateral_accel=8.0 * mu, brake_accel=6.0 * mu, drive_accel=4.0 * mu)
    np.testing.assert_allclose(careful, profile(scaled, "nominal"), rtol=1e-12)
    # every limit is v^2 linear in the accelerations: sqrt(mu) times the dry speed wherever the cap does not bind
    free = dry < PidParams().max_speed - 1e-9
    assert free.mean() > 0.5
    np.testing.assert_allclose(careful[free], math.sqrt(mu) * dry[free], rtol=1e-9)
    # and the default pid's profile is unchanged (nominal: no patches to slow for)
    np.testing.assert_allclose(profile(PidParams(), "nominal"), dry)


def test_pid_cautious_laps_the_icy_road_course_where_pid_blind_does_not() -> None:
    from s3.evaluate.run import run_lap
    from s3.sim.factory import make_sim
    from s3.sim.params import DriverAidsParams, SimParams
    from s3.task.params import JudgeParams

    sim = make_sim(SimParams(), DriverAidsParams(traction_control=True, abs=True))  # as the evaluate stage drives
    track = road_course("ice")
    try:
        runs = {
            name: run_lap(
                sim,
                track,
                PidFactory(p)(sim),
                start_s=0.5 * track.length,
                start_speed=5.0,
                max_seconds=400.0,
                judge=JudgeParams(),
            )
            for name, p in (("blind", PidParams(knows_ice=False)), ("cautious", cautious(PidParams())))
        }
    finally:
        sim.close()
    assert not runs["blind"].completed and runs["blind"].reason == "off_track", (
        runs["blind"].reason,
        runs["blind"].progress,
    )
    assert runs["cautious"].completed, (runs["cautious"].reason, runs["cautious"].progress)
    assert 200.0 < runs["cautious"].lap_time < 320.0  # measured 258 s (pid with the map's ice: 163 s; dry: 129 s)
