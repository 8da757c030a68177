"""The workload's child process: started already bound to its cpus in a session of its own,
dying with the agent, waited for with a timeout, woken at once by an abort from another thread, killed with its
whole process group, and reaped with ``os.wait4`` so its rusage is the child tree's own."""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..shared.lifeline import PRCTL, ask_death_signal

TICK_S = 0.05   # poll period where no pidfd can wake the wait, and while a killed child dies


def _load_chdir() -> Callable[[bytes], int] | None:
    """libc's chdir, for the same reason as prctl (None where it is not found)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).chdir
    except (OSError, AttributeError):
        return None


_CHDIR = _load_chdir()


def _before_exec(parent: int, start_fd: int, cwd: bytes | None = None) -> Callable[[], None]:
    """What the child runs last before exec (CPython calls it after the uid/gid change and
    before closing fds and exec'ing: child_exec in _posixsubprocess.c, CPython 3.11 on).

    It asks for SIGKILL when the agent dies, however it dies (kill -9, the OOM killer): a
    workload left running skews every later run on the board. Set after the uid/gid change,
    which would clear it; if the agent already died before it was set, the child is someone
    else's and kills itself. Given ``cwd``, it enters that directory: after the uid change,
    which Popen's own ``cwd`` precedes, since the workload's directory is its user's, mode
    0700, and the agent's root under its unit has no CAP_DAC_READ_SEARCH to enter it (a
    failure raises, which Popen reports as SubprocessError). Then it writes CLOCK_MONOTONIC
    (system-wide) to ``start_fd``: the start of the run's ``wall_s``, after the agent's fork
    and this Python code, which are the agent's cost and not the program's. A failed write
    leaves the parent its own start."""
    prctl, kill_sig, ask = PRCTL, int(signal.SIGKILL), ask_death_signal
    write = os.write
    clock, monotonic = time.clock_gettime_ns, time.CLOCK_MONOTONIC
    chdir, get_errno = _CHDIR, ctypes.get_errno

    def before_exec() -> None:
        if prctl is not None:
            ask(prctl, kill_sig, parent)
        if cwd is not None:
            if chdir is None:
                os.chdir(cwd)
            elif chdir(cwd) != 0:
                raise OSError(get_errno(), "chdir")
        try:
            write(start_fd, clock(monotonic).to_bytes(8, "little"))
        except (OSError, OverflowError):
            pass
    return before_exec


def _read_start(fd: int) -> int | None:
    """The child's start written by :func:`_before_exec`; None when it wrote none. Popen
    returns once the exec succeeded, after the write: nothing is waited for here."""
    try:
        data = os.read(fd, 16)
    except OSError:  # EAGAIN: nothing written
        return None
    return int.from_bytes(data, "little") if len(data) == 8 else None


def now_ns() -> int:
    """The clock a child's start is taken with (CLOCK_MONOTONIC, one for every process):
    the end of a run and the parent's own start are read with it too."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class AbortSignal:
    """A flag set from another thread, with a pipe whose byte wakes a waiting ``select``."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        self.is_set = False

    @property
    def fd(self) -> int:
        """Readable when the flag was set (select on it)."""
        return self._r

    def drain(self) -> None:
        """Read away a wake-up byte that no abort goes with."""
        os.read(self._r, 64)

    def clear(self) -> None:
        """Unset the flag and read away its wake-up bytes (a cancel, once its job ended)."""
        self.is_set = False
        while select.select([self._r], [], [], 0)[0]:
            if not os.read(self._r, 64):
                break

    def set(self) -> None:
        self.is_set = True
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def close(self) -> None:
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass(frozen=True)
class RunAs:
    """The unprivileged user the workloads run as (``run_as`` of the agent's configuration)."""
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def resolve_run_as(name: str) -> RunAs:
    """The user ``name`` with its primary and supplementary groups; ValueError when unknown
    or root (running workloads as root is asked for as run_as = "root", not resolved)."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"user {name!r} does not exist: create it (useradd --system "
                         f"--no-create-home --shell /usr/sbin/nologin {name})") from None
    if pw.pw_uid == 0:
        raise ValueError(f"user {name!r} is root (uid 0)")
    groups = tuple(sorted(set(os.getgrouplist(name, pw.pw_gid))))
    return RunAs(name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir)


def interpreter_refused(run_as: RunAs) -> str | None:
    """Why ``run_as`` cannot run this agent's Python with opptune importable (None: it can).
    The kernels, virtual and pyperf workloads run with it, and an interpreter installed
    under a home of mode 0700 (/root) would fail every one of their runs."""
    try:
        proc = spawn([sys.executable, "-c", "import opptune"], user_env(run_as), None,
                     subprocess.DEVNULL, subprocess.PIPE, run_as)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "it did not finish starting within 120 s"
    if proc.returncode == 0:
        return None
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


def user_env(run_as: RunAs | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (None: this process's environment) with the HOME, USER and LOGNAME of
    ``run_as`` (None: unchanged): what a workload's own ``env`` is laid over, so that a HOME
    it configured wins over the user's (nobody's is /nonexistent)."""
    env = dict(os.environ if base is None else base)
    if run_as is not None:
        env.update({"HOME": run_as.home, "USER": run_as.name, "LOGNAME": run_as.name})
    return env


class Child(subprocess.Popen):
    """The workload's process, with ``exec_ns``: :func:`now_ns` in the child right before its
    exec (None: the child did not say, and a run's wall time starts where the agent began the
    spawn)."""
    exec_ns: int | None = None


def spawn(argv: list[str], env: dict[str, str], cpus: list[int] | None, out: Any,
          err: Any, run_as: RunAs | None = None, cwd: str | None = None) -> Child:
    """Start the child already bound to ``cpus`` (None: not pinned), as ``run_as`` when given
    (its uid, gid and supplementary groups, set in the child between fork and exec; ``env``
    is used as given: :func:`user_env` makes the user's), in the directory ``cwd`` (None:
    this process's). OSError whose strerror says why it could not start.

    Why not preexec_fn: it is unsafe in a threaded process. A forked child inherits the
    affinity of the *calling thread*, so this thread narrows its own mask around the fork and
    widens it again; the rest of the process is untouched. Popen's user/group/extra_groups
    drop privileges in the same fork-safe C code.

    The one exception is :func:`_before_exec`: the parent-death signal, which only the child
    can ask for, a ``cwd`` under ``run_as``, which only the user may enter, and the child's
    start time, which only it can read (a foreign call or two, getppid, a clock read and a
    pipe write; no lock or import, so the hazard, a lock another thread held at fork, does
    not arise). The kernel sends the signal when the *thread* that forked ends, not the
    process: the caller must wait for the child in the same thread, as the runner's worker
    does (:func:`wait`)."""
    # close-on-exec: the exec (or close_fds) shuts the child's end, and a child another
    # thread forks meanwhile never keeps it past its own exec
    after_drop = os.fsencode(cwd) if cwd is not None and run_as is not None else None
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    kw: dict[str, Any] = {"preexec_fn": _before_exec(os.getpid(), w, after_drop)}
    if run_as is not None:
        kw.update(user=run_as.uid, group=run_as.gid, extra_groups=list(run_as.groups))
    elif cwd is not None:
        kw["cwd"] = cwd
    old = None
    try:
        if cpus is not None:
            old = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cpus)
        proc = Child(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                     close_fds=True, start_new_session=True, **kw)
        proc.exec_ns = _read_start(r)
        return proc
    except subprocess.SubprocessError:
        if after_drop is None:
            raise
        raise OSError(errno.EACCES, f"user {run_as.name!r} cannot enter its working "
                                    f"directory {cwd} (it needs search permission on each "
                                    "directory of the path)") from None
    except OSError as exc:
        if cwd is None or exc.filename != cwd:
            raise
        raise OSError(exc.errno, f"cannot enter its working directory {cwd}: "
                                 f"{exc.strerror}") from None
    finally:
        if old is not None:
            os.sched_setaffinity(0, old)
        os.close(r)
        os.close(w)


def observed_affinity(pid: int) -> list[int] | None:
    """The cpus the child may run on; None when it has already exited (it inherited the mask
    at fork anyway)."""
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return None


def wait(proc: subprocess.Popen, timeout_s: float, abort: AbortSignal,
         cancel: AbortSignal | None = None) -> tuple[int, Any, str]:
    """Wait for the child with the timeout, waking at once on abort (the agent stops) or
    ``cancel`` (the daemon cancelled the job). Returns (status, rusage, why) with why in
    {"exit", "timeout", "aborted", "cancelled"}; the last three killed the child's group."""
    deadline = time.monotonic() + timeout_s
    why = "exit"
    pidfd = None
    signals = [abort] + ([cancel] if cancel is not None else [])
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pass
    try:
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap
                return status, ru, why
            time_left = deadline - time.monotonic()
            if why == "exit" and time_left <= 0:
                why = "timeout"
                kill_group(proc.pid)
                continue
            if why == "exit" and abort.is_set:
                why = "aborted"
                kill_group(proc.pid)
                continue
            if why == "exit" and cancel is not None and cancel.is_set:
                why = "cancelled"
                kill_group(proc.pid)
                continue
            fds = [s.fd for s in signals] + ([pidfd] if pidfd is not None else [])
            # Without a pidfd fall back to a coarse tick; with one, sleep until exit/abort.
            tick = (max(0.0, time_left) if pidfd is not None
                    else min(max(0.0, time_left), TICK_S))
            if why != "exit":
                tick = TICK_S
            r, _, _ = select.select(fds, [], [], tick)
            for s in signals:
                if s.fd in r and why == "exit" and not s.is_set:
                    s.drain()
    finally:
        if pidfd is not None:
            os.close(pidfd)


def kill_group(pid: int) -> None:
    """SIGKILL to the child's process group (it leads its own session: its children too)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
