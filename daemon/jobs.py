"""Job tracking: the lifecycle of the jobs the daemon sends (queued, sent, running, done,
failed, expired, cancelled), kept in the store.

A job is "sent" when its message left (else "queued", delivered at the agent's next hello),
"running" from its first stored result, "done" once every run is stored, or for a job of
adaptive points (points with ``until``, shared/protocol.py) once every point is closed: its
closing record (``extra["point"]["done"]``) is stored, or all its reps are (then ``on_done``
asks for fits), "failed" when the agent refuses it or every run failed, "expired" when its
agent has not been seen for ``job_expiry_s``, and "cancelled" when the user cancelled it
(``opptune cancel``, ``tune --stop``): final at once, never resent nor resumed. A job the
agent may hold (sent, running, expired) gets a ``cancel`` message; the agent stops it and
records the runs not run (``extra["stopped"]["cancelled"]``), which are stored as any results
are, with the runs measured before. The job's ``stopped`` column keeps the cancel
(``{"cancelled": true, "at", "held"}``): ``held`` while the agent's end has not been seen, so
that the cancel is sent again at the agent's next hello (it may have been offline, or this
daemon restarted); an older agent that refuses the message runs the job to its end.

At most ``max_outstanding_jobs`` jobs are out with an agent at a time (sent or running): the
others are held "queued" in the daemon and go out one by one as earlier ones finish, so a sweep
of many workloads cannot flood one agent (nor its results flood the daemon).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

from ..shared import protocol
from ..shared.config import DaemonConfig
from ..shared.records import JOB_STOPPED, NOT_RUN, job_stop
from .errors import HandlerError
from .link import Link
from .registry import Registry
from .store import Store

log = logging.getLogger("opptune.daemon")

CANCELS_KEPT = 1024  # sent cancel messages remembered, for an older agent's refusal of one
# jobs this daemon saw end, newest last: their late results (resent by an agent that missed
# the acks) ask for no second fit. Older ones are looked up as after a restart.
COMPLETE_KEPT = 1024

ACTIVE_JOB_STATES = ("queued", "sent", "running")
# recovered: results of a job the store never issued, taken in on `opptune recover`
# (daemon/recovery.py): never sent, resumed, expired or cancelled
FINAL_JOB_STATES = ("done", "failed", "expired", "cancelled", "recovered")
# final; the status carries the reason
UNSUCCESSFUL_JOB_STATES = ("failed", "expired", "cancelled")
# what a job's results may still change: every state but cancelled, which stays
NOT_CANCELLED = ACTIVE_JOB_STATES + ("done", "failed", "expired")
# the states in which the agent may hold the job (sent it, maybe running it): a cancel is sent
HELD_JOB_STATES = ("sent", "running", "expired")


def cancelled_by_agent(record: dict[str, Any] | None) -> bool:
    """Whether a stored run record is one of the runs an agent skipped when it cancelled the
    job (its end of a cancelled job)."""
    extra = (record or {}).get("extra")
    stop = extra.get("stopped") if isinstance(extra, dict) else None
    return isinstance(stop, dict) and stop.get("cancelled") is True


def stopped_early(job: dict[str, Any]) -> bool:
    """A job done with what it measured before the agent stopped it for its timeouts
    (stop_after_timeouts): its points after the stop were never run. ``stopped`` is the
    store's (read from the reason of a row stored before it); a row without the key (an
    older daemon's status) says it in its reason."""
    stop = job["stopped"] if "stopped" in job else job_stop(job.get("reason"))
    return job.get("state") == "done" and stop is not None


def runs_text(job: dict[str, Any]) -> str:
    """A job's runs for a person: '3/4 runs' (received of expected), or where the agent
    recorded runs without running them (``not_run``, counted in ``received``), '1 of 4 runs
    measured, 3 not run', '(cancelled)' added for a cancelled job (else its reason says why:
    the timeouts, the failure). A run that ran and failed was measured."""
    received, not_run = job.get("received") or 0, job.get("not_run") or 0
    if not not_run:
        return f"{received}/{job.get('expected')} runs"
    return (f"{received - not_run} of {job.get('expected')} runs measured, {not_run} not run"
            + (" (cancelled)" if job.get("state") == "cancelled" else ""))


def failure_text(errors: list[str]) -> str:
    """The causes among the distinct error texts of a job's runs, first first. The runs the
    agent skipped after a timeout ("not run: warmup 0 of this point timed out after 5 s")
    repeat a cause: they only say where it happened, added to it ("timed out after 5 s (at
    warmup 0; the rest of the point was not run)"), and stand for it where the run that timed
    out is not stored (an agent from before the timed-out warmup was recorded). The agent's
    line for a job it stopped ("not run: the job stopped after 2 points in a row timed out
    ...") is a cause of its own."""
    causes: list[str] = []
    where: dict[str, list[str]] = {}
    for e in errors:
        run, sep, why = e[len(NOT_RUN):].partition(" of this point ")
        if e.startswith(NOT_RUN + JOB_STOPPED):
            causes.append(e[len(NOT_RUN):])
        elif not e.startswith(NOT_RUN) or not sep:
            causes.append(e)
        elif run not in where.setdefault(why, []):
            where[why].append(run)
    named = causes + [why for why in where if why not in causes]
    return "; ".join(f"{c} (at {', '.join(where[c])}; the rest of the point was not run)"
                     if c in where else c for c in named) or "no error text"


def first_failure(store: Any, job_ids: list[str]) -> str | None:
    """Why the runs of the newest of these jobs with failed runs failed (as the job's reason
    says it), None where none has an error text."""
    for job_id in reversed(job_ids):
        errors = store.job_errors(job_id)
        if errors:
            return failure_text(errors)
    return None


# distinct causes a done job's reason names (each run of a flaky program may fail in its
# own words: its stderr)
FAILED_CAUSES = 3


def failed_runs_text(failed: int, received: int, errors: list[str]) -> str | None:
    """The reason of a job done with ``failed`` of its ``received`` runs failed ('2 of 6 runs
    failed: workload failed with exit status 3: ...'): the sweep's last line and the status
    said only 'done: 6/6 runs' where a program failed now and then; None when none failed."""
    if failed <= 0:
        return None
    more = len(errors) - FAILED_CAUSES
    return (f"{failed} of {received} runs failed: {failure_text(errors[:FAILED_CAUSES])}"
            + (f"; and {more} other error{'s' * (more != 1)}" if more > 0 else ""))


class JobTracker:
    """Sends jobs and moves them through their states. Used from the service loop only."""

    def __init__(self, config: DaemonConfig, store: Store, registry: Registry, link: Link,
                 sender: str, started: float, on_done: Callable[[str, str], None]):
        self.config = config
        self.store = store
        self.registry = registry
        self.link = link
        self.sender = sender
        self.started = started
        self.on_done = on_done
        # job id -> (runs counted in the store at the last look, results received since): the
        # store is asked for a job's distinct count only once it could be complete.
        self._progress: dict[str, list[int]] = {}
        self._complete: dict[str, None] = {}  # ordered set, oldest first (COMPLETE_KEPT)
        self._running: set[str] = set()  # marked running in the store by this instance
        self._msgs: dict[str, str] = {}  # id of a sent job message -> job id, until it ends
        self._msgs_of: dict[str, list[str]] = {}  # job id -> ids of its messages in _msgs
        self._out: dict[str, set[str]] = {}  # agent -> job ids out with it (sent or running)
        self.stats: dict[str, int] = {}  # the daemon's stats: "jobs_held" counted here
        # job id -> (points, the fewest runs that can close them all) of an adaptive job, None
        # for a fixed one
        self._adaptive: dict[str, tuple[int, int] | None] = {}
        # job id -> indexes of its closed adaptive points: read from the store once, then kept
        # up to date from each batch, so a large job is not re-read per batch
        self._closed: dict[str, set[int]] = {}
        self._cancels: dict[str, str] = {}  # id of a sent cancel message -> its job id
        self._cancelling: set[str] = set()  # cancelled jobs whose agent's end is awaited

    def _completed(self, job_id: str) -> None:
        """Remember that ``job_id`` ended, forgetting the oldest beyond COMPLETE_KEPT, and
        forget its messages (a refusal of an ended job changes nothing): the daemon kept both
        for every job it ever ended, for its life, before."""
        for msg_id in self._msgs_of.pop(job_id, ()):
            self._msgs.pop(msg_id, None)
        self._complete[job_id] = None
        while len(self._complete) > COMPLETE_KEPT:
            del self._complete[next(iter(self._complete))]

    def _limit(self) -> int:
        return max(1, int(getattr(self.config, "max_outstanding_jobs", 8)))

    def send(self, agent: str, job: dict[str, Any], save: bool = True) -> str:
        """Send a job; it is stored as "sent", or "queued" when it could not be delivered
        (then it goes out at the agent's next hello). Returns "sent", "queued" (not
        delivered) or "held" (max_outstanding_jobs out with the agent already)."""
        out = self._out.setdefault(agent, set())
        if job["job_id"] not in out and len(out) >= self._limit():
            self.stats["jobs_held"] = self.stats.get("jobs_held", 0) + 1
            if save:
                self.store.save_job(agent, job, time.time(), state="queued")
            else:
                self.store.set_job_state(job["job_id"], "queued", only_from=("sent", "expired"))
            log.info("job %s for %s held in the daemon: %d jobs already out with it "
                     "(max_outstanding_jobs)", job["job_id"], agent, len(out))
            return "held"
        if save:
            # stored before it goes out: a job the store could not keep is never sent, else
            # the agent would run it and every result would be refused as unknown_job
            self.store.save_job(agent, job, time.time(), state="queued")
        info = self.registry.get(agent)
        msg = protocol.make("job", self.sender, job)
        sent = info is not None and info.identity is not None and \
            self.link.send(info.identity, msg)
        if sent:
            out.add(job["job_id"])
            # the agent's refusal (an ``error``) names this message id
            self._msgs[msg["id"]] = job["job_id"]
            self._msgs_of.setdefault(job["job_id"], []).append(msg["id"])
            if not self.store.set_job_state(job["job_id"], "sent",
                                            only_from=("queued", "expired")):
                self._sent_cancelled(agent, job["job_id"])
        if not sent:
            log.warning("job %s for %s not delivered; it is resent at the agent's next hello",
                        job["job_id"], agent)
            return "queued"
        log.info("sent job %s (%s, %d points x %s%d reps) to %s", job["job_id"],
                 job["workload"], len(job["points"]), "up to " if any(
                     "until" in p for p in job["points"]) else "", job["reps"], agent)
        return "sent"

    def _sent_cancelled(self, agent: str, job_id: str) -> None:
        """Job ``job_id`` went out to ``agent`` while another daemon of the fleet cancelled
        it as not sent (queued: no agent to tell): the agent holds it now, so it is held
        until the agent's end is stored, and told at once."""
        job = self.store.job(job_id)
        if job is None or job["state"] != "cancelled":
            return
        stop = job.get("stopped") or {}
        if not stop.get("held"):
            self.store.set_job_state(job_id, "cancelled", job["reason"],
                                     only_from=("cancelled",), stopped={**stop, "held": True})
        self.tell_cancel(agent, job_id)
        log.info("job %s went out as another daemon cancelled it: %s is told to stop it",
                 job_id, agent)

    def results_stored(self, touched: dict[str, list[Any]], now: float) -> None:
        """Results of the jobs in ``touched`` were committed: job id -> [runs expected, agent,
        runs stored just now, adaptive points they closed (from :func:`closing_point`) or
        None], as the ingest gathers them."""
        for job_id, (of, agent, new, closing) in touched.items():
            if job_id not in self._running and job_id not in self._complete:
                self._running.add(job_id)
                # an expired job whose agent came back with results runs again
                self.store.set_job_state(job_id, "running", now=now,
                                         only_from=("queued", "sent", "expired"))
            if job_id in self._cancelling:
                self._cancel_end(job_id)
            self.check(job_id, of, agent, new, closing or ())

    def check(self, job_id: str, of: int, agent: str, new: int,
              closing: Iterable[int] = ()) -> None:
        """Complete the job when all ``of`` runs are stored (``new`` arrived just now), or
        every point of an adaptive job is closed (``closing``: points closed just now)."""
        if job_id in self._complete:
            return
        prog = self._progress.get(job_id)
        if prog is None:
            prog = self._progress[job_id] = [0, 0]
            new = of  # unknown history (e.g. after a restart): look once
        prog[1] += new
        shape = self._shape(job_id)
        closed = self._closed.get(job_id)
        if closed is not None and shape is not None:
            closed.update(i for i in closing if 0 <= i < shape[0])
        if prog[0] + prog[1] < (of if shape is None else min(of, shape[1])):
            return
        if shape is not None:
            if closed is None:  # the only full read of the job's records
                closed = self._closed[job_id] = closed_points(self.store.run_records(job_id),
                                                              shape[0])
            if len(closed) < shape[0] and prog[0] + prog[1] < of:
                return
        received = self.store.job_received(job_id)
        prog[0], prog[1] = received, 0
        if received < of and (shape is None or len(closed or ()) < shape[0]):
            return
        self._completed(job_id)
        self._progress.pop(job_id, None)
        self._adaptive.pop(job_id, None)
        self._closed.pop(job_id, None)
        self._running.discard(job_id)
        ok, errors = self.store.job_failures(job_id)
        if not ok:
            reason = f"every run of the job failed: {failure_text(errors)}"
            if not self.store.set_job_state(job_id, "failed", reason, only_from=NOT_CANCELLED,
                                            stopped=self._stop(job_id, errors)):
                self._cancel_end(job_id)  # cancelled before: it stays so
            else:
                log.warning("job %s of %s failed: %s", job_id, agent, reason)
            self._finished(agent, job_id)
            return
        # a job the agent stopped for its timeouts is done with what it measured, and says why
        # the rest is missing
        errors = self.store.job_errors(job_id) if ok < received else []
        stop = self._stop(job_id, errors)
        reason = failure_text(errors) if stop is not None else failed_runs_text(
            received - ok, received, errors)
        if not self.store.set_job_state(job_id, "done", reason, stopped=stop,
                                        only_from=NOT_CANCELLED):
            # cancelled while its last runs were on their way: no fit for it, it stays so
            self._cancel_end(job_id)
            self._finished(agent, job_id)
            return
        log.info("job %s of %s done (%d runs, %d successful)%s", job_id, agent, received, ok,
                 f": {reason}" if reason else "")
        self._finished(agent, job_id)
        self.on_done(job_id, agent)

    def _stop(self, job_id: str, errors: list[str]) -> dict[str, Any] | None:
        """The agent's stop of a complete job for its timeouts, from its last run (the stop's
        records run to the job's last seq), when its ``errors`` hold the stop's text."""
        text = next((e for e in errors if e.startswith(NOT_RUN + JOB_STOPPED)), None)
        if text is None:
            return None
        return job_stop(text, (self.store.job_last_run(job_id) or {}).get("extra"))

    def _shape(self, job_id: str) -> tuple[int, int] | None:
        """(points, fewest runs to close them) of an adaptive job; None for a fixed one."""
        if job_id not in self._adaptive:
            job = self.store.job(job_id)
            points = job["points"] if job else []
            if any(isinstance(p, dict) and isinstance(p.get("until"), dict) for p in points):
                least = sum(min(job["reps"], max(1, int(p["until"].get("min_reps", 1))))
                            if isinstance(p.get("until"), dict) else job["reps"]
                            for p in points)
                self._adaptive[job_id] = (len(points), least)
            else:
                self._adaptive[job_id] = None
        return self._adaptive[job_id]

    def _finished(self, agent: str, job_id: str) -> None:
        """A job of ``agent`` is final: send the next one held for it, if any."""
        out = self._out.get(agent)
        if out is None or job_id not in out:
            return
        out.discard(job_id)
        for j in self.store.active_jobs():
            if len(out) >= self._limit():
                return
            if j["agent"] != agent or j["state"] != "queued" or j["job_id"] in out:
                continue
            job = self.store.job(j["job_id"])
            if job is not None:
                self.send(agent, {k: job[k] for k in ("job_id", "workload", "size", "points",
                                                      "reps", "warmup")}, save=False)

    def agent_error(self, agent: str, body: dict[str, Any]) -> None:
        """An agent's ``error`` about a job it was sent (by message id, or naming the job)
        fails the job with the agent's reason."""
        ref = body.get("ref")
        if ref in self._cancels:
            self._cancel_refused(agent, self._cancels.pop(ref), body)
            return
        job_id = self._msgs.get(ref) if ref else None
        if job_id is None and ref and ref.startswith("job-"):
            job_id = ref
        if job_id is None:
            return
        job = self.store.job(job_id)
        if job is None or job["agent"] != agent:
            return  # a job id another agent named: only the agent sent it can refuse it
        reason = f"agent {agent} refused the job: {body['message']} ({body['code']})"
        if self.store.set_job_state(job_id, "failed", reason,
                                    only_from=ACTIVE_JOB_STATES + ("expired",)):
            self._running.discard(job_id)
            self._completed(job_id)
            log.warning("job %s failed: %s", job_id, reason)
            owner = next((a for a, out in self._out.items() if job_id in out), None)
            if owner is not None:
                self._finished(owner, job_id)

    def resume(self, agent: str) -> set[str]:
        """At an agent's hello, resend each of its unfinished jobs (queued, sent, running or
        expired; the agent ignores one it already has); a job whose runs are all stored is
        completed instead. Returns the workloads that have a job in any state (a failed one
        is not sent again: it would fail the same way)."""
        workloads = set()
        self._out[agent] = set()  # a new session: what was out is sent again, within the limit
        order = {"running": 0, "sent": 1, "queued": 2, "expired": 3}
        # the agent's jobs only (by index): every job of the store was 0.4 s of the loop a
        # hello with 100,000 kept
        mine = sorted(self.store.jobs_page(agent=agent)[0],
                      key=lambda j: order.get(j["state"], 4))
        for j in mine:
            workloads.add(j["workload"])
            if j["state"] == "cancelled" and (j.get("stopped") or {}).get("held"):
                # it may still hold the job (offline at the cancel, or this daemon restarted
                # since): told again until its end is stored
                if not self._cancel_end(j["job_id"]):
                    self.tell_cancel(agent, j["job_id"])
            if j["state"] in FINAL_JOB_STATES and j["state"] != "expired":
                continue
            # all runs stored, or every adaptive point closed: complete rather than resend
            self.check(j["job_id"], j["expected"], agent, 0)
            if j["job_id"] in self._complete:
                continue
            self.resend(agent, j["job_id"], j["state"])
        return workloads

    def cancel(self, job_id: str, reason: str) -> dict[str, Any]:
        """Cancel job ``job_id`` for good, ``reason`` its reason ('cancelled by the user at
        ...'): final in the store at once (never resent nor resumed), its place among the
        agent's outstanding jobs given to the next; a job the agent may hold is sent a
        ``cancel``. Returns the job's row (``received`` counted) with ``was`` (its state
        before), ``cancelled`` (False: it had ended before), ``told`` (the cancel went to
        the agent's connection; None: the agent does not hold it) and ``via`` (not told:
        the endpoint of the daemon of the fleet that holds the agent, which tells it at its
        next tick, :meth:`tell_held_cancels`; None otherwise). HandlerError
        ``unknown_job`` for an id the store does not know."""
        job = self.store.job(job_id)
        if job is None:
            raise HandlerError("unknown_job", f"no job {job_id[:80]} in this daemon's store; "
                                              "'opptune status' lists the jobs")
        now = time.time()
        while True:
            # set only from the state read: another daemon of a fleet that sent the job (queued
            # -> sent) between the read and the set would leave ``was`` and ``held`` untrue
            was = job["state"]
            held = was in HELD_JOB_STATES
            cancelled = was not in FINAL_JOB_STATES or was == "expired"
            if not cancelled or self.store.set_job_state(
                    job_id, "cancelled", reason, now=now, only_from=(was,),
                    stopped={"cancelled": True, "at": now, "held": held}):
                break
            fresh = self.store.job(job_id)  # changed meanwhile: as it is now
            if fresh is None:
                cancelled = False
                break
            job = fresh
        told = via = None
        if cancelled:
            self._completed(job_id)
            for table in (self._progress, self._adaptive, self._closed):
                table.pop(job_id, None)
            self._running.discard(job_id)
            owner = next((a for a, out in self._out.items() if job_id in out), None)
            if owner is not None:
                self._finished(owner, job_id)
            if held:
                self._cancelling.add(job_id)
                told = self.tell_cancel(job["agent"], job_id)
                if not told:  # the daemon of the fleet that holds it tells it (its tick)
                    where = self.registry.via(job["agent"])
                    via = where.endpoint if where is not None else None
            log.info("job %s of %s cancelled (%s): %s", job_id, job["agent"], was,
                     "the agent is told to stop it" if told else
                     f"the daemon at {via}, which holds the agent, tells it" if via else
                     "the agent is told at its next hello" if held else "it was not sent")
        rows = self.store.jobs_page(job_ids=[job_id])[0]  # with its runs counted
        out = dict(rows[0]) if rows else {**job, "received": 0, "not_run": 0}
        out.update(was=was, cancelled=cancelled, told=told, via=via)
        return out

    def tell_cancel(self, agent: str, job_id: str) -> bool:
        """Send ``cancel`` of ``job_id`` to ``agent``; False when it is not connected here
        (its next hello brings the cancel again)."""
        info = self.registry.get(agent)
        if info is None or info.identity is None:
            return False
        msg = protocol.make("cancel", self.sender, {"job_id": job_id})
        if not self.link.send(info.identity, msg):
            return False
        self._cancels[msg["id"]] = job_id  # an older agent's refusal names this id
        while len(self._cancels) > CANCELS_KEPT:
            del self._cancels[next(iter(self._cancels))]
        self._cancelling.add(job_id)
        return True

    def tell_held_cancels(self, now: float) -> None:
        """Send the cancel of each job cancelled but still held (``stopped.held``) whose
        agent is connected here and was not told through this daemon: in a fleet, another
        daemon took the cancel and cannot reach the agent. Run from the loop's
        once-a-second tick, which reads the store afresh as the re-measure and tune steps
        do (daemons of a fleet do not call each other), so the agent stops within about a
        second instead of at its next hello."""
        timeout = self.registry.timeout_s
        if not any(a.alive(timeout, now) for a in self.registry.all()):
            return
        for j in self.store.held_cancels():
            job_id, agent = j["job_id"], j["agent"]
            if job_id in self._cancelling or not self.registry.alive(agent, now):
                continue
            if self._cancel_end(job_id):
                continue  # its end is stored already (it reached another daemon)
            if self.tell_cancel(agent, job_id):
                log.info("job %s was cancelled through another daemon of the fleet: its "
                         "agent %s, connected here, is told to stop it", job_id, agent)

    def _cancel_end(self, job_id: str) -> bool:
        """Whether the agent's end of the cancelled job ``job_id`` is stored (its runs not
        run, or every run): then the job is no longer held (no cancel is sent again)."""
        job = self.store.job(job_id)
        stop = (job or {}).get("stopped") or {}
        if job is None or job["state"] != "cancelled" or not stop.get("held"):
            self._cancelling.discard(job_id)
            return True
        received = self.store.job_received(job_id)
        if received < job["expected"] and not cancelled_by_agent(
                self.store.job_last_run(job_id)):
            return False
        self._cancelling.discard(job_id)
        self.store.set_job_state(job_id, "cancelled", job["reason"], only_from=("cancelled",),
                                 stopped={**stop, "held": False})
        # the agent's lines of the runs it did not run may still be on their way: no count
        log.info("job %s cancelled: its agent has ended it (it records the runs it did not "
                 "run)", job_id)
        return True

    def _cancel_refused(self, agent: str, job_id: str, body: dict[str, Any]) -> None:
        """The agent refused the cancel of ``job_id`` (an older agent: ``unknown_type``): the
        job runs to its end there; its reason says so and the cancel is not sent again."""
        self._cancelling.discard(job_id)
        job = self.store.job(job_id)
        if job is None or job["state"] != "cancelled":
            return
        why = (f"agent {agent} cannot cancel a job (an older agent)" if body["code"] ==
               "unknown_type" else f"agent {agent} refused the cancel: {body['message'][:200]} "
               f"({body['code']})")
        reason = f"{job['reason']}; {why}: the job runs to its end there, its runs are stored"
        self.store.set_job_state(job_id, "cancelled", reason, only_from=("cancelled",),
                                 stopped={**(job.get("stopped") or {}), "held": False,
                                          "refused": body["code"]})
        log.warning("job %s: %s", job_id, reason)

    def resend(self, agent: str, job_id: str, state: str) -> None:
        """Send an unfinished job of the store to ``agent`` again, unless it is out with it
        through this daemon already (the agent ignores a job it has)."""
        if job_id in self._out.get(agent, ()):
            return
        job = self.store.job(job_id)
        if job is not None:
            log.info("resending unfinished job %s (%s) to %s", job_id, state, agent)
            self.send(agent, {k: job[k] for k in ("job_id", "workload", "size", "points",
                                                  "reps", "warmup")}, save=False)

    def expire(self, now: float) -> None:
        """Expiry policy: a queued, sent or running job expires when its agent has not been
        seen for ``job_expiry_s`` by this daemon nor, as the store says, by any other daemon
        sharing the database (counted from this daemon's start at the earliest, so a restart
        does not expire the jobs of agents about to reconnect); with ``job_expiry_s`` 0 they
        wait for their agent instead."""
        limit = self.config.job_expiry_s
        if limit <= 0:
            return
        shared: dict[str, float] | None = None
        for j in self.store.active_jobs():
            info = self.registry.get(j["agent"])
            last = max(info.last_seen if info else 0.0, self.started)
            if now - last <= limit:
                continue
            # daemons sharing one database: the agent may talk to another daemon, which
            # records when it last heard it (each second); read only when about to expire
            if shared is None:
                shared = {a["id"]: a["last_seen"] or 0.0 for a in self.store.agents()}
            last = max(last, shared.get(j["agent"], 0.0))
            if now - last <= limit:
                continue
            reason = (f"agent {j['agent']} not seen for {now - last:.0f} s (job_expiry_s = "
                      f"{limit:g}); the job is sent again when the agent says hello")
            if self.store.set_job_state(j["job_id"], "expired", reason, now=now,
                                        only_from=ACTIVE_JOB_STATES):
                self._running.discard(j["job_id"])
                self._out.get(j["agent"], set()).discard(j["job_id"])
                log.warning("job %s expired: %s", j["job_id"], reason)


def closing_point(rec: Any) -> int | None:
    """The index of the adaptive point that ``rec`` (a RunRecord) closes
    (``extra["point"]["done"]``, written by an agent that ends adaptive points); None if none."""
    p = rec.extra.get("point") if isinstance(rec.extra, dict) else None
    if isinstance(p, dict) and p.get("done") is True and type(p.get("index")) is int:
        return p["index"]
    return None


def closed_points(records: list[tuple[str, Any]], n_points: int) -> set[int]:
    """Indexes (< ``n_points``) of the points whose closing record is among ``records``
    ((msg id, RunRecord))."""
    return {i for i in (closing_point(rec) for _, rec in records)
            if i is not None and 0 <= i < n_points}
