"""The collect stage: a valid, deterministic, resumable dataset whose rows obey kinematics."""

from __future__ import annotations

import json
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from s3.config import Params, load_params
from s3.data.collect import collect
from s3.data.episode import run_episode, track_for
from s3.data.rollouts import RolloutError, load_rollouts, read_manifest, shard_name
from s3.data.schema import COLUMNS
from s3.io import WorkspaceBusy, workspace_lock
from s3.sim.base import Control
from s3.sim.factory import make_sim
from s3.tracks.track import TrackError

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


def test_commands_reproduce_the_next_row(dataset: tuple[Path, pd.DataFrame]) -> None:
    """Replaying an episode's recorded commands in the simulator gives its recorded states: row t's
    command is exactly what moved the car from row t to row t+1."""
    _, df = dataset
    e = df[df.episode == df.episode.iloc[0]].reset_index(drop=True)
    sim = make_sim(Params().sim)
    track = track_for(e.track_id.iloc[0], Params().collect.tracks.model_dump_json())
    st = sim.reset(track, e.x[0], e.y[0], e.yaw[0], e.vx[0])
    for t in range(len(e) - 1):
        st = sim.step(Control(e.steering_cmd[t], e.throttle_cmd[t], e.brake_cmd[t]))
        got = [st.x, st.y, st.vx, st.vy, st.yaw_rate, st.steer]
        want = e.loc[t + 1, ["x", "y", "vx", "vy", "yaw_rate", "steer"]].to_numpy(dtype=float)
        np.testing.assert_allclose(got, want, atol=1e-3, err_msg=f"step {t}")


def test_ice_episodes_record_low_friction(dataset: tuple[Path, pd.DataFrame]) -> None:
    _, df = dataset
    ice = df.track_id.str.endswith("-ice")
    assert ice.any() and (~ice).any()
    assert (df.loc[~ice, ["mu_fl", "mu_fr", "mu_rl", "mu_rr"]] == 1.0).all().all()
    track_params = Params().collect.tracks
    lo = df.loc[ice, "mu_mean"].min()
    assert track_params.patch_mu_min - 1e-9 <= lo < 0.5, "an ice episode of this size crosses a patch"


def test_track_errors_survive_worker_processes() -> None:
    err = pickle.loads(pickle.dumps(TrackError("track 'x'", "self-intersects at segment 3")))
    assert isinstance(err, TrackError) and str(err) == "track 'x': self-intersects at segment 3"


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


def test_resume_redoes_shards_that_are_corrupted_or_from_other_params(
    dataset: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    _, ref = dataset
    params = tiny(tmp_path, "collect.workers=1")
    collect(params, quiet=True)
    out = tmp_path / "rollouts"
    shard = out / shard_name(1)
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # data page damaged, footer (and its provenance key) intact
    shard.write_bytes(bytes(raw))
    other = tiny(tmp_path / "other", "collect.workers=1", "seed=5")
    collect(other, quiet=True)
    (out / shard_name(2)).write_bytes((tmp_path / "other" / "rollouts" / shard_name(2)).read_bytes())
    collect(params, quiet=True)
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
    with workspace_lock(tmp_path / "rollouts", "s3 collect"), pytest.raises(WorkspaceBusy, match="already running"):
        collect(params, quiet=True)


def test_careful_driver_stays_on_track() -> None:
    """Without noise or events the explorer is a competent driver: the data's off-track rows come from the
    perturbations."""
    params = load_params(
        None,
        [
            *TINY,
            "collect.episode_steps=300",
            "collect.driver.steer_noise=0",
            "collect.driver.pedal_noise=0",
            "collect.driver.event_rate=0",
            "collect.driver.lateral_accel=[6, 6]",
            "collect.ice_episode_fraction=0",
        ],
    )
    sim = make_sim(params.sim)
    df, why = run_episode(sim, params, 0)
    assert df is not None, why
    assert len(df) == 300 and not df.off_track.any()
    assert df.vx.max() > 10.0


@pytest.mark.slow  # ~8 s; nightly (make test-all); resume itself is tested in make test
def test_sigkill_then_rerun_equals_an_uninterrupted_run(dataset: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    """Kill `s3 collect` part-way with SIGKILL: the re-run keeps finished shards, shows no partial
    one, and ends with exactly the rows of an uninterrupted run; the run record (records/collect.json,
    in the command's cwd) keeps what the killed run's shards cost, so the re-run still knows the
    whole dataset's collection time."""
    _, ref = dataset
    out = tmp_path / "rollouts"
    record = tmp_path / "records" / "collect.json"  # the run record (metrics/collect.json is its headline twin)
    sets = [
        a
        for o in [*TINY, "collect.workers=1", f"collect.out_dir={out}", f"collect.plot_dir={tmp_path}/plots"]
        for a in ("--set", o)
    ]
    cmd = [sys.executable, "-m", "s3", "collect", "--quiet", *sets]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while (
        not ((out / shard_name(0)).exists() and record.exists()) and time.monotonic() < deadline and proc.poll() is None
    ):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = json.loads(record.read_text())
    assert before["complete"] is False and before["shards"], "a finished shard is recorded at once"
    assert not (out / "manifest.json").exists(), "a killed run must not leave a manifest claiming a dataset"
    assert all(f.suffix == ".parquet" or f.name == ".s3_lock" or f.name.endswith(".tmp") for f in out.iterdir())
    finished = {f.name: f.stat().st_mtime_ns for f in out.glob("shard-*.parquet")}
    assert finished, "the kill came after the first shard"
    subprocess.run(cmd, cwd=tmp_path, check=True, stdout=subprocess.DEVNULL)
    for name, mtime in finished.items():
        assert (out / name).stat().st_mtime_ns == mtime, f"{name} was redone"
    pd.testing.assert_frame_equal(load_rollouts(out), ref)
    after = json.loads(record.read_text())
    assert after["complete"] is True and {s["file"] for s in after["shards"] if s["reused"]} == set(finished)
    for s in before["shards"]:  # the killed run's shards keep their seconds
        assert next(a for a in after["shards"] if a["file"] == s["file"])["seconds"] == s["seconds"]
    if all(s["seconds"] is not None for s in after["shards"]):
        assert after["wall_seconds_total"] == pytest.approx(
            sum(s["seconds"] for s in after["shards"]) / after["workers"], abs=0.01
        )
