"""Progress a user sees: a bar on a terminal, otherwise one status line at most every 30 s.

    with progress("collect", total=46, unit="shards", earlier=3) as p:  # 3 done by an earlier run
        p.skip(2)            # 2 more found done: counted, left out of the rate
        p.advance()          # one more done now
        p.note("seed 1")     # a short note shown with the count
    advance(n, "env steps")  # from code below the stage, even in a worker process (see "Other processes")

Where it goes: stderr only (stdout may carry data, e.g. `--json`). When stderr is a terminal, a tqdm
bar; otherwise (DVC's output piped into a log, CI) one status line

    [progress] collect: 12/40 shards (30%), 24.0 shards/min, 30 s elapsed, about 1 min 10 s left

when the work starts, at most one per `interval` while it goes on, and one when it ends (`done ...`).
A background thread keeps the lines coming while nothing finishes (a long job still shows life), so
a stage shows one line about every `interval`. The rate counts only the work done since the start
(not `earlier` or `skip`); time left = what is left / the rate. Once the total is reached the line
says "finishing" (what follows the counted work, e.g. validation and export, is not counted).

Settings (environment): S3_PROGRESS_INTERVAL (seconds between status lines, default 30),
S3_PROGRESS=0 (nothing at all). Tests inject the clock and the stream (`Progress(...)`): with an
injected clock no thread runs and lines come only from `advance`/`skip`/`set`/`tick`/`close`.

Other processes. `advance(n, unit)` feeds the innermost open progress of this process whose unit
is `unit`. A progress opened with `share=True` also listens to the worker processes the stage
starts while it is open: it names a folder in the environment (SHARE_ENV, which the executor hands
to every job); a worker's `advance` keeps its process's running count in a file there, and the
progress adds the files up. Where no progress listens (or the folder is not on this machine), the
call does nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

INTERVAL_ENV = "S3_PROGRESS_INTERVAL"
ENABLED_ENV = "S3_PROGRESS"
SHARE_ENV = "S3_PROGRESS_SHARE"
DEFAULT_INTERVAL = 30.0
BAR_REFRESH_S = 0.5  # a bar is redrawn at most this often
SECONDS = "s"  # the unit of a wall-clock budget

_open: list[Progress] = []  # this process's open progresses, innermost last
_fed: dict[tuple[str, str], list[float]] = {}  # a worker's running [done, earlier] per (share folder, unit)


def interval_from_env() -> float:
    """S3_PROGRESS_INTERVAL in seconds (default 30; anything unreadable or <= 0 gives the default)."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


def enabled_from_env() -> bool:
    return os.environ.get(ENABLED_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def number(x: float) -> str:
    """A count for humans: 7, 12.5, 48.2k, 6.00M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:.1f}"


def duration(seconds: float) -> str:
    """45 s, 3 min 12 s, 1 h 05 min."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def rate_text(rate: float, unit: str) -> str:
    """Per second, or per minute when that reads better (fewer than one a second)."""
    if rate >= 1 or rate == 0:
        return f"{number(rate)} {unit}/s"
    return f"{number(rate * 60)} {unit}/min"


def parts(done: float, total: float | None, unit: str, rate: float | None) -> tuple[str, str, str]:
    """(count, rate, time left) as a line shows them. A progress in seconds (a wall-clock budget)
    shows whole seconds and no rate, and its time left is what is left of the budget."""
    show = (lambda v: f"{v:.0f}") if unit == SECONDS else number
    count = f"{show(done)}/{show(total)} {unit}" if total else f"{show(done)} {unit}"
    speed = rate_text(rate, unit) if rate and unit != SECONDS else ""
    left = ""
    if total and done >= total:
        left = "finishing"  # the counted work is done; what follows it (validation, writing) is not counted
    elif total and unit == SECONDS:
        left = f"about {duration(total - done)} left"
    elif total and rate:
        left = f"about {duration((total - done) / rate)} left"
    return count, speed, left


def status_line(
    stage: str, done: float, total: float | None, unit: str, elapsed: float, rate: float | None, note: str = ""
) -> str:
    """One status line: stage, done/total (share), rate, elapsed, time left (module docstring)."""
    count, speed, left = parts(done, total, unit, rate)
    share = f" ({100 * min(done / total, 1.0):.0f}%)" if total else ""
    text = ", ".join(x for x in (f"{stage}: {count}{share}", speed, f"{duration(elapsed)} elapsed", left) if x)
    return f"[progress] {text}" + (f" ({note})" if note else "")


def end_line(stage: str, done: float, total: float | None, unit: str, elapsed: float, rate: float | None) -> str:
    """The last line: what was done in how long."""
    count, speed, _ = parts(done, total, unit, rate)
    return f"[progress] {stage}: done {count} in {duration(elapsed)}" + (f" ({speed})" if speed else "")


class Progress:
    """One stage's (or one part's) progress: `total` units of `unit`; see the module docstring.

    `stream` (default stderr) and `clock` (default time.monotonic) are injectable; `tty` (default:
    whether `stream` is a terminal) chooses the bar; `interval` defaults to S3_PROGRESS_INTERVAL.
    `heartbeat` (default: only with the real clock) runs the thread that writes lines while nothing
    is fed; `earlier`: units done before the start (as `skip`, in the first line already); `follow`:
    done is what it returns whenever a line is written (a wall-clock budget: its seconds so far). Thread-safe."""

    def __init__(
        self,
        stage: str,
        total: float | None,
        unit: str = "items",
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] | None = None,
        interval: float | None = None,
        tty: bool | None = None,
        heartbeat: bool | None = None,
        enabled: bool | None = None,
        earlier: float = 0.0,
        follow: Callable[[], float] | None = None,
    ) -> None:
        self.stage, self.total, self.unit = stage, (float(total) if total else None), unit
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock or time.monotonic
        self.interval = interval if interval is not None else interval_from_env()
        self.enabled = enabled_from_env() if enabled is None else enabled
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.done = float(earlier)  # fed in this process (advance, skip, set)
        self.earlier = float(earlier)  # of which done before the start (skip): not in the rate
        self.shared: Callable[[], tuple[float, float]] | None = None  # (done, earlier) of worker processes
        self.follow = follow
        self.text = ""
        self.t0 = self.clock()
        self.last_line: float | None = None
        self.t_full: float | None = None  # when done first reached the total
        self.last_bar = -1e18
        self.closed = False
        self.lines = 0
        self._lock = threading.RLock()
        self._bar = None
        if self.enabled and self.tty:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                desc=stage,
                file=self.stream,
                dynamic_ncols=True,
                leave=True,
                bar_format=self._format(),
            )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.enabled and (heartbeat if heartbeat is not None else clock is None):
            period = BAR_REFRESH_S if self.tty else min(1.0, self.interval / 2)
            self._thread = threading.Thread(target=self._beat, args=(period,), name=f"progress {stage}", daemon=True)
        self.tick(force=True)
        if self._thread is not None:
            self._thread.start()

    # ------------------------------------------------------------------ feeding
    def advance(self, n: float = 1) -> None:
        """n more units done now."""
        with self._lock:
            self.done += n
            self.tick()

    def skip(self, n: float) -> None:
        """n units done before this run (reused, resumed): counted in done/total, not in the rate."""
        with self._lock:
            self.done += n
            self.earlier += n
            self.tick()

    def set(self, done: float) -> None:
        """Done so far is `done` (e.g. seconds of a wall-clock budget)."""
        with self._lock:
            self.done = float(done)
            self.tick()

    def note(self, text: str) -> None:
        """A short note shown with the next line or the bar (e.g. 'epoch 3/14')."""
        with self._lock:
            self.text = text

    # ------------------------------------------------------------------ reading
    def counts(self) -> tuple[float, float]:
        """(done, earlier): this process's and the worker processes'."""
        done, earlier = (self.follow() if self.follow is not None else self.done), self.earlier
        if self.shared is not None:
            d, e = self.shared()
            done, earlier = done + d, earlier + e
        return done, earlier

    def rate(self, now: float | None = None) -> float | None:
        """Units per second since the start, without the earlier ones (None before any time passed); once
        the total is reached, the rate up to then."""
        done, earlier = self.counts()
        now = self.clock() if now is None else now
        if self.total and done >= self.total:
            self.t_full = now if self.t_full is None else self.t_full
            now = self.t_full
        elapsed = now - self.t0
        return (done - earlier) / elapsed if elapsed > 0 and done > earlier else None

    def line(self) -> str:
        now = self.clock()
        done, _ = self.counts()
        return status_line(self.stage, done, self.total, self.unit, now - self.t0, self.rate(now), self.text)

    # ------------------------------------------------------------------ writing
    def tick(self, force: bool = False) -> None:
        """Write a line (or redraw the bar) if it is due: lines at most one per `interval`."""
        if not self.enabled or self.closed:
            return
        with self._lock:
            now = self.clock()
            if self._bar is not None:
                if force or now - self.last_bar >= BAR_REFRESH_S:
                    self.last_bar = now
                    self._draw(now)
                return
            if force or self.last_line is None or now - self.last_line >= self.interval:
                self.last_line = now
                self._write(self.line())

    def close(self) -> None:
        """The last line (or the bar's last state); later calls do nothing."""
        if self.closed:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            if self.closed:
                return
            now = self.clock()
            done, _ = self.counts()
            if self._bar is not None:
                self._draw(now)
                self._bar.close()
            elif self.enabled:
                self._write(end_line(self.stage, done, self.total, self.unit, now - self.t0, self.rate(now)))
            self.closed = True

    def _format(self, now: float | None = None) -> str:
        """The bar's line: tqdm draws the share and the bar; the counts, rate and time left are ours."""
        count, speed, left = parts(self.counts()[0], self.total, self.unit, self.rate(now))
        text = ", ".join(x for x in (count, speed, left, self.text) if x).replace("{", "{{").replace("}", "}}")
        return ("{desc}: {percentage:3.0f}%|{bar}| " if self.total else "{desc}: ") + text

    def _draw(self, now: float) -> None:
        bar = self._bar
        assert bar is not None
        bar.n = min(self.counts()[0], self.total) if self.total else self.counts()[0]
        bar.bar_format = self._format(now)
        bar.refresh()

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
            self.lines += 1
        except (OSError, ValueError):  # a closed stream: progress never stops the work
            pass

    def _beat(self, period: float) -> None:
        while not self._stop.wait(period):
            self.tick()


@contextlib.contextmanager
def progress(
    stage: str, total: float | None, unit: str = "items", *, share: bool = False, **kw: Any
) -> Iterator[Progress]:
    """A Progress for the `with` block (module docstring); `share`: also count what worker processes
    started inside the block feed with `advance`. Keyword arguments go to Progress."""
    p = Progress(stage, total, unit, **kw)
    _open.append(p)
    folder, old = None, os.environ.get(SHARE_ENV)
    try:
        if share:
            folder = tempfile.mkdtemp(prefix="s3-progress-")
            os.environ[SHARE_ENV] = folder
            p.shared = lambda: read_share(folder, unit)
        yield p
    finally:
        _open.remove(p)
        if share:
            if old is None:
                os.environ.pop(SHARE_ENV, None)
            else:
                os.environ[SHARE_ENV] = old
        p.close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _slug(unit: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", unit)


def advance(n: float, unit: str, earlier: bool = False) -> None:
    """Feed n units of `unit` done (`earlier`: done before this run, as Progress.skip) to the progress
    listening: the innermost open one of this process with this unit, else a sharing one of the
    process that started this one (module docstring), else nobody."""
    for p in reversed(_open):
        if p.unit == unit:
            if earlier:
                p.skip(n)
            else:
                p.advance(n)
            return
    folder = os.environ.get(SHARE_ENV)
    if not folder or not os.path.isdir(folder):
        return
    fed = _fed.setdefault((folder, unit), [0.0, 0.0])
    fed[0] += n
    fed[1] += n if earlier else 0.0
    path = Path(folder) / f"{os.getpid()}.{_slug(unit)}"
    try:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(f"{fed[0]} {fed[1]}")
        os.replace(tmp, path)
    except OSError:
        pass


def read_share(folder: str | Path, unit: str) -> tuple[float, float]:
    """(done, earlier) summed over the worker files for `unit` in `folder` (unreadable files count 0)."""
    done = earlier = 0.0
    with contextlib.suppress(OSError):
        for f in Path(folder).glob(f"*.{_slug(unit)}"):
            with contextlib.suppress(OSError, ValueError):
                d, e = (float(x) for x in f.read_text().split())
                done, earlier = done + d, earlier + e
    return done, earlier
