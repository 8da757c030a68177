"""The original cpufreq state: saved before the first change, restored on every way out.

Before the agent changes a policy it records that policy's governor, limits and setspeed in a
JSON state file (written atomically: temp file, fsync, rename) in the agent's state dir. The
state is restored on normal exit (atexit), on SIGTERM/SIGINT (signal handlers that restore and
then end the process as the signal would) and, after a crash or SIGKILL, by
:func:`restore_from_state_file` (the agent CLI's ``--restore``; the keeper also calls it when it
finds a stale file, so a crashed run's pinned limits are never mistaken for the originals).

Cpu sets the agent changes (a pid target's thread affinity, a unit's cpuset or AllowedCPUs) are
recorded the same way in ``cpuset-state.json`` (:class:`CpusetRecord`). :func:`restore_at_start`
puts both records back when the agent starts, before it reads the platform, and says so in the
log: after a kill -9 nothing stays pinned, and nothing pinned is taken for the original. The
configuration a user applied is then set again by agent/standing.py, on the originals.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from typing import Callable

from ..private import make_dir, open_private
from ..sysfs import KnobUnavailable, SysFS

STATE_FILENAME = "cpufreq-state.json"
CPUSET_FILENAME = "cpuset-state.json"
log = logging.getLogger("opptune.agent.knobs.state")
CPUFREQ = "/sys/devices/system/cpu/cpufreq"


def atomic_write_json(path: str, data: dict) -> None:
    d = os.path.dirname(os.path.abspath(path))
    make_dir(d)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open_private(tmp) as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    try:  # make the rename itself durable
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def snapshot_policy(fs: SysFS, policy: str) -> dict:
    """What restoring ``policy`` needs: governor, limits and (under userspace) setspeed."""
    d = f"{CPUFREQ}/{policy}"
    snap = {
        "governor": fs.try_text(f"{d}/scaling_governor"),
        "min_khz": fs.try_int(f"{d}/scaling_min_freq"),
        "max_khz": fs.try_int(f"{d}/scaling_max_freq"),
        "setspeed_khz": None,
    }
    if snap["governor"] == "userspace":
        snap["setspeed_khz"] = fs.try_int(f"{d}/scaling_setspeed")
    return snap


def write_limits(fs: SysFS, policy: str, lo: int, hi: int) -> None:
    """Set scaling_min/max in an order the kernel accepts from any current state.

    A new max below the current min, or a new min above the current max, is refused by the
    kernel; so when the range moves up the max goes first, otherwise the min goes first.
    """
    d = f"{CPUFREQ}/{policy}"
    cur_hi = fs.read_int(f"{d}/scaling_max_freq")
    if lo > cur_hi:
        fs.write(f"{d}/scaling_max_freq", hi)
        fs.write(f"{d}/scaling_min_freq", lo)
    else:
        fs.write(f"{d}/scaling_min_freq", lo)
        fs.write(f"{d}/scaling_max_freq", hi)


def restore_policy(fs: SysFS, policy: str, snap: dict) -> list[str]:
    """Put one policy back; returns the problems met (empty when all went back)."""
    d = f"{CPUFREQ}/{policy}"
    problems = []
    gov = snap.get("governor")
    try:
        if gov and fs.try_text(f"{d}/scaling_governor") != gov:
            fs.write(f"{d}/scaling_governor", gov)
    except KnobUnavailable as exc:
        problems.append(str(exc))
    lo, hi = snap.get("min_khz"), snap.get("max_khz")
    try:
        if lo is not None and hi is not None:
            write_limits(fs, policy, lo, hi)
        elif lo is not None:
            fs.write(f"{d}/scaling_min_freq", lo)
        elif hi is not None:
            fs.write(f"{d}/scaling_max_freq", hi)
    except KnobUnavailable as exc:
        problems.append(str(exc))
    if gov == "userspace" and snap.get("setspeed_khz"):
        try:
            fs.write(f"{d}/scaling_setspeed", snap["setspeed_khz"])
        except KnobUnavailable as exc:
            problems.append(str(exc))
    return problems


class UnreadableRecord(ValueError):
    """A record of original settings that cannot be read (damaged): the originals are lost;
    the message says what to check and do by hand."""


def _read_record(path: str, what: str, tools: str, consequence: str = "") -> dict:
    """The JSON object in ``path``; a damaged one (an SD card's) raised as UnreadableRecord.
    The file stays: removing it is the user's call, once the board is set back by hand."""
    try:
        with open(path) as fh:
            state = json.load(fh)
        if not isinstance(state, dict):
            raise ValueError(f"a JSON {type(state).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnreadableRecord(
            f"{path} cannot be read ({exc}): the original {what} it kept are lost{consequence}; "
            f"check that the board is at its own settings ({tools}) and set them back by hand "
            f"where not, then remove {path}") from None
    return state


def restore_from_state_file(path: str, sysfs_root: str | None = None) -> dict:
    """Restore the cpufreq state saved in ``path`` and remove the file.

    ``sysfs_root`` overrides the root recorded in the file. Returns
    ``{"restored": [policies], "problems": [..], "state_file": path}``; a missing file is not an
    error (nothing was changed). The file stays when a policy could not be restored, so a later
    attempt can still find the originals.
    """
    if not os.path.exists(path):
        return {"restored": [], "problems": [], "state_file": path, "note": "no state file"}
    state = _read_record(path, "cpufreq governor and limits",
                         "cpupower frequency-info, cpupower frequency-set",
                         ", and the agent sets no frequency while the file is there")
    fs = SysFS(sysfs_root or state.get("sysfs_root") or "/")
    restored, problems, values = [], [], {}
    for policy, snap in sorted(state.get("policies", {}).items()):
        p = restore_policy(fs, policy, snap)
        problems += p
        if not p:
            restored.append(policy)
            values[policy] = snap
    for rel, value in state.get("files", {}).items():
        try:
            fs.write(rel, value)
        except KnobUnavailable as exc:
            problems.append(str(exc))
    if not problems:
        os.unlink(path)
    return {"restored": restored, "problems": problems, "state_file": path,
            "values": values, "pid": state.get("pid")}


def describe_cpufreq(res: dict) -> str:
    """One line for the log: each policy put back and what to."""
    parts = []
    for policy in res.get("restored", []):
        snap = res.get("values", {}).get(policy, {})
        parts.append(f"{policy} governor {snap.get('governor')} "
                     f"{snap.get('min_khz')}..{snap.get('max_khz')} kHz")
    if res.get("problems"):
        parts.append("problems: " + "; ".join(res["problems"]))
    return ", ".join(parts) or "nothing to restore"


class StateKeeper:
    """Saves originals before the first change and restores them on every way out."""

    def __init__(self, fs: SysFS, state_path: str | None = None, install_handlers: bool = True):
        self.fs = fs
        self.state_path = state_path
        self.state: dict = {"sysfs_root": fs.root, "pid": os.getpid(), "policies": {},
                            "files": {}, "saved_at": None}
        self._lock = threading.Lock()
        self._install = install_handlers
        self._armed = False
        self._prev_handlers: dict[int, object] = {}
        if state_path and os.path.exists(state_path):
            # A previous agent died with knobs changed: its file holds the real originals.
            res = restore_from_state_file(state_path, fs.root)
            log.warning("cpufreq restored from %s (left by pid %s): %s", state_path,
                        res.get("pid"), describe_cpufreq(res))

    @property
    def changed(self) -> bool:
        return bool(self.state["policies"] or self.state["files"])

    def save_policy(self, policy: str) -> None:
        """Record ``policy``'s original state (once) and persist it before the caller writes."""
        with self._lock:
            if policy in self.state["policies"]:
                return
            self.state["policies"][policy] = snapshot_policy(self.fs, policy)
            self._persist()
        self._arm()

    def save_file(self, rel: str) -> None:
        """Record the original content of a single-value knob (boost, no_turbo)."""
        with self._lock:
            if rel in self.state["files"]:
                return
            self.state["files"][rel] = self.fs.read_text(rel)
            self._persist()
        self._arm()

    def _persist(self) -> None:
        self.state["saved_at"] = time.time()
        if self.state_path:
            atomic_write_json(self.state_path, self.state)

    def restore(self, keep: frozenset[str] = frozenset()) -> list[str]:
        """Restore everything saved but the policies in ``keep`` (they stay as set, their
        originals still recorded); returns problems (empty on success). Idempotent."""
        with self._lock:
            problems = []
            done = []
            for policy, snap in sorted(self.state["policies"].items()):
                if policy in keep:
                    continue
                p = restore_policy(self.fs, policy, snap)
                problems += p
                if not p:
                    done.append(policy)
            for rel, value in list(self.state["files"].items()):
                try:
                    self.fs.write(rel, value)
                    del self.state["files"][rel]
                except KnobUnavailable as exc:
                    problems.append(str(exc))
            for policy in done:
                del self.state["policies"][policy]
            if self.state_path:
                if self.changed:
                    atomic_write_json(self.state_path, self.state)
                elif os.path.exists(self.state_path):
                    os.unlink(self.state_path)
            return problems

    # -- exit paths ---------------------------------------------------------------------------

    def _arm(self) -> None:
        if self._armed or not self._install:
            return
        self._armed = True
        atexit.register(self.restore)
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread; atexit still holds
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._prev_handlers[sig] = signal.signal(sig, self._on_signal)
            except (ValueError, OSError):
                pass

    def _on_signal(self, signum, frame) -> None:
        self.restore()
        prev = self._prev_handlers.get(signum)
        if callable(prev) and prev is not self._on_signal:
            prev(signum, frame)  # e.g. Python's KeyboardInterrupt for SIGINT
            return
        # End as the signal would have, after the state is back.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def disarm(self) -> None:
        """Give back the signal handlers and atexit hook (after a final restore)."""
        if not self._armed:
            return
        atexit.unregister(self.restore)
        for sig, prev in self._prev_handlers.items():
            try:
                signal.signal(sig, prev)
            except (ValueError, OSError, TypeError):
                pass
        self._prev_handlers.clear()
        self._armed = False


# -- cpu sets -----------------------------------------------------------------------------------

def read_proc(path: str) -> bytes | None:
    """The content of a small kernel file (/proc/PID/stat, /proc/PID/cgroup), None where it
    cannot be read. os.read: a third of the CPU of a text file's open and read, which the
    heartbeat pays per confined process."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


def thread_start_time(tid: int) -> int | None:
    """The thread's start time (clock ticks after boot, /proc/TID/stat field 22): with the tid
    it names one thread for good, since tids are reused."""
    try:
        return int((read_proc(f"/proc/{tid}/stat") or b"").rsplit(b")", 1)[1].split()[19])
    except (ValueError, IndexError):
        return None


def running_start(pid: int) -> int | None:
    """The start time of process ``pid`` (as :func:`thread_start_time`) while it runs; None
    once it has exited, a zombie its parent has not reaped included."""
    try:
        fields = (read_proc(f"/proc/{pid}/stat") or b"").rsplit(b")", 1)[1].split()
        return None if fields[0] in (b"Z", b"X", b"x") else int(fields[19])
    except (ValueError, IndexError):
        return None


class CpusetRecord:
    """The original cpu sets of what the agent confines, persisted before each change.

    Entries: ``{"kind": "affinity", "tid", "start", "cpus"}``, ``{"kind": "cgroup", "path",
    "value"}`` (a kernel path under the sysfs root) and ``{"kind": "systemctl", "unit",
    "value"}``, each with the ``owner`` (config id) it was changed for. Only the first change
    of a thing or file is kept: that is the original, until :meth:`forget` says it is back.
    """

    def __init__(self, path: str | None, sysfs_root: str = "/"):
        self.path = path
        self.state: dict = {"sysfs_root": sysfs_root, "pid": os.getpid(), "entries": []}
        self._lock = threading.Lock()

    @staticmethod
    def _key(e: dict) -> tuple:
        """The thing an entry is about, as Targets names it: (kind, tid | path | unit)."""
        return (e["kind"], e.get("tid", e.get("path", e.get("unit"))))

    def save(self, *entries: dict) -> None:
        """Record ``entries`` (one durable write for all of them) before they are changed."""
        with self._lock:
            known = {self._key(e) for e in self.state["entries"]}
            new = [e for e in entries if self._key(e) not in known]
            if not new:
                return
            self.state["entries"] += new
            if self.path:
                atomic_write_json(self.path, self.state)

    def forget(self, owned: Callable[[str | None], bool], keep: set[tuple] = frozenset()
               ) -> None:
        """The things changed for the owners ``owned`` selects are back, but those in
        ``keep`` (keys, as :meth:`_key`): forget their originals (one durable write)."""
        with self._lock:
            left = [e for e in self.state["entries"]
                    if not owned(e.get("owner")) or self._key(e) in keep]
            if len(left) == len(self.state["entries"]):
                return
            self.state["entries"] = left
            if not self.path:
                return
            if left:
                atomic_write_json(self.path, self.state)
            elif os.path.exists(self.path):
                os.unlink(self.path)


def unit_gone(systemctl: str, unit: str) -> bool:
    """Whether systemd no longer knows ``unit`` (a transient unit that stopped, a unit file
    removed): its AllowedCPUs went with it, so there is nothing to put back."""
    try:
        res = subprocess.run([systemctl, "show", "-p", "LoadState", "--value", unit],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0 and res.stdout.strip() == "not-found"


def _systemctl_allowed_cpus(unit: str, value: str) -> None:
    """Raises ProcessLookupError where the unit is gone, as a thread that ended does."""
    exe = shutil.which("systemctl")
    if exe is None:
        raise OSError("systemctl not found")
    res = subprocess.run([exe, "set-property", "--runtime", unit, f"AllowedCPUs={value}"],
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        if unit_gone(exe, unit):
            raise ProcessLookupError(unit)
        raise OSError((res.stderr or res.stdout).strip()[:200])


def restore_cpusets_from_file(path: str, sysfs_root: str | None = None) -> dict:
    """Put back the cpu sets recorded in ``path``; removes it when nothing is left to retry.

    A thread that is gone, or whose tid now names another thread, needs nothing, nor does a
    unit systemd no longer knows. Returns
    ``{"restored": [what..], "problems": [..], "pid": recorder}``.
    """
    if not os.path.exists(path):
        return {"restored": [], "problems": [], "pid": None}
    state = _read_record(path, "cpu sets (the affinity of confined processes, the AllowedCPUs "
                         "of confined units)", "taskset -p, systemctl set-property")
    fs = SysFS(sysfs_root or state.get("sysfs_root") or "/")
    restored, problems, left = [], [], []
    for e in reversed(state.get("entries", [])):
        try:
            if e["kind"] == "affinity":
                if thread_start_time(e["tid"]) != e["start"]:
                    continue  # the thread ended: its affinity ended with it
                os.sched_setaffinity(e["tid"], e["cpus"])
                restored.append(f"affinity of thread {e['tid']}")
            elif e["kind"] == "cgroup":
                fs.write(e["path"], e["value"])
                restored.append(f"{e['path']} = {e['value'] or '(empty)'}")
            elif e["kind"] == "systemctl":
                _systemctl_allowed_cpus(e["unit"], e["value"])
                restored.append(f"AllowedCPUs of {e['unit']} = {e['value'] or '(empty)'}")
        except ProcessLookupError:
            continue
        except (OSError, KnobUnavailable, KeyError, TypeError) as exc:
            problems.append(f"restoring {e}: {exc}")
            left.append(e)
    if left:
        atomic_write_json(path, dict(state, entries=list(reversed(left))))
    else:
        os.unlink(path)
    return {"restored": restored, "problems": problems, "pid": state.get("pid")}


def restore_at_start(state_dir: str, sysfs_root: str | None = None) -> list[str]:
    """Restore what a previous agent left changed (its records in ``state_dir``); returns the
    log lines said (empty when there was nothing)."""
    lines = []
    path = os.path.join(state_dir, STATE_FILENAME)
    if os.path.exists(path):
        try:
            res = restore_from_state_file(path, sysfs_root)
            lines.append(f"cpufreq restored from {path} (left by pid {res.get('pid')}): "
                         f"{describe_cpufreq(res)}")
        except UnreadableRecord as exc:
            lines.append(str(exc))
        except (OSError, ValueError) as exc:
            lines.append(f"cpufreq record {path} could not be restored: {exc}")
    path = os.path.join(state_dir, CPUSET_FILENAME)
    if os.path.exists(path):
        try:
            res = restore_cpusets_from_file(path, sysfs_root)
            said = ", ".join(res["restored"]) or "nothing still confined"
            if res["problems"]:
                said += "; problems: " + "; ".join(res["problems"])
            lines.append(f"cpu sets restored from {path} (left by pid {res.get('pid')}): {said}")
        except UnreadableRecord as exc:
            lines.append(str(exc))
        except (OSError, ValueError) as exc:
            lines.append(f"cpu set record {path} could not be restored: {exc}")
    for line in lines:
        log.warning("%s", line)
    return lines
