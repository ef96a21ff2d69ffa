"""Per-run safety and smoothness metrics (s3.evaluate.metrics) on hand-made runs with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from s3.evaluate.metrics import RUN_SCALARS, beyond_edge, edge_margin, lateral_jerk, run_metrics
from s3.tracks.track import Track

R = 100.0  # radius of the test circle (m)
DT = 0.1
W_LEFT, W_RIGHT = 5.0, 4.0


def circle() -> Track:
    a = np.linspace(0.0, 2 * np.pi, 720, endpoint=False)
    xy = np.stack([R * np.cos(a), R * np.sin(a)], axis=1)
    return Track("circle", xy, np.full(720, W_LEFT), np.full(720, W_RIGHT))


def run(n: int, v: float = 10.0, **cols: np.ndarray) -> dict[str, np.ndarray]:
    """n rows at constant forward speed v on the centerline, no lateral motion; `cols` override."""
    z = np.zeros(n)
    progress = np.arange(n) * v * DT
    tj = {
        "t": np.arange(n) * DT,
        "vx": np.full(n, v),
        "vy": z.copy(),
        "yaw_rate": z.copy(),
        "steering_cmd": z.copy(),
        "throttle_cmd": z.copy(),
        "brake_cmd": z.copy(),
        "s": progress % circle().length,
        "d": z.copy(),
        "progress": progress,
    }
    tj.update(cols)
    return tj


def metrics(tj: dict[str, np.ndarray], tolerance: float = 0.0) -> dict:
    return run_metrics(
        tj, circle(), completed=False, lap_time=None, progress=float(tj["progress"][-1]), dt=DT, tolerance=tolerance
    )


def test_the_new_keys_extend_run_scalars_and_keep_the_old_ones() -> None:
    old = (
        "lap_time_s",
        "distance_m",
        "completion_fraction",
        "mean_speed_mps",
        "off_track_events",
        "time_off_track_s",
        "mean_abs_lateral_error_m",
        "max_abs_lateral_error_m",
        "mean_abs_steering_rate",
        "mean_abs_steering_jerk",
        "pedal_switches",
        "max_abs_sideslip_rad",
    )
    assert RUN_SCALARS[: len(old)] == old
    assert set(RUN_SCALARS) - set(old) == {"mean_abs_lateral_jerk", "min_edge_margin_m"}


def test_steady_cornering_has_no_lateral_jerk() -> None:
    v, n = 12.0, 200
    # constant speed round a constant radius with a constant sideslip velocity: a_y = v^2 / R throughout
    m = metrics(run(n, v, vy=np.full(n, -0.4), yaw_rate=np.full(n, v / R), d=np.full(n, 1.0)))
    assert m["mean_abs_lateral_jerk"] == pytest.approx(0.0, abs=1e-9)
    assert m["min_edge_margin_m"] == pytest.approx(W_LEFT - 1.0)


def test_a_yaw_rate_step_gives_its_known_jerk() -> None:
    v, r1, n, k0 = 10.0, 0.2, 51, 20
    yaw_rate = np.where(np.arange(n) >= k0, r1, 0.0)
    jerk = lateral_jerk(np.full(n, v), np.zeros(n), yaw_rate, DT)
    # a_y at the period midpoints: 0 ... 0, v r1 / 2 (the period that straddles the step), v r1 ...
    expected = np.zeros(n - 2)
    expected[[k0 - 2, k0 - 1]] = v * r1 / 2 / DT  # jerk rows k0 - 1 and k0 (interior rows start at 1)
    np.testing.assert_allclose(jerk, expected, atol=1e-9)
    m = metrics(run(n, v, yaw_rate=yaw_rate))
    assert m["mean_abs_lateral_jerk"] == pytest.approx(v * r1 / DT / (n - 2))  # 20 m/s^3 summed over 49 rows


def test_lateral_jerk_counts_the_sideslip_rate() -> None:
    c, n = 3.0, 40  # vy = c t^2 / 2 with no yaw: a_y = c t, a constant jerk c
    t = np.arange(n) * DT
    m = metrics(run(n, vy=0.5 * c * t * t))
    assert m["mean_abs_lateral_jerk"] == pytest.approx(c)


def test_drifting_beyond_the_right_edge() -> None:
    n = 101
    d = -np.arange(n) / 20.0  # 0.05 m a row to the right, ending 5 m right of the centre, 1 m beyond the 4 m edge
    m = metrics(run(n, d=d))
    assert m["min_edge_margin_m"] == pytest.approx(W_RIGHT - 5.0)
    assert m["time_off_track_s"] == pytest.approx(20 * DT)  # rows 81..100 (row 80 sits on the edge: on track)
    assert m["off_track_events"] == 1
    assert metrics(run(n, d=d), tolerance=0.5)["time_off_track_s"] == pytest.approx(10 * DT)  # rows 91..100
    assert m["completion_fraction"] == pytest.approx(100 * 10.0 * DT / circle().length)  # the lap share


def test_the_margin_is_to_the_nearer_edge() -> None:
    d = np.array([0.3, 0.6, -0.3, 5.5, -4.5])
    margin = edge_margin(d, np.full(5, W_LEFT), np.full(5, W_RIGHT))
    np.testing.assert_allclose(margin, [4.3, 4.4, 3.7, -0.5, -0.5])  # 0.3 left: still nearer the 4 m right edge
    off = margin < 0
    np.testing.assert_allclose(margin[off], -beyond_edge(d, np.full(5, W_LEFT), np.full(5, W_RIGHT))[off])


def test_empty_short_and_yawless_runs() -> None:
    empty = run_metrics({}, circle(), False, None, 0.0, DT)
    assert empty["mean_abs_lateral_jerk"] is None and empty["min_edge_margin_m"] is None
    one, two = metrics(run(1, d=np.array([-1.0]))), metrics(run(2, d=np.array([0.0, 2.0])))
    assert one["mean_abs_lateral_jerk"] is None and two["mean_abs_lateral_jerk"] is None
    assert one["min_edge_margin_m"] == pytest.approx(3.0) and two["min_edge_margin_m"] == pytest.approx(3.0)
    assert one["time_off_track_s"] == 0.0
    three = run(3)
    assert metrics(three)["mean_abs_lateral_jerk"] == pytest.approx(0.0)
    del three["yaw_rate"]
    assert metrics(three)["mean_abs_lateral_jerk"] is None
    turning = metrics(run(51, yaw_rate=np.where(np.arange(51) >= 20, 0.2, 0.0)))
    assert turning["mean_abs_lateral_jerk"] == pytest.approx(20.0 / 49)
