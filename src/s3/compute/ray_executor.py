"""The `ray` backend of the executor seam: a stage's jobs as tasks on a Ray cluster.

    ex = RayExecutor(params.compute, "collect", label="collect", instances=sims)
    outcomes = ex.run(jobs, on_done)        # the contract of s3.compute.executor, unchanged

Connection (`connect`, once per process). `compute.address` '' starts a local instance of the
stage's own (`compute.local_cpus` CPUs, every core by default; never a cluster that RAY_ADDRESS or
`ray start` left running) listening on 127.0.0.1 only, without the dashboard; it ends with the
stage's process; 'auto', 'host:6379' or 'ray://host:10001' joins a running cluster ('127.0.0.1:6379'
one whose nodes were started on the loopback interface, `--node-ip-address=127.0.0.1`). Token
authentication is on: RAY_AUTH_MODE=token is set when the environment does not say, and
`disabled` is refused. A local instance gets a fresh random token when none is configured (set in
this process's environment, so only it and its children hold it); a cluster's nodes and this
process must share one (docs/cluster.md).

Jobs. Each job is one task asking `compute.resources.<kind>` (`num_cpus`, `num_gpus`), so Ray
places it where that fits: a GPU node takes the training, CPU nodes the simulation (a request no
node of the cluster can hold is refused at once, naming the key, rather than waiting). A job needing
a simulator instance (`instances`, e.g. BeamNG.tech addresses) also asks for that instance's
custom resource (`instance_resource`, 1 per instance), so it lands on a node that declared it;
the instance routing (one job per instance, down instances avoided, INSTANCE_ENV / LEASE_ENV) is
the local pool's (s3.compute.executor.Executor). A task sees this process's `S3_*` environment
variables (and no other `S3_*` the worker had), not its whole environment (the nodes have their
own PATH and homes).

GPUs. A job that asks no GPU sees none (CUDA_VISIBLE_DEVICES empty in its worker, so
`train.device: auto` puts it on the CPU even on a GPU node: its results do not depend on where Ray
placed it); a worker that ran a GPU job exits after it (max_calls 1), so its GPU memory is freed
and no CPU job inherits its CUDA context.

Retries. Ray's own task retries are off (max_retries 0): a job that raised a retriable failure,
or whose worker process or node died (WorkerCrashedError, NodeDiedError, OutOfMemoryError (Ray's
memory monitor killed it), ...: WorkerDied), is
re-run here under the project's one policy (s3.compute.retry), counted in Outcome.retries, on
whichever node has room. Ray knows which task a dead worker was running, so a death costs only
that job. A failure that stops the stage cancels the jobs still running. A job that no live node
can hold any more (its node left the cluster and took the only GPU, or the simulator instance it
was routed to) would wait for ever in Ray's queue: every STRANDED_CHECK_S the driver compares the
jobs it waits for with the live nodes; such a job's instance is down (SimulatorUnreachable: it is
re-run on another instance, and the stage stops only when every instance is gone), and a job
without one stops the stage (RayUnavailable, naming compute.resources.<kind>).

Files. `shared_fs` is False: nodes share no filesystem with this process, so stages ship a job's
input files in its args (s3.compute.files) and write what it returns (Ray's object store carries
both ways); only this process writes into the workspace or talks to MLflow.

Utilisation. After a run, `stats` holds the jobs' node count, summed job seconds and the share of
the cluster's CPU-seconds (job CPUs x seconds / (cluster CPUs x wall)); one line says it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from s3.compute import ray_cluster
from s3.compute.executor import INSTANCE_ENV, LEASE_ENV, Executor, Job, Outcome
from s3.compute.params import ComputeParams, JobKind
from s3.compute.ray_cluster import RayUnavailable, check_fits, connect, fits, instance_resource
from s3.compute.retry import WorkerDied, retriable
from s3.sim.base import SimulatorUnreachable

ENV_PREFIX = "S3_"  # the environment variables a task inherits from this process
NO_GPU_ENV = {"CUDA_VISIBLE_DEVICES": ""}  # the worker environment of a job that asks no GPU
STRANDED_CHECK_S = 5.0  # how often the driver asks whether the live nodes can still hold the jobs it waits for


def _in_ray_worker(env: dict[str, str], fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, str, float]:
    """Run a job in a Ray worker under `env`: (its result, the node id, its seconds)."""
    import ray

    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}  # `env` is S3_* only
    _set_s3_env(env)
    t0 = time.perf_counter()
    try:
        return fn(*args), ray.get_runtime_context().get_node_id(), time.perf_counter() - t0
    finally:
        _set_s3_env(saved)


def _set_s3_env(env: dict[str, str]) -> None:
    """This process's S3_* variables become exactly `env`."""
    for k in [k for k in os.environ if k.startswith(ENV_PREFIX) and k not in env]:
        del os.environ[k]
    os.environ.update(env)


class RayExecutor(Executor):
    """A stage's jobs as Ray tasks (module docstring)."""

    shared_fs = False

    def __init__(
        self,
        compute: ComputeParams,
        kind: JobKind,
        label: str = "s3",
        instances: Sequence[str] = (),
        progress: bool | str = False,
    ) -> None:
        super().__init__(compute.retry, label, instances, progress)
        self.ray = connect(compute, self.instances)
        self.key, self.resources = f"compute.resources.{kind}", getattr(compute.resources, kind)
        check_fits(self.ray, self.key, self.resources, self.instances)
        gpu = self.resources.num_gpus > 0
        self.remote = self.ray.remote(max_retries=0, **({"max_calls": 1} if gpu else {}))(_in_ray_worker)
        self.options: dict[str, Any] = {"num_cpus": self.resources.num_cpus, "num_gpus": self.resources.num_gpus}
        if not gpu:
            self.options["runtime_env"] = {"env_vars": dict(NO_GPU_ENV)}
        self.stats: dict[str, Any] = {}

    def _asks(self, instance: str | None) -> dict[str, float]:
        """What one job asks of one node: its CPUs and GPUs, and its simulator instance's resource."""
        want = {"CPU": float(self.resources.num_cpus), "GPU": float(self.resources.num_gpus)}
        return want if instance is None else {**want, instance_resource(instance): 1.0}

    def _stranded(self, running: dict[Any, tuple[int, str | None]]) -> list[Any]:
        """The running (or queued) tasks that no live node of the cluster can hold any more."""
        nodes = ray_cluster.per_node(self.ray)
        return [ref for ref, (_, instance) in running.items() if not any(fits(n, self._asks(instance)) for n in nodes)]

    def _cause(self, error: BaseException) -> BaseException:
        """The job's own exception, or WorkerDied for a worker or node that went away."""
        ex = self.ray.exceptions
        if isinstance(error, ex.RayTaskError) and isinstance(error.cause, BaseException):
            return error.cause
        died = (
            ex.WorkerCrashedError,
            ex.NodeDiedError,
            ex.ObjectLostError,
            ex.LocalRayletDiedError,
            ex.OwnerDiedError,
            ex.OutOfMemoryError,
        )
        if isinstance(error, died):
            return WorkerDied(f"Ray worker died ({type(error).__name__})")
        return error

    def _gone(self, job: Job, instance: str | None) -> Exception:
        """Why a job that no live node can hold any more will not run: its instance is unreachable
        (retried elsewhere), or the cluster lost the only nodes that could hold it (the stage stops)."""
        if instance is not None:
            return SimulatorUnreachable(
                f"simulator instance {instance}: no live Ray node declares {instance_resource(instance)} any more"
            )
        return RayUnavailable(
            f"{self.key}: {job.name} asks {self.resources.num_cpus:g} CPUs and {self.resources.num_gpus:g} GPUs on "
            "one node, and no live node of the Ray cluster has them any more (a node left the cluster)"
        )

    def run(self, jobs: Sequence[Job], on_done: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
        ray, n = self.ray, len(jobs)
        outcomes = [Outcome(j.name) for j in jobs]
        finished: list[Outcome | None] = [None] * n
        attempts, not_before = [0] * n, [0.0] * n
        failed_on: dict[int, str] = {}
        queue, running = deque(range(n)), {}  # running: ObjectRef -> (job index, instance or None)
        nodes: Counter[str] = Counter()
        job_s, t0 = 0.0, time.monotonic()
        checked = t0  # when the live nodes were last compared with the jobs waiting
        counting = contextlib.ExitStack()
        bar = counting.enter_context(self._counting(n))

        def finish(i: int, o: Outcome) -> None:
            finished[i] = o
            if bar is not None:
                bar.advance()
            if on_done is not None:
                on_done(i, o)

        try:
            while queue or running:
                busy = {jobs[i].affinity for i, _ in running.values()} - {None}
                for i in list(queue):
                    if jobs[i].affinity in busy or not_before[i] > time.monotonic():
                        continue
                    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
                    opts = dict(self.options)
                    instance = None
                    if self.instances:
                        instance = self._instance_for({r for _, r in running.values()}, failed_on.get(i))
                        if instance is None:  # the instances that are up are all busy
                            break
                        env[INSTANCE_ENV], env[LEASE_ENV] = instance, self._lease(instance)
                        opts["resources"] = {instance_resource(instance): 1.0}
                    queue.remove(i)
                    attempts[i] += 1
                    running[self.remote.options(**opts).remote(env, jobs[i].fn, jobs[i].args)] = (i, instance)
                    busy |= {jobs[i].affinity} - {None}
                if not running:  # everything left waits out a backoff
                    time.sleep(max(0.0, min(not_before[i] for i in queue) - time.monotonic()))
                    continue
                waiting = [not_before[i] - time.monotonic() for i in queue if not_before[i] > time.monotonic()]
                ready, _ = ray.wait(list(running), num_returns=1, timeout=max(0.0, min([*waiting, STRANDED_CHECK_S])))
                stranded: list[Any] = []
                if time.monotonic() - checked >= STRANDED_CHECK_S:
                    checked, stranded = (
                        time.monotonic(),
                        self._stranded({r: v for r, v in running.items() if r not in ready}),
                    )
                for ref in [*ready, *stranded]:
                    i, instance = running.pop(ref)
                    try:
                        if ref in stranded:  # RayUnavailable is not retried: the stage stops below
                            ray.cancel(ref, force=True)
                            raise self._gone(jobs[i], instance)
                        value, node, seconds = ray.get(ref)
                    except Exception as e:
                        error = e if ref in stranded else self._cause(e)
                        if (
                            instance is not None and retriable(error) and not isinstance(error, WorkerDied)
                        ):  # the worker died, not the simulator
                            self.down.add(instance)
                            failed_on[i] = instance
                        if self._retry(jobs[i], outcomes[i], error, attempts[i]):
                            not_before[i] = time.monotonic() + self.policy.wait_s(attempts[i])
                            queue.append(i)
                            continue
                        finish(i, self._given_up(jobs[i], outcomes[i], error, attempts[i]))
                        continue
                    self.down.discard(instance)  # type: ignore[arg-type]
                    nodes[node] += 1
                    job_s += seconds
                    outcomes[i].value = value
                    finish(i, outcomes[i])
        finally:
            for ref in running:  # a failure that stops the stage: the rest is not wanted
                ray.cancel(ref, force=True)
            counting.close()
        wall = time.monotonic() - t0
        cpus = float(ray.cluster_resources().get("CPU", 0.0))
        share = job_s * self.resources.num_cpus / (cpus * wall) if cpus and wall > 0 else None
        self.stats = {
            "jobs": n,
            "attempts": sum(attempts),
            "nodes": len(nodes),
            "jobs_per_node": sorted(nodes.values(), reverse=True),
            "job_seconds": round(job_s, 2),
            "wall_s": round(wall, 2),
            "cluster_cpus": cpus,
            "utilisation": None if share is None else round(share, 3),
        }
        if n:
            use = "" if share is None else f", {share:.0%} of the cluster's {cpus:g} CPUs busy"
            self.say(f"ray: {n} jobs on {len(nodes)} node(s) in {wall:.1f} s ({job_s:.1f} job-seconds{use})")
        return [o for o in finished if o is not None]
