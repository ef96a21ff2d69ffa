"""The DAgger rounds' rows: one per round of every `dagger@<policy>` stage (records/dagger/<policy>.json)
and of every experiment variant that ran one (records/experiments/<set>/<variant>.json's "dagger" record).

    dagger_rows(records_dir, experiments) -> [row, ...]   (records_dir: records/, with dagger/, distill/;
                                                            experiments: {set: {variant: result}})

Round 0 is train@<policy>'s policy, in the model distill@<family> made (its test error:
records/distill/<family>.json); round r >= 1 re-distilled on the data plus the rows
rounds 1..r drove, and re-trained. Each row: the kept policy's lap share on the procedural hold-out in the source
(dry and icy runs apart, with their n); the trained seeds' in-model and (where the seed choice measured them)
source hold-out scores, mean with their range and n (the seed is the unit of a policy's quality); the model's 2-s
ADE on the rows its policy drove in the next round (its error on the policy's own state distribution; the last
round's policy drove none) beside its ADE on the base data's test episodes; the round's wall clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from s3 import headline
from s3.dagger import DAGGER  # records/<DAGGER>/<policy>.json, an experiment result's key
from s3.report.inputs import read_json
from s3.report.levers import seed_scores, spread


def _seed_spreads(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    in_model = [float(s["validation_score"]) for s in seeds if s.get("validation_score") is not None]
    dry, ice = spread(seed_scores(seeds, "score_dry")), spread(seed_scores(seeds, "score_ice"))
    return {"in_model": spread(in_model), "source_dry": dry, "source_ice": ice}


def _row(label: str, r: dict[str, Any], seeds: list[dict[str, Any]], test_ade: float | None) -> dict[str, Any]:
    src = r.get("source") or {}
    return {
        "policy": label,
        "round": r.get("round"),
        "kept": {k: src.get(k) for k in ("score", "score_dry", "score_ice", "runs_dry", "runs_ice")},
        "seeds": _seed_spreads(seeds),
        "ade_2s_own_rows": (r.get("error_on_own_rows") or {}).get("ade_2s"),
        "ade_2s_test": test_ade,
        "wall_s": r.get("wall_s"),
    }


def _rounds(label: str, record: dict[str, Any], distilled: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per round; round 0's model is distill@<family>'s (`distilled`: its record, or None)."""
    rows = []
    for r in record.get("rounds") or []:
        test_ade = r.get("distill_test_ade_2s")
        if r.get("round") == 0:
            test_ade = headline.distill(distilled).get("ade_2s") if distilled else None
        rows.append(_row(label, r, r.get("seeds") or [], test_ade))
    return rows


def dagger_rows(records_dir: Path, experiments: dict[str, dict[str, dict[str, Any]]] | None = None) -> list[dict]:
    """Every round of every records/dagger/<policy>.json (labelled by its policy), then of every experiment
    variant's (labelled `<policy> (<set>/<variant>)`), in policy (then set and variant) and round order; [] when none
    ran."""
    rows: list[dict[str, Any]] = []
    for path in sorted((Path(records_dir) / DAGGER).glob("*.json")):
        record = read_json(path, [])
        if not record:
            continue
        family = record.get("family")
        distilled = read_json(Path(records_dir) / "distill" / f"{family}.json", []) if family else None
        rows += _rounds(record.get("policy", path.stem), record, distilled)
    for set_name, variants in sorted((experiments or {}).items()):
        for variant, v in sorted(variants.items()):
            record = v.get(DAGGER)
            if record:
                policy = record.get("policy") or (v.get("train") or {}).get("policy", "?")
                rows += _rounds(f"{policy} ({set_name}/{variant})", record, v.get("distill"))
    return rows
