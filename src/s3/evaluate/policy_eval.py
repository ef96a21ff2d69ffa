"""Evaluate a trained policy in the source simulator, and the same starts in its own distilled env.

    evaluate_policy(name, folder, params, out_json, plots_dir) -> dict

The source-simulator half is `evaluate_driver` (every condition x start x seed on the held-out
road course). The distilled half drives the same policy from the same starts (the seed's lateral
offset and speed; the distilled env starts aligned with the centerline, so the small heading
perturbation is the one difference) inside the dynamics model it was trained in, all runs of a
condition as one batch. `transfer_gap` of the two aggregates is written into the same JSON under
"transfer_gap" and "distilled": how much a policy's lap in its training world overstates (or
understates) its lap in the source simulator. "probes" holds the manoeuvre probes of that model
against the source simulator (s3.evaluate.probes): where the model is wrong, not only how much.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from s3.evaluate.evaluate import eval_params_of, evaluate_driver, start_perturbation, transfer_gap
from s3.evaluate.policy_driver import policy_factory
from s3.io import write_json_atomic
from s3.tracks.road_course import road_course


def _mean(values: list[float]) -> dict[str, Any]:
    return {"mean": float(np.mean(values)) if values else None, "n": len(values)}


def _model_folder(meta: dict[str, Any], models_dir: str | Path | None) -> tuple[Path, str]:
    """(folder, family) of the distilled model recorded in a policy's policy.json (models_dir/<family> if given)."""
    family = meta["family"]
    folder = Path(models_dir) / family if models_dir is not None else Path(meta["dynamics_model"]["folder"] or f"models/{family}")
    return folder, family


def model_probes(folder: str | Path, params: Any, models_dir: str | Path | None = None) -> dict[str, Any]:
    """The manoeuvre probes (s3.evaluate.probes) of the policy's distilled model against the source simulator."""
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.evaluate.probes import probe_model
    from s3.sim.factory import make_sim

    meta = json.loads((Path(folder) / "policy.json").read_text())
    model = load_checkpoint(*_model_folder(meta, models_dir), "cpu")
    sim = make_sim(params.sim)
    try:
        return probe_model(model, sim)
    finally:
        sim.close()


def distilled_laps(folder: str | Path, params: Any, models_dir: str | Path | None = None) -> dict[str, Any]:
    """The policy in `folder` driven in its own distilled env from the evaluation starts.

    Returns {condition: {"aggregate": {completion_rate, lap_time_s, mean_speed_mps: {"mean", "n"}},
    "reasons": {...}}}; the model is the one recorded in policy.json (models_dir/<family> if given).
    """
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.rl.export import load_policy_fn, policy_env_params
    from s3.rl.rollout import run_episodes

    ep = eval_params_of(params)
    policy, meta = load_policy_fn(folder)
    model = load_checkpoint(*_model_folder(meta, models_dir), "cpu")
    env_params = policy_env_params(meta)
    out: dict[str, Any] = {}
    for cond in ep.conditions:
        track = road_course(cond)
        starts = [(i, frac, seed) for i, frac in enumerate(ep.start_fractions) for seed in ep.seeds]
        pert = [start_perturbation(seed, i, ep) for i, _, seed in starts]
        batch = run_episodes(
            policy, model, [track], [0] * len(starts), [frac * track.length for _, frac, _ in starts], env_params,
            start_d=[p[0] for p in pert], start_speed=[p[2] for p in pert], max_seconds=ep.max_lap_seconds, ends=ep.judge.ends(),
        )  # fmt: skip
        done = batch.completed.astype(bool)
        duration = np.where(done, batch.lap_time, batch.steps * model.dt)
        speeds = [float(max(p, 0.0) / t) for p, t in zip(batch.progress, duration) if t > 0]
        out[cond] = {
            "aggregate": {
                "completion_rate": _mean([float(d) for d in done]),
                "lap_time_s": _mean([float(t) for t in batch.lap_time[done]]),
                "mean_speed_mps": _mean(speeds),
            },
            "reasons": {r: batch.reason.count(r) for r in sorted(set(batch.reason))},
            "runs": len(starts),
        }
    return out


def evaluate_policy(name: str, folder: str | Path, params: Any, out_json: str | Path, plots_dir: str | Path | None,
                    models_dir: str | Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Source-simulator evaluation of policies/<name>/ plus its transfer gap, in one JSON."""
    result = evaluate_driver(name, policy_factory(folder), params, out_json, plots_dir)
    distilled = distilled_laps(folder, params, models_dir)
    result["distilled"] = distilled
    result["probes"] = model_probes(folder, params, models_dir)
    result["transfer_gap"] = {cond: transfer_gap(result["conditions"][cond]["aggregate"], distilled[cond]["aggregate"]) for cond in distilled}
    write_json_atomic(out_json, result)
    return result
