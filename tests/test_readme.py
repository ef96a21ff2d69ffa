"""The front door stays short, and the documentation's links lead somewhere.

- README.md is for users: at most 220 lines; reference material lives under docs/.
- Every relative link in README.md and docs/**/*.md points to a file or folder in the
  repository. Links to generated outputs (reports/report.md, plots/..., metrics/...) are allowed
  only where dvc.yaml declares that path (or a folder above it) as a stage's `outs`, `metrics`
  or `plots`, so the allowance names exactly what the pipeline writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 220

INLINE_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...
TEMPLATE = re.compile(r"\$\{\s*(key|item)(?:\.(\w+))?\s*\}")


def doc_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def links(text: str) -> Iterator[str]:
    """Link targets in markdown text, outside code blocks and code spans."""
    text = INLINE_CODE.sub("", FENCE.sub("", text))
    for pattern in (INLINE_LINK, REFERENCE_LINK):
        for m in pattern.finditer(text):
            yield m.group(1)


def _expand(value: str, key: Any, item: Any) -> str:
    def sub(m: re.Match[str]) -> str:
        base = key if m.group(1) == "key" else item
        return str(base[m.group(2)] if m.group(2) else base)

    return TEMPLATE.sub(sub, value)


def _stage_instances(stage: dict[str, Any]) -> Iterator[tuple[dict[str, Any], Any, Any]]:
    """(stage body, key, item) for a plain stage or each member of a `foreach`."""
    if "foreach" not in stage:
        yield stage, None, None
        return
    body, members = stage["do"], stage["foreach"]
    pairs = members.items() if isinstance(members, dict) else enumerate(members)
    for key, item in pairs:
        yield body, (key if isinstance(members, dict) else item), item


def dvc_generated_paths() -> set[str]:
    """Every path dvc.yaml declares as an out, metric or plot, with `foreach` expanded."""
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    paths: set[str] = set()
    for stage in spec["stages"].values():
        for body, key, item in _stage_instances(stage):
            for field in ("outs", "metrics", "plots"):
                for entry in body.get(field, []) or []:
                    name = next(iter(entry)) if isinstance(entry, dict) else entry
                    paths.add(_expand(str(name), key, item).rstrip("/"))
    return paths


def is_generated(rel: str, generated: set[str]) -> bool:
    """`rel` is a declared output, or lies inside a declared output folder."""
    return any(rel == p or rel.startswith(p + "/") for p in generated)


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (limit {MAX_README_LINES}): move reference material to docs/"


def test_dvc_declares_the_generated_paths_the_readme_names() -> None:
    generated = dvc_generated_paths()
    for path in ("reports/report.md", "metrics/report.json", "plots/report"):
        assert path in generated
    assert is_generated("plots/report/accuracy_vs_quality.png", generated)
    assert not is_generated("reports/history.md", generated)  # the run log is committed, not generated


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_into_the_repository(doc: Path) -> None:
    generated = dvc_generated_paths()
    broken = []
    for target in links(doc.read_text(encoding="utf-8")):
        if EXTERNAL.match(target) or target.startswith("#"):
            continue
        path = unquote(target.split("#", 1)[0].split("?", 1)[0])
        if not path:
            continue
        if path.startswith("/"):
            broken.append(f"{target} (absolute path)")
            continue
        resolved = (doc.parent / path).resolve()
        try:
            rel = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            broken.append(f"{target} (outside the repository)")
            continue
        if resolved.exists() or is_generated(rel, generated):
            continue
        broken.append(f"{target} (no such file, and not an output dvc.yaml declares)")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links: " + "; ".join(broken)
