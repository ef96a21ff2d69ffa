"""The held-out procedural tracks where choices are judged (`s3 holdout`, s3.evaluate.holdout; time to
quality, s3.evaluate.ttq_checkpoints): 2 starts per track at START_SPEED, generator seed HOLDOUT_SEED
(training validates on `train.seed`), one surface of SURFACES per set.

    SURFACES["heavy_ice"]   every track has 3-6 patches of mu 0.1-0.3, up to 100 m long
    SURFACES["dry"]         no patches: pace
"""

from __future__ import annotations

from s3.rl.params import TrackPoolParams
from s3.rl.tracks import validation_tracks
from s3.tracks.generate import ProceduralTrackParams
from s3.tracks.track import Track

HOLDOUT_SEED = 7
START_SPEED = 5.0  # m/s
SURFACES: dict[str, ProceduralTrackParams] = {
    "heavy_ice": ProceduralTrackParams(patch_probability=1.0, patches_min=3, patches_max=6, patch_length_max=100.0),
    "dry": ProceduralTrackParams(patch_probability=0.0),
}


def holdout_tracks(surface: str, n_tracks: int = 8, seed: int = HOLDOUT_SEED) -> list[Track]:
    """The held-out procedural tracks for `surface` (a key of SURFACES)."""
    if surface not in SURFACES:
        raise ValueError(f"surface {surface!r}: expected one of {', '.join(SURFACES)}")
    return validation_tracks(TrackPoolParams(validation_tracks=n_tracks, procedural=SURFACES[surface]), seed=seed)
