"""The `compute:` section of params.yaml: how a stage's parallel work runs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from s3.compute.retry import RetryPolicy


class ComputeParams(BaseModel):
    """Where jobs run and how failures are retried (no stage's outputs depend on it)."""

    model_config = ConfigDict(extra="forbid")

    retry: RetryPolicy = RetryPolicy()
    fail_at_lost_share: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="collect and evaluate exit non-zero when at least this share of their episodes / runs is lost after the "
        "retries (1.0: only when all is lost); any loss is reported",
    )
