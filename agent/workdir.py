"""Where each workload runs: the directory its ``cwd`` names, else one of its own that the
agent makes under its state directory, ``STATE_DIR/work/NAME``, owned by the user the workloads
run as and closed to everyone else (0700). Without one a workload ran in the agent's working
directory (``/`` under the unit), where a program that writes a scratch or output file fails,
or writes where it should not.

The state directory is closed to others (0700: agent/private.py), which would keep the
workloads' user out of its own directory below: where that user is another than the agent's, it
and ``work`` are opened for search only (0711), the least that lets a user reach a directory
below (search by its group alone would need the state directory given to that group, and
under the unit the directory is systemd's, StateDirectory=): nothing in them can be listed,
and every file of the agent's is 0600. Where the workloads run as the agent's own user, both stay 0700.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
from typing import Any

log = logging.getLogger("opptune.agent.workdir")

SUBDIR = "work"
SEARCH_ONLY = stat.S_IXGRP | stat.S_IXOTH


def dir_name(workload: str) -> str:
    """A file name for ``workload`` (any text): itself where it is a plain name, else its plain
    characters and a digest of the whole, so that two names never share a directory."""
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", workload)[:64]
    if plain == workload and not workload.startswith("."):
        return workload
    return f"{plain.lstrip('.') or 'w'}-{hashlib.sha256(workload.encode()).hexdigest()[:8]}"


class WorkDirs:
    """Makes the workloads' own directories for the user ``run_as`` (a
    :class:`~.child.RunAs`; None: the agent's own user)."""

    def __init__(self, state_dir: str, run_as: Any = None):
        self.state_dir = os.path.abspath(state_dir)  # --state-dir may be relative
        self.base = os.path.join(self.state_dir, SUBDIR)
        self.run_as = run_as

    def of(self, workload: str, configured: str = "") -> str:
        """The directory ``workload`` runs in: ``configured`` (the configuration's ``cwd``,
        checked when it was read) or its own, made (again) where it is missing, before each
        run: a few system calls beside a process start. OSError says why it cannot."""
        if configured:
            return configured
        path = os.path.join(self.base, dir_name(workload))
        self._make(path)
        return path

    def _make(self, path: str) -> None:
        if self.run_as is not None:
            self._open_for_search(self.state_dir)
        # searched by the workloads' user where it is another, else the agent's alone
        base_mode = 0o711 if self.run_as is not None else 0o700
        try:
            os.mkdir(self.base, base_mode)
        except FileExistsError:
            pass
        if os.stat(self.base).st_uid == os.geteuid():
            os.chmod(self.base, base_mode)  # the umask's 0755 would list the workloads' names
        elif self.run_as is not None:
            self._open_for_search(self.base)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{path} is not a directory: remove it, the agent makes it")
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)  # before the chown: the unit's root has no CAP_FOWNER
        if self.run_as is not None and (st.st_uid, st.st_gid) != (self.run_as.uid,
                                                                   self.run_as.gid):
            os.chown(path, self.run_as.uid, self.run_as.gid)

    @staticmethod
    def _open_for_search(path: str) -> None:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & SEARCH_ONLY != SEARCH_ONLY:
            os.chmod(path, mode | SEARCH_ONLY)
            log.info("%s opened for search (mode %04o) so that the workloads' user reaches "
                     "its directory below; nothing in it is listed", path, mode | SEARCH_ONLY)
