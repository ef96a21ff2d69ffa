"""The one retry policy: which failures are retried, how often, and how long to wait.

A job (a collection shard, an evaluation run, a training seed) is the only unit that is retried,
and only for failures that may clear up: a lost simulator connection (`SimulatorLost`) or a
worker process that died (`WorkerDied`). Everything else repeats deterministically and is not
retried: a physics failure, a bug, and a simulator that answered with an error
(`SimulatorRejected`). Attempt k + 1 waits `backoff_s * 2**k` seconds, at most `max_backoff_s`
(tenacity's exponential wait; the numbers are `compute.retry`, s3.compute.params.RetryPolicy). When
the retries are spent the job is reported lost, except that a simulator nobody could reach at all
(`SimulatorUnreachable`) stops the stage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import tenacity

from s3.sim.base import SimulatorLost, SimulatorRejected, SimulatorUnreachable

if TYPE_CHECKING:
    from s3.compute.params import RetryPolicy

T = TypeVar("T")


class WorkerDied(RuntimeError):
    """The worker process running a job ended without an answer (killed, crashed, os._exit)."""


def retriable(error: BaseException) -> bool:
    """Whether this failure may clear up on another attempt."""
    return isinstance(error, (SimulatorLost, WorkerDied)) and not isinstance(error, SimulatorRejected)


def fatal(error: BaseException) -> bool:
    """Whether this failure, on a job's last attempt, stops the stage rather than losing the job."""
    return isinstance(error, SimulatorUnreachable) or not retriable(error)


def call(
    policy: RetryPolicy, fn: Callable[[], T], on_retry: Callable[[int, BaseException, float], None] | None = None
) -> tuple[T, int]:
    """fn() under `policy` in this process: (its value, retries used); the last failure propagates."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(policy.retries + 1),
        wait=lambda state: policy.wait_s(state.attempt_number),
        retry=tenacity.retry_if_exception(retriable),
        before_sleep=(lambda s: on_retry(s.attempt_number, s.outcome.exception(), s.upcoming_sleep))
        if on_retry
        else None,
        reraise=True,
    )
    for attempt in retrying:
        with attempt:
            value = fn()
        n = attempt.retry_state.attempt_number
    return value, n - 1


class TooMuchLost(RuntimeError):
    """A stage lost at least `compute.fail_at_lost_share` of its jobs' work after the retries."""


def check_lost(stage: str, lost: int, total: int, fail_at_share: float, first_error: str | None, record: str) -> None:
    """Raise TooMuchLost when `lost` of `total` reaches `fail_at_share` (1.0: only when all is lost);
    below it the stage goes on and its record lists what was lost."""
    if total <= 0 or lost <= 0 or lost / total < fail_at_share:
        return
    raise TooMuchLost(
        f"{stage}: {lost} of {total} lost to the simulator after the retries (compute.fail_at_lost_share "
        f"{fail_at_share:g}); first error: {first_error}; see {record}"
    )


def describe(error: BaseException) -> str:
    """One line for a manifest or a log: the failure's cause."""
    if isinstance(error, WorkerDied):
        return "worker process died"
    if isinstance(error, SimulatorLost):
        return "simulator lost"
    return type(error).__name__
