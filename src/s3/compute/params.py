"""The `compute:` section of params.yaml: where a stage's parallel work runs, and how failures are retried."""

from __future__ import annotations

from typing import Literal

import tenacity
from pydantic import BaseModel, ConfigDict, Field, field_validator


class RetryPolicy(BaseModel):
    """The `compute.retry` params: how often a job is retried and how long each attempt waits, one policy for every
    stage (which failures are retried, and the calls: s3.compute.retry)."""

    model_config = ConfigDict(extra="forbid")

    retries: int = Field(
        3, ge=0, le=20, description="extra attempts for a job whose simulator connection or worker process was lost"
    )
    retry_backoff_s: float = Field(
        1.0, ge=0.0, le=600.0, description="wait before the first retry (s); doubles with each further retry"
    )
    max_backoff_s: float = Field(60.0, ge=0.0, le=3600.0, description="longest wait between two attempts (s)")

    def wait_s(self, attempt: int) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based) before the next."""
        wait = tenacity.wait_exponential(multiplier=self.retry_backoff_s, exp_base=2, min=0, max=self.max_backoff_s)
        return float(wait(_State(attempt))) if self.retry_backoff_s > 0 else 0.0


class _State:
    """The piece of tenacity's RetryCallState that its wait strategies read."""

    def __init__(self, attempt_number: int) -> None:
        self.attempt_number = attempt_number


JobKind = Literal["collect", "train", "evaluate", "source_env"]


class JobResources(BaseModel):
    """What one job of a kind asks of a Ray node (the `ray` backend only)."""

    model_config = ConfigDict(extra="forbid")

    num_cpus: float = Field(
        1.0, gt=0.0, le=1024.0, description="CPU cores a job holds (a PPO seed: match train.torch_threads)"
    )
    num_gpus: float = Field(
        0.0, ge=0.0, le=64.0, description="GPUs a job holds (training on a GPU node: 1, with train.device cuda or auto)"
    )


class Resources(BaseModel):
    """Per job kind: what one job asks of a Ray node."""

    model_config = ConfigDict(extra="forbid")

    collect: JobResources = JobResources()  # a collection shard
    train: JobResources = JobResources()  # a PPO seed in a distilled env
    evaluate: JobResources = JobResources()  # an evaluation run
    source_env: JobResources = (
        JobResources()
    )  # one simulator actor of the source env (direct PPO, the source seed choice)


class ComputeParams(BaseModel):
    """Where jobs run and how failures are retried (no stage's outputs depend on it)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "ray"] = Field(
        "local", description="local: a process pool on this machine (no Ray); ray: tasks on a Ray cluster"
    )
    address: str = Field(
        "",
        description="ray backend: '' starts a local Ray instance bound to 127.0.0.1 for the stage; 'auto' or "
        "'host:6379' joins a running cluster (this machine must be one of its nodes); 'ray://host:10001' joins one "
        "through Ray Client",
    )
    local_cpus: int = Field(
        0, ge=0, le=4096, description="ray backend, address '': CPUs of the local instance (0: every core)"
    )
    resources: Resources = Resources()
    retry: RetryPolicy = RetryPolicy()
    fail_at_lost_share: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="collect and evaluate exit non-zero when at least this share of their episodes / runs is lost "
        "after the retries (1.0: only when all is lost); any loss is reported",
    )

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        v = v.strip()
        if v not in ("", "auto") and not v.startswith("ray://") and ":" not in v:
            raise ValueError(f"{v!r}: '' (a local instance), 'auto', 'host:port' of a head node, or 'ray://host:10001'")
        return v
