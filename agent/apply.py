"""Jobs and pushed configurations: validate against this board, then run them in order.

Validation happens as the message arrives (in the link thread), so a bad job or config is
refused at once, even while a long job runs, and nothing of it runs; only whether systemd
knows a unit is asked by the worker as it applies (``applied`` ``{ok: false, error: "cannot
apply to the target: systemd has no unit ..."}``): the link's thread never waits on
systemctl. Accepted work is executed one item at a time by :class:`Worker`, a thread, so
heartbeats continue during long runs.

Refusals: a job -> ``error`` with code ``bad_job``; a config -> ``applied`` ``{ok: false,
error}``.

Accepted jobs and configs are saved in the outbox's database before they run, so an agent
killed before or while running them resumes them after a restart; a saved config this board
can no longer run (its workload or cpus gone) is reported as refused, with the reason.

A ``cancel`` from the daemon marks the job cancelled in the outbox (never run again, also
after a restart) and, where it is the job under way, kills its run (the child's process group,
as a timeout does). The worker then records its runs not run, as a stopped job's are (with
``extra["stopped"]["cancelled"]``), and goes on with its next work; a job only queued here is
dropped that way when its turn comes. A cancel of a job this agent does not hold, or that has
ended, does nothing.

The knobs rest between work: when the queue runs empty the worker puts them back to the board's
original (:meth:`Executor.rest`), or to the configurations a user applied and that stand (a
config without ``keep: false``; one per target, the newest clock where two share a cpufreq
policy: shared/standing.py), so no measurement point's clock is left behind. They are kept in
the state directory and applied again when the agent starts (agent/standing.py). A process or
unit a configuration confined is let go (its cpu set put back) when another configuration of
the same target replaces it; one that does not stand (``keep: false``, failed) has its own
target changes undone once verified (a unit's: its processes with a configuration of their own
in force get their cpus again).

A process a configuration in force confines may exit while the agent runs: the link's
heartbeat looks for that (:meth:`Worker.watch`, agent/target_watch.py: one read of
/proc/PID/stat per confined process), and the worker drops its configuration
(:meth:`Executor.drop_exited`) at once when idle, else before the next point of the job under
way: its entry leaves ``standing.json``, its records of originals are forgotten, the clocks go
back at rest to those of the configurations still in force (or the board's originals), and a
hello tells the daemon. A unit that a configuration in force confines is looked at too
(its cgroup gone or empty; with systemd, its ActiveState, asked on a thread of its own:
agent/target_watch.py): one stopped at two heartbeats in a row is dropped the same way; one
that restarted between them (its cgroup made anew, out of its cpu set) is confined again. A
confined process that moves into (or out of) a unit a configuration in force confines is
noticed at the heartbeat too (its /proc/PID/cgroup), with the outcome of its being there when
applied (:meth:`Executor._moved_between_units`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..shared import protocol as P
from ..shared.clock_words import clock_text
from ..shared.config import AgentConfig
from ..shared.cpus import format_cpu_list
from ..shared.point_stats import StopRule, point_stats, stop_reason
from ..shared.records import JOB_CANCELLED, JOB_STOPPED, NOT_RUN, RunRecord
from ..shared.refusals import RefusalLog
from ..shared.standing import WHILE_RUNNING, clock_plan, key_of, policies_of, target_key
from ..shared.target_text import measured_text, target_name
from . import standing
from .knobs.state import running_start
from .outbox import FULL_RETRY_S, Outbox, OutboxFull, OutboxUnwritable
from .platform import clock_problem, cpus_problem
from .private import open_private
from .runner import Aborted, Cancelled, Runner, RunSpec
from .target_watch import TargetWatch
from .targets import (DEFAULT_WINDOW_S, TargetError, Targets, kind_of, measure_window,
                      unit_name)
from .workloads import WorkloadError, Workloads

log = logging.getLogger("opptune.agent.apply")

CONFIG_WARMUP = 1  # one unrecorded run before verifying, as sweeps do


POINT_STATE = "adaptive-point.json"  # in state_dir: the values of the adaptive point under way
# in state_dir: the job's points in a row, up to the last, with a run that timed out
TIMEOUTS_STATE = "timed-out-points.json"



def _write_json(path: str, data: Any, **dump: Any) -> None:
    """``data`` as JSON in ``path`` (0600), whole or not at all: written aside, then moved
    over it. Raises OSError."""
    with open_private(path + ".tmp") as fh:
        json.dump(data, fh, **dump)
    os.replace(path + ".tmp", path)


def board_seconds(rec: RunRecord) -> float:
    """What a run took of the board's time, as a point's budget counts it: its wall time
    with the agent's start that wall_s leaves out (extra["start_cost_s"]), else its time."""
    if rec.wall_s is None:
        return float(rec.time_s or 0.0)
    start = rec.extra.get("start_cost_s")
    return float(rec.wall_s + (start if isinstance(start, (int, float)) else 0.0))


class Refused(ValueError):
    """A job or config this agent will not run; the message says why."""


class _PointDone(Exception):
    """Raised by an adaptive point's result callback once the point's result that closes it
    is stored: it ends ``Runner.run_point``'s loop (which has no stop hook of its own)."""


@dataclass(frozen=True)
class JobLimits:
    """The agent's bounds on the work a daemon may ask of it (agent configuration keys)."""

    max_reps: int
    max_warmup: int
    max_points: int
    max_threads_per_cpu: int
    max_job_runs: int
    stop_after_timeouts: int  # points in a row with a run that timed out (0: never stop)

    @classmethod
    def of(cls, config: AgentConfig) -> "JobLimits":
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})


def _over(what: str, value: int, limit: int, key: str) -> Refused:
    return Refused(f"{what} {value} is over this agent's limit of {limit} ('{key}' in its "
                   "configuration)")


def check_point(platform: dict[str, Any], workloads: Workloads, workload: str, size: str,
                cpus: list[int], threads: int, freq_khz: int | None,
                max_threads_per_cpu: int | None = None) -> None:
    """Raise Refused naming the first reason this point cannot run here."""
    try:
        workloads.check(workload, size)
    except WorkloadError as exc:
        raise Refused(str(exc)) from None
    problem = cpus_problem(platform, cpus)
    if problem:
        raise Refused(problem)
    if not isinstance(threads, int) or threads < 1:
        raise Refused(f"threads must be >= 1, got {threads!r}")
    if max_threads_per_cpu is not None and threads > max_threads_per_cpu * len(cpus):
        raise Refused(f"threads {threads} on {len(cpus)} cpus is over this agent's limit of "
                      f"{max_threads_per_cpu} per cpu ('max_threads_per_cpu' in its "
                      "configuration)")
    problem = clock_problem(platform, cpus, freq_khz) if freq_khz is not None else None
    if problem:
        raise Refused(problem)


class Executor:
    """Runs accepted jobs and configs; sends through ``send`` and stores results durably."""

    def __init__(self, agent_id: str, platform: dict[str, Any], workloads: Workloads,
                 runner: Runner, outbox: Outbox, send: Callable[[dict[str, Any]], None],
                 notify: Callable[[], None] = lambda: None, state_dir: str | None = None,
                 targets: Targets | None = None, limits: JobLimits | None = None):
        self.agent_id = agent_id
        self.platform = platform
        self.workloads = workloads
        self.runner = runner
        self.outbox = outbox
        self.send = send
        self.notify = notify
        self.state_dir = state_dir
        self.targets = targets
        self.limits = limits or JobLimits.of(AgentConfig())
        # the configurations applied to stay in force (configs not sent with keep: false), one
        # per target, oldest first, kept in state_dir for the agent's next start
        # (agent/standing.py)
        self.standing_configs: list[dict[str, Any]] = []
        self.standing_dropped: list[str] = []  # why those before a restart were dropped
        # the start time of the process of each pid configuration in force, by config id: the
        # same pid started again later is another process (agent/standing.py ``exited``)
        self._pid_starts: dict[str, int | None] = {}
        # the unit (of a configuration in force) that each pid configuration's process runs
        # in, by config id: the process's own configuration holds for it (shared/standing.py)
        self._in_unit: dict[str, str] = {}
        # what the link's heartbeat found of the confined targets (agent/target_watch.py)
        self._watch = TargetWatch(targets)
        # orders the worker's changes of the three above with the link thread's copies of them
        # (notice_exited, standings_wire): a pid configuration in force is seen with its start
        # time and its unit
        self._standing_lock = threading.Lock()
        # tells the daemon what stands now (agent/cli.py: a hello); any thread may call it
        self.say_standings: Callable[[], Any] = lambda: None
        self._standing_file = standing.StandingFile(state_dir) if state_dir else None
        self._knobs_moved = False  # by work since the knobs last rested
        self._timed_out = False  # a run of the job's point under way timed out
        # the job the worker runs now, and the lock that orders a cancel (link thread) with
        # the job's start and end (worker thread): a cancel is never lost between them, nor
        # taken by the next job
        self._job_lock = threading.Lock()
        self.current_job: str | None = None
        # jobs and configs refused: the first line of each kind, then one a minute
        self.refusals = RefusalLog(log, 60.0, line="refused a %s from the daemon: %s (%s)%s",
                                   more="more refused")

    def deliver(self, msg: dict[str, Any]) -> None:
        """Send through the outbox: kept on disk and resent until the daemon acks it, like a
        result (an ``applied`` carries verification measurements). On a disk too full to
        keep it, it is sent once as it is, and the warning says so."""
        try:
            self.outbox.put(msg)
        except OutboxFull as exc:
            log.warning("sending %s %s without keeping it: %s", msg["type"], msg["id"], exc)
            self.send(msg)
            return
        self.notify()

    # -- a full outbox pauses the work (worker thread) -----------------------------------------
    def wait_for_room(self) -> None:
        """Return once the outbox may take more results; raises Aborted when stopped."""
        while self.outbox.full_reason() is not None:
            self.notify()  # let the link send what waits, so that acks free it
            self.runner.wait(FULL_RETRY_S)

    def durably(self, write: Callable[[], Any]) -> Any:
        """``write()`` retried until the disk takes it: what it stores stays in memory
        meanwhile. Raises Aborted when stopped (an unstored run is measured again after a
        restart: its job's progress did not advance). A file that cannot be written (not a
        full disk, which the outbox says itself) is said once as the wait starts and once
        as it ends."""
        since = None
        while True:
            try:
                out = write()
            except OutboxUnwritable as exc:
                if since is None:
                    since = time.monotonic()
                    log.warning("%s; the finished run's result waits in memory and no new "
                                "run starts until then", exc)
                self.runner.wait(FULL_RETRY_S)
                continue
            except OutboxFull:
                self.notify()
                self.runner.wait(FULL_RETRY_S)
                continue
            if since is not None:
                log.warning("the outbox can be written again after %.0f s: the waiting "
                            "result is stored and measuring resumes", time.monotonic() - since)
            return out

    # -- validation (link thread) -------------------------------------------------------------
    def validate_job(self, body: dict[str, Any]) -> None:
        self.check_size(body)
        per_cpu = self.limits.max_threads_per_cpu
        for i, pt in enumerate(body["points"]):
            try:
                check_point(self.platform, self.workloads, body["workload"], body["size"],
                            pt["cpus"], pt["threads"], pt.get("freq_khz"), per_cpu)
            except Refused as exc:
                raise Refused(f"point {i}: {exc}") from None

    def check_size(self, body: dict[str, Any]) -> None:
        """Refuse a job over this agent's limits: it would occupy the board too long."""
        lim = self.limits
        # adaptive repetitions: a job may go on up to its max_reps
        adaptive = body.get("max_reps")
        reps = max(body["reps"], adaptive if type(adaptive) is int else 0)
        if reps > lim.max_reps:
            raise _over("repetitions", reps, lim.max_reps, "max_reps")
        if body["warmup"] > lim.max_warmup:
            raise _over("warm-up runs", body["warmup"], lim.max_warmup, "max_warmup")
        points = len(body["points"])
        if points > lim.max_points:
            raise _over("points", points, lim.max_points, "max_points")
        runs = points * (reps + body["warmup"])
        if runs > lim.max_job_runs:
            raise _over(f"{points} points x ({reps} repetitions + {body['warmup']} warm-up "
                        "runs) =", runs, lim.max_job_runs, "max_job_runs")

    def validate_config(self, body: dict[str, Any]) -> None:
        if body["reps"] > self.limits.max_reps:
            raise _over("repetitions", body["reps"], self.limits.max_reps, "max_reps")
        check_point(self.platform, self.workloads, body["workload"], body["size"],
                    body["cpus"], body["threads"], body.get("freq_khz"),
                    self.limits.max_threads_per_cpu)
        target = body.get("target")
        if kind_of(target) != "command":
            if self.targets is None:
                raise Refused("this agent applies configurations to the commands it launches "
                              "only")
            try:  # systemd is asked by the worker: the link's thread never waits on it
                self.targets.check(target, ask_systemd=False)
            except TargetError as exc:
                raise Refused(str(exc)) from None

    # -- execution (worker thread) ------------------------------------------------------------
    def rest(self) -> None:
        """No work left: the knobs back to the standing configuration, or to the board's
        original where none stands. Nothing happens when no work moved them."""
        if not self._knobs_moved:
            return
        self._knobs_moved = False
        if not self.runner.knobs:
            return  # a board without cpufreq: nothing was changed
        self.runner.rest(self._standing_specs())
        clocked = [s for s in self._standing_specs() if s.freq_khz is not None]
        if len(clocked) == 1:
            log.info("idle: knobs back to the applied configuration (%s on cpus %s)",
                     clock_text(clocked[0].freq_khz), format_cpu_list(clocked[0].cpus))
        elif clocked:  # per policy: where two share one, the newer clock holds there
            plan = clock_plan(self.standing_configs, self.platform)
            log.info("idle: knobs back to the applied configurations (%s)",
                     "; ".join(f"{pol} at {clock_text(khz)} of {cid}"
                               for pol, (khz, cid) in sorted(
                                   plan.items(), key=lambda kv: int(kv[0][6:] or 0))))
        else:
            log.info("idle: knobs back to the board's original settings")

    def _standing_specs(self) -> list[RunSpec]:
        return [RunSpec.of_config(c) for c in self.standing_configs]

    def stand_again(self) -> None:
        """At start: the configurations in force before the agent stopped, applied again."""
        if self._standing_file is None:
            return
        out = standing.stand_again(self._standing_file, self.platform, self.runner,
                                   self.targets)
        in_unit = self._units_of_processes(out.configs)
        with self._standing_lock:
            self.standing_configs, self.standing_dropped = out.configs, out.dropped
            self._pid_starts, self._in_unit = dict(out.starts), in_unit
        for unit in self._of_kind("unit"):
            self._pin_again(unit["target"]["unit"])
        for level, line in standing.narrower_lines(self.standing_configs, self._in_unit):
            standing.log.log(level, "%s", line)

    def notice_exited(self) -> bool:
        """(link thread, at each heartbeat) Whether a process that a configuration in force
        confines has exited since, or a unit it confines has stopped (at two heartbeats in a
        row) or restarted unconfined, and the worker's look is newly due
        (:meth:`drop_exited`)."""
        with self._standing_lock:
            configs, starts = list(self.standing_configs), dict(self._pid_starts)
            in_unit = dict(self._in_unit)
        return self._watch.notice(configs, starts, in_unit)

    def close(self) -> None:
        """The agent stops: the heartbeat's look at systemd ends (agent/target_watch.py)."""
        self._watch.close()

    def _units_gone(self) -> list[tuple[dict[str, Any], str]]:
        """(worker thread) (configuration, why) of the units found stopped at two heartbeats
        that are still stopped; those found running again unconfined are confined again."""
        stopped, back = self._watch.take_units()
        if self.targets is None:
            return []
        gone = []
        for c in self._of_kind("unit"):
            cid = str(c.get("config_id"))
            if cid not in stopped.keys() | back:
                continue
            unit = c["target"]["unit"]
            if self.targets.unit_stopped(unit) is not None:
                if cid in stopped:
                    gone.append((c, f"unit {unit_name(unit)} stopped {WHILE_RUNNING} "
                                  f"({stopped[cid]})"))
            elif self.targets.unconfined(unit, c["cpus"]):
                log.info("applied configuration %s: unit %s restarted out of its cpu set",
                         standing.describe(c), unit)
                self.targets.forget(cid)  # its cgroup's original went with the old one
                standing.confine_again(self._standing_file, c, self.targets)
                self._pin_again(unit)
        return gone

    def drop_exited(self) -> None:
        """(worker thread) Drop the configurations in force whose process has exited or
        whose unit has stopped: out of ``standing.json`` and the hello's standings (the daemon
        told), their records of originals forgotten (nothing is left to put back) or put back
        (a unit's cpu set, where it is still there), the clocks they held back at rest to
        those of the others in force, or to the board's originals. A unit restarted out of
        its cpu set is confined again."""
        self._watch.exited.clear()
        moved = self._watch.take_moved()
        gone = standing.exited(self.standing_configs, self._pid_starts) + self._units_gone()
        if not gone:
            if moved and self._moved_between_units():
                self.say_standings()
            return
        ids = {str(c.get("config_id")) for c, _ in gone}
        with self._standing_lock:
            self.standing_configs = [c for c in self.standing_configs
                                     if str(c.get("config_id")) not in ids]
            for cid in ids:
                self._pid_starts.pop(cid, None)
                self._in_unit.pop(cid, None)
        for config, why in gone:
            cid = str(config.get("config_id"))
            for problem in (self.targets.release(cid) if self.targets is not None else []):
                log.warning("undoing configuration %s: %s", cid, problem)
            if self._standing_file is not None:
                try:
                    self._standing_file.forget(key_of(config))
                except OSError as exc:
                    log.warning("cannot write %s (%s): the next start drops %s",
                                self._standing_file.path, exc, cid)
            log.info("applied configuration %s dropped: %s; %s", standing.describe(config), why,
                     "the other applied configurations stand" if self.standing_configs else
                     "the board goes back to its original settings")
            self.standing_dropped.append(f"{cid}: {why}")
        self._moved_between_units()  # a unit dropped confines none of them
        self._knobs_moved = True  # its clocks: back at rest to what the others hold
        self.say_standings()

    def _moved_between_units(self) -> bool:
        """(worker thread) The processes of the pid configurations in force looked up in the
        units confined again; each found in another than before (moved into one, or out of
        it, since a heartbeat saw it) has the outcome of its being there when its
        configuration was applied: its own cpus again (the kernel gives a process moved into
        a cgroup that cgroup's cpus) where they are among its unit's, the lines of which cpu
        set holds for it (shared/standing.py). Whether any moved (the daemon is to be told)."""
        in_unit = self._units_of_processes()
        with self._standing_lock:
            was, self._in_unit = self._in_unit, in_unit
        # one whose unit's configuration was dropped has not moved
        confined = {unit_name(c["target"]["unit"]) for c in self._of_kind("unit")}
        moved = {cid for cid in was.keys() | in_unit.keys() if was.get(cid) != in_unit.get(cid)
                 and (cid in in_unit or was[cid] in confined)}
        by_id = {str(c.get("config_id")): c for c in self._of_kind("pid")}
        for cid in sorted(moved & by_id.keys()):
            c = by_id[cid]
            unit = in_unit.get(cid)
            log.info("applied configuration %s: process %s %s", standing.describe(c),
                     c["target"]["pid"], f"moved into unit {unit}, which a configuration in "
                     "force confines" if unit else f"left unit {was[cid]}")
            if unit is not None:
                self._pin_again(unit, only=cid)
                continue
            try:
                self.targets.apply(c["target"], list(c["cpus"]), owner=cid)
            except (TargetError, OSError) as exc:
                log.warning("applied configuration %s: process %s cannot be given its cpus "
                            "again (%s)", standing.describe(c), c["target"]["pid"], exc)
        for level, line in standing.narrower_lines(
                self.standing_configs, {k: v for k, v in in_unit.items() if k in moved}):
            log.log(level, "%s", line)
        return bool(moved & by_id.keys())

    def standing_wire(self) -> dict[str, Any] | None:
        """The configuration applied last of those in force, as the hello's ``standing``
        says it to a daemon that knows one per board (None: none)."""
        return standing.wire(self.standing_configs[-1]) if self.standing_configs else None

    def standings_wire(self) -> list[dict[str, Any]]:
        """The configurations in force, oldest first, as the hello's ``standings`` says (any
        thread: the link's builds the hello)."""
        with self._standing_lock:
            configs, in_unit = list(self.standing_configs), dict(self._in_unit)
        return [standing.wire(c, in_unit.get(str(c.get("config_id")))) or {} for c in configs]

    def _of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The configurations in force on targets of ``kind`` ('pid', 'unit'), oldest first."""
        return [c for c in self.standing_configs if kind_of(c.get("target")) == kind]

    def _units_of_processes(self, configs: list[dict[str, Any]] | None = None
                            ) -> dict[str, str]:
        """{pid config id: unit}: the processes of the configurations in force (or of
        ``configs``) that run in a unit another one confines (Targets.unit_holding)."""
        configs = self.standing_configs if configs is None else configs
        out = {}
        for c in configs:
            if kind_of(c.get("target")) == "pid":
                bound = self._unit_bounds(c["target"]["pid"], configs)
                if bound is not None:
                    out[str(c["config_id"])] = bound[0]
        return out

    def _unit_bounds(self, pid: int, configs: list[dict[str, Any]] | None = None
                     ) -> tuple[str, dict[str, Any]] | None:
        """(its unit, that unit's configuration in force (of ``configs``)) where process
        ``pid`` runs in a unit a configuration in force confines."""
        configs = self.standing_configs if configs is None else configs
        units = {target_key(c["target"]): c for c in configs
                 if kind_of(c.get("target")) == "unit"}
        if self.targets is None or not units:
            return None
        unit = self.targets.unit_holding(pid, [c["target"]["unit"] for c in units.values()])
        if unit is None:
            return None
        return unit, units[target_key({"kind": "unit", "unit": unit})]

    def _stand(self, body: dict[str, Any], spec: RunSpec, at_rest: bool) -> None:
        """A configuration applied and verified stays in force unless sent with keep: false
        (the daemon's own verification of a recommendation after a sweep), and is kept for
        the agent's next start. ``at_rest``: the knobs rested before it was applied."""
        if not body.get("keep", True):
            return
        before = self.standing_configs
        key = target_key(body.get("target"))
        # the board as this configuration's apply left it (at rest before: the clocks in
        # force, its own set over them; without a clock, those of the others: _held)
        if spec.freq_khz is None:
            now = self._plan([c for c in before if key_of(c) != key])
        else:
            now = {**self._plan(before), **self._plan([body])}
        configs = [c for c in before if key_of(c) != key] + (
            [] if standing.leaves_nothing(body) else [body])
        ids = {str(c.get("config_id")) for c in configs}
        starts = {cid: t for cid, t in self._pid_starts.items() if cid in ids}
        if kind_of(body.get("target")) == "pid":
            starts[str(body["config_id"])] = running_start(body["target"]["pid"])
        in_unit = self._units_of_processes(configs)
        # all at once: a heartbeat between them saw a pid configuration without its start
        # time, its process as another's (a wake of the worker for nothing)
        with self._standing_lock:
            was = self._in_unit
            self.standing_configs, self._pid_starts, self._in_unit = configs, starts, in_unit
            self.standing_dropped = []
        if self._standing_file is not None:
            try:
                self._standing_file.keep(body)
            except OSError as exc:
                log.warning("cannot keep the applied configuration %s in %s (%s): it stands "
                            "until the agent stops", body.get("config_id"),
                            self._standing_file.path, exc)
        for line in standing.conflict_lines(self.standing_configs, self.platform,
                                            newest_only=True):
            log.warning("%s", line)
        if kind_of(body.get("target")) == "unit":
            self._pin_again(body["target"]["unit"])
        for level, line in standing.narrower_lines(self.standing_configs, self._in_unit,
                                                   newest_only=True):
            log.log(level, "%s", line)
        cid = str(body["config_id"])
        if {k: v for k, v in was.items() if k != cid} != \
                {k: v for k, v in self._in_unit.items() if k != cid}:
            self.say_standings()  # a process the daemon knows now runs in a confined unit
        if at_rest and now == self._plan(self.standing_configs):
            # applied over the rest state: the board holds what it should rest at, and
            # setting it again would only flicker
            self._knobs_moved = False

    def _plan(self, configs: list[dict[str, Any]]) -> dict[str, int]:
        """{policy: kHz} that ``configs`` (oldest first) set under the rule."""
        return {p: khz for p, (khz, _) in clock_plan(configs, self.platform).items()}

    def cancel(self, job_id: str) -> str:
        """The daemon cancelled ``job_id`` (link thread): kept in the outbox, so that it never
        runs again (also after a restart), and the run under way killed when it is this job's.
        The worker then records the runs not run (:meth:`run_job`). Returns what it did, for
        the log."""
        with self._job_lock:
            try:
                cancelled = self.outbox.cancel_job(job_id)
            except OutboxFull as exc:
                cancelled = False
                log.warning("cannot keep the cancel of job %s (%s): stopping it all the same; "
                            "a restart would resume it", job_id, exc)
                if self.current_job != job_id:
                    return "not kept: the disk is full"
            if self.current_job == job_id:
                self.runner.cancel()
                return "running: its run under way is stopped"
        if cancelled:
            return "queued here: dropped"
        job = self.outbox.job(job_id)
        if job is None:
            return "not held by this agent: nothing to stop"
        return "ended before" if job["done"] else "cancelled before"

    def run_job(self, job_id: str) -> None:
        """Run (or resume) a saved job from its first point without a stored result; of a
        cancelled one, only record the runs not run."""
        job = self.outbox.job(job_id)
        if job is None or job["done"]:
            return
        body = job["body"]
        reps, points = body["reps"], body["points"]
        total = len(points) * reps
        with self._job_lock:
            # read again under the lock: a cancel before this point is seen here, one after it
            # finds the job current and stops its run
            job = self.outbox.job(job_id) or job
            if not job["cancelled"]:
                self.current_job = job_id
        if job["cancelled"]:
            self._end_cancelled(job_id, body, total, job["next_seq"])
            return
        try:
            self._run_points(job_id, body, total, job["next_seq"])
        except Cancelled:
            now = self.outbox.job(job_id)
            self._end_cancelled(job_id, body, total, now["next_seq"] if now else total)
            return
        finally:
            with self._job_lock:
                self.current_job = None
                self.runner.uncancel()
        self._finish_job(job_id)
        log.info("job %s done (%d runs)", job_id, total)

    def abandon_job(self, job_id: str) -> None:
        """A job whose run raised, which the daemon is told failed: ended here too, so that
        the next start does not run the rest of it under a job the daemon holds failed (its
        status then read 'failed' with every run received). Where even that cannot be
        written, it is said, and the next start resumes it."""
        try:
            self._drop_point_state()
            self._keep_timeouts(job_id, [])
            self.outbox.finish_job(job_id)
        except (OutboxFull, sqlite3.Error, OSError) as exc:
            log.warning("job %s failed and could not be ended in the outbox (%s): the next "
                        "start resumes it", job_id, exc)

    def _finish_job(self, job_id: str) -> None:
        """Every run of ``job_id`` has its record: its state files go, and it is done."""
        self._drop_point_state()
        self._keep_timeouts(job_id, [])
        self.durably(lambda: self.outbox.finish_job(job_id))

    def _end_cancelled(self, job_id: str, body: dict[str, Any], total: int, seq: int) -> None:
        """Record every run from ``seq`` on not run, as a stopped job's are (the run killed
        under way included: it measured nothing), marked ``extra["stopped"]["cancelled"]``,
        and finish the job. What was measured before is stored already."""
        points, reps = body["points"], body["reps"]
        first_whole = -(-seq // reps)  # points from here on have no run at all
        why = f"{NOT_RUN}{JOB_CANCELLED}by the daemon before run {seq + 1} of {total}"
        stop = {"cancelled": True, "runs_not_run": total - seq, "points": len(points),
                "points_not_run": len(points) - first_whole}
        self._not_run(job_id, body, total, seq, why, stop)
        self._finish_job(job_id)
        log.warning("job %s cancelled by the daemon: %d of %d runs not run (%d measured before "
                    "are kept)", job_id, total - seq, total, seq)

    def _run_points(self, job_id: str, body: dict[str, Any], total: int, seq: int) -> None:
        """Run the job's points from run ``seq`` on; raises Cancelled when it is cancelled."""
        self._knobs_moved = True
        reps, warmup, points = body["reps"], body["warmup"], body["points"]
        if seq:
            log.info("resuming job %s at run %d of %d", job_id, seq, total)
        # the points in a row, up to the last, with a run timed out: kept in state_dir, so a
        # restart between them, or while the lines of a stop are written, still stops the job
        timed_out = self._load_timeouts(job_id) if seq else []
        limit = self.limits.stop_after_timeouts
        while seq < total:
            # a confined process exited: said before the next point
            if self._watch.exited.is_set():
                self.drop_exited()
            if limit and len(timed_out) >= limit:
                self._stop_job(job_id, body, total, seq, timed_out)
                break
            idx, first_rep = divmod(seq, reps)
            pt = points[idx]
            spec = self._spec(body, pt)
            self.wait_for_room()
            self._timed_out = False
            if isinstance(pt.get("until"), dict):
                self._run_adaptive(job_id, total, reps, warmup, idx, first_rep, spec,
                                   StopRule.from_wire(pt["until"], reps))
            else:
                self._run_fixed(job_id, total, reps, warmup, idx, first_rep, spec)
            seq = (idx + 1) * reps
            if idx in timed_out:  # resumed after the point's last result: counted before
                continue
            was = timed_out
            timed_out = timed_out + [idx] if self._timed_out else []
            if timed_out or was:
                self._keep_timeouts(job_id, timed_out)

    @staticmethod
    def _spec(body: dict[str, Any], pt: dict[str, Any]) -> RunSpec:
        return RunSpec(body["workload"], body["size"], list(pt["cpus"]), pt["threads"],
                       pt.get("freq_khz"), variant=str(pt.get("variant", "")))

    def _not_run(self, job_id: str, body: dict[str, Any], total: int, seq: int, why: str,
                 stop: dict[str, Any]) -> None:
        """Store each run from ``seq`` on as not run, for ``why``, with ``extra["stopped"]``
        ``stop`` (what the daemon keeps with the job)."""
        points, reps = body["points"], body["reps"]
        for s in range(seq, total):
            idx, rep = divmod(s, reps)
            rec = self.runner.failed_record(self._spec(body, points[idx]), rep, why)
            rec.extra["stopped"] = stop
            self._store_result(job_id, total, s, rec)

    def _stop_job(self, job_id: str, body: dict[str, Any], total: int, seq: int,
                  timed_out: list[int]) -> None:
        """Record every run from ``seq`` on not run: the points ``timed_out`` (in a row) each
        had a run that timed out, and a program that hangs would wait run_timeout_s at each
        point left. Every seq gets its record, so the job completes and the daemon gives the
        reason (the same text after a restart part-way: it counts from the last of
        ``timed_out``, not from ``seq``)."""
        points = body["points"]
        n = self.limits.stop_after_timeouts
        first = timed_out[-1] + 1
        left = len(points) - first
        why = (f"{NOT_RUN}{JOB_STOPPED}{n} points in a row timed out (points "
               f"{', '.join(str(i) for i in timed_out[-n:])} of {len(points)}; "
               f"stop_after_timeouts = {n} in the agent's configuration): {left} of "
               f"{len(points)} points not run")
        log.warning("job %s: %s", job_id, why[len(NOT_RUN):])
        # the same, for the daemon to keep with the job (shared/records.job_stop)
        stop = {"after_timeouts": n, "points_not_run": left, "points": len(points),
                "definition": self.workloads.definition(body["workload"])}
        self._not_run(job_id, body, total, seq, why, stop)

    def _store_result(self, job_id: str, total: int, s: int, rec: RunRecord) -> None:
        if rec.error == self.runner.timeout_text:
            self._timed_out = True  # the point under way had a run that timed out
        msg = P.make("result", self.agent_id, {"job_id": job_id, "seq": s, "of": total,
                                               "record": rec.to_dict()})
        self.durably(lambda: self.outbox.add_result(job_id, s, msg))
        self.notify()

    def _run_fixed(self, job_id: str, total: int, reps: int, warmup: int, idx: int,
                   first_rep: int, spec: RunSpec) -> None:
        """Runs first_rep..reps-1 of point ``idx``; result seq = idx * reps + rep."""
        def store(rec: RunRecord) -> None:
            self._store_result(job_id, total, idx * reps + rec.rep, rec)
            self.wait_for_room()  # the next run starts only with room for its result

        self.runner.run_point(spec, reps, warmup=warmup, first_rep=first_rep, on_record=store,
                              held=self._around(spec))

    def _run_adaptive(self, job_id: str, total: int, reps: int, warmup: int, idx: int,
                      first_rep: int, spec: RunSpec, rule: StopRule) -> None:
        """Runs point ``idx`` until ``rule`` stops it (at most ``reps`` runs). Seqs keep the
        fixed layout idx * reps + rep, with a gap after an early stop; the point's last record
        carries extra["point"] (index, runs, done, stop, ci_rel), which the daemon counts as
        the point closed.

        The point's values are kept in ``state_dir`` (written before each result is stored,
        so they hold at least every stored run): after a restart the decision is made again
        from the runs before ``first_rep``, and a point that had closed is not run further.

        Its interval is of the runs of the program the last run measured (``extra["program"]``):
        a program changed mid-point (a drift, agent/runner.py) starts its count again, as the
        daemon fits it from those runs alone. ``max_reps`` and the budget count every run of
        the point: they bound its cost."""
        state = self._load_point_state(job_id, idx, first_rep)

        def decide(upto: int) -> tuple[str | None, float | None]:
            runs = [state[r] for r in sorted(state) if r < upto]
            program = runs[-1][2] if runs else ""
            values = [v for v, _, p in runs if v is not None and p == program]
            return stop_reason(rule, values, upto, sum(secs for _, secs, _ in runs))

        if first_rep and decide(first_rep)[0] is not None:
            return  # it closed before a restart; its closing result is stored

        def store(rec: RunRecord) -> None:
            state[rec.rep] = (rec.time_s if rec.ok and rec.time_s else None, board_seconds(rec),
                              str(rec.extra.get("program", "")))
            self._save_point_state(job_id, idx, state)
            reason, rel = decide(rec.rep + 1)
            if reason is not None:
                rec.extra["point"] = {"index": idx, "runs": rec.rep + 1, "done": True,
                                      "stop": reason, "ci_rel": rel}
            self._store_result(job_id, total, idx * reps + rec.rep, rec)
            if reason is not None:
                log.info("job %s point %d: %d runs, stopped by %s (interval +-%s)", job_id,
                         idx, rec.rep + 1, reason, "-" if rel is None else f"{rel:.2%}")
                raise _PointDone
            self.wait_for_room()

        try:
            self.runner.run_point(spec, reps, warmup=warmup, first_rep=first_rep,
                                  on_record=store, held=self._around(spec))
        except _PointDone:
            pass

    def _load_point_state(self, job_id: str, idx: int, first_rep: int
                          ) -> dict[int, tuple[float | None, float, str]]:
        """rep -> (time_s or None for a failed run, seconds spent, program digest) of the
        point's runs before ``first_rep`` kept by an earlier life of the agent; empty for
        another point. A file of an agent before the digest was kept has none: ""."""
        runs: dict[int, tuple[float | None, float, str]] = {}
        if not self.state_dir or not first_rep:
            return runs
        try:
            with open(os.path.join(self.state_dir, POINT_STATE)) as fh:
                saved = json.load(fh)
            if saved.get("job_id") == job_id and saved.get("index") == idx:
                for rep, (value, secs, *program) in saved["runs"].items():
                    if int(rep) < first_rep:
                        runs[int(rep)] = (value, float(secs), str(program[0]) if program else "")
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            # the point's statistics start again from the runs after the restart
            log.warning("cannot read %s: %s", POINT_STATE, exc)
        return runs

    def _save_point_state(self, job_id: str, idx: int,
                          runs: dict[int, tuple[float | None, float, str]]) -> None:
        if not self.state_dir:
            return
        path = os.path.join(self.state_dir, POINT_STATE)
        try:
            _write_json(path, {"job_id": job_id, "index": idx,
                              "runs": {str(r): list(v) for r, v in runs.items()}})
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)

    def _load_timeouts(self, job_id: str) -> list[int]:
        """The points in a row with a run timed out that an earlier life of the agent kept
        for ``job_id``; empty for another job or none."""
        if not self.state_dir:
            return []
        path = os.path.join(self.state_dir, TIMEOUTS_STATE)
        try:
            with open(path) as fh:
                saved = json.load(fh)
            if saved.get("job_id") == job_id:
                return [int(i) for i in saved["points"]]
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            # the count starts again: at most stop_after_timeouts more points time out
            log.warning("cannot read %s: %s", path, exc)
        return []

    def _keep_timeouts(self, job_id: str, timed_out: list[int]) -> None:
        """Keep ``timed_out`` for a restart; an empty list removes the file."""
        if not self.state_dir:
            return
        path = os.path.join(self.state_dir, TIMEOUTS_STATE)
        try:
            if not timed_out:
                os.unlink(path)
                return
            _write_json(path, {"job_id": job_id, "points": timed_out})
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)

    def _drop_point_state(self) -> None:
        if self.state_dir:
            try:
                os.unlink(os.path.join(self.state_dir, POINT_STATE))
            except OSError:
                pass

    def apply_config(self, msg: dict[str, Any]) -> None:
        body = msg["body"]
        spec = RunSpec.of_config(body)
        at_rest, self._knobs_moved = not self._knobs_moved, True
        replaced = self._let_go(body)
        ok = aborted = False
        try:
            if kind_of(body.get("target")) != "command":
                ok = self._apply_to_target(body, spec, at_rest)
            else:
                ok = self._apply_to_command(body, spec, at_rest)
        except Aborted:
            aborted = True  # the agent stops: it undoes every change, and resumes this config
            raise
        finally:
            if not aborted:
                self._targets_after(body, ok, replaced)

    def _let_go(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Before a configuration that is to stand (``keep`` not false) is applied: undo the
        target changes of the one in force on its target (the other targets' stand on).
        Returns that configuration where it changed any.

        Before, not after: the new target may be the same process or unit, and its change
        must record the original (undone after, the replaced configuration's undo would put
        back that original over the new cpu set)."""
        if not body.get("keep", True) or self.targets is None:
            return None
        key = target_key(body.get("target"))
        old = next((c for c in self.standing_configs if key_of(c) == key), None)
        if old is None or old.get("config_id") not in self.targets.owners():
            return None
        for problem in self.targets.release(old.get("config_id")):
            log.warning("configuration %s replaces %s in force on %s: %s", body["config_id"],
                        old.get("config_id"), key, problem)
        return old

    def _targets_after(self, body: dict[str, Any], ok: bool,
                       replaced: dict[str, Any] | None) -> None:
        """A configuration that does not stand (failed, or ``keep: false``) leaves no target
        change behind, as its clocks go back at rest; where one that was to stand failed,
        the target of the configuration still in force there is confined again."""
        if self.targets is None or (ok and body.get("keep", True)):
            return
        for problem in self.targets.release(body["config_id"]):
            log.warning("undoing configuration %s: %s", body["config_id"], problem)
        if replaced is not None and replaced in self.standing_configs:
            standing.confine_again(self._standing_file, replaced, self.targets)
        if kind_of(body.get("target")) == "unit":
            self._pin_again(body["target"]["unit"])

    def _pin_again(self, unit: str, only: str | None = None) -> None:
        """The cpu set of ``unit`` was just set (confined, or confined again) or put back:
        the processes of the unit that a configuration in force confines get their own cpus
        again (a kernel may reset their affinity to the cgroup's when its cpu set changes),
        where the unit's configuration in force, if any, holds them. ``only``: the process of
        that configuration (it moved into the unit)."""
        key = target_key({"kind": "unit", "unit": unit})
        mine = next((c for c in self.standing_configs if key_of(c) == key), None)
        for c in self._of_kind("pid"):
            if only is not None and str(c["config_id"]) != only:
                continue
            if mine is not None and not set(c["cpus"]) <= set(mine["cpus"]):
                continue
            try:
                if self.targets.unit_holding(c["target"]["pid"], [unit]) is None:
                    continue
                self.targets.apply(c["target"], list(c["cpus"]), owner=str(c["config_id"]))
            except (TargetError, OSError) as exc:
                log.warning("applied configuration %s: process %s of unit %s cannot be given "
                            "its cpus again (%s)", standing.describe(c), c["target"]["pid"],
                            unit_name(unit), exc)

    def _apply_to_command(self, body: dict[str, Any], spec: RunSpec, at_rest: bool) -> bool:
        """Run the config's workload in its configuration (its verification)."""
        cid = body["config_id"]
        self.wait_for_room()
        # one without a clock that is to stand is measured at the clocks the board keeps with
        # it: those the other configurations in force hold (put back to the governor, a
        # process's or a unit's clock on a shared policy would be undone while it runs). One
        # that does not stand (the daemon's verification after a sweep) is predicted from the
        # sweep's points, each run with its own policies left to the governor: it is measured
        # so too, else a clock applied earlier (600 MHz held) made it "off" by the clocks'
        # ratio and drift re-characterised a workload that had not changed
        held = None
        if spec.freq_khz is None:
            held = self._held(body) if body.get("keep", True) else self._around(spec)
        recs = self.runner.run_point(spec, body["reps"], warmup=CONFIG_WARMUP, held=held)
        times = [r.time_s for r in recs if r.ok and r.time_s is not None]
        out: dict[str, Any] = {"config_id": cid, "records": [r.to_dict() for r in recs]}
        if times:
            out.update(ok=True, time_s=point_stats(times).median, error=None)
            self._remember(body, out["time_s"])
            self._stand(body, spec, at_rest)
        else:
            errs = "; ".join(sorted({r.error or "?" for r in recs}))
            out.update(ok=False, time_s=None, error=f"every verification run failed: {errs}")
        self._reply_applied(cid, out)
        log.info("config %s applied: ok=%s time_s=%s", cid, out["ok"], out["time_s"])
        return out["ok"]

    def _apply_to_target(self, body: dict[str, Any], spec: RunSpec, at_rest: bool) -> bool:
        """Confine a running pid or unit to the config's cpus, set the frequencies, and
        measure it over the verification window (it has no run time to verify)."""
        assert self.targets is not None  # validate_config refused it otherwise
        cid, target = body["config_id"], body["target"]
        out: dict[str, Any] = {"config_id": cid, "records": [], "time_s": None}
        try:
            self.targets.check(target)  # it may have gone since it was accepted
            bound = self._unit_bounds(target["pid"]) if kind_of(target) == "pid" else None
            if bound is not None and not set(spec.cpus) <= set(bound[1]["cpus"]):
                theirs = format_cpu_list(bound[1]["cpus"])
                raise TargetError(
                    f"process {target['pid']} runs in unit {bound[0]}, which configuration "
                    f"{bound[1]['config_id']} confines to cpus {theirs}: a process stays within "
                    f"its unit's cpu set (the kernel's cgroup cpuset); choose cpus among "
                    f"{theirs}, or apply to the unit")
            if spec.freq_khz is None:
                # it sets no clock: measured at the clocks the board will hold with it, those
                # of the other configurations in force (apply_knobs would restore them all)
                self.runner.rest(self._held(body))
                knob_fields: dict[str, Any] = {}
            else:
                knob_fields = self.runner.apply_knobs(spec)
            done = self.targets.apply(target, spec.cpus, owner=cid)
            if bound is not None:  # its own cpus hold for it (shared/standing.py)
                done = {**done, "in_unit": bound[0]}
        except Exception as exc:  # TargetError, and knob errors of many types
            out.update(ok=False, error=f"cannot apply to the target: {exc}")
        else:
            rec = RunRecord(platform=self.runner.platform_id, workload=spec.workload,
                            input=spec.size, cores=len(spec.cpus), cpus=list(spec.cpus),
                            threads=spec.threads, rep=0, ok=False)
            energy = [m for m in self.runner.meters if getattr(m, "name", "") == "energy"]
            for m in energy:
                m.start(spec)
            window = float(target.get("window_s", DEFAULT_WINDOW_S))
            measured = measure_window(self.targets, target, window,
                                      lambda: self._policy_freqs(spec.cpus), self.runner.wait)
            for m in energy:
                m.stop(rec, {})
            measured.update(target=done, freq_set_mhz=knob_fields.get("freq_mhz"),
                            energy_j=rec.energy_j, energy_source=rec.energy_source)
            if rec.energy_j is None:
                measured["energy_unavailable"] = rec.invalid.get("energy_j") or "no meter"
            out.update(ok=True, error=None, measured=measured)
            self._remember(body, None, measured)
            self._stand(body, spec, at_rest)
        self._reply_applied(cid, out)
        if out["ok"]:
            log.info("config %s %s", cid, measured_text(out["measured"]))
        else:
            log.warning("config %s not applied to %s: %s", cid, target_name(target), out["error"])
        return out["ok"]

    def _reply_applied(self, cid: str, out: dict[str, Any]) -> None:
        """The ``applied`` reply to configuration ``cid``, kept with it in the outbox (a
        restart does not apply it again) and sent."""
        reply = P.make("applied", self.agent_id, out)
        self.durably(lambda: self.outbox.finish_config(cid, reply))
        self.notify()

    def _held(self, body: dict[str, Any]) -> list[RunSpec]:
        """The configurations in force whose clocks stay while ``body``, which sets none, is
        verified: all but the one of its own target that it replaces (all, where it is not
        to stay: keep false)."""
        key = target_key(body.get("target"))
        return [RunSpec.of_config(c) for c in self.standing_configs
                if key_of(c) != key or not body.get("keep", True)]

    def _around(self, spec: RunSpec) -> list[RunSpec]:
        """The clocks configurations in force hold on the policies a job's point does not
        use: a point without a clock leaves its own policies to the governor and those
        (its knobs' ``held``), not every policy back to the board's original."""
        mine = set(policies_of(self.platform, spec.cpus))
        out = []
        for c in self.standing_configs:
            cpus = [x for x in c.get("cpus") or []
                    if not mine & set(policies_of(self.platform, [x]))]
            if c.get("freq_khz") is not None and cpus:
                out.append(dataclasses.replace(RunSpec.of_config(c), cpus=cpus))
        return out

    def _policy_freqs(self, cpus: list[int]) -> dict[str, float]:
        """Current MHz of each cpufreq policy holding one of ``cpus`` (empty without a knob)."""
        for knob in self.runner.knobs:
            cf = getattr(knob, "cf", None)
            if cf is not None:
                out = {}
                for pol in cf.policies_of_cpus(cpus):
                    cur = cf.read_cur(pol)
                    if cur is not None:
                        out[pol] = cur / 1000.0
                return out
        return {}

    def refuse_config(self, body: dict[str, Any], reason: str) -> None:
        """Report a config as not applied (``applied`` with ok false and the reason)."""
        reply = P.make("applied", self.agent_id, {"config_id": body["config_id"], "ok": False,
                                                   "error": reason, "records": [],
                                                   "time_s": None})
        if self.outbox.config_done(body["config_id"]) is None:
            self.deliver(reply)
        else:
            self.outbox.finish_config(body["config_id"], reply)
            self.notify()

    def _remember(self, body: dict[str, Any], time_s: float | None,
                  measured: dict[str, Any] | None = None) -> None:
        """Keep the last verified configuration where users and scripts can read it."""
        if not self.state_dir:
            return
        path = os.path.join(self.state_dir, "applied.json")
        extra = {"measured": measured} if measured else {}
        try:
            _write_json(path, {**body, "verified_time_s": time_s, **extra}, indent=1)
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)


class Worker(threading.Thread):
    """Executes accepted jobs and configs one at a time, in arrival order."""

    def __init__(self, executor: Executor):
        super().__init__(name="opptune-worker", daemon=True)
        self.executor = executor
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._queued_jobs: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = False
        # set while nothing is queued nor under way, the knobs at rest
        self.idle = threading.Event()
        self.idle.set()

    # called from the link thread
    def submit(self, msg: dict[str, Any]) -> None:
        ex = self.executor
        kind, body = msg["type"], msg["body"]
        if kind == "job":
            try:
                ex.validate_job(body)
            except Refused as exc:
                ex.refusals.refused("job", "bad_job", f"{str(body.get('job_id'))[:80]}: {exc}")
                ex.send(P.error_reply(ex.agent_id, "bad_job", str(exc), msg["id"]))
                return
            job_id = body["job_id"]
            try:
                fresh = ex.outbox.save_job(job_id, body, ref=msg["id"])
            except OutboxFull as exc:
                # the daemon records the reason with the job; nothing of it ran
                log.warning("refused job %s: %s", job_id, exc)
                ex.send(P.error_reply(ex.agent_id, "outbox_full", f"cannot keep the job: {exc}",
                                      msg["id"]))
                return
            if not fresh:
                job = ex.outbox.job(job_id)
                with self._lock:
                    queued = job_id in self._queued_jobs
                if (job and job["done"]) or queued:
                    log.info("job %s already %s; ignoring the repeat", job_id,
                             "done" if job and job["done"] else "queued")
                    return
            self.submit_job(job_id)
        elif kind == "cancel":
            job_id = body["job_id"]
            log.info("daemon cancels job %s: %s", job_id[:80], ex.cancel(job_id))
        elif kind == "config":
            try:
                ex.validate_config(body)
            except Refused as exc:
                ex.refusals.refused("config", "refused",
                                    f"{str(body.get('config_id'))[:80]}: {exc}")
                ex.refuse_config(body, str(exc))
                return
            try:
                fresh = ex.outbox.save_config(body["config_id"], msg)
            except OutboxFull as exc:
                log.warning("refused config %s: %s", body["config_id"], exc)
                ex.send(P.error_reply(ex.agent_id, "outbox_full",
                                      f"cannot keep the configuration: {exc}", msg["id"]))
                return
            if not fresh:
                log.info("config %s already received; ignoring the repeat", body["config_id"])
                return
            self._put(("config", msg))

    def watch(self) -> None:
        """(link thread, at each heartbeat) A confined process that exited, or a confined unit
        that stopped or restarted out of its cpu set: its configuration dropped, or the unit
        confined again, by the worker, at once when idle (:meth:`Executor.drop_exited`)."""
        if self.executor.notice_exited():
            self._put(("exited", None))

    def submit_job(self, job_id: str) -> None:
        with self._lock:
            if job_id in self._queued_jobs:
                return
            self._queued_jobs.add(job_id)
        self._put(("job", job_id))

    def resume(self) -> int:
        """Queue every unfinished job, then every config not yet applied, from the outbox
        (after a restart); a config this board can no longer run is reported instead."""
        ex = self.executor
        jobs = ex.outbox.open_jobs()
        for job in jobs:
            self.submit_job(job["job_id"])
        configs = 0
        for msg in ex.outbox.open_configs():
            body = msg["body"]
            try:
                ex.validate_config(body)
            except Refused as exc:
                log.warning("saved config %s can no longer be applied: %s",
                            body["config_id"], exc)
                ex.refuse_config(body, f"after the agent restarted: {exc}")
                continue
            self._put(("config", msg))
            configs += 1
        return len(jobs) + configs

    def _put(self, item: tuple[str, Any]) -> None:
        with self._lock:  # ordered with the worker's idle set (run)
            self.idle.clear()
            self._queue.put(item)

    def stop(self, abort: bool = True) -> None:
        """abort=True: kill the current run and drop queued work (jobs resume on restart);
        abort=False: finish everything queued so far, then end."""
        if abort:
            self._stopping = True
            self.executor.runner.abort()
        self._queue.put(None)

    def run(self) -> None:
        while not self._stopping:
            if self._queue.empty():
                # here, not per point: restoring between a job's points would slow sweeps
                self.executor.rest()
                with self._lock:
                    # work put meanwhile (a heartbeat's watch, a job) is done first: idle set
                    # over it would say the worker has nothing to do while it waits
                    if self._queue.empty():
                        self.idle.set()
            item = self._queue.get()
            if item is None or self._stopping:
                break
            kind, arg = item
            try:
                if kind == "job":
                    self.executor.run_job(arg)
                elif kind == "exited":
                    self.executor.drop_exited()
                else:
                    self.executor.apply_config(arg)
            except Aborted:
                log.info("%s interrupted by shutdown; it resumes on restart", kind)
                break
            except Exception as exc:
                log.exception("%s failed", kind)
                if kind == "job":  # the daemon marks the job failed with this reason
                    self.executor.abandon_job(arg)
                    self.executor.send(P.error_reply(self.executor.agent_id, "job_failed",
                                                     f"the agent could not run the job: "
                                                     f"{type(exc).__name__}: {exc}", arg))
                elif kind == "config":  # say so, rather than leave it pending for a restart
                    self.executor.refuse_config(arg["body"], f"applying failed: {exc}")
            finally:
                if kind == "job":
                    with self._lock:
                        self._queued_jobs.discard(arg)
        self.idle.set()
