"""Manoeuvre probes: the same open-loop commands in the source simulator and in a distilled model.

    probe_model(model, sim) -> {"manoeuvres": {name: {...}}, "summary": {...}}
    probe_folders(families, models_dir, sim_params) -> {family: the same}   (`s3 probe`)

Test-window errors (records/distill) average over the driving the exploration driver happened to
do; a policy seeks out the states where its model is wrong and lives there. The probes drive a
few fixed manoeuvres (cornering, braking, power on; on asphalt and on ice) from the same start
for `SECONDS` in both worlds, on a wide open surface of uniform grip, and compare where the car
ends up and whether it slid. Measured here (reports/history.md): under steady steering with power on
ice the source car spins, while models on the plain single-track physics held a steady slide, so
a policy trained in them kept the power on where the source car turns round (hence
`distill.combined_slip`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.table import Table

from s3.config import ParamsError
from s3.dynamics.base import DynamicsModel
from s3.rl.env import DistilledEnv
from s3.sim.base import Control, SourceSim
from s3.task.params import EnvParams
from s3.tracks.geometry import wrap_angle
from s3.tracks.track import Track

SECONDS = 3.0
CHECKPOINTS_S = (1.0, 2.0, 3.0)
SLIDE_RAD = 0.5  # |sideslip| beyond this at any time: the car slid (about 30 degrees)
ICE_MU = 0.15  # the road course's ice
RADIUS, HALF_WIDTH = 400.0, 40.0  # the open surface: a ring far wider than 3 s of any slide


@dataclass(frozen=True)
class Manoeuvre:
    """Constant policy actions from a straight, steady start at `speed`."""

    name: str
    mu: float
    speed: float  # m/s
    steer: float  # policy action in [-1, 1]
    lon: float  # policy action in [-1, 1]: + throttle, - brake


MANOEUVRES = (
    Manoeuvre("asphalt_corner", 1.0, 12.0, 0.3, 0.2),
    Manoeuvre("asphalt_power_corner", 1.0, 10.0, 0.5, 1.0),
    Manoeuvre("asphalt_brake", 1.0, 20.0, 0.0, -1.0),
    Manoeuvre("asphalt_brake_turn", 1.0, 15.0, 0.3, -0.5),
    Manoeuvre("ice_corner", ICE_MU, 7.0, 0.3, 0.2),
    Manoeuvre("ice_power_corner", ICE_MU, 7.0, 0.3, 1.0),
    Manoeuvre("ice_brake", ICE_MU, 15.0, 0.0, -1.0),
    Manoeuvre("ice_coast_turn", ICE_MU, 10.0, 0.2, 0.0),
)


def open_surface(mu: float) -> Track:
    """A ring of radius RADIUS and half width HALF_WIDTH with grip `mu` everywhere."""
    a = np.linspace(0.0, 2.0 * np.pi, 720, endpoint=False)
    xy = RADIUS * np.stack([np.cos(a), np.sin(a)], axis=1)
    w = np.full(len(a), HALF_WIDTH)
    return Track(f"open_surface_mu{mu:g}", xy, w, w, base_mu=mu)


def _start(track: Track) -> tuple[float, float, float]:
    x, y, yaw = track.pose_at(np.array([0.0]))
    return float(x[0]), float(y[0]), float(yaw[0])


def source_traces(sim: SourceSim, manoeuvres: tuple[Manoeuvre, ...] = MANOEUVRES) -> np.ndarray:
    """[T + 1, M, 6] (x, y, yaw, vx, vy, yaw_rate) of each manoeuvre in the source simulator."""
    steps = round(SECONDS / sim.control_dt)
    out = np.zeros((steps + 1, len(manoeuvres), 6))
    for j, m in enumerate(manoeuvres):
        track = open_surface(m.mu)
        st = sim.reset(track, *_start(track), m.speed)
        cmd = Control(m.steer, max(m.lon, 0.0), max(-m.lon, 0.0))  # = s3.task.actions.policy_to_command (raw map)
        for k in range(steps + 1):
            out[k, j] = (st.x, st.y, st.yaw, st.vx, st.vy, st.yaw_rate)
            if k < steps:
                st = sim.step(cmd)
    return out


@torch.inference_mode()
def model_traces(model: DynamicsModel, manoeuvres: tuple[Manoeuvre, ...] = MANOEUVRES) -> np.ndarray:
    """The same [T + 1, M, 6] from the distilled env (its reset: a steady history at the start speed)."""
    mus = sorted({m.mu for m in manoeuvres})
    params = EnvParams(
        num_envs=len(manoeuvres), off_track_margin=10.0, backwards_heading=3.15, backwards_distance=1000.0
    )
    env = DistilledEnv(model, [open_surface(mu) for mu in mus], params, device="cpu", seed=0, auto_reset=False)
    env.reset_to(
        torch.tensor([mus.index(m.mu) for m in manoeuvres]),
        torch.zeros(len(manoeuvres)),
        speed=torch.tensor([m.speed for m in manoeuvres]),
    )
    actions = torch.tensor([[m.steer, m.lon] for m in manoeuvres])
    steps = round(SECONDS / model.dt)
    out = np.zeros((steps + 1, len(manoeuvres), 6))
    for k in range(steps + 1):
        out[k] = torch.cat([env.pose, env.hs[:, -1, :3]], dim=1).double().numpy()
        if k < steps:
            env.step(actions)
    return out


def compare(
    src: np.ndarray, mdl: np.ndarray, dt: float, manoeuvres: tuple[Manoeuvre, ...] = MANOEUVRES
) -> dict[str, Any]:
    """Per manoeuvre: position, heading and speed error at each checkpoint, and who slid; plus summaries."""
    per: dict[str, Any] = {}
    for j, m in enumerate(manoeuvres):
        row: dict[str, Any] = {**asdict(m)}
        for t in CHECKPOINTS_S:
            k = round(t / dt)
            row[f"pos_err_{t:g}s"] = float(np.hypot(*(mdl[k, j, :2] - src[k, j, :2])))
        k = len(src) - 1
        row["yaw_err_rad"] = float(abs(wrap_angle(mdl[k, j, 2] - src[k, j, 2])))
        row["speed_err"] = float(abs(np.hypot(*mdl[k, j, 3:5]) - np.hypot(*src[k, j, 3:5])))
        for who, tr in (("source", src), ("model", mdl)):
            row[f"{who}_max_sideslip"] = float(
                np.abs(np.arctan2(tr[:, j, 4], np.maximum(np.abs(tr[:, j, 3]), 0.5))).max()
            )
            row[f"{who}_yaw_change"] = float(wrap_angle(tr[k, j, 2] - tr[0, j, 2]))
        row["source_slid"] = row["source_max_sideslip"] > SLIDE_RAD
        row["model_slid"] = row["model_max_sideslip"] > SLIDE_RAD
        per[m.name] = row
    summary: dict[str, Any] = {}
    last = f"pos_err_{CHECKPOINTS_S[-1]:g}s"
    for surface, keep in (("asphalt", lambda m: m.mu >= 0.5), ("ice", lambda m: m.mu < 0.5)):
        rows = [per[m.name] for m in manoeuvres if keep(m)]
        summary[f"pos_err_3s_{surface}"] = float(np.mean([r[last] for r in rows])) if rows else None
    summary["slides_agreed"] = sum(r["source_slid"] == r["model_slid"] for r in per.values())
    summary["source_slides"] = sum(r["source_slid"] for r in per.values())
    summary["manoeuvres"] = len(per)
    return {"manoeuvres": per, "summary": summary, "seconds": SECONDS, "slide_rad": SLIDE_RAD}


def _same_period(sim: SourceSim, model: DynamicsModel, name: str = "the model") -> None:
    if abs(sim.control_dt - model.dt) > 1e-9:
        raise ParamsError(
            f"probe: the simulator's control_dt {sim.control_dt} differs from {name}'s dt {model.dt} (sim.control_dt)"
        )


def probe_model(model: DynamicsModel, sim: SourceSim) -> dict[str, Any]:
    """The manoeuvres in `sim` and in `model`, compared (see the module docstring)."""
    _same_period(sim, model)
    return compare(source_traces(sim), model_traces(model), model.dt)


def probe_folders(families: list[str], models_dir: str | Path, sim_params: Any) -> dict[str, dict[str, Any]]:
    """`probe_model` for models_dir/<family>/ of each family, against one run of the source manoeuvres."""
    from s3.dynamics.checkpoint import load_checkpoint
    from s3.sim.factory import make_sim

    models = {f: load_checkpoint(Path(models_dir) / f, f, "cpu") for f in families}
    sim = make_sim(sim_params)
    try:
        for f, model in models.items():
            _same_period(sim, model, f)
        src = source_traces(sim)
    finally:
        sim.close()
    return {f: compare(src, model_traces(model), model.dt) for f, model in models.items()}


def probe_table(family: str, result: dict[str, Any]) -> Table:
    """One row per manoeuvre: the model's errors and who slid, for the terminal."""
    s = result["summary"]
    table = Table(
        title=f"probe {family}: 3 s error asphalt {s['pos_err_3s_asphalt']:.2f} m, ice {s['pos_err_3s_ice']:.2f} m; "
        f"slides agreed {s['slides_agreed']}/{s['manoeuvres']}"
    )
    for col in (
        "manoeuvre",
        "pos err 1 / 2 / 3 s (m)",
        "heading err (rad)",
        "speed err (m/s)",
        "max sideslip source / model (rad)",
        "turn source / model (rad)",
    ):
        table.add_column(col, justify="left" if col == "manoeuvre" else "right")
    for name, r in result["manoeuvres"].items():
        table.add_row(
            name,
            f"{r['pos_err_1s']:.2f} / {r['pos_err_2s']:.2f} / {r['pos_err_3s']:.2f}",
            f"{r['yaw_err_rad']:.2f}",
            f"{r['speed_err']:.2f}",
            f"{r['source_max_sideslip']:.2f} / {r['model_max_sideslip']:.2f}",
            f"{r['source_yaw_change']:+.2f} / {r['model_yaw_change']:+.2f}",
        )
    return table
