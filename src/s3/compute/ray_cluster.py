"""Joining Ray, and what its nodes can hold: the connection half of the `ray` executor backend.

`connect` (once per process) starts a loopback-only local instance of the stage's own or joins the
cluster `compute.address` names, with token authentication; `per_node`/`fits`/`check_fits` answer
whether a job's resources (CPUs, GPUs, a simulator instance's custom resource) fit one node.
The contract of each is in s3.compute.ray_executor's module docstring.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from s3.compute.params import ComputeParams, JobResources


class RayUnavailable(RuntimeError):
    """compute.backend is ray but Ray is not installed, refuses authentication, or lacks a resource."""


def instance_resource(address: str) -> str:
    """The Ray custom resource standing for one simulator instance (a node that reaches it declares 1)."""
    return "s3_sim_" + re.sub(r"[^A-Za-z0-9]", "_", address)


def connect(compute: ComputeParams, instances: Sequence[str] = ()) -> Any:
    """The `ray` module, connected as `compute` says (once per process; a connected one is reused)."""
    # Ray reads its authentication settings when it is first imported: set them before
    mode = os.environ.setdefault("RAY_AUTH_MODE", "token")
    if mode == "disabled":
        raise RayUnavailable(
            "RAY_AUTH_MODE=disabled: s3 does not run Ray without authentication (unset it, or set it to 'token')"
        )
    loaded = sys.modules.get("ray")
    if compute.address == "" and not _has_token() and not (loaded and loaded.is_initialized()):
        if loaded is not None:  # Ray read its settings on import: a token set now would not be used
            raise RayUnavailable(
                "Ray was imported before s3 could give its local instance a token: set RAY_AUTH_TOKEN (or import "
                "ray after s3 connects)"
            )
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(
            32
        )  # a local instance of this stage's own: a fresh secret (this process and its children)
    try:
        import ray
    except ImportError:
        raise RayUnavailable("compute.backend is 'ray' but Ray is not installed: pip install 's3[ray]'") from None
    if not ray.is_initialized():
        if compute.address == "":
            with _loopback_only():
                ray.init(
                    address="local",  # a new instance, whatever RAY_ADDRESS or a running `ray start` says
                    num_cpus=compute.local_cpus or os.cpu_count() or 1,
                    resources={instance_resource(a): 1.0 for a in instances},
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    logging_level="warning",
                    log_to_driver=True,
                )
        else:
            with _loopback_only() if _is_loopback(compute.address) else contextlib.nullcontext():
                ray.init(address=compute.address, logging_level="warning", log_to_driver=True)
    have = ray.cluster_resources()
    missing = [instance_resource(a) for a in instances if have.get(instance_resource(a), 0) < 1]
    if missing:
        raise RayUnavailable(
            f"no Ray node declares the simulator instance resource(s) {', '.join(missing)}: start the node that "
            f"reaches each instance with `ray start ... --resources '{{\"{missing[0]}\": 1}}'` (docs/cluster.md)"
        )
    return ray


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """While a local instance starts: keep 127.0.0.1 as its node address, so that its servers bind
    to the loopback interface only. Ray 2.60's ray.init swaps a loopback address for the machine's
    outward one (services.resolve_ip_for_localhost) and its servers then listen on every interface;
    with the node address left at 127.0.0.1 they listen on 127.0.0.1 alone (tests/test_ray.py)."""
    from ray._private import services

    resolve = getattr(services, "resolve_ip_for_localhost", None)
    if resolve is None:
        raise RayUnavailable(
            f"ray {_version()}: ray._private.services.resolve_ip_for_localhost is gone; s3 cannot keep a local "
            "instance on 127.0.0.1"
        )
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = resolve


def _is_loopback(address: str) -> bool:
    """Whether `address` ('host:port') names this machine's loopback interface: a cluster whose nodes
    were started on 127.0.0.1, joined as such (Ray would swap the address for the machine's outward one)."""
    host = address.rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


def _version() -> str:
    import ray

    return str(ray.__version__)


def _has_token() -> bool:
    """Whether Ray will find a token: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token."""
    return (
        bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"))
        or (Path.home() / ".ray" / "auth_token").is_file()
    )


def per_node(ray: Any, free: bool = False) -> list[dict[str, float]]:
    """Each live node's resources (its totals, or what is free now: Ray's view lags a moment); one
    cluster-wide entry where Ray cannot say per node (e.g. through Ray Client)."""
    try:
        from ray._private import state  # DeveloperAPI in Ray 2.60

        nodes = (state.available_resources_per_node() if free else state.total_resources_per_node()).values()
        return [{k: float(v) for k, v in node.items()} for node in nodes]
    except Exception:  # no per-node view here: the cluster's sums, a weaker check
        return [{k: float(v) for k, v in (ray.available_resources() if free else ray.cluster_resources()).items()}]


def fits(node: dict[str, float], want: dict[str, float]) -> int:
    """How many jobs asking `want` (resource -> amount) one node's `node` resources hold at once."""
    return min(
        int(node.get(k, 0.0) / v + 1e-9) for k, v in want.items() if v > 0
    )  # callers ask CPUs (> 0 by the params)


def check_fits(ray: Any, key: str, resources: JobResources, instances: Sequence[str] = ()) -> None:
    """Refuse at once, naming `key`, a job that no node of the cluster could ever hold (it would wait for ever):
    its CPUs and GPUs together, and with each simulator instance, on the node that declares it."""
    nodes = per_node(ray)
    want = {"CPU": float(resources.num_cpus), "GPU": float(resources.num_gpus)}
    for name, res in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
        most = max((n.get(res, 0.0) for n in nodes), default=0.0)
        if want[res] > most:
            raise RayUnavailable(
                f"{key}.{name}: a job asks {want[res]:g}, the largest node of the Ray cluster has {most:g}"
            )
    if not any(fits(n, want) for n in nodes):
        raise RayUnavailable(
            f"{key}: a job asks {want['CPU']:g} CPUs and {want['GPU']:g} GPUs on one node; no node of the Ray "
            "cluster has both"
        )
    for address in instances:
        if not any(fits(n, {**want, instance_resource(address): 1.0}) for n in nodes):
            raise RayUnavailable(
                f"{key}: the node that declares {instance_resource(address)} has fewer than {want['CPU']:g} CPUs / "
                f"{want['GPU']:g} GPUs"
            )
