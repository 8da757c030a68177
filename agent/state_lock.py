"""One agent per state directory: the outbox, the saved cpufreq state and cpu sets in it belong
to the agent that runs on it.

A second agent started on the same directory (by hand beside the unit, or twice from a shell)
took the first one's saved cpufreq state for a crashed agent's and put the originals back under
it, shared its outbox, and, with the same agent id, was never answered by the daemon, whose
socket keeps the first connection of an id. It is refused at start instead. The lock is an
flock on ``STATE_DIR/agent.lock`` held for the process's life: the kernel drops it when the
process ends, however it ends, so no stale lock outlives a kill -9.
"""

from __future__ import annotations

import fcntl
import os
from typing import IO

LOCK_FILENAME = "agent.lock"


class StateDirBusy(Exception):
    """Another process holds the state directory's lock; ``pid`` is the one it wrote (None
    when it could not be read)."""

    def __init__(self, path: str, pid: int | None):
        super().__init__(f"{path} is held by pid {pid}")
        self.path, self.pid = path, pid


def hold(state_dir: str) -> IO[str]:
    """Lock ``state_dir`` for this process (made if missing) and write the pid into the lock
    file; keep the returned file open as long as the agent runs, close it to let go.
    Raises StateDirBusy when another process holds it, OSError when the directory is not
    usable."""
    os.makedirs(state_dir, exist_ok=True)
    path = os.path.join(state_dir, LOCK_FILENAME)
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        text = fh.read().strip()
        fh.close()
        raise StateDirBusy(path, int(text) if text.isdigit() else None) from None
    except BaseException:
        fh.close()
        raise
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh
