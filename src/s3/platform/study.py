"""Experiment sets beside the default run: studies/<set>.yaml, one scratch workspace per variant.

    s3 study run ablation [--variant NAME ...] [--dry-run] [--force] [--root DIR] [--results DIR]

A set file names a base parameter file, overrides every variant shares, and the variants: each a
model family, the policy trained in it (default: the family's own) and dotted overrides, the
`--set` keys of s3.config. A variant runs in its own workspace, `<root>/<set>/<variant>` (made by
s3.platform.workspace, sharing this project's DVC cache), whose params.yaml is the base file plus
the overrides; there `dvc repro evaluate@<policy>` runs collect, distill@<family>, train@<policy>
and evaluate@<policy>, nothing else (and dagger@<policy> when the variant's `dagger.policies` names its
policy: DAgger rounds from the policy train@<policy> kept). Then records/experiments/<set>/<variant>.json
is written atomically:

    {"params": {dotted key: value, ...every override},
     "distill": records/distill/<family>.json, "eval": records/eval/<policy>.json,
     "train": records/train/<policy>.json}                                  (exactly these keys)
     + "dagger": records/dagger/<policy>.json                               (only where dagger@<policy> ran)

Resumption: a variant whose result file exists is skipped (`--force` runs it again: DVC re-runs
what changed since, e.g. the code); a killed variant resumes in its workspace (collect keeps its
shards, train its resume files). Identical collections are not recomputed: a workspace without
rollouts first takes a copy of those of another workspace of the study root, or of this project,
whose manifest has the collect key its params give (s3.data.collect decides again, shard by
shard, that they are its own; what does not match is collected). DVC's run cache cannot do this:
collect's output is `persist`.

Checks before any work (`check_study`, s3.platform.study_set): every override names an existing key,
the variant's params validate, and the overrides change only what they name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3.config import Params
from s3.dagger import DAGGER
from s3.io import workspace_lock, write_json_atomic
from s3.platform.study_set import Study, StudyError, Variant, check_variant, load_study, params_text

RESULTS_DIR = Path("records/experiments")
DEFAULT_ROOT = Path("/tmp/s3-study")
RESULT_KEYS = ("params", "distill", "eval", "train")


def runs_dagger(variant: Variant, params: Params) -> bool:
    """Whether the variant's params run DAgger rounds for its policy (`dagger.policies` names it)."""
    return variant.policy in params.dagger.policies


# ---------------------------------------------------------------------------- results
def result_of(workspace: Path, variant: Variant, dagger: bool = False) -> dict[str, Any]:
    """The variant's result from its workspace's metrics: exactly RESULT_KEYS, and DAGGER with `dagger`."""
    ws = Path(workspace)
    files = {
        "distill": ws / "records/distill" / f"{variant.family}.json",
        "eval": ws / "records/eval" / f"{variant.policy}.json",
        "train": ws / "records/train" / f"{variant.policy}.json",
    }
    if dagger:
        files[DAGGER] = ws / "records" / DAGGER / f"{variant.policy}.json"
    out: dict[str, Any] = {"params": dict(variant.overrides)}
    for key, f in files.items():
        try:
            out[key] = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise StudyError(f"{variant.name}: {f}: {type(e).__name__}: {e}") from None
    return out


def write_result(workspace: Path, variant: Variant, dest: Path, dagger: bool = False) -> Path:
    return write_json_atomic(dest, result_of(workspace, variant, dagger))


# ---------------------------------------------------------------------------- running
def targets(variant: Variant, dagger: bool = False) -> list[str]:
    """The stages `dvc repro` runs in the variant's workspace (with what they need)."""
    return [f"evaluate@{variant.policy}", *([f"{DAGGER}@{variant.policy}"] if dagger else [])]


@dataclass
class Step:
    variant: Variant
    workspace: Path
    result: Path
    skip: bool
    commands: list[str] = field(default_factory=list)


def plan(study: Study, checked: dict[str, Params], root: Path, results: Path, force: bool = False) -> list[Step]:
    """One step per checked variant (name -> its params, in run order)."""
    steps = []
    for name, params in checked.items():
        v = study.variants[name]
        ws, res = Path(root) / study.name / v.name, Path(results) / study.name / f"{v.name}.json"
        sets = " ".join(f"--set {k}={json.dumps(val, separators=(',', ':'))}" for k, val in v.overrides.items())
        commands = [
            f"python -m s3.platform.workspace {study.base.name} {ws}   # its params.yaml: {study.base.name} {sets}",
            f"cd {ws} && dvc repro {' '.join(targets(v, runs_dagger(v, params)))}",
            f"write {res}",
        ]
        steps.append(Step(v, ws, res, skip=res.exists() and not force, commands=commands))
    return steps


def _donors(root: Path, project: Path) -> list[Path]:
    found = [project, *sorted(Path(root).glob("*/*"))]
    return [d for d in found if (d / "data/rollouts/manifest.json").is_file()]


def seed_rollouts(workspace: Path, params: Params, donors: Iterable[Path]) -> Path | None:
    """Copy another workspace's rollouts (and run record) in when their collect key is this variant's
    and nothing was lost; collect then reuses them shard by shard. Only into a workspace without rollouts."""
    dest = Path(workspace) / "data/rollouts"
    if dest.exists():
        return None
    from s3.data.provenance import data_key

    key = data_key(params)
    for donor in donors:
        if Path(donor).resolve() == Path(workspace).resolve():
            continue
        try:
            m = json.loads((donor / "data/rollouts/manifest.json").read_text())
        except (OSError, ValueError):
            continue
        if m.get("collect_key") != key or m.get("episodes_lost"):
            continue
        tmp = dest.with_name(".rollouts.seeding")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(donor / "data/rollouts", tmp)
        tmp.rename(dest)
        record = donor / "records/collect.json"
        if record.is_file():
            (Path(workspace) / "records").mkdir(exist_ok=True)
            shutil.copy2(record, Path(workspace) / "records/collect.json")
        return Path(donor)
    return None


def run_variant(
    step: Step,
    study: Study,
    params: Params,
    project: Path,
    root: Path,
    say: Callable[[str], None] = print,
    share_cache: bool = True,
) -> Path:
    """Prepare the workspace, seed its rollouts, `dvc repro` its targets, write the result."""
    from s3.platform.workspace import prepare_workspace

    v, ws = step.variant, step.workspace
    with workspace_lock(ws, f"s3 study run {study.name} --variant {v.name}"):
        prepare_workspace(project, ws, share_cache=share_cache)
        (ws / "params.yaml").write_text(params_text(study, v))
        donor = seed_rollouts(ws, params, _donors(root, project))
        if donor is not None:
            say(f"{study.name}/{v.name}: rollouts with the same collect key copied from {donor}")
        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        dagger = runs_dagger(v, params)
        stages = targets(v, dagger)
        say(f"{study.name}/{v.name}: cd {ws} && dvc repro {' '.join(stages)}")
        rc = subprocess.run([str(bin_dir / "dvc"), "repro", *stages], cwd=ws, env=env).returncode
        if rc != 0:
            raise StudyError(
                f"{study.name}/{v.name}: `dvc repro {' '.join(stages)}` failed (exit {rc}) in {ws}; run the set "
                "again to resume"
            )
        return write_result(ws, v, step.result, dagger)


def run_study(
    name: str | Path,
    variants: Iterable[str] | None = None,
    *,
    root: Path = DEFAULT_ROOT,
    results: Path = RESULTS_DIR,
    project: Path = Path("."),
    force: bool = False,
    dry_run: bool = False,
    say: Callable[[str], None] = print,
    share_cache: bool = True,
    base: str | Path | None = None,
) -> list[Step]:
    """Check the set, then run its variants in order (or, with dry_run, only list what would run). `base`: the
    params file every variant starts from, K included (s3.platform.study_set.load_study)."""
    project = Path(project).resolve()
    results = Path(results) if Path(results).is_absolute() else project / results
    study = load_study(name, project, base)
    checked = {v.name: check_variant(study, v) for v in study.pick(variants)}
    steps = plan(study, checked, Path(root), results, force)
    for s in steps:
        state = "skip: result exists (--force runs it)" if s.skip else "run"
        say(f"{study.name}/{s.variant.name} [{state}]: {s.variant.family} -> policy {s.variant.policy}")
        if dry_run:
            for c in s.commands:
                say(f"    {c}")
    if dry_run:
        return steps
    for s in steps:
        if s.skip:
            continue
        t0 = time.perf_counter()
        out = run_variant(s, study, checked[s.variant.name], project, Path(root), say, share_cache)
        say(f"{study.name}/{s.variant.name}: done in {time.perf_counter() - t0:.0f} s -> {out}")
    return steps
