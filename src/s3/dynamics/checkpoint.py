"""models/<family>/: weights and normalisation stats in safetensors, a JSON that says what they are.

    model.safetensors  every parameter and buffer (normalisation statistics included); no pickle
    model.json         family, format and data-schema versions, s3 version, model config, params,
                       and `ensemble`: M for an ensemble of M members (s3.dynamics.ensemble), whose
                       weights are members.<m>.* beside the shared normalisation (absent: one model)
Loading checks the family and the versions and fails with one line naming the file.

The weights carry one metadata entry (the family): safetensors 0.8 writes its metadata map in a
random order (safetensors issue #584), so two entries made the same weights a different file
one save in two, and a different sha256 for DVC and for the seed and resume fingerprints.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from s3 import __version__
from s3.data.schema import SCHEMA_VERSION
from s3.dynamics.base import ACTION_NAMES, STATE_NAMES, DynamicsModel
from s3.dynamics.ensemble import Ensemble
from s3.dynamics.registry import build_model
from s3.io import atomic_path, write_json_atomic

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
META = "model.json"


class CheckpointError(ValueError):
    """A checkpoint is missing, of another family or version, or inconsistent; names the file."""


def save_checkpoint(
    model: DynamicsModel, folder: str | Path, params: Any = None, extra: dict[str, Any] | None = None
) -> Path:
    """Write `folder`/model.safetensors then `folder`/model.json (both atomically); returns folder."""
    folder = Path(folder)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(state, str(tmp), metadata={"family": model.family})  # one entry: byte-stable (module docstring)
    meta = {
        "family": model.family,
        "format_version": FORMAT_VERSION,
        "schema_version": SCHEMA_VERSION,
        "s3_version": __version__,
        "state": list(STATE_NAMES),
        "action": list(ACTION_NAMES),
        "config": model.config(),
        **({"ensemble": len(model)} if isinstance(model, Ensemble) else {}),
        "params": params.model_dump(mode="json") if hasattr(params, "model_dump") else params,
        "extra": extra or {},
    }
    write_json_atomic(folder / META, meta)
    return folder


def read_meta(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / META
    if not path.exists():
        raise CheckpointError(f"{path}: no checkpoint here; run `s3 distill` first")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def load_checkpoint(folder: str | Path, family: str | None = None, device: str | torch.device = "cpu") -> DynamicsModel:
    """The model saved in `folder`, in eval mode on `device`; `family` (if given) must match."""
    folder = Path(folder)
    meta = read_meta(folder)
    path = folder / META
    if family is not None and meta.get("family") != family:
        raise CheckpointError(f"{path}: holds a {meta.get('family')!r} model, expected {family!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format {meta.get('format_version')}, this s3 reads format {FORMAT_VERSION}"
        )
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise CheckpointError(
            f"{path}: trained on rollout schema {meta.get('schema_version')}, this s3 uses schema {SCHEMA_VERSION}"
        )
    if meta.get("s3_version") != __version__:
        warnings.warn(f"{path}: written by s3 {meta.get('s3_version')}, loading with s3 {__version__}", stacklevel=2)
    wpath = folder / WEIGHTS
    try:
        state = load_file(str(wpath), device="cpu")
        with safe_open(str(wpath), framework="pt") as f:
            wfamily = (f.metadata() or {}).get("family")
    except (FileNotFoundError, SafetensorError, OSError) as e:
        raise CheckpointError(f"{wpath}: cannot read the weights ({str(e).splitlines()[0][:120]})") from None
    if wfamily != meta["family"]:
        raise CheckpointError(f"{wpath}: holds {wfamily!r} weights but {META} says {meta['family']!r}")
    try:
        members = int(meta.get("ensemble", 1))
        model = build_model(meta["family"], meta["config"])
        if members > 1:
            model = Ensemble([model, *(build_model(meta["family"], meta["config"]) for _ in range(members - 1))])
        model.load_state_dict(state, strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(
            f"{wpath}: does not match the model described in {META} ({str(e).splitlines()[0][:160]})"
        ) from None
    return model.to(device).eval()
