"""Params validation: bad input stops with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from s3.cli import app
from s3.config import ParamsError, load_params

ROOT = Path(__file__).resolve().parents[1]


def test_repo_params_file_is_valid() -> None:
    p = load_params(ROOT / "params.yaml")
    assert p.sim.backend == "mujoco"
    assert p.collect.episodes * p.collect.episode_steps >= 150_000


def test_the_paper_params_differ_only_in_the_seeds() -> None:
    """params_paper.yaml is params_study.yaml at paper size: 10 seeds (direct too), one seed run per core; nothing
    else moves."""
    study = load_params(ROOT / "params_study.yaml").model_dump()
    paper = load_params(ROOT / "params_paper.yaml").model_dump()
    assert (paper["train"]["seeds"], paper["train"]["direct"]["seeds"], paper["train"]["seed_workers"]) == (10, 10, 0)
    for tree in (study, paper):
        tree["train"].pop("seeds"), tree["train"].pop("seed_workers"), tree["train"]["direct"].pop("seeds")
    assert paper == study


def test_the_study_params_differ_only_in_k() -> None:
    """params_study.yaml is params.yaml with K = 5 seeds everywhere (issue #39: K >= 5; direct too), every seed's
    checkpoints kept and a fresh time-to-quality set (claim 1); nothing else moves."""
    base, study = load_params(ROOT / "params.yaml").model_dump(), load_params(ROOT / "params_study.yaml").model_dump()
    moved = {
        ("train", "seeds"): (3, 5),
        ("train", "keep_checkpoints"): ("first", "all"),
        ("time_to_quality", "seed"): (7, 11),
    }
    for (section, key), (old, new) in moved.items():
        assert (base[section].pop(key), study[section].pop(key)) == (old, new)
    assert (base["train"]["direct"].pop("seeds"), study["train"]["direct"].pop("seeds")) == (1, 5)
    assert study == base


def test_overrides_reach_nested_sections() -> None:
    p = load_params(None, ["collect.episodes=12", "collect.driver.event_rate=0.5", "seed=7"])
    assert (p.collect.episodes, p.collect.driver.event_rate, p.seed) == (12, 0.5, 7)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("collect.episodez=3", "unknown key 'collect.episodez' (allowed here: "),
        ("collect.episodes=-1", "collect.episodes: Input should be greater than or equal to 1"),
        ("collect.episodes=lots", "collect.episodes: Input should be a valid integer"),
        ("sim.backend=carla", "sim.backend: Input should be 'mujoco'"),
        ("sim.control_dt=0", "sim.control_dt: Input should be greater than 0"),
        ("collect.driver.max_speed=[30, 10]", "max_speed must be an increasing pair"),
        ("nonsense", "expected section.key=value"),
        ("sim.control_dt=0.101", "must be a whole number of mujoco.timestep"),
        ("families.kart.model=kart", "families.kart: no such model family in s3.catalog"),
        (
            "families.ddm.distill=[distill.ddm, distill.nope, distill.seed]",
            "families.ddm.distill[1]: 'distill.nope' is not a distill.* key",
        ),
        ("policies_in_models.oracle.model=kart", "policies_in_models.oracle.model: 'kart' is not one of bicycle, ddm"),
        ("train.per_policy.kart={}", "train.per_policy.kart: not one of the policies"),
    ],
)
def test_bad_params_give_one_line_naming_the_key(override: str, needle: str) -> None:
    with pytest.raises(ParamsError) as e:
        load_params(None, [override])
    msg = str(e.value)
    assert needle in msg
    assert "\n" not in msg


def test_unknown_key_lists_allowed_keys() -> None:
    with pytest.raises(ParamsError) as e:
        load_params(None, ["collect.episodez=3"])
    assert "episodes" in str(e.value) and "workers" in str(e.value)


def test_bad_yaml_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("collect: [unclosed\n")
    with pytest.raises(ParamsError, match=r"p\.yaml: line \d+ is not valid YAML"):
        load_params(f)
    with pytest.raises(ParamsError, match="no such params file"):
        load_params(tmp_path / "missing.yaml")


def test_cli_prints_one_line_and_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["collect", "--set", "collect.workers=-1", "--quiet"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "collect.workers" in lines[0], result.output
    assert not (tmp_path / "data").exists(), "no work may start on bad params"


def test_the_families_and_policies_come_from_params_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = load_params(ROOT / "params.yaml")
    assert p.models() == {
        "bicycle": "bicycle",
        "ddm": "ddm",
        "transformer": "transformer",
        "dytr": "dytr",
        "oracle": "dytr",
    }
    assert p.policies() == [*p.models(), "direct"] and load_params(ROOT / "params_quick.yaml").models() == p.models()
    shrunk = tmp_path / "params.yaml"  # what dvc.yaml's foreach stages need of the file is checked too
    shrunk.write_text((ROOT / "params.yaml").read_text().replace("    dytr: {}\n", "", 1))
    with pytest.raises(ParamsError, match=r"train\.per_policy\.dytr: missing"):
        load_params(shrunk)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", "--family", "kart", "--params", str(ROOT / "params.yaml")])
    assert result.exit_code == 2 and "(params.yaml: families, policies_in_models; direct)" in result.output, (
        result.output
    )


def test_the_source_hold_out_cannot_ask_more_tracks_than_validation_has() -> None:
    """The seed choice in the source drives the first `source_validation_tracks` of the in-model validation
    tracks: asking for more is an error naming the key, not a silent cap."""
    source = ["train.seed_selection=source", "train.source_validation_tracks=96"]
    with pytest.raises(ParamsError, match=r"train.source_validation_tracks: 96 \(\w+\) is more than .*\(32\)"):
        load_params(ROOT / "params.yaml", source)
    assert load_params(ROOT / "params.yaml", [*source, "train.tracks.validation_tracks=96"]).train.tracks
    assert load_params(ROOT / "params.yaml", source[1:]).train.source_validation_tracks == 96  # unused: no error
