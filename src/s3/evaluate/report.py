"""The report stage: does a better dynamics model give a better policy?

    report(metrics_dir="metrics", reports_dir="reports", plots_dir="plots/report") -> report dict

joins `metrics/distill/<family>.json` (prediction accuracy), `metrics/eval/<name>.json` (policy
quality back in the source simulator), `metrics/train/<name>.json` (RL wall clock), the
rollout manifest (rows) and `metrics/collect.json` (collection wall clock) into one report, and writes

    metrics/report.json                      everything below, strict JSON (null = not measured)
    reports/report.md                        the tables, the definitions, links to the figures
    plots/report/accuracy_vs_quality.png     prediction error against policy quality
    plots/report/error_vs_horizon.png        every family's open-loop position error against horizon

It is printed as rich tables and logged to MLflow (one run per family, the pipeline's parent run
for the correlation and the baselines), so runs of different families and pipeline runs line
up in the MLflow UI. A missing input is "not measured" (null / "—"), never a guess.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from s3.dynamics.registry import FAMILIES
from s3.io import json_safe, write_json_atomic, write_text_atomic

BASELINES = ("direct", "pid", "pid_blind")  # trained in the source simulator, or not trained
CONDITIONS = ("nominal", "ice")
ERROR_METRICS = ("ade_1s_all", "ade_2s_all", "ade_1s_ice", "ade_2s_ice")
PROBE_METRICS = ("probe_3s_asphalt", "probe_3s_ice")  # manoeuvre probes (s3.evaluate.probes), from metrics/eval
CORRELATED = (*ERROR_METRICS, *PROBE_METRICS)
HEADLINE_ERROR = "ade_2s_all"
POLICY_KEYS = ("mean_abs_steering_rate", "mean_abs_steering_jerk", "pedal_switches", "off_track_events",
               "mean_abs_lateral_error_m", "patch_crossing_rate")  # fmt: skip
GAP_KEYS = ("completion_rate", "lap_time_s", "mean_speed_mps")
FIGURE = "accuracy_vs_quality.png"
HORIZON_FIGURE = "error_vs_horizon.png"
DASH = "—"

DEFINITIONS = {
    "prediction_error": "open-loop average displacement error (m) of the position over 1 s / 2 s, on held-out test "
    "episodes of the collected rollouts; 'all' = every test window, 'ice' = windows entirely on mu < 0.5",
    "probe_error": "manoeuvre probes (s3.evaluate.probes): fixed open-loop commands (cornering, braking, power on) "
    "from the same start for 3 s in the source simulator and in the model, on open asphalt and on open ice (mu 0.15); "
    "mean position error (m) after 3 s per surface, and in how many of the 8 manoeuvres model and source agree on "
    "whether the car slid (|sideslip| > 0.5 rad)",
    "policy_quality": "the policy back in the source simulator on the held-out road course (nominal, and with "
    "seven ice patches): lap completion rate over starts x seeds, mean lap time of the completed laps",
    "quality_rank": "families ordered by mean completion rate ((nominal + ice) / 2, higher is better), ties broken "
    "by the mean share of the lap driven before failing (nominal and ice; higher is better), then by the nominal "
    "then the ice lap time (shorter is better; no completed lap counts as slowest); rank 1 = best, "
    "equal keys share their average rank",
    "spearman": "rho = Spearman rank correlation of (prediction error, quality rank) over the model families that "
    "have both; both are lower-is-better, so +1 = the family that predicts best also drives best, -1 = the reverse, "
    "0 = prediction accuracy says nothing about policy quality; p = exact two-sided permutation p-value (the share of "
    "all orderings of the ranks with |rho| at least as large). Null with a reason when fewer than 3 families "
    "have both or one side is constant",
    "transfer_gap": "same policy, same track: source-simulator minus distilled-environment value (negative completion "
    "gap = completes less often in the source simulator; positive lap-time gap = slower there)",
    "rl_wall_to_policy": "wall clock of the RL phase (train wall_s; with train.seeds > 1, that of all seeds, trained side by side) of a policy whose nominal completion rate in the "
    "source simulator is > 0; otherwise 'not reached'. For `direct` (PPO in the source simulator) its wall_s, or, "
    "when it never completes the nominal lap, 'not reached within budget B' and the speed-up is a lower bound "
    "(>= B / t_distilled)",
    "speedup": "t_direct / t_distilled (RL phase only)",
    "one_time_cost": "collection wall clock (metrics/collect.json) + that family's distill wall clock (total_wall_s: "
    "data loading, training and the accuracy evaluation); paid once, shared by every policy trained on the model",
    "break_even": "n = one_time_cost / (t_direct - t_distilled): after ceil(n) policies (ablations, seeds) the "
    "distilled route has cost less in total. When direct never reached the lap, t_direct > B, so n computed with B "
    "is an upper bound (<=). 'never' when the distilled RL phase is not faster than direct",
    "real_time": "the same figures for a source simulator that runs at real time (as BeamNG.tech typically does): "
    "each car advances 1 / control_dt control steps per second, so direct PPO needs env_steps x control_dt / workers "
    "seconds and collection rows x control_dt / workers seconds (same numbers of parallel workers as measured). "
    "These count the simulator's time only (PPO updates and resets come on top) and leave the distilled RL and "
    "distill wall clocks as measured",
}


# ----------------------------------------------------------------------------------------- inputs


def _read(path: Path, missing: list[str]) -> dict[str, Any] | None:
    """A JSON file, or None (noted in `missing`) when it is absent or unreadable."""
    if not path.exists():
        missing.append(f"{path}: not found")
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        missing.append(f"{path}: unreadable ({type(e).__name__})")
        return None
    return data if isinstance(data, dict) else None


def _get(d: Mapping[str, Any] | None, *keys: str) -> Any:
    """d[k1][k2]...; None when any level is missing."""
    for k in keys:
        if not isinstance(d, Mapping) or k not in d:
            return None
        d = d[k]
    return d


def _num(x: Any) -> float | None:
    """A finite number, else None (bools and NaN are not measurements)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def _order(names: Iterable[str], families: Iterable[str] = FAMILIES, models: Mapping[str, str] | None = None) -> list[str]:
    """Families first, then the other policies trained in a model (the oracle) and the baselines,
    then anything else alphabetically."""
    families = list(families)
    known = [*families, *dict.fromkeys(n for n in [*(models or {}), "oracle"] if n not in families), *BASELINES]
    names = set(names)
    return [n for n in known if n in names] + sorted(names - set(known))


# ------------------------------------------------------------------------------------ the table


def prediction_columns(distill: Mapping[str, Any] | None, ev: Mapping[str, Any] | None = None) -> dict[str, float | None]:
    """ADE at 1 s / 2 s on all test windows and on ice windows; the manoeuvre probes' errors (from the eval)."""
    out: dict[str, float | None] = {}
    for name in ERROR_METRICS:
        metric, split = name.rsplit("_", 1)
        out[name] = _num(_get(distill, "rollout", split, metric))
    out["fde_2s_all"] = _num(_get(distill, "rollout", "all", "fde_2s"))
    for name in PROBE_METRICS:
        out[name] = _num(_get(ev, "probes", "summary", f"pos_err_3s_{name.rsplit('_', 1)[1]}"))
    agreed, total = _num(_get(ev, "probes", "summary", "slides_agreed")), _num(_get(ev, "probes", "summary", "manoeuvres"))
    out["probe_slides_agreed"] = agreed / total if agreed is not None and total else None
    return out


def policy_columns(ev: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per condition: completion, lap time (mean and 95 % CI) and the smoothness metrics."""
    out: dict[str, dict[str, Any]] = {}
    for cond in CONDITIONS:
        s = _get(ev, "summary", cond)
        ci = _get(s, "lap_time_s", "ci95")
        out[cond] = {
            "completion_rate": _num(_get(s, "completion_rate")),
            "completed": _get(s, "completed"),
            "runs": _get(s, "runs"),
            "lap_time_s": _num(_get(s, "lap_time_s", "mean")),
            "lap_time_ci95": [_num(c) for c in ci] if isinstance(ci, list) and len(ci) == 2 else None,
            "lap_share": _num(_get(ev, "conditions", cond, "aggregate", "completion_fraction", "mean")),
            **{k: _num(_get(s, k, "mean")) for k in POLICY_KEYS},
        }
    return out


def gap_columns(ev: Mapping[str, Any] | None) -> dict[str, dict[str, float | None]]:
    """Source-minus-distilled gaps per condition (the lead adds `transfer_gap` to family evals)."""
    return {cond: {k: _num(_get(ev, "transfer_gap", cond, k, "gap")) for k in GAP_KEYS} for cond in CONDITIONS}


def quality_score(policy: Mapping[str, Any]) -> float | None:
    """Mean completion rate over nominal and ice; None unless both were measured."""
    rates = [_get(policy, c, "completion_rate") for c in CONDITIONS]
    return None if any(r is None for r in rates) else sum(rates) / len(rates)


def quality_ranks(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Rank 1 = best: higher mean completion, then lap share driven, then shorter nominal, then ice lap time; ties averaged."""

    def key(r: Mapping[str, Any]) -> tuple[float, ...]:
        shares = [_get(r, "policy", c, "lap_share") for c in CONDITIONS]
        share = -sum(shares) / len(shares) if all(x is not None for x in shares) else 0.0
        laps = [_get(r, "policy", c, "lap_time_s") for c in CONDITIONS]
        return (-r["quality"]["score"], share, *(math.inf if t is None else t for t in laps))

    scored = {n: key(r) for n, r in rows.items() if r["quality"]["score"] is not None}
    ordered = sorted(scored.values())
    ranks = {}
    for name, k in scored.items():
        positions = [i + 1 for i, o in enumerate(ordered) if o == k]
        ranks[name] = sum(positions) / len(positions)
    return ranks


def spearman(errors: Mapping[str, float | None], ranks: Mapping[str, float]) -> dict[str, Any]:
    """rho of (error, quality rank) over the families with both (see DEFINITIONS['spearman'])."""
    from scipy.stats import spearmanr

    names = [n for n in errors if errors.get(n) is not None and n in ranks]
    out: dict[str, Any] = {"rho": None, "p_value": None, "n": len(names), "families": names, "reason": None}
    x, y = [errors[n] for n in names], [ranks[n] for n in names]
    if len(names) < 3:
        out["reason"] = f"needs >= 3 families with both prediction error and policy quality, have {len(names)}"
    elif len(set(x)) == 1 or len(set(y)) == 1:
        out["reason"] = "constant input: all families tie on " + ("prediction error" if len(set(x)) == 1 else "policy quality")
    elif len(names) <= EXACT_P_MAX_N:
        out["rho"], out["p_value"] = (_num(v) for v in _spearman_exact(x, y))
    else:
        res = spearmanr(x, y)
        out["rho"], out["p_value"] = _num(float(res.statistic)), _num(float(res.pvalue))
    return out


EXACT_P_MAX_N = 8  # up to 8! = 40320 orderings


def _spearman_exact(x: list[float], y: list[float]) -> tuple[float, float]:
    """rho and its exact two-sided p over every ordering of y: with four families scipy's t
    approximation says p = 0 for rho = 1, where the chance of a perfect (or reversed) order is 2/24."""
    import itertools

    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    rho = float(np.corrcoef(rx, ry)[0, 1])
    null = np.array([np.corrcoef(rx, perm)[0, 1] for perm in itertools.permutations(ry)])
    return rho, float(np.mean(np.abs(null) >= abs(rho) - 1e-9))


def _row(name: str, kind: str, distill: dict | None, ev: dict | None, train: dict | None, prediction_from: str | None) -> dict[str, Any]:
    policy = policy_columns(ev)
    return {
        "kind": kind,
        "prediction_from": prediction_from,
        "prediction": prediction_columns(distill, ev),
        "policy": policy,
        "transfer_gap": gap_columns(ev),
        "quality": {"score": quality_score(policy), "rank": None},
        "rl_wall_s": _num(_get(train, "seed_selection", "rl_wall_s"))
        or _num(_get(train, "seed_selection", "wall_s"))
        or _num(_get(train, "train", "wall_s")),  # all seeds, side by side
        "distill_wall_s": _num(_get(distill, "total_wall_s")) if distill else None,
    }


def _kind(name: str, families: list[str], models: Mapping[str, str]) -> str:
    if name in families:
        return "family"
    if name == "oracle" or name in models:
        return "oracle" if name == "oracle" else "policy"
    return "baseline" if name in BASELINES else "other"


def _prediction_source(name: str, d: Path, train: dict | None, families: list[str], models: Mapping[str, str]) -> str | None:
    """Whose distill metrics describe this policy's dynamics model (the oracle drives its model's)."""
    if (d / f"{name}.json").exists():
        return name
    fam = _get(train, "family")
    if isinstance(fam, str) and fam in families:
        return fam
    return models.get(name)


# ------------------------------------------------------------------------------------ efficiency


def _direct_value(direct: Mapping[str, Any] | None, key: str) -> float | None:
    """direct.json keys are read at the top level or under "train"."""
    v = _num(_get(direct, key))
    return v if v is not None else _num(_get(direct, "train", key))


def _dur(s: float | None) -> str:
    if s is None:
        return DASH
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def efficiency(t_distilled: float | None, distilled_reached: bool | None, t_direct: float | None,
               direct_reached: bool | None, one_time: float | None) -> dict[str, Any]:  # fmt: skip
    """Speed-up of the RL phase and the break-even number of policies (see DEFINITIONS).

    `t_direct` is direct's time to the lap when it was reached, else its budget B.
    """
    out: dict[str, Any] = {"speedup": None, "speedup_bound": None, "speedup_text": DASH,
                           "break_even_n": None, "break_even_policies": None, "break_even_bound": None,
                           "break_even_text": DASH}  # fmt: skip
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
        out["break_even_text"] = "never (distilled RL not faster)" if direct_reached else f"{DASH} (direct's budget < t_distilled)"
        return out
    n = one_time / saved
    out["break_even_n"], out["break_even_bound"] = n, "exact" if direct_reached else "upper"
    out["break_even_policies"] = max(1, math.ceil(n - 1e-9))
    out["break_even_text"] = ("" if direct_reached else "<= ") + f"{out['break_even_policies']} (n = {n:.2f})"
    return out


def _collect_cost(manifest: Mapping[str, Any] | None, dt: float | None, record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Collection rows from the rollout manifest, wall clock and workers from the run record
    (metrics/collect.json; a manifest written before the record existed held them); real-time equivalents."""
    rows = _num(_get(manifest, "rows"))
    timed, name = (record, "metrics/collect.json") if record is not None else (manifest, "manifest")
    wall = _num(_get(timed, "wall_seconds_total"))
    source = f"{name} wall_seconds_total"
    if wall is None:
        wall = _num(_get(timed, "wall_seconds_this_run"))
        source = f"{name} wall_seconds_this_run (undercounts when shards were reused from an earlier run)" if wall is not None else None
    workers = _num(_get(timed, "workers"))
    if workers is None:
        configured = _num(_get(manifest, "params", "collect", "workers"))
        workers = 1.0 if _get(manifest, "simulator") == "beamng" else (configured if configured and configured > 0 else None)
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


def _direct_cost(direct: Mapping[str, Any] | None, ev: Mapping[str, Any] | None, dt: float | None) -> dict[str, Any]:
    """Direct PPO in the source simulator: time to the lap (or its budget) and real-time equivalent."""
    wall, budget = _direct_value(direct, "wall_s"), _direct_value(direct, "budget_s")
    steps, workers = _direct_value(direct, "env_steps"), _direct_value(direct, "workers")
    rate = _num(_get(ev, "summary", "nominal", "completion_rate"))
    reached = None if rate is None or wall is None else rate > 0
    t = None
    if reached is True:
        t = wall
    elif reached is False:
        t = budget if budget is not None else wall
    rt = steps * dt / workers if steps is not None and workers and dt is not None else None
    return {
        "wall_s": wall,
        "budget_s": budget,
        "env_steps": steps,
        "workers": workers,
        "env_steps_per_s": _direct_value(direct, "env_steps_per_s") or (steps / wall if steps is not None and wall else None),
        "completion_nominal": rate,
        "reached": reached,
        "t_to_policy_s": t,
        "text": _dur(t) if reached else (f"not reached within {_dur(t)}" if reached is False else DASH),
        "real_time_wall_s": rt,
        "real_time_factor_per_worker": steps * dt / workers / wall if rt is not None and wall else None,
    }


def _efficiency_block(rows: Mapping[str, dict[str, Any]], collect: dict[str, Any], direct: dict[str, Any]) -> dict[str, Any]:
    """Per distilled policy: measured, and re-computed for a real-time source simulator."""
    measured, real_time = {}, {}
    for name, r in rows.items():
        if r["kind"] == "baseline":
            continue
        rate = r["policy"]["nominal"]["completion_rate"]
        reached = None if rate is None or r["rl_wall_s"] is None else rate > 0
        dist = r["distill_wall_s"]
        base = {"rl_wall_s": r["rl_wall_s"], "reached": reached, "distill_wall_s": dist}
        one = collect["wall_s"] + dist if collect["wall_s"] is not None and dist is not None else None
        measured[name] = {**base, "one_time_cost_s": one,
                          **efficiency(r["rl_wall_s"], reached, direct["t_to_policy_s"], direct["reached"], one)}  # fmt: skip
        one_rt = collect["real_time_wall_s"] + dist if collect["real_time_wall_s"] is not None and dist is not None else None
        real_time[name] = {**base, "one_time_cost_s": one_rt,
                           **efficiency(r["rl_wall_s"], reached, direct["real_time_wall_s"], direct["reached"], one_rt)}  # fmt: skip
    return {"families": measured, "real_time": real_time}


# ----------------------------------------------------------------------------------- the report


def build_report(metrics_dir: Path, manifest: Path | None = None, families: Iterable[str] | None = None,
                 models: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Join the stage metrics into the report dict (reads files, writes nothing).

    `manifest` defaults to <metrics_dir>/../data/rollouts/manifest.json (the project layout).
    `families` (default: every family of s3.dynamics.registry) and `models` (policy -> the model
    family it trains in; default: each family its own) come from params.yaml in `s3 report`.
    """
    families = list(FAMILIES if families is None else families)
    models = {**{f: f for f in families}, **(models or {})}
    metrics_dir = Path(metrics_dir)
    manifest = Path(manifest) if manifest is not None else metrics_dir.parent / "data" / "rollouts" / "manifest.json"
    missing: list[str] = []
    d_dir, e_dir, t_dir = metrics_dir / "distill", metrics_dir / "eval", metrics_dir / "train"
    names = _order({*models, *_names(d_dir), *_names(e_dir), *(n for n in _names(t_dir) if n != "direct")}, families, models)
    names = [n for n in names if n in models or n in BASELINES or (e_dir / f"{n}.json").exists()]
    rows: dict[str, dict[str, Any]] = {}
    evals: dict[str, dict | None] = {}
    for name in names:
        evals[name] = _read(e_dir / f"{name}.json", missing)
        kind = _kind(name, families, models)
        trained = kind in ("family", "oracle", "policy")
        train = _read(t_dir / f"{name}.json", missing) if trained else None
        src = _prediction_source(name, d_dir, train, families, models) if trained else None
        distill = _read(d_dir / f"{src}.json", missing) if src else None
        rows[name] = _row(name, kind, distill, evals[name], train, src)
    for name, rank in quality_ranks({n: r for n, r in rows.items() if n in families}).items():
        rows[name]["quality"]["rank"] = rank
    ranks = {n: r["quality"]["rank"] for n, r in rows.items() if r["quality"]["rank"] is not None}
    corr = {m: spearman({n: rows[n]["prediction"][m] for n in families}, ranks) for m in CORRELATED}

    man = _read(manifest, missing)
    dt = _control_dt(man, metrics_dir, evals)
    collect = _collect_cost(man, dt, _read(metrics_dir / "collect.json", missing))
    direct = _direct_cost(_read(t_dir / "direct.json", missing), evals.get("direct"), dt)
    report = {
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs)",
        "metrics_dir": str(metrics_dir),
        "rows": rows,
        "correlation": {"headline": HEADLINE_ERROR, "quality": "quality_rank", **corr},
        "efficiency": {"control_dt": dt, "collect": collect, "direct": direct, **_efficiency_block(rows, collect, direct)},
        "definitions": DEFINITIONS,
        "missing": missing,
    }
    return json_safe(report)


def _control_dt(manifest: Mapping[str, Any] | None, metrics_dir: Path, evals: Mapping[str, Any]) -> float | None:
    """The source simulator's control period: manifest, else any eval file, else any distill file."""
    candidates = [_num(_get(manifest, "control_dt")), *(_num(_get(ev, "simulator", "control_dt")) for ev in evals.values())]
    for p in sorted((metrics_dir / "distill").glob("*.json")):
        candidates.append(_num(_get(_read(p, []), "dt")))
    return next((dt for dt in candidates if dt is not None), None)


# -------------------------------------------------------------------------------- presentation


def _f(x: Any, digits: int = 2) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def _pair(a: Any, b: Any, digits: int = 1) -> str:
    return DASH if a is None and b is None else f"{_f(a, digits)} / {_f(b, digits)}"


def _pct(x: Any) -> str:
    return DASH if x is None else f"{100 * x:.0f}%"


def _lap(p: Mapping[str, Any]) -> str:
    if p["lap_time_s"] is None:
        return DASH
    ci = p.get("lap_time_ci95")
    half = (ci[1] - ci[0]) / 2 if ci and None not in ci else None
    return f"{p['lap_time_s']:.1f}" + ("" if half is None else f" ± {half:.1f}")


def _gap(g: Mapping[str, Any]) -> str:
    c, t = g["completion_rate"], g["lap_time_s"]
    if c is None and t is None:
        return DASH
    return f"{DASH if c is None else f'{100 * c:+.0f}%'} / {DASH if t is None else f'{t:+.1f} s'}"


MAIN_COLUMNS = ("policy", "ADE 1s all (m)", "ADE 2s all (m)", "ADE 1s ice (m)", "ADE 2s ice (m)",
                "manoeuvres 3s asphalt / ice (m)", "slides agreed", "completed nominal",
                "completed ice", "lap time nominal (s)", "lap time ice (s)", "steer rate (1/s)", "steer jerk (1/s²)",
                "ice patches crossed", "transfer gap nominal", "transfer gap ice", "quality rank")  # fmt: skip


def main_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """The accuracy-vs-quality table as strings (one row per policy; "—" = not measured)."""
    out = []
    for name, r in report["rows"].items():
        pred, pol, gap = r["prediction"], r["policy"], r["transfer_gap"]
        label = name if not r["prediction_from"] or r["prediction_from"] == name else f"{name} ({r['prediction_from']} model)"
        out.append([
            label, *(_f(pred[m]) for m in ERROR_METRICS), _pair(pred["probe_3s_asphalt"], pred["probe_3s_ice"]),
            _pct(pred["probe_slides_agreed"]), _pct(pol["nominal"]["completion_rate"]),
            _pct(pol["ice"]["completion_rate"]), _lap(pol["nominal"]), _lap(pol["ice"]),
            _f(pol["nominal"]["mean_abs_steering_rate"], 3), _f(pol["nominal"]["mean_abs_steering_jerk"], 2),
            _pct(pol["ice"]["patch_crossing_rate"]), _gap(gap["nominal"]), _gap(gap["ice"]), _f(r["quality"]["rank"], 1),
        ])  # fmt: skip
    return out


EFF_COLUMNS = ("policy", "RL to lap (distilled)", "RL to lap (direct)", "speed-up", "one-time cost", "break-even policies",
               "speed-up @ real time", "one-time @ real time", "break-even @ real time")  # fmt: skip


def efficiency_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """The efficiency table as strings (one row per distilled policy)."""
    eff = report["efficiency"]
    out = []
    for name, m in eff["families"].items():
        rt = eff["real_time"][name]
        rl = "not reached" if m["reached"] is False else _dur(m["rl_wall_s"]) if m["reached"] else DASH
        out.append([name, rl, eff["direct"]["text"], m["speedup_text"], _dur(m["one_time_cost_s"]), m["break_even_text"],
                    rt["speedup_text"], _dur(rt["one_time_cost_s"]), rt["break_even_text"]])  # fmt: skip
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
            lines.append(f"{m}: rho = {c['rho']:+.2f} (p = {c['p_value']:.2f}, n = {c['n']}: {', '.join(c['families'])})")
    return lines


def cost_lines(report: Mapping[str, Any]) -> list[str]:
    """The one-time costs and the measured source-simulator speeds behind the efficiency table."""
    eff = report["efficiency"]
    c, d = eff["collect"], eff["direct"]
    rows = DASH if c["rows"] is None else f"{c['rows']:,.0f}"
    steps = DASH if d["env_steps"] is None else f"{d['env_steps']:,.0f}"
    return [
        f"control period: {_f(eff['control_dt'], 3)} s",
        f"collection: {_dur(c['wall_s'])} for {rows} control steps with {_f(c['workers'], 0)} workers "
        f"({_f(c['real_time_factor_per_worker'], 1)}x real time per worker); at real time: {_dur(c['real_time_car_s'])} "
        f"of one car, {_dur(c['real_time_wall_s'])} with the same workers",
        *[f"distill {n}: {_dur(m['distill_wall_s'])}" for n, m in eff["families"].items()],
        f"direct PPO in the source simulator: {d['text']}, {steps} env steps with {_f(d['workers'], 0)} workers "
        f"({_f(d['real_time_factor_per_worker'], 1)}x real time per worker); at real time: {_dur(d['real_time_wall_s'])}",
    ]


def _table(title: str, columns: Iterable[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


def report_table(report: Mapping[str, Any]) -> Table:
    """Prediction accuracy next to policy quality, one row per policy."""
    return _table("report: prediction accuracy (held-out rollouts) vs policy quality (source simulator, road course)",
                  MAIN_COLUMNS, main_rows(report))  # fmt: skip


def efficiency_table(report: Mapping[str, Any]) -> Table:
    """Wall clock to a lap-completing policy, distilled vs direct; measured and at real time."""
    return _table("report: RL wall clock to a policy that completes the nominal lap", EFF_COLUMNS, efficiency_rows(report))


def _md_table(columns: Iterable[str], rows: list[list[str]]) -> str:
    cols = list(columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(report: Mapping[str, Any], figures: Iterable[Path], reports_dir: Path) -> str:
    """reports/report.md: the tables, the correlation, the costs, the figure, the definitions."""
    figs = [f"![{Path(f).stem}]({os.path.relpath(Path(f).resolve(), Path(reports_dir).resolve())})" for f in figures]
    parts = [
        "# s3 report: prediction accuracy vs policy quality",
        f"Generated from `{report['metrics_dir']}`.",  # when and on which host: metrics/report.json (the same metrics, the same bytes)
        "## Accuracy vs policy quality",
        _md_table(MAIN_COLUMNS, main_rows(report)),
        "Transfer gap: completion / lap time, source minus distilled environment.",
        "## Does better prediction give a better policy?",
        "Spearman rho of (prediction error, quality rank), +1 = better prediction goes with a better policy:",
        "\n".join(f"- {line}" for line in correlation_lines(report)),
        *figs,
        "## Efficiency",
        _md_table(EFF_COLUMNS, efficiency_rows(report)),
        "\n".join(f"- {line}" for line in cost_lines(report)),
        "## Definitions",
        "\n".join(f"- **{k}**: {v}" for k, v in report["definitions"].items()),
    ]
    if report["missing"]:
        parts += ["## Not measured (inputs missing)", "\n".join(f"- `{m}`" for m in report["missing"])]
    return "\n\n".join(parts) + "\n"


def write_report(report: Mapping[str, Any], metrics_dir: Path, reports_dir: Path, plots_dir: Path) -> list[Path]:
    """metrics/report.json, the figures and reports/report.md (all atomic); returns their paths."""
    from s3.viz.distill_plots import plot_error_vs_horizon
    from s3.viz.report_plots import plot_accuracy_vs_quality

    figs = [plot_accuracy_vs_quality(report, Path(plots_dir) / FIGURE)]
    curves = _horizon_curves(Path(metrics_dir) / "distill")
    if curves:  # every family in one figure: only this stage reads all of their metrics
        figs.append(plot_error_vs_horizon(Path(plots_dir) / HORIZON_FIGURE, curves, "open-loop position error, every family"))
    out = write_json_atomic(Path(metrics_dir) / "report.json", report)
    md = write_text_atomic(Path(reports_dir) / "report.md", markdown(report, figs, Path(reports_dir)))
    return [out, md, *figs]


def _horizon_curves(distill_dir: Path) -> dict[str, dict[str, Any]]:
    """family -> the `error_vs_horizon` entry of metrics/distill/<family>.json (families in their order)."""
    curves = {}
    for name in _order(_names(distill_dir)):
        try:
            curve = json.loads((distill_dir / f"{name}.json").read_text()).get("error_vs_horizon")
        except (OSError, ValueError):
            continue
        if curve:
            curves[name] = curve
    return curves


# --------------------------------------------------------------------------------------- MLflow


def _numbers(d: Mapping[str, Any]) -> dict[str, Any]:
    """Nested dict of the numeric leaves (bools as 0/1), for MLflow metrics."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            sub = _numbers(v)
            if sub:
                out[k] = sub
        elif isinstance(v, bool):
            out[k] = float(v)
        elif _num(v) is not None:
            out[k] = v
    return out


def log_report_mlflow(report: Mapping[str, Any], artifacts: Iterable[Path] = ()) -> dict[str, str | None]:
    """One MLflow run per distilled policy (accuracy and quality side by side, `report/...` metrics)
    plus the correlation, costs and baselines on the pipeline's parent run. Off when S3_MLFLOW is."""
    from s3.platform.tracking import log_stage_safely

    artifacts = [Path(a) for a in artifacts]
    eff = report["efficiency"]
    ids: dict[str, str | None] = {}
    for name, r in report["rows"].items():
        if r["kind"] == "baseline":
            continue
        m = {"prediction": r["prediction"], "policy": r["policy"], "transfer_gap": r["transfer_gap"], "quality": r["quality"],
             "efficiency": eff["families"].get(name, {}), "efficiency_real_time": eff["real_time"].get(name, {})}  # fmt: skip
        ids[name] = log_stage_safely("report", name, None, _numbers(m), artifacts)
    parent = {
        "correlation": {k: v for k, v in report["correlation"].items() if isinstance(v, Mapping)},
        "collect": eff["collect"],
        "direct": eff["direct"],
        "baselines": {n: {"policy": r["policy"]} for n, r in report["rows"].items() if r["kind"] == "baseline"},
    }
    ids["_pipeline"] = log_stage_safely("report", None, None, _numbers(parent), artifacts)
    return ids


# ---------------------------------------------------------------------------------- entry point


def report(metrics_dir: str | Path = "metrics", reports_dir: str | Path = "reports", plots_dir: str | Path = "plots/report",
           console: Console | None = None, families: Iterable[str] | None = None,
           models: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The `s3 report` stage: build, write, print and log the report; returns the report dict."""
    rep = build_report(Path(metrics_dir), families=families, models=models)
    paths = write_report(rep, Path(metrics_dir), Path(reports_dir), Path(plots_dir))
    console = console or Console()
    console.print(report_table(rep))
    for line in correlation_lines(rep):
        console.print(f"Spearman (error, quality rank) {line}", highlight=False)
    console.print(efficiency_table(rep))
    for line in cost_lines(rep):
        console.print(line, highlight=False)
    for m in rep["missing"]:
        console.print(f"[yellow]not measured:[/yellow] {m}", highlight=False)
    log_report_mlflow(rep, paths)
    console.print(f"wrote {', '.join(map(str, paths))}", highlight=False)
    return rep
