"""The claim rows as text: one table row per claim row (s3.report.claims), and the report's claims section.

claim_rows(report, roles=None) -> [[cell, ...]]       CLAIM_COLUMNS, every row or those of `roles`
verdict_rows(report) -> [[cell, ...]]                 VERDICT_COLUMNS: each claim's verdict (report["claim_verdicts"])
claims_section(report, md_table) -> [markdown block]  the rules (report["claim_rules"]), the verdicts, every row
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from s3.report.cost import DASH


def _f(x: Any, digits: int = 3) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


CLAIM_COLUMNS = (
    "claim",
    "role",
    "statement",
    "test",
    "effect",
    "95 % interval",
    "n",
    "detectable at 80 % power (seeds needed)",
    "verdict",
)


def _power(p: Mapping[str, Any] | None) -> str:
    """The smallest effect this K detects with 80 % power, and the seeds per side the observed effect needs."""
    if not p:
        return DASH
    if p.get("text"):  # a power that is not a difference (claim 1's hazard ratio)
        return str(p["text"])
    need = "" if p.get("seeds_needed") is None else f" ({p['seeds_needed']})"
    alpha = p.get("alpha")
    level = "" if alpha is None or math.isclose(alpha, 0.05) else f", alpha {alpha:.3g}"  # a corrected level
    return f"±{_f(p['detectable_effect'])} at K = {p['k']}{level}{need}"


def claim_rows(report: Mapping[str, Any], roles: Iterable[str] | None = None) -> list[list[str]]:
    """The paper's claims: role, test, effect, interval, n and verdict (s3.report.claims); `roles`: only those rows."""
    out = []
    for c in report.get("claims", []):
        role = c.get("role", "primary")
        if roles is not None and role not in roles:
            continue
        ci = c["ci95"]
        band = DASH if not ci else f"[{_f(ci[0])}, {_f(ci[1])}]"
        effect = c.get("effect_text") or _f(c["effect"])
        k = "" if c.get("k") is None else f" (K = {c['k']})"
        row = [c["claim"], role, c["statement"], c.get("test") or DASH, effect, band, f"{c['n']}{k}"]
        out.append([*row, _power(c.get("power")), c["verdict"]])
    return out


INTRO = (
    "Two-sided 95 %, every rule fixed before the study's run ([docs/statistics.md](../docs/statistics.md)). A "
    "claim's verdict is its primary row's: *holds* when the interval of the effect excludes zero in the claimed "
    "direction, *does not hold* when it excludes zero the other way, *cannot tell* otherwise (at this n), unless "
    "the claim's rule below says otherwise (claim 2 has several primaries: its rule combines them). Secondary rows "
    "are Holm-corrected within their claim (Welch's p on the "
    "seed means); sensitivity rows repeat the primaries without the road course."
)


VERDICT_COLUMNS = ("claim", "verdict", "from its primary rows (with data / all)")


def verdict_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """Each claim's verdict (s3.report.claims.claim_verdicts) and how many primary rows it comes from."""
    return [
        [claim, v["verdict"], f"{v['with_data']} / {v['primaries']}"]
        for claim, v in (report.get("claim_verdicts") or {}).items()
    ]


def verdict_table(report: Mapping[str, Any], md_table: Callable[[Iterable[str], list[list[str]]], str]) -> list[str]:
    """The claims' verdicts as one markdown table, or nothing when the report has none."""
    rows = verdict_rows(report)
    return [md_table(VERDICT_COLUMNS, rows)] if rows else []


def claims_section(report: Mapping[str, Any], md_table: Callable[[Iterable[str], list[list[str]]], str]) -> list[str]:
    """reports/report.md's claims: the intro, each claim's rule, each claim's verdict, the rows."""
    rules = report.get("claim_rules") or {}
    return [
        "## The paper's claims",
        INTRO,
        *(["\n".join(f"- **{k}**: {v}." for k, v in rules.items())] if rules else []),
        *verdict_table(report, md_table),
        md_table(CLAIM_COLUMNS, claim_rows(report)),
    ]
