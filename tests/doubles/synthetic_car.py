"""A test double: synthetic rollouts from a known dynamic single-track model, in the exact rollout schema.

The ground truth used to build and test the distill step before real rollouts exist:
a single-track (bicycle) car with Pacejka lateral tyres, a friction ellipse, longitudinal
load transfer, a rear-wheel drivetrain, brakes split front/rear, a steering actuator with lag
and a rate limit, and friction patches (asphalt mu ~1.0, ice mu ~0.15) laid along the distance
driven. Inputs are smooth random steering plus a noisy speed controller, so the data covers
cornering near the grip limit, braking, and slides on ice. Everything is numpy, vectorised over
episodes (all episodes are simulated side by side), RK4 with 10 substeps per control period.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from s3.data.schema import COLUMNS, SCHEMA_VERSION

G = 9.81


@dataclass(frozen=True)
class TruthCar:
    """Parameters of the ground-truth car (SI)."""

    mass: float = 1500.0
    yaw_inertia: float = 2250.0
    lf: float = 1.2
    lr: float = 1.4
    h_cg: float = 0.5
    track_width: float = 1.6
    # Pacejka lateral, per axle: F = mu Fz sin(C atan(B a - E (B a - atan(B a))))
    bf: float = 10.0
    cf: float = 1.5
    ef: float = 0.2
    br: float = 11.0
    cr: float = 1.5
    er: float = 0.2
    cm1: float = 6.0  # m/s^2 full-throttle drive acceleration at rest
    cm2: float = 0.12  # 1/s drive fade with speed
    cr0: float = 0.15  # m/s^2 rolling resistance
    cr2: float = 0.0012  # 1/m aero drag
    cb: float = 9.0  # m/s^2 full-brake deceleration demand
    brake_front: float = 0.6
    max_steer: float = 0.45  # rad road-wheel angle at command 1
    steer_tau: float = 0.12  # s actuator lag
    steer_rate: float = 1.2  # rad/s actuator rate limit
    v_blend: tuple[float, float] = (1.0, 3.0)  # kinematic below, dynamic above

    @property
    def wheelbase(self) -> float:
        return self.lf + self.lr


def _pacejka(alpha: np.ndarray, b: float, c: float, e: float) -> np.ndarray:
    ba = b * alpha
    return np.sin(c * np.arctan(ba - e * (ba - np.arctan(ba))))


def _derivs(car: TruthCar, z: np.ndarray, cmd: np.ndarray, mu_f: np.ndarray, mu_r: np.ndarray) -> np.ndarray:
    """z [N, 7] = (x, y, yaw, vx, vy, r, steer); cmd [N, 3]; returns dz/dt [N, 7] (plus ds/dt in col 7)."""
    _, _, yaw, vx, vy, r, d = z.T
    steer_cmd, thr, brk = cmd.T
    m, lf, lr, L = car.mass, car.lf, car.lr, car.wheelbase
    # longitudinal demand (N), load transfer from the demanded acceleration
    drive = m * np.maximum(car.cm1 - car.cm2 * vx, 0.0) * thr
    brake = m * car.cb * brk * np.tanh(vx / 0.3)
    a_dem = np.clip((drive - brake) / m, -G, G)
    fz_f = m * (G * lr - a_dem * car.h_cg) / L
    fz_r = m * (G * lf + a_dem * car.h_cg) / L
    fmax_f = np.maximum(mu_f * fz_f, 1.0)
    fmax_r = np.maximum(mu_r * fz_r, 1.0)
    fx_f = 0.98 * fmax_f * np.tanh(-car.brake_front * brake / (0.98 * fmax_f))
    fx_r = 0.98 * fmax_r * np.tanh((drive - (1 - car.brake_front) * brake) / (0.98 * fmax_r))
    # lateral, inside the friction ellipse
    u = np.maximum(np.abs(vx), car.v_blend[0])
    a_f = d - np.arctan2(vy + lf * r, u)
    a_r = -np.arctan2(vy - lr * r, u)
    fy_f = fmax_f * np.sqrt(np.clip(1 - (fx_f / fmax_f) ** 2, 0.0, 1.0)) * _pacejka(a_f, car.bf, car.cf, car.ef)
    fy_r = fmax_r * np.sqrt(np.clip(1 - (fx_r / fmax_r) ** 2, 0.0, 1.0)) * _pacejka(a_r, car.br, car.cr, car.er)
    res = m * (car.cr0 * np.tanh(vx / 0.5) + car.cr2 * vx * np.abs(vx))
    cd, sd = np.cos(d), np.sin(d)
    dvx_dyn = (fx_r + fx_f * cd - fy_f * sd - res) / m + vy * r
    dvy_dyn = (fy_r + fy_f * cd + fx_f * sd) / m - vx * r
    dr_dyn = (lf * (fy_f * cd + fx_f * sd) - lr * fy_r) / car.yaw_inertia
    # kinematic relaxation at low speed (slip angles are meaningless near standstill)
    td = np.tan(d)
    dvy_kin = (vx * td * lr / L - vy) / 0.05
    dr_kin = (vx * td / L - r) / 0.05
    lam = np.clip((np.abs(vx) - car.v_blend[0]) / (car.v_blend[1] - car.v_blend[0]), 0.0, 1.0)
    dvy = lam * dvy_dyn + (1 - lam) * dvy_kin
    dr = lam * dr_dyn + (1 - lam) * dr_kin
    dd = np.clip((car.max_steer * steer_cmd - d) / car.steer_tau, -car.steer_rate, car.steer_rate)
    cy, sy = np.cos(yaw), np.sin(yaw)
    out = np.stack([vx * cy - vy * sy, vx * sy + vy * cy, r, dvx_dyn, dvy, dr, dd, np.hypot(vx, vy)], axis=1)
    return out


def _mu_along(s: np.ndarray, edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Friction at distance s[i] along episode i's patches: edges, values [N, P] (edges +inf padded)."""
    k = np.maximum((edges <= s[:, None]).sum(axis=1) - 1, 0)
    return values[np.arange(len(s)), k]


def _friction_layout(rng: np.random.Generator, n: int, ice_fraction: float, mixed_fraction: float):
    """Per episode: patch start distances and mu values. Kinds: 0 asphalt, 1 ice only, 2 mixed."""
    kinds = rng.choice(3, size=n, p=[1 - ice_fraction - mixed_fraction, ice_fraction, mixed_fraction])
    edges, values = [], []
    for k in kinds:
        if k == 0:
            e, v = [-1e9], [rng.uniform(0.9, 1.05)]
        elif k == 1:
            e, v = [-1e9], [rng.uniform(0.12, 0.2)]
        else:
            e, v, s, ice = [-1e9], [], rng.uniform(20, 80), bool(rng.random() < 0.5)
            v.append(rng.uniform(0.12, 0.2) if ice else rng.uniform(0.9, 1.05))
            while s < 5000:
                ice = not ice
                e.append(s)
                v.append(rng.uniform(0.12, 0.2) if ice else rng.uniform(0.9, 1.05))
                s += rng.uniform(20, 80) if ice else rng.uniform(30, 150)
        edges.append(e)
        values.append(v)
    p = max(len(e) for e in edges)
    edge_arr = np.full((n, p), np.inf)
    value_arr = np.ones((n, p))
    for i, (e, v) in enumerate(zip(edges, values)):
        edge_arr[i, : len(e)], value_arr[i, : len(v)] = e, v
    return kinds, edge_arr, value_arr


def _ou(rng: np.random.Generator, x: np.ndarray, tau: np.ndarray, sigma: np.ndarray, dt: float) -> np.ndarray:
    """One step of an Ornstein-Uhlenbeck process with stationary std `sigma`."""
    a = np.exp(-dt / tau)
    return a * x + sigma * np.sqrt(1 - a * a) * rng.standard_normal(x.shape)


def generate_rollouts(
    n_episodes: int = 40,
    episode_steps: int = 500,
    dt: float = 0.1,
    seed: int = 0,
    ice_fraction: float = 0.2,
    mixed_fraction: float = 0.35,
    car: TruthCar = TruthCar(),
    substeps: int = 10,
) -> pd.DataFrame:
    """Simulate `n_episodes` x `episode_steps` control steps; a DataFrame in the rollout schema.

    Row t holds the state at time t and the command applied over [t, t + dt]. Episodes that
    produced a non-finite value are dropped (the schema promises finite rows).
    """
    rng = np.random.default_rng(seed)
    n, T = n_episodes, episode_steps
    kinds, edges, values = _friction_layout(rng, n, ice_fraction, mixed_fraction)
    ice_ep = kinds == 1
    z = np.zeros((n, 8))  # x, y, yaw, vx, vy, r, steer, s
    z[:, 0:2] = rng.uniform(-500, 500, (n, 2))
    z[:, 2] = rng.uniform(-np.pi, np.pi, n)
    z[:, 3] = rng.uniform(0.0, 15.0, n) * np.where(ice_ep, 0.6, 1.0)
    # driver: OU steering with an episode-specific amplitude and time constant, speed targets
    steer_amp = rng.uniform(0.1, 0.6, n)
    steer_tau = rng.uniform(0.4, 1.5, n)
    steer_state = np.zeros(n)
    v_target = rng.uniform(4, 22, n)
    hold = rng.uniform(3, 10, n)
    brake_kick = np.zeros(n)
    rec = np.zeros((T, n, 8))
    cmds = np.zeros((T, n, 3))
    mus = np.zeros((T, n, 2))
    h = dt / substeps
    for t in range(T):
        hold -= dt
        new = hold <= 0
        v_target = np.where(new, rng.uniform(4, 22, n) * np.where(ice_ep, 0.7, 1.0), v_target)
        hold = np.where(new, rng.uniform(3, 10, n), hold)
        steer_state = _ou(rng, steer_state, steer_tau, steer_amp, dt)
        speed = np.hypot(z[:, 3], z[:, 4])
        steer_cmd = np.clip(steer_state * np.minimum(1.0, 9.0 / np.maximum(speed, 1.0)), -1, 1)
        brake_kick = np.where(rng.random(n) < 0.01, rng.uniform(0.3, 1.0, n), brake_kick * 0.8)
        acc = 0.6 * (v_target - z[:, 3]) + 0.3 * rng.standard_normal(n)
        thr = np.clip(acc / 3.0, 0, 1) * (brake_kick < 0.1)
        brk = np.clip(np.maximum(-acc / 6.0, brake_kick), 0, 1)
        cmd = np.stack([steer_cmd, thr, brk], axis=1)
        mu_f = _mu_along(z[:, 7] + car.lf, edges, values)
        mu_r = _mu_along(z[:, 7] - car.lr, edges, values)
        rec[t], cmds[t], mus[t, :, 0], mus[t, :, 1] = z, cmd, mu_f, mu_r
        for _ in range(substeps):  # RK4, friction held over a substep
            k1 = _derivs(car, z[:, :7], cmd, mu_f, mu_r)
            k2 = _derivs(car, z[:, :7] + 0.5 * h * k1[:, :7], cmd, mu_f, mu_r)
            k3 = _derivs(car, z[:, :7] + 0.5 * h * k2[:, :7], cmd, mu_f, mu_r)
            k4 = _derivs(car, z[:, :7] + h * k3[:, :7], cmd, mu_f, mu_r)
            z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    frames = []
    half_tw = 0.5 * car.track_width
    for i in range(n):
        zi, ci, mi = rec[:, i], cmds[:, i], mus[:, i]
        if not (np.isfinite(zi).all() and np.isfinite(ci).all()):
            continue
        vx, r = zi[:, 3], zi[:, 5]
        df = pd.DataFrame(
            {
                "episode": np.full(T, i, dtype=np.int64),
                "step": np.arange(T, dtype=np.int32),
                "time": np.arange(T) * dt,
                "track_id": "synthetic",
                "x": zi[:, 0],
                "y": zi[:, 1],
                "yaw": np.angle(np.exp(1j * zi[:, 2])),
                "vx": vx,
                "vy": zi[:, 4],
                "yaw_rate": r,
                "steer": zi[:, 6],
                "wheel_speed_fl": vx - half_tw * r,
                "wheel_speed_fr": vx + half_tw * r,
                "wheel_speed_rl": vx - half_tw * r,
                "wheel_speed_rr": vx + half_tw * r,
                "steering_cmd": ci[:, 0],
                "throttle_cmd": ci[:, 1],
                "brake_cmd": ci[:, 2],
                "mu_fl": mi[:, 0],
                "mu_fr": mi[:, 0],
                "mu_rl": mi[:, 1],
                "mu_rr": mi[:, 1],
                "mu_mean": mi.mean(axis=1),
                "s": zi[:, 7],
                "lateral_offset": np.zeros(T),
                "off_track": np.zeros(T, dtype=bool),
            }
        )
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    return out[list(COLUMNS)]


def write_rollouts(df: pd.DataFrame, folder: str | Path, dt: float, episodes_per_shard: int = 50) -> Path:
    """Write `df` as shards plus manifest.json in the collect stage's format; returns the folder."""
    from s3 import __version__
    from s3.data.rollouts import sha256_file, shard_name, write_manifest, write_shard

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    eps = np.unique(df["episode"].to_numpy())
    shards = []
    for k in range(0, len(eps), episodes_per_shard):
        part = df[df["episode"].isin(eps[k : k + episodes_per_shard])]
        path = folder / shard_name(k // episodes_per_shard)
        write_shard(path, part, {"s3_collect_key": "synthetic"})
        shards.append(
            {
                "file": path.name,
                "rows": len(part),
                "episodes": int(part["episode"].nunique()),
                "sha256": sha256_file(path),
            }
        )
    manifest = {
        "s3_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "simulator": "synthetic-single-track",
        "control_dt": dt,
        "rows": int(len(df)),
        "episodes": int(len(eps)),
        "shards": shards,
        "note": json.dumps({"source": "tests/doubles/synthetic_car.py"}),
    }
    write_manifest(folder, manifest)
    return folder


def fitted_bicycle(
    history: int = 5, use_mu: bool = False, n_episodes: int = 16, episode_steps: int = 200, seed: int = 1
):
    """A BicycleModel fitted on synthetic rollouts of the known car (grip = asphalt rows): the
    small, fast dynamics model the RL and evaluation tests drive."""
    from s3.dynamics.bicycle import BicycleModel, fit_bicycle

    df = generate_rollouts(n_episodes=n_episodes, episode_steps=episode_steps, seed=seed).sort_values(
        ["episode", "step"]
    )
    s = df[["vx", "vy", "yaw_rate", "steer"]].to_numpy(np.float32)
    a = df[["steering_cmd", "throttle_cmd", "brake_cmd"]].to_numpy(np.float32)
    same = df["episode"].to_numpy()[1:] == df["episode"].to_numpy()[:-1]
    fit = fit_bicycle(s[:-1][same], a[:-1][same], s[1:][same], 0.1, df["mu_mean"].to_numpy()[:-1][same] >= 0.5)
    return BicycleModel(history=history, dt=0.1, use_mu=use_mu, fit=fit)
