"""The `ray` backend of the executor seam (s3.compute.ray_executor): the contract of the local pool
(order, retries, instances, what stops a stage), a killed worker costing only its job, a local
instance on the loopback interface with token authentication, and the same outputs as `local` for
a tiny collect, train and evaluate. One local Ray instance serves the module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from test_executor import _attempt, flaky, interval, on_instance, says_no, slow_square
from test_train import TINY

from s3.compute.backend import executor_for
from s3.compute.executor import INSTANCE_ENV, Job, LocalExecutor
from s3.compute.params import ComputeParams, JobResources, RetryPolicy
from s3.compute.ray_cluster import RayUnavailable, connect
from s3.compute.ray_executor import RayExecutor
from s3.config import load_params
from s3.sim.base import SimulatorRejected

torch.set_num_threads(1)

TESTS = str(Path(__file__).parent)
INSTANCES = ("127.0.0.1:64256", "127.0.0.1:64257")  # two simulator instances' resources, declared by the local instance
RAY = ComputeParams(backend="ray", local_cpus=2, retry=RetryPolicy(retries=2, retry_backoff_s=0.01))


@pytest.fixture(scope="module")
def ray_up():
    """One local Ray instance for the module; its workers import this folder's modules (test_executor's jobs)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    with pytest.MonkeyPatch.context() as at:
        at.setenv(
            "RAY_ADDRESS", "127.0.0.1:1"
        )  # nothing there: address '' must start an instance of its own, not join this
        ray = connect(RAY, INSTANCES)
    yield ray
    ray.shutdown()
    mp.undo()


def pid_then_sleep(folder: str, name: str, seconds: float) -> str:
    """Write this attempt's pid where the test can see it, then work for `seconds`."""
    k = _attempt(folder, name)
    Path(folder, f"pid-{name}-{k}").write_text(str(os.getpid()))
    time.sleep(seconds)
    return name


def env_of(*keys: str) -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in keys}


def test_results_come_back_in_job_order_with_the_clusters_share(ray_up) -> None:
    ex = executor_for(RAY, "collect", label="test")
    assert isinstance(ex, RayExecutor) and not ex.shared_fs
    out = ex.run([Job(f"j{i}", slow_square, (i,)) for i in range(4)])
    assert [o.value for o in out] == [0, 1, 4, 9] and all(o.ok and o.retries == 0 for o in out)
    assert ex.stats["jobs"] == 4 and ex.stats["nodes"] == 1 and ex.stats["cluster_cpus"] == 2.0
    assert 0.0 < ex.stats["utilisation"] <= 1.0


def test_a_killed_worker_costs_only_its_own_job(ray_up, tmp_path: Path) -> None:
    ex = RayExecutor(RAY, "collect", label="test")
    jobs = [Job(name, pid_then_sleep, (str(tmp_path), name, 2.0)) for name in ("a", "b", "c")]
    pid = tmp_path / "pid-b-1"

    def kill_b() -> None:
        deadline = time.monotonic() + 240  # Ray starts its workers niced: on a busy machine b may start late
        while not pid.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(int(pid.read_text()), signal.SIGKILL)  # mid-job: b sleeps 2 s after writing its pid

    killer = threading.Thread(target=kill_b)
    killer.start()
    out = ex.run(jobs)
    killer.join()
    assert [o.value for o in out] == ["a", "b", "c"]
    assert [o.retries for o in out] == [0, 1, 0] and out[1].causes == ["worker process died"]
    assert sorted(f.name for f in tmp_path.iterdir() if "pid" not in f.name) == [
        "a.1",
        "b.1",
        "b.2",
        "c.1",
    ]  # b ran twice, a and c once
    assert ex.stats["attempts"] == 4


def test_retries_follow_the_one_policy_and_a_rejection_stops_the_stage(ray_up, tmp_path: Path) -> None:
    ex = RayExecutor(RAY, "evaluate", label="test")
    out = ex.run([Job("f", flaky, (str(tmp_path), "f", 2)), Job("g", flaky, (str(tmp_path), "g", 3))])
    assert out[0].ok and out[0].retries == 2 and out[0].causes == ["simulator lost"] * 2
    assert not out[1].ok and out[1].retries == 2 and "g dropped" in out[1].error  # retries spent: lost, not fatal
    with pytest.raises(SimulatorRejected, match="no such vehicle"):
        ex.run([Job("no", says_no, (str(tmp_path),))])
    assert (tmp_path / "no.1").exists() and not (tmp_path / "no.2").exists()  # never retried


def test_jobs_see_this_process_s3_environment_only(ray_up, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_PROBE", "here")
    monkeypatch.setenv("NOT_S3_PROBE", "not passed")
    (o,) = RayExecutor(RAY, "collect").run([Job("env", env_of, ("S3_PROBE", "NOT_S3_PROBE"))])
    assert o.value == {"S3_PROBE": "here", "NOT_S3_PROBE": None}
    # a worker's own S3_* variables (from its start) are hidden during a job and back after it
    from s3.compute.ray_executor import _in_ray_worker

    monkeypatch.delenv("S3_PROBE")
    monkeypatch.setenv("S3_WORKER_ONLY", "stale")
    value, _, _ = _in_ray_worker({"S3_PROBE": "job"}, env_of, ("S3_PROBE", "S3_WORKER_ONLY"))
    assert value == {"S3_PROBE": "job", "S3_WORKER_ONLY": None}
    assert env_of("S3_PROBE", "S3_WORKER_ONLY") == {"S3_PROBE": None, "S3_WORKER_ONLY": "stale"}


def interval_after_peer(folder: str, name: str) -> tuple[float, float]:
    """`interval` once a second job has started too (at most 60 s): two jobs that Ray runs side by side
    overlap whatever its workers' start-up, and jobs it runs one after the other do not."""
    Path(folder, f"started-{name}").touch()
    deadline = time.monotonic() + 60.0
    while sum(1 for f in os.listdir(folder) if f.startswith("started-")) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    return interval(folder, name)


def test_instances_are_custom_resources_one_job_each(ray_up, tmp_path: Path) -> None:
    ex = RayExecutor(
        RAY, "collect", instances=INSTANCES[:1]
    )  # one instance, two CPUs: the instance is what serialises the jobs
    out = ex.run(
        [Job(f"j{i}", interval, (str(tmp_path), f"j{i}")) for i in range(4)] + [Job("env", env_of, (INSTANCE_ENV,))]
    )
    assert out[-1].value[INSTANCE_ENV] == INSTANCES[0]
    spans = [o.value for o in out[:-1]]
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) == 1  # never two jobs on one instance
    free = RayExecutor(RAY, "collect").run(
        [Job(f"k{i}", interval_after_peer, (str(tmp_path), f"k{i}")) for i in range(4)]
    )
    spans = [o.value for o in free]
    assert (
        max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) == 2
    )  # without an instance: both CPUs (the check can fail)
    with pytest.raises(RayUnavailable, match="s3_sim_127_0_0_1_9"):
        RayExecutor(RAY, "collect", instances=("127.0.0.1:9",))


def test_the_local_instance_listens_on_loopback_with_token_authentication(ray_up) -> None:
    listening = [
        c.laddr.ip
        for p in psutil.Process().children(recursive=True)
        for c in _connections(p)
        if c.status == psutil.CONN_LISTEN
    ]
    assert len(listening) >= 3  # gcs, raylet, object manager at least: the check has something to check
    assert set(listening) <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, listening
    assert os.environ["RAY_AUTH_MODE"] == "token"
    # the GCS answers a caller with this process's token, and refuses one with none or another
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(grpc.insecure_channel(ray_up.get_runtime_context().gcs_address))
    codes = {}
    for who, token in (("none", None), ("other", "0" * 64), ("ours", os.environ["RAY_AUTH_TOKEN"])):
        try:
            stub.GetAllNodeInfo(
                gcs_service_pb2.GetAllNodeInfoRequest(),
                metadata=[("authorization", f"Bearer {token}")] if token else [],
                timeout=10,
            )
            codes[who] = grpc.StatusCode.OK
        except grpc.RpcError as e:
            codes[who] = e.code()
    assert codes == {
        "none": grpc.StatusCode.UNAUTHENTICATED,
        "other": grpc.StatusCode.UNAUTHENTICATED,
        "ours": grpc.StatusCode.OK,
    }


def _connections(p: psutil.Process) -> list:
    try:
        return p.net_connections(kind="inet")
    except psutil.Error:
        return []


def test_params_name_a_bad_backend_or_address() -> None:
    with pytest.raises(ValueError, match="backend"):
        load_params(None, ["compute.backend=slurm"])
    with pytest.raises(ValueError, match="address"):
        load_params(None, ["compute.backend=ray", "compute.address=headnode"])
    with pytest.raises(ValueError, match="num_gpus"):
        load_params(None, ["compute.resources.train.num_gpus=-1"])


def test_a_loopback_address_is_joined_on_the_loopback_interface() -> None:
    from s3.compute.ray_cluster import _is_loopback

    assert all(_is_loopback(a) for a in ("127.0.0.1:6379", "localhost:6379", "[::1]:6379", "127.0.1.1:1"))
    assert not any(_is_loopback(a) for a in ("10.0.0.5:6379", "auto", "ray://127.0.0.1:10001", "head.example:6379"))


# ---------------------------------------------------------------------- the same outputs as the local pool
def test_collect_train_evaluate_give_the_local_outputs(ray_up, tmp_path: Path) -> None:
    from s3.data.collect import collect
    from s3.data.rollouts import read_manifest
    from s3.dynamics.checkpoint import save_checkpoint
    from s3.evaluate.evaluate import evaluate_driver
    from s3.evaluate.params import EvaluateParams
    from s3.evaluate.policy_driver import PolicyFactory
    from s3.rl.export import EXPORT, WEIGHTS
    from s3.rl.params import TrainParams
    from s3.rl.seeds import train_seeds

    from doubles.synthetic_car import fitted_bicycle

    tiny = [
        "collect.episodes=3",
        "collect.episode_steps=40",
        "collect.episodes_per_shard=1",
        "collect.n_tracks=2",
        "collect.workers=1",
    ]
    ray_set = ["compute.backend=ray", "compute.local_cpus=2"]
    out: dict[str, dict] = {}
    save_checkpoint(fitted_bicycle(), tmp_path / "models" / "bicycle")
    tp = TrainParams.model_validate(
        {
            **TINY,
            "max_env_steps": 64 * 8 * 3,
            "chunk_iterations": 3,
            "seeds": 2,
            "seed_workers": 1,
            "torch_threads": 1,
            "env": {"num_envs": 64, "episode_seconds": 10.0},
            "ppo": {**TINY["ppo"], "num_steps_per_env": 8},
        }
    )
    ep = EvaluateParams(
        tracks=["short"], conditions=["nominal"], start_fractions=[0.0], max_lap_seconds=15.0, workers=1, gif=False
    )
    for backend, extra in (("local", []), ("ray", ray_set)):
        ws = tmp_path / backend
        params = load_params(None, [*tiny, f"collect.out_dir={ws}/rollouts", f"collect.plot_dir={ws}/plots", *extra])
        collect(params, quiet=True)
        shards = {s["file"]: s["sha256"] for s in read_manifest(ws / "rollouts")["shards"]}
        train_seeds(
            "bicycle",
            "bicycle",
            tmp_path / "models" / "bicycle",
            ws / "policies",
            ws / "plots" / "bicycle.png",
            tp,
            compute=params.compute,
        )
        seeds = ws / "policies" / "bicycle" / "seeds"
        weights = {s.name: (s / WEIGHTS).read_bytes() for s in sorted(seeds.iterdir())}
        meta = json.loads((ws / "policies" / "bicycle" / "policy.json").read_text())
        drivers = [(k, PolicyFactory(seeds / f"seed{k}")) for k in (1, 2)]
        ev = evaluate_driver("bicycle", drivers, params, ws / "metrics" / "bicycle.json", None, ep)
        runs = [{k: v for k, v in r.items() if k != "wall_s"} for r in ev["runs"]]
        out[backend] = {
            "shards": shards,
            "weights": weights,
            "export": (ws / "policies" / "bicycle" / EXPORT).read_bytes(),
            "meta": meta,
            "runs": runs,
        }
    local, ray = out["local"], out["ray"]
    assert len(local["shards"]) == 3 and ray["shards"] == local["shards"]  # the same bytes
    assert sorted(local["weights"]) == ["seed1", "seed2"] and ray["weights"] == local["weights"]
    assert ray["export"] == local["export"] and ray["meta"] == local["meta"]
    assert ray["meta"]["dynamics_model"]["folder"] == str(
        tmp_path / "models" / "bicycle"
    )  # not the job's temporary copy
    assert len(local["runs"]) == 2 and ray["runs"] == local["runs"]
    assert not (tmp_path / "ray" / "policies" / ".seeds").exists()  # every candidate moved into place


def test_the_local_backend_needs_no_ray(tmp_path: Path) -> None:
    """A local stage (a tiny collect through the pool) in a process where `import ray` fails: it neither
    imports Ray nor the ray backend's module, so that module's code cannot change a local run's outputs."""
    assert isinstance(executor_for(None, "train", workers=2), LocalExecutor)
    assert (
        isinstance(executor_for(ComputeParams(), "collect"), LocalExecutor)
        and executor_for(ComputeParams(), "collect").shared_fs
    )
    script = f"""
import sys
sys.modules["ray"] = None  # `import ray` raises ImportError
from s3.config import load_params
from s3.data.collect import collect
sets = ["collect.episodes=2", "collect.episode_steps=20", "collect.episodes_per_shard=1", "collect.n_tracks=1", \
"collect.workers=2",
        "collect.out_dir={tmp_path}/rollouts", "collect.plot_dir={tmp_path}/plots"]
collect(load_params(None, sets), quiet=True)
print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.") or m == "s3.compute.ray_executor"))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        r.stdout.strip().splitlines()[-1] == "['ray']"
    )  # only the blocked entry: nothing of Ray, nor the backend, was imported
    assert len(json.loads((tmp_path / "rollouts" / "manifest.json").read_text())["shards"]) == 2


def test_a_gpu_for_training_that_would_sit_idle_is_refused() -> None:
    with pytest.raises(ValueError, match=r"compute.resources.train.num_gpus.*train.device"):
        load_params(None, ["compute.backend=ray", "compute.resources.train.num_gpus=1", "train.device=cpu"])
    assert (
        load_params(
            None, ["compute.backend=ray", "compute.resources.train.num_gpus=1", "train.device=auto"]
        ).compute.resources.train.num_gpus
        == 1
    )


def test_the_source_env_on_ray_actors_steps_as_the_local_workers(ray_up) -> None:
    from s3.compute import ray_sim_pool
    from s3.compute.sim_pool import SourceWorkerError
    from s3.config import Params
    from s3.rl.source_env import SourceVecEnv
    from s3.tracks.generate import procedural_track

    tracks = [procedural_track(1001), procedural_track(1002)]
    traces = []
    _wait_for_free_cpus(ray_up, 2.0)
    for compute, workers in ((None, 1), (RAY, 4)):  # on Ray: 4 asked, as many as the 2 CPUs hold
        with SourceVecEnv(tracks, Params().sim, num_envs=4, workers=workers, seed=3, compute=compute) as env:
            obs = [env.reset()["policy"]]
            for _ in range(5):
                obs.append(env.step(torch.tensor([[0.1, 0.5]] * 4))[0]["policy"])
            if compute is not None:
                assert len(env.workers) == 2
                _wait_for_free_cpus(ray_up, 0.0, at_most=True)
                with (
                    pytest.MonkeyPatch.context() as mp,
                    pytest.raises(SourceWorkerError, match=r"compute\.resources\.source_env: .* 0 CPUs .* free now"),
                ):
                    mp.setattr(ray_sim_pool, "ROOM_WAIT_S", 1.0)
                    SourceVecEnv(
                        tracks, Params().sim, num_envs=2, workers=1, compute=compute, timeout_s=20
                    )  # would wait for ever
                with SourceVecEnv(
                    tracks, Params().sim, num_envs=2, workers=2, compute=compute, holds_cpus=False
                ) as idle:  # direct's validation env
                    assert len(idle.workers) == 2 and idle.reset()["policy"].shape[0] == 2
        traces.append(torch.stack(obs))
    assert traces[0].abs().sum() > 0 and torch.equal(traces[0], traces[1])  # 1 process or 2 actors: the same cars


def _wait_for_free_cpus(ray, cpus: float, at_most: bool = False, timeout_s: float = 20.0) -> None:
    """Until Ray counts `cpus` free (or at most `cpus`): its view lags jobs and actors by a moment."""
    t0 = time.monotonic()
    free = lambda: ray.available_resources().get("CPU", 0.0)
    while (free() > cpus if at_most else free() < cpus) and time.monotonic() - t0 < timeout_s:
        time.sleep(0.2)
    assert free() <= cpus if at_most else free() >= cpus, f"Ray counts {free()} CPUs free after {timeout_s} s"


def test_a_dead_instance_costs_only_its_jobs_on_ray(ray_up, tmp_path: Path) -> None:
    a, b = INSTANCES
    out = RayExecutor(RAY, "collect", instances=INSTANCES).run(
        [Job(f"e{k}", on_instance, (str(tmp_path), f"e{k}", (b,))) for k in range(6)]
    )
    assert [o.value for o in out] == [a] * 6  # every job done, on the live instance
    assert [o.causes for o in out if o.retries] == [["simulator lost"]] and len(list(tmp_path.glob(f"on-{b}-*"))) == 1


def test_beamng_evaluation_over_two_instances_on_ray_scores_like_one_locally(ray_up, tmp_path: Path) -> None:
    """Two BeamNG stand-ins at the instances the Ray node declares: each run lands on a node holding
    an instance's resource, drives it through beamngpy, and scores as the local backend over one."""
    from test_reliability import _bng

    from s3.evaluate.evaluate import evaluate_baseline
    from s3.sim.beamng_standin import BeamngStandin
    from s3.sim.factory import drop_worker_sim

    ports = [int(i.rsplit(":", 1)[1]) for i in INSTANCES]

    def run(name: str, instances: list[int], *extra: str) -> dict:
        params = _bng(
            tmp_path,
            instances[0],
            "evaluate.tracks=[short]",
            "evaluate.conditions=[nominal, ice]",
            "evaluate.gif=false",
            "evaluate.start_fractions=[0.0, 0.5]",
            "evaluate.max_lap_seconds=5",
            f"sim.beamng.instances=[{', '.join(f'127.0.0.1:{p}' for p in instances)}]",
            *extra,
        )
        try:
            return evaluate_baseline("pid", params, tmp_path / f"{name}.json", None)
        finally:
            drop_worker_sim()

    with BeamngStandin() as one:
        ref = run("one", [one.port])
    with BeamngStandin(port=ports[0]) as a, BeamngStandin(port=ports[1]) as b:
        both = run("both", ports, "compute.backend=ray")
        assert a.received.count("Step") > 0 and b.received.count("Step") > 0  # both served

    def scored(out: dict) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in out["runs"]]

    assert len(ref["runs"]) == 4 and scored(both) == scored(ref) and both["lost"] == []


def test_a_job_no_node_can_hold_is_refused_at_once(ray_up) -> None:
    gpu = RAY.model_copy(update={"resources": RAY.resources.model_copy(update={"train": JobResources(num_gpus=1)})})
    with pytest.raises(
        RayUnavailable,
        match=r"compute.resources.train.num_gpus: a job asks 1, the largest node of the Ray cluster has 0",
    ):
        RayExecutor(gpu, "train")
    wide = RAY.model_copy(update={"resources": RAY.resources.model_copy(update={"collect": JobResources(num_cpus=3)})})
    with pytest.raises(
        RayUnavailable,
        match=r"compute.resources.collect.num_cpus: a job asks 3, the largest node of the Ray cluster has 2",
    ):
        RayExecutor(wide, "collect")


def instance_or_sleep(folder: str, name: str, slow_on: str) -> str:
    """A job on its simulator instance; on `slow_on` it would take an hour (its node is about to leave)."""
    instance = os.environ[INSTANCE_ENV]
    Path(folder, f"on-{instance}-{name}.{_attempt(folder, name)}").touch()
    time.sleep(3600.0 if instance == slow_on else 0.05)
    return instance


def test_a_job_whose_node_left_reruns_on_another_instance_or_stops_the_stage(
    ray_up, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that dies takes its instance resource (or the only GPU) with it, and Ray would keep a job
    asking for it queued for ever: the executor sees that no live node can hold it."""
    import s3.compute.ray_cluster as rc
    import s3.compute.ray_executor as rx

    a, b = INSTANCES
    real = rc.per_node
    monkeypatch.setattr(rx, "STRANDED_CHECK_S", 0.5)
    ex = RayExecutor(RAY, "collect", instances=INSTANCES)
    gone = rx.instance_resource(b)
    monkeypatch.setattr(
        rc, "per_node", lambda ray, free=False: [{k: v for k, v in n.items() if k != gone} for n in real(ray, free)]
    )  # b's node left
    t0 = time.monotonic()
    out = ex.run([Job(f"e{k}", instance_or_sleep, (str(tmp_path), f"e{k}", b)) for k in range(4)])
    assert (
        time.monotonic() - t0 < 240
    )  # not the hour the job on b would have slept (Ray starts workers slowly on a busy machine)
    assert [o.value for o in out] == [a] * 4 and all(o.ok for o in out)
    assert [o.causes for o in out if o.retries] == [["simulator lost"]]  # the one job routed to b, re-run on a
    assert (
        len(list(tmp_path.glob(f"on-{b}-*"))) <= 1
    )  # cancelled on b (running, or still starting there), never sent back
    # a GPU job when the only GPU node has left: it would wait for ever; the stage stops, naming the key
    gpu = RAY.model_copy(update={"resources": RAY.resources.model_copy(update={"train": JobResources(num_gpus=1)})})
    monkeypatch.setattr(
        rc, "per_node", lambda ray, free=False: [{**n, "GPU": 1.0} for n in real(ray, free)]
    )  # a GPU node, at the start
    ex = RayExecutor(gpu, "train")
    monkeypatch.setattr(rc, "per_node", real)  # ... gone: this instance has no GPU, so Ray queues the job as infeasible
    t0 = time.monotonic()
    with pytest.raises(
        RayUnavailable, match=r"^compute\.resources\.train: s0 asks 1 CPUs and 1 GPUs on one node, and no live node"
    ):
        ex.run([Job("s0", slow_square, (1,))])
    assert time.monotonic() - t0 < 120  # the job would wait for ever


GPU_SCRIPT = """
import json, os, ray
from s3.compute.executor import Job
from s3.compute.params import ComputeParams
from s3.compute.ray_executor import RayExecutor
ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", \
logging_level="warning")
from test_ray import gpu_view
def seen(c):
    return [list(o.value) for o in RayExecutor(c, "train").run([Job(f"j{i}", gpu_view, ()) for i in range(2)])]
cpu = ComputeParams(backend="ray")
gpu = cpu.model_copy(update={"resources": cpu.resources.model_copy(update={"train": \
cpu.resources.train.model_copy(update={"num_gpus": 1})})})
print(json.dumps({"cpu": seen(cpu), "gpu": seen(gpu)}))
"""


def gpu_view() -> tuple[str | None, int]:
    """What a job sees of the GPUs (CUDA_VISIBLE_DEVICES), and its worker's pid."""
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()


@pytest.mark.slow  # a second Ray instance of its own (one with a GPU): make test-all
def test_a_job_sees_a_gpu_only_when_it_asks_for_one(tmp_path: Path) -> None:
    """On a node with a GPU (a Ray instance declaring one; CUDA_VISIBLE_DEVICES=0 as on a GPU box), a
    job that asks no GPU sees none, so `train.device: auto` cannot put it on a GPU Ray did not give
    it; a GPU job sees its GPU, and its worker exits after it (no CPU job inherits its CUDA context)."""
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": "ab" * 32,
        "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
    }
    r = subprocess.run(
        [sys.executable, "-c", GPU_SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert [v for v, _ in seen["cpu"]] == ["", ""]  # the GPU box's CUDA_VISIBLE_DEVICES=0 is hidden from CPU jobs
    assert [v for v, _ in seen["gpu"]] == ["0", "0"]  # Ray's assignment
    assert len({pid for _, pid in seen["gpu"]}) == 2 and not {pid for _, pid in seen["gpu"]} & {
        pid for _, pid in seen["cpu"]
    }


def test_a_job_needs_one_node_with_all_it_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPUs on one node and a GPU on another do not make a node with both; an instance's node must hold the job too."""
    import s3.compute.ray_cluster as rx

    nodes = [{"CPU": 16.0}, {"CPU": 4.0, "GPU": 1.0}, {"CPU": 1.0, rx.instance_resource("10.0.0.5:64256"): 1.0}]
    monkeypatch.setattr(rx, "per_node", lambda ray, free=False: nodes)
    assert rx.fits(nodes[1], {"CPU": 2.0, "GPU": 0.0}) == 2 and rx.fits(nodes[0], {"CPU": 1.0, "GPU": 1.0}) == 0
    rx.check_fits(None, "k", JobResources(num_cpus=4, num_gpus=1))
    with pytest.raises(
        RayUnavailable, match=r"^k: a job asks 8 CPUs and 1 GPUs on one node; no node of the Ray cluster has both"
    ):
        rx.check_fits(None, "k", JobResources(num_cpus=8, num_gpus=1))
    with pytest.raises(
        RayUnavailable, match=r"^k\.num_cpus: a job asks 17, the largest node of the Ray cluster has 16"
    ):
        rx.check_fits(None, "k", JobResources(num_cpus=17))
    rx.check_fits(None, "k", JobResources(num_cpus=1), instances=("10.0.0.5:64256",))
    with pytest.raises(RayUnavailable, match=r"the node that declares s3_sim_10_0_0_5_64256 has fewer than 2 CPUs"):
        rx.check_fits(None, "k", JobResources(num_cpus=2), instances=("10.0.0.5:64256",))
