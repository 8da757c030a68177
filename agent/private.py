"""The agent's state directory and files, closed to other users whatever the umask: the
directory 0700, each file 0600. Under the unit, UMask=0077 and StateDirectoryMode did this;
an agent started from a shell took the shell's umask, and a umask of 000 left the outbox, the
saved originals and the applied configuration writable by anyone. Where the workloads run as
another user (run_as), the directory is opened for search only (agent/workdir.py), so that the
user reaches its own directory below."""

from __future__ import annotations

import os
from typing import IO, Any

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dir(path: str) -> None:
    """``path`` made 0700 where missing (its parents as the umask makes them); an existing
    one is left as it is (it may be a directory of the user's, even /tmp)."""
    os.makedirs(path, DIR_MODE, exist_ok=True)


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
