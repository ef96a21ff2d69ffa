"""Reading the report's inputs: the stage metrics as JSON, and the order the policies are listed in.

Nothing here guesses: a file that is absent or unreadable is None (and noted in the `missing`
list the caller passes), a value that is not a finite number is None.

    read_json(path, missing)          a JSON object, or None noted in `missing`
    get(d, *keys), num(x)             a nested value; a finite number (bools and NaN are not)
    json_names(folder)                the stems of folder/*.json
    order_names(names, ...)           families, then policies trained in a model, the baselines, the rest
    control_dt(manifest, ...)         the source simulator's control period
    horizon_curves(distill_dir)       family -> its records/distill `error_vs_horizon` curve
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from s3.catalog import FAMILIES, NOT_IN_MODEL, ORACLE

BASELINES = NOT_IN_MODEL  # the report's baselines: no distilled model (direct: PPO in the source; the pid controllers)


def read_json(path: Path, missing: list[str]) -> dict[str, Any] | None:
    """A JSON file, or None (noted in `missing`) when it is absent or unreadable."""
    if not path.exists():
        missing.append(f"{path}: not found")
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        missing.append(f"{path}: unreadable ({type(e).__name__})")
        return None
    return data if isinstance(data, dict) else None


def get(d: Mapping[str, Any] | None, *keys: str) -> Any:
    """d[k1][k2]...; None when any level is missing."""
    for k in keys:
        if not isinstance(d, Mapping) or k not in d:
            return None
        d = d[k]
    return d


def num(x: Any) -> float | None:
    """A finite number, else None (bools and NaN are not measurements)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def json_names(folder: Path) -> list[str]:
    """The stems of folder/*.json, sorted; none when the folder does not exist."""
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def order_names(
    names: Iterable[str], families: Iterable[str] = FAMILIES, models: Mapping[str, str] | None = None
) -> list[str]:
    """Families first, then the other policies trained in a model (the oracle) and the baselines,
    then anything else alphabetically."""
    families = list(families)
    known = [*families, *dict.fromkeys(n for n in [*(models or {}), ORACLE] if n not in families), *BASELINES]
    names = set(names)
    return [n for n in known if n in names] + sorted(names - set(known))


def control_dt(manifest: Mapping[str, Any] | None, metrics_dir: Path, evals: Mapping[str, Any]) -> float | None:
    """The source simulator's control period: manifest, else any eval file, else any distill file."""
    candidates = [num(get(manifest, "control_dt")), *(num(get(ev, "simulator", "control_dt")) for ev in evals.values())]
    for p in sorted((metrics_dir / "distill").glob("*.json")):
        candidates.append(num(get(read_json(p, []), "dt")))
    return next((dt for dt in candidates if dt is not None), None)


def distill_entries(distill_dir: Path, key: str) -> dict[str, Any]:
    """family -> the `key` entry of records/distill/<family>.json, families in their order (files that
    cannot be read, or have no such entry, left out)."""
    out = {}
    for name in order_names(json_names(distill_dir)):
        try:
            entry = json.loads((distill_dir / f"{name}.json").read_text()).get(key)
        except (OSError, ValueError):
            continue
        if entry:
            out[name] = entry
    return out


def ensemble_records(distill_dir: Path) -> dict[str, dict[str, Any]]:
    """family -> the `ensemble` entry (s3.dynamics.distill.ensemble_metrics) of each family distilled as one."""
    return distill_entries(distill_dir, "ensemble")


def horizon_curves(distill_dir: Path) -> dict[str, dict[str, Any]]:
    """family -> the `error_vs_horizon` entry of records/distill/<family>.json (families in their order)."""
    return distill_entries(distill_dir, "error_vs_horizon")
