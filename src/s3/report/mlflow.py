"""The report in MLflow: one run per policy trained in a model, the rest on the pipeline's parent run.

    log_report_mlflow(report, artifacts) -> {name or "_pipeline": run id or None}

Logs through s3.tracking (off when S3_MLFLOW is); writes nothing the stage outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from s3.catalog import DIRECT
from s3.report.inputs import num


def _numbers(d: Mapping[str, Any]) -> dict[str, Any]:
    """Nested dict of the numeric leaves (bools as 0/1), for MLflow metrics."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            sub = _numbers(v)
            if sub:
                out[k] = sub
        elif isinstance(v, bool):
            out[k] = float(v)
        elif num(v) is not None:
            out[k] = v
    return out


def log_report_mlflow(report: Mapping[str, Any], artifacts: Iterable[Path] = ()) -> dict[str, str | None]:
    """One MLflow run per distilled policy (accuracy and quality side by side, `report/...` metrics)
    plus the correlation, costs and baselines on the pipeline's parent run. Off when S3_MLFLOW is."""
    from s3.tracking import log_stage_safely

    artifacts = [Path(a) for a in artifacts]
    eff = report["efficiency"]
    ids: dict[str, str | None] = {}
    for name, r in report["rows"].items():
        if r["kind"] == "baseline":
            continue
        m = {
            "prediction": r["prediction"],
            "policy": r["policy"],
            "transfer_gap": r["transfer_gap"],
            "quality": r["quality"],
            "efficiency": eff["families"].get(name, {}),
            "efficiency_real_time": eff["real_time"].get(name, {}),
        }
        ids[name] = log_stage_safely("report", name, None, _numbers(m), artifacts)
    parent = {
        "correlation": {k: v for k, v in report["correlation"].items() if isinstance(v, Mapping)},
        "collect": eff["collect"],
        DIRECT: eff[DIRECT],
        "baselines": {n: {"policy": r["policy"]} for n, r in report["rows"].items() if r["kind"] == "baseline"},
    }
    ids["_pipeline"] = log_stage_safely("report", None, None, _numbers(parent), artifacts)
    return ids
