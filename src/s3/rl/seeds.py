"""Several PPO seeds per policy, trained side by side; the best by procedural validation is kept.

    train_seeds(name, family, model_folder, out_dir, plot_path, params, source_scorer=None, run=None, compute=None)
        -> summary

PPO in a distilled env is seed-sensitive: on the road course the same recipe gave lap times from
125 s to 143 s across three seeds (reports/history.md). A run uses one core (torch_threads=1),
so on a machine with K cores K seeds cost about the wall clock of one (on 2 cores each ran ~10 %
slower than alone). Each seed k in (seed, seed + 1, ..., seed + seeds - 1) trains for the full
budget as a job of the executor (s3.compute: locally `seed_workers` at once, each in its own process;
with `compute.backend: ray` as Ray tasks of `compute.resources.train`, the dynamics model and the
candidate's resume file shipped with it and its files shipped back; a worker that dies is re-run by
`compute.retry` and resumes from the resume file it was given), validating on the *same* held-out procedural
tracks (those of `seed`), so their scores compare; the best score wins (ties: the lowest seed).
With `seed_selection: source` the stage passes a scorer (s3.rl.source_selection) and the score
that decides is each candidate's lap share in the source simulator on those tracks (ties: the
in-model score, then the lowest seed): the weights are still trained only in the model. The
evaluation road course plays no part in the choice.

Files. Candidates train in <out_dir>/.seeds/<name>/seed<k>/ (outside the DVC output, so that a
killed run resumes: each keeps its own resume file, and a finished candidate whose params,
dynamics model and validation tracks are unchanged is reused rather than retrained; its summary,
with the wall clock and run id that policy.json leaves out, is seed<k>.summary.json beside it).
When all are done, the winner is copied into <out_dir>/<name>/ (its policy.json gains
"seed_selection", without wall clocks or run ids), every candidate (with its learning_curve.png)
moves to <out_dir>/<name>/seeds/seed<k>/ (the first seed's with its chunks' checkpoints,
checkpoints/, s3.rl.checkpoints), and the winner's curve becomes `plot_path`. The
returned summary's `seed_selection.rl_wall_s` is the policy's RL wall clock: this call's, or,
when finished candidates were reused, their own train walls run side by side in rounds of
`seed_workers`, plus the selection (null when a reused candidate's own time is not known: one
copied out of a finished policy, whose policy.json records none).

MLflow. Given the policy's run (s3.tracking.Run; None logs nothing), each candidate
trained here logs into its own run nested under it (`<name>-seed<k>`, tags s3.kind=seed,
s3.policy=<name>, s3.model=<family>, s3.seed=<k>), created here before the workers start and
ended here as each seed finishes (FAILED unless its training returned); on Ray the job records its
calls instead (s3.tracking.Recorder) and this process makes them once its files are
written, as each seed finishes, so a seed that finished is kept when another fails. The winner's learning curve comes
back from its worker as a value and goes into the policy's run (`train/<rsl_rl tag>`, step = iteration), with
`train/selected_seed`; a reused winner's curve stays in the run it was trained in. The summary's mlflow_run_id is the
winner's seed run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3.compute.backend import executor_for
from s3.compute.executor import Job, Outcome
from s3.compute.files import Files, pack, unpack, unpacked
from s3.compute.params import ComputeParams
from s3.io import atomic_path, write_json_atomic
from s3.progress import progress
from s3.rl import TRAIN_WORKER_PRELOAD
from s3.rl.export import EXPORT, META, WEIGHTS, copy_policy
from s3.rl.params import SELECTION_ONLY, TrainParams
from s3.rl.resume import resume_path
from s3.rl.tracks import VALIDATION_SEED_BASE
from s3.rl.train import file_sha256
from s3.tracking import Recorder, Run

CANDIDATES = ".seeds"
CURVE = "learning_curve.png"  # each candidate's, in its folder
CURVE_DATA = "learning_curve.csv"  # its validation points (s3.rl.runner.PPORun.plot)
Scorer = Callable[[list[Path]], list[dict[str, Any]]]


def seed_workers(params: TrainParams) -> int:
    """How many seed runs train at once: `seed_workers`, else as many as the cores hold."""
    if params.seed_workers:
        return min(params.seed_workers, params.seeds)
    cores = os.cpu_count() or 1
    per_run = params.torch_threads or cores  # torch's default uses every core
    return max(1, min(params.seeds, cores // per_run))


def _finished(folder: Path, params: TrainParams, model_folder: Path, validation_seed: int) -> dict[str, Any] | None:
    """The summary of a candidate already trained with these params on this model and scored on
    the validation tracks of `validation_seed`, else None."""
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None
    same_model = meta.get("dynamics_model", {}).get("sha256") == file_sha256(model_folder / "model.safetensors")
    try:  # through the params class: a key added later at its default is the same training
        saved = TrainParams.model_validate(meta.get("params") or {}).model_dump(mode="json", exclude=SELECTION_ONLY)
    except ValueError:
        return None
    tracks = [VALIDATION_SEED_BASE + validation_seed * 1000 + i for i in range(params.tracks.validation_tracks)]
    same_tracks = meta.get("validation", {}).get("track_seeds") == tracks
    complete = all((folder / f).exists() for f in (WEIGHTS, EXPORT))
    if saved != params.model_dump(mode="json", exclude=SELECTION_ONLY) or not (same_model and same_tracks and complete):
        return None
    try:  # policy.json has no wall clock or run id: the summary a (killed) run left beside the candidate does
        return json.loads(_summary_path(folder).read_text())
    except (OSError, ValueError):  # e.g. copied out of a finished policy's seeds/: its training time is not known
        return {
            **{k: meta.get(k) for k in ("family", "validation", "road_course_nominal", "train")},
            "mlflow_run_id": None,
        }


def _summary_path(folder: Path) -> Path:
    """A candidate's training summary (with its wall clock and MLflow run id), beside its folder."""
    return folder.parent / f"{folder.name}.summary.json"


def _train_candidate(
    family: str,
    model_folder: str,
    folder: str,
    plot_path: str,
    params: TrainParams,
    validation_seed: int,
    run: Run | Recorder | None,
    model_label: str | None = None,
) -> tuple[dict[str, Any], list]:
    """One seed, in a worker process, logging into `run`: (summary, learning curve)."""
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.rl.env import resolve_device
    from s3.rl.train import train_policy_curve

    model = load_checkpoint(Path(model_folder), family, resolve_device(params.device))
    summary, curve = train_policy_curve(
        model, folder, plot_path, params, family, run, model_folder, validation_seed, model_label
    )  # type: ignore[arg-type]
    write_json_atomic(_summary_path(Path(folder)), summary)  # a re-run that reuses this candidate reads it
    return summary, curve


def _train_shipped(
    family: str,
    model_label: str,
    model_files: Files,
    seed_name: str,
    candidate_files: Files,
    params: TrainParams,
    validation_seed: int,
    run_id: str | None,
) -> tuple[dict[str, Any], list, Files, Recorder | None]:
    """`_train_candidate` on a worker that shares no files with the stage (a Ray node): the model and
    the candidate's files so far (a resume file) come as bytes; (summary, curve, the candidate's
    files relative to its .seeds/<name>/ folder, its MLflow calls) go back."""
    with unpacked(model_files) as model_dir, unpacked(candidate_files) as root:
        recorder = Recorder(run_id, root) if run_id is not None else None
        folder = root / seed_name
        summary, curve = _train_candidate(
            family, str(model_dir), str(folder), str(folder / CURVE), params, validation_seed, recorder, model_label
        )
        return summary, curve, pack(root), recorder


def _candidate_files(root: Path, seed: int) -> Files:
    """What a candidate has so far, relative to `root`: its folder and its resume file."""
    files = {f"seed{seed}/{k}": v for k, v in pack(root / f"seed{seed}").items()}
    return {**files, **pack(root, [str(resume_path(root / f"seed{seed}").relative_to(root))])}


def _clear_candidate(root: Path, seed: int) -> None:
    """Remove a candidate's folder, summary and resume file under `root`."""
    folder = root / f"seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    _summary_path(folder).unlink(missing_ok=True)
    resume_path(folder).unlink(missing_ok=True)


def _copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def train_seeds(
    name: str,
    family: str,
    model_folder: str | Path,
    out_dir: str | Path,
    plot_path: str | Path,
    params: TrainParams,
    source_scorer: Scorer | None = None,
    run: Run | None = None,
    compute: ComputeParams | None = None,
) -> dict[str, Any]:
    """Train params.seeds seeds of policy `name` in `family`'s env; keep the best, by `source_scorer`
    if given; log into `run` (the policy's) and runs nested under it; seeds run as `compute` says (module docstring)."""
    t0 = time.perf_counter()
    model_folder, out_dir = Path(model_folder), Path(out_dir)
    root = out_dir / CANDIDATES / name
    runs = [params.model_copy(update={"seed": params.seed + k}) for k in range(params.seeds)]
    results: dict[int, dict[str, Any]] = {}
    curves: dict[int, list] = {}
    todo = []
    for p in runs:
        done = _finished(root / f"seed{p.seed}", p, model_folder, params.seed)
        if done is not None:
            results[p.seed] = done
        else:
            todo.append(p)
    if todo:
        tags = {"s3.kind": "seed", "s3.policy": name, "s3.model": family}
        seed_runs = {
            p.seed: run.child(f"{name}-seed{p.seed}", {**tags, "s3.seed": str(p.seed)}) if run else None for p in todo
        }
        # locally, seed jobs fork from a server that imported torch, the trainer and MLflow once (s3.compute,
        # s3.workers)
        executor = executor_for(compute, "train", seed_workers(params), TRAIN_WORKER_PRELOAD, f"train {name}")
        if executor.shared_fs:
            jobs = [
                Job(
                    f"{name} seed {p.seed}",
                    _train_candidate,
                    (
                        family,
                        str(model_folder),
                        str(root / f"seed{p.seed}"),
                        str(root / f"seed{p.seed}" / CURVE),
                        p,
                        params.seed,
                        seed_runs[p.seed],
                    ),
                )
                for p in todo
            ]
        else:
            # the model and each candidate's files travel with its job; only this process writes them and logs to MLflow
            model_files = pack(model_folder)
            jobs = [
                Job(
                    f"{name} seed {p.seed}",
                    _train_shipped,
                    (
                        family,
                        str(model_folder),
                        model_files,
                        f"seed{p.seed}",
                        _candidate_files(root, p.seed),
                        p,
                        params.seed,
                        getattr(seed_runs[p.seed], "run_id", None),
                    ),
                )
                for p in todo
            ]
        finished: set[int] = set()

        def keep(i: int, o: Outcome) -> None:
            """As each seed finishes (not once all have): its files written, its run made and ended,
            so a seed that finished is kept when another fails or the stage is killed."""
            p = todo[i]
            if not o.ok:
                return
            results[p.seed], curves[p.seed] = o.value[:2]
            if not executor.shared_fs:
                _, _, files, recorder = o.value
                if (
                    recorder is not None
                ):  # into MLflow first, from a copy: a kill after it leaves no candidate that looks finished
                    with unpacked(files) as copy:
                        recorder.replay(seed_runs[p.seed], copy)
                _clear_candidate(root, p.seed)  # what was shipped (a resume file) goes; what came back replaces it
                meta = f"seed{p.seed}/{META}"  # written last: a candidate counts as finished by it (_finished)
                unpack({k: v for k, v in files.items() if k != meta}, root)
                unpack({k: v for k, v in files.items() if k == meta}, root)
            if seed_runs[p.seed] is not None:
                seed_runs[p.seed].finish("FINISHED")
            finished.add(p.seed)

        budget, reused = params.seeds * params.max_env_steps, (params.seeds - len(todo)) * params.max_env_steps
        try:
            with progress(f"train {name}", budget, "env steps", share=True, earlier=reused):  # fed by s3.rl.loop
                outcomes = executor.run(jobs, keep)
            for p, o in zip(todo, outcomes):
                if not o.ok:  # a worker that kept dying: its resume file stays for the next run
                    raise RuntimeError(f"train {name}: seed {p.seed}: {o.error}")
        finally:
            for seed, seed_run in seed_runs.items():
                if seed_run is not None and seed not in finished:
                    seed_run.finish("FAILED")
    table = [
        {
            "seed": s,
            "validation_score": r["validation"]["score"],
            "validation_score_dry": r["validation"].get("score_dry"),
            "iteration": r["validation"]["iteration"],
            "env_steps": r["train"]["env_steps"],
            "stopped_by": r["train"].get("stopped_by"),
            "wall_s": r["train"].get("wall_s"),
            "mlflow_run_id": r["mlflow_run_id"],
            # train.keep_checkpoints all: every seed's chunks on the train clock (time to quality per seed)
            **({"checkpoints": r["checkpoints"]} if params.keep_checkpoints == "all" and r.get("checkpoints") else {}),
        }
        for s, r in sorted(results.items())
    ]
    rule = (
        "best validation score on the shared held-out procedural tracks (ties: lowest seed); the road course is not "
        "used"
    )
    t_select = time.perf_counter()
    if source_scorer is not None:
        for row, scored in zip(table, source_scorer([root / f"seed{r['seed']}" for r in table])):
            row["source"] = scored
        rule = (
            "best lap share in the source simulator on the shared held-out procedural tracks (ties: the in-model "
            "score, then the lowest seed); the road course is not used"
        )
    key = {
        r["seed"]: (r["source"]["score"] if "source" in r else r["validation_score"], r["validation_score"], -r["seed"])
        for r in table
    }
    best = max(key, key=key.__getitem__)
    if run is not None:
        run.log_curve(curves.get(best, []), prefix="train/")
        run.log_metrics({"train/selected_seed": best})
    selection = {
        "selected_seed": best,
        "in": "source" if source_scorer is not None else "model",
        "rule": rule,
        "seeds": table,
    }
    final = out_dir / name
    src = root / f"seed{best}"
    copy_policy(src, final, seed_selection=selection)  # policy.json without wall clocks or run ids
    for curve in (CURVE, CURVE_DATA):  # the winner's learning curve: figure and data
        if (src / curve).exists():
            _copy(src / curve, Path(plot_path).with_suffix(Path(curve).suffix))
    shutil.rmtree(final / "seeds", ignore_errors=True)
    (final / "seeds").mkdir(parents=True)
    for s in sorted(results):
        shutil.move(str(root / f"seed{s}"), str(final / "seeds" / f"seed{s}"))
    shutil.rmtree(root, ignore_errors=True)
    try:
        (out_dir / CANDIDATES).rmdir()
    except OSError:  # other policies' candidates are still there
        pass
    wall = time.perf_counter() - t0
    workers = seed_workers(params)
    if len(todo) == len(runs):
        rl_wall = wall
    else:
        # reused candidates trained in an earlier call: their own walls, side by side in rounds of `workers` (one
        # unknown: not measured)
        walls = [r["wall_s"] for r in table]
        rl_wall = None if None in walls else -(-len(runs) // workers) * max(walls) + (time.perf_counter() - t_select)
    timing = {
        "wall_s": round(wall, 1),
        "rl_wall_s": None if rl_wall is None else round(rl_wall, 1),
        "reused_seeds": sorted(set(results) - {p.seed for p in todo}),
        "workers": workers,
    }
    first = results[params.seed].get(
        "checkpoints"
    )  # only the first seed keeps its chunks' checkpoints (s3.rl.checkpoints)
    kept = (
        {"checkpoints": {**first, "folder": f"seeds/seed{params.seed}/checkpoints", "seed": params.seed}}
        if first
        else {}
    )
    return {
        **{k: v for k, v in results[best].items() if k != "checkpoints"},
        **kept,
        "seed_selection": {**selection, **timing},
    }
