"""A sliding window over a preallocated buffer: the history of N cars, one row pushed per step."""

from __future__ import annotations

import torch
from torch import Tensor


class Window:
    """A sliding window [N, K, F] over a buffer [N, K + spare, F] (spare >= K).

    `push` writes one row and advances the window; every `spare` pushes the window is copied back
    to the front of the buffer. `view` is the current window, oldest row first (a view into the
    buffer, overwritten by later pushes: clone what you keep).
    """

    def __init__(self, n: int, k: int, f: int, device: torch.device | str = "cpu", spare: int = 64) -> None:
        self.k, self.pos = k, 0
        self.buf = torch.zeros(n, k + max(spare, k), f, device=device)

    @property
    def view(self) -> Tensor:
        return self.buf[:, self.pos : self.pos + self.k]

    def push(self, *parts: Tensor) -> None:
        """Append one row per car ([N, F], or pieces [N, F_i] that make it up), dropping the oldest."""
        if self.pos + self.k == self.buf.shape[1]:  # no room left: restart at the front
            self.buf[:, : self.k - 1] = self.buf[:, self.pos + 1 :]
            self.pos = -1
        row, col = self.buf[:, self.pos + self.k], 0
        for x in parts:
            row[:, col : col + x.shape[1]] = x
            col += x.shape[1]
        self.pos += 1

    def fill(self, ids: Tensor, row: Tensor) -> None:
        """Cars `ids` get `row` [M, F] at every position of their window."""
        self.view[ids] = row[:, None].expand(-1, self.k, -1)
