"""The heartbeat's look at the targets the configurations in force confine.

At each heartbeat the link's thread asks (:meth:`TargetWatch.notice`) whether a confined
process has exited since (one read of /proc/PID/stat each: agent/standing.py ``exited``), or
a confined unit has stopped or restarted (:meth:`Targets.unit_stopped_by_cgroup`: its cgroup
first, one file read; systemd where that does not tell). A unit found stopped at two
heartbeats in a row is due to be dropped; one that restarted between them is not, and one
running again out of its cpu set (its cgroup made anew) is due to be confined again.

The link's thread never waits on systemctl (a slow or hung systemd would hold up heartbeats,
results and the daemon's commands): :class:`SystemdLook`, a thread of its own, asks systemd,
one unit at a time, each look killed after ``SYSTEMD_LOOK_S``; the heartbeat that finds a
unit's cgroup empty or gone asks for a look and takes the answer at a later heartbeat (until
then the unit is neither found stopped nor running). What is due is left for the worker
(agent/apply.py ``Executor.drop_exited``): :attr:`TargetWatch.exited` says it has something
to look at, :meth:`TargetWatch.take_units` hands it the units. A confined process found in
another unit of the configurations in force than before (moved into one, or out; one read of
/proc/PID/cgroup each: :meth:`Targets.unit_holding`) is left to the worker the same way
(:meth:`TargetWatch.take_moved`). Nothing here changes a target.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any

from . import standing
from .targets import (ASK_SYSTEMD, SYSTEMD_LOOK_S, Targets, kind_of, systemd_says_stopped,
                      unit_name)


class SystemdLook(threading.Thread):
    """systemd's word on whether units run (``systemctl show``), asked off the link's thread:
    one look at a time, each bounded by ``SYSTEMD_LOOK_S`` (its systemctl killed then), so a
    hung systemd piles up neither processes nor threads. Started at the first ask."""

    def __init__(self, targets: Targets):
        super().__init__(name="opptune-systemd-look", daemon=True)
        self.targets = targets
        self._cond = threading.Condition()
        self._wanted: dict[str, None] = {}  # units to look at, in the order asked
        self._answers: dict[str, str | None] = {}  # why stopped (None: runs), by unit
        self._busy: str | None = None  # the unit looked at now
        self._stale = False  # its answer is not wanted any more (its cgroup ran since)
        self._proc: subprocess.Popen | None = None
        self._closed = False

    def answer(self, unit: str) -> tuple[bool, str | None]:
        """(link thread) (whether systemd answered since the last ask, why the unit is
        stopped: None where it runs or systemctl failed); asks again."""
        with self._cond:
            told = unit in self._answers
            why = self._answers.pop(unit, None)
            if not (self._busy == unit and not self._stale) and not self._closed:
                self._wanted[unit] = None
                self._cond.notify()
        if not self.is_alive() and not self._closed and self.ident is None:
            self.start()
        return told, why

    def drop(self, units: set[str]) -> None:
        """(link thread) Forget what was asked and answered of ``units`` (running now, or no
        longer confined): an answer of before would be stale."""
        with self._cond:
            for unit in units:
                self._wanted.pop(unit, None)
                self._answers.pop(unit, None)
            if self._busy in units:
                self._stale = True

    def asked(self) -> set[str]:
        """The units asked of or answered for (to drop those no longer confined)."""
        with self._cond:
            return set(self._wanted) | set(self._answers) | (
                {self._busy} if self._busy else set())

    def close(self) -> None:
        """Stop looking; a systemctl under way is killed."""
        with self._cond:
            self._closed = True
            proc = self._proc
            self._cond.notify_all()
        if proc is not None:
            proc.kill()
        if self.ident is not None:
            self.join(timeout=SYSTEMD_LOOK_S)

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                unit = next(iter(self._wanted))
                del self._wanted[unit]
                self._busy, self._stale = unit, False
            why = self._look(unit)
            with self._cond:
                if not self._stale and not self._closed:
                    self._answers[unit] = why
                self._busy = None

    def _look(self, unit: str) -> str | None:
        """systemd's answer for ``unit``; None where systemctl fails or takes too long."""
        try:
            proc = subprocess.Popen(self.targets.systemd_look_args(unit),
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    stdin=subprocess.DEVNULL, text=True)
        except OSError:
            return None
        with self._cond:
            self._proc = proc
            closed = self._closed
        try:
            if closed:
                proc.kill()
            out, _ = proc.communicate(timeout=SYSTEMD_LOOK_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None
        finally:
            with self._cond:
                self._proc = None
        return systemd_says_stopped(proc.returncode, out)


class TargetWatch:
    """What the heartbeat found of the confined targets, until the worker takes it."""

    def __init__(self, targets: Targets | None):
        self.targets = targets
        # set by the link's thread when a confined process has exited: the worker drops it
        self.exited = threading.Event()
        # units of configurations in force, by config id (link thread: notice): found
        # stopped at the last heartbeat (why); at two in a row (why: the worker drops them);
        # found running again out of their cpu set (the worker confines them again)
        self._units_lock = threading.Lock()
        self._stopped_once: dict[str, str] = {}
        self._units_stopped: dict[str, str] = {}
        self._units_back: set[str] = set()
        self._systemd: SystemdLook | None = None  # (link thread) made at the first need
        self._moved = False  # a confined process found in another unit (the worker looks)

    def notice(self, configs: list[dict[str, Any]], pid_starts: dict[str, int | None],
               in_unit: dict[str, str] | None = None) -> bool:
        """(link thread, at each heartbeat) Whether a process that one of ``configs`` (those
        in force) confines has exited since or runs in another of their units than
        ``in_unit`` says (by config id), or a unit it confines has stopped (at two
        heartbeats in a row) or restarted unconfined, and the worker's look is newly due;
        ``pid_starts``: each pid configuration's process start time, by config id."""
        units_due = self._notice_units(configs)
        units_due = self._notice_moves(configs, in_unit or {}) or units_due
        if self.exited.is_set() or not (units_due or standing.exited(configs, pid_starts)):
            return False
        self.exited.set()
        return True

    def _notice_units(self, configs: list[dict[str, Any]]) -> bool:
        """(link thread) Each unit of ``configs`` looked at (:meth:`Targets.unit_stopped`):
        one found stopped at the last heartbeat too is due to be dropped; one running again
        out of its cpu set (its cgroup made anew) is due to be confined again. A unit that
        restarts between two heartbeats is not dropped. Whether any is due."""
        units = {str(c.get("config_id")): c for c in configs
                 if kind_of(c.get("target")) == "unit"}
        if self.targets is None or not units:
            self._stopped_once.clear()
            self._systemd_keep(set())
            return False
        due = False
        for cid, c in units.items():
            unit = c["target"]["unit"]
            why = self.targets.unit_stopped_by_cgroup(unit)
            if why is ASK_SYSTEMD:
                if self._systemd is None:
                    self._systemd = SystemdLook(self.targets)
                told, why = self._systemd.answer(unit_name(unit))
                if not told:
                    continue  # asked now: the answer is taken at a later heartbeat
            elif self._systemd is not None and why is None:
                self._systemd.drop({unit_name(unit)})  # it runs: a look of before is stale
            with self._units_lock:
                if why is None:
                    self._stopped_once.pop(cid, None)
                    if self.targets.unconfined(unit, c["cpus"]):
                        self._units_back.add(cid)
                        due = True
                elif cid in self._stopped_once:
                    self._units_stopped[cid] = why
                    due = True
                else:
                    self._stopped_once[cid] = why
        with self._units_lock:
            for cid in [k for k in self._stopped_once if k not in units]:
                del self._stopped_once[cid]
        self._systemd_keep({unit_name(c["target"]["unit"]) for c in units.values()})
        return due

    def _notice_moves(self, configs: list[dict[str, Any]], in_unit: dict[str, str]) -> bool:
        """(link thread) Whether the process of a pid configuration of ``configs`` runs in
        another of their units than ``in_unit`` says (moved into one, or out of it); nothing
        is read where no unit is confined."""
        units = [c["target"]["unit"] for c in configs if kind_of(c.get("target")) == "unit"]
        if self.targets is None or not (units or in_unit):
            return False
        pids = {str(c.get("config_id")): c["target"]["pid"] for c in configs
                if kind_of(c.get("target")) == "pid"}
        where = self.targets.units_holding(list(pids.values()), units)
        if all(where[pid] == in_unit.get(cid) for cid, pid in pids.items()):
            return False
        with self._units_lock:
            self._moved = True
        return True

    def take_moved(self) -> bool:
        """(worker thread) Whether a confined process was found in another unit since the
        last take."""
        with self._units_lock:
            moved, self._moved = self._moved, False
        return moved

    def _systemd_keep(self, units: set[str]) -> None:
        """(link thread) systemd's looks at units other than ``units`` (those confined now)
        forgotten."""
        if self._systemd is not None:
            self._systemd.drop(self._systemd.asked() - units)

    def close(self) -> None:
        """The agent stops: no more looks at systemd (one under way is killed)."""
        if self._systemd is not None:
            self._systemd.close()

    def take_units(self) -> tuple[dict[str, str], set[str]]:
        """(worker thread) The units found stopped at two heartbeats ({config id: why}) and
        those found running again out of their cpu set, since the last take."""
        with self._units_lock:
            stopped, self._units_stopped = self._units_stopped, {}
            back, self._units_back = self._units_back, set()
        return stopped, back
