"""The heartbeat's look at the targets the configurations in force confine.

At each heartbeat the link's thread asks (:meth:`TargetWatch.notice`) whether a confined
process has exited since (one read of /proc/PID/stat each: agent/standing.py ``exited``), or
a confined unit has stopped or restarted (:meth:`Targets.unit_stopped`: its cgroup first,
systemd where that does not tell). A unit found stopped at two heartbeats in a row is due to
be dropped; one that restarted between them is not, and one running again out of its cpu set
(its cgroup made anew) is due to be confined again. What is due is left for the worker
(agent/apply.py ``Executor.drop_exited``): :attr:`TargetWatch.exited` says it has something
to look at, :meth:`TargetWatch.take_units` hands it the units. Nothing here changes a target.
"""

from __future__ import annotations

import threading
from typing import Any

from . import standing
from .targets import Targets, kind_of


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

    def notice(self, configs: list[dict[str, Any]], pid_starts: dict[str, int | None]
               ) -> bool:
        """(link thread, at each heartbeat) Whether a process that one of ``configs`` (those
        in force) confines has exited since, or a unit it confines has stopped (at two
        heartbeats in a row) or restarted unconfined, and the worker's look is newly due;
        ``pid_starts``: each pid configuration's process start time, by config id."""
        units_due = self._notice_units(configs)
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
            return False
        due = False
        for cid, c in units.items():
            unit = c["target"]["unit"]
            why = self.targets.unit_stopped(unit)
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
        return due

    def take_units(self) -> tuple[dict[str, str], set[str]]:
        """(worker thread) The units found stopped at two heartbeats ({config id: why}) and
        those found running again out of their cpu set, since the last take."""
        with self._units_lock:
            stopped, self._units_stopped = self._units_stopped, {}
            back, self._units_back = self._units_back, set()
        return stopped, back
