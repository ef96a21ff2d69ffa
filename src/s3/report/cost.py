"""What distillation saves: the distilled route's wall clock against direct PPO in the source simulator.

    collect_cost(manifest, dt, record)          collection rows, wall clock, workers, real-time equivalents
    direct_cost(direct, ttq_direct, dt)         direct's time to quality on claim 1's curves (or the time it ran)
    efficiency(t_distilled, ..., one_time)      speed-up of the RL phase, break-even number of policies
    efficiency_block(rows, collect, direct, ttq) per distilled policy: measured, and for a real-time source

The definitions the report states (records/report.json `definitions`: rl_wall_to_policy, speedup,
one_time_cost, break_even, real_time) are their contract. A cost that was not measured is None
and its text is DASH.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from s3.report.inputs import get, num
from s3.sim.backends import BACKENDS

DASH = "—"


def duration(s: float | None) -> str:
    """Seconds as text: "45 s", "3.5 min", "2.1 h"; DASH for None."""
    if s is None:
        return DASH
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def efficiency(
    t_distilled: float | None,
    distilled_reached: bool | None,
    t_direct: float | None,
    direct_reached: bool | None,
    one_time: float | None,
) -> dict[str, Any]:
    """Speed-up of the RL phase and the break-even number of policies (see the report's definitions).

    `t_direct` is direct's time to the lap when it was reached, else the time it ran (its budget B, or its end).
    """
    out: dict[str, Any] = {
        "speedup": None,
        "speedup_bound": None,
        "speedup_text": DASH,
        "break_even_n": None,
        "break_even_policies": None,
        "break_even_bound": None,
        "break_even_text": DASH,
    }
    if distilled_reached is False:
        out["speedup_text"] = out["break_even_text"] = "not reached"
        return out
    if t_distilled is None or t_direct is None or direct_reached is None or distilled_reached is None:
        return out
    bound = "exact" if direct_reached else "lower"
    out["speedup"], out["speedup_bound"] = t_direct / t_distilled if t_distilled > 0 else None, bound
    if out["speedup"] is not None:
        out["speedup_text"] = ("" if direct_reached else ">= ") + f"{out['speedup']:.1f}x"
    if one_time is None:
        return out
    saved = t_direct - t_distilled
    if saved <= 0:
        out["break_even_text"] = (
            "never (distilled RL not faster)" if direct_reached else f"{DASH} (direct's run < t_distilled)"
        )
        return out
    n = one_time / saved
    out["break_even_n"], out["break_even_bound"] = n, "exact" if direct_reached else "upper"
    out["break_even_policies"] = max(1, math.ceil(n - 1e-9))
    out["break_even_text"] = ("" if direct_reached else "<= ") + f"{out['break_even_policies']} (n = {n:.2f})"
    return out


def collect_cost(
    manifest: Mapping[str, Any] | None, dt: float | None, record: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Collection rows from the rollout manifest, wall clock and workers from the run record
    (records/collect.json; a manifest written before the record existed held them); real-time equivalents."""
    rows = num(get(manifest, "rows"))
    timed, name = (record, "records/collect.json") if record is not None else (manifest, "manifest")
    wall = num(get(timed, "wall_seconds_total"))
    source = f"{name} wall_seconds_total"
    if wall is None:
        wall = num(get(timed, "wall_seconds_this_run"))
        source = (
            f"{name} wall_seconds_this_run (undercounts when shards were reused from an earlier run)"
            if wall is not None
            else None
        )
    workers = num(get(timed, "workers"))
    if workers is None:
        configured = num(get(manifest, "params", "collect", "workers"))
        sim = BACKENDS.get(get(manifest, "simulator"))  # one worker per external instance (one, then)
        workers = 1.0 if sim and sim.external_instances else (configured if configured and configured > 0 else None)
    car_s = rows * dt if rows is not None and dt is not None else None
    return {
        "wall_s": wall,
        "wall_s_source": source,
        "rows": rows,
        "workers": workers,
        "steps_per_s": rows / wall if rows is not None and wall else None,
        "real_time_factor_per_worker": rows * dt / workers / wall if car_s and workers and wall else None,
        "real_time_car_s": car_s,
        "real_time_wall_s": car_s / workers if car_s is not None and workers else None,
    }


def _direct_value(direct: Mapping[str, Any] | None, key: str) -> float | None:
    """direct.json keys are read at the top level or under "train"."""
    v = num(get(direct, key))
    return v if v is not None else num(get(direct, "train", key))


def direct_cost(
    direct: Mapping[str, Any] | None, ttq_direct: Mapping[str, Any] | None, dt: float | None
) -> dict[str, Any]:
    """Direct PPO in the source simulator: its run's wall clock and real-time equivalent, and its time to quality by
    the time-to-quality curves (records/time_to_quality.json, claim 1's criterion: a checkpoint completing half of
    the hold-out laps), or the time it ran without; None without those curves. With a source that cannot run it
    (BeamNG: s3.rl.direct_skip.skip_reason), "not run" and why."""
    if get(direct, "skipped") is not None:
        return {
            "skipped": get(direct, "skipped"),
            "reached": None,
            "t_to_policy_s": None,
            "real_time_t_s": None,
            "real_time_wall_s": None,
            "text": f"not run ({get(direct, 'source_simulator', 'backend')} source)",
        }
    wall, budget = _direct_value(direct, "wall_s"), _direct_value(direct, "budget_s")
    steps, workers = _direct_value(direct, "env_steps"), _direct_value(direct, "workers")
    reached = get(ttq_direct, "reached") if isinstance(get(ttq_direct, "reached"), bool) else None
    key = "t_to_quality" if reached else "not_reached_within"
    t = num(get(ttq_direct, f"{key}_s")) if reached is not None else None
    rt = steps * dt / workers if steps is not None and workers and dt is not None else None
    return {
        "wall_s": wall,
        "budget_s": budget,
        "env_steps": steps,
        "workers": workers,
        "env_steps_per_s": _direct_value(direct, "env_steps_per_s")
        or (steps / wall if steps is not None and wall else None),
        "reached": reached,
        "t_to_policy_s": t,
        "real_time_t_s": num(get(ttq_direct, f"{key}_real_time_s")) if reached is not None else None,
        "text": duration(t) if reached else (f"not reached within {duration(t)}" if reached is False else DASH),
        "real_time_wall_s": rt,
        "real_time_factor_per_worker": steps * dt / workers / wall if rt is not None and wall else None,
    }


def efficiency_block(
    rows: Mapping[str, dict[str, Any]],
    collect: dict[str, Any],
    direct: dict[str, Any],
    ttq: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Per distilled policy: measured, and re-computed for a real-time source. The times are claim 1's: the RL time
    of the policy's first lap-completing checkpoint on the time-to-quality curves (t_to_quality_s minus the route's
    collect + distill offset; distilled PPO never touches the source, so the same at real time) against direct's
    (direct_cost); without those curves, not measured."""
    measured, real_time = {}, {}
    for name, r in rows.items():
        if r["kind"] in ("baseline", "selected"):
            continue
        route = get(ttq, name)
        reached = get(route, "reached") if isinstance(get(route, "reached"), bool) else None
        t_q, offset = num(get(route, "t_to_quality_s")), num(get(route, "offset_s"))
        t = t_q - offset if reached and t_q is not None and offset is not None else None
        dist = r["distill_wall_s"]
        base = {"rl_wall_s": r["rl_wall_s"], "rl_to_quality_s": t, "reached": reached, "distill_wall_s": dist}
        one = collect["wall_s"] + dist if collect["wall_s"] is not None and dist is not None else None
        measured[name] = {
            **base,
            "one_time_cost_s": one,
            **efficiency(t, reached, direct["t_to_policy_s"], direct["reached"], one),
        }
        one_rt = (
            collect["real_time_wall_s"] + dist if collect["real_time_wall_s"] is not None and dist is not None else None
        )
        real_time[name] = {
            **base,
            "one_time_cost_s": one_rt,
            **efficiency(t, reached, direct.get("real_time_t_s"), direct["reached"], one_rt),
        }
    return {"families": measured, "real_time": real_time}


def interval_text(x: Any, ci: Any, digits: int = 1, scale: float = 1.0) -> str:
    if x is None:
        return DASH
    band = f" [{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]" if ci and None not in ci else ""
    return f"{scale * x:.{digits}f}{band}"
