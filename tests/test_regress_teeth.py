"""The regression check has teeth: a policy that laps, recorded, then broken, fails `s3 regress`.

The policy is an exported rsl_rl actor whose weights are set by hand so that it follows the
centerline (no training: a trained policy with a test-sized budget does not lap reliably, and the
quick pipeline's are trained for seconds). It is saved by the project's own export
(write_policy: policy.safetensors, policy.onnx, policy.json) as two seeds of `direct` (evaluated
in the source simulator only: no distilled model needed), then driven by the real `s3 evaluate`
on the quick circuit `short` (676 m, tightest radius 18 m), one start, nominal: it laps it
(lap share 1). Flipping the sign of the actor's output layer in every seed's weights and ONNX
turns steering and pedals around: the car brakes at the start and stalls (lap share ~0.003),
so `s3 regress` must fail on the completion rate, the lap share and the lap time. The same
healthy policy evaluated twice must pass (the evaluation is deterministic).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from s3.cli import app
from s3.config import load_params
from s3.rl.export import EXPORT, WEIGHTS, load_deployed, write_policy
from s3.rl.ppo import build_actor
from s3.task.layout import obs_layout
from s3.task.params import EnvParams

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ["--params", str(ROOT / "params_quick.yaml")]
SMALL = [
    f"--set={s}"
    for s in (
        "evaluate.tracks=[short]",
        "evaluate.conditions=[nominal]",
        "evaluate.start_fractions=[0.0]",
        "evaluate.workers=1",
        "regress.exclude_files=[]",
    )
]  # direct is left out of the nightly's check (a wall-clock budget); here it is judged
NAME, SEEDS = "direct", (0, 1)
LOOK_POINT, STEER_GAIN = (
    2,
    0.1,
)  # steer = 0.1 per m of the centerline's lateral offset 10 m ahead (pure pursuit at 10 m: ~0.12)
TARGET_SPEED, SPEED_GAIN = 10.0, 0.5  # longitudinal = 0.5 * (10 m/s - vx): 10 m/s = 5.6 m/s^2 in the 18 m corner


def follower_policy(folder: Path) -> None:
    """A centerline follower as an exported MLP policy (ReLU, 4 hidden units: +-steer, +-speed error)."""
    env = EnvParams(obs_history=0, preview_points=4, preview_spacing=5.0)
    layout = obs_layout(env)
    cfg = {
        "class_name": "MLPModel",
        "hidden_dims": [4],
        "activation": "relu",
        "obs_normalization": False,
        "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.1},
    }
    actor = build_actor(layout.dim, 2, cfg)
    critic = build_actor(layout.dim, 1, {k: v for k, v in cfg.items() if k != "distribution_cfg"})
    y_ahead = layout.groups["preview_xy"].start + 2 * (LOOK_POINT - 1) + 1
    vx = layout.groups["state"].start
    w1, b1 = torch.zeros(4, layout.dim), torch.zeros(4)
    w1[0, y_ahead], w1[1, y_ahead] = STEER_GAIN, -STEER_GAIN
    w1[2, vx], b1[2] = -SPEED_GAIN, SPEED_GAIN * TARGET_SPEED
    w1[3, vx], b1[3] = SPEED_GAIN, -SPEED_GAIN * TARGET_SPEED
    with torch.no_grad():
        actor.mlp[0].weight.copy_(w1)
        actor.mlp[0].bias.copy_(b1)
        actor.mlp[2].weight.copy_(torch.tensor([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]]))
        actor.mlp[2].bias.zero_()
    meta = {
        "family": NAME,
        "dt": load_params(ROOT / "params_quick.yaml").sim.control_dt,
        "obs": layout.to_json(),
        "params": {"seed": SEEDS[0], "env": env.model_dump(mode="json")},
        "policy": {"type": "mlp", "recurrent": False, "num_actions": 2, "actor_cfg": cfg},
    }
    write_policy(
        folder, actor, critic, meta
    )  # the selected seed at the top, every seed under seeds/ (as s3.rl.seeds keeps them)
    for seed in SEEDS:
        shutil.copytree(folder, folder / "seeds" / f"seed{seed}", ignore=shutil.ignore_patterns("seeds"))


def flip_output_layer(folder: Path) -> None:
    """Negate the actor's last linear layer in policy.safetensors and policy.onnx (a broken policy)."""
    import onnx
    from onnx import numpy_helper

    state = load_file(str(folder / WEIGHTS))
    with safe_open(str(folder / WEIGHTS), "pt") as f:
        metadata = f.metadata()
    last = max(int(k.split(".")[2]) for k in state if k.startswith("actor.mlp.") and k.endswith(".weight"))
    names = {f"mlp.{last}.weight", f"mlp.{last}.bias"}
    for name in names:
        state[f"actor.{name}"] = -state[f"actor.{name}"]
    save_file(state, str(folder / WEIGHTS), metadata=metadata)
    model = onnx.load(str(folder / EXPORT))
    for init in model.graph.initializer:
        if init.name in names:
            init.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(init), init.name))
    onnx.save(model, str(folder / EXPORT))


def _commands(folder: Path, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(what the evaluator drives: safetensors via load_deployed, what policy.onnx computes) for `obs`."""
    from onnx.reference import ReferenceEvaluator

    module, _ = load_deployed(folder)
    with torch.no_grad():
        torch_cmd = module(torch.as_tensor(obs)).numpy()
    return torch_cmd, ReferenceEvaluator(str(folder / EXPORT)).run(None, {"obs": obs})[0]


def _lap_shares(ws: Path) -> tuple[float, float, dict]:
    ev = json.loads((ws / "records/eval" / f"{NAME}.json").read_text())
    block = ev["summary"]["short"]["nominal"]
    return block["lap_share"]["estimate"], block["completion_rate"]["estimate"], ev


@pytest.mark.slow  # nightly (make test-all): keeps make test within its 15 minutes
def test_broken_policy_fails_the_regression_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("S3_MLFLOW", "0")
    runner = CliRunner()

    def s3(*args: str) -> tuple[int, str]:
        r = runner.invoke(app, [*args, *PARAMS, *SMALL])
        return r.exit_code, r.output

    policy = tmp_path / "policies" / NAME
    follower_policy(policy)
    code, out = s3("evaluate", "--family", NAME)
    assert code == 0, out
    share, completion, ev = _lap_shares(tmp_path)
    assert ev["seeds"] == list(SEEDS) and len(ev["runs"]) == len(SEEDS)
    assert share == 1.0 and completion == 1.0, ev["runs"]  # every seed laps: a broken one has 1.0 to fall from
    code, out = s3("regress", "--record")
    assert code == 0, out
    recorded = json.loads((tmp_path / "baselines/regression.json").read_text())["metrics"][f"records/eval/{NAME}.json"]
    assert recorded["summary.short.nominal.lap_share.estimate"] == 1.0

    code, out = s3("evaluate", "--family", NAME)  # the same policy again: deterministic, so no regression
    assert code == 0, out
    code, out = s3("regress")
    assert code == 0 and "no regression" in out, out

    obs = np.zeros((1, json.loads((policy / "policy.json").read_text())["obs"]["dim"]), np.float32)
    obs[0, 0] = 5.0  # vx: below the target speed, so the healthy policy accelerates
    healthy, _ = _commands(policy / "seeds/seed0", obs)
    for folder in (policy, *(policy / "seeds" / f"seed{s}" for s in SEEDS)):
        flip_output_layer(folder)
        broken, onnx_cmd = _commands(folder, obs)
        np.testing.assert_allclose(onnx_cmd, broken, atol=1e-6)  # the ONNX export is broken the same way
        assert healthy[0, 1] > 0 and broken[0, 1] == 0 and broken[0, 2] > 0  # throttle became brake
    code, out = s3("evaluate", "--family", NAME)
    assert code == 0, out
    share, completion, ev = _lap_shares(tmp_path)
    assert share < 0.05 and completion == 0.0, ev["runs"]  # far below 1.0 - regress.completion_drop

    code, out = s3("regress")
    assert code == 1, out
    failed = {line.split()[3].rstrip(":") for line in out.splitlines() if line.startswith("FAIL")}
    judged = {
        f"summary.{where}.nominal.{key}.estimate"
        for where in ("suite", "short")
        for key in ("completion_rate", "lap_share", "lap_time_s")
    }
    assert failed == judged, out
    assert f"FAIL completion records/eval/{NAME}.json summary.short.nominal.lap_share.estimate: 1 -> " in out
    assert out.strip().splitlines()[-1].startswith("REGRESSION")
