"""The front door stays short, and the documentation's links lead somewhere.

- README.md is for users: at most 220 lines; reference material lives under docs/.
- Every relative link in README.md and docs/**/*.md points to a file or folder in the
  repository. Links to generated outputs (reports/report.md, plots/..., metrics/...) are allowed
  only where dvc.yaml declares that path (or a folder above it) as a stage's `outs`, `metrics`
  or `plots`, so the allowance names exactly what the pipeline writes.
- The README's results block is generated (`s3 report --readme`, report_render.readme_table) and,
  once records/report.json has the study's claim rows, equals what that report renders.
"""

from __future__ import annotations

import json
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
    assert n <= MAX_README_LINES, (
        f"README.md has {n} lines (limit {MAX_README_LINES}): move reference material to docs/"
    )


def test_dvc_declares_the_generated_paths_the_readme_names() -> None:
    generated = dvc_generated_paths()
    for path in ("reports/report.md", "records/report.json", "plots/report"):
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


# --- the README's results block: generated from records/report.json (s3 report --readme) ---


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _eval(rate: float, lap: float, seeds: int = 3, starts: int = 4) -> dict[str, Any]:
    """An eval in the suite's layout: per seed, round(rate * starts) laps of `lap` s per condition, the rest half a
    lap."""
    from s3.evaluate.suite import summarise

    runs = [
        {
            "seed": seed,
            "track": "road_course",
            "condition": cond,
            "start_index": i,
            "completed": i < round(rate * starts),
            "completion_fraction": 1.0 if i < round(rate * starts) else 0.5,
            "lap_time_s": lap if i < round(rate * starts) else None,
            "mean_abs_steering_rate": 0.05 + 0.01 * seed,
            "mean_abs_steering_jerk": 0.5,
            "mean_abs_lateral_jerk": 1.0 + seed,
            "time_off_track_s": 0.0,
            "min_edge_margin_m": 1.0,
        }
        for seed in range(seeds)
        for cond in ("nominal", "ice")
        for i in range(starts)
    ]
    return {
        "simulator": {"control_dt": 0.1},
        "runs": runs,
        "summary": summarise(runs, ["road_course"], ["nominal", "ice"]),
    }


@pytest.fixture
def metrics(tmp_path: Path) -> Path:
    """A tiny metrics folder: four families, the oracle and pid (the style of tests/test_report.py)."""
    m = tmp_path / "metrics"
    for fam, (ade, rate) in {
        "bicycle": (1.0, 0.25),
        "ddm": (0.2, 1.0),
        "transformer": (0.5, 0.5),
        "dytr": (0.3, 0.75),
    }.items():
        _write_json(
            m / "distill" / f"{fam}.json",
            {"rollout": {"all": {"ade_1s": ade / 2, "ade_2s": ade}}, "total_wall_s": 10.0},
        )
        _write_json(m / "eval" / f"{fam}.json", _eval(rate, 100.0))
        _write_json(m / "train" / f"{fam}.json", {"family": fam, "train": {"wall_s": 20.0}})
    _write_json(m / "eval" / "oracle.json", _eval(1.0, 90.0))
    _write_json(m / "train" / "oracle.json", {"policy": "oracle", "family": "dytr", "train": {"wall_s": 25.0}})
    _write_json(m / "eval" / "pid.json", _eval(1.0, 120.0, seeds=1))
    return m


def test_readme_table_renders_the_report(metrics: Path) -> None:
    from s3.report.render import readme_table
    from s3.report.report import build_report

    rep = build_report(metrics)
    text = readme_table(rep)
    assert (
        "| ddm | 100 [100, 100] (n=3/12) | 100 [100, 100] (n=3/12) | 100 [100, 100] | 100 [100, 100] | 100.0 "
        "[100.0, 100.0] (n=12) |" in text
    )
    assert "| pid | 100 [100, 100] (n=1/4) |" in text and "| bicycle | 25 [" in text
    assert "| 2 smoother, safer | primary | ddm vs transformer, nominal: mean_abs_steering_rate lower |" in text
    assert "| 1 efficiency | primary |" in text and "not run" in text  # no time-to-quality curves in this folder
    primary = [c for c in rep["claims"] if c["role"] == "primary"]
    assert len(primary) < len(rep["claims"]) and "| secondary |" not in text  # the rest: reports/report.md
    verdicts = rep["claim_verdicts"]  # each claim's verdict, then its primary rows
    assert "| 2 smoother, safer | " in text and len(verdicts) == 4
    assert text.count("\n| ") == len(rep["rows"]) + 1 + len(verdicts) + 1 + len(primary) + 1  # header + rows, thrice
    other = {**rep, "generated_at": "2000-01-01T00:00:00+00:00", "machine": "elsewhere"}
    assert readme_table(other) == text  # from the metrics alone: the same report, the same text


def test_report_readme_option_replaces_only_the_block(metrics: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from s3.cli import app
    from s3.report.render import README_BEGIN, README_END, readme_block, readme_table

    readme = tmp_path / "README.md"
    head, tail = "# title\n\nbefore the block\n", "\nafter the block\n<!-- another comment -->\n"
    readme.write_text(f"{head}{README_BEGIN}\nstale numbers\n{README_END}{tail}")
    args = [
        "report",
        "--records-dir",
        str(metrics),
        "--reports-dir",
        str(tmp_path / "reports"),
        "--plots-dir",
        str(tmp_path / "plots"),
    ]
    result = CliRunner().invoke(app, [*args, "--params", str(ROOT / "params.yaml"), "--readme", str(readme)])
    assert result.exit_code == 0, result.output
    text = readme.read_text()
    assert text.startswith(head + README_BEGIN + "\n") and text.endswith(README_END + tail)
    report = json.loads((metrics / "report.json").read_text())
    assert readme_block(text) == readme_table(report).strip() and "stale numbers" not in text

    bare = tmp_path / "NO_BLOCK.md"
    bare.write_text("no markers here\n")
    result = CliRunner().invoke(app, [*args, "--params", str(ROOT / "params.yaml"), "--readme", str(bare)])
    assert result.exit_code == 2 and "results:begin" in result.output
    assert bare.read_text() == "no markers here\n"


def test_replace_readme_block_refuses_a_malformed_block() -> None:
    from s3.report.render import README_BEGIN, README_END, replace_readme_block

    for text in ("none", f"{README_END} {README_BEGIN}", f"{README_BEGIN} {README_BEGIN} {README_END}"):
        with pytest.raises(ValueError, match="block"):
            replace_readme_block(text, "x")
    assert replace_readme_block(f"a{README_BEGIN}old{README_END}b", "new\n") == f"a{README_BEGIN}\nnew\n{README_END}b"


def test_the_committed_readme_block_is_the_committed_report() -> None:
    from s3.report.render import readme_block, readme_table

    path = ROOT / "records" / "report.json"
    if not path.exists():
        pytest.skip("no records/report.json committed")
    report = json.loads(path.read_text())
    if "claims" not in report:
        pytest.skip(
            "records/report.json predates the study's layout (no claim rows): the README block is regenerated after "
            "the next full run"
        )
    assert readme_block(README.read_text(encoding="utf-8")) == readme_table(report).strip(), (
        "run `s3 report --readme README.md`"
    )
