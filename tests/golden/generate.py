"""Golden fixtures that pin the driving task's behaviour (issue 24's refactor check).

    MKL_CBWR=COMPATIBLE python tests/golden/generate.py   # rewrite tests/golden/*.npz, *.json (then commit)

What is pinned (tests/test_golden.py compares against it):
- `model/`: a bicycle model fitted on synthetic rollouts (a fixed dynamics model for the rest);
- `distilled.npz`: 12 cars of a fixed deterministic policy in the distilled env with auto-reset
  and random starts (seed 3) on four procedural tracks with ice, 240 steps: observations [T, N, D],
  rewards, dones, time-outs, reason codes, poses and the model states;
- `distilled_oracle.npz`: the same with the surface label observed (the oracle's observation);
- `builders.npz`: the pose/state/command sequences of four of those cars' first episodes fed to
  the source-side observation builder and to the policy driver (the two other builders);
- `pid.json`: `pid` laps in the embedded MuJoCo car on the road course (nominal and ice, with the
  evaluation's driver aids): reason, lap time, progress, steps and a subsampled trajectory.

The data are float32 / float64 arrays written as numpy saves; the policy is closed-form (pure
pursuit plus a per-car sinusoid on the steering, large for some cars so that they leave the road,
turn round or stall), so nothing here depends on a random policy's weights.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: the tests' own modules (doubles/) importable
    sys.path.insert(0, str(HERE.parent))
N_CARS, N_STEPS, BUILDER_CARS = 12, 240, (0, 3, 5, 8)


def fixed_model():
    """The bicycle model every distilled fixture uses (fitted once, saved under model/)."""
    from s3.dynamics.checkpoint import load_checkpoint

    return load_checkpoint(HERE / "model", "bicycle")


def fit_model() -> None:
    from s3.dynamics.checkpoint import save_checkpoint

    from doubles.synthetic_car import fitted_bicycle

    save_checkpoint(fitted_bicycle(use_mu=True), HERE / "model")


def fixed_tracks():
    """Two circuits and two blobs from the procedural generators, all with ice patches."""
    from s3.rl.params import TrackPoolParams
    from s3.rl.tracks import make_track

    tp = TrackPoolParams.model_validate({"procedural": {"patch_probability": 1.0, "patches_min": 2, "patches_max": 6}})
    return [make_track(seed, tp, circuit) for seed, circuit in ((11, True), (12, False), (13, True), (14, False))]


def env_params(surface_label: bool):
    from s3.task.params import EnvParams

    return EnvParams(
        num_envs=N_CARS, episode_seconds=12.0, surface_label=surface_label, init_speed_max=15.0, stall_seconds=3.0
    )


def policy(layout):
    """Pure pursuit with per-car perturbations, so that episodes end by every rule.

    Cars 0-3: a steering sinusoid of growing amplitude; 4 and 6: a steering bias after 3 s (off
    track); 2 and 7: full brake (stalled); 9 and 11: full lock at crawling speed (turned round);
    the rest: pure pursuit (time-outs).
    """
    from s3.rl.controllers import PurePursuit

    pp = PurePursuit(layout, max_speed=20.0)
    amp = torch.tensor([0.2, 0.4, 0.0, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    bias = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.5, 0.0, -0.7, 0.0, 0.0, 1.0, 0.0, -1.0])
    lon = torch.tensor([0.0, 0.0, -2.0, 0.0, 0.0, 0.0, 0.0, -2.0, 0.0, -0.6, 0.0, -0.6])
    step = {"k": 0}

    def act(obs: torch.Tensor) -> torch.Tensor:
        a = pp(obs)
        k = step["k"]
        step["k"] += 1
        a[:, 0] = a[:, 0] + amp * math.sin(0.3 * k) + (bias if k >= 30 else 0.0)
        a[:, 1] = a[:, 1] + lon
        return a

    return act


def drive_distilled(surface_label: bool) -> dict[str, np.ndarray]:
    """The distilled env's trajectories of the fixed policy: N_STEPS from random starts with
    auto-reset, then 40 from deterministic starts (reset_to: turned round, across the road, fast,
    at rest). Arrays [T, N, ...]."""
    from s3.rl.env import DistilledEnv

    env = DistilledEnv(fixed_model(), fixed_tracks(), env_params(surface_label), num_envs=N_CARS, device="cpu", seed=3)
    out: dict[str, list[np.ndarray]] = {
        k: [] for k in ("obs", "action", "reward", "done", "time_out", "reason", "pose", "state", "command", "track")
    }

    def record(obs: torch.Tensor, steps: int) -> None:
        act = policy(env.layout)
        for _ in range(steps):
            for key, value in (
                ("obs", obs),
                ("pose", env.pose),
                ("state", env.hs[:, -1]),
                ("command", env.ha[:, -1]),
                ("track", env.track_idx),
            ):
                out[key].append(value.numpy().copy())
            a = act(obs)
            td, rew, done, extras = env.step(a)
            obs = td["policy"]
            for key, value in (
                ("action", a),
                ("reward", rew),
                ("done", done),
                ("time_out", extras["time_outs"]),
                ("reason", extras["reason"]),
            ):
                out[key].append(value.numpy().copy())

    with torch.inference_mode():
        record(env.get_observations()["policy"], N_STEPS)
        heading = torch.tensor([0.0, 1.0, 2.0, -2.5, 3.1, 0.5, -1.2, 0.0, 0.3, -0.3, 1.6, -1.6])
        speed = torch.tensor([0.0, 5.0, 8.0, 3.0, 12.0, 20.0, 6.0, 14.0, 10.0, 2.0, 4.0, 9.0])
        starts = env.reset_to(
            torch.arange(N_CARS) % 4, 37.0 * torch.arange(N_CARS), torch.linspace(-1.5, 1.5, N_CARS), heading, speed
        )
        record(starts["policy"], 40)
    return {k: np.stack(v) for k, v in out.items()}


def first_episode(d: dict[str, np.ndarray], car: int) -> slice:
    """Rows [0, end) of car `car`'s first episode (states before and including its last step)."""
    ends = np.flatnonzero(d["done"][:, car])
    return slice(0, int(ends[0]) + 1 if len(ends) else len(d["done"]))


def builders(d: dict[str, np.ndarray], surface_label: bool) -> dict[str, np.ndarray]:
    """The other two builders fed the distilled cars' first-episode states; their observations."""
    from s3.evaluate.policy_driver import PolicyDriver
    from s3.sim.base import VehicleState
    from s3.task.observation import Observer

    tracks, params = fixed_tracks(), env_params(surface_label)
    out: dict[str, np.ndarray] = {}
    for car in BUILDER_CARS:
        rows = first_episode(d, car)
        track = int(d["track"][0, car])
        pose, state, command = (torch.as_tensor(d[k][rows, car]) for k in ("pose", "state", "command"))
        b = Observer.for_params([tracks[track]], params, 1)
        zero = torch.zeros(1, dtype=torch.long)
        b.start(zero, zero, pose[0:1], state[0:1], command[0:1])
        obs_b = [b.compute().numpy()[0]]
        for k in range(1, len(pose)):
            b.observe(pose[k : k + 1], state[k : k + 1], command[k : k + 1])
            obs_b.append(b.compute().numpy()[0])
        pose, state, command = pose.numpy(), state.numpy(), command.numpy()
        drv = PolicyDriver(lambda: lambda o: o, params)
        obs_d = []
        for k in range(len(pose)):
            vs = VehicleState(
                time=0.1 * k,
                x=float(pose[k, 0]),
                y=float(pose[k, 1]),
                yaw=float(pose[k, 2]),
                vx=float(state[k, 0]),
                vy=float(state[k, 1]),
                yaw_rate=float(state[k, 2]),
                steer=float(state[k, 3]),
            )
            if k == 0:
                drv.reset(tracks[track], vs)
            else:
                drv._last_cmd = torch.as_tensor(command[k : k + 1])  # the command that led into state k
            obs_d.append(drv.observation(vs))
        out[f"builder_{car}"] = np.stack(obs_b)
        out[f"driver_{car}"] = np.stack(obs_d)
    return out


def pid_laps() -> dict[str, dict]:
    """`pid` on the road course in the evaluation's car, two starts per condition."""
    from s3.evaluate.drivers import PidDriver
    from s3.evaluate.params import EvaluateParams
    from s3.evaluate.run import run_lap
    from s3.sim.factory import make_sim
    from s3.sim.params import SimParams
    from s3.tracks.road_course import road_course

    ep = EvaluateParams()
    out = {}
    for cond in ("nominal", "ice"):
        track = road_course(cond)
        for frac in (0.0, 0.5):
            sim = make_sim(SimParams())  # the one car: driver aids on
            try:
                r = run_lap(
                    sim,
                    track,
                    PidDriver.for_sim(sim),
                    start_s=frac * track.length,
                    start_speed=5.0,
                    max_seconds=ep.max_lap_seconds,
                    judge=ep.judge,
                )
            finally:
                sim.close()
            tr = r.trajectory
            out[f"{cond}@{frac}"] = {
                "reason": r.reason,
                "completed": r.completed,
                "lap_time": r.lap_time,
                "progress": r.progress,
                "steps": r.steps,
                "every_50": {
                    k: tr[k][::50].tolist() for k in ("x", "y", "vx", "steering_cmd", "throttle_cmd", "brake_cmd", "d")
                },
            }
    return out


def main() -> None:
    torch.set_num_threads(1)
    if "--refit" in sys.argv or not (HERE / "model").exists():
        fit_model()
    for surface, name in ((False, "distilled"), (True, "distilled_oracle")):
        d = drive_distilled(surface)
        np.savez_compressed(HERE / f"{name}.npz", **d, **builders(d, surface))
        reasons = np.bincount(d["reason"][d["done"]].ravel(), minlength=6)
        print(f"{name}: obs {d['obs'].shape}, episodes ended by reason {reasons.tolist()}")
    laps = pid_laps()
    (HERE / "pid.json").write_text(json.dumps(laps, indent=1) + "\n")
    print("pid:", {k: (v["reason"], v["lap_time"]) for k, v in laps.items()})


if __name__ == "__main__":
    main()
