"""`direct` with several seeds: K PPO runs in the source simulator, one after another, every one kept.

    train_direct_seeds(params, out_dir, plots_dir, metrics_dir, budget_s=None, run=None) -> summary
writes
    <out_dir>/.seeds/direct/seed<k>/      each run as it trains, and its DONE file once finished, outside the DVC
                                          output (`dvc repro` deletes it): a killed stage keeps its finished runs;
                                          moved into the output once every run is done
    <out_dir>/direct/seeds/seed<k>/       each run's policy, checkpoints/ and learning curve (k = train.seed + i)
    <out_dir>/direct/                     the best run's policy (+ "seed_selection" in its policy.json)
    <plots_dir>/direct.png, .csv          the best run's learning curve
    <metrics_dir>/direct.json             the best run's summary + seed_selection.seeds (one row per run)

Each run is s3.rl.direct.train_one_seed with train.seed = seed + i, to its own end (its plateau, or the
whole wall-clock budget): its source workers use every core, so its seeds do not share the cores as the
distilled seeds do. Every run
validates on the held-out tracks of the first seed, so their scores compare; the best score is kept
for export (ties: the lowest seed), as s3.rl.seeds does for the distilled policies. Evaluation drives
every seed (s3.evaluate.suite.policy_seeds) and time to quality every seed's checkpoints.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from s3 import headline
from s3.catalog import DIRECT
from s3.io import json_safe, write_json_atomic
from s3.rl.checkpoints import DIR
from s3.rl.direct import check, train_one_seed
from s3.rl.export import copy_policy
from s3.rl.seeds import CANDIDATES
from s3.tracking import Run

if TYPE_CHECKING:
    from s3.config import Params

DONE = "done.json"  # beside a finished run: its params key and summary (a killed stage resumes after it)
CURVE_KEYS = ("env_steps", "wall_s", "val_score")  # what time to quality reads of each run's curve
ROW_KEYS = (
    "wall_s",
    "env_steps",
    "env_steps_per_s",
    "iterations",
    "workers",
    "stopped_by",
    "budget_s",
    "over_budget_s",
)


def train_direct_seeds(
    params: Params,
    out_dir: str | Path,
    plots_dir: str | Path | None,
    metrics_dir: str | Path | None,
    budget_s: float | None = None,
    run: Run | None = None,
) -> dict[str, Any]:
    """K = train.direct.seeds runs of s3.rl.direct.train_one_seed (module docstring); returns the summary. A run
    finished with the same params and budget (its DONE file; budget None: to its plateau) is kept, so a killed
    stage resumes at the next seed."""
    checked = check(params, out_dir, metrics_dir, budget_s)
    if isinstance(checked, dict):
        return checked  # skipped on this source simulator
    tp = params.train
    base, final, staging = tp.seed, Path(out_dir) / DIRECT, Path(out_dir) / CANDIDATES / DIRECT
    results: dict[int, dict[str, Any]] = {}
    for i in range(tp.direct.seeds):
        seed = base + i
        folder = staging / f"seed{seed}"
        one = params.model_copy(update={"train": tp.model_copy(update={"seed": seed})})
        key = {"train": one.train.model_dump(mode="json"), "sim": one.sim.model_dump(mode="json"), "budget_s": checked}
        done = _done(folder, key)
        if done is not None:
            results[seed] = done
            continue
        seed_run = run if i == 0 else None  # MLflow: the first run's curve (one step axis per run)
        results[seed] = train_one_seed(one, folder, folder, None, checked, seed_run, validation_seed=base)
        write_json_atomic(folder / DONE, {"key": key, "summary": results[seed]})
    shutil.rmtree(final / "seeds", ignore_errors=True)  # every run into the output, as s3.rl.seeds does
    (final / "seeds").mkdir(parents=True)
    for seed in sorted(results):
        shutil.move(str(staging / f"seed{seed}"), str(final / "seeds" / f"seed{seed}"))
    shutil.rmtree(staging, ignore_errors=True)
    try:
        (Path(out_dir) / CANDIDATES).rmdir()
    except OSError:  # other policies' candidates are still there
        pass
    table = [
        {
            "seed": s,
            "validation_score": r["validation"]["score"],
            "iteration": r["validation"]["iteration"],
            **{k: r.get(k) for k in ROW_KEYS},
            "learning_curve": [{k: p.get(k) for k in CURVE_KEYS} for p in r["learning_curve"]],
        }
        for s, r in sorted(results.items())
    ]
    key = {r["seed"]: (r["validation_score"] if r["validation_score"] is not None else -1.0, -r["seed"]) for r in table}
    best = max(key, key=key.__getitem__)
    selection = {
        "selected_seed": best,
        "in": "source",
        "rule": "best validation score in the source simulator on the first seed's held-out procedural tracks "
        "(ties: the lowest seed)",
        "seeds": table,
        "rl_wall_s": round(sum(r["wall_s"] or 0.0 for r in table), 1),  # one after another
    }
    src = final / "seeds" / f"seed{best}"
    copy_policy(src, final, seed_selection={k: v for k, v in selection.items() if k != "seeds"})
    shutil.rmtree(final / DIR, ignore_errors=True)  # the checkpoints stay with their seed (seeds/seed<k>/)
    if plots_dir is not None:
        for suffix in (".png", ".csv"):
            if (src / f"{DIRECT}{suffix}").exists():
                Path(plots_dir).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / f"{DIRECT}{suffix}", Path(plots_dir) / f"{DIRECT}{suffix}")
    summary = json_safe({**results[best], "policy_folder": str(final), "seed_selection": selection})
    if metrics_dir is not None:
        headline.write_record(Path(metrics_dir) / f"{DIRECT}.json", summary, headline.train)
    return summary


def _done(folder: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The summary of a run finished in `folder` with these params and budget, else None."""
    import json

    try:
        saved = json.loads((folder / DONE).read_text())
    except (OSError, ValueError):
        return None
    return saved["summary"] if saved.get("key") == json_safe(key) and (folder / "policy.json").exists() else None
