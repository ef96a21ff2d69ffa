"""The `compute:` section of params.yaml: how a stage's parallel work runs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from s3.compute.retry import RetryPolicy


class ComputeParams(BaseModel):
    """Where jobs run and how failures are retried (no stage's outputs depend on it)."""

    model_config = ConfigDict(extra="forbid")

    retry: RetryPolicy = RetryPolicy()
