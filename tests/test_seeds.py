"""Several PPO seeds per policy (s3.rl.seeds): trained in worker processes on shared validation
tracks, the best kept, every candidate kept beside it, finished candidates reused."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from test_train import TINY  # pytest puts tests/ on sys.path; the fixtures are in conftest.py

from s3.dynamics.checkpoint import save_checkpoint
from s3.rl.export import EXPORT, WEIGHTS
from s3.rl.params import TrainParams
from s3.rl.seeds import CANDIDATES, _finished, _summary_path, seed_workers, train_seeds

torch.set_num_threads(1)

NAME = "bicycle_policy"  # the policy's name, not its family (as the oracle in dytr's model)


@pytest.fixture(scope="module")
def two_seeds(bicycle, root) -> dict:
    """Two seeds of policy NAME, logging into NAME's family run (MLflow on)."""
    from s3 import tracking

    save_checkpoint(bicycle, root / "models" / "bicycle")
    params = TrainParams.model_validate(
        {**TINY, "max_env_steps": 128 * 16 * 16, "seeds": 2, "seed_workers": 2, "torch_threads": 1}
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("S3_MLFLOW", "1")
        run = tracking.family_run(NAME)
    summary = train_seeds(
        NAME, "bicycle", root / "models" / "bicycle", root / "policies", root / "plots" / f"{NAME}.png", params, run=run
    )
    run.finish()
    return {"root": root, "summary": summary, "params": params, "run": run}


def test_best_seed_is_kept_with_every_candidate_beside_it(two_seeds) -> None:
    root, summary = two_seeds["root"], two_seeds["summary"]
    final = root / "policies" / NAME
    sel = summary["seed_selection"]
    scores = {row["seed"]: row["validation_score"] for row in sel["seeds"]}
    assert sorted(scores) == [1, 2] and sel["workers"] == 2
    assert sel["reused_seeds"] == [] and sel["rl_wall_s"] == sel["wall_s"] and sel["in"] == "model"
    best = max(sorted(scores), key=lambda s: (scores[s], -s))
    assert sel["selected_seed"] == best and summary["validation"]["score"] == scores[best]
    metas = {s: json.loads((final / "seeds" / f"seed{s}" / "policy.json").read_text()) for s in scores}
    assert {s: m["params"]["seed"] for s, m in metas.items()} == {1: 1, 2: 2}
    # one shared set of validation tracks (those of train.seed), so the scores compare
    assert metas[1]["validation"]["track_seeds"] == metas[2]["validation"]["track_seeds"]
    assert (final / WEIGHTS).read_bytes() == (final / "seeds" / f"seed{best}" / WEIGHTS).read_bytes()
    assert (final / EXPORT).read_bytes() == (final / "seeds" / f"seed{best}" / EXPORT).read_bytes()
    assert (final / WEIGHTS).read_bytes() != (final / "seeds" / f"seed{3 - best}" / WEIGHTS).read_bytes()
    meta = json.loads((final / "policy.json").read_text())
    assert meta["seed_selection"]["selected_seed"] == best and meta["params"]["seed"] == best
    run_only = {
        "wall_s",
        "mlflow_run_id",
    }  # the summary (records/train) has them; policy.json, whose bytes DVC hashes, does not
    assert run_only <= set(sel["seeds"][0]) and not run_only & {
        k for row in meta["seed_selection"]["seeds"] for k in row
    }
    assert "mlflow_run_id" not in meta and "wall_s" not in meta["train"] and "wall_s" not in metas[best]["train"]
    assert (root / "plots" / f"{NAME}.png").read_bytes() == (
        final / "seeds" / f"seed{best}" / "learning_curve.png"
    ).read_bytes()
    assert (final / "seeds" / f"seed{3 - best}" / "learning_curve.png").stat().st_size > 0
    assert not (root / "policies" / CANDIDATES).exists()
    # only the first seed (train.seed) keeps its chunks' checkpoints (s3.rl.checkpoints), and they moved with it
    assert (final / "seeds" / "seed1" / "checkpoints" / "index.json").exists() and not (
        final / "seeds" / "seed2" / "checkpoints"
    ).exists()
    assert summary["checkpoints"]["folder"] == "seeds/seed1/checkpoints" and summary["checkpoints"]["seed"] == 1
    assert [p["env_steps"] for p in summary["checkpoints"]["points"]] == [128 * 16 * 8, 128 * 16 * 16]


def test_each_seed_logs_into_a_run_nested_under_the_policy_run(two_seeds) -> None:
    """Each seed's run (made before its worker, logged into from the worker) is a child of the
    policy's run; the winner's curve, returned by its worker, is logged into the policy's run."""
    from mlflow.tracking import MlflowClient

    root, summary, policy = two_seeds["root"], two_seeds["summary"], two_seeds["run"]
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    names = {}
    for row in summary["seed_selection"]["seeds"]:
        run = client.get_run(row["mlflow_run_id"])
        names[row["seed"]] = run.info.run_name
        assert run.data.tags["mlflow.parentRunId"] == policy.run_id and run.data.tags["s3.kind"] == "seed"
        assert (
            run.data.tags["s3.seed"] == str(row["seed"])
            and run.data.tags["s3.policy"] == NAME
            and run.data.tags["s3.model"] == "bicycle"
        )
        assert run.info.status == "FINISHED" and len(client.get_metric_history(row["mlflow_run_id"], "val/score")) == 2
    assert names == {1: f"{NAME}-seed1", 2: f"{NAME}-seed2"}

    def rewards(run_id: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train/Train/mean_reward"))

    best = summary["seed_selection"]["selected_seed"]
    assert summary["mlflow_run_id"] == next(
        r["mlflow_run_id"] for r in summary["seed_selection"]["seeds"] if r["seed"] == best
    )
    assert len(rewards(policy.run_id)) == 16 and rewards(policy.run_id) == rewards(summary["mlflow_run_id"])
    assert client.get_run(policy.run_id).data.metrics["train/selected_seed"] == best
    top = [r for r in client.search_runs([policy.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert [r.data.tags["s3.kind"] for r in top] == ["pipeline"]  # no seed run beside the pipeline run


def test_a_finished_candidate_is_reused_only_with_the_same_params_and_model(two_seeds, bicycle) -> None:
    root, params = two_seeds["root"], two_seeds["params"]
    folder = root / "policies" / NAME / "seeds" / "seed2"
    p2 = params.model_copy(update={"seed": 2})
    done = _finished(folder, p2, root / "models" / "bicycle", 1)
    assert (
        done is not None
        and done["validation"]["score"] == json.loads((folder / "policy.json").read_text())["validation"]["score"]
    )
    assert (
        done["mlflow_run_id"] is None and "wall_s" not in done["train"]
    )  # out of a finished policy: no clock, no run id
    side = _summary_path(folder)  # what a killed run leaves beside a finished candidate
    side.write_text(json.dumps({**done, "mlflow_run_id": "r1", "train": {**done["train"], "wall_s": 3.0}}))
    try:
        assert _finished(folder, p2, root / "models" / "bicycle", 1)["train"]["wall_s"] == 3.0
    finally:
        side.unlink()
    assert (
        _finished(folder, p2.model_copy(update={"progress_bar": True}), root / "models" / "bicycle", 1) is not None
    )  # display only
    assert (
        _finished(folder, params.model_copy(update={"seed": 2, "max_minutes": 9.0}), root / "models" / "bicycle", 1)
        is None
    )
    other = root / "models_other" / "bicycle"
    changed = copy.deepcopy(bicycle)
    with torch.no_grad():
        changed.coef[0] += 0.01  # not the model the candidate was trained on
    save_checkpoint(changed, other)
    assert _finished(folder, p2, other, 1) is None
    assert _finished(folder, p2, root / "models" / "bicycle", 2) is None  # scored on other validation tracks


def test_seed_params() -> None:
    assert TrainParams(seeds=3, seed_workers=8).seeds == 3 and seed_workers(TrainParams(seeds=3, seed_workers=8)) == 3
    assert seed_workers(TrainParams(seeds=4, torch_threads=0)) == 1  # torch's default threads fill the machine
    assert TrainParams(seeds=3, per_policy={"ddm": {"seeds": 1}}).for_policy("ddm").seeds == 1
    assert TrainParams(seeds=3).for_policy("direct").seeds == 1  # direct's budget is the whole machine's wall clock
    with pytest.raises(ValueError, match="seeds"):
        TrainParams(seeds=0)


def test_source_scores_drive_each_candidate_in_the_source_simulator(two_seeds) -> None:
    """The real scorer: every candidate on the validation start grid in the MuJoCo car, repeatably,
    and the candidates' runs side by side in one env score what each scores alone."""
    from s3.config import Params
    from s3.rl.source_selection import source_scores

    root, params = two_seeds["root"], two_seeds["params"]
    folders = [root / "policies" / NAME / "seeds" / f"seed{s}" for s in (1, 2)]
    tp = params.model_copy(update={"source_validation_tracks": 1})
    first = source_scores(folders, Params(), tp)
    assert [r["episodes"] for r in first] == [1, 1] and [r["tracks"] for r in first] == [1, 1]
    for r in first:
        assert 0.0 <= r["score"] <= 1.0 and r["score"] == r["mean_completion"] and r["car_steps"] > 0
    assert source_scores(folders, Params(), tp) == first  # deterministic: the simulator and the policies are
    assert [source_scores([f], Params(), tp)[0] for f in folders] == first  # scored together = scored alone


def test_source_selection_decides_and_reuses_the_trained_candidates(two_seeds) -> None:
    """With a scorer the source score decides, even against the in-model score; changing only the
    selection keys retrains nothing."""
    import shutil

    root, params, first = two_seeds["root"], two_seeds["params"], two_seeds["summary"]["seed_selection"]
    loser = next(r["seed"] for r in first["seeds"] if r["seed"] != first["selected_seed"])
    out = root / "policies_source"
    for s in (1, 2):  # the finished candidates, where a re-run of the stage looks for them
        shutil.copytree(root / "policies" / NAME / "seeds" / f"seed{s}", out / CANDIDATES / NAME / f"seed{s}")
    asked: list = []

    def scorer(folders: list) -> list[dict]:
        asked.extend(f.name for f in folders)
        return [{"score": 1.0 if f.name == f"seed{loser}" else 0.0} for f in folders]

    p = params.model_copy(update={"seed_selection": "source", "source_validation_tracks": 3})
    summary = train_seeds(NAME, "bicycle", root / "models" / "bicycle", out, root / "plots" / "src.png", p, scorer)
    sel = summary["seed_selection"]
    assert asked == ["seed1", "seed2"] and sel["in"] == "source" and sel["selected_seed"] == loser
    assert [r["source"]["score"] for r in sel["seeds"]] == [float(r["seed"] == loser) for r in sel["seeds"]]
    # reused, not retrained: copied out of a finished policy, whose policy.json holds no wall clock or
    # run id, so the candidates' own RL cost is not known (a retrained one would have both)
    assert sel["reused_seeds"] == [1, 2] and sel["rl_wall_s"] is None
    assert all(r["wall_s"] is None and r["mlflow_run_id"] is None for r in sel["seeds"])
    assert (out / NAME / WEIGHTS).read_bytes() == (
        root / "policies" / NAME / "seeds" / f"seed{loser}" / WEIGHTS
    ).read_bytes()


def test_source_selection_falls_back_to_the_model_with_beamng(
    root, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The source choice drives the seeds side by side in the embedded simulator: with BeamNG the
    stage does not refuse; it chooses in the model (no source scorer) and says so (printed and in the metrics)."""
    import s3.rl.seeds
    from s3.config import Params
    from s3.rl.stage import train_one

    seen = {}

    def train_seeds(name, family, folder, out_dir, plot, tp, scorer, run, retry) -> dict:
        seen["scorer"] = scorer
        return {"seed_selection": {"selected_seed": 1, "in": "source" if scorer is not None else "model"}}

    monkeypatch.setattr(s3.rl.seeds, "train_seeds", train_seeds)
    train = {
        **TINY,
        "seeds": 2,
        "seed_selection": "source",
        "source_validation_tracks": TINY["tracks"]["validation_tracks"],
    }
    summary = train_one(
        "bicycle",
        Params.model_validate({"sim": {"backend": "beamng"}, "train": train}),
        root / "models",
        root / "p",
        root / "plots",
        root / "m",
    )
    sel = summary["seed_selection"]
    assert seen["scorer"] is None and sel["in"] == "model"
    assert "with 'beamng' the seed is chosen by in-model validation" in sel["source_choice_not_run"]
    assert "chosen by in-model validation" in capsys.readouterr().err
    assert (
        json.loads((root / "m" / "bicycle.json").read_text())["seed_selection"]["source_choice_not_run"]
        == sel["source_choice_not_run"]
    )
    train_one(
        "bicycle", Params.model_validate({"train": train}), root / "models", root / "p", root / "plots", root / "m"
    )
    assert seen["scorer"] is not None  # the embedded simulator: chosen in the source


def test_on_a_shared_nothing_executor_a_finished_seed_is_kept_when_another_fails(
    bicycle, root, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's path (the model and files shipped, MLflow calls recorded by the job and replayed here),
    run in this process: seed 1's files and run are kept as it finishes, though seed 2 then fails
    and stops the stage; a stale resume file of seed 1 is gone."""
    from mlflow.tracking import MlflowClient

    import s3.rl.seeds as seeds
    from s3 import tracking
    from s3.compute.executor import LocalExecutor
    from s3.rl.resume import resume_path

    class Shipping(LocalExecutor):
        shared_fs = False

    real = seeds._train_shipped

    def train_or_break(*args):  # (family, model_label, model_files, seed_name, ...)
        if args[3] == "seed2":
            raise ValueError("seed 2 broke")
        return real(*args)

    monkeypatch.setattr(seeds, "executor_for", lambda *a, **k: Shipping(1))
    monkeypatch.setattr(seeds, "_train_shipped", train_or_break)
    save_checkpoint(bicycle, root / "models" / "bicycle")
    params = TrainParams.model_validate(
        {**TINY, "max_env_steps": 128 * 16 * 2, "seeds": 2, "seed_workers": 1, "torch_threads": 1}
    )
    name, out = "shipped", root / "shipped"
    stale = resume_path(out / CANDIDATES / name / "seed1")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"not a resume file")  # shipped with the job, which starts fresh; it must not survive
    monkeypatch.setenv("S3_MLFLOW", "1")
    run = tracking.family_run(name)
    with pytest.raises(ValueError, match="seed 2 broke"):
        train_seeds(name, "bicycle", root / "models" / "bicycle", out, root / "plots" / f"{name}.png", params, run=run)
    run.finish()
    kept = out / CANDIDATES / name / "seed1"
    summary = json.loads(_summary_path(kept).read_text())
    assert (
        (kept / WEIGHTS).stat().st_size > 0 and not stale.exists() and not (out / CANDIDATES / name / "seed2").exists()
    )
    assert (
        _finished(kept, params.model_copy(update={"seed": 1}), root / "models" / "bicycle", 1) is not None
    )  # a re-run reuses it
    (kept / WEIGHTS).unlink()  # as after a kill between its files: not finished, trained again
    assert _finished(kept, params.model_copy(update={"seed": 1}), root / "models" / "bicycle", 1) is None
    client = MlflowClient()
    runs = {
        r.data.tags["s3.seed"]: r
        for r in client.search_runs([run.experiment_id], f"tags.`mlflow.parentRunId` = '{run.run_id}'")
    }
    assert runs["1"].info.status == "FINISHED" and runs["2"].info.status == "FAILED"
    assert runs["1"].info.run_id == summary["mlflow_run_id"]
    assert (
        len(client.get_metric_history(runs["1"].info.run_id, "train/Train/mean_reward")) == 2
    )  # replayed here, one per iteration


def test_keep_checkpoints_all_keeps_every_seeds_chunks(bicycle, tmp_path) -> None:
    """train.keep_checkpoints all: every seed keeps its chunks' checkpoints, and the seed table carries each seed's
    train clock at them (time to quality per seed, claim 1's censored test)."""
    from s3.evaluate.ttq_routes import seeds_with_checkpoints

    save_checkpoint(bicycle, tmp_path / "models" / "bicycle")
    params = TrainParams.model_validate(
        {**TINY, "max_env_steps": 128 * 16 * 16, "seeds": 2, "seed_workers": 2, "keep_checkpoints": "all"}
    )
    summary = train_seeds(
        NAME, "bicycle", tmp_path / "models" / "bicycle", tmp_path / "policies", tmp_path / "p.png", params
    )
    final = tmp_path / "policies" / NAME
    rows = summary["seed_selection"]["seeds"]
    for row in rows:
        assert (final / "seeds" / f"seed{row['seed']}" / "checkpoints" / "index.json").exists()
        assert [p["env_steps"] for p in row["checkpoints"]["points"]] == [128 * 16 * 8, 128 * 16 * 16]
    assert seeds_with_checkpoints(tmp_path / "policies", NAME, {"seed_selection": summary["seed_selection"]}, 1) == [
        1,
        2,
    ]
