"""Headline metrics: the few numbers per stage output that a researcher compares across experiments.

Every stage writes its detailed record under `records/` (per seed, per lap, per circuit, with the
definitions and reasons; committed, DVC `outs` with `cache: false`) and, from it, one small flat file
of numbers at the same place under `metrics/`, which dvc.yaml declares as the stage's DVC `metrics`
(what `dvc metrics show`, `dvc exp show` and `dvc metrics diff` compare):

    write_record(Path("records/distill/ddm.json"), record, distill)  # + metrics/distill/ddm.json

Contract: keys are flat strings (a dot groups them: `nominal.completed`), values finite numbers
(a bool is written as 0 or 1). A value that does not exist (no lap completed: no lap time; a NaN)
is left out, never written as text or NaN. A record outside a `records/` folder has no headline.
Each summary reads the record as written (JSON types only). docs/metrics.md lists every key with
its unit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from s3.io import write_json_atomic

RECORDS, METRICS = "records", "metrics"
Headline = dict[str, float]


def twin(record: str | Path) -> Path | None:
    """The headline path of a record: its last `records` folder replaced by `metrics` (None: none)."""
    parts = list(Path(record).parts)
    if RECORDS not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index(RECORDS)
    return Path(*parts[:i], METRICS, *parts[i + 1 :])


def write_record(path: str | Path, record: Any, summarise: Callable[[Any], Headline]) -> Path:
    """Write `record` to `path` (atomic JSON) and `summarise(record as written)` to its twin under
    metrics/ (if `path` lies under records/); returns `path`."""
    out = write_json_atomic(path, record)
    headline = twin(out)
    if headline is not None:
        write_json_atomic(headline, clean(summarise(json.loads(out.read_text()))))
    return out


def clean(values: Mapping[str, Any]) -> Headline:
    """Flat, finite numbers only, in key order: bools as 0/1, None and non-finite values dropped.
    Text is a programming error (it belongs in the record): ValueError names the key."""
    out: Headline = {}
    for key, v in values.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = int(v)
        if not isinstance(v, (int, float)):
            raise ValueError(f"headline {key!r}: {v!r} is not a number (text belongs in the record)")
        if math.isfinite(v):
            out[key] = round(v, 6) if isinstance(v, float) else v
    return dict(sorted(out.items()))


def _get(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, Mapping) or k not in d:
            return None
        d = d[k]
    return d


def _finite(xs: Iterable[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]


def _mean(xs: Iterable[Any]) -> float | None:
    vals = _finite(xs)
    return sum(vals) / len(vals) if vals else None


def _min(xs: Iterable[Any]) -> float | None:
    vals = _finite(xs)
    return min(vals) if vals else None


def _interval(est: Any) -> dict[str, Any]:
    """An interval record ({estimate, ci95: [lo, hi] or "[lo, hi]"}) as (value, lo, hi)."""
    ci = _get(est, "ci95")
    if isinstance(ci, str):
        ci = json.loads(ci)
    lo, hi = ci if isinstance(ci, list) and len(ci) == 2 else (None, None)
    return {"": _get(est, "estimate"), "_lo": lo, "_hi": hi}


def collect(record: Mapping[str, Any]) -> Headline:
    """records/collect.json: the collection's wall clock (s, every run of it), shards and workers."""
    return clean(
        {
            "wall_s": record.get("wall_seconds_total"),
            "shards": len(record.get("shards") or []),
            "workers": record.get("workers"),
        }
    )


def distill(record: Mapping[str, Any]) -> Headline:
    """records/distill/<family>.json: one-step RMSE per channel (m/s, rad/s) and open-loop ADE/FDE (m)
    at 1 s and 2 s on the held-out test episodes (all surfaces)."""
    rmse = record.get("one_step_rmse") or {}
    roll = _get(record, "rollout", "all") or {}
    return clean(
        {
            **{f"rmse_1step.{ch}": rmse.get(ch) for ch in ("vx", "vy", "yaw_rate")},
            **{k: roll.get(k) for k in ("ade_1s", "fde_1s", "ade_2s", "fde_2s")},
        }
    )


def train(record: Mapping[str, Any]) -> Headline:
    """records/train/<policy>.json: the validation score on held-out procedural tracks, mean over
    seeds, inside the model (`score_in_model`) and in the source (`score_in_source`, where measured), and
    the same on the tracks without a friction patch (`nominal_in_model`, `nominal_in_source`) with the worst
    seed's (`..._min`: every seed counts) and, in the source, on the icy ones (`ice_in_source`);
    the kept seed's env steps; the stage's wall clock (s, every seed); why the seeds ended:
    `truncated_seeds` (the wall-clock safety cap stopped them), `plateau_seeds` (their validation
    score stopped improving), the rest at the step budget (a record without each seed's reason:
    the kept seed's)."""
    if "skipped" in record:  # not trainable beside this source simulator: nothing to compare
        return {}
    seeds = _get(record, "seed_selection", "seeds")
    train_ = record.get("train") if isinstance(record.get("train"), Mapping) else record
    if seeds:  # PPO inside a distilled model, K seeds
        known = all("stopped_by" in s for s in seeds)  # else an older record: the kept seed's reason
        ended = [s.get("stopped_by") for s in seeds] if known else [train_.get("stopped_by")]
        return clean(
            {
                "score_in_model": _mean(s.get("validation_score") for s in seeds),
                "score_in_source": _mean(_get(s, "source", "score") for s in seeds),
                "nominal_in_model": _mean(s.get("validation_score_dry") for s in seeds),
                "nominal_in_source": _mean(_get(s, "source", "score_dry") for s in seeds),
                "nominal_in_model_min": _min(s.get("validation_score_dry") for s in seeds),
                "nominal_in_source_min": _min(_get(s, "source", "score_dry") for s in seeds),
                "ice_in_source": _mean(_get(s, "source", "score_ice") for s in seeds),
                "env_steps": train_.get("env_steps"),
                "wall_s": _get(record, "seed_selection", "wall_s") or train_.get("wall_s"),
                "seeds": len(seeds),
                "truncated_seeds": ended.count("max_minutes"),
                "plateau_seeds": ended.count("plateau"),
            }
        )
    in_source = "source" in str(_get(record, "validation", "in") or "")
    return clean(
        {
            ("score_in_source" if in_source else "score_in_model"): _get(record, "validation", "score"),
            ("nominal_in_source" if in_source else "nominal_in_model"): _get(record, "validation", "score_dry"),
            "env_steps": train_.get("env_steps"),
            "wall_s": train_.get("wall_s"),
            "seeds": 1,
            "truncated_seeds": int(train_.get("stopped_by") == "max_minutes"),
            "plateau_seeds": int(train_.get("stopped_by") == "plateau"),
        }
    )


def evaluate(record: Mapping[str, Any]) -> Headline:
    """records/eval/<driver>.json: per condition over the suite, laps completed (share of runs) and
    lap share with their 95 % intervals over seeds (a driver with several seeds), and the mean lap
    time (s) of the completed laps."""
    out: dict[str, Any] = {}
    several = len(record.get("seeds") or []) > 1
    for cond, s in (_get(record, "summary", "suite") or {}).items():
        for key, name in (("completion_rate", "completed"), ("lap_share", "lap_share")):
            for suffix, v in _interval(s.get(key)).items():
                if several or not suffix:
                    out[f"{cond}.{name}{suffix}"] = v
        out[f"{cond}.lap_time_s"] = _get(s, "lap_time_s", "estimate")
    return clean(out)


def time_to_quality(record: Mapping[str, Any]) -> Headline:
    """records/time_to_quality.json: per route (direct, each distilled policy) whether it reached a
    lap-completing policy (0/1) and its time to it (s, the record's time axis) where it did."""
    out: dict[str, Any] = {}
    for route, r in record.items():
        if isinstance(r, Mapping) and "reached" in r:
            out[f"{route}.reached"] = bool(r["reached"])
            out[f"{route}.t_to_quality_s"] = r.get("t_to_quality_s")
    return clean(out)


def dagger(record: Mapping[str, Any]) -> Headline:
    """records/dagger/<policy>.json: per round r (0 = train@<policy>'s policy), the kept policy's lap share on
    the procedural hold-out in the source (`round<r>.source`, its dry and icy runs apart), and the 2-s ADE (m) of
    the model it trained in on the rows it drove (`round<r>.ade_2s_own_rows`, where the next round measured it)."""
    out: dict[str, Any] = {}
    for row in record.get("rounds") or []:
        r, src = f"round{row.get('round')}", row.get("source") or {}
        out.update({f"{r}.source": src.get("score"), f"{r}.source_dry": src.get("score_dry")})
        out[f"{r}.source_ice"] = src.get("score_ice")
        out[f"{r}.ade_2s_own_rows"] = _get(row, "error_on_own_rows", "ade_2s")
    return clean(out)


def report(record: Mapping[str, Any]) -> Headline:
    """records/report.json: per claim, its first (primary) row's effect and 95 % interval, and how
    many of its rows hold of how many."""
    out: dict[str, Any] = {}
    for row in record.get("claims") or []:
        claim = "claim" + str(row.get("claim", "")).split(" ")[0]
        if f"{claim}.rows" not in out:
            iv = _interval({"estimate": row.get("effect"), "ci95": row.get("ci95")})
            out.update({f"{claim}.effect{k}": v for k, v in iv.items()})
            out[f"{claim}.rows"], out[f"{claim}.holds"] = 0, 0
        out[f"{claim}.rows"] += 1
        out[f"{claim}.holds"] += row.get("verdict") == "holds"
    return clean(out)
