"""The study's policies, described once: the four model families, the oracle, direct and the baselines.

Pure data (floor 0: imports nothing of s3). Code names a policy through these constants and asks
`POLICIES[name]` what it is; tests/test_literals.py fails on a policy name spelled as a string anywhere
else in src/ or in dvc.yaml. Which of them a run uses is params.yaml's (`families`, `policies_in_models`,
`train.per_policy`); s3.dynamics.registry maps each family to its class, s3.evaluate.evaluate each
baseline to its driver.

    FAMILIES                 the model families, in the report's order (BICYCLE, DDM, TRANSFORMER, DYTR)
    ORACLE, DIRECT           PPO in dytr's model observing the surface; PPO in the source simulator itself
    BASELINES                the no-learning floor (PID, PID_BLIND, PID_CAUTIOUS)
    POLICIES                 name -> Policy (kind, label, colour, structure, observes_surface, model, line)
    GROUNDED, BLACK_BOX      the families whose model is physics-grounded / black-box (claim 2)
    NOT_IN_MODEL             policies with no distilled model: direct and the baselines (the report's baselines)

dvc.yaml reads two assignments of this file as template vars (`vars: - src/s3/catalog.py:DIRECT,BASELINES`;
DVC parses them with ast.literal_eval): keep DIRECT a str literal and BASELINES a list literal.
"""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES = ("bicycle", "ddm", "transformer", "dytr")
BICYCLE, DDM, TRANSFORMER, DYTR = FAMILIES
ORACLE = "oracle"
DIRECT = "direct"
BASELINES = ["pid", "pid_blind", "pid_cautious"]  # a list literal: dvc.yaml's evaluate_baseline stages iterate it
PID, PID_BLIND, PID_CAUTIOUS = BASELINES

# what a policy is
FAMILY = "family"  # PPO inside the distilled model of its own family
ORACLE_KIND = "oracle"  # PPO inside a family's model, observing the surface (a reference, not a candidate)
DIRECT_KIND = "direct"  # PPO in the source simulator itself
BASELINE = "baseline"  # no learning: a controller


@dataclass(frozen=True)
class Policy:
    """What one policy of the study is.

    kind: FAMILY, ORACLE_KIND, DIRECT_KIND or BASELINE. label: one line for people. colour: its matplotlib
    colour in the report figure. structure (families only, else None): "physics" (a physical model fitted by
    least squares, nothing learned beyond its coefficients), "grounded" (learned on a physics prior) or
    "black-box". observes_surface: True = always observes the friction under it (train.env.surface_label
    forced on), False = never (whatever the params say), None = as configured (train.env.surface_label;
    pid: evaluate.pid.knows_ice). model: the distilled model its PPO trains in by design (a family: its own;
    the oracle: dytr's, as params.yaml's `policies_in_models` says), None without one. line: the matplotlib
    line style of its horizontal reference line in the report figure (a policy with no dynamics model),
    None when it is drawn as a point.
    """

    kind: str
    label: str
    colour: str
    structure: str | None = None
    observes_surface: bool | None = None
    model: str | None = None
    line: str | None = None


POLICIES: dict[str, Policy] = {
    BICYCLE: Policy(FAMILY, "kinematic bicycle fitted by least squares", "tab:blue", "physics", model=BICYCLE),
    DDM: Policy(
        FAMILY,
        "deep dynamics model: a GRU sets a single-track model's coefficients",
        "tab:orange",
        "grounded",
        model=DDM,
    ),
    TRANSFORMER: Policy(FAMILY, "black-box causal transformer", "tab:green", "black-box", model=TRANSFORMER),
    DYTR: Policy(FAMILY, "transformer residual on a single-track prior", "tab:red", "grounded", model=DYTR),
    ORACLE: Policy(
        ORACLE_KIND, "PPO in dytr's model, observing the surface", "tab:purple", observes_surface=True, model=DYTR
    ),
    DIRECT: Policy(DIRECT_KIND, "PPO in the source simulator itself, for a wall-clock budget", "tab:brown", line="-."),
    PID: Policy(BASELINE, "pure pursuit + PID, slows for the map's known ice", "0.3", line="--"),
    PID_BLIND: Policy(BASELINE, "pure pursuit + PID, blind to the surface", "0.55", observes_surface=False, line=":"),
    PID_CAUTIOUS: Policy(
        BASELINE,
        "pure pursuit + PID, blind, planned for the lowest training friction everywhere",
        "0.45",
        observes_surface=False,
        line="-.",
    ),
}

GROUNDED = tuple(n for n in FAMILIES if POLICIES[n].structure == "grounded")
BLACK_BOX = tuple(n for n in FAMILIES if POLICIES[n].structure == "black-box")
NOT_IN_MODEL = tuple(n for n, p in POLICIES.items() if p.kind in (DIRECT_KIND, BASELINE))


def observes_surface(name: str) -> bool | None:
    """True when `name` always observes the surface, False when it never does, None when params decide
    (also for a name the catalog does not know: a policy params.yaml adds)."""
    policy = POLICIES.get(name)
    return None if policy is None else policy.observes_surface
