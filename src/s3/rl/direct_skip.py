"""Whether `direct` runs on this source simulator, and the record it leaves when it does not.

    skip_reason(params) -> str | None                 why direct is not trained here, or None
    write_skipped(params, out_dir, metrics_dir, reason) -> summary
writes
    <out_dir>/direct/skipped.json    (SKIPPED; no policy.json then: s3.evaluate.policy_eval reads it)
    <metrics_dir>/direct.json        the same record
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from s3 import headline
from s3.catalog import DIRECT
from s3.io import write_json_atomic
from s3.sim.backends import side_by_side_names, sim_backend

if TYPE_CHECKING:
    from s3.config import Params

NAME = DIRECT
SKIPPED = "skipped.json"  # policies/direct/skipped.json: why direct was not trained (no policy.json then)


def skip_reason(params: Params) -> str | None:
    """Why `direct` is not trained with this source simulator, or None: it steps many cars of the
    embedded simulator side by side; one BeamNG.tech instance steps one car at about real time,
    so a PPO budget of minutes would train nothing (and days would be needed)."""
    backend = sim_backend(params.sim)
    if backend.side_by_side:
        return None
    return (
        "direct (PPO inside the source simulator) needs many cars stepped side by side, i.e. sim.backend "
        f"{side_by_side_names()}; {backend.not_side_by_side}, so it is not run"
    )


def write_skipped(params: Params, out_dir: str | Path, metrics_dir: str | Path | None, reason: str) -> dict[str, Any]:
    """The record of a skipped `direct`: <out_dir>/direct/skipped.json and <metrics_dir>/direct.json."""
    summary = {"policy": NAME, "skipped": reason, "source_simulator": {"backend": params.sim.backend}}
    folder = Path(out_dir) / NAME
    shutil.rmtree(folder, ignore_errors=True)  # no policy of an earlier run stands in for this one
    write_json_atomic(folder / SKIPPED, summary)
    if metrics_dir is not None:
        headline.write_record(Path(metrics_dir) / f"{NAME}.json", summary, headline.train)
    return summary
