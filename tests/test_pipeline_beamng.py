"""The quick pipeline through `dvc repro` with BeamNG as the source (the loopback stand-in, through
the real beamngpy client): every stage runs; `direct` is skipped with its reason (issue 26)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from s3.sim.beamng_standin import BeamngStandin

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FAMILIES = ("bicycle", "ddm", "transformer", "dytr")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # ~10 min on 2 cores: `make test-all` and the nightly flow


def test_dvc_repro_on_beamng_runs_every_stage_but_direct(tmp_path: Path) -> None:
    from s3.platform.workspace import prepare_workspace

    ws = prepare_workspace(ROOT, tmp_path / "ws", "params_quick.yaml", share_cache=False)
    with BeamngStandin() as standin:
        tree = yaml.safe_load((ws / "params.yaml").read_text())
        tree.setdefault("sim", {})["backend"] = "beamng"
        tree["sim"].setdefault("beamng", {}).update({"port": standin.port, "request_timeout": 30.0})
        (ws / "params.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "S3_MLFLOW": "0"}
        out = subprocess.run([str(BIN / "dvc"), "repro"], cwd=ws, env=env, capture_output=True, text=True, timeout=2300)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert standin.received.count("Step") > 1000  # collection and evaluation drove the stand-in
    for stage in (
        "collect",
        *(f"distill@{f}" for f in FAMILIES),
        *(f"train@{f}" for f in FAMILIES),
        "train_direct",
        "evaluate@ddm",
        "report",
    ):
        assert f"Running stage '{stage}'" in out.stdout, stage
    manifest = json.loads((ws / "data/rollouts/manifest.json").read_text())
    assert manifest["simulator"] == "beamng" and manifest["episodes_lost"] == 0
    assert not (ws / "policies/direct/policy.json").exists()
    reason = json.loads((ws / "policies/direct/skipped.json").read_text())["skipped"]
    assert (
        "sim.backend 'mujoco'" in reason
        and json.loads((ws / "records/eval/direct.json").read_text())["skipped"] == reason
    )
    ev = json.loads((ws / "records/eval/ddm.json").read_text())
    assert ev["simulator"]["name"] == "beamng" and ev["simulator"]["driver_aids"] is None and ev["lost"] == []
    train = json.loads((ws / "records/train/ddm.json").read_text())
    assert train["seed_selection"]["in"] == "model" and "beamng" in train["seed_selection"]["source_choice_not_run"]
    report = (ws / "reports/report.md").read_text()
    assert "not run" in report
