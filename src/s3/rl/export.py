"""Deployable policies: raw observation in, clipped command out, observation normalisation inside.

policies/<family>/
    policy.safetensors   actor + critic weights (keys "actor.*", "critic.*"), normaliser included
    policy.onnx          ONNX (opset 18): the deterministic actor, loadable without s3, rsl_rl or torch
    policy.json          obs layout, action spec, params, validation score, training summary (no
                         wall clock, no run id: the same weights and params give the same bytes);
                         its one schema: policy_meta (pinned by tests/test_policy_schema.py)

write_policy writes all three (every PPO route, through s3.rl.runner); copy_policy copies a policy
with keys added to its policy.json (the kept seed, s3.rl.seeds): policy.json is written nowhere else.

The exported graph maps obs [B, D] (float32, the layout in policy.json) to the command
[B, 3] = (steering_cmd in [-1, 1], throttle_cmd in [0, 1], brake_cmd in [0, 1]), any batch size B:
    MLP:  inputs (obs)      outputs (cmd)
    GRU:  inputs (obs, h)   outputs (cmd, h_next)   h, h_next [L, B, H] float32; h = zeros at the
          start of an episode, then the previous call's h_next (L, H: policy.json "export", and the
          model's metadata "s3.state_shape")
It applies the running observation normaliser learned in training, takes the Gaussian's mean,
clips it to [-1, 1]^2 and maps (steer, longitudinal) onto the command (s3.task.actions, with the
speed-sensitive steering the policy trained under, read from its observation's vx = obs[:, 0]).
The file is byte-stable: the same weights give the same bytes (no stack traces, paths or dates).
Why ONNX and not torch.export's .pt2: docs/decisions/policy-export.md.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from s3 import __version__
from s3.io import atomic_path, json_safe, write_json_atomic
from s3.task.actions import policy_to_command

WEIGHTS, EXPORT, META = "policy.safetensors", "policy.onnx", "policy.json"
# the oldest opset torch's exporter writes natively (its default is 20): read by onnxruntime >= 1.14 and other current
# runtimes
OPSET = 18
EXPORT_FORMAT = "s3-policy-onnx-1"
# What a run measured about itself rather than about the policy: kept out of policy.json (the
# stage's metrics file has them), so the same weights and params give the same file bytes.
RUN_ONLY_KEYS = frozenset(
    {
        "mlflow_run_id",
        "wall_s",
        "rl_wall_s",
        "ppo_wall_s",
        "validation_wall_s",
        "over_budget_s",
        "env_steps_per_s",
        "ppo_steps_per_s",
    }
)


class DeployedPolicy(nn.Module):
    """Normaliser + MLP (mean action) + clip + command map."""

    def __init__(self, actor: nn.Module, steer_full_speed: float = 0.0) -> None:
        super().__init__()
        self.normalizer = copy.deepcopy(actor.obs_normalizer)
        self.mlp = copy.deepcopy(actor.mlp)
        self.steer_full_speed = float(steer_full_speed)

    def forward(self, obs: Tensor) -> Tensor:
        return policy_to_command(self.mlp(self.normalizer(obs)), obs[:, 0], self.steer_full_speed)


class DeployedRecurrentPolicy(nn.Module):
    """Normaliser + GRU + MLP (mean action) + clip + command map, hidden state explicit."""

    def __init__(self, actor: nn.Module, steer_full_speed: float = 0.0) -> None:
        super().__init__()
        self.normalizer = copy.deepcopy(actor.obs_normalizer)
        self.steer_full_speed = float(steer_full_speed)
        self.gru = copy.deepcopy(actor.rnn.rnn)
        self.mlp = copy.deepcopy(actor.mlp)
        self.num_layers = int(self.gru.num_layers)
        self.hidden_size = int(self.gru.hidden_size)

    def forward(self, obs: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        x, h1 = self.gru(self.normalizer(obs).unsqueeze(0), h)
        return policy_to_command(self.mlp(x.squeeze(0)), obs[:, 0], self.steer_full_speed), h1

    def initial_state(self, batch: int) -> Tensor:
        return torch.zeros(self.num_layers, batch, self.hidden_size, device=self.mlp[0].weight.device)


def deployable(actor: nn.Module, steer_full_speed: float = 0.0) -> nn.Module:
    """The deployable module for an rsl_rl actor (MLPModel or RNNModel with a GRU), in eval mode.

    `steer_full_speed` is the env's (s3.task.actions): a policy must be deployed with the map it trained under.
    """
    dist = type(getattr(actor, "distribution", None)).__name__
    if dist != "GaussianDistribution":
        raise ValueError(f"export supports GaussianDistribution actors, got {dist}")
    if getattr(actor, "is_recurrent", False):
        if not isinstance(actor.rnn.rnn, nn.GRU):
            raise ValueError("export supports GRU recurrent actors only")
        return DeployedRecurrentPolicy(actor, steer_full_speed).eval()
    return DeployedPolicy(actor, steer_full_speed).eval()


def as_callable(module: nn.Module, recurrent: bool) -> Callable[[Tensor], Tensor]:
    """A stateful obs -> command callable (a GRU's state starts at zero: make one per episode batch)."""
    if not recurrent:
        return lambda obs: module(obs)
    state: dict[str, Tensor] = {}

    def act(obs: Tensor) -> Tensor:
        h = state.get("h")
        if h is None or h.shape[1] != obs.shape[0]:
            h = module.initial_state(obs.shape[0]).to(obs.device)
        cmd, state["h"] = module(obs, h)
        return cmd

    return act


def export_spec(module: nn.Module) -> dict[str, Any]:
    """How to call the exported graph of `module` (a DeployedPolicy or DeployedRecurrentPolicy): policy.json's
    "export"."""
    spec: dict[str, Any] = {
        "file": EXPORT,
        "format": EXPORT_FORMAT,
        "opset": OPSET,
        "inputs": ["obs"],
        "outputs": ["cmd"],
    }
    if isinstance(module, DeployedRecurrentPolicy):
        spec.update(
            inputs=["obs", "h"],
            outputs=["cmd", "h_next"],
            state_shape=[module.num_layers, "B", module.hidden_size],
            signature="cmd[B,3], h_next[L,B,H] = policy(obs[B,D], h[L,B,H]); h = zeros at an episode start, then "
            "h_next",
        )
    else:
        spec["signature"] = "cmd[B,3] = policy(obs[B,D])"
    return spec


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's notes (torchvision ops it skips, deprecations inside torch.export)."""
    lg = logging.getLogger("torch.onnx")
    level = lg.level
    lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        lg.setLevel(level)


def export_onnx(module: nn.Module, obs_dim: int) -> bytes:
    """The ONNX bytes of a deployable module (CPU, eval mode), batch size dynamic, byte-stable.

    The exporter records where each node came from (Python stack traces with absolute paths,
    FX node names): that provenance is stripped, so the bytes depend on the weights only.
    """
    import onnx

    spec = export_spec(module)
    batch = torch.export.Dim("batch")
    obs = torch.zeros(2, obs_dim)
    recurrent = isinstance(module, DeployedRecurrentPolicy)
    args = (obs, module.initial_state(2)) if recurrent else (obs,)
    shapes = ({0: batch}, {1: batch}) if recurrent else ({0: batch},)
    with _quiet_exporter():
        program = torch.onnx.export(
            module.eval(),
            args,
            dynamo=True,
            opset_version=OPSET,
            dynamic_shapes=shapes,
            input_names=spec["inputs"],
            output_names=spec["outputs"],
            verbose=False,
        )
    model = program.model_proto
    _canonical_names(model.graph, keep={*spec["inputs"], *spec["outputs"], *module.state_dict()})
    _strip_provenance(model.graph)
    del model.metadata_props[:]
    model.doc_string = ""
    meta = {"s3.format": EXPORT_FORMAT, "s3.signature": spec["signature"], "s3.obs_dim": str(obs_dim)}
    if recurrent:
        meta["s3.state_shape"] = json.dumps(spec["state_shape"])
    onnx.helper.set_model_props(model, meta)
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString(deterministic=True)


def _canonical_names(graph: Any, keep: set[str]) -> None:
    """Rename the exporter's generated value and node names (process-wide counters: a second
    export in one process numbers them differently) by order of first use; `keep` stays."""
    if any(a.HasField("g") or len(a.graphs) for n in graph.node for a in n.attribute):
        raise ValueError("export: a graph with subgraphs (If, Loop, Scan) is not supported")
    order: dict[str, int] = {}
    for node in graph.node:
        for name in (*node.input, *node.output):
            if name:
                order.setdefault(name, len(order))
    new = {name: f"v{i}" for name, i in order.items() if name not in keep}
    if set(new.values()) & keep:
        raise ValueError("export: a kept name collides with a generated one")
    for i, node in enumerate(graph.node):
        node.name = f"n{i}"
        node.input[:] = [new.get(x, x) for x in node.input]
        node.output[:] = [new.get(x, x) for x in node.output]
    last = len(order)
    for items in (graph.initializer, graph.value_info):
        ranked = sorted(items, key=lambda v: (order.get(v.name, last), v.name))
        for v in ranked:
            v.name = new.get(v.name, v.name)
        copies = [type(v)() for v in ranked]
        for c, v in zip(copies, ranked):
            c.CopyFrom(v)
        del items[:]
        items.extend(copies)


def _strip_provenance(graph: Any) -> None:
    """Drop doc strings and metadata (stack traces with absolute paths, FX node names)."""
    graph.doc_string = ""
    del graph.metadata_props[:]
    for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        v.doc_string = ""
        del v.metadata_props[:]
    for node in graph.node:
        node.doc_string = ""
        del node.metadata_props[:]


def without_run_only(obj: Any) -> Any:
    """`obj` (policy.json's content) without RUN_ONLY_KEYS at any depth."""
    if isinstance(obj, dict):
        return {k: without_run_only(v) for k, v in obj.items() if k not in RUN_ONLY_KEYS}
    if isinstance(obj, list):
        return [without_run_only(v) for v in obj]
    return obj


def policy_meta(
    *,
    family: str,
    dt: float,
    obs: dict[str, Any],
    policy: dict[str, Any],
    dynamics_model: dict[str, Any] | None,
    validation: dict[str, Any],
    train: dict[str, Any],
    history: list[dict[str, Any]],
    params: dict[str, Any],
    mlflow_run_id: str | None,
    source_simulator: dict[str, Any] | None = None,
    road_course_nominal: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """policy.json's content in its one schema (tests/test_policy_schema.py pins it), JSON-safe (NaN -> null).

    Every policy: format, s3_version, family, dt [s], dynamics_model (None for a policy trained in the
    source simulator), obs (s3.task layout), policy (type, recurrent, num_actions, actor_cfg,
    critic_cfg), validation, train, history, params, mlflow_run_id. Trained in the source simulator:
    source_simulator (backend, control_dt) after dynamics_model; with a road-course check:
    road_course_nominal after validation. Run-only keys (RUN_ONLY_KEYS) stay in the returned dict for
    the stage's metrics; write_policy leaves them out of the file and adds policy["export"].
    """
    meta: dict[str, Any] = {
        "format": "s3-policy-1",
        "s3_version": __version__,
        "family": family,
        "dt": dt,
        "dynamics_model": dynamics_model,
    }
    if source_simulator is not None:
        meta["source_simulator"] = source_simulator
    meta.update(obs=obs, policy=policy, validation=validation)
    if road_course_nominal is not None:
        meta["road_course_nominal"] = road_course_nominal
    meta.update(train=train, history=history, params=params, mlflow_run_id=mlflow_run_id)
    return json_safe(meta)


def write_policy(folder: str | Path, actor: nn.Module, critic: nn.Module, meta: dict[str, Any]) -> Path:
    """Write weights, the ONNX export and policy.json (each atomically); returns the folder.

    `meta` is policy_meta's (tests may pass a part of it). policy.json is `meta` without
    RUN_ONLY_KEYS (wall clocks, run ids: they belong in the stage's metrics), plus
    meta["policy"]["export"] (export_spec): how to call policy.onnx.
    """
    folder = Path(folder)
    state = {f"actor.{k}": v.detach().cpu().contiguous() for k, v in actor.state_dict().items()}
    state.update({f"critic.{k}": v.detach().cpu().contiguous() for k, v in critic.state_dict().items()})
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(state, str(tmp), metadata={"format": "s3-policy-1"})
    module = deployable(actor, saved_steer_full_speed(meta)).cpu()  # deployable copies the submodules it needs
    data = export_onnx(module, int(meta["obs"]["dim"]))
    with atomic_path(folder / EXPORT) as tmp:
        tmp.write_bytes(data)
    _write_meta(folder, {**meta, "policy": {**meta.get("policy", {}), "export": export_spec(module)}})
    return folder


def copy_policy(src: str | Path, dst: str | Path, **extra: Any) -> Path:
    """Copy the policy in `src` to `dst` (weights, ONNX; policy.json last) with `extra` keys added to its
    policy.json (the kept seed's "seed_selection", s3.rl.seeds); returns `dst`."""
    src, dst = Path(src), Path(dst)
    for name in (WEIGHTS, EXPORT):
        with atomic_path(dst / name) as tmp:
            shutil.copyfile(src / name, tmp)
    _write_meta(dst, {**json.loads((src / META).read_text()), **extra})
    return dst


def _write_meta(folder: Path, meta: dict[str, Any]) -> None:
    """policy.json: the one place it is written (byte-stable: no run-only keys)."""
    write_json_atomic(folder / META, without_run_only(meta))


def load_deployed(folder: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """The deployable policy rebuilt from policy.safetensors + policy.json: plain weights, so no
    code from the file runs; its outputs equal policy.onnx's."""
    actor, meta = load_actor(folder, device)
    return deployable(actor, saved_steer_full_speed(meta)).to(device), meta


def load_policy_fn(
    folder: str | Path, device: str | torch.device = "cpu"
) -> tuple[Callable[[Tensor], Tensor], dict[str, Any]]:
    """A ready obs -> command callable from policies/<name>/ (fresh recurrent state)."""
    module, meta = load_deployed(folder, device)
    return as_callable(module, meta["policy"]["recurrent"]), meta


def saved_steer_full_speed(meta: dict[str, Any]) -> float:
    """The steering map a saved policy trained under (0 for policies saved before it existed)."""
    return float(meta.get("params", {}).get("env", {}).get("steer_full_speed", 0.0))


def policy_env_params(meta: dict[str, Any]) -> Any:
    """The EnvParams a saved policy was trained with (its observation layout depends on them)."""
    from s3.task.params import EnvParams

    return EnvParams.model_validate(meta["params"]["env"])


def load_actor(folder: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """The rsl_rl actor rebuilt from policy.json and policy.safetensors (for fine-tuning or analysis)."""
    from s3.rl.ppo import build_actor

    folder = Path(folder)
    meta = json.loads((folder / META).read_text())
    actor = build_actor(meta["obs"]["dim"], meta["policy"]["num_actions"], meta["policy"]["actor_cfg"], device)
    state = load_file(str(folder / WEIGHTS), device=str(device))
    actor.load_state_dict({k[len("actor.") :]: v for k, v in state.items() if k.startswith("actor.")}, strict=True)
    return actor.eval(), meta
