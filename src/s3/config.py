"""params.yaml as validated pydantic models, with `--set section.key=value` overrides.

Bad input stops here, before any work, with one line naming the offending key.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from s3.catalog import DIRECT, FAMILIES  # DIRECT: the policy trained in the source simulator itself (train_direct)
from s3.compute.params import ComputeParams
from s3.dagger.params import DaggerParams
from s3.data.params import CollectParams
from s3.dynamics.params import DistillParams
from s3.evaluate.params import EvaluateParams, TimeToQualityParams
from s3.platform.params import RegressParams
from s3.rl.params import TrainParams
from s3.sim.params import SimParams


class ParamsError(ValueError):
    """Invalid parameters; the message is one line naming the key."""


class FamilyEntry(BaseModel):
    """A model family the pipeline runs (params.yaml `families`): distill@, train@, evaluate@<family>."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        None,
        description="the distilled model its policy trains in: the family itself (dvc.yaml's train stage reads it)",
    )
    distill: list[str] | None = Field(
        None,
        min_length=3,
        max_length=3,
        description="the three distill keys only its distill@<family> stage tracks (dvc.yaml)",
    )


class PolicyEntry(BaseModel):
    """A policy trained inside a distilled model (params.yaml `policies_in_models`): train@<policy>."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the model family it trains in")
    distill: list[str] | None = Field(None, description="a family's entry carries it here (`<<: *families`); unused")


class Params(BaseModel):
    """Everything in params.yaml."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, ge=0, le=2**31 - 1)
    families: dict[str, FamilyEntry] = Field(
        default_factory=lambda: {f: FamilyEntry() for f in FAMILIES},
        description="the model families the pipeline runs (s3.catalog; their classes: s3.dynamics.registry)",
    )
    policies_in_models: dict[str, PolicyEntry] = Field(
        default_factory=dict,
        description="policies trained inside a distilled model; each family's own policy is implied",
    )
    sim: SimParams = SimParams()
    collect: CollectParams = CollectParams()
    distill: DistillParams = DistillParams()
    train: TrainParams = TrainParams()
    evaluate: EvaluateParams = EvaluateParams()
    time_to_quality: TimeToQualityParams = TimeToQualityParams()
    dagger: DaggerParams = DaggerParams()
    regress: RegressParams = RegressParams()
    compute: ComputeParams = ComputeParams()

    @model_validator(mode="after")
    def _names(self) -> Params:
        tree = self.model_dump()
        for fam, entry in self.families.items():
            if fam not in FAMILIES:
                raise ValueError(f"families.{fam}: no such model family in s3.catalog ({', '.join(FAMILIES)})")
            if entry.model not in (None, fam):
                raise ValueError(
                    f"families.{fam}.model: {entry.model!r}; a family's policy trains in its own model ({fam!r})"
                )
            for i, key in enumerate(entry.distill or ()):
                node: Any = tree
                for part in key.split("."):
                    node = node.get(part) if isinstance(node, dict) else None
                if not key.startswith("distill.") or node is None:
                    raise ValueError(f"families.{fam}.distill[{i}]: {key!r} is not a distill.* key of params.yaml")
        for name, entry in self.policies_in_models.items():
            if name == DIRECT:
                raise ValueError(
                    f"policies_in_models.{DIRECT}: {DIRECT!r} trains in the source simulator (train_direct), not in "
                    "a model"
                )
            want = [name] if name in self.families else list(self.families)
            if entry.model not in want:
                raise ValueError(f"policies_in_models.{name}.model: {entry.model!r} is not one of {', '.join(want)}")
        direct = self.train.for_policy(DIRECT).direct
        if direct.route is not None and direct.route not in self.families:  # the route claim 1 compares it with
            route = direct.route
            raise ValueError(
                f"train.direct.route: {route!r} is not one of the families ({', '.join(self.families)}): its "
                "distilled route is the one claim 1 compares direct with"
            )
        for name in self.dagger.policies:
            if name not in self.models():
                known = ", ".join(self.models())
                raise ValueError(f"dagger.policies: {name!r} is not a policy trained in a model ({known})")
        for name in self.models():  # the source hold-out is the first of the in-model validation tracks
            tp = self.train.for_policy(name)
            if tp.seed_selection == "source" and tp.source_validation_tracks > tp.tracks.validation_tracks:
                raise ValueError(
                    f"train.source_validation_tracks: {tp.source_validation_tracks} ({name}) is more than "
                    f"train.tracks.validation_tracks ({tp.tracks.validation_tracks}): the source hold-out is the "
                    "first of those tracks"
                )
        for name in self.train.per_policy:
            if name not in self.policies():
                raise ValueError(f"train.per_policy.{name}: not one of the policies ({', '.join(self.policies())})")
        if self.compute.backend == "ray" and self.compute.resources.train.num_gpus > 0 and self.train.device == "cpu":
            raise ValueError(
                "compute.resources.train.num_gpus: training jobs hold a GPU but train.device is 'cpu' (set it to "
                "'cuda' or 'auto')"
            )
        if self.compute.backend == "ray" and self.compute.resources.train.num_gpus == 0 and self.train.device == "cuda":
            raise ValueError(
                "compute.resources.train.num_gpus: train.device is 'cuda' but training jobs ask no GPU, and on Ray "
                "a job that asks none sees none (set num_gpus, e.g. 1, or train.device to 'auto' or 'cpu')"
            )
        return self

    def models(self) -> dict[str, str]:
        """Policy -> the model family it trains in: each family's own policy, then `policies_in_models`."""
        return {**{f: f for f in self.families}, **{n: e.model for n, e in self.policies_in_models.items()}}

    def policies(self) -> list[str]:
        """Every trained policy: those trained in a distilled model, then `direct` (in the source simulator)."""
        return [*self.models(), DIRECT]

    def model_of(self, policy: str) -> str:
        """The model family `policy` trains in (ParamsError naming the policies it knows)."""
        models = self.models()
        if policy not in models:
            raise ParamsError(
                f"{policy!r} is not a policy trained in a model ({', '.join(models)}: params.yaml families, "
                "policies_in_models)"
            )
        return models[policy]


def _apply_override(tree: dict[str, Any], assignment: str) -> None:
    if "=" not in assignment:
        raise ParamsError(f"--set {assignment!r}: expected section.key=value")
    dotted, raw = assignment.split("=", 1)
    keys = dotted.strip().split(".")
    if not all(keys):
        raise ParamsError(f"--set {assignment!r}: empty key in {dotted!r}")
    set_dotted(tree, keys, yaml.safe_load(raw) if raw.strip() else "", f"--set {assignment!r}")


def set_dotted(tree: dict[str, Any], keys: list[str], value: Any, where: str) -> None:
    """tree[k1][k2]...[kn] = value, creating sections; ParamsError (naming `where`) when a step is not a section."""
    node = tree
    for i, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ParamsError(f"{where}: {'.'.join(keys[: i + 1])} is not a section")
        node = child
    node[keys[-1]] = value


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the section that `loc` (minus its last element) points into."""
    for key in loc[:-1]:
        field = model.model_fields.get(str(key))
        ann = field.annotation if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return sorted(model.model_fields)


def _one_line(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    key = ".".join(str(p) for p in loc) or "<root>"
    if first["type"] == "extra_forbidden":
        allowed = ", ".join(_allowed_keys(Params, loc))
        return f"{source}: unknown key {key!r} (allowed here: {allowed})"
    if not loc and first["type"] == "value_error":
        return f"{source}: {first['msg'].removeprefix('Value error, ')}"
    got = first.get("input")
    got_txt = "" if isinstance(got, dict) else f" (got {got!r})"
    more = f" [+{len(err.errors()) - 1} more]" if len(err.errors()) > 1 else ""
    return f"{source}: {key}: {first['msg']}{got_txt}{more}"


def load_params(path: str | Path | None = "params.yaml", overrides: list[str] | tuple[str, ...] = ()) -> Params:
    """Read params.yaml (absent file = defaults), apply overrides, validate."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        source = str(p)
        if p.exists():
            try:
                loaded = yaml.safe_load(p.read_text())
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f" line {mark.line + 1}" if mark else ""
                raise ParamsError(f"{p}:{where} is not valid YAML") from None
            if loaded is not None and not isinstance(loaded, dict):
                raise ParamsError(f"{p}: expected a mapping of sections at the top level")
            tree = copy.deepcopy(loaded or {})
        elif str(path) != "params.yaml":
            raise ParamsError(f"{p}: no such params file")
    for assignment in overrides:
        _apply_override(tree, assignment)
    if overrides:
        source += " + --set"
    try:
        params = Params.model_validate(tree)
    except ValidationError as e:
        raise ParamsError(_one_line(e, source)) from None
    _check_stage_lists(tree, params, source)
    return params


def _check_stage_lists(tree: dict[str, Any], params: Params, source: str) -> None:
    """What dvc.yaml's `foreach` stages need of a params file that lists `families`, beyond validity:
    DVC templating reads the file as written and has no defaults."""
    if "families" not in tree:
        return
    for fam, entry in tree["families"].items():
        if entry.get("model") != fam or len(entry.get("distill") or ()) != 3:
            raise ParamsError(
                f"{source}: families.{fam}: dvc.yaml needs {{model: {fam}, distill: [three distill keys]}}"
            )
    listed = tree.get("policies_in_models") or {}
    for fam in tree["families"]:
        if fam not in listed:
            raise ParamsError(
                f"{source}: policies_in_models.{fam}: missing: the train stages come from this list (`<<: "
                "*families` carries every family)"
            )
    per_policy = (tree.get("train") or {}).get("per_policy") or {}
    for name in params.policies():
        if name not in per_policy:
            raise ParamsError(
                f"{source}: train.per_policy.{name}: missing: the evaluate stages come from this list and "
                f"train@{name} tracks the entry (`{name}: {{}}`)"
            )


def pick_names(option: str, known: list[str], every: list[str], where: str) -> list[str]:
    """The names a `--family` option picks: one of `known`, or "all" (= `every`); ParamsError naming
    the option, the known names and `where` they come from otherwise."""
    if option == "all":
        return list(every)
    if option not in known:
        raise ParamsError(f"--family: {option!r} is not one of {', '.join(known)}, all ({where})")
    return [option]


FAMILIES_KEY = "params.yaml: families"
POLICIES_KEY = "params.yaml: families, policies_in_models; direct"
