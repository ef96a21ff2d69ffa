"""The evaluate stage: which drivers `s3 evaluate --family` names, each evaluated on the suite (or on
`--track` circuits), recorded to its metrics file and to MLflow.

    results = evaluate_stage(params, "all", tracks=None, policies_dir=Path("policies"), models_dir=Path("models"))

A trained policy is driven every seed (s3.evaluate.policy_eval), a baseline every start
(s3.evaluate.evaluate.evaluate_baseline). The pipeline's results go to `evaluate.out_dir/<name>.json`
and `evaluate.plot_dir/<name>/`; `--track` circuits to `.../tracks/<name>_<circuits>.*`, never
logged to MLflow and never replacing the suite's. A policy the source simulator cannot run
(`direct` beside BeamNG) gets its skipped record; a missing policy is a ParamsError, except under
"all" for a policy beyond the families (the oracle, direct), which is skipped with a line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3.catalog import DIRECT
from s3.config import POLICIES_KEY, Params, ParamsError, pick_names
from s3.evaluate.evaluate import BASELINES, evaluate_baseline
from s3.evaluate.policy_eval import evaluate_policy, skipped_policy
from s3.tracking import log_evaluate


def with_tracks(params: Params, tracks: list[str]) -> Params:
    """`params` evaluating on `tracks` (built-in names or racing CSVs) instead of `evaluate.tracks`."""
    for spec in tracks:
        if spec.endswith(".csv") and not Path(spec).exists():
            raise ParamsError(f"--track {spec}: no such file")
    ep = params.evaluate.model_validate({**params.evaluate.model_dump(), "tracks": list(tracks)})
    return params.model_copy(update={"evaluate": ep})


def evaluate_stage(
    params: Params,
    family: str,
    tracks: list[str] | None,
    policies_dir: Path,
    models_dir: Path,
    say: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Evaluate the drivers `family` names (a policy, a baseline, or "all"): name -> its result."""
    p = with_tracks(params, tracks) if tracks else params
    ep = p.evaluate
    known = [*p.policies(), *BASELINES]
    results: dict[str, dict[str, Any]] = {}
    for name in pick_names(family, known, known, f"{POLICIES_KEY}; the baselines"):
        out, plots = Path(ep.out_dir) / f"{name}.json", Path(ep.plot_dir) / name
        if tracks:  # the pipeline's suite results (records/eval/<name>.json) stay as they are
            tag = "_".join(Path(t).stem for t in tracks)
            out, plots = (
                Path(ep.out_dir) / "tracks" / f"{name}_{tag}.json",
                Path(ep.plot_dir) / "tracks" / f"{name}_{tag}",
            )
        if name in BASELINES:
            results[name] = evaluate_baseline(name, p, out, plots)
        else:
            folder = policies_dir / name
            skipped = skipped_policy(name, folder, out, plots)  # direct with a BeamNG source
            if skipped is not None:
                results[name] = skipped
                say(f"evaluate: {name} not evaluated: {skipped['skipped']}")
                continue
            if not (folder / "policy.json").exists():
                if family == "all" and name not in p.families:
                    say(f"evaluate: skipping {name} ({folder} has no policy)")
                    continue
                raise ParamsError(f"{folder}: no policy; run `s3 train --family {name}` first")
            # direct was trained in the source simulator: no distilled env to compare with
            results[name] = evaluate_policy(name, folder, p, out, plots, models_dir, distilled=name != DIRECT)
        if not tracks:  # a custom circuit's results are not the pipeline's
            log_evaluate(p, name, results[name])
    return results
