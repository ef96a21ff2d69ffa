"""The two-node rehearsal (docs/cluster.md): a Ray head and a worker node started as separate
processes with `ray start` on 127.0.0.1 (token authentication on, one CPU each), and `s3 collect`
run as a stage against the head's address: its shards are the local backend's bytes, its jobs ran
on both nodes, and every server of the two nodes listens on the loopback interface only."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
TINY = ["collect.episodes=6", "collect.episode_steps=60", "collect.episodes_per_shard=1", "collect.n_tracks=2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# `ray start`, keeping 127.0.0.1: Ray 2.60 swaps a loopback node or head address for the machine's
# outward one (services.resolve_ip_for_localhost) and its servers then listen on every interface.
RAY_START_ON_LOOPBACK = """
import sys
from ray._private import services
services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import main
sys.argv = ["ray", *sys.argv[1:]]
main()
"""


def _ray(env: dict[str, str], *args: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", RAY_START_ON_LOOPBACK, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def _cluster(token: str) -> list[psutil.Process]:
    """The processes of the cluster holding `token` (every one inherits it from its `ray start`)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("RAY_AUTH_TOKEN") == token and p.pid != os.getpid():
                found.append(p)
        except psutil.Error:
            pass
    return found


@pytest.fixture
def two_nodes() -> Iterator[tuple[dict[str, str], str]]:
    """(the environment holding the cluster's token, the head's address); both nodes' processes
    stopped after (only these: `ray stop` would stop every Ray on the machine)."""
    token = secrets.token_hex(32)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    address = f"127.0.0.1:{_free_port()}"
    common = ["--num-cpus=1", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    try:
        _ray(env, "start", "--head", f"--port={address.rsplit(':', 1)[1]}", "--include-dashboard=false", *common)
        _ray(env, "start", f"--address={address}", *common)
        yield env, address
    finally:
        procs = _cluster(token)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=20)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()


def _collect(tmp: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    sets = [f"collect.out_dir={tmp}/rollouts", f"collect.plot_dir={tmp}/plots", *TINY, *extra]
    cmd = [str(BIN / "s3"), "collect", "--quiet", *[a for s in sets for a in ("--set", s)]]
    r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_a_stage_runs_on_a_two_node_cluster_with_the_local_outputs(two_nodes, tmp_path: Path) -> None:
    env, address = two_nodes
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    _collect(tmp_path / "local", env, "collect.workers=2")
    r = _collect(tmp_path / "ray", env, "compute.backend=ray", f"compute.address={address}")
    line = re.search(
        r"ray: (\d+) jobs on (\d+) node\(s\) in ([\d.]+) s \(([\d.]+) job-seconds, (\d+)% of the cluster's (\d+) "
        r"CPUs busy\)",
        r.stderr,
    )
    assert line, r.stderr[-3000:]
    jobs, nodes, cpus = int(line.group(1)), int(line.group(2)), int(line.group(6))
    assert (jobs, nodes, cpus) == (6, 2, 2)  # every shard a job, spread over both nodes' single CPUs
    print(f"rehearsal: {line.group(0)}")  # the utilisation, for docs/cluster.md
    shards = {
        p: json.loads((tmp_path / p / "rollouts" / "manifest.json").read_text())["shards"] for p in ("local", "ray")
    }
    assert len(shards["local"]) == 6 and shards["ray"] == shards["local"]  # the same files, the same bytes
    procs = _cluster(env["RAY_AUTH_TOKEN"])
    listening = {(p.name(), c.laddr.ip) for p in procs for c in _connections(p) if c.status == psutil.CONN_LISTEN}
    assert len({name for name, _ in listening}) >= 2 and sum("raylet" in name for name, _ in listening) >= 1, (
        listening
    )  # gcs + 2 raylets at least
    assert {ip for _, ip in listening} <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, listening


def _connections(p: psutil.Process) -> list:
    try:
        return p.net_connections(kind="inet")
    except psutil.Error:
        return []
