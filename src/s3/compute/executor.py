"""One executor for a stage's independent jobs: collection shards, training seeds, evaluation runs.

    ex = LocalExecutor(workers=2, preload=("s3.data.collect",), policy=RetryPolicy())
    outcomes = ex.run([Job("shard 0", collect_shard, (params_json, 0)), ...], on_done=bar.advance)
    for o in outcomes:                      # in job order, whatever order they finished in
        o.value if o.ok else o.error        # o.retries, o.causes: what was retried and why

Contract (any backend: this local pool, or Ray: s3.compute.ray_executor):
- `fn` is an importable module-level function; args and result are picklable. A job must be a
  pure function of its args (the same args give the same result), so a retried or re-routed job
  changes nothing: results do not depend on the backend or the number of workers.
- Results come back in job order. `on_done(index, outcome)` is called in this process as each
  job finishes (progress, writing outputs); only this process writes into the workspace.
- Progress: an executor made with `progress` (a unit, e.g. "runs"; True: "jobs") shows the jobs
  finished / all in this process (s3.progress: a bar on a terminal, a status line every 30 s otherwise).
- Retries happen here and nowhere else (s3.compute.retry): a job that raises a retriable failure
  (lost simulator) or whose worker process died is re-run; a non-retriable failure stops the
  stage (raised from `run`); a job whose retries are spent is returned as failed (`ok` False),
  except that an unreachable simulator stops the stage.
- Affinity: jobs with the same `affinity` never run at once.
- Instances: with `instances` (e.g. several BeamNG.tech addresses), each running job holds one
  instance for itself and finds its address in the environment variable INSTANCE_ENV (s3.sim.factory; one worker
  per instance). An instance whose job lost its simulator is *down*: jobs go to instances that are
  up while there are any, and a retried job to another instance than the one it failed on; an
  instance is up again once a job succeeds on it. So an instance that dies costs only the jobs it
  was running, which are re-run on the others; only when every instance is down does an
  unreachable simulator stop the stage. Workers are not tied to instances: LEASE_ENV says
  '<executor token>:<jobs this instance was handed before>', so that a worker can tell whether
  another worker, or another executor (Ray workers outlive a stage), drove its instance since its
  own last job (its connection is then stale: BeamNG serves one client).

Local backend. `workers == 1` runs the jobs in this process, one after another (no process
start-up; a job that kills its process kills the stage). Otherwise they run in a process pool
whose workers fork from a forkserver that imported `preload` once and end with this process
(s3.workers); each job runs under this process's environment as it is when the job is submitted
(the server's own is the one it started with), on one torch thread (`_in_worker`). When a worker
dies the pool breaks and every job in flight fails with it; those jobs are re-run one at a time in a
pool of their own, so that a death there is charged to the job that caused it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from s3.compute.params import RetryPolicy
from s3.compute.retry import WorkerDied, call, describe, fatal, retriable
from s3.progress import Progress, progress
from s3.sim.backends import INSTANCE_ENV, LEASE_ENV  # a job's simulator instance and its lease (s3.sim.factory)
from s3.workers import exit_with_parent, forkserver_context, prestart


@dataclass(frozen=True)
class Job:
    """fn(*args) somewhere; `name` for messages; `affinity`: a resource it must not share."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    affinity: str | None = None


@dataclass
class Outcome:
    """What became of one job: its value, or the error that ended its last attempt."""

    name: str
    value: Any = None
    error: str | None = None
    retries: int = 0
    causes: list[str] = field(default_factory=list)  # why each retry happened

    @property
    def ok(self) -> bool:
        return self.error is None


class Executor:
    """What every backend shares: the instances' bookkeeping, the retry decisions, messages.

    `shared_fs`: whether the jobs see this process's files (the local pool) or not (Ray): a stage
    ships a job's input files in its args and writes the files it returns when they do not."""

    shared_fs = True

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        label: str = "s3",
        instances: Sequence[str] = (),
        progress: bool | str = False,
    ) -> None:
        self.progress = "jobs" if progress is True else (progress or None)
        self.instances = tuple(instances)
        if len(set(self.instances)) != len(self.instances):
            raise ValueError(f"instances: each instance once (got {list(self.instances)})")
        self.policy, self.label = policy or RetryPolicy(), label
        self.down: set[str] = set()  # instances whose last job lost its simulator
        self.leases = dict.fromkeys(self.instances, 0)  # jobs handed to each instance so far
        self.token = secrets.token_hex(6)  # this executor's, in every lease it hands out

    def _lease(self, instance: str) -> str:
        """The next job's lease on `instance` (LEASE_ENV): this executor's token and the count so far."""
        lease = f"{self.token}:{self.leases[instance]}"
        self.leases[instance] += 1
        return lease

    def run(self, jobs: Sequence[Job], on_done: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
        raise NotImplementedError

    def _counting(self, n: int) -> contextlib.AbstractContextManager[Progress | None]:
        """The jobs finished / n (module docstring, "Progress"), or nothing when not asked for."""
        return progress(self.label, n, self.progress) if self.progress and n else contextlib.nullcontext()

    def say(self, msg: str) -> None:
        print(f"{self.label}: {msg}", file=sys.stderr, flush=True)

    def _given_up(self, job: Job, o: Outcome, error: BaseException, attempts: int) -> Outcome:
        """A job's last attempt failed: stop the stage, or report the job failed."""
        if fatal(error) and not (retriable(error) and self.instances and set(self.instances) - self.down):
            if retriable(error):  # an unreachable simulator (every instance), still so on the last attempt
                raise type(error)(f"{error} ({job.name}, {attempts} attempts)") from None
            raise error
        o.error, o.retries = f"{error}", max(o.retries, attempts - 1)  # re-runs after a shared pool broke count too
        o.causes.append(describe(error))  # the cause of the last attempt
        return o

    def _instance_for(self, in_use: set[str], avoid: str | None) -> str | None:
        """A free instance for the next job: one that is up (not `avoid`, the one this job last
        failed on, while another will do); while an instance that is up is busy, none that is down;
        when every instance is down, a free one all the same (it may be back)."""
        free = [r for r in self.instances if r not in in_use]
        up = [r for r in free if r not in self.down]
        if not up and any(r not in self.down for r in in_use):
            return None
        pool = up or free
        return min(pool, key=lambda r: r == avoid) if pool else None

    def _retry(self, job: Job, o: Outcome, error: BaseException, attempt: int) -> bool:
        """Whether a job that raised `error` on attempt `attempt` runs again."""
        if not retriable(error) or attempt > self.policy.retries:
            return False
        o.retries += 1
        o.causes.append(describe(error))
        self.say(f"{job.name}: {error}; retry {attempt}/{self.policy.retries} in {self.policy.wait_s(attempt):g} s")
        return True


class LocalExecutor(Executor):
    """Jobs in this process (workers == 1) or in a local process pool (see the module docstring)."""

    def __init__(
        self,
        workers: int = 0,
        preload: Sequence[str] = (),
        policy: RetryPolicy | None = None,
        label: str = "s3",
        instances: Sequence[str] = (),
        progress: bool | str = False,
    ) -> None:
        super().__init__(policy, label, instances, progress)
        self.workers = len(self.instances) if self.instances else max(1, int(workers) or (os.cpu_count() or 1))
        self.preload = tuple(preload)

    def run(self, jobs: Sequence[Job], on_done: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(jobs)
        with self._counting(len(jobs)) as bar:

            def finish(i: int, o: Outcome) -> None:
                out[i] = o
                if bar is not None:
                    bar.advance()
                if on_done is not None:
                    on_done(i, o)

            if self.workers == 1:
                for i, job in enumerate(jobs):
                    finish(i, self._in_process(job))
            elif jobs:
                self._in_pool(jobs, finish)
        return [o for o in out if o is not None]

    # ------------------------------------------------------------------ in this process
    def _in_process(self, job: Job) -> Outcome:
        o = Outcome(job.name)

        def on_retry(attempt: int, error: BaseException, wait_s: float) -> None:
            o.causes.append(describe(error))
            self.say(f"{job.name}: {error}; retry {attempt}/{self.policy.retries} in {wait_s:g} s")

        old = os.environ.get(INSTANCE_ENV)
        if self.instances:  # one instance: this process drives it
            os.environ[INSTANCE_ENV] = self.instances[0]
        try:
            o.value, o.retries = call(self.policy, lambda: job.fn(*job.args), on_retry)
        except BaseException as e:
            if self.instances and retriable(e):
                self.down.add(self.instances[0])
            return self._given_up(job, o, e, self.policy.retries + 1)
        finally:
            if self.instances and old is None:
                del os.environ[INSTANCE_ENV]
            elif self.instances:
                os.environ[INSTANCE_ENV] = old
        return o

    # ------------------------------------------------------------------ in a process pool
    def _in_pool(self, jobs: Sequence[Job], finish: Callable[[int, Outcome], None]) -> None:
        ctx = forkserver_context(self.preload)
        prestart(ctx)
        fresh, suspects = deque(range(len(jobs))), deque[int]()
        outcomes = {i: Outcome(jobs[i].name) for i in range(len(jobs))}
        attempts = dict.fromkeys(range(len(jobs)), 0)
        not_before = dict.fromkeys(range(len(jobs)), 0.0)  # backoff: monotonic time of the next attempt
        held: dict[Future[Any], str] = {}  # the instance each running job holds
        failed_on: dict[int, str] = {}  # the instance a job last failed on
        while fresh or suspects:
            alone = bool(suspects)  # after a pool broke: one job at a time, to charge a death to its job
            queue = suspects if alone else fresh
            width = 1 if alone else min(self.workers, len(fresh))
            broken: list[int] = []
            with ProcessPoolExecutor(
                max_workers=width, mp_context=ctx, initializer=exit_with_parent, initargs=(os.getpid(),)
            ) as pool:
                running: dict[Future[Any], int] = {}
                while (queue and not broken) or running:
                    busy = {jobs[i].affinity for i in running.values()} - {None}
                    ready = [i for i in queue if jobs[i].affinity not in busy and not_before[i] <= time.monotonic()]
                    for i in ready:
                        if broken or len(running) >= width or jobs[i].affinity in busy:
                            continue
                        env = dict(os.environ)
                        if self.instances:
                            instance = self._instance_for(set(held.values()), failed_on.get(i))
                            if instance is None:  # the instances that are up are all busy
                                break
                            env[INSTANCE_ENV], env[LEASE_ENV] = instance, self._lease(instance)
                        queue.remove(i)
                        attempts[i] += 1
                        fut = pool.submit(_in_worker, env, jobs[i].fn, jobs[i].args)
                        running[fut] = i
                        if self.instances:
                            held[fut] = env[INSTANCE_ENV]
                        busy |= {jobs[i].affinity} - {None}
                    if not running:  # everything left waits out a backoff
                        time.sleep(max(0.0, min(not_before[i] for i in queue) - time.monotonic()))
                        continue
                    done, _ = wait(running, timeout=self._next_wake(queue, not_before), return_when=FIRST_COMPLETED)
                    for fut in done:
                        i, instance = running.pop(fut), held.pop(fut, None)
                        try:
                            outcomes[i].value = fut.result()
                            self.down.discard(instance)  # type: ignore[arg-type]
                        except BrokenProcessPool:
                            broken.append(i)
                            continue
                        except BaseException as e:  # the job's own failure
                            if instance is not None and retriable(e):
                                self.down.add(instance)
                                failed_on[i] = instance
                            if self._retry(jobs[i], outcomes[i], e, attempts[i]):
                                not_before[i] = time.monotonic() + self.policy.wait_s(attempts[i])
                                queue.append(i)
                                continue
                            finish(i, self._given_up(jobs[i], outcomes[i], e, attempts[i]))
                            continue
                        finish(i, outcomes[i])
            if not alone:
                if broken:
                    self.say(
                        f"a worker process died; re-running {', '.join(jobs[i].name for i in sorted(broken))} one "
                        "at a time"
                    )
                for i in sorted(broken):
                    attempts[i] -= 1  # a shared pool's death is not (yet) charged to any one job
                    outcomes[i].retries += 1
                    outcomes[i].causes.append("worker process died")
                suspects.extend(sorted(broken))
                continue
            for i in broken:
                died = WorkerDied(f"worker process died {attempts[i]} time{'s' if attempts[i] > 1 else ''}")
                if attempts[i] <= self.policy.retries:
                    outcomes[i].retries += 1
                    outcomes[i].causes.append("worker process died")
                    wait_s = self.policy.wait_s(attempts[i])
                    self.say(
                        f"{jobs[i].name}: worker process died; retry {attempts[i]}/{self.policy.retries} in "
                        f"{wait_s:g} s"
                    )
                    not_before[i] = time.monotonic() + wait_s
                    suspects.appendleft(i)
                else:
                    finish(i, self._given_up(jobs[i], outcomes[i], died, attempts[i]))

    @staticmethod
    def _next_wake(queue: deque[int], not_before: dict[int, float]) -> float | None:
        waiting = [not_before[i] for i in queue if not_before[i] > time.monotonic()]
        return max(0.0, min(waiting) - time.monotonic()) if waiting else None


def _in_worker(environ: dict[str, str], fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Run a job in a pool worker under the submitting process's environment, on one torch thread.

    The pool already runs `workers` jobs side by side on the cores; torch's default of a thread per core in
    each of them oversubscribes the machine (evaluation laps, batch-1 torch each control step, ran several
    times slower; measured in reports/run-2026-12-07-best-checkpoint.md). One thread changes no result. A job
    that wants more threads sets its own (PPO: train.torch_threads)."""
    if environ != os.environ:
        os.environ.clear()
        os.environ.update(environ)
    os.environ["OMP_NUM_THREADS"] = "1"  # for a torch that the job itself imports
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    return fn(*args)
