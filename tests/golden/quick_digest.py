"""What the quick pipeline produced, as content digests.

    python tests/golden/quick_digest.py <workspace> [--write]   # print (or pin in quick.json for this kind)

Each output is reduced to its content: the rollout rows, the model and policy tensors, the
evaluation runs' outcomes (`direct`, trained for a wall-clock budget, is left out). File bytes
are stable too now (tests/test_byte_stable.py), but content digests also survive a change of file
format that keeps the numbers. tests/test_pipeline.py compares a fresh quick run with quick.json.

The trained tensors are bit-for-bit only on one kind of CPU (the math libraries pick other kernels
on another), so quick.json holds one set of digests per machine kind (`machine_kind()`: the CPU
family, "Intel Xeon" or "AMD EPYC"); rollouts and baseline laps agree across kinds.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EVAL_KEYS = ("track", "condition", "start_index", "seed", "reason", "steps", "completed", "distance_m")


def machine_kind() -> str:
    """'AMD EPYC', 'Intel Xeon', or the CPU's model name as /proc/cpuinfo gives it ('unknown')."""
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        return "unknown"
    return next((kind for kind in ("AMD EPYC", "Intel Xeon") if kind.split()[1] in model), model)


def pinned() -> dict[str, str] | None:
    """The digests pinned for this machine kind (None: none pinned yet)."""
    return json.loads((HERE / "quick.json").read_text()).get(machine_kind())


def _tensors(path: Path) -> str:
    from safetensors.numpy import load_file

    h = hashlib.sha256()
    for name, value in sorted(load_file(str(path)).items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()[:16]


def _rows(path: Path) -> str:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    h = hashlib.sha256()
    for name in sorted(table.column_names):
        values = table.column(name).to_numpy()
        h.update(name.encode())
        h.update(
            np.ascontiguousarray(values).tobytes() if values.dtype != object else "\0".join(map(str, values)).encode()
        )
    return h.hexdigest()[:16]


def digest(ws: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for shard in sorted((ws / "data/rollouts").glob("*.parquet")):
        out[f"rollouts/{shard.name}"] = _rows(shard)
    for f in sorted((ws / "models").glob("*/model.safetensors")):
        out[f"models/{f.parent.name}"] = _tensors(f)
    for f in sorted(
        [*(ws / "policies").glob("*/policy.safetensors"), *(ws / "policies").glob("*/seeds/*/policy.safetensors")]
    ):
        name = f.parent.relative_to(ws / "policies").as_posix()
        if not name.startswith("direct"):  # wall-clock budget: not reproducible
            out[f"policies/{name}"] = _tensors(f)
    for f in sorted((ws / "records/eval").glob("*.json")):
        if f.stem == "direct":
            continue
        ev = json.loads(f.read_text())
        runs = [{k: r.get(k) for k in EVAL_KEYS} for r in ev["runs"]]
        out[f"eval/{f.stem}"] = hashlib.sha256(json.dumps(runs, sort_keys=True).encode()).hexdigest()[:16]
    return out


if __name__ == "__main__":
    d = digest(Path(sys.argv[1]))
    print(json.dumps(d, indent=1))
    if "--write" in sys.argv:
        kinds = json.loads((HERE / "quick.json").read_text())
        (HERE / "quick.json").write_text(json.dumps({**kinds, machine_kind(): d}, indent=1, sort_keys=True) + "\n")
