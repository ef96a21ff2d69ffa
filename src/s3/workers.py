"""Worker processes: a forkserver that imports the heavy modules once, and pool workers that end
when the process that started them is gone.

Start-up. A spawned worker is a fresh interpreter that imports torch, the s3 modules and MLflow
on its own (~9 s on this 2-core machine for a PPO seed worker). A forkserver is one fresh
interpreter that imports `preload` once; every worker is then a fork of it, with nothing to
import and no torch threads or MLflow clients inherited (the server never runs either).
`prestart` starts it early, so that its imports overlap the caller's own. One forkserver serves
the whole process: the first context to start it decides its preload, and a later worker imports
whatever is missing itself.

Orphans. A `ProcessPoolExecutor` worker busy with a long task (a PPO seed, a collection shard)
does not read its call queue, so when only its parent is killed (SIGTERM or SIGKILL from a
scheduler, `kill`, a cancelled Prefect run) it went on as an orphan: it kept both cores busy and
kept writing resume files and shards into the workspace beside the next run. Found when a killed
`s3 train --family all` left its two seed workers training under the re-run. Everything they
write is atomic and resumable, so ending them at once loses nothing. A worker watches the process
that made its pool, not its own parent: a forkserver's worker is the server's child, and the
server only exits once every worker it forked has.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import select
import threading
import time
from collections.abc import Sequence
from multiprocessing.context import BaseContext

POLL_S = 0.5


def forkserver_context(preload: Sequence[str]) -> BaseContext:
    """A forkserver context whose server imports `preload` first, else (no forkserver) spawn."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))  # no effect once the server runs (module docstring)
    return ctx


def prestart(ctx: BaseContext) -> None:
    """Start `ctx`'s forkserver now, so that its imports overlap the caller's own setup."""
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def exit_with_parent(parent_pid: int) -> None:
    """Pool initializer: a daemon thread ends this worker once process `parent_pid` (the one that
    made the pool) has ended, whether it is this worker's parent (spawn) or not (forkserver)."""
    try:
        pidfd: int | None = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd_open (not Linux >= 5.3): poll the pid instead
        pidfd = None

    def watch() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])  # readable once the process has terminated
        else:
            while _exists(parent_pid):
                time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="s3-exit-with-parent", daemon=True).start()


def _exists(pid: int) -> bool:
    if os.name == "nt":  # os.kill would end it there; with no forkserver the pool's maker is the parent
        return os.getppid() == pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
