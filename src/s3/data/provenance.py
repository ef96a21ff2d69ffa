"""The collected data's provenance: which params change a row, and the key a dataset is known by.

    data_params(params) -> {seed, sim, collect}: every param that changes a row, none that does not
    data_key(params) -> 16 hex digits: sha256 of data_params, the s3, schema and simulator versions

Equal keys mean byte-equal shards (s3.data.collect keeps a shard only when its key is this run's;
s3.platform.study copies rollouts between workspaces with equal keys).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from s3 import __version__
from s3.config import Params
from s3.data.schema import SCHEMA_VERSION
from s3.sim.backends import sim_backend

# BeamNG params that say where and how patiently to reach the simulator, not what it simulates
BEAMNG_NOT_DATA = {
    "host",
    "port",
    "instances",
    "request_timeout",
    "load_timeout",
    "bng_home",
    "check_position_m",
    "check_heading_deg",
    "check_speed_m_s",
}


def data_params(params: Params) -> dict[str, Any]:
    """Every param that changes a row, and none that does not (worker count, paths, the simulator's address)."""
    return {
        "seed": params.seed,
        "sim": params.sim.model_dump(mode="json", exclude={"beamng": BEAMNG_NOT_DATA}),
        "collect": params.collect.model_dump(mode="json", exclude={"workers", "out_dir", "plot_dir"}),
    }


def data_key(params: Params) -> str:
    """Provenance of the data: data_params, the s3, schema and simulator versions."""
    blob = {
        **data_params(params),
        "s3": __version__,
        "schema": SCHEMA_VERSION,
        "simulator": sim_backend(params.sim).version(),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]
