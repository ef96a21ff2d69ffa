"""Rollout shards -> windowed tensors: history K, next H commands and targets, split by episode.

A window at row t (the "current" row) holds
    hist_states  [K, S]  rows t-K+1 .. t        hist_actions [K, A]  rows t-K .. t-1
    actions      [H, A]  rows t .. t+H-1        states       [H, S]  rows t+1 .. t+H
    mu           [H]     rows t .. t+H-1        poses        [H, 3]  rows t+1 .. t+H, relative to row t
and never crosses an episode (or a gap in its step counter). Episodes are split into
train/val/test deterministically from the seed; normalisation statistics come from the
training episodes only and travel with the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, RandomSampler

from s3.data.schema import COMMAND_COLUMNS, STATE_COLUMNS
from s3.dynamics.params import DistillParams


class DatasetError(ValueError):
    """The rollouts cannot be turned into training windows; the message says why."""


@dataclass
class RolloutArrays:
    """All rows, sorted by (episode, step), as flat arrays."""

    states: np.ndarray  # [R, S] float32
    actions: np.ndarray  # [R, A] float32
    mu: np.ndarray  # [R] float32 (mu_mean)
    pose: np.ndarray  # [R, 3] float64 (x, y, yaw)
    episode: np.ndarray  # [R] int64
    seg_start: np.ndarray  # [R] first row of the row's contiguous segment
    seg_end: np.ndarray  # [R] last row of the row's contiguous segment
    dt: float
    extra: np.ndarray | None = None  # episode ids read from extra folders (from_dirs): training rows only

    @classmethod
    def from_frame(cls, df: pd.DataFrame, dt: float | None = None) -> RolloutArrays:
        missing = [
            c
            for c in ["episode", "step", "time", "x", "y", "yaw", "mu_mean", *STATE_COLUMNS, *COMMAND_COLUMNS]
            if c not in df
        ]
        if missing:
            raise DatasetError(f"rollouts lack columns {missing}")
        df = df.sort_values(["episode", "step"], kind="stable")
        ep = df["episode"].to_numpy(np.int64)
        step = df["step"].to_numpy(np.int64)
        new = np.ones(len(df), dtype=bool)
        new[1:] = (ep[1:] != ep[:-1]) | (step[1:] != step[:-1] + 1)
        seg_id = np.cumsum(new) - 1
        starts = np.flatnonzero(new)
        ends = np.append(starts[1:], len(df)) - 1
        if dt is None:
            t = df["time"].to_numpy(np.float64)
            d = np.diff(t)[~new[1:]]
            if len(d) == 0:
                raise DatasetError("rollouts have no consecutive rows: cannot infer the control period")
            dt = float(np.median(d))
        return cls(
            states=np.array(df[STATE_COLUMNS].to_numpy(np.float32)),
            actions=np.array(df[COMMAND_COLUMNS].to_numpy(np.float32)),
            mu=np.array(df["mu_mean"].to_numpy(np.float32)),
            pose=np.array(df[["x", "y", "yaw"]].to_numpy(np.float64)),
            episode=ep,
            seg_start=starts[seg_id],
            seg_end=ends[seg_id],
            dt=float(dt),
        )

    @classmethod
    def from_dir(cls, folder: str | Path) -> RolloutArrays:
        """Read `folder` (shards + manifest.json) through the collect stage's validating reader."""
        from s3.data.rollouts import load_rollouts, read_manifest

        df = load_rollouts(folder)
        dt = read_manifest(Path(folder)).get("control_dt")
        return cls.from_frame(df, float(dt) if dt else None)

    @classmethod
    def from_dirs(cls, folders: list[str | Path]) -> RolloutArrays:
        """Several rollout folders as one dataset: the same control period, no episode id in two of them; the
        episodes of all but the first are `extra` (RolloutDataModule puts them in the training split)."""
        from s3.data.rollouts import load_rollouts, read_manifest

        frames, dts, seen = [], set(), {}
        for folder in folders:
            df = load_rollouts(folder)
            ids = set(np.unique(df["episode"].to_numpy(np.int64)).tolist())
            for other, its in seen.items():
                if ids & its:
                    raise DatasetError(f"{folder} and {other} share episode ids (e.g. {min(ids & its)})")
            seen[str(folder)] = ids
            dts.add(read_manifest(Path(folder)).get("control_dt"))
            frames.append(df)
        if len(dts) != 1:
            names = [str(f) for f in folders]
            raise DatasetError(f"rollout folders {names} differ in control period: {sorted(map(str, dts))}")
        dt = dts.pop()
        out = cls.from_frame(pd.concat(frames, ignore_index=True), float(dt) if dt else None)
        out.extra = np.array(sorted(set().union(*list(seen.values())[1:])), dtype=np.int64)
        return out

    def __len__(self) -> int:
        return len(self.episode)

    def rows_of(self, episodes: np.ndarray) -> np.ndarray:
        """Boolean mask [R] of the rows of `episodes`."""
        return np.isin(self.episode, episodes)

    def windows(self, episodes: np.ndarray, history: int, horizon: int, stride: int = 1) -> np.ndarray:
        """Current-row indices t of every full window inside `episodes` (every `stride`-th)."""
        t = np.arange(len(self))
        ok = self.rows_of(episodes) & (t - history >= self.seg_start) & (t + horizon <= self.seg_end)
        idx = np.flatnonzero(ok)
        if stride > 1:
            idx = idx[(idx - self.seg_start[idx] - history) % stride == 0]
        return idx


def split_episodes(episodes: np.ndarray, val_fraction: float, test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """Deterministic split of episode ids into train/val/test (no episode in two parts)."""
    ids = np.unique(episodes)
    if len(ids) < 3:
        raise DatasetError(f"need at least 3 episodes to split train/val/test, got {len(ids)}")
    perm = np.random.default_rng(seed).permutation(ids)
    n_test = max(1, int(round(test_fraction * len(ids))))
    n_val = max(1, int(round(val_fraction * len(ids))))
    if n_test + n_val >= len(ids):
        n_test, n_val = 1, 1
    return {
        "test": np.sort(perm[:n_test]),
        "val": np.sort(perm[n_test : n_test + n_val]),
        "train": np.sort(perm[n_test + n_val :]),
    }


def compute_stats(data: RolloutArrays, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Normalisation statistics from the rows in mask `rows` (the training episodes)."""
    idx = np.flatnonzero(rows)
    pairs = idx[idx < data.seg_end[idx]]
    delta = data.states[pairs + 1] - data.states[pairs]

    def std(x: np.ndarray) -> np.ndarray:
        return np.maximum(x.std(axis=0), 1e-3).astype(np.float32)

    return {
        "state_mean": data.states[idx].mean(0),
        "state_std": std(data.states[idx]),
        "action_mean": data.actions[idx].mean(0),
        "action_std": std(data.actions[idx]),
        "delta_mean": delta.mean(0),
        "delta_std": std(delta),
        "mu_mean": np.float32(data.mu[idx].mean()),
        "mu_std": np.float32(max(data.mu[idx].std(), 0.05)),
    }


class WindowTensors:
    """The rollout arrays as torch tensors, with a batched window gather."""

    def __init__(self, data: RolloutArrays, history: int, horizon: int) -> None:
        self.states = torch.from_numpy(data.states)
        self.actions = torch.from_numpy(data.actions)
        self.mu = torch.from_numpy(data.mu)
        self.pose = torch.from_numpy(data.pose)
        self.k, self.h = history, horizon
        self.off_hs = torch.arange(-history + 1, 1)
        self.off_ha = torch.arange(-history, 0)
        self.off_f = torch.arange(0, horizon)

    def gather(self, t: Tensor) -> dict[str, Tensor]:
        """Current-row indices t [B] -> the batch dict described in the module docstring."""
        t = t.long()[:, None]
        fut = t + 1 + self.off_f  # [B, H]
        p0 = self.pose[t[:, 0]]  # [B, 3] float64
        d = self.pose[fut] - p0[:, None]  # [B, H, 3]
        c, s = torch.cos(p0[:, 2])[:, None], torch.sin(p0[:, 2])[:, None]
        rel = torch.stack(
            [
                c * d[..., 0] + s * d[..., 1],
                -s * d[..., 0] + c * d[..., 1],
                torch.remainder(d[..., 2] + torch.pi, 2 * torch.pi) - torch.pi,
            ],
            -1,
        )
        rel[..., 2] = torch.cumsum(
            torch.remainder(torch.diff(rel[..., 2], dim=1, prepend=rel.new_zeros(len(t), 1)) + torch.pi, 2 * torch.pi)
            - torch.pi,
            1,
        )
        return {
            "hist_states": self.states[t + self.off_hs],  # [B, K, S]
            "hist_actions": self.actions[t + self.off_ha],  # [B, K, A]
            "actions": self.actions[t + self.off_f],  # [B, H, A]
            "states": self.states[fut],  # [B, H, S]
            "mu": self.mu[t + self.off_f],  # [B, H]
            "poses": rel.float(),  # [B, H, 3] in the frame of row t, yaw unwrapped
        }


class WindowDataset(Dataset):
    """Map-style dataset over window indices; `__getitems__` gathers a whole batch at once."""

    def __init__(self, tensors: WindowTensors, index: np.ndarray) -> None:
        self.tensors, self.index = tensors, torch.from_numpy(np.asarray(index, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.index)

    def __getitems__(self, items: list[int]) -> dict[str, Tensor]:
        return self.tensors.gather(self.index[torch.as_tensor(items, dtype=torch.long)])

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return {k: v[0] for k, v in self.__getitems__([i]).items()}


def _identity(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    return batch


def _spread(index: np.ndarray, n: int) -> np.ndarray:
    """At most n entries of `index`, evenly spread (deterministic)."""
    if len(index) <= n:
        return index
    return index[np.linspace(0, len(index) - 1, n).round().astype(np.int64)]


class RolloutDataModule(L.LightningDataModule):
    """Windows of the rollouts for Lightning: split by episode, stats from the training split."""

    def __init__(self, source: str | Path | pd.DataFrame | RolloutArrays, params: DistillParams) -> None:
        super().__init__()
        self.source, self.p = source, params
        self.order_seed = params.seed  # the training windows' order; an ensemble member sets its own
        self.data: RolloutArrays | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.data is not None:
            return
        p = self.p
        src = self.source
        if isinstance(src, RolloutArrays):
            data = src
        elif isinstance(src, pd.DataFrame):
            data = RolloutArrays.from_frame(src)
        elif p.extra_rollouts:
            data = RolloutArrays.from_dirs([src, *p.extra_rollouts])
        else:
            data = RolloutArrays.from_dir(src)
        base = data.episode if data.extra is None else data.episode[~np.isin(data.episode, data.extra)]
        self.split = split_episodes(base, p.val_fraction, p.test_fraction, p.seed)  # as without the extra folders
        if data.extra is not None:
            self.split["train"] = np.concatenate([self.split["train"], data.extra])
        self.stats = compute_stats(data, data.rows_of(self.split["train"]))
        self.tensors = WindowTensors(data, p.history, p.horizon)
        self.train_index = data.windows(self.split["train"], p.history, p.horizon)
        self.val_index = _spread(data.windows(self.split["val"], p.history, p.horizon), p.val_windows)
        self.test_index = _spread(data.windows(self.split["test"], p.history, p.horizon), p.val_windows)
        for name, idx in [("train", self.train_index), ("validation", self.val_index), ("test", self.test_index)]:
            if len(idx) == 0:
                raise DatasetError(
                    f"no {name} window of history {p.history} + horizon {p.horizon} steps fits in any {name} episode; "
                    "use longer episodes or a shorter history/horizon"
                )
        self.data = data

    @property
    def dt(self) -> float:
        assert self.data is not None, "call setup() first"
        return self.data.dt

    def train_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Consecutive training-row pairs (s0, a0, s1, mu0) for least-squares fits."""
        d = self.data
        idx = np.flatnonzero(d.rows_of(self.split["train"]))
        idx = idx[idx < d.seg_end[idx]]
        return d.states[idx], d.actions[idx], d.states[idx + 1], d.mu[idx]

    def _loader(self, index: np.ndarray, shuffle: bool) -> DataLoader:
        ds = WindowDataset(self.tensors, index)
        sampler = None
        if shuffle:
            n = len(ds) if self.p.train_windows_per_epoch == 0 else min(len(ds), self.p.train_windows_per_epoch)
            g = torch.Generator().manual_seed(self.order_seed)
            sampler = RandomSampler(ds, replacement=False, num_samples=n, generator=g)
        return DataLoader(
            ds, batch_size=self.p.batch_size, sampler=sampler, shuffle=False, collate_fn=_identity, num_workers=0
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_index, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_index, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_index, shuffle=False)
