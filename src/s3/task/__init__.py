"""s3.task: the driving task, once, for every simulator (batched torch; no rsl_rl import).

    params                    EnvParams, RewardParams, JudgeParams, EndRules: the task's parameters
    frame.TrackFrame          where N cars are on their tracks: projection, progress, friction, preview
    layout.obs_layout(params) the observation layout (documented in that module)
    observation.Observer      the observation builder (a TrackFrame plus the state/command history)
    rules.Rules               named reward terms, terminations with reason codes
    starts.sample_starts      the random start distribution; start_pose
    actions.split_action      the policy action -> car command map
    window.Window             the sliding history buffer

The distilled env (s3.rl.env), the source env (s3.rl.source_env) and the policy driver
(s3.evaluate.policy_driver, a one-car client) all build on it.
"""
