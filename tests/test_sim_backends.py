"""The simulator behind one descriptor (s3.sim.backends): stage code asks it, never compares names."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from s3.config import Params, SimParams
from s3.sim.backends import BACKENDS, side_by_side_names, sim_backend

SRC = Path(__file__).resolve().parents[1] / "src" / "s3"
SIM = SRC / "sim"


def _strings(node: ast.expr) -> list[str]:
    """The string literals `node` is, or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _is_sim_backend(node: ast.expr) -> bool:
    """`<x>.backend`, except the executor's `compute.backend` (local or ray: not a simulator)."""
    if not (isinstance(node, ast.Attribute) and node.attr == "backend"):
        return False
    owner = node.value
    return not (
        (isinstance(owner, ast.Name) and owner.id == "compute")
        or (isinstance(owner, ast.Attribute) and owner.attr == "compute")
    )


def backend_compares(source: str) -> list[int]:
    """Lines comparing a simulator backend with a string: `<x>.backend` (not `compute.backend`) with
    any string literal, or anything with a simulator's name (`"mujoco"`, `"beamng"`)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        literals = [s for side in sides for s in _strings(side)]
        if any(s in BACKENDS for s in literals) or (literals and any(_is_sim_backend(s) for s in sides)):
            lines.append(node.lineno)
    return lines


def test_no_module_outside_sim_compares_a_simulator_backend_with_a_string() -> None:
    offenders = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if SIM not in path.parents and (lines := backend_compares(path.read_text()))
    }
    assert offenders == {}, f"ask s3.sim.backends.sim_backend(...) instead of comparing sim.backend: {offenders}"


@pytest.mark.parametrize(
    "source",
    [
        "if params.sim.backend == 'mujoco': pass",
        "ok = sim.backend != 'beamng'",
        "ok = root.sim.backend in ('mujoco', 'x')",
        "ok = name == 'beamng'",
        "ok = self.backend == 'anything'",
    ],
)
def test_the_check_catches_a_backend_compare(source: str) -> None:
    assert backend_compares(source) == [1]


@pytest.mark.parametrize(
    "source",
    [
        "if compute.backend == 'ray': pass",
        "ok = self.compute.backend == 'ray'",
        "ok = sim_backend(params.sim).side_by_side",
        "text = f'sim.backend {params.sim.backend!r}'",
        "ok = backend == other.backend",
    ],
)
def test_the_check_lets_the_executor_backend_and_descriptor_questions_pass(source: str) -> None:
    assert backend_compares(source) == []


def test_every_backend_params_accept_has_a_descriptor() -> None:
    assert set(get_args(SimParams.model_fields["backend"].annotation)) == set(BACKENDS)
    for name, b in BACKENDS.items():
        assert b.name == name and sim_backend(name) is b
        assert b.side_by_side == (b.not_side_by_side == "")
    assert sim_backend(Params().sim) is BACKENDS["mujoco"]


def test_an_unknown_backend_names_the_key_and_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"^sim\.backend: unknown backend 'carla' \(known: beamng, mujoco\)$"):
        sim_backend("carla")
    with pytest.raises(ValueError, match=r"sim\.backend: unknown backend 'carla'"):
        sim_backend(SimParams.model_construct(backend="carla"))


def test_capabilities_as_the_stages_use_them() -> None:
    mujoco, beamng = sim_backend("mujoco"), sim_backend("beamng")
    assert mujoco.side_by_side and not mujoco.real_time and mujoco.driver_aids
    assert not beamng.side_by_side and beamng.real_time and not beamng.driver_aids and beamng.external_instances
    assert not mujoco.external_instances
    assert side_by_side_names() == "'mujoco'"
    assert mujoco.instances(SimParams()) == ()
    beam = SimParams.model_validate({"backend": "beamng", "beamng": {"instances": ["127.0.0.1:1", "127.0.0.1:2"]}})
    assert beamng.instances(beam) == ("127.0.0.1:1", "127.0.0.1:2")
    assert mujoco.version().startswith("mujoco ")
    assert SimParams().aids() is not None and beam.aids() is None


def test_the_control_period_check_is_the_backends() -> None:
    with pytest.raises(ValueError, match=r"whole number of mujoco\.timestep"):
        SimParams.model_validate({"control_dt": 0.1003})
    with pytest.raises(ValueError, match=r"whole number of BeamNG steps"):
        SimParams.model_validate({"backend": "beamng", "control_dt": 0.105})
