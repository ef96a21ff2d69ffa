"""Predictive accuracy on the held-out test episodes.

- one-step RMSE per state dimension (every test window);
- open-loop rollouts started every `eval_stride` steps: ADE/FDE of the position and the yaw and
  speed errors at 0.5, 1, 2, 3 s, overall and by surface: `asphalt` (mu_mean >= 0.5 on every row
  of the window, history included), `ice` (mu_mean < 0.5 on every row), `transition` (both);
- divergence: 10 s rollouts from test states (recorded commands, the last one held past an
  episode's end) that produce NaN/inf or a speed above 100 m/s;
- throughput: batched `step` calls per second x N at N = 1, 256, 4096 on the model's device;
- the floor that the midpoint pose integration alone puts under the position error.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor

from s3.dynamics.base import STATE_NAMES, DynamicsModel, integrate_pose
from s3.dynamics.dataset import RolloutArrays, WindowTensors

HORIZONS_S = (0.5, 1.0, 2.0, 3.0)
SPLITS = ("all", "asphalt", "ice", "transition")
ICE_MU = 0.5
DIVERGED_SPEED = 100.0


def _to(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _wrap(a: Tensor) -> Tensor:
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


@torch.inference_mode()
def rollout_errors(
    model: DynamicsModel, tensors: WindowTensors, index: np.ndarray, chunk: int = 4096
) -> dict[str, np.ndarray]:
    """Open-loop errors [W, H] (position m, |yaw| rad, |speed| m/s) and one-step errors [W, S]."""
    device = next(iter(model.buffers())).device
    out: dict[str, list[np.ndarray]] = {"pos": [], "yaw": [], "speed": [], "one_step": [], "pred_xy": []}
    for i in range(0, len(index), chunk):
        b = _to(tensors.gather(torch.from_numpy(index[i : i + chunk])), device)
        states, poses = model.rollout(
            b["hist_states"], b["hist_actions"], b["actions"], b["mu"] if model.use_mu else None
        )
        true = b["poses"]
        out["pos"].append((poses[..., :2] - true[..., :2]).norm(dim=-1).cpu().numpy())
        out["yaw"].append(_wrap(poses[..., 2] - true[..., 2]).abs().cpu().numpy())
        out["speed"].append((states[..., :2].norm(dim=-1) - b["states"][..., :2].norm(dim=-1)).abs().cpu().numpy())
        out["one_step"].append((states[:, 0] - b["states"][:, 0]).cpu().numpy())
        out["pred_xy"].append(poses[..., :2].cpu().numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def surface_labels(data: RolloutArrays, index: np.ndarray, history: int, horizon: int) -> np.ndarray:
    """'asphalt' / 'ice' / 'transition' for each window (rows t-K+1 .. t+H)."""
    rows = index[:, None] + np.arange(-history + 1, horizon + 1)
    ice = data.mu[rows] < ICE_MU
    return np.where(ice.all(1), "ice", np.where(~ice.any(1), "asphalt", "transition"))


def horizon_summary(err: dict[str, np.ndarray], dt: float) -> dict[str, float | None]:
    """ADE/FDE, yaw and speed errors at HORIZONS_S, averaged over windows (None if no window)."""
    res: dict[str, float | None] = {}
    n = len(err["pos"])
    for h in HORIZONS_S:
        k = int(round(h / dt))
        tag = f"{h:g}s"
        if n == 0 or k < 1 or k > err["pos"].shape[1]:
            res |= {f"ade_{tag}": None, f"fde_{tag}": None, f"yaw_{tag}": None, f"speed_{tag}": None}
            continue
        res[f"ade_{tag}"] = float(err["pos"][:, :k].mean())
        res[f"fde_{tag}"] = float(err["pos"][:, k - 1].mean())
        res[f"yaw_{tag}"] = float(err["yaw"][:, k - 1].mean())
        res[f"speed_{tag}"] = float(err["speed"][:, k - 1].mean())
    return res


@torch.inference_mode()
def divergence_rate(
    model: DynamicsModel, data: RolloutArrays, episodes: np.ndarray, history: int, steps: int, stride: int
) -> dict[str, Any]:
    """Share of `steps`-long open-loop rollouts (commands past an episode's end held) that blow up."""
    device = next(iter(model.buffers())).device
    idx = data.windows(episodes, history, 0, stride=stride)
    if len(idx) == 0:
        return {"rate": None, "rollouts": 0, "seconds": steps * data.dt}
    fut = np.minimum(idx[:, None] + np.arange(steps), data.seg_end[idx][:, None])  # [W, T] held at the end
    t = torch.from_numpy(idx)
    hs = torch.from_numpy(data.states)[t[:, None] + torch.arange(-history + 1, 1)].to(device)
    ha = torch.from_numpy(data.actions)[t[:, None] + torch.arange(-history, 0)].to(device)
    acts = torch.from_numpy(data.actions[fut]).to(device)
    mu = torch.from_numpy(data.mu[fut]).to(device) if model.use_mu else None
    bad = torch.zeros(len(idx), dtype=torch.bool, device=device)
    for i in range(0, len(idx), 4096):
        s = slice(i, i + 4096)
        states, poses = model.rollout(hs[s], ha[s], acts[s], None if mu is None else mu[s])
        finite = torch.isfinite(states).all(dim=(1, 2)) & torch.isfinite(poses).all(dim=(1, 2))
        fast = (states[..., :2].norm(dim=-1) > DIVERGED_SPEED).any(dim=1)
        bad[s] = ~finite | fast
    return {"rate": float(bad.float().mean()), "rollouts": int(len(idx)), "seconds": steps * data.dt}


@torch.inference_mode()
def throughput(
    model: DynamicsModel, data: RolloutArrays, index: np.ndarray, sizes: list[int], min_seconds: float = 0.3
) -> dict[str, float]:
    """Batched model steps per second (N x calls / s) at each N, on the model's device."""
    device = next(iter(model.buffers())).device
    tensors = WindowTensors(data, model.history, 1)
    res = {}
    for n in sizes:
        pick = torch.from_numpy(index[np.arange(n) % len(index)])
        b = _to(tensors.gather(pick), device)
        args = (b["hist_states"], b["hist_actions"], b["actions"][:, 0], b["mu"][:, 0] if model.use_mu else None)
        model.step(*args)  # warm-up
        calls, t0 = 0, time.perf_counter()
        while True:
            model.step(*args)
            calls += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            el = time.perf_counter() - t0
            if el >= min_seconds and calls >= 3:
                break
        res[str(n)] = n * calls / el
    return res


def pose_floor(tensors: WindowTensors, index: np.ndarray, dt: float) -> np.ndarray:
    """Position error [W, H] of integrating the TRUE body-frame states with the midpoint rule."""
    b = tensors.gather(torch.from_numpy(index))
    s = torch.cat([b["hist_states"][:, -1:], b["states"]], dim=1)
    pose = torch.zeros(len(index), 3)
    err = []
    for h in range(b["states"].shape[1]):
        pose = integrate_pose(pose, s[:, h], s[:, h + 1], dt)
        err.append((pose[:, :2] - b["poses"][:, h, :2]).norm(dim=-1))
    return torch.stack(err, 1).numpy()


def evaluate(
    model: DynamicsModel,
    data: RolloutArrays,
    test_episodes: np.ndarray,
    eval_stride: int = 5,
    divergence_seconds: float = 10.0,
    throughput_sizes: list[int] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """All metrics on `test_episodes`; returns (metrics JSON dict, arrays for the plots)."""
    model.eval()
    k = model.history
    horizon = int(round(max(HORIZONS_S) / data.dt))
    tensors = WindowTensors(data, k, horizon)
    index = data.windows(test_episodes, k, horizon, stride=eval_stride)
    if len(index) == 0:
        raise ValueError(f"no test window of {k} + {horizon} steps: test episodes are too short for 3 s rollouts")
    one = data.windows(test_episodes, k, 1)
    one_err = rollout_errors(model, WindowTensors(data, k, 1), one)["one_step"]
    err = rollout_errors(model, tensors, index)
    labels = surface_labels(data, index, k, horizon)
    rollout, curves = {}, {"t": [float((h + 1) * data.dt) for h in range(horizon)]}
    for split in SPLITS:
        m = np.ones(len(index), bool) if split == "all" else labels == split
        sub = {key: v[m] for key, v in err.items()}
        rollout[split] = {"windows": int(m.sum()), **horizon_summary(sub, data.dt)}
        curves[split] = sub["pos"].mean(0).tolist() if m.any() else None
    floor = horizon_summary(
        {"pos": pose_floor(tensors, index, data.dt), "yaw": err["yaw"] * 0, "speed": err["speed"] * 0}, data.dt
    )
    metrics = {
        "family": model.family,
        "dt": data.dt,
        "history": k,
        "uses_friction_label": model.use_mu,
        "test_episodes": int(len(np.unique(test_episodes))),
        "test_rows": int(data.rows_of(test_episodes).sum()),
        "one_step_rmse": dict(zip(STATE_NAMES, np.sqrt((one_err.astype(np.float64) ** 2).mean(0)).tolist())),
        "rollout": rollout,
        "error_vs_horizon": curves,
        "divergence": divergence_rate(
            model,
            data,
            test_episodes,
            k,
            int(round(divergence_seconds / data.dt)),
            stride=max(1, int(round(2.0 / data.dt))),
        ),
        "throughput_steps_per_s": throughput(model, data, one, throughput_sizes or [1, 256, 4096]),
        "device": str(next(iter(model.buffers())).device),
        "pose_integration_floor": {key: v for key, v in floor.items() if key.startswith(("ade", "fde"))},
    }
    plot_data = {"index": index, "labels": labels, "pred_xy": err["pred_xy"], "horizon": horizon}
    return metrics, plot_data
