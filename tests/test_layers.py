"""The floors of s3 point down: no import from a lower floor to a higher one, and no import circles.

The floor table lives here, once (`FLOORS`); docs/architecture.md ("Floors") draws the same table.
A module belongs to the floor of the longest entry that is it or contains it; a module no entry
holds fails the test (place a new package before it lands). Every `import` counts: at module top,
under `if TYPE_CHECKING:`, and inside functions; relative imports are resolved.

The params layer is the exception. `s3.config` (the root `Params`) may be imported from any floor.
A package's params module (`s3.<pkg>.params`, `s3.<pkg>.<name>_params`) stands on its package's
floor: any module of that floor or above may import it (so the task's params are the task's, and
nothing below the learner reads the learner's). A params module imports only other params modules
(of its floor or below), utilities (floor 0) and what params validate against (`VALIDATED_AGAINST`).
`s3.config` is no node of the package graph (it imports every section's params and all import it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom to top: a module imports its own floor and lower floors only (floor 0 entries are single
# modules; any other entry is a package with everything under it).
FLOORS: list[tuple[str, ...]] = [
    # 0 utilities (s3: the root __init__ only)
    ("s3", "s3.io", "s3.workers", "s3.progress", "s3.catalog", "s3.headline"),
    ("s3.tracks",),  # 1
    ("s3.viz",),  # 2 plotting of plain arrays and tracks
    ("s3.sim",),  # 3
    ("s3.compute",),  # 4 executor, retry, pools of source simulators
    ("s3.tracking",),  # 5 MLflow
    ("s3.data",),  # 6
    ("s3.dynamics",),  # 7
    ("s3.task",),  # 8
    ("s3.rl",),  # 9
    ("s3.evaluate",),  # 10
    ("s3.report", "s3.dagger"),  # 11 the report; DAgger rounds (a policy drives the collection)
    ("s3.platform",),  # 12 study, regress, workspace
    ("s3.cli", "s3.__main__"),  # 13
]
UTILITIES = 0
ROOT_PARAMS = "s3.config"  # the root Params: any floor imports it; it imports every section's params
# What a params module may import besides params modules and utilities: what params validate against.
# (the families; the track generator's params and the built-in circuits: floor 1, which imports no params).
VALIDATED_AGAINST = ("s3.catalog", "s3.tracks", "s3.sim.backends")

# Imports that break a floor only because another task's move has not landed on this branch yet:
# (importer, imported) -> the task that removes it. Delete each entry once that task is merged.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name (the longest prefix that is a module of the tree)
    file: str
    line: int
    typing_only: bool = False  # under `if TYPE_CHECKING:` (annotations only: no runtime import)

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def modules(src: Path, top: str = "s3") -> dict[str, Path]:
    """Dotted name -> file of every module under src/<top> (a package is its __init__.py)."""
    out = {}
    for path in sorted((src / top).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is a module of the tree (None: outside it)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in known:
            return candidate
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement in `tree` (any depth), with whether it sits under `if TYPE_CHECKING:`."""
    out: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, typing_only = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append((node, typing_only))
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack += [(n, True) for n in node.body] + [(n, typing_only) for n in node.orelse]
            continue
        stack += [(n, typing_only) for n in ast.iter_child_nodes(node)]
    return out


def imports(src: Path, top: str = "s3") -> list[Import]:
    """Every import of a module of src/<top> by a module of src/<top>, anywhere in the file, once per
    (importer, imported, line)."""
    known = modules(src, top)
    found: dict[tuple[str, str, int], Import] = {}
    for mod, path in known.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        rel = str(path.relative_to(src.parent))
        for node, typing_only in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [f"{stem}.{a.name}" for a in node.names]
            for target in targets:
                resolved = _resolve(target, known)
                if resolved is not None and resolved != mod:
                    found.setdefault((mod, resolved, node.lineno), Import(mod, resolved, rel, node.lineno, typing_only))
    return sorted(found.values(), key=lambda i: (i.file, i.line, i.imported))


def is_params(mod: str) -> bool:
    """`s3.config`, `s3.<pkg>.params` and `s3.<pkg>.<name>_params`: the params layer."""
    last = mod.rpartition(".")[2]
    return mod == "s3.config" or (mod.count(".") >= 2 and (last == "params" or last.endswith("_params")))


def _entry(mod: str, floors: list[tuple[str, ...]]) -> tuple[int, str] | None:
    """(floor, entry) of the longest entry that is `mod` or, above floor 0, a package holding it."""
    hits = [
        (len(entry), level, entry)
        for level, entries in enumerate(floors)
        for entry in entries
        if mod == entry or (level != UTILITIES and mod.startswith(entry + "."))
    ]
    return max(hits)[1:] if hits else None


def floor_of(mod: str, floors: list[tuple[str, ...]] = FLOORS) -> int | None:
    """The floor a module stands on, None when no entry holds it."""
    hit = _entry(mod, floors)
    return None if hit is None else hit[0]


def unit_of(mod: str, floors: list[tuple[str, ...]] = FLOORS) -> str:
    """The node of the package graph: the floor entry holding the module (its package)."""
    hit = _entry(mod, floors)
    return mod if hit is None else hit[1]


def floor_violations(
    found: list[Import],
    floors: list[tuple[str, ...]] = FLOORS,
    allowed: dict[tuple[str, str], str] | None = None,
    validated_against: tuple[str, ...] = VALIDATED_AGAINST,
) -> list[str]:
    """One line per import that points up a floor (or leaves the params layer), and per unplaced module
    among the modules `found` names."""
    allowed = ALLOWED if allowed is None else allowed
    out = []
    names = lambda lv: f"floor {lv} ({'/'.join(floors[lv])})"
    for mod in sorted({i.importer for i in found} | {i.imported for i in found}):
        if not is_params(mod) and floor_of(mod, floors) is None:
            out.append(f"{mod}: on no floor (add it to FLOORS)")
    for imp in found:
        dst = floor_of(imp.imported, floors)
        if (imp.importer, imp.imported) in allowed or imp.imported == ROOT_PARAMS or dst is None:
            continue  # any floor may import the root params; an unplaced module is reported above
        if is_params(imp.importer) and not is_params(imp.imported):
            if dst != UTILITIES and not imp.imported.startswith(tuple(validated_against)):
                out.append(
                    f"{imp.where()}: {imp.importer} (params) imports {imp.imported} ({names(dst)}): "
                    "a params module imports only params modules, utilities and what it validates against"
                )
            continue
        src = floor_of(imp.importer, floors)  # a package's params module stands on its package's floor
        if src is not None and dst > src:
            out.append(
                f"{imp.where()}: {imp.importer} ({names(src)}) imports {imp.imported} ({names(dst)}): up a floor"
            )
    return out


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def cycles(
    found: list[Import],
    floors: list[tuple[str, ...]] = FLOORS,
    allowed: dict[tuple[str, str], str] | None = None,
) -> list[str]:
    """One line per import circle, between packages (s3.config aside) and between modules,
    naming every import inside the circle. Between modules, imports under `if TYPE_CHECKING:` do not
    count (an annotation that names a sibling's class is no import at run time); between packages they do."""
    allowed = ALLOWED if allowed is None else allowed
    kept = [i for i in found if (i.importer, i.imported) not in allowed]
    out = []
    for kind, key in (("packages", lambda m: unit_of(m, floors)), ("modules", lambda m: m)):
        graph: dict[str, set[str]] = {}
        if kind == "packages":  # the root params is imported by all and imports all params: not a package
            edges_of = [i for i in kept if ROOT_PARAMS not in (i.importer, i.imported)]
        else:
            edges_of = [i for i in kept if not i.typing_only]
        for imp in edges_of:
            a, b = key(imp.importer), key(imp.imported)
            if a != b:
                graph.setdefault(a, set()).add(b)
        for comp in _components(graph):
            members = set(comp)
            edges = sorted(
                f"{i.where()} {i.importer} -> {i.imported}"
                for i in edges_of
                if key(i.importer) in members and key(i.imported) in members and key(i.importer) != key(i.imported)
            )
            out.append(f"circle between {kind} {', '.join(comp)}:\n    " + "\n    ".join(edges))
    return out


def test_floors_point_down() -> None:
    unplaced = [
        f"{m}: on no floor (add it to FLOORS)" for m in modules(SRC) if not is_params(m) and floor_of(m) is None
    ]
    bad = unplaced + floor_violations(imports(SRC))
    assert not bad, f"{len(bad)} import(s) break the floors (tests/test_layers.py FLOORS):\n" + "\n".join(bad)


def test_no_import_circles() -> None:
    bad = cycles(imports(SRC))
    assert not bad, f"{len(bad)} import circle(s):\n" + "\n".join(bad)


def test_allow_list_is_live() -> None:
    """Every ALLOWED entry is an import that exists (delete entries whose move has landed)."""
    pairs = {(i.importer, i.imported) for i in imports(SRC)}
    stale = sorted(f"{a} -> {b} ({why})" for (a, b), why in ALLOWED.items() if (a, b) not in pairs)
    assert not stale, "ALLOWED entries no longer needed:\n" + "\n".join(stale)


def test_the_checker_can_fail(tmp_path: Path) -> None:
    """A tiny package with an upward import (relative, inside a function), a params module that
    reaches up, and a circle: each is reported with file:line and floors; a circle of annotations
    only (`if TYPE_CHECKING:`) is one between packages, not between modules."""
    files = {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from ..high import b\n",
        "low/params.py": "from s3.high.b import X\n",
        "high/__init__.py": "",
        "high/b.py": "import s3.low.a\nX = 1\n",
        "high/c.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import d\n",
        "high/d.py": "from s3.high import c\n",
        "high/params.py": "Y = 1\n",
        "low/e.py": "from s3.high.params import Y\n",
    }
    for name, text in files.items():
        (tmp_path / "s3" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "s3" / name).write_text(text)
    floors = [("s3",), ("s3.low",), ("s3.high",)]
    found = imports(tmp_path)
    assert {(i.importer, i.imported, i.typing_only) for i in found} == {
        ("s3.low.a", "s3.high.b", False),
        ("s3.low.params", "s3.high.b", False),
        ("s3.high.b", "s3.low.a", False),
        ("s3.high.c", "s3.high.d", True),
        ("s3.high.d", "s3.high.c", False),
        ("s3.low.e", "s3.high.params", False),
    }
    bad = floor_violations(found, floors, allowed={}, validated_against=())
    assert len(bad) == 3, bad
    assert bad[0].endswith(
        "s3/low/a.py:2: s3.low.a (floor 1 (s3.low)) imports s3.high.b (floor 2 (s3.high)): up a floor"
    )
    assert bad[1].endswith(
        "s3/low/e.py:1: s3.low.e (floor 1 (s3.low)) imports s3.high.params (floor 2 (s3.high)): up a floor"
    )
    assert "s3/low/params.py:1: s3.low.params (params) imports s3.high.b (floor 2 (s3.high))" in bad[2]
    circles = cycles(found, floors, allowed={})
    assert len(circles) == 2, circles
    assert circles[0].startswith("circle between packages s3.high, s3.low:"), circles
    assert "s3/low/a.py:2 s3.low.a -> s3.high.b" in circles[0]
    assert circles[1].startswith("circle between modules s3.high.b, s3.low.a:")
    assert "s3/high/b.py:1 s3.high.b -> s3.low.a" in circles[1]
    # an allowed import is neither a floor violation nor an edge of a circle
    allowed = {(i.importer, i.imported): "test" for i in found if i.importer.startswith("s3.low.")}
    assert floor_violations(found, floors, allowed=allowed, validated_against=()) == []
    assert cycles(found, floors, allowed=allowed) == []
