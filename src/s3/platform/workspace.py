"""Scratch workspaces: a copy of the project's source with another parameter set.

A parameter set (params_quick.yaml, a regression set) is a complete params.yaml. Running the
pipeline on it happens in a separate workspace so the main one keeps its results:

    python -m s3.platform.workspace params_quick.yaml /tmp/s3-quick   # then: cd /tmp/s3-quick && dvc repro

The copy holds the files git tracks plus untracked, not ignored ones (so work in progress is
included), never results (data, models, metrics, plots, dvc.lock, baselines). By default it shares
the source's DVC cache (outputs seen before are restored instead of recomputed) through
.dvc/config.local.

The copy has a git repository of its own without commits; it records where it comes from in
s3.tracking's WORKSPACE_FILE ({"source", "params_file", "source_commit"}), so its MLflow runs carry
the source's commit and are named after the workspace and its parameter set.
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import sys
from pathlib import Path

from s3.tracking import WORKSPACE_FILE, git_commit

# pipeline results (git-tracked metrics included) and the lock describing them stay behind:
# the workspace computes its own for its parameter set
RESULTS = (
    "dvc.lock",
    "data/",
    "models/",
    "policies/",
    "records/",
    "metrics/",
    "plots/",
    "reports/",
    "baselines/",
    "mlflow.db",
    "mlartifacts/",
)


REPORT_FOLDERS = ("experiments", "dagger")  # records/<folder>: report deps that stages may leave without results


def source_files(src: Path) -> list[str]:
    """Tracked plus untracked-but-not-ignored files of the git repository at `src`, less results."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src, capture_output=True, check=True
    ).stdout
    names = {f for f in out.decode().split("\0") if f and not f.startswith(RESULTS)}
    return sorted(f for f in names if (src / f).is_file())


def prepare_workspace(
    src: str | Path, dest: str | Path, params_file: str | Path | None = None, share_cache: bool = True
) -> Path:
    """Create or refresh `dest` from `src`; write `params_file` as its params.yaml."""
    src, dest = Path(src).resolve(), Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    for name in source_files(src):
        s, d = src / name, dest / name
        if d.exists() and filecmp.cmp(s, d, shallow=False):
            continue  # keep mtimes: DVC's hash cache stays warm
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)
    if not (dest / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    if not (dest / ".dvc" / "config").exists():
        subprocess.run([str(Path(sys.executable).parent / "dvc"), "init", "-q", "--force"], cwd=dest, check=True)
    local = dest / ".dvc" / "config.local"
    if share_cache:
        local.write_text(f"[cache]\n    dir = {src / '.dvc' / 'cache'}\n")
    else:
        local.unlink(missing_ok=True)
    for folder in REPORT_FOLDERS:  # the report's deps on the study's results and the DAgger rounds: there, empty
        there = dest / "records" / folder
        there.mkdir(parents=True, exist_ok=True)
        if (src / "records" / folder / "README.md").exists() and not (there / "README.md").exists():
            shutil.copy2(src / "records" / folder / "README.md", there / "README.md")
    if params_file is not None:
        p = Path(params_file)
        shutil.copy2(p if p.is_absolute() else src / p, dest / "params.yaml")
    origin = {"source": str(src), "params_file": None if params_file is None else Path(params_file).name}
    (dest / WORKSPACE_FILE).write_text(json.dumps({**origin, "source_commit": git_commit(src)}, indent=1) + "\n")
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m s3.platform.workspace PARAMS_FILE DEST")
    print(prepare_workspace(Path.cwd(), sys.argv[2], sys.argv[1]))
