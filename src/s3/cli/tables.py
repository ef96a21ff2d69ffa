"""What the evaluate-floor commands print (s3 evaluate, holdout, time-to-quality): rich tables and summary lines.

Each takes the result dict its stage returned (s3.evaluate.stage, s3.evaluate.holdout,
s3.evaluate.time_to_quality) and formats it; nothing here computes a figure.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from s3.catalog import PID


def _ci(m: dict[str, Any], digits: int = 2) -> str:
    """'estimate [lo, hi]' of an interval record, '-' without an estimate."""
    if m.get("estimate") is None:
        return "-"
    lo_hi = "" if m.get("ci95") is None else f" [{m['ci95'][0]:.{digits}f}, {m['ci95'][1]:.{digits}f}]"
    return f"{m['estimate']:.{digits}f}{lo_hi}"


def evaluation_table(results: dict[str, dict[str, Any]]) -> Table:
    """One row per driver, circuit and condition: seeds, laps, completion, lap share, lap time."""
    table = Table(
        title="evaluate: the evaluation suite in the source simulator (mean over seeds [95 % two-level bootstrap])"
    )
    for col in ("driver", "circuit", "condition", "seeds", "laps", "completion", "lap share", "lap time (s)"):
        table.add_column(col, justify="left" if col in ("driver", "circuit", "condition") else "right")
    for name, res in results.items():
        for circuit, conds in res.get("summary", {}).items():
            for cond, b in conds.items():
                table.add_row(
                    name,
                    circuit,
                    cond,
                    str(b["seeds"]),
                    f"{b['completed']}/{b['runs']}",
                    _ci(b["completion_rate"]),
                    _ci(b["lap_share"]),
                    _ci(b["lap_time_s"], 1),
                )
    return table


def holdout_table(result: dict[str, Any]) -> Table:
    """One row per driver on the held-out procedural tracks."""
    t = Table(
        title=f"held-out procedural tracks ({result['surface']}, seed {result['seed']}), source simulator, "
        f"{result['runs']} runs"
    )
    refs = next((list(r["lap_time_vs"]) for r in result["drivers"].values() if "lap_time_vs" in r), [PID])
    for col in ("driver", "laps", "lap share", "mean lap (s)", *(f"lap time / {b}'s" for b in refs), "ends"):
        t.add_column(col)
    for name, r in result["drivers"].items():
        vs = r.get("lap_time_vs", {})
        t.add_row(
            name,
            f"{r['laps']}/{r['runs']}",
            f"{100 * r['mean_completion']:.0f}%",
            "-" if r["mean_lap_s"] is None else f"{r['mean_lap_s']:.1f}",
            *(
                "-" if vs.get(b, {}).get("ratio") is None else f"{vs[b]['ratio']:.3f} (n={vs[b]['n_common']})"
                for b in refs
            ),
            ", ".join(f"{n} {k}" for k, n in r["ends"].items()) or "-",
        )
    return t


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f} s"


def time_to_quality_lines(result: dict[str, Any], names: list[str]) -> list[str]:
    """One line per route of a time-to-quality result (or why it was not measured)."""
    if "not_run" in result:
        return [f"time to quality not measured: {result['not_run']}"]
    lines = []
    for name in names:
        r = result[name]
        if r.get("missing"):
            lines.append(f"{name}: {r['missing']}")
        elif r["t_to_quality_s"] is not None:
            lines.append(
                f"{name}: lap-completing after {_secs(r['t_to_quality_s'])} "
                f"(real-time source {_secs(r['t_to_quality_real_time_s'])})"
            )
        else:
            lines.append(f"{name}: not lap-completing within {_secs(r['not_reached_within_s'])}")
    return lines
