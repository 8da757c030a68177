"""Where a pushed configuration is applied: a command the agent launches, a running process
(all its threads, by pid), or a systemd unit (its cgroup's cpuset).

A config's optional ``target`` is ``{"kind": "command"}`` (the default: run the workload of the
agent's catalogue, as before), ``{"kind": "pid", "pid": N}`` or ``{"kind": "unit", "unit":
"name.service"}``, with an optional ``window_s`` (verification window, default 2 s).

What is guaranteed:

* **pid**: every thread listed under /proc/PID/task when the agent finishes gets the cpu set
  (the list is re-read until no new thread appears). A thread created later inherits the
  affinity of the thread that creates it, so it gets the set too, unless the program sets its
  own affinity.
* **unit**: with systemd managing this machine, ``systemctl set-property --runtime UNIT
  AllowedCPUs=...`` (systemd owns the cgroup tree: a direct write would be undone the next
  time systemd realises the unit); without systemd (containers, other init systems, the test
  trees), the unit's cgroup v2 ``cpuset.cpus`` under /sys/fs/cgroup is written directly.
  Every process of the unit, present and future, is confined by the cgroup. systemd's
  ``EffectiveCPUs`` is read back after the change: where it is not the set asked for (cgroup
  v1 or hybrid hierarchy, where set-property succeeds without effect; a unit not running) the
  change is undone and the configuration refused (TargetError); without systemd the cgroup's
  ``cpuset.cpus.effective`` is, the same way (a parent whose cpuset allows other cpus).

Every change is recorded with the value it replaced and the configuration it was made for
(its ``owner``, a config id). :meth:`Targets.release` undoes one configuration's changes,
newest first, when another replaces it (agent/apply.py); :meth:`Targets.restore` undoes them
all when the agent stops (as it restores cpufreq). With a ``record``
(:class:`~.knobs.state.CpusetRecord`) each original is also saved in the state directory before
the change, and forgotten once put back, so the next agent puts back after a kill -9 what is
still changed, and only that. Frequencies are set by the runner's cpufreq knob, which keeps its
own originals.

"Verify" for a target that is not a finite run: over ``window_s`` the agent measures the
target's CPU time (utilisation), the frequency of each cpufreq policy of its cpus, and the
energy where a meter exists; it reports these instead of a run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any, Callable

from ..shared.cpus import format_cpu_list, parse_cpu_list
from .knobs.state import read_proc, thread_start_time, unit_gone
from .sysfs import KnobUnavailable, SysFS

KINDS = ("command", "pid", "unit")
CGROUP = "/sys/fs/cgroup"
DEFAULT_WINDOW_S = 2.0
MAX_WINDOW_S = 600.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")
SETTLE_S = 1.0  # how long a unit's EffectiveCPUs may take to follow its AllowedCPUs
SYSTEMD_LOOK_S = 5.0  # the most a look at a unit's ActiveState may take (systemctl killed then)
# Targets.unit_stopped_by_cgroup: only systemd can tell whether the unit runs
ASK_SYSTEMD = object()


class TargetError(ValueError):
    """A target that cannot be applied; the message says why and what to do."""


def kind_of(target: dict[str, Any] | None) -> str:
    return (target or {}).get("kind", "command")


def unit_name(unit: str) -> str:
    """systemd's full unit name: a bare name is a service."""
    return unit if "." in unit else unit + ".service"


def _systemd_running(fs: SysFS) -> bool:
    # sd_booted(3): systemd is the init system iff /run/systemd/system exists
    return fs.root == "/" and os.path.isdir("/run/systemd/system")


def find_unit_cgroup(fs: SysFS, unit: str, max_depth: int = 4) -> str | None:
    """The cgroup v2 directory (kernel path) of ``unit`` under /sys/fs/cgroup: systemd names a
    unit's cgroup after the unit, inside its slices (system.slice/NAME, ...)."""
    name = unit_name(unit)
    base = fs.path(CGROUP)
    if not os.path.isfile(os.path.join(base, "cgroup.controllers")):
        return None  # not cgroup v2 (or no cgroup tree at all)
    level = [""]
    for _ in range(max_depth):
        nxt = []
        for rel in level:
            try:
                entries = os.scandir(os.path.join(base, rel))
            except OSError:
                continue
            with entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        sub = f"{rel}/{e.name}" if rel else e.name
                        if e.name == name:
                            return f"{CGROUP}/{sub}"
                        nxt.append(sub)
        level = nxt
    return None


def systemd_says_stopped(returncode: int, stdout: str) -> str | None:
    """Why a unit is stopped from the output of :meth:`Targets.systemd_look_args`' command:
    ActiveState inactive or failed, or LoadState not-found; None where it runs (activating:
    restarting) or systemctl failed (nothing tells)."""
    if returncode != 0:
        return None
    props = dict(line.partition("=")[::2] for line in stdout.splitlines())
    if props.get("LoadState") == "not-found":
        return "systemd no longer knows it"
    if props.get("ActiveState") in ("inactive", "failed"):
        return f"ActiveState={props['ActiveState']}"
    return None


def threads_of(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        raise TargetError(f"process {pid} is gone") from None


def cpu_time_pid(pid: int) -> float:
    """User + system seconds of every thread of ``pid`` (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _set_back(tid: int, cpus: list[int], start: int | None) -> None:
    """Thread ``tid``'s affinity back to ``cpus``, unless the thread has ended: its tid may
    name another thread by now (a replaced configuration is let go long after its change)."""
    if thread_start_time(tid) != start:
        raise ProcessLookupError(tid)
    os.sched_setaffinity(tid, cpus)


class Targets:
    """Validates, applies, measures and rolls back pid and unit targets."""

    def __init__(self, fs: SysFS, virtual: bool = False, systemctl: str | None = None,
                 systemd: bool | None = None, self_pid: int | None = None,
                 record: Any = None):
        self.fs = fs
        self.record = record
        self.virtual = virtual
        self.systemctl = systemctl if systemctl is not None else shutil.which("systemctl")
        self.systemd = _systemd_running(fs) if systemd is None else systemd
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self._cgroups: dict[str, str] = {}  # a unit's cgroup as last found (unit_cgroup)
        # oldest first: (owner, what, the record's key of the thing, how to put it back)
        self._undo: list[tuple[str | None, str, tuple, Callable[[], None]]] = []

    # -- validation (link thread) ---------------------------------------------------------------
    def check(self, target: dict[str, Any] | None, ask_systemd: bool = True) -> None:
        """Raise TargetError naming the first reason ``target`` cannot be applied here.
        ``ask_systemd`` False: whether systemd knows a unit is left for later (a call to
        systemctl, which a hung systemd holds up: the link's thread checks so, and the worker
        asks as it applies)."""
        if target is None:
            return
        kind = target.get("kind")
        if kind not in KINDS:
            raise TargetError(f"target kind {kind!r} is unknown; use one of {', '.join(KINDS)}")
        window = target.get("window_s", DEFAULT_WINDOW_S)
        if (type(window) not in (int, float) or not 0 < window <= MAX_WINDOW_S):
            raise TargetError(f"target window_s must be a number of seconds in "
                              f"(0, {MAX_WINDOW_S:g}], got {window!r}")
        if kind == "pid":
            pid = target.get("pid")
            if type(pid) is not int or pid < 1:
                raise TargetError(f"target pid must be a process id (an integer >= 1), "
                                  f"got {pid!r}")
            if pid == self.self_pid:
                raise TargetError(f"target pid {pid} is the agent itself; name the workload's "
                                  "process")
            if not os.path.isdir(f"/proc/{pid}/task"):
                raise TargetError(f"no process {pid} on this machine (it may have exited); "
                                  "start it and push the config again")
            if self.virtual:
                raise TargetError("a pid target needs a real board: the cpus of a virtual "
                                  "board are not this machine's")
        elif kind == "unit":
            unit = target.get("unit")
            # printable and short: it becomes systemctl's argument (a NUL raised ValueError)
            if not isinstance(unit, str) or not unit or "/" in unit or not unit.isprintable() \
                    or len(unit) > 256:
                raise TargetError(f"target unit must be a systemd unit name, got {unit!r}")
            if self.virtual:
                # it was looked for in the board's tree, which has no cgroups: "no unit ...:
                # is it running? cgroup v2 mounted?" sent the user after the wrong cause
                raise TargetError("a unit target needs a real board: the cpus of a virtual "
                                  "board are not this machine's")
            if ask_systemd or not (self.systemd and self.systemctl):
                self._unit_how(unit)

    def _unit_how(self, unit: str) -> tuple[str, str | None]:
        """("systemctl", None) or ("cgroup", its kernel path); TargetError if neither."""
        name = unit_name(unit)
        if self.systemd and self.systemctl:
            res = subprocess.run([self.systemctl, "show", "-p", "LoadState", "--value", name],
                                 capture_output=True, text=True, timeout=10)
            state = res.stdout.strip()
            if res.returncode != 0 or state in ("", "not-found"):
                raise TargetError(f"systemd has no unit {name}; see `systemctl list-units`")
            return "systemctl", None
        cg = find_unit_cgroup(self.fs, name)
        if cg is None:
            raise TargetError(f"no unit {name}: no cgroup named so under "
                              f"{self.fs.path(CGROUP)} (is it running? cgroup v2 mounted?)")
        return "cgroup", cg

    # -- applying (worker thread) ---------------------------------------------------------------
    def apply(self, target: dict[str, Any], cpus: list[int],
              owner: str | None = None) -> dict[str, Any]:
        """Confine the target to ``cpus`` for configuration ``owner``; returns what was done
        (for the report)."""
        kind = kind_of(target)
        if kind == "pid":
            return self._apply_pid(target["pid"], cpus, owner)
        if kind == "unit":
            return self._apply_unit(target["unit"], cpus, owner)
        raise TargetError(f"target kind {kind!r} is not applied by Targets")

    def owners(self) -> set[str | None]:
        """The configurations whose changes are in force."""
        return {owner for owner, *_ in self._undo}

    def _apply_pid(self, pid: int, cpus: list[int], owner: str | None) -> dict[str, Any]:
        want = set(cpus)
        done: dict[int, list[int]] = {}
        while True:  # threads may start while we pin: repeat until a pass finds none new
            new = [t for t in threads_of(pid) if t not in done]
            if not new:
                break
            befores: dict[int, list[int]] = {}
            for tid in new:
                try:
                    befores[tid] = sorted(os.sched_getaffinity(tid))
                except ProcessLookupError:
                    done[tid] = []  # the thread ended meanwhile
                except OSError as exc:
                    raise TargetError(f"cannot read the affinity of thread {tid} of process "
                                      f"{pid}: {exc.strerror or exc}") from None
            # one durable record of this pass's originals before any of them changes
            starts = {t: thread_start_time(t) for t in befores}
            self._save(owner, *({"kind": "affinity", "tid": t, "cpus": b, "start": starts[t]}
                                for t, b in befores.items()))
            for tid, before in befores.items():
                try:
                    os.sched_setaffinity(tid, want)
                except ProcessLookupError:
                    done[tid] = []  # the thread ended meanwhile
                    continue
                except OSError as exc:
                    raise TargetError(f"cannot set the affinity of thread {tid} of process "
                                      f"{pid}: {exc.strerror or exc}") from None
                done[tid] = before
                self._undo.append((owner, f"affinity of thread {tid}", ("affinity", tid),
                                   lambda t=tid, b=before, s=starts[tid]: _set_back(t, b, s)))
        tids = sorted(t for t, b in done.items() if b)
        return {"kind": "pid", "pid": pid, "tids": tids, "method": "sched_setaffinity"}

    def _apply_unit(self, unit: str, cpus: list[int], owner: str | None) -> dict[str, Any]:
        name = unit_name(unit)
        how, cg = self._unit_how(unit)
        text = format_cpu_list(cpus)
        if how == "systemctl":
            before = subprocess.run([self.systemctl, "show", "-p", "AllowedCPUs", "--value",
                                     name], capture_output=True, text=True, timeout=10)
            old = before.stdout.strip()
            self._save(owner, {"kind": "systemctl", "unit": name, "value": old})
            self._systemctl_set(name, text)
            self._undo.append((owner, f"AllowedCPUs of {name}", ("systemctl", name),
                               lambda: self._systemctl_restore(name, old)))
            why = self._not_in_effect(name, cpus)
            if why:
                raise self._refused(owner, "AllowedCPUs", text, name, old, why)
            return {"kind": "unit", "unit": name, "method": "systemctl set-property --runtime",
                    "allowed_cpus": text}
        rel = f"{cg}/cpuset.cpus"
        if not self.fs.exists(rel):
            raise TargetError(f"the cgroup of {name} ({cg}) has no cpuset.cpus: enable the "
                              f"cpuset controller in its parent's cgroup.subtree_control")
        old = self.fs.read_text(rel)
        self._save(owner, {"kind": "cgroup", "path": rel, "value": old})
        try:
            self.fs.write(rel, text)
        except KnobUnavailable as exc:
            raise TargetError(f"cannot confine {name}: {exc}") from None
        self._undo.append((owner, f"{rel}", ("cgroup", rel),
                           lambda: self._write_back(rel, old)))
        why = self._cgroup_not_in_effect(cg, cpus)
        if why:
            raise self._refused(owner, "cpuset.cpus", text, name, old, why)
        return {"kind": "unit", "unit": name, "method": "cgroup cpuset.cpus", "cgroup": cg,
                "allowed_cpus": text}

    def _write_back(self, rel: str, old: str) -> None:
        """A unit's cpuset.cpus back to ``old``; ProcessLookupError where its cgroup is gone
        (the unit stopped): nothing is left to put back, as for a thread."""
        if not os.path.isdir(os.path.dirname(self.fs.path(rel))):
            raise ProcessLookupError(rel)
        self.fs.write(rel, old if old else "")

    def _cgroup_not_in_effect(self, cg: str, cpus: list[int]) -> tuple[str, str] | None:
        """(what happened, what to do) where cpuset.cpus of cgroup ``cg``, just written, does
        not confine it to ``cpus``; None where it does. The kernel takes any cpus in the write
        and confines the cgroup to those its parent allows (cpuset.cpus.effective), or to all
        the parent's where it allows none of them: only the effective set tells."""
        eff = f"{cg}/cpuset.cpus.effective"
        try:
            effective = self.fs.read_list(eff)
        except KnobUnavailable as exc:
            return (f"cannot be checked: {exc.reason} reading {eff}",
                    "enable the cpuset controller in its parent's cgroup.subtree_control, or "
                    "apply to the unit's main process with --pid")
        if effective == sorted(set(cpus)):
            return None
        parent = cg.rsplit("/", 1)[0]
        allowed = self.fs.try_text(f"{parent}/cpuset.cpus.effective")
        return (f"took effect as cpus {format_cpu_list(effective)} (its parent {parent} allows "
                f"cpus {allowed or '?'} only)",
                f"choose cpus among {allowed or 'those'}, or widen {parent}/cpuset.cpus")

    def _refused(self, owner: str | None, knob: str, text: str, name: str, old: str,
                 why: tuple[str, str]) -> TargetError:
        """A unit's confinement set but not in effect as asked (``why``: what the kernel or
        systemd made of it, what to do) is put back: not measured as if it were. The error
        says both."""
        problems = self.release(owner)
        back = f"putting it back failed: {problems[0]}" if problems else \
            f"{knob} put back to {old or '(empty)'}"
        return TargetError(f"{knob}={text} of {name} {why[0]} ({back}); {why[1]}")

    def _systemctl_set(self, name: str, cpus_text: str) -> None:
        res = subprocess.run([self.systemctl, "set-property", "--runtime", name,
                              f"AllowedCPUs={cpus_text}"], capture_output=True, text=True,
                             timeout=30)
        if res.returncode != 0:
            raise TargetError(f"systemctl set-property {name} AllowedCPUs={cpus_text} failed: "
                              f"{(res.stderr or res.stdout).strip()[:200]}")

    def _effective(self, name: str) -> tuple[list[int], str]:
        """(the unit's EffectiveCPUs, its ActiveState) as systemd reports them."""
        res = subprocess.run([self.systemctl, "show", "-p", "EffectiveCPUs", "-p",
                              "ActiveState", name], capture_output=True, text=True, timeout=10)
        props = dict(line.partition("=")[::2] for line in res.stdout.splitlines())
        try:
            return parse_cpu_list(props.get("EffectiveCPUs", "")), props.get("ActiveState", "")
        except ValueError:
            return [], props.get("ActiveState", "")

    def _not_in_effect(self, name: str, cpus: list[int]) -> tuple[str, str] | None:
        """(what happened, what to do) where AllowedCPUs=cpus, just set, does not confine
        ``name`` as asked; None where it does.

        systemctl set-property succeeds without effect on a cgroup v1 or hybrid host, where
        the cpuset controller is not on the unified hierarchy systemd manages. EffectiveCPUs
        is systemd's reading of the unit's cpuset.cpus.effective and is empty wherever it
        manages no cpuset for the unit (v1, hybrid, a unit not running), so it tells on every
        hierarchy; the affinity of a main PID would miss units without one (slices, scopes)
        and processes that narrowed their own."""
        want = sorted(set(cpus))
        deadline = time.monotonic() + SETTLE_S
        while True:  # systemd realises the cgroup on its loop, after set-property returns
            effective, active = self._effective(name)
            if effective == want or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if effective == want:
            return None
        if effective:
            return (f"took effect as cpus {format_cpu_list(effective)} (its slice's "
                    "AllowedCPUs or the cpus online leave it no other)",
                    "widen the slice's AllowedCPUs, or apply to the unit's main process with "
                    "--pid")
        if active not in ("active", "reloading", "activating", "deactivating"):
            return (f"took no effect: the unit is not running (ActiveState={active or '?'}), "
                    "so it has no cgroup to confine", "start it, then apply again")
        if not os.path.isfile(os.path.join(self.fs.path(CGROUP), "cgroup.controllers")):
            return ("took no effect: this host mounts cgroup v1 or the hybrid hierarchy, and "
                    "AllowedCPUs needs the cpuset controller of the unified one (cgroup v2)",
                    "boot with systemd.unified_cgroup_hierarchy=1 on the kernel command line, "
                    "or apply to the unit's main process with --pid")
        return ("took no effect: systemd reports no effective cpus for it (no cpuset "
                "controller in its cgroup)", "apply to the unit's main process with --pid")

    def _systemctl_restore(self, name: str, cpus_text: str) -> None:
        """Put a unit's AllowedCPUs back; ProcessLookupError where systemd no longer knows the
        unit (a transient one that stopped): nothing is left to restore, as for a thread."""
        try:
            self._systemctl_set(name, cpus_text)
        except TargetError:
            if unit_gone(self.systemctl, name):
                raise ProcessLookupError(name) from None
            raise

    def unit_stopped(self, unit: str) -> str | None:
        """Why ``unit`` is not running now ('its cgroup is gone', ...); None where it runs, or
        where nothing tells (systemctl failing, a cgroup without cgroup.events or cgroup.procs).
        With systemd: ActiveState inactive or failed, or the unit gone (a unit restarting is
        activating: it runs). Without: its cgroup gone, or holding no process. It may wait on
        systemctl: the link's heartbeat asks :meth:`unit_stopped_by_cgroup`, and systemd on
        another thread (agent/target_watch.py)."""
        name = unit_name(unit)
        why = self.unit_stopped_by_cgroup(name)
        if why is not ASK_SYSTEMD:
            return why
        try:
            res = subprocess.run(self.systemd_look_args(name), capture_output=True, text=True,
                                 timeout=SYSTEMD_LOOK_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return systemd_says_stopped(res.returncode, res.stdout)

    def unit_stopped_by_cgroup(self, unit: str) -> str | None | object:
        """What the unit's cgroup tells at once, as :meth:`unit_stopped` (None: it runs), or
        ASK_SYSTEMD where only systemd can tell: under systemd, its cgroup gone or empty (a
        stop, a restart (activating), or a cgroup v1 machine)."""
        name = unit_name(unit)
        cg = self.unit_cgroup(name)
        if self.systemd and self.systemctl:
            # its cgroup (cgroup v2) says a unit runs in one file read; systemctl, a process
            # and a call to systemd (tens of ms of CPU on a small board, beside the runs the
            # agent measures), only where it does not
            return None if cg is not None and self._populated(cg) else ASK_SYSTEMD
        if cg is None:
            return "its cgroup is gone"
        return None if self._populated(cg) is not False else "its cgroup holds no process"

    def systemd_look_args(self, unit: str) -> list[str]:
        """The systemctl command whose output :func:`systemd_says_stopped` reads."""
        return [self.systemctl or "systemctl", "show", "-p", "LoadState", "-p", "ActiveState",
                unit_name(unit)]

    def unit_cgroup(self, name: str) -> str | None:
        """The cgroup of unit ``name`` (kernel path), as last found while it is there: the
        heartbeat's look at each confined unit does not walk the cgroup tree each time."""
        cg = self._cgroups.get(name)
        if cg is not None and os.path.isdir(self.fs.path(cg)):
            return cg
        cg = find_unit_cgroup(self.fs, name)
        if cg is None:
            self._cgroups.pop(name, None)
        else:
            self._cgroups[name] = cg
        return cg

    def _populated(self, cg: str) -> bool | None:
        """Whether cgroup ``cg`` or one below it holds a process: the kernel's cgroup.events,
        else the cgroup.procs files; None where neither is there."""
        events = self.fs.try_text(f"{cg}/cgroup.events")
        for line in (events or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "populated":
                return value.strip() != "0"
        seen = False
        for where, _, files in os.walk(self.fs.path(cg)):
            if "cgroup.procs" not in files:
                continue
            seen = True
            try:
                with open(os.path.join(where, "cgroup.procs")) as fh:
                    if fh.read().split():
                        return True
            except OSError:
                continue  # a cgroup removed meanwhile
        return False if seen else None

    def unconfined(self, unit: str, cpus: list[int]) -> bool:
        """Whether running unit ``unit``, confined to ``cpus`` without systemd, no longer is:
        its cgroup made anew when it restarted (cpuset.cpus empty). With systemd, never:
        AllowedCPUs is the unit's, which systemd gives each cgroup of it."""
        if self.systemd and self.systemctl:
            return False
        cg = self.unit_cgroup(unit_name(unit))
        text = self.fs.try_text(f"{cg}/cpuset.cpus") if cg else None
        if text is None:
            return False
        try:
            return parse_cpu_list(text) != sorted(set(cpus))
        except ValueError:
            return True

    def cgroup_of(self, pid: int) -> str | None:
        """The cgroup v2 path of process ``pid`` ('/system.slice/web.service'), from its
        /proc/PID/cgroup (one read); None where that says none (the process gone, cgroup v1
        only, a tree without the file)."""
        for line in (read_proc(self.fs.path(f"/proc/{pid}/cgroup")) or b"").splitlines():
            if line.startswith(b"0::"):
                return line[3:].strip().decode(errors="replace")
        return None

    def unit_holding(self, pid: int, units: list[str]) -> str | None:
        """The first of ``units`` whose cgroup, or one below it, holds process ``pid`` (its full
        name); None: none does, or no cgroup v2 tells."""
        return self.units_holding([pid], units)[pid]

    def units_holding(self, pids: list[int], units: list[str]) -> dict[int, str | None]:
        """{pid: the first of ``units`` whose cgroup, or one below it, holds it (its full
        name), or None}. A process's /proc/PID/cgroup says where it is in one read (cheap
        enough for each heartbeat); where that says nothing, the units' cgroup.procs are
        looked through."""
        cgroups = [(unit_name(u), cg) for u in units
                   if (cg := self.unit_cgroup(unit_name(u))) is not None]
        out: dict[int, str | None] = {}
        for pid in pids:
            out[pid] = None
            own = self.cgroup_of(pid) if cgroups else None
            for name, cg in cgroups:
                if own is not None:
                    rel = cg[len(CGROUP):]
                    if own == rel or own.startswith(rel + "/"):
                        out[pid] = name
                        break
                elif self._lists(cg, pid):
                    out[pid] = name
                    break
        return out

    def _lists(self, cg: str, pid: int) -> bool:
        """Whether the cgroup.procs of cgroup ``cg`` or of one below it lists ``pid``."""
        for where, _, files in os.walk(self.fs.path(cg)):
            if "cgroup.procs" not in files:
                continue
            try:
                with open(os.path.join(where, "cgroup.procs")) as fh:
                    if str(pid) in fh.read().split():
                        return True
            except OSError:
                continue  # a cgroup removed meanwhile
        return False

    # -- measuring ------------------------------------------------------------------------------
    def cpu_time(self, target: dict[str, Any]) -> float | None:
        """CPU seconds the target has used so far (None where it cannot be read)."""
        try:
            if kind_of(target) == "pid":
                return cpu_time_pid(target["pid"])
            # the unit's cgroup, found in the tree (kept while it is there) whether systemd
            # manages it or not: asking systemd where it is answered no cgroup, so no unit
            # under systemd was ever measured, and cost a systemctl on the worker each time
            cg = self.unit_cgroup(unit_name(target["unit"]))
            if cg is None:
                return None
            for line in self.fs.read_text(f"{cg}/cpu.stat").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, TargetError, ValueError):
            return None
        return None

    def _save(self, owner: str | None, *entries: dict[str, Any]) -> None:
        if self.record is not None and entries:
            self.record.save(*({**e, "owner": owner} for e in entries))

    def release(self, owner: str | None) -> list[str]:
        """Undo the changes made for configuration ``owner``, newest first (another replaced
        it); returns the problems (empty on success). A thread that has exited needs
        nothing."""
        return self._undo_where(lambda o: o == owner)

    def forget(self, owner: str | None) -> None:
        """Drop the changes made for configuration ``owner`` without undoing them: what they
        changed is gone (a unit's cgroup made anew when it restarted), and putting its
        original into what replaced it would change that."""
        self._undo = [u for u in self._undo if u[0] != owner]
        if self.record is not None:
            self.record.forget(lambda o: o == owner)

    def restore(self) -> list[str]:
        """Undo every change, newest first; returns the problems (empty on success)."""
        return self._undo_where(lambda o: True)

    def _undo_where(self, chosen: Callable[[str | None], bool]) -> list[str]:
        problems, failed = [], set()
        for i in range(len(self._undo) - 1, -1, -1):
            owner, what, key, undo = self._undo[i]
            if not chosen(owner):
                continue
            del self._undo[i]
            try:
                undo()
            except ProcessLookupError:
                pass  # the thread is gone: nothing to restore
            except Exception as exc:
                problems.append(f"restoring {what}: {exc}")
                failed.add(key)  # its original stays recorded: the next start tries again
        if self.record is not None:
            # what is back is forgotten, or the next start would put it back over whatever
            # is there by then (the next configuration's change, the user's own)
            self.record.forget(chosen, keep=failed)
        return problems


def measure_window(targets: Targets, target: dict[str, Any], window_s: float,
                   read_freqs: Callable[[], dict[str, float]],
                   sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """CPU time, utilisation and policy frequencies of a running target over ``window_s``."""
    cpu0 = targets.cpu_time(target)
    f0 = read_freqs()
    t0 = time.monotonic()
    sleep(window_s)
    elapsed = time.monotonic() - t0
    cpu1 = targets.cpu_time(target)
    f1 = read_freqs()
    out: dict[str, Any] = {"window_s": round(elapsed, 4)}
    if cpu0 is not None and cpu1 is not None:
        out["cpu_s"] = round(cpu1 - cpu0, 4)
        out["cpus_busy"] = round((cpu1 - cpu0) / elapsed, 4) if elapsed > 0 else None
    else:
        out["cpu_s"] = None
    out["freq_mhz"] = {p: round((f0.get(p, v) + v) / 2, 1) for p, v in f1.items()} or None
    return out
