"""s3.compute: how a stage's parallel work runs, and the one retry policy.

    params.RetryPolicy        how often a job is retried, with which waits (tenacity): `compute.retry`
    retry.retriable, call     which failures are retried; a call under the policy
    executor.Job, LocalExecutor
    backend.executor_for(params)
                              independent jobs (collection shards, seeds, evaluation runs) in
                              worker processes: results in job order, job-level retries, affinity

The stateful simulator workers of the source env (s3.rl.source_env) share the process start-up
and the orphan watch (s3.workers) with the executor's pool.
"""
