"""The distill stage: train one model family on the rollouts, save it, measure it, plot it.

    distill(family, rollouts_dir, out_dir, metrics_dir, plots_dir, params) -> metrics dict
writes
    <out_dir>/<family>/model.safetensors + model.json     (out_dir is the models root, e.g. models/)
    <metrics_dir>/<family>.json                           (e.g. records/distill/)
    <plots_dir>/<family>_trajectories.png, <family>_error_vs_horizon.png   (e.g. plots/distill/)
The model files hold no wall-clock figure (the metrics do), so the same data and params give the
same bytes (on CPU, where Lightning trains with deterministic algorithms: checked for each family).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.callbacks import EarlyStopping
from rich.table import Table

from s3 import headline
from s3.dynamics.base import DynamicsModel
from s3.dynamics.bicycle import fit_bicycle
from s3.dynamics.checkpoint import save_checkpoint
from s3.dynamics.dataset import RolloutArrays, RolloutDataModule, WindowTensors
from s3.dynamics.ensemble import Ensemble, calibration, disagreement, member_rollouts
from s3.dynamics.lightning_module import DynamicsLitModule, KeepBest, NonFiniteLossError, ProgressFeed
from s3.dynamics.metrics import ICE_MU, evaluate, surface_labels
from s3.dynamics.params import DistillParams
from s3.dynamics.registry import FAMILIES, new_model
from s3.io import json_safe
from s3.progress import progress


class DistillError(RuntimeError):
    """Training failed (e.g. a non-finite loss); the message says what was kept where."""


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise DistillError("distill.device is 'cuda' but torch sees no CUDA device")
    return torch.device(device)


@contextlib.contextmanager
def _quiet_lightning(quiet: bool) -> Iterator[None]:
    """Silence Lightning's banner lines and the few-workers hint (our batches are pre-gathered)."""
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric", "lightning")]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*treat the `max_epochs`.*")
        warnings.filterwarnings("ignore", ".*LeafSpec.*")
        if quiet:
            for lg in loggers:
                lg.setLevel(logging.WARNING)
        try:
            yield
        finally:
            for lg, lv in zip(loggers, levels):
                lg.setLevel(lv)


def train_model(
    model: DynamicsModel,
    dm: RolloutDataModule,
    params: DistillParams,
    device: torch.device,
    folder: Path,
    label: str | None = None,
) -> dict[str, Any]:
    """Fit a learned family with Lightning; restores the best validation weights into `model`.

    On a non-finite loss, the last good (best validation) weights are written to `folder` and
    DistillError is raised.
    """
    lit = DynamicsLitModule(model, params)
    keep, feed = KeepBest(), ProgressFeed(label or f"distill {model.family}")  # the stage's progress, not Lightning's
    stop = EarlyStopping(monitor="val/multi_step", patience=params.patience, mode="min", check_finite=True)
    t0 = time.perf_counter()
    try:
        with _quiet_lightning(not params.progress_bar):
            trainer = L.Trainer(
                accelerator="gpu" if device.type == "cuda" else "cpu",
                devices=1,
                max_epochs=params.max_epochs,
                max_time=timedelta(minutes=params.max_minutes),
                logger=False,
                enable_checkpointing=False,
                enable_model_summary=False,
                enable_progress_bar=False,
                gradient_clip_val=params.grad_clip,
                num_sanity_val_steps=0,
                deterministic="warn" if device.type == "cuda" else True,
                callbacks=[stop, keep, feed],
            )
            trainer.fit(lit, datamodule=dm)
    except NonFiniteLossError as e:
        feed.close()
        if keep.state is None:
            raise DistillError(f"{e}; no validated weights yet, nothing written") from None
        model.load_state_dict(keep.state)
        save_checkpoint(model.cpu(), folder, params, extra={"stopped": str(e), "best_epoch": keep.best_epoch})
        raise DistillError(f"{e}; kept the last good weights (epoch {keep.best_epoch}) in {folder}") from None
    finally:
        feed.close()
    if keep.state is None:
        raise DistillError(f"{model.family}: training produced no finite validation error")
    model.load_state_dict(keep.state)
    wall = time.perf_counter() - t0
    if stop.stopped_epoch:
        reason = "early stopping"
    elif wall >= 60 * params.max_minutes:
        reason = "time limit"
    else:
        reason = "max_epochs"
    return {
        "wall_s": round(wall, 2),
        "epochs": trainer.current_epoch,
        "steps": trainer.global_step,
        "best_epoch": keep.best_epoch,
        "best_val_multi_step": keep.best,
        "stopped_by": reason,
        "val_history": keep.history,
    }


def _excerpts(
    data: RolloutArrays, test_eps: np.ndarray, plot_data: dict[str, Any], dt: float, n: int = 3
) -> list[dict[str, Any]]:
    """Up to n test-episode excerpts (a friction transition first) with world-frame predictions."""
    picks: list[tuple[int, str]] = []
    kinds = {}
    for ep in test_eps:
        ice = data.mu[data.episode == ep] < ICE_MU
        kinds[int(ep)] = "transition" if ice.any() and not ice.all() else ("ice" if ice.all() else "asphalt")
    for kind in ("transition", "ice", "asphalt", "transition", "asphalt"):
        for ep, k in kinds.items():
            if k == kind and ep not in [p[0] for p in picks]:
                picks.append((ep, kind))
                break
        if len(picks) >= n:
            break
    span = int(round(30.0 / dt))
    out = []
    index, pred = plot_data["index"], plot_data["pred_xy"]
    for ep, kind in picks:
        rows = np.flatnonzero(data.episode == ep)
        ice = data.mu[rows] < ICE_MU
        first = rows[0]
        if kind == "transition":  # start 10 s before the first change of surface
            change = np.flatnonzero(ice[1:] != ice[:-1])
            first = rows[max(0, int(change[0]) - int(round(10.0 / dt)))]
        sel = rows[(rows >= first) & (rows < first + span)]
        segs = []
        for j in np.flatnonzero((index >= sel[0]) & (index <= sel[-1]))[::3]:
            t = index[j]
            x0, y0, yaw0 = data.pose[t]
            c, s = math.cos(yaw0), math.sin(yaw0)
            rel = pred[j]
            world = np.stack([x0 + c * rel[:, 0] - s * rel[:, 1], y0 + s * rel[:, 0] + c * rel[:, 1]], 1)
            segs.append(np.vstack([[x0, y0], world]))
        out.append(
            {
                "title": f"episode {ep} ({kind}), {len(sel) * dt:.0f} s",
                "xy": data.pose[sel, :2],
                "ice": data.mu[sel] < ICE_MU,
                "segments": segs,
            }
        )
    return out


def distill(
    family: str,
    rollouts_dir: Path | pd.DataFrame,
    out_dir: Path,
    metrics_dir: Path,
    plots_dir: Path,
    params: DistillParams,
) -> dict[str, Any]:
    """Train `family` on the rollouts, save models/<family>/, write its metrics and plots."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; choose from {', '.join(FAMILIES)}")
    if params.torch_threads:
        torch.set_num_threads(params.torch_threads)
    out_dir, metrics_dir, plots_dir = Path(out_dir), Path(metrics_dir), Path(plots_dir)
    device = resolve_device(params.device)
    t_start = time.perf_counter()
    with _quiet_lightning(True):
        L.seed_everything(params.seed, workers=True, verbose=False)
    dm = RolloutDataModule(rollouts_dir, params)
    dm.setup()
    s0, a0, s1, mu0 = dm.train_pairs()
    fit = fit_bicycle(s0, a0, s1, dm.dt, mu0 >= ICE_MU)
    folder = out_dir / family
    model, train = _fit_member(family, dm, params, fit, device, folder)
    if params.members(family) > 1:
        model, train = _fit_ensemble(model, train, family, dm, params, fit, device, folder)
    split = {k: [int(e) for e in v] for k, v in dm.split.items()}
    card = {
        k: v for k, v in train.items() if k not in ("val_history", "wall_s")
    }  # the wall clock is the run's: records/distill only
    if "members" in card:
        card["members"] = [{k: v for k, v in t.items() if k != "wall_s"} for t in card["members"]]
    save_checkpoint(model.cpu(), folder, params, extra={"train": json_safe(card), "split": split, "bicycle_fit": fit})
    model = model.to(device).eval()
    with progress(f"distill {family}: test metrics", 2, "parts") as bar:  # tens of seconds: a line every 30 s
        metrics, plot_data = evaluate(
            model, dm.data, dm.split["test"], params.eval_stride, params.divergence_seconds, params.throughput_sizes
        )
        if isinstance(model, Ensemble):
            metrics["ensemble"] = ensemble_metrics(model, dm.data, dm.split["test"], params.eval_stride)
        bar.advance()
        metrics.update(model.distill_summary(lambda: dm.tensors.gather(torch.from_numpy(dm.test_index[:1024])), fit))
        bar.advance()
    metrics["train"] = train
    metrics["split_episodes"] = {k: len(v) for k, v in split.items()}
    metrics["rows"] = len(dm.data)
    metrics["total_wall_s"] = round(time.perf_counter() - t_start, 2)
    metrics = json_safe(metrics)
    headline.write_record(metrics_dir / f"{family}.json", metrics, headline.distill)

    from s3.viz.distill_plots import plot_error_vs_horizon, plot_trajectories

    plot_trajectories(
        plots_dir / f"{family}_trajectories.png",
        _excerpts(dm.data, dm.split["test"], plot_data, dm.dt),
        f"{family}: predicted (3 s open loop) vs true",
    )
    plot_error_vs_horizon(
        plots_dir / f"{family}_error_vs_horizon.png",
        {family: metrics["error_vs_horizon"]},
        f"{family}: open-loop position error",
    )
    return metrics


def _fit_member(
    family: str,
    dm: RolloutDataModule,
    params: DistillParams,
    fit: dict[str, float],
    device: torch.device,
    folder: Path,
    member: int = 0,
) -> tuple[DynamicsModel, dict[str, Any]]:
    """One model of `family`, started from the current torch seed and trained on `dm`'s window order."""
    model = new_model(family, params, dm.dt, fit)
    model.norm.set({k: torch.as_tensor(v) for k, v in dm.stats.items()})
    if model.fitted_only:
        return model, {"wall_s": 0.0, "epochs": 0, "stopped_by": "least squares"}
    m = params.members(family)
    label = f"distill {family}" + (f" member {member + 1}/{m}" if m > 1 else "")
    return model, train_model(model, dm, params, device, folder, label)


def _fit_ensemble(
    first: DynamicsModel,
    first_train: dict[str, Any],
    family: str,
    dm: RolloutDataModule,
    params: DistillParams,
    fit: dict[str, float],
    device: torch.device,
    folder: Path,
) -> tuple[Ensemble, dict[str, Any]]:
    """Members 1 .. M-1 beside `first` (member 0, the single model's weights): member j from seed
    `distill.seed + j`, in its own window order, on the same split; the train summary is member 0's
    with the total wall clock and every member's own summary under `members`."""
    if first.fitted_only:
        raise DistillError(f"distill.{family}.members: {family} is a least-squares fit, its members would be equal")
    members, trains = [first], [first_train]
    try:
        for j in range(1, params.members(family)):
            with _quiet_lightning(True):
                L.seed_everything(params.seed + j, workers=True, verbose=False)
            dm.order_seed = params.seed + j
            # a member that fails keeps its last good weights apart, never as the family's model
            model, train = _fit_member(family, dm, params, fit, device, folder / f"member-{j}", j)
            members.append(model.cpu())
            trains.append(train)
    finally:
        dm.order_seed = params.seed
    summary = {
        **first_train,
        "wall_s": round(sum(t["wall_s"] for t in trains), 2),
        "members": [{k: v for k, v in t.items() if k != "val_history"} for t in trains],
    }
    return Ensemble([m.cpu() for m in members]), summary


@torch.inference_mode()
def ensemble_metrics(
    ens: Ensemble, data: RolloutArrays, test_episodes: np.ndarray, eval_stride: int, horizon_s: float = 2.0
) -> dict[str, Any]:
    """The ensemble's calibration on the test windows: the members' spread of the position after
    `horizon_s` (RMS distance to their mean, m) against the mean prediction's real error there (m),
    per surface (s3.dynamics.ensemble.calibration); and one step's disagreement, mean per surface."""
    k, h = ens.history, int(round(horizon_s / data.dt))
    tensors = WindowTensors(data, k, h)
    index = data.windows(test_episodes, k, h, stride=eval_stride)
    labels = surface_labels(data, index, k, h)
    device = next(iter(ens.buffers())).device
    spread, error, step_dis = [], [], []
    for i in range(0, len(index), 4096):
        b = {key: v.to(device) for key, v in tensors.gather(torch.from_numpy(index[i : i + 4096])).items()}
        xy = member_rollouts(ens, b)[:, :, -1]  # [M, W, 2] after h steps
        centre = xy.mean(dim=0)
        spread.append((xy - centre).norm(dim=-1).pow(2).mean(dim=0).sqrt().cpu().numpy())
        error.append((centre - b["poses"][:, h - 1, :2]).norm(dim=-1).cpu().numpy())
        mu = b["mu"][:, 0] if ens.use_mu else None
        preds = ens.members_step(b["hist_states"], b["hist_actions"], b["actions"][:, 0], mu)
        step_dis.append(disagreement(preds, ens.norm.delta_std).cpu().numpy())
    sp, er, dis = np.concatenate(spread), np.concatenate(error), np.concatenate(step_dis)
    splits = ("all", "asphalt", "ice", "transition")
    return {
        "members": len(ens),
        "horizon_s": horizon_s,
        "calibration": calibration(sp, er, labels, splits),
        "step_disagreement": {
            s: (float(dis[labels == s].mean()) if (labels == s).any() else None) for s in splits if s != "all"
        }
        | {"all": float(dis.mean())},
    }


def distill_many(
    families: list[str], rollouts_dir: Path, out_dir: Path, metrics_dir: Path, plots_dir: Path, params: DistillParams
) -> dict[str, dict[str, Any]]:
    """`distill` each family in turn (rollouts read once per family). The figure of every family's
    error against horizon is the report stage's (plots/report/error_vs_horizon.png): a family's
    stage writes only that family's outputs."""
    return {f: distill(f, rollouts_dir, out_dir, metrics_dir, plots_dir, params) for f in families}


def _fmt(x: Any, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def comparison_table(metrics: dict[str, dict[str, Any]]) -> Table:
    """One row per family: one-step RMSE, FDE at 1 s / 2 s per surface, divergence, throughput."""
    table = Table(title="distill: predictive accuracy on held-out test episodes")
    table.add_column("family")
    table.add_column("RMSE vx / vy / r", justify="right")
    for split in ("all", "asphalt", "ice", "transition"):
        table.add_column(f"FDE 1s / 2s (m)\n{split}", justify="right")
    table.add_column("diverged", justify="right")
    table.add_column("steps/s\nN=4096", justify="right")
    table.add_column("train s", justify="right")
    for fam, m in metrics.items():
        r = m["one_step_rmse"]
        cells = [fam, f"{_fmt(r['vx'], 3)} / {_fmt(r['vy'], 3)} / {_fmt(r['yaw_rate'], 3)}"]
        for split in ("all", "asphalt", "ice", "transition"):
            s = m["rollout"].get(split, {})
            cells.append(f"{_fmt(s.get('fde_1s'))} / {_fmt(s.get('fde_2s'))}" if s.get("windows") else "-")
        div = m["divergence"]["rate"]
        cells.append("-" if div is None else f"{100 * div:.1f}%")
        tp = m["throughput_steps_per_s"].get("4096")
        cells.append("-" if tp is None else f"{tp:,.0f}")
        cells.append(_fmt(m.get("train", {}).get("wall_s"), 0))
        table.add_row(*cells)
    return table
