"""dvc.yaml's deps cover the source each stage runs, derived from the code rather than listed by hand.

For each stage, its `s3 <command>` is the typer command of that name in s3/cli/__init__.py. The modules the
command runs are the s3 modules its function (and the cli helpers it calls) import, closed over
every import statement of those modules (at the top or inside a function: the lazy imports
are what the stage runs; `if TYPE_CHECKING:` blocks are not) and every string naming an s3 module
(the worker preload lists, the model registry's "module:class"). The closure stops at EXEMPT
(an entry exempts a package's modules too).
Each module's file must be a dep of the stage, or lie in a folder that is, unless it holds
nothing but its docstring (a package's __init__.py, usually): then it cannot change a result.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
CLI = SRC / "s3" / "cli" / "__init__.py"

# Modules a stage runs that are deliberately not deps (and whose own imports are not followed).
EXEMPT = {
    "s3.cli": "the command line (the package and its modules): dispatch and printing; what it passes on is params, "
    "which DVC tracks as params",
    "s3.config": "params validation (it imports every section's params module): the values a stage reads reach DVC "
    "as params",
    "s3.tracking": "MLflow logging (the package and its modules): writes runs, never a stage's outputs",
    "s3.progress": "progress on stderr: never a stage's outputs (it imports nothing of s3)",
}
MODULE_STRING = re.compile(r"^s3(\.\w+)+(:\w+)?$")


def _file(module: str) -> Path | None:
    """The source file of an s3 module (a package's __init__.py), None when it is not one."""
    path = SRC.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _with_packages(module: str) -> set[str]:
    """`module` and the packages Python imports first: s3.rl.stage -> s3, s3.rl, s3.rl.stage."""
    parts = module.split(".")
    return {".".join(parts[: i + 1]) for i in range(len(parts))}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks (imports there never run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imported(node: ast.AST) -> set[str]:
    """The s3 modules an import statement imports (with their packages)."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            out |= _with_packages(alias.name)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        out |= _with_packages(node.module)
        out |= {f"{node.module}.{a.name}" for a in node.names if _file(f"{node.module}.{a.name}")}
    return {m for m in out if m.split(".")[0] == "s3" and _file(m)}


@cache
def _module_imports(module: str) -> frozenset[str]:
    """Every s3 module `module` imports anywhere in its file, or names in a string."""
    tree = ast.parse(_file(module).read_text())
    skip = _type_checking_only(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        out |= _imported(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.match(node.value):
            named = node.value.split(":")[0]
            if _file(named):
                out |= _with_packages(named)
    return frozenset(out - {module})


def _command_modules(command: str) -> set[str]:
    """The s3 modules the typer command `command` imports: its function's imports, the cli helpers
    it calls (followed), and the cli's module-level imports it uses."""
    from s3.cli import app

    names = {(c.name or c.callback.__name__.replace("_", "-")): c.callback.__name__ for c in app.registered_commands}
    tree = ast.parse(CLI.read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    top: dict[str, set[str]] = {}  # a name the cli imports at the top -> its module
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                top[alias.asname or alias.name.split(".")[0]] = _imported(node)
    out: set[str] = set()
    todo, seen = [names[command]], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(funcs[name]):
            out |= _imported(node)
            if isinstance(node, ast.Name):
                if node.id in funcs:
                    todo.append(node.id)
                out |= top.get(node.id, set())
    return out


def _exempt(module: str) -> bool:
    """Whether `module` is EXEMPT or inside an EXEMPT package."""
    return any(module == e or module.startswith(e + ".") for e in EXEMPT)


def _inert(module: str) -> bool:
    """True when the module's file holds nothing but a docstring."""
    body = ast.parse(_file(module).read_text()).body
    return all(
        isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str) for n in body
    )


def stage_modules(command: str) -> set[str]:
    """The s3 modules `s3 <command>` runs (the closure described in the module docstring), less EXEMPT."""
    closure: set[str] = set()
    todo = list(_command_modules(command))
    while todo:
        module = todo.pop()
        if module in closure:
            continue
        closure.add(module)
        if not _exempt(module):
            todo.extend(_module_imports(module))
    return {m for m in closure if not _exempt(m)}


@cache
def _stages() -> dict[str, tuple[str, tuple[str, ...]]]:
    """stage name -> (its `s3` command, its deps that are paths), as DVC resolves dvc.yaml."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        return {
            st.addressing: (
                st.cmd.split()[1],
                tuple(d.def_path for d in st.deps if not isinstance(d, ParamsDependency)),
            )
            for st in repo.index.stages
            if st.cmd.startswith("s3 ")
        }


def test_the_closure_follows_lazy_and_string_imports() -> None:
    train = stage_modules("train")
    assert {"s3.rl.stage", "s3.rl.train", "s3.rl.seeds", "s3.rl.direct"} <= train  # imported inside train_one
    assert {"s3.dynamics.ddm", "s3.sim.mujoco_car"} <= train  # the registry's "module:class", a worker preload
    assert "s3" in train and not any(_exempt(m) for m in train)


def test_every_stage_runs_an_s3_command() -> None:
    stages = _stages()
    assert {
        "collect",
        "distill@bicycle",
        "train@oracle",
        "train_direct",
        "evaluate@direct",
        "evaluate_baseline@pid",
        "report",
    } <= set(stages)
    from s3.cli import app

    commands = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    assert {cmd for cmd, _ in stages.values()} <= commands


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_stage_deps_cover_the_source_it_runs(stage: str) -> None:
    command, deps = _stages()[stage]
    dep_paths = [ROOT / d for d in deps]
    missing = sorted(
        str(f.relative_to(ROOT))
        for f in (_file(m) for m in stage_modules(command) if not _inert(m))
        if not any(f == d or d in f.parents for d in dep_paths)
    )
    assert not missing, (
        f"dvc.yaml: {stage} (`s3 {command}`) runs these files but lists none of them or their folders as deps: "
        f"{missing}"
    )


def test_the_dagger_stage_deps_cover_the_source_it_runs(tmp_path) -> None:
    """dagger@<policy> exists only when params.yaml names a policy (`dagger.policies`, empty by default): resolve
    dvc.yaml with one named, in a copy, and check that stage as every other."""
    import yaml
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    Repo.init(str(tmp_path), no_scm=True)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    name = next(iter(params["families"]))
    params["dagger"]["policies"] = [name]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    (tmp_path / "src" / "s3").mkdir(parents=True)
    (tmp_path / "src" / "s3" / "catalog.py").write_text((SRC / "s3" / "catalog.py").read_text())
    with Repo(str(tmp_path)) as repo:
        stage = next(st for st in repo.index.stages if st.name == f"dagger@{name}")
        deps = [ROOT / d.def_path for d in stage.deps if not isinstance(d, ParamsDependency)]
        assert stage.cmd.split()[1] == "dagger-rounds"
        report = next(st for st in repo.index.stages if st.name == "report")
        assert stage in repo.index.graph.successors(report)  # the report reads its record: it runs after it
        ttq = next(st for st in repo.index.stages if st.name == "time_to_quality")
        assert stage not in repo.index.graph.successors(ttq)  # its policies lie outside policies/, which ttq reads
    missing = sorted(
        str(f.relative_to(ROOT))
        for f in (_file(m) for m in stage_modules("dagger-rounds") if not _inert(m))
        if not any(f == d or d in f.parents for d in deps)
    )
    assert not missing, f"dvc.yaml: dagger@{name} runs these files but lists none of them or their folders: {missing}"
    assert ROOT / "policies" / name in deps  # the policy that drives round 1 (its policy.json pins its model)


# TrainParams keys that a distilled PPO run does not read: `direct` is train_direct's own section, `progress_bar`
# only draws on stderr, and `per_policy` is listed per policy (train.per_policy.${key}).
NOT_READ_BY_TRAIN = {"direct", "progress_bar", "per_policy"}


def test_the_train_stage_params_cover_every_key_a_run_reads() -> None:
    """A train key missing from train@<policy>'s params would change the policy without DVC re-running the stage,
    and DVC's run cache would hand an experiment that sets it the outputs of one that did not."""
    import yaml

    from s3.rl.params import TrainParams

    listed = set(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["train"]["do"]["params"])
    read = (f"train.{k}" for k in TrainParams.model_fields if k not in NOT_READ_BY_TRAIN)
    missing = [] if "train" in listed else sorted(k for k in read if k not in listed)
    assert not missing, f"dvc.yaml: train@<policy> does not list these params that its runs read: {missing}"
