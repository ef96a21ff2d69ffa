"""Files that travel with a job when its worker shares no filesystem with the stage (Ray).

    files = pack(folder, ["policy.json", "policy.safetensors"])   # {relative path: bytes}
    with unpacked(files) as tmp: ...                              # a private temporary copy
    unpack(files, folder)                                         # each file written atomically

Paths are relative, POSIX, inside the folder (no '..', not absolute): a job cannot write outside
the folder its stage gives it.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from s3.io import atomic_path

Files = dict[str, bytes]


def pack(folder: str | Path, names: Iterable[str] | None = None) -> Files:
    """`names` (relative paths; missing ones skipped) or every file under `folder`, as bytes."""
    folder = Path(folder)
    if names is None:
        paths = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    else:
        paths = [folder / n for n in names if (folder / n).is_file()]
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths}


def _inside(folder: Path, name: str) -> Path:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ValueError(f"{name!r}: a shipped file's path must be relative and inside its folder")
    return folder.joinpath(*rel.parts)


def unpack(files: Files, folder: str | Path) -> list[Path]:
    """Write every file under `folder`, each atomically; returns the paths written."""
    written = []
    for name, data in sorted(files.items()):
        path = _inside(Path(folder), name)
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
        written.append(path)
    return written


@contextlib.contextmanager
def unpacked(files: Files) -> Iterator[Path]:
    """A temporary folder holding `files`, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="s3-job-") as tmp:
        unpack(files, tmp)
        yield Path(tmp)
