"""A DAgger-style round (s3.dagger.round): a policy drives collection episodes in the source; its rows say who drove,
and distillation reads them beside other rollouts (distill.extra_rollouts)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from test_regress_teeth import SEEDS, follower_policy

from s3.config import load_params
from s3.dagger.round import ROUND_OFFSET, collect_round
from s3.data.rollouts import load_rollouts, read_manifest
from s3.dynamics.dataset import DatasetError, RolloutArrays, RolloutDataModule
from s3.dynamics.params import DistillParams

ROOT = Path(__file__).resolve().parents[1]
EPISODES = 3


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The follower policy, and two rounds it drove: one as it drives, one with noise on its commands."""
    tmp = tmp_path_factory.mktemp("dagger")
    policy = tmp / "policies" / "follower"
    follower_policy(policy)
    params = load_params(ROOT / "params_quick.yaml")
    one = collect_round(params, policy, tmp / "round1", 1, EPISODES, ice_fraction=1.0).parent
    two = collect_round(params, policy, tmp / "round2", 2, EPISODES, ice_fraction=0.0, noise=0.3).parent
    return policy, one, two


def test_a_round_says_which_policy_drove(rounds: tuple[Path, Path, Path]) -> None:
    policy, one, _ = rounds
    who = read_manifest(one)["provenance"]
    assert who["driver"] == "policy" and who["policy"] == "follower" and who["round"] == 1
    assert who["seed"] == SEEDS[0] and who["action_noise"] == 0.0
    assert who["weights_sha256"] == hashlib.sha256((policy / "policy.safetensors").read_bytes()).hexdigest()


def test_a_round_adds_rows_of_its_own_episodes_on_ice(rounds: tuple[Path, Path, Path]) -> None:
    _, one, _ = rounds
    rows = load_rollouts(one)
    manifest = read_manifest(one)
    assert len(rows) == manifest["rows"] > EPISODES * 10 and manifest["episodes"] + manifest["episodes_dropped"] == 3
    assert set(rows["episode"]) <= set(range(ROUND_OFFSET, ROUND_OFFSET + EPISODES))  # never a base episode id
    assert rows["track_id"].str.endswith("-ice").all()  # ice_fraction 1.0
    assert np.isfinite(rows[["x", "y", "vx", "steering_cmd"]].to_numpy()).all()
    # the policy drives: a centreline follower stays on the road and turns its wheel both ways
    assert rows["steering_cmd"].min() < 0 < rows["steering_cmd"].max()


def test_rounds_and_noise_change_the_rows(rounds: tuple[Path, Path, Path], tmp_path: Path) -> None:
    policy, one, two = rounds
    b = load_rollouts(two)
    assert (~b["track_id"].str.endswith("-ice")).all()  # ice_fraction 0.0
    assert set(b["episode"]) <= set(range(2 * ROUND_OFFSET, 2 * ROUND_OFFSET + EPISODES))
    # round 1 again with noise: the same episodes, starts and tracks; only the commands differ
    params = load_params(ROOT / "params_quick.yaml")
    noisy = load_rollouts(collect_round(params, policy, tmp_path / "noisy", 1, EPISODES, 1.0, noise=0.3).parent)
    a = load_rollouts(one)
    first = lambda df: df[df["step"] == 0].sort_values("episode")
    assert first(a)[["episode", "track_id", "x", "y", "vx"]].equals(
        first(noisy)[["episode", "track_id", "x", "y", "vx"]]
    )
    assert (first(a)["throttle_cmd"].to_numpy() != first(noisy)["throttle_cmd"].to_numpy()).any()


def test_the_same_round_gives_the_same_rows(rounds: tuple[Path, Path, Path], tmp_path: Path) -> None:
    policy, one, _ = rounds
    again = collect_round(load_params(ROOT / "params_quick.yaml"), policy, tmp_path / "again", 1, EPISODES, 1.0)
    assert read_manifest(again.parent)["shards"][0]["sha256"] == read_manifest(one)["shards"][0]["sha256"]


def test_distillation_reads_rounds_beside_the_data(rounds: tuple[Path, Path, Path]) -> None:
    """The extra folder's episodes all train; the first folder's split is exactly the split without them."""
    _, one, two = rounds
    both = RolloutArrays.from_dirs([one, two])
    assert len(both) == read_manifest(one)["rows"] + read_manifest(two)["rows"]
    p = DistillParams(history=2, horizon=2, val_windows=8, val_fraction=0.34, test_fraction=0.34)
    alone = RolloutDataModule(one, p)
    alone.setup()
    dm = RolloutDataModule(one, p.model_copy(update={"extra_rollouts": [str(two)]}))
    dm.setup()
    extra = set(np.unique(load_rollouts(two)["episode"]).tolist())
    assert set(dm.split["train"].tolist()) == set(alone.split["train"].tolist()) | extra
    assert dm.split["test"].tolist() == alone.split["test"].tolist()
    assert dm.split["val"].tolist() == alone.split["val"].tolist()
    with pytest.raises(DatasetError, match="share episode ids"):
        RolloutArrays.from_dirs([one, one])


def test_a_models_error_on_the_rows_the_policy_drove(rounds: tuple[Path, Path, Path], bicycle, tmp_path: Path) -> None:
    """s3.dagger.error: the same open-loop measure as distillation's, over every episode of a round."""
    from s3.dagger.error import model_error
    from s3.dynamics.checkpoint import save_checkpoint

    _, one, _ = rounds
    save_checkpoint(bicycle, tmp_path / "bicycle")
    err = model_error(tmp_path / "bicycle", one, horizon_s=2.0, stride=1)
    assert err["windows"] > 0 and 0.0 < err["ade_1s"] < err["ade_2s"] < 50.0  # the error grows with the horizon
    assert "ade_3s" not in err  # beyond the horizon asked for
    with pytest.raises(ValueError, match="no window"):
        model_error(tmp_path / "bicycle", one, horizon_s=30.0)


def test_the_dagger_stage_runs_rounds_and_records_each(bicycle, tmp_path: Path) -> None:
    """dagger@<policy> (s3.dagger.stage): round 1 drives with train@<policy>'s policy, measures its model's error on
    those rows, distils the family on data + round, trains again, and both policies get the same source hold-out."""
    import json

    from s3.config import Params
    from s3.dagger.stage import dagger_stage
    from s3.dynamics.checkpoint import save_checkpoint
    from s3.rl.export import META

    quick = load_params(ROOT / "params_quick.yaml")
    base = collect_round(quick, _follower(tmp_path), tmp_path / "data" / "rollouts", 5, 8, ice_fraction=0.5).parent
    save_checkpoint(bicycle, tmp_path / "models" / "bicycle")
    tree = quick.model_dump(mode="json")
    tree["collect"]["out_dir"] = str(base)
    tree["dagger"].update(policies=["bicycle"], rounds=1, episodes=EPISODES, noise=0.2)
    params = Params.model_validate(tree)
    (tmp_path / "policies").mkdir()
    _follower(tmp_path).rename(tmp_path / "policies" / "bicycle")  # train@bicycle's policy, as the stage finds it

    record = dagger_stage(params, "bicycle", tmp_path)

    zero, one = record["rounds"]
    assert (zero["round"], one["round"]) == (0, 1) and "error_on_own_rows" not in one  # no round 2 drove it
    assert zero["error_on_own_rows"]["windows"] > 0 and zero["error_on_own_rows"]["ade_2s"] > 0.0
    here = tmp_path / "dagger" / "bicycle" / "round1"  # everything of the round, outside policies/ and models/
    rows = here / "rows"
    who = read_manifest(rows)["provenance"]
    assert who["policy"] == "bicycle" and who["round"] == 1 and who["action_noise"] == 0.2
    assert set(load_rollouts(rows)["episode"]) <= set(range(ROUND_OFFSET, ROUND_OFFSET + EPISODES))
    # the round's model read the round beside the data: its episodes are in its training split only
    split = json.loads((here / "models" / "bicycle" / "model.json").read_text())
    split = split["extra"]["split"]
    assert set(load_rollouts(rows)["episode"]) <= set(split["train"])
    assert all(e >= 5 * ROUND_OFFSET for e in split["val"] + split["test"])  # the base data's episodes only
    meta = json.loads((here / "policies" / "bicycle" / META).read_text())
    assert meta["family"] == "bicycle" and one["policy"].endswith("round1/policies/bicycle")
    for kind in ("policies", "models"):  # train@'s and distill@'s alone: time_to_quality reads all of policies/
        assert sorted(p.name for p in (tmp_path / kind).iterdir()) == ["bicycle"]
    assert zero["seeds"] == []  # the follower was not trained: no seeds, and round 0's score is measured
    trained = json.loads((here / "policies" / "records" / "bicycle.json").read_text())
    sel = trained["seed_selection"]  # params_quick: 2 seeds chosen in the source, whose measurement the round keeps
    assert sel["in"] == "source" and len(sel["seeds"]) == params.train.seeds == 2
    assert one["source"]["score"] == next(
        r["source"]["score"] for r in sel["seeds"] if r["seed"] == sel["selected_seed"]
    )
    # every seed of the round, with its source hold-out: the seed is the unit of the round's quality
    assert [s["seed"] for s in one["seeds"]] == [r["seed"] for r in sel["seeds"]]
    assert [s["source"]["score_ice"] for s in one["seeds"]] == [r["source"]["score_ice"] for r in sel["seeds"]]
    for r in (zero, one):  # both on the same hold-out runs in the source
        assert 0.0 <= r["source"]["score"] <= 1.0 and r["source"]["tracks"] == params.train.source_validation_tracks
    headline = json.loads((tmp_path / "metrics" / "dagger" / "bicycle.json").read_text())
    assert headline["round0.source"] == pytest.approx(zero["source"]["score"], rel=1e-3)  # headlines keep 4 digits
    assert headline["round1.source"] == pytest.approx(one["source"]["score"], rel=1e-3)
    assert headline["round0.ade_2s_own_rows"] == pytest.approx(zero["error_on_own_rows"]["ade_2s"], rel=1e-3)
    assert zero["source"]["score"] > 0.9  # the centreline follower laps the hold-out; a 6-iteration policy does not


def _follower(tmp: Path) -> Path:
    folder = tmp / "follower"
    if not folder.exists():
        follower_policy(folder)
    return folder


def test_dagger_params_name_the_offending_key() -> None:
    with pytest.raises(ValueError, match="dagger.policies: 'nope'"):
        load_params(ROOT / "params_quick.yaml", ["dagger.policies=[nope]"])
    with pytest.raises(ValueError, match="rounds"):
        load_params(ROOT / "params_quick.yaml", ["dagger.rounds=0"])
