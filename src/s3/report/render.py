"""The report dict as text: the tables' rows, the correlation and cost lines, rich tables, markdown.

    main_rows(report), efficiency_rows(report)       the two tables as strings (DASH = not measured)
    correlation_lines(report), cost_lines(report)    one line per error metric; the costs behind the efficiency table
    report_table(report), efficiency_table(report)   the same tables for the console (rich)
    markdown(report, figures, reports_dir)           reports/report.md
    readme_table(report), replace_readme_block(...)  the README's generated results block (`s3 report --readme`)

Rendering reads only the report dict (records/report.json), never the files it was built from;
markdown() leaves out when and where the report was generated, so the same metrics give the
same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rich.table import Table

from s3.catalog import DIRECT
from s3.report.cost import DASH, duration
from s3.report.cost import interval_text as _interval
from s3.report.render_claims import CLAIM_COLUMNS, claim_rows, claims_section, verdict_table
from s3.report.render_levers import dagger_section, lever_section
from s3.report.render_training import training_section
from s3.report.rows import CONDITIONS, CORRELATED, ERROR_METRICS


def _f(x: Any, digits: int = 2) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def _pair(a: Any, b: Any, digits: int = 1) -> str:
    return DASH if a is None and b is None else f"{_f(a, digits)} / {_f(b, digits)}"


def _pct(x: Any) -> str:
    return DASH if x is None else f"{100 * x:.0f}%"


def _lap(p: Mapping[str, Any]) -> str:
    if p["lap_time_s"] is None:
        return DASH
    return _interval(p["lap_time_s"], p.get("lap_time_ci95")) + f" (n={p.get('lap_time_n')})"


def _share(p: Mapping[str, Any], key: str) -> str:
    """A share in % with its interval and n (seeds / runs)."""
    if p[key] is None:
        return DASH
    return _interval(
        p[key], p.get(key.replace("_rate", "") + "_ci95") if key == "lap_share" else p.get("completion_ci95"), 0, 100.0
    ) + (f" (n={p.get('seeds')}/{p.get('runs')})" if key == "completion_rate" else "")


def _gap(g: Mapping[str, Any]) -> str:
    c, t = g["completion_rate"], g["lap_time_s"]  # source minus distilled
    if c is None and t is None:
        return DASH
    return f"{DASH if c is None else f'{100 * c:+.0f}%'} / {DASH if t is None else f'{t:+.1f} s'}"


MAIN_COLUMNS = (
    "policy",
    "ADE 1s all (m)",
    "ADE 2s all (m)",
    "ADE 1s ice (m)",
    "ADE 2s ice (m)",
    "manoeuvres 3s asphalt / ice (m)",
    "slides agreed",
    "completed nominal % (n seeds/runs)",
    "completed ice %",
    "lap share nominal %",
    "lap share ice %",
    "lap time nominal (s)",
    "lap time ice (s)",
    "steer rate (1/s)",
    "lateral jerk (m/s³)",
    "ice patches crossed",
    "transfer gap nominal",
    "transfer gap ice",
    "quality rank",
)


TRUNCATED_MARK = " †"


def truncated_note(report: Mapping[str, Any]) -> str | None:
    """The note under the main table naming the policies whose training a wall-clock cap cut short."""
    cut = {n: r["truncated_seeds"] for n, r in report["rows"].items() if r.get("truncated_seeds")}
    if not cut:
        return None
    names = ", ".join(f"{n} ({k} seed{'s' if k > 1 else ''})" for n, k in cut.items())
    return (
        f"†Truncated: the wall-clock safety cap (`train.max_minutes`) stopped training before its step budget for "
        f"{names}; those policies depend on how fast the machine was and are not comparable to the others."
    )


def main_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """The accuracy-vs-quality table as strings (one row per policy; "—" = not measured)."""
    out = []
    for name, r in report["rows"].items():
        pred, pol, gap = r["prediction"], r["policy"], r["transfer_gap"]
        label = (
            name
            if not r["prediction_from"] or r["prediction_from"] == name
            else f"{name} ({r['prediction_from']} model)"
        ) + (TRUNCATED_MARK if r.get("truncated_seeds") else "")
        out.append(
            [
                label,
                *(_f(pred[m]) for m in ERROR_METRICS),
                _pair(pred["probe_3s_asphalt"], pred["probe_3s_ice"]),
                _pct(pred["probe_slides_agreed"]),
                _share(pol["nominal"], "completion_rate"),
                _share(pol["ice"], "completion_rate"),
                _share(pol["nominal"], "lap_share"),
                _share(pol["ice"], "lap_share"),
                _lap(pol["nominal"]),
                _lap(pol["ice"]),
                _f(pol["nominal"]["mean_abs_steering_rate"], 3),
                _f(pol["nominal"].get("mean_abs_lateral_jerk"), 2),
                _pct(pol["ice"]["patch_crossing_rate"]),
                _gap(gap["nominal"]),
                _gap(gap["ice"]),
                _f(r["quality"]["rank"], 1),
            ]
        )
    return out


EFF_COLUMNS = (
    "policy",
    "RL to quality (distilled)",
    "RL to quality (direct)",
    "speed-up",
    "one-time cost",
    "break-even policies",
    "speed-up @ real time",
    "one-time @ real time",
    "break-even @ real time",
)


def efficiency_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """The efficiency table as strings (one row per distilled policy)."""
    eff = report["efficiency"]
    out = []
    for name, m in eff["families"].items():
        rt = eff["real_time"][name]
        rl = "not reached" if m["reached"] is False else duration(m["rl_to_quality_s"]) if m["reached"] else DASH
        out.append(
            [
                name,
                rl,
                eff[DIRECT]["text"],
                m["speedup_text"],
                duration(m["one_time_cost_s"]),
                m["break_even_text"],
                rt["speedup_text"],
                duration(rt["one_time_cost_s"]),
                rt["break_even_text"],
            ]
        )
    return out


def correlation_lines(report: Mapping[str, Any]) -> list[str]:
    """One line per error metric: rho, p and n, or why there is none."""
    lines = []
    for m in CORRELATED:
        c = report["correlation"].get(m)
        if c is None:  # a report written before the probes existed
            continue
        if c["rho"] is None:
            lines.append(f"{m}: rho = {DASH} ({c['reason']})")
        else:
            lines.append(
                f"{m}: rho = {c['rho']:+.2f} (p = {c['p_value']:.2f}, n = {c['n']}: {', '.join(c['families'])})"
            )
    return lines


def cost_lines(report: Mapping[str, Any]) -> list[str]:
    """The one-time costs and the measured source-simulator speeds behind the efficiency table."""
    eff = report["efficiency"]
    c, d = eff["collect"], eff[DIRECT]
    rows = DASH if c["rows"] is None else f"{c['rows']:,.0f}"
    steps = DASH if d.get("env_steps") is None else f"{d['env_steps']:,.0f}"
    direct = (
        f"direct PPO in the source simulator: not run: {d['skipped']}"
        if d.get("skipped")
        else f"direct PPO in the source simulator: {d['text']}, {steps} env steps with {_f(d['workers'], 0)} "
        f"workers ({_f(d['real_time_factor_per_worker'], 1)}x real time per worker); at real time: "
        f"{duration(d['real_time_wall_s'])}"
    )
    return [
        f"control period: {_f(eff['control_dt'], 3)} s",
        f"collection: {duration(c['wall_s'])} for {rows} control steps with {_f(c['workers'], 0)} workers "
        f"({_f(c['real_time_factor_per_worker'], 1)}x real time per worker); at real time: "
        f"{duration(c['real_time_car_s'])} of one car, {duration(c['real_time_wall_s'])} with the same workers",
        *[f"distill {n}: {duration(m['distill_wall_s'])}" for n, m in eff["families"].items()],
        direct,
        _budget_line(eff.get("direct_budget_rule") or {}),
        *[
            f"{name}: the seed chosen in the source simulator ({r['selection']['rule']}); the choice drove "
            f"{_f(r['selection']['source_car_steps'], 0)} car steps there, "
            f"{duration(r['selection'].get('source_real_time_one_instance_s'))} on one real-time instance"
            for name, r in report["rows"].items()
            if r["kind"] == "selected"
        ],
    ]


def _budget_line(rule: Mapping[str, Any]) -> str:
    """How direct's training ended against its rule on this run, beside the families' routes."""
    verdict = {True: "met", False: "NOT met", None: "not checked (inputs missing)"}[rule.get("holds")]
    routes = f"the slowest family's collect + distill + every seed's RL: {duration(rule.get('max_family_route_s'))}"
    if rule.get("budget_s") is None:
        steps = rule.get("env_steps")
        return (
            f"direct's end (its own plateau, not a cap): ended by {rule.get('stopped_by') or DASH} after "
            f"{_f(None if steps is None else steps / 1e6, 2)} M env steps, {duration(rule.get('wall_s'))} "
            f"({routes}): {verdict}"
        )
    return f"direct's budget rule (>= {routes}): {duration(rule.get('budget_s'))}: {verdict}"


def _table(title: str, columns: Iterable[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


def claims_table(report: Mapping[str, Any]) -> Table:
    """The paper's claims with effect, interval, n and verdict."""
    return _table(
        "report: the paper's claims (two-sided 95 %; verdict rule fixed in advance)", CLAIM_COLUMNS, claim_rows(report)
    )


def report_table(report: Mapping[str, Any]) -> Table:
    """Prediction accuracy next to policy quality, one row per policy."""
    return _table(
        "report: prediction accuracy (held-out rollouts) vs policy quality (source simulator, evaluation suite, "
        "every seed)",
        MAIN_COLUMNS,
        main_rows(report),
    )


def efficiency_table(report: Mapping[str, Any]) -> Table:
    """Wall clock to a lap-completing policy, distilled vs direct; measured and at real time."""
    return _table(
        "report: RL time to quality (claim 1's curves: half the hold-out laps)", EFF_COLUMNS, efficiency_rows(report)
    )


def _md_table(columns: Iterable[str], rows: list[list[str]]) -> str:
    cols = list(columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(
    report: Mapping[str, Any], figures: Iterable[Path], reports_dir: Path, training_figure: Path | None = None
) -> str:
    """reports/report.md: the tables, the correlation, the costs, the figures, every seed's training, the
    definitions (`training_figure`: the seeds' curves, shown in their own section)."""

    def image(f: Path) -> str:
        return f"![{Path(f).stem}]({os.path.relpath(Path(f).resolve(), Path(reports_dir).resolve())})"

    figs = [image(f) for f in figures]
    parts = [
        "# s3 report: prediction accuracy vs policy quality",
        # when and on which host: records/report.json (the same metrics, the same bytes)
        f"Generated from `{report['metrics_dir']}`. Bit-identical results hold on one machine only (the same clone "
        "on another machine of the same kind trained other policies): the conclusions rest on the intervals, which "
        "state their n.",
        "## Accuracy vs policy quality",
        _md_table(MAIN_COLUMNS, main_rows(report)),
        "Transfer gap: completion / lap time, source minus distilled environment.",
        *([note] if (note := truncated_note(report)) else []),
        *claims_section(report, _md_table),
        "## Does better prediction give a better policy?",
        "Spearman rho of (prediction error, policy quality), -1 = better prediction goes with a better policy:",
        "\n".join(f"- {line}" for line in correlation_lines(report)),
        *figs,
        "## Efficiency",
        _md_table(EFF_COLUMNS, efficiency_rows(report)),
        "\n".join(f"- {line}" for line in cost_lines(report)),
        *training_section(report.get("training") or [], _md_table, training_figure and image(training_figure)),
        *lever_section(report.get("levers") or [], _md_table, report.get("lever_targets")),
        *dagger_section(report.get("dagger") or [], _md_table),
        "## Definitions",
        "\n".join(f"- **{k}**: {v}" for k, v in report["definitions"].items()),
    ]
    if report["missing"]:
        parts += ["## Not measured (inputs missing)", "\n".join(f"- `{m}`" for m in report["missing"])]
    return "\n\n".join(parts) + "\n"


README_BEGIN, README_END = "<!-- results:begin -->", "<!-- results:end -->"
README_COLUMNS = (
    "policy",
    "laps nominal % (n seeds/runs)",
    "laps ice % (n seeds/runs)",
    "lap share nominal %",
    "lap share ice %",
    "lap time nominal s (n laps)",
    "lap time ice s (n laps)",
    "seeds for ±0.1 lap share nominal / ice",
)


def readme_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """Per policy over the evaluation suite: completion and lap share (mean over seeds [95 % interval]), lap time (n
    laps)."""
    out = []
    for name, r in report["rows"].items():
        pol = r.get("policy") or {}
        cells = []
        for key in ("completion_rate", "lap_share"):
            cells += [_share({key: None, **(pol.get(c) or {})}, key) for c in CONDITIONS]
        cells += [_lap({"lap_time_s": None, **(pol.get(c) or {})}) for c in CONDITIONS]
        need = [(pol.get(c) or {}).get("seeds_for_lap_share_0_1") for c in CONDITIONS]
        cells.append(DASH if need == [None, None] else " / ".join(DASH if n is None else str(n) for n in need))
        out.append([name, *cells])
    return out


def readme_table(report: Mapping[str, Any]) -> str:
    """The README's results block, from records/report.json alone (the same report, the same text): the policies'
    quality over the evaluation suite, then the paper's claims with effect, interval, n and verdict."""
    return "\n\n".join(
        [
            "Per policy, every training seed on the evaluation suite (every circuit, four starts each): laps "
            "completed and lap share as the mean over seeds [95 % two-level bootstrap interval], n = seeds / runs; "
            "lap time over the completed laps, n = laps.",
            _md_table(README_COLUMNS, readme_rows(report)),
            "The paper's claims, each claim's verdict and its primary rows (two-sided 95 %, rules fixed in advance; at "
            "K = 3 seeds per policy a verdict is provisional: [docs/statistics.md](docs/statistics.md); the secondary "
            "and sensitivity rows are in [reports/report.md](reports/report.md)):",
            "\n\n".join(
                [
                    *verdict_table(report, _md_table),
                    _md_table(CLAIM_COLUMNS, claim_rows(report, ("primary",))),
                ]
            )
            if report.get("claims")
            else "(no claim rows in this report)",
        ]
    )


def replace_readme_block(text: str, block: str) -> str:
    """`text` with everything between README_BEGIN and README_END replaced by `block` (the markers stay; the rest is
    untouched). ValueError when the markers are missing, repeated or out of order."""
    if (
        text.count(README_BEGIN) != 1
        or text.count(README_END) != 1
        or text.index(README_BEGIN) > text.index(README_END)
    ):
        raise ValueError(f"needs exactly one {README_BEGIN} ... {README_END} block")
    head, rest = text.split(README_BEGIN)
    _, tail = rest.split(README_END)
    return f"{head}{README_BEGIN}\n{block.strip()}\n{README_END}{tail}"


def readme_block(text: str) -> str | None:
    """What stands between the markers (stripped), or None without a well-formed block."""
    try:
        replace_readme_block(text, "")
    except ValueError:
        return None
    return text.split(README_BEGIN)[1].split(README_END)[0].strip()
