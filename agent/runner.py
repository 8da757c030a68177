"""One run: knobs -> workload child on its cpu set -> meters -> RunRecord.

Plug points, kept small on purpose:

* a **knob** has ``apply(spec) -> dict`` (record fields it set, e.g. ``freq_mhz`` and
  ``freq_observed_mhz``; raise to refuse the point) and ``restore()``; knobs are applied once per
  point, before its warmups, in list order.
* a **meter** has ``start(spec)`` (just before the child starts) and ``stop(record, ctx)`` (just
  after it was reaped; ``ctx`` holds ``pid``, ``rusage``, ``wall_s``, ``json``). A meter fills
  record fields or calls ``shared.records.mark_invalid``. A meter that raises marks its own
  fields invalid; the run still counts.

The runner never raises out of a run: every failure becomes ``ok=False`` with the error text.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ..shared.records import RunRecord
from .meters.rusage import RusageMeter
from .workloads import WorkloadError, Workloads

log = logging.getLogger("opptune.agent.runner")

MAX_STDOUT = 1 << 20  # the JSON line of a kernel is small; never slurp a runaway log
MAX_ERR_TEXT = 2000


class Knob(Protocol):
    name: str

    def apply(self, spec: "RunSpec") -> dict[str, Any]: ...

    def restore(self) -> None: ...


class Meter(Protocol):
    name: str

    def start(self, spec: "RunSpec") -> None: ...

    def stop(self, record: RunRecord, ctx: dict[str, Any]) -> None: ...


@dataclass
class RunSpec:
    """One point of a sweep (or a pushed config)."""
    workload: str
    size: str
    cpus: list[int]
    threads: int
    freq_khz: int | None = None
    variant: str = ""


class Aborted(Exception):
    """The run was stopped by :meth:`Runner.abort` (agent shutting down)."""


class Runner:
    def __init__(self, workloads: Workloads, platform_id: str, *, timeout_s: float = 600.0,
                 virtual: bool = False, knobs: list[Knob] | None = None,
                 meters: list[Meter] | None = None,
                 invalid_defaults: dict[str, str] | None = None):
        self.workloads = workloads
        self.platform_id = platform_id
        self.timeout_s = timeout_s
        self.virtual = virtual
        self.knobs = list(knobs or [])
        self.meters: list[Meter] = [RusageMeter(), *(meters or [])]
        # fields no meter can fill on this platform -> reason (e.g. energy_j: "no sensor")
        self.invalid_defaults = dict(invalid_defaults or {})
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._abort_r, self._abort_w = os.pipe()
        self._aborted = False

    # -- control ------------------------------------------------------------------------------
    def abort(self) -> None:
        """Kill the current child (if any) and make the current/next run end as Aborted."""
        self._aborted = True
        try:
            os.write(self._abort_w, b"x")
        except OSError:
            pass

    def restore(self) -> None:
        """Restore every knob; errors are logged, never raised."""
        for knob in reversed(self.knobs):
            try:
                knob.restore()
            except Exception as exc:
                log.error("restoring knob %s failed: %s", getattr(knob, "name", knob), exc)

    def close(self) -> None:
        self.restore()
        for fd in (self._abort_r, self._abort_w):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- runs ---------------------------------------------------------------------------------
    def apply_knobs(self, spec: RunSpec) -> dict[str, Any]:
        """Apply every knob for a point; returns the record fields they report. Raises the
        first knob error (the point cannot run as asked)."""
        fields: dict[str, Any] = {}
        for knob in self.knobs:
            fields.update(knob.apply(spec) or {})
        if spec.freq_khz is not None and "freq_mhz" not in fields:
            raise RuntimeError(f"frequency {spec.freq_khz} kHz requested but no cpufreq knob "
                               "is active on this agent")
        return fields

    def run_point(self, spec: RunSpec, reps: int, warmup: int = 0, first_rep: int = 0,
                  on_record: Callable[[RunRecord], None] | None = None) -> list[RunRecord]:
        """Apply knobs, run ``warmup`` unrecorded runs, then reps ``first_rep..reps-1``.

        Raises :class:`Aborted` when stopped; everything else ends up in the records."""
        try:
            knob_fields = self.apply_knobs(spec)
        except Exception as exc:
            log.error("point %s refused by knobs: %s", spec, exc)
            recs = [self._failed(spec, rep, f"knob: {exc}") for rep in range(first_rep, reps)]
            for rec in recs:
                if on_record:
                    on_record(rec)
            return recs
        for i in range(warmup):
            rec = self.run_once(spec, rep=0, knob_fields=knob_fields)
            if not rec.ok:
                log.warning("warmup %d of %s failed: %s", i, spec.workload, rec.error)
        out = []
        for rep in range(first_rep, reps):
            rec = self.run_once(spec, rep=rep, knob_fields=knob_fields)
            out.append(rec)
            if on_record:
                on_record(rec)
        return out

    def _base(self, spec: RunSpec, rep: int) -> RunRecord:
        return RunRecord(platform=self.platform_id, workload=spec.workload, input=spec.size,
                         cores=len(spec.cpus), cpus=list(spec.cpus), threads=spec.threads,
                         rep=rep, variant=spec.variant, virtual=self.virtual,
                         freq_mhz=(spec.freq_khz / 1000.0 if spec.freq_khz else None))

    def _failed(self, spec: RunSpec, rep: int, error: str) -> RunRecord:
        rec = self._base(spec, rep)
        rec.ok = False
        rec.error = error[:MAX_ERR_TEXT]
        rec.started_at = time.time()
        return rec

    def run_once(self, spec: RunSpec, rep: int = 0,
                 knob_fields: dict[str, Any] | None = None) -> RunRecord:
        """One child process on ``spec.cpus``. Raises only :class:`Aborted`."""
        if self._aborted:
            raise Aborted("agent stopping")
        rec = self._base(spec, rep)
        for key, value in (knob_fields or {}).items():
            setattr(rec, key, copy.deepcopy(value))  # records must not share mutable fields
        try:
            argv, env = self.workloads.argv_for(spec.workload, spec.size, spec.threads,
                                                spec.cpus)
        except WorkloadError as exc:
            rec.ok, rec.error, rec.started_at = False, str(exc), time.time()
            return rec
        try:
            self._execute(spec, rec, argv, env)
        except Aborted:
            raise
        except Exception as exc:  # the runner's promise: a record, never an exception
            log.exception("run of %s failed", spec.workload)
            rec.ok, rec.error = False, f"{type(exc).__name__}: {exc}"[:MAX_ERR_TEXT]
            rec.time_s = None
        for name, reason in self.invalid_defaults.items():
            if getattr(rec, name, None) is None and name not in rec.invalid:
                rec.invalid[name] = reason
        return rec

    def _spawn(self, argv: list[str], env: dict[str, str], cpus: list[int], out, err):
        """Start the child already bound to ``cpus``.

        Why not preexec_fn: it is unsafe in a threaded process. A forked child inherits the
        affinity of the *calling thread*, so this worker thread narrows its own mask around the
        fork and widens it again; the rest of the agent is untouched.

        On a virtual board the cpus are the board's, not this machine's (cpu 4 of an
        ODROID-XU4 may not exist here): the virtual workload gets them as an argument and its
        process is not pinned."""
        if self.virtual:
            return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, close_fds=True, start_new_session=True)
        old = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
        try:
            return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, close_fds=True, start_new_session=True)
        finally:
            os.sched_setaffinity(0, old)

    def _execute(self, spec: RunSpec, rec: RunRecord, argv: list[str],
                 env: dict[str, str]) -> None:
        w = self.workloads.get(spec.workload)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            for m in self.meters:
                try:
                    m.start(spec)
                except Exception as exc:
                    log.warning("meter %s failed to start: %s", getattr(m, "name", m), exc)
            rec.started_at = time.time()
            t0 = time.perf_counter()
            try:
                proc = self._spawn(argv, env, spec.cpus, out, err)
            except OSError as exc:
                rec.ok, rec.error = False, f"cannot start {argv[0]}: {exc.strerror or exc}"
                return
            with self._lock:
                self._child = proc
            try:
                affinity = None if self.virtual else sorted(os.sched_getaffinity(proc.pid))
            except OSError:
                affinity = None  # already exited: it inherited the mask at fork anyway
            status, ru, why = self._wait(proc)
            wall = time.perf_counter() - t0
            with self._lock:
                self._child = None
            if why == "aborted":
                raise Aborted("agent stopping")
            rec.wall_s = wall
            if affinity is not None and affinity != sorted(spec.cpus):
                rec.extra["affinity_observed"] = affinity
            out.seek(0)
            stdout = out.read(MAX_STDOUT).decode("utf-8", "replace")
            err.seek(0, os.SEEK_END)
            err.seek(max(0, err.tell() - MAX_ERR_TEXT))
            stderr = err.read().decode("utf-8", "replace").strip()
            data, json_err = _last_json(stdout)
            ctx = {"pid": proc.pid, "rusage": ru, "wall_s": wall, "json": data}
            for m in self.meters:
                try:
                    m.stop(rec, ctx)
                except Exception as exc:
                    log.warning("meter %s failed: %s", getattr(m, "name", m), exc)
                    rec.invalid[getattr(m, "name", "meter")] = f"meter failed: {exc}"
            if why == "timeout":
                rec.ok, rec.error = False, f"timed out after {self.timeout_s:g} s"
                return
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                what = f"signal {-code}" if code < 0 else f"exit status {code}"
                rec.ok = False
                rec.error = f"workload failed with {what}" + (f": {stderr}" if stderr else "")
                return
            if data is None and (w.expects_json or json_err):
                rec.ok = False
                rec.error = "bad JSON output: " + (json_err or "no JSON line on stdout")
                return
            _merge_json(rec, data)
            if rec.time_s is None:
                rec.time_s = wall

    def _wait(self, proc: subprocess.Popen):
        """Wait for the child with the timeout, waking at once on abort. Returns
        (status, rusage, why) with why in {"exit", "timeout", "aborted"}."""
        deadline = time.monotonic() + self.timeout_s
        why = "exit"
        pidfd = None
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
                left = deadline - time.monotonic()
                if why == "exit" and left <= 0:
                    why = "timeout"
                    _kill_group(proc.pid)
                    continue
                if why == "exit" and self._aborted:
                    why = "aborted"
                    _kill_group(proc.pid)
                    continue
                fds = [self._abort_r] + ([pidfd] if pidfd is not None else [])
                # Without a pidfd fall back to a coarse tick; with one, sleep until exit/abort.
                tick = max(0.0, left) if pidfd is not None else min(max(0.0, left), 0.05)
                if why != "exit":
                    tick = 0.05
                r, _, _ = select.select(fds, [], [], tick)
                if self._abort_r in r and why == "exit":
                    if self._aborted:
                        continue
                    os.read(self._abort_r, 64)
        finally:
            if pidfd is not None:
                os.close(pidfd)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the child leads its own session: take its children too
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _last_json(stdout: str) -> tuple[dict[str, Any] | None, str | None]:
    """The last stdout line that is a JSON object; (None, reason) for a broken one."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line:
            continue
        if not line.startswith("{"):
            return None, None
        try:
            data = json.loads(line)
        except ValueError as exc:
            return None, f"{exc}: {line[:200]!r}"
        if not isinstance(data, dict):
            return None, "JSON line is not an object"
        return data, None
    return None, None


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v >= 0 \
            and v != float("inf"):
        return float(v)
    return None


def _merge_json(rec: RunRecord, data: dict[str, Any] | None) -> None:
    """Take the workload's own numbers: timed region, per-thread stats, energy if it has one."""
    if not data:
        return
    t = _num(data.get("time_s"))
    if t is not None:
        rec.time_s = t
    elif "time_s" in data:
        rec.invalid["time_s"] = f"workload reported unusable time_s {data['time_s']!r}"
    stats = data.get("thread_stats")
    if isinstance(stats, list):
        rec.thread_stats = [s for s in stats if isinstance(s, dict)]
    e = _num(data.get("energy_j"))
    if e is not None:
        rec.energy_j = e
        rec.energy_source = str(data.get("energy_source") or "workload")
        rec.invalid.pop("energy_j", None)
    for key in ("checked", "check_value"):
        if key in data:
            rec.extra[key] = data[key]
    if data.get("checked") is True and data.get("check_ok") is False:
        rec.ok, rec.error = False, "workload result check failed"


class CpuFreqKnob:
    """Adapter from the hw helper's :class:`knobs.cpufreq.CpuFreq` to the knob plug point.

    A point with ``freq_khz`` pins the policies of its cpus (verified); a point without one
    puts the original state back, so "no frequency" always means the board's own governor.
    Either way the frequency observed per policy goes into the record."""

    name = "cpufreq"

    def __init__(self, cpufreq: Any):
        self.cf = cpufreq

    def apply(self, spec: RunSpec) -> dict[str, Any]:
        if spec.freq_khz is None:
            self.cf.restore()
            fields: dict[str, Any] = {}
        else:
            res = self.cf.set_for_cpus(spec.cpus, int(spec.freq_khz))
            bad = [p for p, r in res.items() if r.get("verified") is False]
            fields = {"freq_mhz": spec.freq_khz / 1000.0}
            if bad:
                fields["extra"] = {"freq_unverified": bad}
        observed = {}
        for pol in self.cf.policies_of_cpus(spec.cpus):
            cur = self.cf.read_cur(pol)
            if cur is not None:
                observed[pol] = cur / 1000.0
        fields["freq_observed_mhz"] = observed or None
        return fields

    def restore(self) -> None:
        problems = self.cf.restore()
        if problems:
            log.error("cpufreq restore problems: %s", "; ".join(problems))


class PerfMeter:
    """Adapter from :class:`meters.perf.PerfSession`: counters armed on the worker thread just
    before the fork, inherited by the child tree, read after the child was reaped."""

    name = "perf"

    def __init__(self, events: Any = None):
        from .meters.perf import DEFAULT_EVENTS, PerfSession
        self._make = lambda: PerfSession(events or DEFAULT_EVENTS)
        self._session = None

    def start(self, spec: RunSpec) -> None:
        self._session = self._make().start()

    def stop(self, record: RunRecord, ctx: dict[str, Any]) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        counters, invalid, scaling = session.stop()
        record.counters.update(counters)
        for k, reason in invalid.items():
            record.invalid[f"counter:{k}"] = reason
        if scaling:
            record.extra["counter_scaling"] = scaling


class EnergyRunMeter:
    """Adapter from :class:`meters.energy.EnergyMeter` (RAPL, hwmon, energy model)."""

    name = "energy"

    def __init__(self, sysfs_root: str = "/"):
        from .meters.energy import EnergyMeter
        self._discover = lambda: EnergyMeter.discover(sysfs_root)
        self._meter = None

    def start(self, spec: RunSpec) -> None:
        self._meter = self._discover().start()

    def stop(self, record: RunRecord, ctx: dict[str, Any]) -> None:
        meter, self._meter = self._meter, None
        if meter is None:
            return
        joules, source, reason = meter.stop()
        if joules is not None and record.energy_j is None:
            record.energy_j, record.energy_source = float(joules), source
            record.invalid.pop("energy_j", None)
        elif joules is None and record.energy_j is None:
            record.invalid["energy_j"] = reason or "no energy reading"
