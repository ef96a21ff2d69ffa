"""The ice levers' sections of reports/report.md, in render.py's formats: the `ice` experiment set (rows:
s3.report.levers) and the DAgger rounds (rows: s3.report.dagger)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from s3.report.cost import DASH
from s3.report.cost import interval_text as _interval

LEVER_COLUMNS = (
    "variant",
    "overrides",
    "icy hold-out lap share (seeds' mean [min, max], n)",
    "dry hold-out lap share",
    "hold-out lap time (s)",
    "suite ice laps % (n seeds/runs)",
    "suite nominal laps %",
    "suite ice lap time (s) vs cautious PID",
    "suite nominal lap time (s)",
    "distill (min)",
    "train per seed (min)",
)


def _holdout(h: Mapping[str, Any]) -> str:
    if not h.get("n"):
        return DASH
    return f"{h['mean']:.2f} [{h['min']:.2f}, {h['max']:.2f}] (n={h['n']})"


def _suite_pct(c: Mapping[str, Any], with_n: bool = True) -> str:
    if c.get("estimate") is None:
        return DASH
    n = f" (n={c['n_seeds']}/{c['n_units']})" if with_n else ""
    return _interval(c["estimate"], c.get("ci95"), digits=0, scale=100.0) + n


def _seconds(cell: Mapping[str, Any]) -> str:
    return DASH if cell.get("estimate") is None else f"{cell['estimate']:.1f}"


def _minutes(s: Any) -> str:
    return DASH if s is None else f"{s / 60:.1f}"


def lever_rows_md(levers: list[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for r in levers:
        lap = r["suite_ice_lap_time_s"].get("estimate")
        cautious = r.get("cautious_ice_lap_time_s")
        lap_s = DASH if lap is None else f"{lap:.1f}" + ("" if cautious is None else f" vs {cautious:.1f}")
        members = f" ({r['members']} members)" if r.get("members", 1) > 1 else ""
        policy = r.get("policy")
        family = r.get("family")
        in_model = f" ({policy} in {family})" if policy and family and policy != family else ""
        laps = r.get("holdout_lap_time_s") or {}
        rows.append(
            [
                r["variant"] + in_model,
                ", ".join(f"`{k}={v}`" for k, v in r["overrides"].items()) or DASH,
                _holdout(r["holdout_ice"]),
                _holdout(r["holdout_dry"]),
                DASH if not laps.get("n") else f"{laps['mean']:.0f} [{laps['min']:.0f}, {laps['max']:.0f}]",
                _suite_pct(r["suite_ice_completion"]),
                _suite_pct(r["suite_nominal_completion"], with_n=False),
                lap_s,
                _seconds(r.get("suite_nominal_lap_time_s") or {}),
                _minutes(r.get("distill_wall_s")) + members,
                _minutes(r.get("train_wall_per_seed_s")),
            ]
        )
    return rows


TARGET_COLUMNS = ("target (issue #38)", "variant", "measured", "needed", "met", "short by")


def _number(x: Any) -> str:
    return DASH if x is None else f"{x:.2f}"


def target_rows_md(targets: list[Mapping[str, Any]]) -> list[list[str]]:
    met = {True: "yes", False: "**no**", None: DASH}
    return [
        [t["target"], t["variant"] or DASH, _number(t["measured"]), _number(t["needed"]), met[t["met"]]]
        + [_number(t["short_by"]) if t["met"] is False else DASH]
        for t in targets
    ]


def lever_section(
    levers: list[Mapping[str, Any]],
    md_table: Callable[[Any, list[list[str]]], str],
    targets: list[Mapping[str, Any]] | None = None,
) -> list[str]:
    """The ice levers' section (s3.report.levers), or nothing when the `ice` set has not run."""
    if not levers:
        return []
    out = [
        "## Ice levers (experiment set `ice`)",
        "Chosen on the icy procedural hold-out in the source (every training seed, its range and n; hold-out lap "
        "time: the seeds' mean lap time over their completed hold-out laps, mean [min, max]); the evaluation suite "
        "reports only. Costs on the machine that ran the set.",
        md_table(LEVER_COLUMNS, lever_rows_md(levers)),
    ]
    if targets:
        out += [
            "The targets: the blind variant is the one with the highest lowest-seed icy hold-out score (then the "
            "highest mean), the seeing one likewise among those that observe the surface; the nominal rows compare "
            "the blind variant with `plain`.",
            md_table(TARGET_COLUMNS, target_rows_md(targets)),
        ]
    return out


DAGGER_COLUMNS = (
    "policy",
    "round",
    "kept policy: hold-out dry / ice (runs)",
    "seeds: in-model hold-out",
    "seeds: source dry",
    "seeds: source ice",
    "model ADE 2 s (m): rows its policy drove / test",
    "round (min)",
)


def _num(x: Any, digits: int = 2) -> str:
    return _interval(x, None, digits=digits)  # a number without a band (— when not measured)


def dagger_rows_md(rows: list[Mapping[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        k, s = r["kept"], r["seeds"]
        runs = f" ({k['runs_dry']} / {k['runs_ice']})" if k.get("runs_dry") is not None else ""
        out.append(
            [
                r["policy"],
                str(r["round"]),
                f"{_num(k.get('score_dry'))} / {_num(k.get('score_ice'))}{runs}",
                _holdout(s["in_model"]),
                _holdout(s["source_dry"]),
                _holdout(s["source_ice"]),
                f"{_num(r.get('ade_2s_own_rows'), 3)} / {_num(r.get('ade_2s_test'), 3)}",
                _minutes(r.get("wall_s")),
            ]
        )
    return out


def dagger_section(rows: list[Mapping[str, Any]], md_table: Callable[[Any, list[list[str]]], str]) -> list[str]:
    """The DAgger rounds' section (s3.report.dagger), or nothing when no dagger stage ran."""
    if not rows:
        return []
    return [
        "## DAgger rounds (stage `dagger@<policy>`)",
        "Round 0 is the policy train@<policy> kept; round r re-distilled on the data plus the rows the policies of "
        "rounds 0..r-1 drove in the source, then re-trained. Hold-out: procedural tracks in the source (never an "
        "evaluation circuit); seeds' mean [min, max] (n). The model's error on the rows its policy drove is measured "
        "by the next round (none after the last).",
        md_table(DAGGER_COLUMNS, dagger_rows_md(rows)),
    ]
