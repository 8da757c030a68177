"""What each workload's runs will meet, checked once at the agent's start as the user they run
as: the directory they start in (its ``cwd``, or its own under the state directory:
workdir.py). Found only at the first run, a directory that user cannot enter failed every run
of the workload with a line in a job's reason. It stops the agent at start (the caller
refuses, exit 2): it stays so until someone changes its permissions or the configuration.

The check runs in a forked child that drops to the user as the workload's child does (its
groups, gid, uid) and tries what the run will do: enter the directory. No exec: nothing of the
user's runs, and an interpreter the user may not run does not matter here.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
from dataclasses import dataclass
from typing import Any

from .child import RunAs

MAX_REPLY = 1 << 16


@dataclass
class Found:
    """What the user met: ``enter`` (None: it entered ``cwd``; else why not), ``writable``
    (it may write there)."""
    enter: str | None = None
    writable: bool = True


def _look(cwd: str) -> dict[str, Any]:
    """In the child, as the user: enter ``cwd``."""
    out: dict[str, Any] = {"enter": None, "writable": True}
    try:
        os.chdir(cwd)
        out["writable"] = os.access(".", os.W_OK)
    except OSError as exc:
        out["enter"] = exc.strerror or str(exc)
    return out


def probe(cwd: str, run_as: RunAs | None) -> Found:
    """What the user ``run_as`` (None: the agent's own) meets entering ``cwd``. OSError
    where the child cannot be made."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: system calls only, then _exit (no cleanup of the agent's)
        code = 0
        try:
            os.close(r)
            if run_as is not None:
                os.setgroups(list(run_as.groups))
                os.setgid(run_as.gid)
                os.setuid(run_as.uid)
            data = json.dumps(_look(cwd)).encode()[:MAX_REPLY]
            while data:
                data = data[os.write(w, data):]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    try:
        chunks = []
        while chunk := os.read(r, MAX_REPLY):
            chunks.append(chunk)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not chunks:
        raise OSError(errno.EPERM, "the check could not take the user's identity")
    got = json.loads(b"".join(chunks))
    return Found(got["enter"], got["writable"])


def user_name(run_as: RunAs | None) -> str:
    """'nobody', or the agent's own user's name where the workloads run as it."""
    if run_as is not None:
        return run_as.name
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def cwd_refusal(workload: str, cwd: str, configured: bool, why: str,
                run_as: RunAs | None) -> str:
    """The start's refusal of a directory the user cannot enter, with what to do."""
    who = user_name(run_as)
    fix = ("give it search permission (x) on each directory of that path, set the entry's "
           "'cwd' to a directory it may enter, or leave 'cwd' out (a directory of its own "
           "under the state directory)") if configured else (
        "give it search permission (x) on each directory above the state directory, or "
        "choose a state directory it can reach (/var/lib/opptune-agent), or set the entry's "
        "'cwd'")
    return (f"workload '{workload}': its runs run as user {who!r}, who cannot enter their "
            f"working directory {cwd} ({why}); {fix}")


class Refused(ValueError):
    """A workload whose runs could not start: the message names it and what to do."""


def check_workloads(workloads: Any, workdirs: Any, run_as: RunAs | None) -> list[str]:
    """Check each workload of ``workloads`` (a :class:`~.workloads.Workloads`): its directory
    made where it is its own (``workdirs``, a :class:`~.workdir.WorkDirs`) and entered as
    ``run_as``. Returns the warnings (a configured directory the user may not write); raises
    :class:`Refused` for a directory that cannot be made or entered."""
    warnings = []
    for name in workloads.names():
        w = workloads.get(name)
        configured = w.command.cwd if w.command is not None else ""
        try:
            cwd = workdirs.of(name, configured)
        except OSError as exc:
            why = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror or str(exc)
            raise Refused(f"workload '{name}': cannot make its working directory under "
                          f"{workdirs.base} ({why}); give the agent a state directory it may "
                          "write, or set the entry's 'cwd'") from None
        try:
            found = probe(cwd, run_as)
        except OSError as exc:  # no child to be had: its runs will tell
            warnings.append(f"workload '{name}': its working directory was not checked as "
                            f"user {user_name(run_as)!r} "
                            f"({exc.strerror or exc})")
            continue
        if found.enter is not None:
            raise Refused(cwd_refusal(name, cwd, bool(configured), found.enter, run_as))
        if configured and not found.writable:
            warnings.append(f"workload '{name}': user {user_name(run_as)!r} may not write in "
                            f"its working directory {cwd}: a run that writes a file there "
                            "fails")
    return warnings

