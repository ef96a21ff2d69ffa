"""The dagger stage: `dagger.rounds` DAgger-style rounds for one policy (dvc.yaml `dagger@<policy>`).

    dagger_stage(params, name) -> record   (records/dagger/<name>.json, metrics/dagger/<name>.json)

Round r (1, 2, ...) starts from the latest policy (round 1: policies/<name>/, what train@<name> kept)
and the model it trained in (models/<family>/); everything it writes lies under dagger/<name>/round<r>/:
1. the policy drives `dagger.episodes` collection episodes in the source (s3.dagger.round), noisy by
   `dagger.noise`, `dagger.ice_fraction` of them icy: rows/;
2. that model's open-loop error on those rows: its error on the policy's own state distribution
   (s3.dagger.error; the same ADE as distillation's test metrics);
3. the family is distilled again on the collected data plus rounds 1..r (`distill.extra_rollouts`; the
   rounds' episodes only train, so the test split is the base one): models/<family>/;
4. the policy trains again in that model, with the train params of train@<name> (K seeds, the same
   seed choice): policies/<name>/ (every seed's record: policies/records/).
Every round's kept policy, round 0's included, is scored on the procedural hold-out in the source
(s3.rl.source_selection: `train.source_validation_tracks` tracks x the validation starts, never an
evaluation circuit), so the rounds compare on one set of runs: the seed choice's measurement where it made
one (`train.seed_selection: source`; round 0's from its policy.json), else a measurement of the kept policy.
The record keeps every trained seed of every round. Nothing is logged to MLflow: the family's runs hold
train@<name>'s policy, and the record is the stage's DVC metrics. A non-finite error is recorded as null.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from s3 import headline
from s3.config import Params
from s3.dagger.error import model_error
from s3.dagger.round import collect_round
from s3.dynamics.distill import distill_many
from s3.io import json_safe
from s3.rl.export import META
from s3.rl.source_selection import source_scores
from s3.rl.stage import train_one

OUT, RECORDS = Path("dagger"), Path("records")  # dagger/<policy>/round<r>/{rows,models,policies}/, records/dagger/


SOURCE_KEYS = ("score", "score_dry", "score_ice", "runs_dry", "runs_ice", "car_steps", "tracks")
SEED_KEYS = ("seed", "validation_score", "validation_score_dry", "env_steps", "stopped_by", "wall_s")


def _source(params: Params, name: str, policy_dir: Path, trained: dict[str, Any] | None = None) -> dict[str, Any]:
    """The exported policy in `policy_dir` on the procedural hold-out in the source: score, dry, ice, runs. When
    `trained` (its train summary) already drove the kept seed there (`train.seed_selection: source`: the same
    tracks and starts, s3.rl.source_selection), that measurement."""
    sel = (trained or {}).get("seed_selection") or {}
    kept = [r["source"] for r in sel.get("seeds", []) if r["seed"] == sel.get("selected_seed") and "source" in r]
    s = kept[0] if kept else source_scores([policy_dir], params, params.train.for_policy(name))[0]
    return {k: s.get(k) for k in SOURCE_KEYS}


def _seeds(trained: dict[str, Any]) -> list[dict[str, Any]]:
    """Every trained seed's in-model hold-out score, end and cost, and its source hold-out score where the seed
    choice measured it (`train.seed_selection: source`): the round's quality with the seed as the unit."""
    out = []
    for s in (trained.get("seed_selection") or {}).get("seeds") or []:
        row = {k: s.get(k) for k in SEED_KEYS}
        if s.get("source"):
            row["source"] = {k: s["source"].get(k) for k in SOURCE_KEYS}
        out.append(row)
    return out


def _model_error(model_dir: Path, rows: Path) -> dict[str, Any]:
    err = model_error(model_dir, rows)
    return {k: v for k, v in err.items() if k not in ("model", "rollouts")}


def dagger_stage(params: Params, name: str, root: Path = Path(".")) -> dict[str, Any]:
    """Run `params.dagger.rounds` rounds for policy `name` under `root` (module docstring); return the record."""
    dp, family = params.dagger, params.model_of(name)  # ParamsError for a policy not trained in a model
    policy, model = root / "policies" / name, root / "models" / family
    kept = {"seed_selection": json.loads((policy / META).read_text()).get("seed_selection") or {}}  # train@<name>'s
    base_extra = list(params.distill.extra_rollouts)
    zero = {"round": 0, "policy": str(policy), "model": str(model), "seeds": _seeds(kept)}
    record: dict[str, Any] = {
        "policy": name,
        "family": family,
        "dagger": dp.model_dump(mode="json"),
        "rounds": [{**zero, "source": _source(params, name, policy, kept)}],
    }
    rows_so_far: list[str] = []
    for r in range(1, dp.rounds + 1):
        t0 = time.perf_counter()
        here = root / OUT / name / f"round{r}"
        rows, models_r, policies_r = here / "rows", here / "models", here / "policies"
        manifest = collect_round(params, policy, rows, r, dp.episodes, dp.ice_fraction, dp.noise)
        record["rounds"][-1]["error_on_own_rows"] = _model_error(model, rows)  # the model the driver trained in
        rows_so_far.append(str(rows))
        p = params.model_copy(
            update={"distill": params.distill.model_copy(update={"extra_rollouts": base_extra + rows_so_far})}
        )
        distilled = distill_many([family], root / params.collect.out_dir, models_r, models_r, models_r, p.distill)
        trained = train_one(name, p, models_r, policies_r, policies_r, policies_r / "records", track=False)
        policy, model = policies_r / name, models_r / family
        record["rounds"].append(
            {
                "round": r,
                "rows": str(rows),
                "manifest": str(manifest),
                "policy": str(policy),
                "model": str(model),
                "distill_test_ade_2s": headline.distill(distilled[family]).get("ade_2s"),
                "train": headline.train(trained),
                "seeds": _seeds(trained),
                "source": _source(p, name, policy, trained),
                "wall_s": round(time.perf_counter() - t0, 1),
            }
        )
    record = json_safe(record)  # a model that diverges on the policy's rows gives an inf error: null, not NaN
    headline.write_record(root / RECORDS / "dagger" / f"{name}.json", record, headline.dagger)
    return record
