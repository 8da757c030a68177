"""One run: knobs -> workload child on its cpu set -> meters -> RunRecord.

The runner orchestrates; its parts: what a run is and the knob and meter plug points
(runspec.py; the adapters live beside what they adapt, in knobs/ and meters/), the child
process (child.py), what the workload printed (run_output.py).

The runner never raises out of a run: every failure becomes ``ok=False`` with the error text.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import time
from typing import Any, Callable

from ..shared.records import NOT_RUN, RunRecord
from . import leftover
from .child import AbortSignal, RunAs, now_ns, observed_affinity, spawn, user_env, wait
from .meters.interference import mark_reason
from .meters.rusage import RusageMeter
from .run_output import MAX_ERR_TEXT, last_json, merge_json, read_captured
from .runspec import Knob, Meter, RunSpec
from .workdir import WorkDirs
from .workload_check import start_failure
from .workloads import WorkloadError, Workloads, exe_dir

__all__ = ["Aborted", "Cancelled", "Knob", "Meter", "RunSpec", "Runner"]

log = logging.getLogger("opptune.agent.runner")


class Aborted(Exception):
    """The run was stopped by :meth:`Runner.abort` (agent shutting down)."""


class Cancelled(Exception):
    """The run was stopped by :meth:`Runner.cancel`: the daemon cancelled its job (the agent
    goes on with its next work)."""


class Runner:
    """Runs points of a sweep: knobs once per point, then each run as a pinned child measured
    by the meters (rusage always first), one RunRecord per run."""

    def __init__(self, workloads: Workloads, platform_id: str, *, timeout_s: float = 600.0,
                 virtual: bool = False, knobs: list[Knob] | None = None,
                 meters: list[Meter] | None = None,
                 invalid_defaults: dict[str, str] | None = None,
                 run_as: RunAs | None = None, state_dir: str | None = None):
        """``run_as``: the user the workload children run as (None: the agent's own);
        ``state_dir``: where the run under way is kept for the next agent (leftover.py) and
        where each workload without a ``cwd`` gets a directory to run in (workdir.py; None:
        they run in the agent's working directory)."""
        self.workloads = workloads
        self.platform_id = platform_id
        self.timeout_s = timeout_s
        self.virtual = virtual
        self.knobs = list(knobs or [])
        self.meters: list[Meter] = [RusageMeter(), *(meters or [])]
        # fields no meter can fill on this platform -> reason (e.g. energy_j: "no sensor")
        self.invalid_defaults = dict(invalid_defaults or {})
        self._abort = AbortSignal()
        self._cancel = AbortSignal()  # the job under way was cancelled by the daemon
        self.run_as = run_as
        self._under_way = leftover.UnderWay(state_dir)
        self._workdirs = WorkDirs(state_dir, run_as) if state_dir else None
        # called (with the workload's name) before a run whose program changed since the
        # last run or the hello: the agent tells the daemon before the run's result goes
        self.on_program_change: Callable[[str], None] | None = None

    # -- control ------------------------------------------------------------------------------
    def abort(self) -> None:
        """Kill the current child (if any) and make the current/next run end as Aborted."""
        self._abort.set()

    def cancel(self) -> None:
        """Kill the current child (if any, its whole process group, as a timeout does) and
        make the current/next run end as Cancelled, until :meth:`uncancel`."""
        self._cancel.set()

    def uncancel(self) -> None:
        """The cancelled job has ended: the next runs go ahead."""
        self._cancel.clear()

    def restore(self) -> None:
        """Restore every knob; errors are logged, never raised."""
        for knob in reversed(self.knobs):
            try:
                knob.restore()
            except Exception as exc:
                log.error("restoring knob %s failed: %s", getattr(knob, "name", knob), exc)

    def rest(self, standing: RunSpec | list[RunSpec] | None = None) -> None:
        """No work left: every knob back to the board's original, or, under ``standing`` (the
        configurations a user applied, still in force, oldest first), to them: a knob with
        ``rest(specs)`` sets them directly, another is restored and applied again to each
        that sets a clock, the newest last (shared/standing.py: its clock holds). Errors
        logged, never raised. Between the points of a job nothing is restored: a sweep keeps
        its pace."""
        specs = [standing] if isinstance(standing, RunSpec) else list(standing or [])
        if not specs:
            self.restore()
            return
        for knob in self.knobs:
            try:
                rest = getattr(knob, "rest", None)
                if rest is not None:
                    rest(specs)
                else:
                    knob.restore()
                    for spec in specs:
                        if spec.freq_khz is not None:
                            knob.apply(spec)
            except Exception as exc:
                log.error("applying the standing configuration again failed (knob %s): %s",
                          getattr(knob, "name", knob), exc)

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds`` (a verification window); raises Aborted when stopped meanwhile."""
        import select
        if self._abort.is_set:
            raise Aborted("agent stopping")
        select.select([self._abort.fd], [], [], seconds)
        if self._abort.is_set:
            raise Aborted("agent stopping")

    def close(self) -> None:
        self.restore()
        self._abort.close()
        self._cancel.close()

    # -- runs ---------------------------------------------------------------------------------
    def apply_knobs(self, spec: RunSpec, held: list[RunSpec] | None = None) -> dict[str, Any]:
        """Apply every knob for a point; returns the record fields they report. Raises the
        first knob error (the point cannot run as asked). ``held``: for a point without a
        clock, the configurations in force whose clocks stay set (agent/knobs/cpufreq.py)
        rather than every policy put back to its original."""
        fields: dict[str, Any] = {}
        for knob in self.knobs:
            fields.update((knob.apply(spec, held) if held and spec.freq_khz is None
                           else knob.apply(spec)) or {})
        if spec.freq_khz is not None and "freq_mhz" not in fields:
            raise RuntimeError(f"frequency {spec.freq_khz} kHz requested but no cpufreq knob "
                               "is active on this agent")
        return fields

    def run_point(self, spec: RunSpec, reps: int, warmup: int = 0, first_rep: int = 0,
                  on_record: Callable[[RunRecord], None] | None = None,
                  held: list[RunSpec] | None = None) -> list[RunRecord]:
        """Apply knobs, run ``warmup`` unrecorded runs, then reps ``first_rep..reps-1``.

        A warmup that timed out is recorded, in the place of repetition ``first_rep`` (never
        run), with ``extra["warmup"]`` its index: the store keeps what happened at the point.
        Raises :class:`Aborted` when stopped, :class:`Cancelled` when its job was cancelled;
        everything else ends up in the records. ``held``: as :meth:`apply_knobs` says."""
        try:
            knob_fields = self.apply_knobs(spec, held)
        except Exception as exc:
            log.error("point %s refused by knobs: %s", spec, exc)
            recs = [self.failed_record(spec, rep, f"knob: {exc}")
                    for rep in range(first_rep, reps)]
            for rec in recs:
                if on_record:
                    on_record(rec)
            return recs
        # a run of the point that timed out: its other runs would time out too (a hanging
        # program took run_timeout_s, 600 s, for each warmup and repetition of every point)
        timed_out = None
        hung: RunRecord | None = None  # the warmup that timed out, stored as a failed run
        for i in range(warmup):
            rec = self.run_once(spec, rep=first_rep, knob_fields=knob_fields)
            if not rec.ok:
                log.warning("warmup %d of %s failed: %s", i, spec.workload, rec.error)
                if rec.error == self.timeout_text:
                    timed_out, hung = f"warmup {i}", rec
                    rec.extra["warmup"] = i
                    break
        out = []
        for rep in range(first_rep, reps):
            if hung is not None:
                rec, hung = hung, None
            elif timed_out is None:
                rec = self.run_once(spec, rep=rep, knob_fields=knob_fields)
                if rec.error == self.timeout_text:
                    timed_out = f"repetition {rep}"
            else:
                rec = self.failed_record(spec, rep, f"{NOT_RUN}{timed_out} of this point "
                                                    f"{self.timeout_text}")
            out.append(rec)
            if on_record:
                on_record(rec)
        return out

    @property
    def timeout_text(self) -> str:
        """The error of a run that timed out."""
        return f"timed out after {self.timeout_s:g} s"

    def _base(self, spec: RunSpec, rep: int) -> RunRecord:
        rec = RunRecord(platform=self.platform_id, workload=spec.workload, input=spec.size,
                        cores=len(spec.cpus), cpus=list(spec.cpus), threads=spec.threads,
                        rep=rep, variant=spec.variant, virtual=self.virtual,
                        freq_mhz=(spec.freq_khz / 1000.0 if spec.freq_khz else None))
        # the program the run measures (its hello's digest): a run of the old program still in
        # the outbox when a restarted agent's hello says it changed is not the new one's
        try:
            program = self.workloads.get(spec.workload).program
        except WorkloadError:
            program = ""
        if program:
            rec.extra["program"] = program
        return rec

    def _check_program(self, workload: str) -> None:
        """The workload's program as its files are now (a binary rebuilt, a script edited
        while the agent runs): the run's record carries the new digest, and the daemon hears
        of it first (``on_program_change``)."""
        try:
            changed = self.workloads.refresh(workload)
        except Exception:  # the run goes ahead under the digest known before
            log.exception("checking the program of %s failed", workload)
            return
        if changed and self.on_program_change is not None:
            self.on_program_change(workload)

    def failed_record(self, spec: RunSpec, rep: int, error: str) -> RunRecord:
        """A record of run ``rep`` of ``spec`` that failed with ``error`` without running."""
        rec = self._base(spec, rep)
        rec.ok = False
        rec.error = error[:MAX_ERR_TEXT]
        rec.started_at = time.time()
        return rec

    def run_once(self, spec: RunSpec, rep: int = 0,
                 knob_fields: dict[str, Any] | None = None) -> RunRecord:
        """One child process on ``spec.cpus``. Raises only :class:`Aborted` and
        :class:`Cancelled`."""
        if self._abort.is_set:
            raise Aborted("agent stopping")
        if self._cancel.is_set:
            raise Cancelled("job cancelled")
        self._check_program(spec.workload)
        rec = self._base(spec, rep)
        for key, value in (knob_fields or {}).items():
            setattr(rec, key, copy.deepcopy(value))  # records must not share mutable fields
        off_board = self.workloads.off_board(spec.workload)
        if off_board and rec.freq_observed_mhz is not None:
            # the clock read from the virtual board's tree, not the one the command ran at
            rec.freq_observed_mhz = None
            rec.invalid["freq_observed_mhz"] = f"{off_board}; its clock is not observed"
        try:
            argv, env = self.workloads.argv_for(spec.workload, spec.size, spec.threads,
                                                spec.cpus, user_env(self.run_as))
        except WorkloadError as exc:
            rec.ok, rec.error, rec.started_at = False, str(exc), time.time()
            return rec
        try:
            self._execute(spec, rec, argv, env)
        except (Aborted, Cancelled):
            raise
        except Exception as exc:  # the runner's promise: a record, never an exception
            log.exception("run of %s failed", spec.workload)
            rec.ok, rec.error = False, f"{type(exc).__name__}: {exc}"[:MAX_ERR_TEXT]
            rec.time_s = None
        try:  # what the run wrote among its files is its output, not a new program
            self.workloads.ran(spec.workload)
        except Exception:
            log.exception("checking the files %s wrote failed", spec.workload)
        if rec.ok and "mpet" not in rec.extra and \
                self.workloads.get(spec.workload).kind == "command":
            # an external command has no instrumented runtime: MPET's R..j are unknown, not 0
            rec.invalid["mpet"] = ("external command: no runtime accounting, MPET parameters "
                                   "R l w c d s j invalid")
        for name, reason in self.invalid_defaults.items():
            if getattr(rec, name, None) is None and name not in rec.invalid:
                rec.invalid[name] = reason
        return rec

    def _execute(self, spec: RunSpec, rec: RunRecord, argv: list[str],
                 env: dict[str, str]) -> None:
        """Start the meters, run the child, stop the meters, judge the outcome."""
        w = self.workloads.get(spec.workload)
        expects_json = w.expects_json
        cwd = None
        if self._workdirs is not None:
            try:
                cwd = self._workdirs.of(spec.workload, w.command.cwd if w.command else "")
            except OSError as exc:
                rec.ok, rec.started_at = False, time.time()
                why = f"{exc.strerror}: {exc.filename}" if exc.filename else \
                    exc.strerror or str(exc)
                rec.error = (f"cannot make the working directory of {spec.workload}: "
                             f"{why}")[:MAX_ERR_TEXT]
                return
        if cwd is not None and os.sep in argv[0] and not os.path.isabs(argv[0]):
            # a program named by a relative path ("./app"): in the entry's cwd, else where the
            # agent runs, as before (workloads.exe_dir), not in the directory made for it
            base = exe_dir(w.command) if w.command is not None else None
            argv = [os.path.abspath(os.path.join(base or "", argv[0])), *argv[1:]]
        token = leftover.new_token()
        env = {**env, leftover.ENV: token}
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            self._under_way.begin(token)
            self._start_meters(spec)
            rec.started_at = time.time()
            t0 = now_ns()
            # on a virtual board the cpus are the board's, not this machine's (cpu 4 of an
            # ODROID-XU4 may not exist here): the virtual workload gets them as an argument
            # and its process is not pinned
            try:
                proc = spawn(argv, env, None if self.virtual else spec.cpus, out, err,
                             self.run_as, cwd)
            except OSError as exc:
                self._under_way.end()
                rec.ok, rec.error = False, f"cannot start {argv[0]}: " \
                    f"{start_failure(argv[0], env, exc, cwd)}"
                return
            affinity = None if self.virtual else observed_affinity(proc.pid)
            status, ru, why = wait(proc, self.timeout_s, self._abort, self._cancel)
            # wall_s runs from the child's last step before exec to its reaping: the agent's
            # fork and its Python in the child (a few ms, tens on a loaded machine:
            # benchmarks/spawn_overhead.py) are its own cost, not the program's. The meters
            # started before t0 and stop after t1, so their window still covers the
            # program. Without the child's time (none written, or not within the run) the
            # interval starts at t0, as agents before start_cost_s measured it.
            t1 = now_ns()
            exec_ns = proc.exec_ns
            if exec_ns is not None and t0 <= exec_ns <= t1:
                rec.extra["start_cost_s"] = (exec_ns - t0) / 1e9
                t0 = exec_ns
            wall = (t1 - t0) / 1e9
            self._under_way.end()
            if why == "aborted":
                raise Aborted("agent stopping")
            if why == "cancelled":
                self._stop_meters(rec, {"pid": proc.pid, "rusage": ru, "wall_s": wall,
                                        "json": None})  # meters left running would leak
                raise Cancelled("job cancelled")
            rec.wall_s = wall
            if affinity is not None and affinity != sorted(spec.cpus):
                rec.extra["affinity_observed"] = affinity
            stdout, stderr = read_captured(out, err)
            data, json_err = last_json(stdout)
            self._stop_meters(rec, {"pid": proc.pid, "rusage": ru, "wall_s": wall, "json": data})
            rec.marked = mark_reason(rec)  # after every meter: interference and throttling
        self._judge(rec, why, status, stderr, data, json_err, expects_json)

    def _start_meters(self, spec: RunSpec) -> None:
        for m in self.meters:
            try:
                m.start(spec)
            except Exception as exc:
                log.warning("meter %s failed to start: %s", getattr(m, "name", m), exc)

    def _stop_meters(self, rec: RunRecord, ctx: dict[str, Any]) -> None:
        for m in self.meters:
            try:
                m.stop(rec, ctx)
            except Exception as exc:
                log.warning("meter %s failed: %s", getattr(m, "name", m), exc)
                rec.invalid[getattr(m, "name", "meter")] = f"meter failed: {exc}"

    def _judge(self, rec: RunRecord, why: str, status: int, stderr: str,
               data: dict[str, Any] | None, json_err: str | None, expects_json: bool) -> None:
        """ok / error of a reaped run, and the workload's own numbers when it succeeded."""
        if why == "timeout":
            rec.ok, rec.error = False, self.timeout_text
            return
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            what = f"signal {-code}" if code < 0 else f"exit status {code}"
            rec.ok = False
            rec.error = f"workload failed with {what}" + (f": {stderr}" if stderr else "")
            return
        if data is None and (expects_json or json_err):
            rec.ok = False
            rec.error = "bad JSON output: " + (json_err or "no JSON line on stdout")
            return
        merge_json(rec, data)
        if rec.time_s is None:
            rec.time_s = rec.wall_s
