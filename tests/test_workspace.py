"""s3.platform.workspace: a scratch copy records its source, parameter set and commit, so its
MLflow runs carry the source's commit and a meaningful name."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from s3 import tracking
from s3.platform.workspace import prepare_workspace


def test_a_workspace_records_its_origin_for_tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3_GIT_COMMIT", raising=False)
    monkeypatch.delenv(tracking.DVC_EXP_ENV, raising=False)
    src = tmp_path / "project"
    src.mkdir()
    (src / "params.yaml").write_text("seed: 0\n")
    (src / "params_quick.yaml").write_text("seed: 1\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=src, check=True)
    subprocess.run(git + ["add", "."], cwd=src, check=True)
    subprocess.run(git + ["commit", "-qm", "x"], cwd=src, check=True)
    sha = tracking.git_commit(src)
    assert len(sha) == 40
    ws = prepare_workspace(src, tmp_path / "s3-quick", "params_quick.yaml", share_cache=False)
    info = json.loads((ws / tracking.WORKSPACE_FILE).read_text())
    assert info == {"source": str(src.resolve()), "params_file": "params_quick.yaml", "source_commit": sha}
    assert (ws / "params.yaml").read_text() == "seed: 1\n"
    assert tracking.git_commit(ws) == sha  # the copy's own git has no commit: the source's
    assert tracking.pipeline_run_name(ws) == f"s3-quick/params_quick.yaml @ {sha[:8]}"
