"""The collect stage as `s3 collect` runs it: collect (s3.data.collect), log to MLflow, one summary line.

line = collect_stage(params, Path("."), quiet=False, metrics_path=Path("records/collect.json"))
"""

from __future__ import annotations

import json
from pathlib import Path

from s3.config import Params
from s3.data.collect import collect
from s3.tracking import log_collect


def collect_stage(params: Params, root: Path, quiet: bool = False, metrics_path: Path | None = None) -> str:
    """Run the collect stage under `root` and log it (S3_MLFLOW=0 skips); the line that says what it collected."""
    manifest = collect(params, root, quiet=quiet, metrics_path=metrics_path)
    m = json.loads(manifest.read_text())
    log_collect(params, manifest, record=root / metrics_path if metrics_path is not None else None)
    return (
        f"collected {m['rows']} rows in {m['episodes']} episodes ({m['episodes_dropped']} dropped, "
        f"{m['episodes_lost']} lost) with {m['simulator_version']} -> {manifest.parent}"
    )
