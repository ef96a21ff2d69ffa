"""`make run`'s forecast: which stages `dvc repro` will run and about how long they take on this machine.

    python -m s3.platform.estimate [root]      # prints the forecast; `make run` calls it before `dvc repro`

How. The stages to run are those `dvc status` reports changed, and every stage downstream of one.
Each one's time is its wall clock in a recorded full run (REFERENCE, reports/estimate.yaml: its
`stage_minutes` as measured, or a `run_log` whose "Running stage" lines carry timestamps), scaled
by this machine's speed against the recorded machine's: a probe of a few seconds (`probe`: the
embedded simulator's control steps per second on one core, and small torch training steps per
second on one thread; the ratio is the geometric mean of the two ratios). A stage bound by a
wall-clock budget (`unscaled` in the reference: train_direct) keeps its recorded time. A stage the
reference does not name takes the mean of its siblings (the same name before '@'), or counts as
unknown.

It is an estimate, and says so: the recorded run shared its cores with other work at times, the
probe is short, and a busy machine is slower than the probe saw. The times are for the default
params (params.yaml); another parameter set (params_quick.yaml) runs far shorter.
"""

from __future__ import annotations

import math
import re
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

REFERENCE = Path("reports/estimate.yaml")
STAGE_LINE = re.compile(r"^(\d\d:\d\d:\d\d) Running stage '([^']+)'")
STAMP = re.compile(r"^(\d\d:\d\d:\d\d) ")


def stage_minutes(log: str) -> dict[str, float]:
    """Minutes per stage from a timestamped `dvc repro` log ('HH:MM:SS <line>'): from its "Running
    stage" line to the next one (the last: to the log's last line); a run past midnight wraps."""
    stamps = [(m.group(1), line) for line in log.splitlines() if (m := STAMP.match(line))]
    starts = [(t, m.group(2)) for t, line in stamps if (m := STAGE_LINE.match(line))]
    ends = [t for t, _ in starts[1:]] + ([stamps[-1][0]] if stamps else [])
    out = {}
    for (start, name), end in zip(starts, ends):
        dt = datetime.strptime(end, "%H:%M:%S") - datetime.strptime(start, "%H:%M:%S")
        out[name] = (dt if dt >= timedelta(0) else dt + timedelta(days=1)).total_seconds() / 60
    return out


def recorded_minutes(ref: dict[str, Any], root: Path) -> dict[str, float]:
    """The reference run's minutes per stage: its `stage_minutes` as written, else read from `run_log`."""
    if ref.get("stage_minutes"):
        return {str(k): float(v) for k, v in ref["stage_minutes"].items()}
    return stage_minutes((root / ref["run_log"]).read_text())


def probe(seconds: float = 1.5) -> dict[str, float]:
    """This machine's speed: simulator control steps/s (one core) and torch training steps/s (one thread)."""
    import torch

    from s3.sim.bench import bench_sim

    sim = bench_sim(seconds=seconds)["control_steps_per_s"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ELU(), torch.nn.Linear(128, 128), torch.nn.ELU())
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        x = torch.randn(4096, 64, generator=gen)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
            steps += 1
        torch_rate = steps / (time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return {"sim_steps_per_s": sim, "torch_steps_per_s": torch_rate}


def slowdown(here: dict[str, float], there: dict[str, float]) -> float:
    """How many times longer the same work takes here than there (geometric mean over the probe's parts)."""
    ratios = [there[k] / here[k] for k in there if here.get(k)]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0


def stages_to_run(root: Path) -> list[str]:
    """The stages `dvc repro` would run in `root`, in pipeline order: changed ones and all downstream."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        changed = set(repo.status())
        graph = repo.index.graph  # an edge points from a stage to a stage it depends on
        listed = {s: i for i, s in enumerate(graph.nodes)}  # dvc.yaml's order
        order = list(reversed(list(nx.lexicographical_topological_sort(graph, key=lambda s: -listed[s]))))
        run = {s for s in graph.nodes if s.addressing in changed}
        for s in list(run):
            run |= nx.ancestors(graph, s)
        return [s.addressing for s in order if s in run]


def forecast(
    stages: list[str], recorded: dict[str, float], factor: float, unscaled: set[str]
) -> dict[str, float | None]:
    """Minutes per stage here (None: no recorded time for it or its siblings)."""
    out: dict[str, float | None] = {}
    for name in stages:
        minutes = recorded.get(name)
        if minutes is None:
            siblings = [v for k, v in recorded.items() if k.split("@")[0] == name.split("@")[0]]
            minutes = sum(siblings) / len(siblings) if siblings else None
        out[name] = None if minutes is None else minutes * (1.0 if name in unscaled else factor)
    return out


def _duration(minutes: float) -> str:
    return f"{minutes:.0f} min" if minutes < 90 else f"{int(minutes // 60)} h {round(minutes % 60):02d} min"


def report(root: Path = Path("."), probe_s: float = 1.5) -> list[str]:
    """The forecast's lines (module docstring)."""
    stages = stages_to_run(root)
    if not stages:
        return ["make run: every stage is up to date (dvc status): nothing to run"]
    ref: dict[str, Any] = yaml.safe_load((root / REFERENCE).read_text())
    recorded = recorded_minutes(ref, root)
    factor = slowdown(probe(probe_s), ref["probe"])
    times = forecast(stages, recorded, factor, set(ref.get("unscaled", [])))
    known = [v for v in times.values() if v is not None]
    unknown = [k for k, v in times.items() if v is None]
    fixed = ", ".join(sorted(set(ref.get("unscaled", [])) & set(stages)))
    head = (
        f"make run: {len(stages)} stage(s) to run, about {_duration(sum(known))} on this machine (an estimate: the "
        f"stage times of {ref.get('run') or ref['run_log']} on {ref['machine']}, x {factor:.2f} from a "
        f"{2 * probe_s:.0f}-s speed probe here"
        + (f"; {fixed}: a fixed wall-clock budget" if fixed else "")
        + (f"; no recorded time for {', '.join(unknown)}" if unknown else "")
        + ")"
    )
    plan = "  " + ", ".join(f"{k} {'?' if v is None else f'{v:.0f}' if v >= 1 else '<1'}" for k, v in times.items())
    return [
        head,
        plan + " (minutes)",
        "  each stage shows its progress on stderr: a bar on a terminal, a line every 30 s otherwise",
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        lines = report(Path(args[0]) if args else Path("."))
    except Exception as e:  # a forecast never stops the run
        print(f"make run: no estimate ({type(e).__name__}: {e})", file=sys.stderr)
        return 0
    print("\n".join(lines), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
