"""Pool worker processes that end when the process that started them is gone.

A `ProcessPoolExecutor` worker busy with a long task (a PPO seed, a collection shard) does not
read its call queue, so when only its parent is killed (SIGTERM or SIGKILL from a scheduler,
`kill`, a cancelled Prefect run) it went on as an orphan: it kept both cores busy and kept writing
resume files and shards into the workspace beside the next run. Found when a killed
`s3 train --family all` left its two seed workers training under the re-run. Everything they write
is atomic and resumable, so ending them at once loses nothing.
"""

from __future__ import annotations

import os
import threading
import time

POLL_S = 0.5


def exit_with_parent(parent_pid: int) -> None:
    """Pool initializer: a daemon thread ends this worker once `parent_pid` is no longer its parent."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="s3-exit-with-parent", daemon=True).start()
