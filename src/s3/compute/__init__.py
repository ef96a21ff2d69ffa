"""s3.compute: how a stage's parallel work runs, the pools of source simulators, and the one retry policy.

    params.RetryPolicy        how often a job is retried, with which waits (tenacity): `compute.retry`
    retry.retriable, call     which failures are retried; a call under the policy
    executor.Job, LocalExecutor
    backend.executor_for(params)
                              independent jobs (collection shards, seeds, evaluation runs) in
                              worker processes: results in job order, job-level retries, affinity
    backend.open_sim_pool, sim_pool.SimPool, SimWorker
                              pools of source simulators, N cars in W worker processes (the source
                              env of s3.rl.source_env drives one); ray_sim_pool.RaySimPool: as Ray actors

The simulator pools share the process start-up and the orphan watch (s3.workers) with the
executor's pool.
"""
