"""The `regress:` section of params.yaml: what the regression check compares, and how much it lets move
(s3.platform.regress reads it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from s3.catalog import DIRECT


class RegressParams(BaseModel):
    """Tolerances of `s3 regress` and the nightly regression flow."""

    model_config = ConfigDict(extra="forbid")

    baseline: str = Field("baselines/regression.json", description="recorded baseline file")
    error_growth_pct: float = Field(10.0, ge=0, description="allowed growth of a predictive error (%)")
    error_abs_floor: float = Field(1e-3, ge=0, description="absolute slack added to every error tolerance")
    completion_drop: float = Field(0.05, ge=0, description="allowed absolute drop of a completion rate")
    lap_time_growth_pct: float = Field(5.0, ge=0, description="allowed growth of a lap time (%)")
    error_files: list[str] = ["records/distill/*.json"]
    error_keys: list[str] = ["one_step_rmse.*", "rollout.*.ade_*", "rollout.*.fde_*", "divergence.rate"]
    policy_files: list[str] = ["records/eval/*.json"]
    probe_keys: list[str] = ["probes.summary.pos_err_3s_*"]  # s3 evaluate: the model's manoeuvre probes (errors)
    # s3 evaluate: shares in [0, 1] per circuit (and the suite) and condition, means over seeds; the
    # lap share is continuous, so a policy that drives less far regresses even with no lap completed
    completion_keys: list[str] = ["summary.*.completion_rate.estimate", "summary.*.lap_share.estimate"]
    lap_time_keys: list[str] = ["summary.*.lap_time_s.estimate"]
    # `direct` trains for a wall-clock budget: its policy, and so its lap share, changes with the machine's load
    exclude_files: list[str] = [f"records/eval/{DIRECT}.json"]
