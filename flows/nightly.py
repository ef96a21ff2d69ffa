"""The `nightly-regression` deployment: the pipeline on the regression parameter set, then the
regression check against the recorded baseline.

    python -m flows.nightly --serve        # long-lived: registers the deployment and runs it on
                                           # its cron (default 02:00 UTC) until stopped
    python -m flows.nightly                # one run now
    python -m flows.nightly --record       # (re)record baselines/regression.json from a run

`flow.serve` keeps the schedule only while that process lives (on SIGTERM it pauses the
deployment): run it under systemd, tmux or `nohup ... &`, with PREFECT_API_URL pointing at the
server of `make ui` so the runs show in the dashboard.

The run happens in a scratch workspace (default ~/.cache/s3/nightly, sharing this project's
DVC cache) holding the committed and in-progress source with the parameter set as its
params.yaml, so the main workspace's results are never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger

from flows.pipeline import pipeline

DEFAULT_WORKDIR = Path(os.environ.get("S3_NIGHTLY_DIR", Path.home() / ".cache" / "s3" / "nightly"))
DEFAULT_PARAMS = "params_quick.yaml"
DEFAULT_CRON = "0 2 * * *"


class RegressionFailed(RuntimeError):
    """The nightly metrics moved beyond the tolerances; the message is the summary."""


@flow(name="nightly-regression", log_prints=True)
def nightly_regression(
    source: str = ".",
    params_file: str = DEFAULT_PARAMS,
    workdir: str | None = None,
    baseline: str | None = None,
    record: bool = False,
    share_cache: bool = True,
    mlflow: bool = True,
    targets: list[str] | None = None,
    slow_tests: bool = True,
) -> str:
    """Pipeline on `params_file` in a scratch workspace, then `s3 regress` against the baseline
    (default: the source's regress.baseline), then the source's `slow` tests (the whole-pipeline
    tests `make test` leaves out). Fails with the summary when a metric regressed or a test failed."""
    from s3.config import load_params
    from s3.platform.regress import record as record_baseline
    from s3.platform.regress import run_check
    from s3.platform.workspace import prepare_workspace
    from s3.tracking import git_commit, tracking_uri

    logger = get_run_logger()
    src = Path(source).resolve()
    os.environ.setdefault("MLFLOW_TRACKING_URI", tracking_uri(src))  # the project's runs, not the scratch copy's
    os.environ["S3_GIT_COMMIT"] = git_commit(src)  # the workspace is a copy: tag runs with the source's commit
    ws = prepare_workspace(src, Path(workdir) if workdir else DEFAULT_WORKDIR, params_file, share_cache=share_cache)
    logger.info("workspace %s with %s", ws, params_file)
    pipeline(root=str(ws), targets=targets, mlflow=mlflow)
    rp = load_params(ws / "params.yaml").regress
    base = Path(baseline) if baseline else src / rp.baseline
    if record:
        path = record_baseline(ws, rp, ws / "baseline.json")
        base.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, base)
        logger.info("baseline recorded -> %s (commit it)", base)
        return f"baseline recorded -> {base}"
    ok, text = run_check(ws, rp, baseline=base)
    for line in text.splitlines():
        (logger.info if ok else logger.error)(line)
    if not ok:
        raise RegressionFailed(text)
    if slow_tests:
        text += "\n" + run_slow_tests(src)
    return text


class SlowTestsFailed(RuntimeError):
    """`pytest -m slow` failed in the source tree; the message is its summary."""


def run_slow_tests(src: Path) -> str:
    """The source tree's `slow` tests (pytest -m slow), in a subprocess; raises SlowTestsFailed."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider"],
        cwd=src,
        capture_output=True,
        text=True,
    )
    summary = (out.stdout.strip().splitlines() or ["(no output)"])[-1]
    if out.returncode != 0:
        raise SlowTestsFailed(f"slow tests: {summary}\n{out.stdout[-3000:]}")
    return f"slow tests: {summary}"


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="nightly regression: pipeline on a parameter set + regression check")
    ap.add_argument(
        "--serve", action="store_true", help="serve the scheduled `nightly-regression` deployment (long-lived)"
    )
    ap.add_argument("--cron", default=DEFAULT_CRON, help=f"schedule for --serve (default {DEFAULT_CRON!r}, UTC)")
    ap.add_argument("--params-file", default=DEFAULT_PARAMS)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--record", action="store_true", help="record the baseline instead of checking")
    a = ap.parse_args()
    kwargs = {"source": str(Path.cwd()), "params_file": a.params_file, "workdir": a.workdir}
    if a.serve:
        nightly_regression.serve(name="nightly-regression", cron=a.cron, parameters=kwargs, tags=["s3", "regression"])
    else:
        print(nightly_regression(record=a.record, **kwargs))
