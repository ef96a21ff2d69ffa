"""The collect stage: a valid, deterministic, resumable dataset whose rows obey kinematics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from s3.config import Params, load_params
from s3.data.collect import collect, run_episode, track_for
from s3.data.rollouts import RolloutError, load_rollouts, read_manifest, shard_name
from s3.data.schema import COLUMNS
from s3.io import WorkspaceBusy, workspace_lock
from s3.sim.factory import make_sim

TINY = ["collect.episodes=5", "collect.episode_steps=60", "collect.episodes_per_shard=2", "collect.n_tracks=3"]


def tiny(tmp: Path, *extra: str) -> Params:
    return load_params(None, [*TINY, f"collect.out_dir={tmp}/rollouts", f"collect.plot_dir={tmp}/plots", *extra])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    tmp = tmp_path_factory.mktemp("collect")
    collect(tiny(tmp, "collect.workers=1"), quiet=True)
    return tmp, load_rollouts(tmp / "rollouts")


def test_dataset_matches_schema_and_manifest(dataset: tuple[Path, pd.DataFrame]) -> None:
    tmp, df = dataset
    m = read_manifest(tmp / "rollouts")
    assert list(df.columns) == list(COLUMNS)
    assert m["rows"] == len(df) > 100
    assert m["episodes"] + m["episodes_dropped"] == 5
    assert len(m["shards"]) == 3 and m["simulator_version"].startswith("mujoco")
    assert m["columns"]["vx"]["unit"] == "m/s"
    assert np.isfinite(df.select_dtypes("number").to_numpy()).all()
    assert (tmp / "plots" / "sample_episodes.png").stat().st_size > 10_000


def test_rows_obey_kinematics(dataset: tuple[Path, pd.DataFrame]) -> None:
    """Row t+1's position is row t's advanced by the body-frame velocity over one control period."""
    _, df = dataset
    for _, e in df.groupby("episode"):
        x, y, yaw, vx, vy = (e[c].to_numpy() for c in ("x", "y", "yaw", "vx", "vy"))
        dt = np.diff(e.time.to_numpy())
        assert np.allclose(dt, 0.1, atol=1e-6)
        vxw = vx * np.cos(yaw) - vy * np.sin(yaw)
        vyw = vx * np.sin(yaw) + vy * np.cos(yaw)
        pred_x = x[:-1] + 0.5 * (vxw[:-1] + vxw[1:]) * dt
        pred_y = y[:-1] + 0.5 * (vyw[:-1] + vyw[1:]) * dt
        err = np.hypot(pred_x - x[1:], pred_y - y[1:])
        assert np.median(err) < 0.05 and err.max() < 0.5


def test_track_columns_match_geometry(dataset: tuple[Path, pd.DataFrame]) -> None:
    """s, lateral offset, the off-track flag and the friction label agree with the track they ran on."""
    _, df = dataset
    track_params = Params().collect.tracks.model_dump_json()
    for track_id, e in df.groupby("track_id"):
        track = track_for(track_id, track_params)
        proj = track.project(e[["x", "y"]].to_numpy(), e.yaw.to_numpy())
        np.testing.assert_allclose(e.lateral_offset, proj.d, atol=1e-6)
        edge = np.where(proj.d > 0, proj.w_left, proj.w_right)
        assert np.array_equal(e.off_track.to_numpy(), np.abs(proj.d) > edge)
        if not track.patches:
            assert (e.mu_mean == track.base_mu).all()
    assert np.allclose(df.mu_mean, df[["mu_fl", "mu_fr", "mu_rl", "mu_rr"]].mean(axis=1))


def test_worker_count_does_not_change_the_data(dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    _, one = dataset
    collect(tiny(tmp_path, "collect.workers=2"), quiet=True)
    two = load_rollouts(tmp_path / "rollouts")
    pd.testing.assert_frame_equal(one, two)


def test_resume_rewrites_only_missing_shards(dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    _, ref = dataset
    params = tiny(tmp_path, "collect.workers=1")
    collect(params, quiet=True)
    out = tmp_path / "rollouts"
    kept = (out / shard_name(0)).stat().st_mtime_ns
    (out / shard_name(1)).unlink()
    collect(params, quiet=True)
    assert (out / shard_name(0)).stat().st_mtime_ns == kept
    pd.testing.assert_frame_equal(load_rollouts(out), ref)


def test_corrupted_shard_is_named(dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    src, _ = dataset
    out = tmp_path / "r"
    out.mkdir()
    for f in (src / "rollouts").iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    shard = out / shard_name(1)
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(RolloutError, match=r"shard-00001\.parquet: content differs"):
        load_rollouts(out)


def test_second_collect_on_same_folder_fails_fast(tmp_path: Path) -> None:
    params = tiny(tmp_path)
    with workspace_lock(tmp_path / "rollouts", "s3 collect"):
        with pytest.raises(WorkspaceBusy, match="already running"):
            collect(params, quiet=True)


def test_careful_driver_stays_on_track() -> None:
    """Without noise or events the explorer is a competent driver: the data's off-track rows come from the perturbations."""
    params = load_params(
        None,
        [*TINY, "collect.episode_steps=300", "collect.driver.steer_noise=0", "collect.driver.pedal_noise=0",
         "collect.driver.event_rate=0", "collect.driver.lateral_accel=[6, 6]", "collect.ice_episode_fraction=0"],
    )  # fmt: skip
    sim = make_sim(params.sim)
    df, why = run_episode(sim, params, 0)
    assert df is not None, why
    assert len(df) == 300 and not df.off_track.any()
    assert df.vx.max() > 10.0
