"""The agent's state directory and files, closed to other users whatever the umask: the
directory 0700, each file 0600. Under the unit, UMask=0077 and StateDirectoryMode did this;
an agent started from a shell took the shell's umask, and a umask of 000 left the outbox, the
saved originals and the applied configuration writable by anyone. Where the workloads run as
another user (run_as), the directory is opened for search only (agent/workdir.py), so that the
user reaches its own directory below."""

from __future__ import annotations

import logging
import os
import stat
from typing import IO, Any

log = logging.getLogger("opptune.agent")

DIR_MODE = 0o700
FILE_MODE = 0o600
LOCK_FILENAME = "agent.lock"  # in the state directory, held while an agent runs (state_lock)
# what marks a directory as an agent's state directory: its lock, or the outbox that agents
# older than the lock kept there too
AGENT_MARKS = (LOCK_FILENAME, "outbox.db")
# the virtual board's tree, which an agent makes there before it takes the directory
# (agent/cli.py): neither a mark nor another's file
VIRTUAL_TREE_PREFIX = "virtual-board-"
# what others may have of the state directory: search (x) alone, which agent/workdir.py gives
# where the workloads run as another user; read (list) or write is narrowed
_OTHERS_RW = 0o066


def make_dir(path: str) -> None:
    """``path`` made 0700 where missing (its parents as the umask makes them). An existing one
    of the agent's user that others may list or write (made under another umask, by hand, by
    an older agent) is narrowed to 0700, said in an INFO line, where it is empty or an agent's
    (its lock or outbox is there: AGENT_MARKS; a virtual board's tree does not count). Called
    once, as the agent takes the directory (state_lock), before its lock would mark any
    directory as an agent's. Left as they are: one of another user, a shared one (sticky, as
    /tmp), one open for search only (0711: agent/workdir.py), and one holding other files (a
    home, /var/lib given by mistake: narrowing it would shut others out of theirs), said in a
    warning."""
    os.makedirs(path, DIR_MODE, exist_ok=True)
    st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid() or mode & stat.S_ISVTX or not mode & _OTHERS_RW:
        return
    names = [n for n in os.listdir(path) if not n.startswith(VIRTUAL_TREE_PREFIX)]
    if names and not any(n in AGENT_MARKS for n in names):
        log.warning("state directory %s is open to others (mode %04o) and holds files that "
                    "are not an agent's: left as it is; give the agent a directory of its own "
                    "(the agent makes it 0700)", path, mode)
        return
    os.chmod(path, DIR_MODE)
    log.info("state directory %s narrowed from mode %04o to %04o: its outbox, saved settings "
             "and lock are the agent's alone", path, mode, DIR_MODE)


def make_dirs(path: str) -> None:
    """``path`` and each missing directory above it made 0700 (the umask's modes, up to 0777,
    would open them to others); existing ones are left as they are."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        make_dirs(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass


def opener(path: str, flags: int) -> int:
    """For open(..., opener=opener): a file made 0600, and one made before with more (under
    another umask) narrowed to it."""
    fd = os.open(path, flags, FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, FILE_MODE)
    except OSError:
        pass  # not the agent's file: what it allows stays the owner's business
    return fd


def open_private(path: str, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """open() for a file of the agent's own (0600)."""
    return open(path, mode, opener=opener, **kwargs)
