"""One agent per state directory: the outbox, the saved cpufreq state and cpu sets in it belong
to the agent that runs on it.

A second agent started on the same directory (by hand beside the unit, or twice from a shell)
took the first one's saved cpufreq state for a crashed agent's and put the originals back under
it, shared its outbox, and, with the same agent id, was never answered by the daemon, whose
socket keeps the first connection of an id. It is refused at start instead. The lock is an
flock on ``STATE_DIR/agent.lock`` held for the process's life: the kernel drops it when the
process ends, however it ends, so no stale lock outlives a kill -9.

Two agents of one agent id on one machine, on two state directories, are one board twice: the
daemon took the second's hello for the first's restart and sent it the job the first was
running, and both ran it at once on the same cores. The id is held too, for the daemon it
reports to (:func:`hold_id`; agents of one id reporting to two daemons are two stores' boards),
by a listening socket in the abstract namespace, which also goes with the process.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import socket
import struct
from typing import IO

from .private import LOCK_FILENAME, make_dir, open_private


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
    make_dir(state_dir)
    path = os.path.join(state_dir, LOCK_FILENAME)
    fh = open_private(path, "a+")
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


class AgentIdBusy(Exception):
    """Another process on this machine holds the agent id; ``pid`` is its (None when the
    kernel did not say)."""

    def __init__(self, agent_id: str, pid: int | None):
        super().__init__(f"agent id {agent_id!r} is held by pid {pid}")
        self.agent_id, self.pid = agent_id, pid


def hold_id(agent_id: str, daemon: str) -> socket.socket:
    """Hold ``agent_id`` of the daemon at ``daemon`` on this machine (its network namespace)
    for this process: keep the returned socket open as long as the agent runs. Raises
    AgentIdBusy when another process holds it, OSError when no such socket can be made."""
    # a digest: an abstract name has 107 bytes at most, an id and an endpoint may need more
    key = hashlib.sha256(f"{daemon}\n{agent_id}".encode()).hexdigest()[:32]
    name = b"\0opptune-agent/" + key.encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(name)
        sock.listen(8)  # never accepted: a second agent connects only to learn the pid
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        raise AgentIdBusy(agent_id, _holder(name)) from None
    return sock


def _holder(name: bytes) -> int | None:
    """The pid of the process listening on the abstract socket ``name`` (its credentials,
    which the kernel keeps with the listening socket), or None."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as probe:
        try:
            probe.settimeout(1.0)
            probe.connect(name)
            pid, _uid, _gid = struct.unpack("3i", probe.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        except OSError:
            return None
    return pid or None
