"""Where episodes start: random starts for training, the pose of a given start.

A random start is a uniformly drawn track of the batch, arc length s0 uniform on the lap, lateral
offset d0 a uniform fraction (up to `init_lateral`) of the half width on a random side, heading
error uniform in +-init_heading [rad] and speed uniform in [init_speed_min, init_speed_max] [m/s],
drawn in that order from one torch generator (so a seed fixes every start).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from s3.task.params import EnvParams
from s3.tracks.torch_track import TrackBatch


class Starts(NamedTuple):
    """M starts [M] each: track index, arc length [m], lateral offset [m], heading error [rad], speed [m/s]."""

    track: Tensor
    s: Tensor
    d: Tensor
    heading: Tensor
    speed: Tensor


def sample_starts(tracks: TrackBatch, n: int, params: EnvParams, generator: torch.Generator) -> Starts:
    """n random starts (see the module docstring)."""
    dev = tracks.device
    rand = lambda: torch.rand(n, device=dev, generator=generator)
    track = torch.randint(0, len(tracks), (n,), device=dev, generator=generator)
    s0 = rand() * tracks.length.index_select(0, track)
    wl, wr = tracks.width_at_located(*tracks._locate(track, s0))
    side = 2.0 * rand() - 1.0
    d0 = params.init_lateral * torch.where(side >= 0, side * wl, side * wr)
    heading = (2.0 * rand() - 1.0) * params.init_heading
    speed = params.init_speed_min + (params.init_speed_max - params.init_speed_min) * rand()
    return Starts(track, s0, d0, heading, speed)


def start_pose(tracks: TrackBatch, st: Starts) -> tuple[Tensor, Tensor]:
    """The world pose [M, 3] of each start and a projection hint [M] (the segment at s)."""
    located = tracks._locate(st.track, st.s)
    x, y, h = tracks.pose_at_located(*located, st.d)
    count = tracks.count.index_select(0, st.track)
    hint = torch.minimum((st.s * count / tracks.length.index_select(0, st.track)).long(), count - 1)
    return torch.stack([x, y, h + st.heading], dim=1), hint
