"""The distill stage as `s3 distill` runs it: distill each family (s3.dynamics.distill), log to MLflow.

metrics = distill_stage(params, ["ddm"], Path("models"), Path("records/distill"), Path("plots/distill"))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from s3.config import Params
from s3.dynamics.distill import distill_many
from s3.tracking import log_distill


def distill_stage(
    params: Params, families: list[str], models_dir: Path, metrics_dir: Path, plots_dir: Path, quiet: bool = False
) -> dict[str, dict[str, Any]]:
    """Distill `families` from `collect.out_dir` and log each (S3_MLFLOW=0 skips): family -> its metrics.
    `quiet`: no per-epoch detail (progress still shows)."""
    dp = params.distill.model_copy(update={"progress_bar": params.distill.progress_bar and not quiet})
    results = distill_many(families, Path(params.collect.out_dir), models_dir, metrics_dir, plots_dir, dp)
    log_distill(params, families)
    return results
