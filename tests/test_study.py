"""The experiment sets (s3.platform.study): the set files validate, bad names and keys stop with one
line, --dry-run lists the commands, the result file has exactly the report's keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from s3.cli import app
from s3.config import load_params
from s3.platform.study import RESULT_KEYS, run_study, seed_rollouts, write_result
from s3.platform.study_set import StudyError, check_study, check_variant, load_study

ROOT = Path(__file__).resolve().parents[1]


def _study(tmp_path: Path, variants: dict, base: str = "params.yaml", overrides: dict | None = None) -> Path:
    f = tmp_path / "tiny.yaml"
    f.write_text(yaml.safe_dump({"base": str(ROOT / base), "overrides": overrides or {}, "variants": variants}))
    return f


@pytest.mark.parametrize("name", ["ablation", "graded"])
def test_the_sets_validate(name: str) -> None:
    study = load_study(name, ROOT)
    params = check_study(study)  # every key exists, the params validate, only named keys change
    for v in study.variants.values():
        assert params[v.name].train.seeds == 2 and v.overrides["train.seeds"] == 2
        assert params[v.name].model_of(v.policy) == v.family


def test_the_ice_set_validates() -> None:
    study = load_study("ice", ROOT)
    params = check_study(study)  # a variant whose family or policy is wrong fails here, not an hour into the run
    assert {params[v.name].train.seeds for v in study.variants.values()} == {3}
    assert study.variants["oracle_grip_constraint"].policy == "oracle"
    assert params["oracle_grip_constraint"].train.env.reward.grip_pace == 35.0
    assert params["plain"].train.env == load_params(ROOT / "params.yaml").train.env  # the reference changes nothing


def test_the_ablation_variants_are_the_reports() -> None:
    study = load_study("ablation", ROOT)
    assert list(study.variants) == [
        "narrow_blind",
        "narrow_matched_blind",
        "diverse_blind",
        "diverse_labelled",
        "diverse_model_label",
        "diverse_policy_label",
    ]
    p = check_study(study)
    assert {v.family for v in study.variants.values()} == {"ddm"}
    for name, params in p.items():
        model = name.endswith(("_labelled", "_model_label"))
        policy = name.endswith(("_labelled", "_policy_label"))
        assert params.distill.use_friction_label is model and params.train.env.surface_label is policy, name
        narrow = name.startswith("narrow")
        assert (params.collect.ice_episode_fraction < 0.5) is (name == "narrow_blind")  # the others: diverse's quantity
        assert (
            params.train.tracks.procedural.patch_mu_max - params.train.tracks.procedural.patch_mu_min < 0.2
        ) is narrow
    # the labels are the only difference within a friction distribution
    diverse = [p[v] for v in ("diverse_blind", "diverse_labelled", "diverse_model_label", "diverse_policy_label")]
    assert all(d.collect == diverse[0].collect and d.train.tracks == diverse[0].train.tracks for d in diverse)
    # each one-label variant shares its model with a two-level variant (one distillation, DVC's run cache)
    assert p["diverse_model_label"].distill == p["diverse_labelled"].distill
    assert p["diverse_policy_label"].distill == p["diverse_blind"].distill
    # the quantity-matched arm: diverse_blind's amount of ice, narrow_blind's mu range
    matched, diverse, narrow = p["narrow_matched_blind"], p["diverse_blind"], p["narrow_blind"]
    m, d, n = (x.train.tracks.procedural for x in (matched, diverse, narrow))
    assert (m.patch_mu_min, m.patch_mu_max) == (n.patch_mu_min, n.patch_mu_max)
    assert (m.patches_min, m.patches_max) == (d.patches_min, d.patches_max)
    assert matched.collect.ice_episode_fraction == diverse.collect.ice_episode_fraction
    assert (matched.collect.tracks.patches_min, matched.collect.tracks.patches_max) == (
        diverse.collect.tracks.patches_min,
        diverse.collect.tracks.patches_max,
    )
    assert (matched.collect.tracks.patch_mu_min, matched.collect.tracks.patch_mu_max) == (
        narrow.collect.tracks.patch_mu_min,
        narrow.collect.tracks.patch_mu_max,
    )
    assert matched.train.tracks.procedural.patch_probability == diverse.train.tracks.procedural.patch_probability


def test_unknown_variant_and_set_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(StudyError, match=r"graded: no variant 'nope' \(variants: ddm_e1"):
        load_study("graded", ROOT).pick(["nope"])
    with pytest.raises(StudyError, match=r"no study 'nope' in studies/ \(sets: ablation, graded, ice\)"):
        load_study("nope", ROOT)
    result = CliRunner().invoke(
        app, ["study", "run", "graded", "--variant", "nope", "--dry-run", "--results", str(tmp_path)]
    )
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no variant 'nope'" in lines[0], result.output


def test_bad_overrides_are_refused(tmp_path: Path) -> None:
    def check(overrides: dict) -> None:
        study = load_study(_study(tmp_path, {"v": {"family": "ddm", "overrides": overrides}}))
        check_variant(study, study.variants["v"])

    with pytest.raises(StudyError, match="distill.max_epoch: no such key in Params"):
        check({"distill.max_epoch": 2})
    with pytest.raises(StudyError, match="collect.episodes: Input should be greater than or equal to 1"):
        check({"collect.episodes": 0})
    # a partial train.tracks.procedural takes the class defaults, not train's: refused until named
    with pytest.raises(
        StudyError,
        match=r"train.tracks.procedural.patch_length_max changes \(100.0 -> 80.0\) though no override names it",
    ):
        check({"train.tracks.procedural.patch_mu_max": 0.5})
    check({"train.per_policy.ddm.max_env_steps": 1000})  # a per-policy key is a key of train
    study = load_study(_study(tmp_path, {"v": {"family": "ddm", "policy": "oracle"}}))
    with pytest.raises(StudyError, match="policy 'oracle' trains in 'dytr', not 'ddm'"):
        check_variant(study, study.variants["v"])


def test_dry_run_lists_the_commands_and_skips_finished_variants(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "graded").mkdir(parents=True)
    (results / "graded" / "ddm_e1.json").write_text("{}")
    args = ["study", "run", "graded", "--dry-run", "--root", str(tmp_path / "ws"), "--results", str(results)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "graded/ddm_e1 [skip" in out and "graded/ddm_e3 [run]" in out
    for v in ("ddm_e1", "ddm_e3", "ddm_e6"):
        assert f"cd {tmp_path / 'ws' / 'graded' / v} && dvc repro evaluate@ddm" in out
    assert "dvc repro evaluate@transformer" in out and "--set distill.max_epochs=4" in out
    assert not (tmp_path / "ws").exists()  # nothing was made
    forced = CliRunner().invoke(app, [*args, "--force", "--variant", "ddm_e1"])
    assert "graded/ddm_e1 [run]" in forced.output and "ddm_e3" not in forced.output


def test_result_file_has_exactly_the_reports_keys(tmp_path: Path) -> None:
    study = load_study("ablation", ROOT)
    v = study.variants["diverse_blind"]
    ws = tmp_path / "ws"
    metrics = {
        "distill": ("distill", "ddm", {"family": "ddm", "rollout": {"all": {"ade_1s": 0.1}}}),
        "eval": ("eval", "ddm", {"summary": {"suite": {}}}),
        "train": ("train", "ddm", {"policy": "ddm"}),
    }
    for folder, name, body in metrics.values():
        (ws / "records" / folder).mkdir(parents=True, exist_ok=True)
        (ws / "records" / folder / f"{name}.json").write_text(json.dumps(body))
    (ws / "records/eval/pid.json").write_text("{}")  # not the variant's: ignored
    out = write_result(ws, v, tmp_path / "res" / "ablation" / "diverse_blind.json")
    got = json.loads(out.read_text())
    assert tuple(got) == RESULT_KEYS
    assert got["params"] == v.overrides and got["params"]["distill.use_friction_label"] is False
    for key, (_, _, body) in metrics.items():
        assert got[key] == body
    (ws / "records/train/ddm.json").unlink()
    with pytest.raises(StudyError, match="records/train/ddm.json"):
        write_result(ws, v, tmp_path / "res" / "x.json")


def test_a_dagger_variant_runs_its_rounds_and_keeps_their_record(tmp_path: Path) -> None:
    """A variant whose `dagger.policies` names its policy also reproduces dagger@<policy>, and its result carries
    that stage's record; the others neither."""
    f = _study(
        tmp_path, {"plain": {"family": "ddm"}, "rounds": {"family": "ddm", "overrides": {"dagger.policies": ["ddm"]}}}
    )
    out = CliRunner().invoke(app, ["study", "run", str(f), "--dry-run", "--root", str(tmp_path / "ws")]).output
    assert "rounds && dvc repro evaluate@ddm dagger@ddm" in out and "plain && dvc repro evaluate@ddm\n" in out
    study = load_study(f)
    ws = tmp_path / "ws"
    for folder in ("distill", "eval", "train", "dagger"):
        (ws / "records" / folder).mkdir(parents=True)
        (ws / "records" / folder / "ddm.json").write_text(json.dumps({"folder": folder}))
    got = json.loads(write_result(ws, study.variants["rounds"], tmp_path / "r.json", dagger=True).read_text())
    assert tuple(got) == (*RESULT_KEYS, "dagger") and got["dagger"] == {"folder": "dagger"}
    plain = json.loads(write_result(ws, study.variants["plain"], tmp_path / "p.json").read_text())
    assert tuple(plain) == RESULT_KEYS
    (ws / "records/dagger/ddm.json").unlink()
    with pytest.raises(StudyError, match="records/dagger/ddm.json"):
        write_result(ws, study.variants["rounds"], tmp_path / "x.json", dagger=True)


def test_running_a_dagger_variant_reproduces_both_stages_and_keeps_the_record(tmp_path, monkeypatch) -> None:
    """run_study -> run_variant: `dvc repro evaluate@ddm dagger@ddm` in the variant's workspace, and the result file
    carries records/dagger/ddm.json (dvc itself faked: it writes the records the stages would)."""
    import subprocess

    import s3.platform.workspace as workspace

    f = _study(tmp_path, {"rounds": {"family": "ddm", "overrides": {"dagger.policies": ["ddm"]}}}, "params_quick.yaml")
    calls = []

    def fake_dvc(cmd, cwd, env):
        calls.append(cmd[1:])
        for folder in ("distill", "eval", "train", "dagger"):
            (Path(cwd) / "records" / folder).mkdir(parents=True, exist_ok=True)
            (Path(cwd) / "records" / folder / "ddm.json").write_text(json.dumps({"stage": folder}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(
        workspace, "prepare_workspace", lambda src, ws, share_cache=True: Path(ws).mkdir(parents=True, exist_ok=True)
    )
    monkeypatch.setattr("s3.platform.study.subprocess.run", fake_dvc)
    results = tmp_path / "results"
    run_study(f, root=tmp_path / "ws", results=results, project=ROOT, say=lambda _: None)
    assert calls == [["repro", "evaluate@ddm", "dagger@ddm"]]
    assert json.loads((results / "tiny" / "rounds.json").read_text())["dagger"] == {"stage": "dagger"}


def test_rollouts_are_seeded_only_from_a_matching_collection(tmp_path: Path) -> None:
    from s3.data.provenance import data_key

    study = load_study(_study(tmp_path, {"v": {"family": "ddm"}}, base="params_quick.yaml"))
    params = check_variant(study, study.variants["v"])
    other, same = tmp_path / "other", tmp_path / "same"
    for donor, key in ((other, "0" * 16), (same, data_key(params))):
        (donor / "data/rollouts").mkdir(parents=True)
        (donor / "data/rollouts/manifest.json").write_text(json.dumps({"collect_key": key, "episodes_lost": 0}))
        (donor / "data/rollouts/shard-00000.parquet").write_bytes(b"x")
    (same / "records").mkdir()
    (same / "records/collect.json").write_text('{"wall_seconds_total": 1.0}')
    ws = tmp_path / "ws"
    ws.mkdir()
    assert seed_rollouts(ws, params, [other, same]) == same
    assert (ws / "data/rollouts/shard-00000.parquet").exists() and (ws / "records/collect.json").exists()
    assert seed_rollouts(ws, params, [same]) is None  # a workspace with rollouts keeps its own


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_variant_end_to_end(tmp_path: Path) -> None:
    """One variant on params_quick.yaml through `dvc repro evaluate@ddm` in its own workspace (~2-3 min on 2 cores)."""
    f = _study(
        tmp_path,
        {"tiny_blind": {"family": "ddm", "overrides": {"distill.use_friction_label": False}}},
        base="params_quick.yaml",
    )
    results = tmp_path / "results"
    run_study(f, root=tmp_path / "ws", results=results, project=ROOT, share_cache=False)
    got = json.loads((results / "tiny" / "tiny_blind.json").read_text())
    assert tuple(got) == RESULT_KEYS
    assert got["params"] == {"distill.use_friction_label": False}
    assert got["distill"]["family"] == "ddm" and got["distill"]["uses_friction_label"] is False
    assert got["train"]["policy"] == "ddm" and got["eval"]
    lock = (tmp_path / "ws" / "tiny" / "tiny_blind" / "dvc.lock").read_text()
    assert "distill@ddm" in lock and "evaluate@ddm" in lock and "distill@transformer" not in lock
    steps = run_study(f, root=tmp_path / "ws", results=results, project=ROOT, share_cache=False)  # finished: skipped
    assert [s.skip for s in steps] == [True]


@pytest.mark.parametrize(("name", "own_k"), [("ablation", 2), ("graded", 2), ("ice", 3)])
def test_the_study_base_gives_every_arm_its_k(name: str, own_k: int) -> None:
    """`--base params_study.yaml` (make study): every variant starts from it and keeps its K = 5, not the set's."""
    study = load_study(name, ROOT, ROOT / "params_study.yaml")
    assert study.base == ROOT / "params_study.yaml"
    params = check_study(study)
    assert {p.train.seeds for p in params.values()} == {5}
    assert all("train.seeds" not in v.overrides for v in study.variants.values())
    plain = check_study(load_study(name, ROOT))
    assert {p.train.seeds for p in plain.values()} == {own_k}  # without --base: the set's own K
    study_only = {"seeds": own_k, "keep_checkpoints": "first"}  # what params_study.yaml moves (tests/test_config.py)
    for v, p in params.items():  # nothing else moves: the same variant params but the study's keys
        train = p.train.model_copy(update={**study_only, "direct": p.train.direct.model_copy(update={"seeds": 1})})
        same = p.model_copy(update={"train": train, "time_to_quality": plain[v].time_to_quality})
        assert same == plain[v], v
