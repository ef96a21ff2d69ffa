"""Manoeuvre probes (s3.evaluate.probes): the source car's physics in each manoeuvre, the
comparison arithmetic on hand-made traces, and a model driven from the source's start."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from s3.evaluate.probes import MANOEUVRES, SECONDS, compare, model_traces, probe_model, source_traces
from s3.sim.factory import make_sim
from s3.sim.params import SimParams

torch.set_num_threads(1)
DT = 0.1
IDX = {m.name: j for j, m in enumerate(MANOEUVRES)}


@pytest.fixture(scope="module")
def source() -> np.ndarray:
    sim = make_sim(SimParams())
    try:
        return source_traces(sim)
    finally:
        sim.close()


def _speed(tr: np.ndarray, name: str, t: float) -> float:
    return float(np.hypot(*tr[round(t / DT), IDX[name], 3:5]))


def _max_slip(tr: np.ndarray, name: str) -> float:
    j = IDX[name]
    return float(np.abs(np.arctan2(tr[:, j, 4], np.maximum(np.abs(tr[:, j, 3]), 0.5))).max())


def test_source_manoeuvres_obey_the_grip(source) -> None:
    assert source.shape == (round(SECONDS / DT) + 1, len(MANOEUVRES), 6) and np.isfinite(source).all()
    for m in MANOEUVRES:
        assert _speed(source, m.name, 0.0) == pytest.approx(m.speed, abs=0.05)
    # braking: ~mu g in the first second, asphalt (mu 1) against ice (mu 0.15: 1.47 m/s^2)
    assert 6.0 < 20.0 - _speed(source, "asphalt_brake", 1.0) < 11.0
    assert 0.8 < 15.0 - _speed(source, "ice_brake", 1.0) < 2.0
    # a moderate corner on asphalt holds its line and turns; the same steering with power on ice spins
    j = IDX["asphalt_corner"]
    assert _max_slip(source, "asphalt_corner") < 0.1 and abs(source[-1, j, 2] - source[0, j, 2]) > 1.0
    assert _max_slip(source, "ice_power_corner") > 0.5


def test_compare_on_hand_made_traces() -> None:
    t, m = round(SECONDS / DT) + 1, len(MANOEUVRES)
    src = np.zeros((t, m, 6))
    src[:, :, 3] = 10.0  # straight ahead at 10 m/s, no slip
    mdl = src.copy()
    mdl[:, :, 0] += 3.0
    mdl[:, :, 1] += 4.0  # 5 m off everywhere
    mdl[:, :, 2] += 0.2
    mdl[:, :, 3] = 11.0
    slid = IDX["ice_corner"]
    mdl[5:, slid, 4] = 11.0  # sideslip 45 degrees: the model slides, the source does not
    out = compare(src, mdl, DT)
    for name, row in out["manoeuvres"].items():
        assert row["pos_err_1s"] == pytest.approx(5.0) and row["pos_err_3s"] == pytest.approx(5.0)
        assert row["yaw_err_rad"] == pytest.approx(0.2) and not row["source_slid"]
        if name == "ice_corner":
            assert row["model_slid"] and row["model_max_sideslip"] == pytest.approx(np.pi / 4)
        else:
            assert not row["model_slid"] and row["speed_err"] == pytest.approx(1.0)
    s = out["summary"]
    assert s["pos_err_3s_asphalt"] == pytest.approx(5.0) and s["pos_err_3s_ice"] == pytest.approx(5.0)
    assert (s["slides_agreed"], s["source_slides"], s["manoeuvres"]) == (m - 1, 0, m)


def test_a_model_starts_where_the_source_starts(bicycle, source) -> None:
    mdl = model_traces(bicycle)
    assert mdl.shape == source.shape and np.isfinite(mdl).all()
    np.testing.assert_allclose(mdl[0], source[0], atol=1e-3)
    assert _speed(mdl, "asphalt_brake", 1.0) < 18.0  # the model brakes too
    with pytest.raises(ValueError, match="control_dt"):
        probe_model(bicycle, SimpleNamespace(control_dt=0.05))


def test_s3_probe_compares_a_saved_model_with_the_source(bicycle, source, tmp_path, monkeypatch) -> None:
    """`s3 probe --json` in a workspace with models/bicycle/: the probes of that model, one JSON object."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from s3.cli import app
    from s3.dynamics.checkpoint import save_checkpoint

    save_checkpoint(bicycle, tmp_path / "models" / "bicycle")
    params = Path(__file__).resolve().parents[1] / "params.yaml"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["probe", "--family", "bicycle", "--json", "--params", str(params)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert list(out) == ["bicycle"]
    expect = compare(source, model_traces(bicycle), DT)
    assert out["bicycle"]["summary"] == pytest.approx(expect["summary"])
    missing = CliRunner().invoke(app, ["probe", "--family", "ddm", "--params", str(params)])
    assert missing.exit_code == 2 and "ddm" in missing.output
