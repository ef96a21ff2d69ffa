"""Where a pipeline run comes from: its git commit, the hashes of dvc.lock and params.yaml, and its name.

A parent (pipeline) run is named by `pipeline_run_name`: under `dvc exp run` the DVC experiment's
name ($DVC_EXP_NAME, which DVC sets in every stage of an experiment), otherwise
`<workspace folder>/<params file> @ <short commit>` (`@ <commit>` only when there is one), e.g.
`s3-quick/params_quick.yaml @ 1a2b3c4d`. It and its family runs carry `pipeline_tags`: the params
file, the DVC experiment's name (`none` outside `dvc exp run`) and the overridden params: every
params.yaml value that differs from the committed params.yaml (what `dvc exp run -S` set), as
`s3.overrides` ("train.ppo.learning_rate=0.0005; ...", `none`) and one `s3.override.<key>` tag each,
so the UI finds an experiment's runs by `tags.s3.dvc_experiment = 'lr5e-4'` or by an override.

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

from s3.tracking.values import flatten

DVC_EXP_ENV = "DVC_EXP_NAME"  # set by DVC in the stages of `dvc exp run`
COMMIT_ENV = "S3_GIT_COMMIT"
WORKSPACE_FILE = ".s3-workspace.json"
UNKNOWN = "unknown"
NONE = "none"
MAX_OVERRIDE_TAGS = 20  # one tag per overridden key up to this many (s3.overrides lists them all)


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


def overrides(root: str | Path = ".") -> dict[str, str] | None:
    """params.yaml's values that differ from its committed version (git HEAD), key -> new value as
    YAML; None when there is no committed version to compare with (no git, no commit)."""
    import yaml

    root = Path(root)
    try:
        base = subprocess.run(
            ["git", "show", "HEAD:./params.yaml"], cwd=root, capture_output=True, text=True, check=True
        ).stdout
        old, new = yaml.safe_load(base) or {}, yaml.safe_load((root / "params.yaml").read_text()) or {}
    except (OSError, subprocess.CalledProcessError, yaml.YAMLError):
        return None
    a, b = flatten(old), flatten(new)  # an empty mapping has no leaves: filling it is one override
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k, NONE) != b.get(k, NONE))
    return {k: json.dumps(b[k]) if k in b else "(removed)" for k in changed}


def pipeline_tags(root: str | Path = ".") -> dict[str, str]:
    """The tags of a pipeline run and its family runs (module docstring)."""
    over = overrides(root)
    listed = UNKNOWN if over is None else "; ".join(f"{k}={v}" for k, v in over.items()) or NONE
    return {
        "s3.params_file": params_file(root),
        "s3.dvc_experiment": dvc_experiment() or NONE,
        "s3.overrides": listed[:4000],
        **{f"s3.override.{k}": v[:500] for k, v in list((over or {}).items())[:MAX_OVERRIDE_TAGS]},
    }
