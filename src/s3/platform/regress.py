"""The regression check: compare metrics JSON files with a recorded baseline.

    s3 regress --record          snapshot the tracked metrics into the baseline file (commit it)
    s3 regress                   compare the current metrics with it; exit 1 on a regression
    s3 regress --ref main        compare with the metrics files committed at a git ref instead

Which metrics count and how much they may move is the `regress:` section of params.yaml:
predictive errors (lower is better; the test-window errors of records/distill and the manoeuvre
probes' errors in records/eval) may grow by `error_growth_pct` % (plus `error_abs_floor`
so that a zero baseline is not a hair trigger); completion rates and lap shares (higher is better)
may drop by `completion_drop` (absolute); lap times may grow by `lap_time_growth_pct` %. A metric that
became null (diverged) or disappeared is a regression; new metrics are reported, not judged. A policy
file whose baseline holds none of the quality keys (a baseline in an older metrics layout) is named
in the summary and its verdict line: its completions, lap shares and lap times are not judged.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from s3.platform.params import RegressParams
from s3.tracking import flatten

Kind = Literal["error", "completion", "lap_time"]


@dataclass
class Check:
    file: str
    key: str
    kind: Kind
    baseline: float | None
    current: float | None
    limit: float | None
    ok: bool

    def line(self) -> str:
        def f(x: float | None) -> str:
            return "missing/null" if x is None else f"{x:.4g}"

        change = ""
        if self.baseline is not None and self.current is not None and self.baseline != 0:
            change = f" ({100 * (self.current - self.baseline) / abs(self.baseline):+.1f} %)"
        bound = (
            "" if self.limit is None else (f", limit {'>=' if self.kind == 'completion' else '<='} {self.limit:.4g}")
        )
        return (
            f"{'ok  ' if self.ok else 'FAIL'} {self.kind:<10} {self.file} {self.key}: {f(self.baseline)} -> "
            f"{f(self.current)}{change}{bound}"
        )


def _kind(file: str, key: str, p: RegressParams) -> Kind | None:
    def any_match(name: str, pats: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(name, pat) for pat in pats)

    if any_match(file, p.error_files) and any_match(key, p.error_keys):
        return "error"
    if any_match(file, p.policy_files):
        if any_match(key, p.probe_keys):
            return "error"
        if any_match(key, p.completion_keys):
            return "completion"
        if any_match(key, p.lap_time_keys):
            return "lap_time"
    return None


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def tracked_metrics(files: dict[str, dict[str, Any]], p: RegressParams) -> dict[str, dict[str, float | None]]:
    """{file: {key: value}} of the metrics the tolerances speak about."""
    out: dict[str, dict[str, float | None]] = {}
    for file, data in sorted(files.items()):
        if any(fnmatch.fnmatchcase(file, pat) for pat in p.exclude_files):
            continue
        keys = {k: _num(v) for k, v in (flatten(data) if isinstance(data, dict) else {}).items() if _kind(file, k, p)}
        if keys:
            out[file] = keys
    return out


def read_workspace(root: Path, p: RegressParams) -> dict[str, dict[str, Any]]:
    """The metrics files the rules name, as they are in the workspace."""
    files: dict[str, dict[str, Any]] = {}
    for pat in p.error_files + p.policy_files:
        for path in sorted(glob.glob(str(root / pat))):
            files[Path(path).relative_to(root).as_posix()] = json.loads(Path(path).read_text())
    return files


def read_git_ref(root: Path, ref: str, p: RegressParams) -> dict[str, dict[str, Any]]:
    """The metrics files the rules name, as committed at `ref`."""
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    files = {}
    for name in names:
        if any(fnmatch.fnmatchcase(name, pat) for pat in p.error_files + p.policy_files):
            text = subprocess.run(
                ["git", "show", f"{ref}:{name}"], cwd=root, capture_output=True, text=True, check=True
            ).stdout
            files[name] = json.loads(text)
    return files


def record(root: Path, p: RegressParams, out: Path | None = None) -> Path:
    """Write the baseline file from the workspace's current metrics."""
    from s3.io import write_json_atomic
    from s3.tracking import git_commit

    metrics = tracked_metrics(read_workspace(root, p), p)
    if not metrics:
        raise FileNotFoundError(f"no metrics files match {p.error_files + p.policy_files} under {root}")
    path = out or root / p.baseline
    write_json_atomic(
        path,
        {
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "git_commit": git_commit(root),
            "metrics": metrics,
        },
    )
    return path


def compare(
    baseline: dict[str, dict[str, float | None]], current_files: dict[str, dict[str, Any]], p: RegressParams
) -> tuple[list[Check], list[str]]:
    """One Check per baseline metric; plus the names of metrics that are new since the baseline."""
    current = tracked_metrics(current_files, p)
    checks = []
    for file, keys in sorted(baseline.items()):
        now = current.get(file, {})
        for key, base in sorted(keys.items()):
            kind = _kind(file, key, p) or "error"
            cur = now.get(key)
            if base is None:  # nothing to hold the current value to
                checks.append(Check(file, key, kind, None, cur, None, True))
                continue
            if kind == "error":
                limit = base * (1 + p.error_growth_pct / 100) + p.error_abs_floor
                ok = cur is not None and cur <= limit
            elif kind == "lap_time":
                limit = base * (1 + p.lap_time_growth_pct / 100)
                ok = cur is not None and cur <= limit
            else:
                limit = base - p.completion_drop
                ok = cur is not None and cur >= limit
            checks.append(Check(file, key, kind, base, cur, limit, ok))
    new = [f"{f} {k}" for f, ks in current.items() for k in ks if k not in baseline.get(f, {})]
    return checks, new


def unjudged_quality(
    baseline: dict[str, dict[str, float | None]], current_files: dict[str, dict[str, Any]], p: RegressParams
) -> list[str]:
    """The policy files (of the baseline or the workspace) whose baseline has none of the quality keys:
    their completions, lap shares and lap times are not judged (e.g. a baseline in an older layout)."""
    files = {f for f in (*baseline, *current_files) if any(fnmatch.fnmatchcase(f, pat) for pat in p.policy_files)}
    return sorted(
        f for f in files if not any(_kind(f, k, p) in ("completion", "lap_time") for k in baseline.get(f, {}))
    )


def summary(
    checks: list[Check],
    new: list[str],
    against: str,
    verbose: bool = False,
    unjudged: list[str] | None = None,
    quality_keys: list[str] | None = None,
) -> str:
    """A readable report: failures first, one line each, then one verdict line (which names unjudged policy files)."""
    bad = [c for c in checks if not c.ok]
    lines = [c.line() for c in bad]
    if verbose:
        lines += [c.line() for c in checks if c.ok]
    if new:
        lines.append(f"{len(new)} metric(s) not in the baseline (not judged), e.g. {new[0]}")
    caveat = ""
    if unjudged:
        keys = ", ".join(quality_keys or ["the quality keys"])
        lines.append(
            f"policy quality NOT judged in {len(unjudged)} file(s): the baseline has none of {keys} for "
            f"{', '.join(unjudged)} (an older metrics layout? record a baseline with `s3 regress --record`, or "
            "compare with a ref whose metrics have them)"
        )
        caveat = f"; policy quality not judged in {len(unjudged)} file(s)"
    files = len({c.file for c in checks})
    if bad:
        worst = {c.file for c in bad}
        lines.append(
            f"REGRESSION against {against}: {len(bad)} of {len(checks)} checks failed in {len(worst)} of {files} "
            f"file(s){caveat}"
        )
    else:
        lines.append(
            f"no regression against {against}: {len(checks)} checks in {files} file(s) within tolerance{caveat}"
        )
    return "\n".join(lines)


def run_check(
    root: Path, p: RegressParams, baseline: Path | None = None, ref: str | None = None, verbose: bool = False
) -> tuple[bool, str]:
    """(passed, summary) of the current workspace against a baseline file or a git ref."""
    root = Path(root)
    current = read_workspace(root, p)
    if ref is not None:
        base = tracked_metrics(read_git_ref(root, ref, p), p)
        against = f"git ref {ref}"
    else:
        path = baseline or root / p.baseline
        if not path.exists():
            raise FileNotFoundError(f"{path}: no baseline recorded (run `s3 regress --record` and commit it)")
        base = json.loads(path.read_text())["metrics"]
        against = str(path)
    if not base:
        raise FileNotFoundError(f"no tracked metrics in the baseline ({against})")
    checks, new = compare(base, current, p)
    unjudged = unjudged_quality(base, current, p)
    return all(c.ok for c in checks), summary(
        checks, new, against, verbose, unjudged, p.completion_keys + p.lap_time_keys
    )
