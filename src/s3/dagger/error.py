"""A distilled model's open-loop error on a round's rows: how wrong it is where the policy drives.

    model_error(model_folder, rollouts_dir, horizon_s=2.0, stride=5) -> {ade_1s, ade_2s, fde_2s, windows, ...}

The same measure as distillation's test metrics (s3.dynamics.metrics: windows of history K and a 2-s
open-loop rollout, every `stride` rows), over every episode of `rollouts_dir`. On round k's rows, the
model that trained round k's policy shows its error on that policy's own state distribution (DAgger's
point); after re-distillation on them, the new model's error on round k + 1's rows shows what it bought.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from s3.dynamics.checkpoint import load_checkpoint
from s3.dynamics.dataset import RolloutArrays, WindowTensors
from s3.dynamics.metrics import horizon_summary, rollout_errors


@torch.inference_mode()
def model_error(
    model_folder: str | Path, rollouts_dir: str | Path, horizon_s: float = 2.0, stride: int = 5
) -> dict[str, Any]:
    """ADE/FDE (m), yaw and speed error at 0.5-3 s (as far as `horizon_s` reaches) over the windows of every episode."""
    model = load_checkpoint(model_folder)
    data = RolloutArrays.from_dir(rollouts_dir)
    horizon = int(round(horizon_s / data.dt))
    index = data.windows(np.unique(data.episode), model.history, horizon, stride=stride)
    if len(index) == 0:
        raise ValueError(f"{rollouts_dir}: no window of {model.history} + {horizon} steps (episodes too short)")
    err = rollout_errors(model, WindowTensors(data, model.history, horizon), index)
    summary = {k: v for k, v in horizon_summary(err, data.dt).items() if v is not None}
    return {"model": str(model_folder), "rollouts": str(rollouts_dir), "windows": int(len(index)), **summary}
