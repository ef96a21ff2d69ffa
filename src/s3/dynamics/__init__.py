"""s3.dynamics: the distill step -- four families of batched, learned vehicle dynamics models.

Public API (import from the submodules; this package imports nothing heavy itself):
    params.DistillParams                      the `distill:` section of params.yaml
    distill.distill(family, rollouts_dir, out_dir, metrics_dir, plots_dir, params) -> metrics
    distill.comparison_table(metrics_by_family) -> rich.table.Table
    checkpoint.load_checkpoint(folder, family=None, device="cpu") -> DynamicsModel
    base.DynamicsModel.step(history_states [N,K,S], history_actions [N,K,A], action [N,A], mu [N] | None) -> [N,S]
    base.DynamicsModel.rollout(history_states, history_actions, actions [N,H,A], mu, pose [N,3]) -> states, poses
    base.integrate_pose(pose [N,3], s0 [N,S], s1 [N,S], dt) -> [N,3]
"""
