"""Rollout shards and their manifest: written atomically, read back only after validation.

Nothing downstream may train on a dataset that is truncated, bit-flipped, of another schema or
out of step with its manifest, so every read checks, and a failure is one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from s3.data.schema import COLUMNS, SCHEMA_VERSION, arrow_schema
from s3.io import atomic_path, write_json_atomic

MANIFEST = "manifest.json"


class RolloutError(ValueError):
    """A rollout file is missing, corrupted or inconsistent; the message names it."""


def shard_name(index: int) -> str:
    """File name of shard `index`: sorted names give episode order."""
    return f"shard-{index:05d}.parquet"


def sha256_file(path: Path) -> str:
    """Content hash used by the manifest to detect a changed or corrupted shard."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def shard_bytes(df: pd.DataFrame, metadata: dict[str, str], name: str = "shard") -> bytes:
    """One shard as Parquet bytes with the project schema and provenance metadata (`name` for errors)."""
    numeric = df.select_dtypes(include=[np.number])
    if not np.isfinite(numeric.to_numpy(dtype=np.float64)).all():
        raise RolloutError(f"{name}: refusing to write non-finite values")
    schema = arrow_schema()
    table = pa.Table.from_pandas(df[list(COLUMNS)], schema=schema, preserve_index=False)
    table = table.replace_schema_metadata({**schema.metadata, **{k.encode(): v.encode() for k, v in metadata.items()}})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a shard's bytes (shard_bytes) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_shard(path: Path, df: pd.DataFrame, metadata: dict[str, str]) -> None:
    """Write one shard atomically with the project schema and provenance metadata."""
    write_bytes_atomic(path, shard_bytes(df, metadata, str(path)))


def shard_metadata(path: Path) -> dict[str, str]:
    """The provenance metadata of a shard, or {} if it cannot be read."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return {}
    return {k.decode(): v.decode() for k, v in meta.items()}


def read_shard(path: Path) -> pd.DataFrame:
    """Read and validate one shard against the project schema."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise RolloutError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0][:120]})") from None
    names = table.schema.names
    missing = [c for c in COLUMNS if c not in names]
    extra = [c for c in names if c not in COLUMNS]
    if missing or extra:
        raise RolloutError(f"{path}: columns differ from the rollout schema (missing {missing}, extra {extra})")
    version = (table.schema.metadata or {}).get(b"s3_schema_version", b"?").decode()
    if version != str(SCHEMA_VERSION):
        raise RolloutError(f"{path}: schema version {version}, this s3 reads version {SCHEMA_VERSION}")
    df = table.to_pandas()
    numeric = df.select_dtypes(include=[np.number]).to_numpy(dtype=np.float64)
    if not np.isfinite(numeric).all():
        raise RolloutError(f"{path}: contains NaN or inf")
    return df


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    """Write the manifest atomically (the last file a collection writes)."""
    return write_json_atomic(folder / MANIFEST, manifest)


def read_manifest(folder: Path) -> dict[str, Any]:
    """Read the manifest of a rollout folder."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise RolloutError(f"{path}: no manifest; run `s3 collect` first")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RolloutError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def load_rollouts(folder: str | Path) -> pd.DataFrame:
    """All rows of a collected dataset, after checking every shard against the manifest."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    frames = []
    for entry in manifest.get("shards", []):
        path = folder / entry["file"]
        if not path.exists():
            raise RolloutError(f"{path}: listed in {folder / MANIFEST} but missing")
        if sha256_file(path) != entry["sha256"]:
            raise RolloutError(f"{path}: content differs from {folder / MANIFEST} (changed or corrupted)")
        df = read_shard(path)
        if len(df) != entry["rows"]:
            raise RolloutError(f"{path}: {len(df)} rows, manifest says {entry['rows']}")
        frames.append(df)
    if not frames:
        raise RolloutError(f"{folder / MANIFEST}: lists no shards")
    out = pd.concat(frames, ignore_index=True)
    if len(out) != manifest.get("rows"):
        raise RolloutError(f"{folder / MANIFEST}: says {manifest.get('rows')} rows, shards hold {len(out)}")
    return out
