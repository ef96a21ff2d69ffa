"""Atomic file output and workspace locks: a crash never leaves a half-written artefact."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)


class WorkspaceBusy(RuntimeError):
    """Another s3 process holds the lock on this output folder."""


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync and rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs are ordinary files
        os.replace(tmp_path, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power cut
        finally:
            os.close(dir_fd)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write text so that readers see either the old file or the whole new one."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write JSON atomically; NaN/inf are refused rather than written as invalid JSON."""
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


def json_safe(x: Any) -> Any:
    """NaN/inf -> None, numpy scalars -> Python: a diverged metric reads as null in valid JSON."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, float) or (hasattr(x, "dtype") and getattr(x, "ndim", 1) == 0 and x.dtype.kind == "f"):
        return float(x) if math.isfinite(x) else None
    if hasattr(x, "dtype") and getattr(x, "ndim", 1) == 0 and x.dtype.kind in "iu":
        return int(x)
    return x


@contextlib.contextmanager
def workspace_lock(folder: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive, non-blocking lock on `folder` for the duration of a stage."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock_file = folder / ".s3_lock"
    with open(lock_file, "w") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkspaceBusy(
                f"{folder}: another `{what}` is already running on this folder; wait for it to finish"
            ) from None
        try:
            f.write(f"{os.getpid()}\n")
            f.flush()
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
