"""params.yaml as validated pydantic models, with `--set section.key=value` overrides.

Bad input stops here, before any work, with one line naming the offending key.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from s3.compute.params import ComputeParams
from s3.data.params import CollectParams
from s3.dynamics.params import DistillParams
from s3.evaluate.params import EvaluateParams
from s3.platform.regress import RegressParams
from s3.rl.params import TrainParams
from s3.sim.beamng_params import BeamngParams
from s3.sim.params import MujocoCarParams


class ParamsError(ValueError):
    """Invalid parameters; the message is one line naming the key."""


class SimParams(BaseModel):
    """Which source simulator, and its control period."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["mujoco", "beamng"] = "mujoco"
    control_dt: float = Field(0.1, gt=0.0, le=1.0, description="control period (s)")
    mujoco: MujocoCarParams = MujocoCarParams()
    beamng: BeamngParams = BeamngParams()

    @model_validator(mode="after")
    def _whole_physics_steps(self) -> SimParams:
        if self.backend == "beamng":
            n = self.control_dt * self.beamng.steps_per_second
            if n < 1 or abs(n - round(n)) > 1e-6:
                raise ValueError(
                    f"control_dt {self.control_dt} s must be a whole number of BeamNG steps "
                    f"(1/beamng.steps_per_second = {1 / self.beamng.steps_per_second:g} s)"
                )
            return self
        n = self.control_dt / self.mujoco.timestep
        if abs(n - round(n)) > 1e-6:
            raise ValueError(f"control_dt {self.control_dt} s must be a whole number of mujoco.timestep {self.mujoco.timestep} s")
        return self


class Params(BaseModel):
    """Everything in params.yaml."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, ge=0, le=2**31 - 1)
    sim: SimParams = SimParams()
    collect: CollectParams = CollectParams()
    distill: DistillParams = DistillParams()
    train: TrainParams = TrainParams()
    evaluate: EvaluateParams = EvaluateParams()
    regress: RegressParams = RegressParams()
    compute: ComputeParams = ComputeParams()


def _apply_override(tree: dict[str, Any], assignment: str) -> None:
    if "=" not in assignment:
        raise ParamsError(f"--set {assignment!r}: expected section.key=value")
    dotted, raw = assignment.split("=", 1)
    keys = dotted.strip().split(".")
    if not all(keys):
        raise ParamsError(f"--set {assignment!r}: empty key in {dotted!r}")
    node = tree
    for i, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ParamsError(f"--set {assignment!r}: {'.'.join(keys[: i + 1])} is not a section")
        node = child
    node[keys[-1]] = yaml.safe_load(raw) if raw.strip() else ""


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the section that `loc` (minus its last element) points into."""
    for key in loc[:-1]:
        field = model.model_fields.get(str(key))
        ann = field.annotation if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return sorted(model.model_fields)


def _one_line(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    key = ".".join(str(p) for p in loc) or "<root>"
    if first["type"] == "extra_forbidden":
        allowed = ", ".join(_allowed_keys(Params, loc))
        return f"{source}: unknown key {key!r} (allowed here: {allowed})"
    got = first.get("input")
    got_txt = "" if isinstance(got, dict) else f" (got {got!r})"
    more = f" [+{len(err.errors()) - 1} more]" if len(err.errors()) > 1 else ""
    return f"{source}: {key}: {first['msg']}{got_txt}{more}"


def load_params(path: str | Path | None = "params.yaml", overrides: list[str] | tuple[str, ...] = ()) -> Params:
    """Read params.yaml (absent file = defaults), apply overrides, validate."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        source = str(p)
        if p.exists():
            try:
                loaded = yaml.safe_load(p.read_text())
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f" line {mark.line + 1}" if mark else ""
                raise ParamsError(f"{p}:{where} is not valid YAML") from None
            if loaded is not None and not isinstance(loaded, dict):
                raise ParamsError(f"{p}: expected a mapping of sections at the top level")
            tree = copy.deepcopy(loaded or {})
        elif str(path) != "params.yaml":
            raise ParamsError(f"{p}: no such params file")
    for assignment in overrides:
        _apply_override(tree, assignment)
    if overrides:
        source += " + --set"
    try:
        return Params.model_validate(tree)
    except ValidationError as e:
        raise ParamsError(_one_line(e, source)) from None
