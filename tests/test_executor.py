"""The executor and the one retry policy: order, retries, worker deaths, affinity, what stops a stage."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from s3.compute.executor import INSTANCE_ENV, Job, LocalExecutor
from s3.compute.params import RetryPolicy
from s3.sim.base import SimulatorLost, SimulatorRejected, SimulatorUnreachable

FAST = RetryPolicy(retries=2, retry_backoff_s=0.01)


def _attempt(folder: str, name: str) -> int:
    """Count this call in `folder` (files survive a worker's death); returns the attempt number."""
    k = sum(1 for f in os.listdir(folder) if f.startswith(name + ".")) + 1
    Path(folder, f"{name}.{k}").touch()
    return k


def slow_square(x: int) -> int:
    time.sleep(0.02 * (4 - x))  # the first jobs finish last
    return x * x


def flaky(folder: str, name: str, fail: int) -> str:
    if _attempt(folder, name) <= fail:
        raise SimulatorLost(f"{name} dropped")
    return name


def dies(folder: str, name: str, times: int) -> str:
    if _attempt(folder, name) <= times:
        os._exit(70)
    return name


def says_no(folder: str) -> None:
    _attempt(folder, "no")
    raise SimulatorRejected("bngError: no such vehicle")


def nobody_there(folder: str) -> None:
    _attempt(folder, "gone")
    raise SimulatorUnreachable("cannot reach BeamNG.tech at 127.0.0.1:1")


def interval(folder: str, name: str) -> tuple[float, float]:
    t0 = time.monotonic()
    time.sleep(0.15)
    return t0, time.monotonic()


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_job_order(workers: int) -> None:
    done = []
    out = LocalExecutor(workers, policy=FAST).run(
        [Job(f"x{x}", slow_square, (x,)) for x in range(4)], lambda i, o: done.append(i)
    )
    assert [o.value for o in out] == [0, 1, 4, 9] and all(o.ok and o.retries == 0 for o in out)
    assert sorted(done) == [0, 1, 2, 3]


def torch_threads() -> tuple[int, str | None]:
    import torch

    return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


def test_a_pool_job_runs_on_one_torch_thread() -> None:
    """Two workers on the cores, each with torch's default of a thread per core, oversubscribe the machine
    (an evaluation lap ran 5x slower): a pool job starts on one thread, whatever the submitting process has."""
    import torch

    before = torch.get_num_threads()
    out = LocalExecutor(2, policy=FAST).run([Job(f"t{i}", torch_threads, ()) for i in range(2)])
    assert [o.value for o in out] == [(1, "1"), (1, "1")]
    assert torch.get_num_threads() == before  # this process keeps its own


@pytest.mark.parametrize("workers", [1, 2])
def test_a_lost_simulator_is_retried_then_given_up_as_failed(workers: int, tmp_path: Path) -> None:
    jobs = [
        Job("a", flaky, (str(tmp_path), "a", 1)),
        Job("b", flaky, (str(tmp_path), "b", 5)),
        Job("c", flaky, (str(tmp_path), "c", 0)),
    ]
    a, b, c = LocalExecutor(workers, policy=FAST).run(jobs)
    assert a.ok and a.value == "a" and a.retries == 1 and a.causes == ["simulator lost"]
    assert (
        not b.ok and "b dropped" in b.error and b.retries == 2 and len(list(tmp_path.glob("b.*"))) == 3
    )  # 1 + retries
    assert c.ok and c.retries == 0


def test_a_dead_worker_costs_only_its_job(tmp_path: Path) -> None:
    jobs = [Job(n, dies, (str(tmp_path), n, t)) for n, t in (("once", 1), ("never", 0), ("always", 9))]
    once, never, always = LocalExecutor(2, policy=FAST).run(jobs)
    assert once.ok and once.value == "once" and "worker process died" in once.causes
    assert never.ok and never.value == "never"
    assert not always.ok and "worker process died 3 times" in always.error  # charged to it alone: 1 + 2 retries
    assert len(list(tmp_path.glob("always.*"))) >= 3


@pytest.mark.parametrize("workers", [1, 2])
def test_a_rejected_request_is_not_retried_and_stops_the_stage(workers: int, tmp_path: Path) -> None:
    with pytest.raises(SimulatorRejected, match="no such vehicle"):
        LocalExecutor(workers, policy=FAST).run([Job("no", says_no, (str(tmp_path),))])
    assert len(list(tmp_path.glob("no.*"))) == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_an_unreachable_simulator_stops_the_stage_after_its_retries(workers: int, tmp_path: Path) -> None:
    with pytest.raises(SimulatorUnreachable, match=r"cannot reach BeamNG.tech .*3 attempts"):
        LocalExecutor(workers, policy=FAST).run([Job("gone", nobody_there, (str(tmp_path),))])
    assert len(list(tmp_path.glob("gone.*"))) == 3


def test_jobs_with_one_affinity_never_overlap(tmp_path: Path) -> None:
    jobs = [Job(f"j{k}", interval, (str(tmp_path), f"j{k}"), affinity="beamng-0" if k < 3 else None) for k in range(4)]
    out = [o.value for o in LocalExecutor(2, policy=FAST).run(jobs)]
    pinned = sorted(out[:3])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(pinned))  # one after another
    assert any(o[0] < p[1] and p[0] < o[1] for o in out[3:] for p in pinned)  # the free job ran beside them


def on_instance(folder: str, name: str, dead: tuple[str, ...]) -> str:
    """A job that needs its simulator instance: unreachable when that instance is one of `dead`."""
    instance = os.environ[INSTANCE_ENV]
    Path(folder, f"on-{instance}-{name}.{_attempt(folder, name)}").touch()
    if instance in dead:
        raise SimulatorUnreachable(f"cannot reach BeamNG.tech at {instance}")
    time.sleep(0.05)
    return instance


def test_each_running_job_holds_its_own_instance(tmp_path: Path) -> None:
    jobs = [Job(f"e{k}", on_instance, (str(tmp_path), f"e{k}", ())) for k in range(6)]
    out = LocalExecutor(instances=("a:1", "b:2"), policy=FAST).run(jobs)
    assert all(o.ok and o.retries == 0 for o in out)
    assert {o.value for o in out} == {"a:1", "b:2"}  # both served, one worker each


def test_a_dead_instance_costs_only_its_jobs_which_run_on_the_others(tmp_path: Path) -> None:
    jobs = [Job(f"e{k}", on_instance, (str(tmp_path), f"e{k}", ("b:2",))) for k in range(6)]
    out = LocalExecutor(instances=("a:1", "b:2"), policy=FAST).run(jobs)
    assert [o.value for o in out] == ["a:1"] * 6  # every job done, on the live instance
    hit = [o for o in out if o.retries]
    assert len(hit) == 1 and hit[0].causes == ["simulator lost"]  # b:2 failed once, then was down
    assert len(list(tmp_path.glob("on-b:2-*"))) == 1


def test_every_instance_dead_stops_the_stage(tmp_path: Path) -> None:
    jobs = [Job(f"e{k}", on_instance, (str(tmp_path), f"e{k}", ("a:1", "b:2"))) for k in range(3)]
    with pytest.raises(SimulatorUnreachable, match="cannot reach BeamNG.tech"):
        LocalExecutor(instances=("a:1", "b:2"), policy=FAST).run(jobs)
    (tmp_path / "one").mkdir()
    with pytest.raises(SimulatorUnreachable, match=r"a:1 \(e0, 3 attempts\)"):
        LocalExecutor(instances=("a:1",), policy=FAST).run(
            [Job("e0", on_instance, (str(tmp_path / "one"), "e0", ("a:1",)))]
        )


def test_backoff_doubles_up_to_its_cap() -> None:
    p = RetryPolicy(retries=5, retry_backoff_s=1.5, max_backoff_s=10.0)
    assert [p.wait_s(k) for k in range(1, 6)] == [1.5, 3.0, 6.0, 10.0, 10.0]
    assert RetryPolicy(retry_backoff_s=0.0).wait_s(3) == 0.0


def test_a_worker_remakes_its_simulator_when_another_job_or_executor_drove_the_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease is '<executor token>:<count>': the same executor's next count keeps the cached
    simulator; a skipped count (another worker) or another executor's token (a Ray worker that
    outlived a stage) remakes it, even when the count happens to follow on."""
    import s3.sim.factory as factory
    from s3.compute.executor import LEASE_ENV
    from s3.sim.params import SimParams

    made: list[object] = []

    class Sim:
        def close(self) -> None:
            pass

    def make(params: object, aids: object = None) -> Sim:
        made.append(Sim())
        return made[-1]  # type: ignore[return-value]

    monkeypatch.setattr(factory, "make_sim", make)
    monkeypatch.setenv(INSTANCE_ENV, "127.0.0.1:64256")
    factory.drop_worker_sim()
    try:
        seen = []
        for lease in ("a:0", "a:1", "a:3", "b:4", "b:5", "c:0"):
            monkeypatch.setenv(LEASE_ENV, lease)
            seen.append(len(made) if factory.worker_sim(SimParams()) is made[-1] else None)
        assert seen == [1, 1, 2, 3, 3, 4]
        assert LocalExecutor(2, instances=("x",)).token != LocalExecutor(2, instances=("x",)).token
    finally:
        factory.drop_worker_sim()


def test_shipped_files_round_trip_and_stay_inside_their_folder(tmp_path: Path) -> None:
    from s3.compute.files import pack, unpack, unpacked

    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "a" / "x.json").write_text("{}")
    (tmp_path / "a" / "sub" / "y.bin").write_bytes(b"\x00\x01")
    files = pack(tmp_path / "a")
    assert files == {"sub/y.bin": b"\x00\x01", "x.json": b"{}"} and pack(tmp_path / "a", ["x.json", "gone"]) == {
        "x.json": b"{}"
    }
    with unpacked(files) as tmp:
        assert pack(tmp) == files
    assert not tmp.exists()
    assert [p.name for p in unpack(files, tmp_path / "b")] == ["y.bin", "x.json"] and pack(tmp_path / "b") == files
    for bad in ("../evil", "/etc/evil", "sub/../../evil", ""):
        with pytest.raises(ValueError, match="relative and inside"):
            unpack({bad: b"x"}, tmp_path / "c")
    assert not (tmp_path / "evil").exists() and pack(tmp_path / "c") == {}
