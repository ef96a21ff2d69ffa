"""Where a pipeline run comes from: its git commit, the hashes of dvc.lock and params.yaml, and its name.

A parent (pipeline) run is named by `pipeline_run_name`: under `dvc exp run` the DVC experiment's
name ($DVC_EXP_NAME, which DVC sets in every stage of an experiment), otherwise
`<workspace folder>/<params file> @ <short commit>` (`@ <commit>` only when there is one), e.g.
`s3-quick/params_quick.yaml @ 1a2b3c4d`. It carries `pipeline_tags`: the params file and, under
`dvc exp run`, the experiment's name.

A scratch workspace (s3.platform.workspace) is a copy without the source's git history; it writes
WORKSPACE_FILE, a JSON object {"source": path, "params_file": name or null, "source_commit": sha},
from which a run in it takes its params file's name and, when its own git has no commit, its commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

DVC_EXP_ENV = "DVC_EXP_NAME"  # set by DVC in the stages of `dvc exp run`
COMMIT_ENV = "S3_GIT_COMMIT"
WORKSPACE_FILE = ".s3-workspace.json"
UNKNOWN = "unknown"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else "none"


def workspace_info(root: str | Path = ".") -> dict[str, Any]:
    """WORKSPACE_FILE at `root` as a dict; {} in a project that is no scratch workspace (or a broken file)."""
    try:
        info = json.loads((Path(root) / WORKSPACE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def git_commit(root: str | Path = ".") -> str:
    """$S3_GIT_COMMIT, else HEAD's sha with '-dirty' when tracked files differ, else (a scratch
    workspace's git has no commit) its source's commit from WORKSPACE_FILE; 'unknown' otherwise."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return str(workspace_info(root).get("source_commit") or UNKNOWN)


def run_tags(root: str | Path = ".") -> dict[str, str]:
    """The pipeline's provenance tags: git commit, dvc.lock and params.yaml hashes."""
    root = Path(root)
    return {
        "s3.git_commit": git_commit(root),
        "s3.dvc_lock_sha": _sha(root / "dvc.lock"),
        "s3.params_sha": _sha(root / "params.yaml"),
    }


def dvc_experiment() -> str | None:
    """The DVC experiment this process runs a stage of ($DVC_EXP_NAME), None outside `dvc exp run`."""
    return os.environ.get(DVC_EXP_ENV) or None


def params_file(root: str | Path = ".") -> str:
    """The parameter set the workspace runs: the file its params.yaml was copied from, else params.yaml."""
    return str(workspace_info(root).get("params_file") or "params.yaml")


def short_commit(commit: str) -> str | None:
    """'1a2b3c4d' of a full sha, '1a2b3c4d-dirty' of a dirty one; None for 'unknown' or ''."""
    if not commit or commit == UNKNOWN:
        return None
    sha, dirty, _ = commit.partition("-dirty")
    return sha[:8] + ("-dirty" if dirty else "")


def pipeline_run_name(root: str | Path = ".", commit: str | None = None) -> str:
    """The parent run's name (module docstring); `commit` defaults to git_commit(root)."""
    exp = dvc_experiment()
    if exp:
        return exp
    label = f"{Path(root).resolve().name}/{params_file(root)}"
    short = short_commit(git_commit(root) if commit is None else commit)
    return f"{label} @ {short}" if short else label


def pipeline_tags(root: str | Path = ".") -> dict[str, str]:
    """The parent run's own tags: `s3.params_file`, and `s3.dvc_experiment` under `dvc exp run`."""
    exp = dvc_experiment()
    return {"s3.params_file": params_file(root), **({"s3.dvc_experiment": exp} if exp else {})}
