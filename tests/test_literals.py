"""Policy names are spelled once: in s3/catalog.py (what each policy is) and nowhere else in src/ or dvc.yaml.

The names are the catalog's: the four model families, the oracle, direct and the baselines. In src/,
a name is caught as a string literal (ast.Constant, an f-string's literal parts included) that is the
name or holds it as a path or dotted part ("policies/ddm", "direct.json", "distill.dytr"); docstrings
and prose (a string with whitespace in it: a message, a help text, a label) are left alone. The one
exemption is s3/dynamics/registry.py's "module:class" strings, the one place a family's module is
named. In dvc.yaml every key and string value is checked, commands included (comments are not): the
stages take the names from params.yaml and from the catalog as template vars.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from s3 import catalog

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
NAMES = frozenset(catalog.POLICIES)
CATALOG = SRC / "s3" / "catalog.py"
REGISTRY = SRC / "s3" / "dynamics" / "registry.py"
MODULE_CLASS = re.compile(r"^s3(\.\w+)+:\w+$")
SEPARATOR = re.compile(r"[^A-Za-z0-9_]+")  # "policies/ddm" -> policies, ddm; "train_direct" stays one token


def names_in(text: str) -> list[str]:
    """The policy names `text` holds as a whole token (split at anything not a letter, digit or underscore)."""
    return [t for t in SEPARATOR.split(text) if t in NAMES]


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of the module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def python_literals(source: str, allow_module_class: bool = False) -> list[tuple[int, str]]:
    """(line, string) of every string literal in `source` that spells a policy name (see the module docstring)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip:
            continue
        text = node.value
        if any(c.isspace() for c in text) or (allow_module_class and MODULE_CLASS.match(text)):
            continue
        if names_in(text):
            found.append((node.lineno, text))
    return found


TEMPLATE = re.compile(r"\$\{([^}]*)\}")


def _schema_path(path: str) -> bool:
    """Whether a `${a.b.c}` reference walks only fields of the params schema (s3.config.Params): a
    field such as train.direct is a section's name, not a policy's; a dict key (per_policy.ddm) is not a field."""
    from pydantic import BaseModel

    from s3.config import Params

    node: type[BaseModel] | None = Params
    for part in path.split("."):
        if node is None or part not in node.model_fields:
            return False
        ann = node.model_fields[part].annotation
        node = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return True


def yaml_literals(text: str) -> list[str]:
    """Every key and string value of a YAML document that spells a policy name (comments are not read);
    a `${...}` reference that is a path of params fields is not a spelling (`_schema_path`)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(k)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str) and names_in(TEMPLATE.sub(lambda m: "" if _schema_path(m[1]) else m[0], node)):
            found.append(node)

    walk(yaml.safe_load(text))
    return found


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p != CATALOG)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_policy_name_is_spelled_in_src(path: Path) -> None:
    found = python_literals(path.read_text(), allow_module_class=path == REGISTRY)
    assert not found, (
        f"{path.relative_to(ROOT)} spells policy names as literals (use the constants of s3.catalog): "
        + ", ".join(f"line {line}: {text!r}" for line, text in found)
    )


def test_no_policy_name_is_spelled_in_dvc_yaml() -> None:
    found = yaml_literals((ROOT / "dvc.yaml").read_text())
    assert not found, f"dvc.yaml spells policy names (use params.yaml's lists or the catalog's vars): {found}"


def test_the_check_catches_a_literal() -> None:
    """The checks fail on what they are meant to catch, and let docstrings, prose and other words be."""
    snippet = '''
"""The ddm family and the oracle (a docstring: prose)."""
FAMILY = "ddm"
path = f"policies/{seed}/dytr.json"
folder = "policies/transformer"
key = "distill.bicycle"
kinds = {"pid_blind": 1}
message = "the oracle observes the surface"
word = "directly"
stage = "train_direct"
'''
    found = sorted(python_literals(snippet))
    assert found == [
        (3, "ddm"),
        (4, "/dytr.json"),
        (5, "policies/transformer"),
        (6, "distill.bicycle"),
        (7, "pid_blind"),
    ]
    assert python_literals('CLASSES = {"x": "s3.dynamics.ddm:DDMModel"}') == [(1, "s3.dynamics.ddm:DDMModel")]
    assert python_literals('CLASSES = {"x": "s3.dynamics.ddm:DDMModel"}', allow_module_class=True) == []
    assert yaml_literals("stages:\n  a:\n    cmd: s3 evaluate --family pid  # a comment: oracle\n") == [
        "s3 evaluate --family pid"
    ]
    assert yaml_literals("stages:\n  b:\n    foreach: [pid, pid_blind]\n") == ["pid", "pid_blind"]
    assert (
        yaml_literals("vars:\n  - src/s3/catalog.py:DIRECT,BASELINES\nstages:\n  c:\n    foreach: ${BASELINES}\n") == []
    )
    assert yaml_literals("deps:\n  - records/train/${train.direct.route}.json\n") == []  # a params section's name
    assert yaml_literals("params:\n  - ${train.per_policy.ddm.seeds}\n") == ["${train.per_policy.ddm.seeds}"]


def test_the_catalog_describes_every_policy_once() -> None:
    assert list(catalog.POLICIES) == [*catalog.FAMILIES, catalog.ORACLE, catalog.DIRECT, *catalog.BASELINES]
    kinds = {catalog.FAMILY, catalog.ORACLE_KIND, catalog.DIRECT_KIND, catalog.BASELINE}
    for name, p in catalog.POLICIES.items():
        assert p.kind in kinds and p.label and p.colour, name
        assert (p.structure is not None) == (p.kind == catalog.FAMILY), name
        assert (p.model is not None) == (p.kind in (catalog.FAMILY, catalog.ORACLE_KIND)), name
        assert (p.line is not None) == (name in catalog.NOT_IN_MODEL), name  # drawn as a line: no model
    assert catalog.GROUNDED and catalog.BLACK_BOX and not set(catalog.GROUNDED) & set(catalog.BLACK_BOX)
    assert all(catalog.POLICIES[f].model == f for f in catalog.FAMILIES)


def test_the_implementations_cover_the_catalog() -> None:
    """The class map and the baseline drivers take their names from the catalog: exactly its families and baselines."""
    from s3.dynamics.registry import FAMILIES, FAMILY_CLASSES
    from s3.evaluate.evaluate import BASELINES

    assert tuple(FAMILY_CLASSES) == FAMILIES == catalog.FAMILIES
    assert list(BASELINES) == catalog.BASELINES


def test_params_yaml_agrees_with_the_catalog() -> None:
    """params.yaml lists which policies a run uses: catalog names, each in the model the catalog says it trains in."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert set(params["families"]) <= set(catalog.FAMILIES)
    for name, entry in params["policies_in_models"].items():
        if name in catalog.POLICIES:
            assert entry["model"] == catalog.POLICIES[name].model, name
    assert set(params["train"]["per_policy"]) <= set(catalog.POLICIES) - set(catalog.BASELINES)


def test_dvc_reads_the_catalog_vars() -> None:
    """dvc.yaml's `vars` entry reads DIRECT and BASELINES from catalog.py with DVC's own parser (literals only)."""
    from dvc.utils.serialize import parse_py

    data = parse_py(CATALOG.read_text(), str(CATALOG))
    assert data["DIRECT"] == catalog.DIRECT and data["BASELINES"] == catalog.BASELINES
    assert isinstance(data["BASELINES"], list)  # DVC's foreach takes a list, not a tuple
