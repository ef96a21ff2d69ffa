"""A study's set file (studies/<set>.yaml): read, shape-checked, and each variant's params built and checked.

    load_study(name, project) -> Study (StudyError, one line, on a bad file or variant name)
    params_text(study, variant) -> the variant's params.yaml: the base file plus the overrides
    check_variant(study, variant) -> the variant's validated Params; check_study(study) -> {variant: Params}

Checks before any work (`check_study`): every override names an existing key of Params
(`train.per_policy.<policy>.<key>` a key of `train`), the variant's params validate as
s3.config's do, its family and policy are in them and the policy trains in that family, and the
overrides change only what they name: an override that creates a section params.yaml leaves out
(train.tracks.procedural, say) gives it the class defaults, not the factory's, and is refused
until every key that would change silently is named.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from s3.config import Params, ParamsError, load_params

STUDIES_DIR = Path("studies")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class StudyError(RuntimeError):
    """A bad set file or variant, or a variant whose pipeline failed; one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VariantSpec(_Strict):
    family: str = Field(description="the model family distilled (distill@<family>)")
    policy: str | None = Field(
        None, description="the policy trained and evaluated (train@, evaluate@<policy>); default: the family's own"
    )
    note: str = ""
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="dotted params keys -> values (YAML values, as --set)"
    )


class StudyFile(_Strict):
    description: str = ""
    base: str = Field("params.yaml", description="the parameter file the variants start from (relative to the project)")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="every variant's overrides (a variant's own win)"
    )
    blocks: dict[str, Any] = Field(
        default_factory=dict, description="YAML anchors the variants merge (`<<: *name`); read by nothing else"
    )
    variants: dict[str, VariantSpec] = Field(min_length=1)


@dataclass(frozen=True)
class Variant:
    name: str
    family: str
    policy: str
    overrides: dict[str, Any]  # the set's shared overrides, then the variant's own
    note: str = ""


@dataclass(frozen=True)
class Study:
    name: str
    path: Path
    base: Path
    variants: dict[str, Variant]
    description: str = ""

    def pick(self, names: Iterable[str] | None = None) -> list[Variant]:
        """The variants `names` lists (all when None/empty), in the file's order."""
        names = list(names or [])
        for n in names:
            if n not in self.variants:
                raise StudyError(f"{self.name}: no variant {n!r} (variants: {', '.join(self.variants)})")
        return [v for k, v in self.variants.items() if not names or k in names]


def study_path(name: str | Path, project: Path = Path(".")) -> Path:
    """studies/<name>.yaml, or `name` itself when it is a .yaml file."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml"):
        if not p.exists():
            raise StudyError(f"{p}: no such study file")
        return p
    if not NAME.match(str(name)):
        raise StudyError(f"study {str(name)!r}: a set is a name under {STUDIES_DIR}/ or a .yaml file")
    p = Path(project) / STUDIES_DIR / f"{name}.yaml"
    if not p.exists():
        known = sorted(f.stem for f in (Path(project) / STUDIES_DIR).glob("*.yaml"))
        raise StudyError(f"no study {str(name)!r} in {STUDIES_DIR}/ (sets: {', '.join(known) or 'none'})")
    return p


SEEDS_KEY = "train.seeds"


def load_study(name: str | Path, project: Path = Path("."), base: str | Path | None = None) -> Study:
    """Read and shape-check a set file (the params themselves: check_study). `base`: start every variant from
    this params file instead of the set's `base`, and take K from it: the set's own `train.seeds` override is
    dropped, so that one study runs the same K in every arm (a variant's own override would still win)."""
    path = study_path(name, project)
    try:
        raw = yaml.safe_load(path.read_text())
        spec = StudyFile.model_validate(raw)
    except yaml.YAMLError:
        raise StudyError(f"{path}: not valid YAML") from None
    except ValidationError as e:
        first = e.errors()[0]
        raise StudyError(f"{path}: {'.'.join(str(k) for k in first['loc'])}: {first['msg']}") from None
    shared = dict(spec.overrides)
    if base is not None:
        shared.pop(SEEDS_KEY, None)
    base = Path(base if base is not None else spec.base)
    base = base if base.is_absolute() else Path(project) / base
    variants = {}
    for vname, v in spec.variants.items():
        if not NAME.match(vname):
            raise StudyError(
                f"{path}: variants.{vname}: a variant name is lower case letters, digits and _ (it names a file)"
            )
        variants[vname] = Variant(vname, v.family, v.policy or v.family, {**shared, **v.overrides}, v.note)
    return Study(path.stem, path, base, variants, spec.description)


# ---------------------------------------------------------------------------- params of a variant
def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """tree[a][b][c] = value for key "a.b.c", creating sections (as s3.config's --set does)."""
    from s3.config import ParamsError
    from s3.config import set_dotted as set_keys

    try:
        set_keys(tree, key.split("."), value, key)
    except ParamsError as e:
        raise StudyError(str(e)) from None


def variant_tree(study: Study, variant: Variant) -> dict[str, Any]:
    """The variant's params.yaml as a tree: the base file (anchors resolved) plus the overrides."""
    tree = yaml.safe_load(study.base.read_text()) or {}
    for key, value in variant.overrides.items():
        set_dotted(tree, key, value)
    return tree


def params_text(study: Study, variant: Variant) -> str:
    head = (
        f"# Written by `s3 study run {study.name}`: {study.base.name} plus the overrides of {study.path.name}, "
        f"variant {variant.name}.\n"
    )
    return head + yaml.dump(
        variant_tree(study, variant), Dumper=_PlainDumper, sort_keys=False, default_flow_style=None, width=120
    )


class _PlainDumper(yaml.SafeDumper):
    """No &id anchors: the base file's merged sections (families into policies_in_models) are written out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: tree}


def _has_key(dump: dict[str, Any], key: str) -> bool:
    parts = key.split(".")
    if parts[:2] == ["train", "per_policy"] and len(parts) > 3:  # train.per_policy.<policy>.<key>: a key of train
        parts = ["train", *parts[3:]]
    node: Any = dump
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _load(text: str, source: str) -> Params:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "params.yaml"
        f.write_text(text)
        try:
            return load_params(f)
        except ParamsError as e:
            raise StudyError(f"{source}: {str(e).replace(str(f), 'params')}") from None


def check_variant(study: Study, variant: Variant) -> Params:
    """The variant's validated Params; StudyError (one line) for any problem the module docstring lists."""
    where = f"{study.path}: {variant.name}"
    if not study.base.exists():
        raise StudyError(f"{study.path}: base {study.base}: no such file")
    base = load_params(study.base)
    base_dump = base.model_dump(mode="json")
    for key in variant.overrides:
        if not _has_key(base_dump, key):
            raise StudyError(f"{where}: {key}: no such key in Params")
    p = _load(params_text(study, variant), where)
    if variant.family not in p.families:
        raise StudyError(f"{where}: family {variant.family!r} is not one of {', '.join(p.families)}")
    if variant.policy not in p.models():
        raise StudyError(f"{where}: policy {variant.policy!r} is not trained in a model ({', '.join(p.models())})")
    if p.model_of(variant.policy) != variant.family:
        raise StudyError(
            f"{where}: policy {variant.policy!r} trains in {p.model_of(variant.policy)!r}, not {variant.family!r}"
        )
    before, after = _flat(base_dump), _flat(p.model_dump(mode="json"))
    named = tuple(variant.overrides)
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key) and not any(
            key == n or key.startswith(n + ".") or n.startswith(key + ".") for n in named
        ):
            raise StudyError(
                f"{where}: {key} changes ({before.get(key)!r} -> {after.get(key)!r}) though no override names it: "
                "a section an override creates takes the class defaults; name the key"
            )
    return p


def check_study(study: Study) -> dict[str, Params]:
    return {v.name: check_variant(study, v) for v in study.variants.values()}
