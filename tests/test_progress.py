"""s3.progress: the throttled status lines, their content, the bar on a terminal, feeding from workers."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import s3
from s3 import progress as prog
from s3.progress import Progress, advance, progress


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_status_lines_come_at_most_once_per_interval_and_once_at_the_end() -> None:
    clock, out = Clock(), io.StringIO()
    p = Progress("collect", 200, "shards", stream=out, clock=clock, interval=30.0, tty=False)
    written = [(0.0, 1)]  # the start line
    for _ in range(200):
        clock.t += 0.7
        p.advance()
        if len(lines(out)) > written[-1][1]:
            written.append((clock.t, len(lines(out))))
    times = [t for t, _ in written]
    assert all(b - a >= 30.0 for a, b in itertools.pairwise(times))
    assert len(times) == 1 + int(140 // 30)  # 140 s of work: lines at 0, 30.1, 60.2, 90.3, 120.4
    p.close()
    p.close()
    out_lines = lines(out)
    assert len(out_lines) == len(times) + 1
    assert sum("done" in line for line in out_lines) == 1 and "done 200/200 shards" in out_lines[-1]
    assert not any("done" in line for line in out_lines[:-1])


def test_a_line_shows_done_total_rate_and_time_left() -> None:
    clock, out = Clock(), io.StringIO()
    p = Progress("train ddm", 6_000_000, "env steps", stream=out, clock=clock, interval=30.0, tty=False)
    assert lines(out) == ["[progress] train ddm: 0/6.00M env steps (0%), 0 s elapsed"]
    clock.t = 60.0
    p.advance(1_500_000)
    last = lines(out)[-1]
    assert "train ddm: 1.50M/6.00M env steps (25%)" in last
    assert "25.0k env steps/s" in last
    assert "1 min 00 s elapsed" in last
    assert "about 3 min 00 s left" in last
    p.note("seed 1")
    clock.t = 90.0
    p.tick()
    assert lines(out)[-1].endswith("(seed 1)")
    clock.t = 240.0
    p.advance(4_500_000)
    clock.t = 300.0  # the counted work is done; the rest (validation, export) is not counted
    p.tick()
    assert "6.00M/6.00M env steps (100%), 25.0k env steps/s, 5 min 00 s elapsed, finishing" in lines(out)[-1]
    p.close()
    assert lines(out)[-1] == "[progress] train ddm: done 6.00M/6.00M env steps in 5 min 00 s (25.0k env steps/s)"


def test_slow_rates_read_per_minute_and_skipped_work_is_not_in_the_rate() -> None:
    clock, out = Clock(), io.StringIO()
    p = Progress("evaluate ddm", 72, "runs", stream=out, clock=clock, interval=30.0, tty=False)
    p.skip(36)  # done by an earlier run
    clock.t = 120.0
    p.advance(6)
    assert p.rate() == 6 / 120.0
    last = lines(out)[-1]
    assert "42/72 runs (58%)" in last and "3 runs/min" in last and "about 10 min 00 s left" in last


def test_on_a_terminal_a_bar_and_no_status_lines() -> None:
    clock, out = Clock(), io.StringIO()
    p = Progress("distill ddm", 448, "batches", stream=out, clock=clock, tty=True)
    assert p._bar is not None
    clock.t = 10.0
    p.advance(100)
    p.close()
    text = out.getvalue()
    assert "[progress]" not in text
    assert "distill ddm" in text and "100/448 batches" in text and "\r" in text


def test_default_path_follows_the_stream() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert Progress("a", 1, stream=Tty(), clock=Clock())._bar is not None
    assert Progress("a", 1, stream=io.StringIO(), clock=Clock())._bar is None


def test_nothing_when_disabled(monkeypatch) -> None:
    monkeypatch.setenv(prog.ENABLED_ENV, "0")
    out = io.StringIO()
    with progress("collect", 3, "shards", stream=out, clock=Clock()) as p:
        p.advance(3)
    assert out.getvalue() == ""


def test_interval_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(prog.INTERVAL_ENV, "2.5")
    assert prog.interval_from_env() == 2.5
    monkeypatch.setenv(prog.INTERVAL_ENV, "nonsense")
    assert prog.interval_from_env() == 30.0
    monkeypatch.delenv(prog.INTERVAL_ENV)
    assert prog.interval_from_env() == 30.0


def test_the_heartbeat_writes_while_nothing_is_fed() -> None:
    out = io.StringIO()
    with progress("train_direct", 900, "s", stream=out, interval=0.05, tty=False):
        time.sleep(0.4)
    assert len(lines(out)) >= 4  # start, several beats, end
    assert lines(out)[-1].startswith("[progress] train_direct: done 0/900 s")


def test_advance_feeds_the_innermost_progress_of_its_unit() -> None:
    clock = Clock()
    with progress("train ddm", 100, "env steps", stream=io.StringIO(), clock=clock) as outer:
        with progress("distill", 10, "batches", stream=io.StringIO(), clock=clock) as inner:
            advance(5, "env steps")
            advance(2, "batches")
            advance(3, "other")  # nobody listens: nothing happens
        advance(7, "env steps", earlier=True)
    assert (outer.done, outer.earlier, inner.done) == (12, 7, 2)
    advance(1, "env steps")  # no progress open: nothing happens


def test_worker_processes_feed_a_sharing_progress() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(s3.__file__).parents[1])}
    code = (
        "from s3.progress import advance; advance(5, 'env steps'); advance(3, 'env steps', earlier=True); "
        "advance(9, 'runs')"
    )
    with progress("train ddm", 100, "env steps", share=True, stream=io.StringIO(), clock=Clock()) as p:
        folder = os.environ[prog.SHARE_ENV]
        for _ in range(2):
            subprocess.run([sys.executable, "-c", code], env={**env, prog.SHARE_ENV: folder}, check=True)
        assert p.counts() == (16.0, 6.0)
    assert prog.SHARE_ENV not in os.environ and not Path(folder).exists()


def test_a_wall_clock_budget_follows_its_clock_in_whole_seconds() -> None:
    clock, out = Clock(), io.StringIO()
    p = Progress("train direct", 900, "s", stream=out, clock=clock, tty=False, follow=lambda: clock.t + 5.3)
    clock.t = 60.0
    p.tick()
    assert lines(out)[-1] == "[progress] train direct: 65/900 s (7%), 1 min 00 s elapsed, about 13 min 55 s left"
    clock.t = 890.0
    p.close()
    assert lines(out)[-1] == "[progress] train direct: done 895/900 s in 14 min 50 s"


def feed_env_steps(n: int) -> int:
    """A job that feeds n env steps to the stage's progress, as a PPO seed does (s3.rl.loop)."""
    advance(n, "env steps")
    return n


@pytest.mark.parametrize("workers", [1, 2])
def test_the_executor_counts_finished_jobs_and_its_workers_feed_a_sharing_progress(workers: int, capfd) -> None:
    from s3.compute.executor import Job, LocalExecutor

    jobs = [Job(f"seed {k}", feed_env_steps, (100 * (k + 1),)) for k in range(3)]
    with progress("train ddm", 600, "env steps", share=True, clock=Clock()) as p:
        out = LocalExecutor(workers, label="train ddm", progress="seeds").run(jobs)
        assert p.counts() == (600.0, 0.0)  # fed from this process (workers == 1) or from the pool's workers
    assert [o.value for o in out] == [100, 200, 300]
    err = capfd.readouterr().err
    assert "[progress] train ddm: done 3/3 seeds" in err
    assert "[progress] train ddm: done 600/600 env steps" in err
