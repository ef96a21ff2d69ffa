"""Evaluate every seed of a trained policy in the source simulator, and the same runs in its own distilled env.

    evaluate_policy(name, folder, params, out_json, plots_dir) -> dict

The source-simulator half is `evaluate_driver` (every seed x circuit x condition x start of the
evaluation suite). The distilled half drives each seed from the same starts on the same circuits
inside the dynamics model it was trained in, all runs of a seed and condition as one batch, judged
by the same rules. `transfer_gap` of the two suite summaries is written into the same JSON under
"transfer_gap" (and the distilled summary under "distilled"): how much a policy's laps in its
training world overstate (or understate) its laps in the source simulator. "probes" holds the
manoeuvre probes of that model against the source simulator (s3.evaluate.probes): where the model
is wrong, not only how much.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from s3 import headline
from s3.evaluate.evaluate import eval_params_of, evaluate_driver, track_name, transfer_gap
from s3.evaluate.policy_driver import PolicyFactory
from s3.evaluate.suite import QUALITY, SUITE, block, policy_seeds
from s3.io import json_safe, write_text_atomic
from s3.progress import progress
from s3.tracks.evaluation_circuits import evaluation_track


def _model_folder(meta: dict[str, Any], models_dir: str | Path | None) -> tuple[Path, str]:
    """(folder, family) of the distilled model recorded in a policy's policy.json (models_dir/<family> if given)."""
    family = meta["family"]
    folder = (
        Path(models_dir) / family
        if models_dir is not None
        else Path(meta["dynamics_model"]["folder"] or f"models/{family}")
    )
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
    """Every seed of the policy in `folder` driven in its own distilled env from the evaluation starts.

    Returns {"rows": [...], "summary": {"suite": {cond: block}}} with the blocks of s3.evaluate.suite
    (completion rate, lap share, lap time); the model is the one recorded in policy.json
    (models_dir/<family> if given).
    """
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.rl.export import load_policy_fn, policy_env_params
    from s3.rl.rollout import run_episodes

    ep = eval_params_of(params)
    rows: list[dict[str, Any]] = []
    for seed, seed_folder in policy_seeds(folder):
        policy, meta = load_policy_fn(seed_folder)
        model = load_checkpoint(*_model_folder(meta, models_dir), "cpu")
        for cond in ep.conditions:
            tracks = [evaluation_track(spec, cond) for spec in ep.tracks]
            starts = [(t, i, frac) for t in range(len(tracks)) for i, frac in enumerate(ep.start_fractions)]
            batch = run_episodes(
                policy,
                model,
                tracks,
                [t for t, _, _ in starts],
                [frac * tracks[t].length for t, _, frac in starts],
                policy_env_params(meta),
                start_speed=ep.start_speed,
                max_seconds=ep.max_lap_seconds,
                ends=ep.judge.ends(),
            )
            done = batch.completed.astype(bool)
            for k, (t, i, _) in enumerate(starts):
                rows.append(
                    {
                        "seed": seed,
                        "track": track_name(ep.tracks[t]),
                        "condition": cond,
                        "start_index": i,
                        "completed": bool(done[k]),
                        "completion_fraction": float(np.clip(batch.progress[k] / tracks[t].length, 0.0, 1.0)),
                        "lap_time_s": float(batch.lap_time[k]) if done[k] else None,
                        "reason": batch.reason[k],
                    }
                )
    return {
        "rows": rows,
        "summary": {SUITE: {c: block([r for r in rows if r["condition"] == c], QUALITY) for c in ep.conditions}},
    }


def evaluate_policy(
    name: str,
    folder: str | Path,
    params: Any,
    out_json: str | Path,
    plots_dir: str | Path | None,
    models_dir: str | Path | None = None,
    distilled: bool = True,
) -> dict[str, Any]:
    """Source-simulator evaluation of every seed of policies/<name>/, plus (distilled=True) its transfer gap and its
    model's probes, in one JSON."""
    seeds = [(seed, PolicyFactory(f)) for seed, f in policy_seeds(folder)]
    result = evaluate_driver(name, seeds, params, out_json, plots_dir)
    if not distilled:
        return result
    with progress(f"evaluate {name}: in its model", 2, "parts") as bar:  # the same starts, the probes
        inside = distilled_laps(folder, params, models_dir)
        bar.advance()
        result["distilled"] = inside["summary"]
        result["probes"] = model_probes(folder, params, models_dir)
        bar.advance()
    result["transfer_gap"] = {
        c: transfer_gap(result["summary"][SUITE][c], inside["summary"][SUITE][c]) for c in inside["summary"][SUITE]
    }
    result = json_safe(result)  # an undefined metric (NaN) is null, not a crash after the runs
    headline.write_record(out_json, result, headline.evaluate)
    return result


def skipped_policy(name: str, folder: Path, out_json: Path, plots_dir: Path) -> dict[str, Any] | None:
    """A policy its train stage did not train (<folder>/skipped.json, s3.rl.direct_skip.write_skipped: `direct`
    with a BeamNG source): its evaluation record says why, and its plots folder holds only the reason.
    None when the folder holds a policy or no such record."""
    from s3.rl.direct_skip import SKIPPED

    record = Path(folder) / SKIPPED
    if (Path(folder) / "policy.json").exists() or not record.exists():
        return None
    result = {"driver": name, "skipped": json.loads(record.read_text())["skipped"]}
    headline.write_record(out_json, result, headline.evaluate)
    Path(plots_dir).mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(plots_dir) / "skipped.txt", result["skipped"] + "\n")
    return result
