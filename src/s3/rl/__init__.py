"""s3.rl: the distilled RL environment and PPO training inside each learned dynamics model.

Public API (import from the submodules; this package imports nothing heavy itself):
    params.TrainParams                                   the `train:` section of params.yaml
    train.train(family, models_dir, out_dir, plots_dir, params, metrics_dir=None, run=None) -> summary
    stage.train_policies(names, root_params, models_dir, out_dir, plots_dir, metrics_dir)   families, oracle, direct
    direct.train_direct(root_params, out_dir, plots_dir, metrics_dir) -> summary   PPO in the source simulator
    source_env.SourceVecEnv(tracks, sim_params, env_params, num_envs, workers)     the source simulator as a VecEnv
    bench.bench_env(family, models_dir, sizes=(256, 1024, 4096), device="cpu", params=None) -> dict
    env.DistilledEnv(model, tracks, params, num_envs=None, device="cpu", seed=0)   rsl_rl VecEnv
    rollout.drive_lap(policy, model, track, env_params, start_s=0, start_speed=0) -> LapResult
    rollout.run_episodes(policy, model, tracks, track_index, start_s, ...) -> EpisodeBatch
    rollout.lap_loop(step, length, limit_steps, dt) -> EpisodeBatch   the lap/failure bookkeeping of both
    loop.PPOTrainer(env, ppo, device), loop.train_loop(trainer, budget, choice, hooks)   the one PPO loop
    (the task itself -- observation, reward, terminations, starts -- is s3.task)
    export.load_policy_fn(folder) -> (obs -> command callable, policy.json)
    export.policy_env_params(policy_json) -> EnvParams    (build observations with the policy's own params)
    s3.task.layout.obs_layout(env_params) -> ObsLayout   (the observation, documented in that module)
    controllers.PurePursuit(layout)                      a centerline follower on the observation
"""

# What worker processes import, once, in their forkserver (s3.workers): the source simulator's
# cars (s3.rl.source_env), and the train stage's PPO seeds (s3.rl.seeds) beside the seed choice's cars.
SOURCE_WORKER_PRELOAD = ("s3.rl.source_env", "s3.sim.factory", "s3.sim.mujoco_car")
TRAIN_WORKER_PRELOAD = (
    "s3.rl.seeds",
    "s3.dynamics.checkpoint",
    "mlflow.store.tracking.sqlalchemy_store",
    *SOURCE_WORKER_PRELOAD,
)
