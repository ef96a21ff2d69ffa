"""Training, every seed: how far each seed of each trained policy got on the procedural hold-out, and why it ended.

    training_rows(train_dir, policies_dir, names) -> [row, ...]

One row per policy with a `records/train/<name>.json`, in the order of `names`:

    {"policy", "in": "model" | "source simulator",
     "seeds": [{"seed", "score", "score_dry", "env_steps", "kept_env_steps", "stopped_by", "wall_s",
                "curve": [{"iteration", "env_steps", "score", "score_dry", "score_ice"}, ...]}, ...],
     "dry": {"min", "mean", "sd", "n"}}

A seed's `score` / `score_dry` are its kept checkpoint's validation lap share (all runs / the dry runs) on the
held-out procedural tracks: inside the distilled model for a policy trained in one (records/train's
`seed_selection.seeds`), in the source simulator for `direct` (one seed, its record's `validation`). `curve` is every
validated chunk of that seed (`history` of policies/<name>/seeds/seed<k>/policy.json; direct: its record's
`learning_curve`, the all-runs score only); empty when the file is not there. `stopped_by` says what ended the seed
(plateau, step cap, wall-clock cap: s3.rl); `env_steps` is how far it trained, `kept_env_steps` where its kept
checkpoint lies (None when its curve does not hold it); `sd` is the sample SD over the seeds (None below 2). Nothing is
recomputed: this reads what the train stages wrote. These are the hold-out figures that recipes are chosen on
(docs/protocol.md); the evaluation suite is the report's other sections.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from s3.catalog import DIRECT
from s3.report.inputs import get, num, read_json


def _curve_point(p: Mapping[str, Any]) -> dict[str, Any]:
    score = num(p.get("score", p.get("val_score")))
    return {
        "iteration": p.get("iteration"),
        "env_steps": num(p.get("env_steps")),
        "score": score,
        **{k: num(p.get(k)) for k in ("score_dry", "score_ice")},
    }


def _seed_curve(policies_dir: Path, name: str, seed: int) -> list[dict[str, Any]]:
    try:
        meta = json.loads((policies_dir / name / "seeds" / f"seed{seed}" / "policy.json").read_text())
    except (OSError, ValueError):
        return []
    return [_curve_point(p) for p in meta.get("history") or [] if isinstance(p, Mapping)]


def _dry(seeds: list[Mapping[str, Any]]) -> dict[str, Any]:
    xs = [s["score_dry"] for s in seeds if s["score_dry"] is not None]
    if not xs:
        return {"min": None, "mean": None, "sd": None, "n": 0}
    sd = statistics.stdev(xs) if len(xs) > 1 else None
    return {"min": min(xs), "mean": statistics.fmean(xs), "sd": sd, "n": len(xs)}


def _direct_seed(rec: Mapping[str, Any]) -> dict[str, Any]:
    curve = [_curve_point(p) for p in rec.get("learning_curve") or [] if isinstance(p, Mapping)]
    return {
        "seed": rec.get("seed"),  # not recorded: direct trains one seed
        "score": num(get(rec, "validation", "score")),
        "score_dry": num(get(rec, "validation", "score_dry")),
        "env_steps": num(rec.get("env_steps")),
        "kept_env_steps": num(get(rec, "validation", "env_steps")),
        "stopped_by": rec.get("stopped_by"),
        "wall_s": num(rec.get("wall_s")),
        "curve": [p for p in curve if p["score"] is not None],
    }


def training_rows(train_dir: Path, policies_dir: Path, names: Iterable[str]) -> list[dict[str, Any]]:
    """The rows of the module docstring; a policy without a readable train record has none."""
    rows = []
    for name in names:
        rec = read_json(Path(train_dir) / f"{name}.json", []) if (Path(train_dir) / f"{name}.json").exists() else None
        if rec is None:
            continue
        if name == DIRECT:
            seeds, where = [_direct_seed(rec)], "source simulator"
        else:
            seeds, where = [], "model"
            for s in get(rec, "seed_selection", "seeds") or []:
                seed = s.get("seed")
                curve = _seed_curve(Path(policies_dir), name, seed) if isinstance(seed, int) else []
                kept = [
                    p["env_steps"] for p in curve if p["iteration"] is not None and p["iteration"] == s.get("iteration")
                ]
                seeds.append(
                    {
                        "seed": seed,
                        **{k: num(s.get(k)) for k in ("env_steps", "wall_s")},
                        "score": num(s.get("validation_score")),
                        "score_dry": num(s.get("validation_score_dry")),
                        "stopped_by": s.get("stopped_by"),
                        "kept_env_steps": kept[0] if kept else None,
                        "curve": curve,
                    }
                )
        if seeds:
            rows.append({"policy": name, "in": where, "seeds": seeds, "dry": _dry(seeds)})
    return rows
