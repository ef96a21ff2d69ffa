"""Parameters of DAgger-style rounds (the `dagger:` section of params.yaml; s3.dagger.stage).

Off by default: `policies` is empty, so dvc.yaml's `dagger@<policy>` stages do not exist. With
`policies: [ddm]` the stage `dagger@ddm` runs `rounds` rounds after `train@ddm`; each round lets the
latest policy drive `episodes` collection episodes in the source, re-distils its model on the
collected data plus every round so far and trains the policy again (docs/decisions/ice-levers.md).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DaggerParams(BaseModel):
    """How many rounds, and how each round's policy drives its collection episodes."""

    model_config = ConfigDict(extra="forbid")

    policies: list[str] = Field(
        default_factory=list,
        description="policies trained in a distilled model whose rounds run (stage dagger@<name>); [] = off",
    )
    rounds: int = Field(2, ge=1, le=10, description="rounds per policy: collect, re-distil, re-train")
    episodes: int = Field(300, ge=1, le=100_000, description="collection episodes the policy drives per round")
    ice_fraction: float = Field(1.0, ge=0.0, le=1.0, description="share of a round's episodes on their icy track")
    noise: float = Field(0.1, ge=0.0, le=1.0, description="std of Gaussian noise on the policy's commands (0 = none)")
