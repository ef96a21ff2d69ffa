"""s3.compute: how a stage's parallel work runs, the pools of source simulators, and the one retry policy.

    retry.RetryPolicy         which failures are retried, how often, with which waits (tenacity)
    executor.Job, LocalExecutor, executor_for(params)
                              independent jobs (collection shards, seeds, evaluation runs) in
                              worker processes: results in job order, job-level retries, affinity
    sim_pool.open_sim_pool, SimPool, SimWorker
                              pools of source simulators, N cars in W worker processes (the source
                              env of s3.rl.source_env drives one); ray_sim_pool.RaySimPool: as Ray actors

The simulator pools share the process start-up and the orphan watch (s3.workers) with the
executor's pool.
"""
