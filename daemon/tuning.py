"""Tune sessions (``opptune tune``): measure few configurations, chosen one at a time by the
:class:`sampling.Sampler`, until it says stop; then recommend for the goal, push the
configuration to the agent and wait for its verification. When no configuration meets the
goal's deadline or power cap the session ends ``unmet``, the closest one shown, nothing
applied.

A session lives in the daemon (the CLI only starts and follows it: a CLI that goes away does
not stop it). Each configuration is a one-point job on the sweep path (jobs.py): its runs are
stored, counted and failed like a sweep's. On a board of several clusters each cluster is
tuned in turn (variant ``cluster<i>``, its own grid and cpu order) and the recommendation
compares them; configurations spanning clusters are not tuned.

The Sampler fits models, and so does the session's final recommendation; both run in a worker
thread so that ingest, heartbeats and queries never wait on them. The store is read only from
the service loop.

Each session is saved in the store at each state change (a few saves per configuration). A
daemon started on that store resumes the sessions neither done nor failed: one waiting for its
job keeps waiting (the job's results come in as the agent reconnects), one whose job finished
meanwhile, or that had no job, asks the Sampler again, and one verifying keeps waiting for the
verdict. The session is taken up when its agent connects to the daemon; the agent has
``agent_timeout_s`` from the daemon's start to reconnect.

Of daemons sharing a database (a fleet), the one the agent is connected to drives its sessions,
as it sends the agent's unfinished jobs: at the agent's hello (after a daemon's restart, or its
fail-over from a daemon of the fleet that went silent) the daemon takes up the agent's open
sessions from the store, as stored. A daemon lets a session go once its agent is online
through another daemon, or another daemon saved it since; each save is conditional on the row
being as this daemon last saw it, so of two daemons that both think they hold the agent only
one moves the session on (the other reads it again or lets it go).

``opptune tune --stop`` (the ``tune_stop`` query, :meth:`Tuner.stop`) may reach any daemon of
the fleet: one that holds the session ends it; else the stored row is ended with the same
conditional save, and the daemon that drives it lets it go at its next save (it sends no job
and pushes no configuration without one). A job out with the agent cannot be called back (the
protocol has no such message): it runs to its end, its runs are stored, and its completion
starts no fit or push here.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .errors import HandlerError
from .goal_query import apply, measured_groups, parse_goal, recommend_steps, withheld
from .goal_recommend import SILENT_METER, Part, fill_part, per_configuration
from .jobs import ACTIVE_JOB_STATES, UNSUCCESSFUL_JOB_STATES
from .objectives import Goal
from .planner import (TUNE_JOB_PREFIX, clocks_never_apply, cluster_orders, new_job_id,
                      offered_frequencies, sweep_order, unset_clock)
from .recommend import candidate_grid
from .recommender import JUDGED, judge, marked_left_out
from .registry import board_name
from .sampling import Grid, Measured, Proposal, Sampler, fit_minimum
from .store import TUNE_FINAL_STATES, TUNE_OPEN_STATES, Group
from .sweeps import check_max_cores

if TYPE_CHECKING:
    from .service import Daemon

log = logging.getLogger("opptune.daemon")

ACTIVE = TUNE_OPEN_STATES
# unmet: nothing meets the goal's limits; the closest configuration is shown, not applied
FINAL = TUNE_FINAL_STATES
# finished sessions the store could not take, kept in memory for tune_status (the oldest go)
UNSAVED_FINISHED_MAX = 32
# jobs of stopped sessions still out with their agent: their end is the session's, not a
# sweep's (no fit, no push); the oldest go
STOPPED_JOBS_MAX = 256
# tries of a stop against a row other daemons of the fleet keep saving meanwhile
STOP_TRIES = 5
# what reading a damaged stored session raises
DAMAGED = (AttributeError, KeyError, TypeError, ValueError)
VERDICT_STATES = (*JUDGED, "marked", "refused", "failed")


@dataclass
class Segment:
    variant: str
    order: list[int]
    grid: Grid
    budget: int | None
    measured: int = 0  # configurations measured by this session
    stop_reason: str | None = None
    # configurations of the grid the store held when the session began it (None: not begun,
    # or a session saved before this was kept)
    before: int | None = None


@dataclass
class Session:
    tune_id: str
    agent: str
    workload: str
    size: str
    goal: Goal
    segments: list[Segment]
    reps: int
    warmup: int
    cluster: int | None
    max_cores: int | None
    started: float
    state: str = "measuring"  # measuring, verifying, done, failed, unmet, stopped
    reason: str | None = None
    current: int = 0  # index into segments
    job_id: str | None = None
    job_started: float | None = None
    job_seconds: list[float] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    pending: concurrent.futures.Future | None = None
    # while ``pending`` is the recommendation's fit: what makes the recommendation of its result
    finish: Callable[[Any], dict[str, Any]] | None = None
    recommendation: dict[str, Any] | None = None
    config_id: str | None = None
    verification: dict[str, Any] | None = None
    updated: float = 0.0
    resumed: bool = False  # loaded from the store at this daemon's start, not yet taken up
    # True: marked runs (interference) count too, the result holds for the board under that
    # load (--accept-load); None: the daemon's accept_load key
    accept_load: bool | None = None
    # the stored row's ``updated`` as this daemon last read or wrote it (None: not stored)
    stored: float | None = None
    taken: bool = False  # another daemon saved it since: it drives it, this one let it go
    # why its grids have no frequency axis on a board that sets clocks (a command on a
    # virtual board: planner.clocks_never_apply); None: the board's clocks are tuned
    no_clock: str | None = None

    def record(self) -> dict[str, Any]:
        """What the store keeps (the grids are recomputed from the platform at loading)."""
        return {"tune_id": self.tune_id, "agent": self.agent, "workload": self.workload,
                "size": self.size, "goal": self.goal.as_dict(),
                "segments": [{"variant": g.variant, "order": g.order, "budget": g.budget,
                              "measured": g.measured, "stop_reason": g.stop_reason,
                              "measured_before": g.before}
                             for g in self.segments],
                "reps": self.reps, "warmup": self.warmup, "cluster": self.cluster,
                "max_cores": self.max_cores, "started": self.started, "state": self.state,
                "reason": self.reason, "current": self.current, "job_id": self.job_id,
                "job_started": self.job_started, "job_seconds": self.job_seconds,
                "steps": self.steps, "recommendation": self.recommendation,
                "config_id": self.config_id, "verification": self.verification,
                "updated": self.updated, "accept_load": self.accept_load,
                "frequencies_not_tuned": self.no_clock}

    @classmethod
    def from_record(cls, r: dict[str, Any], platform: dict[str, Any]) -> Session:
        """The session :meth:`record` gave, its grids from the board's ``platform``."""
        no_clock = r.get("frequencies_not_tuned")  # absent in sessions saved before it
        segments = [Segment(g["variant"], list(g["order"]),
                            segment_grid(platform, list(g["order"]), r["max_cores"],
                                         clocks=no_clock is None),
                            g["budget"], g["measured"], g["stop_reason"],
                            g.get("measured_before"))
                    for g in r["segments"]]
        return cls(r["tune_id"], r["agent"], r["workload"], r["size"],
                   Goal.from_dict(r["goal"]), segments, r["reps"], r["warmup"], r["cluster"],
                   r["max_cores"], r["started"], state=r["state"], reason=r["reason"],
                   current=r["current"], job_id=r["job_id"], job_started=r["job_started"],
                   job_seconds=list(r["job_seconds"]), steps=list(r["steps"]),
                   recommendation=r["recommendation"], config_id=r["config_id"],
                   verification=r["verification"], updated=r["updated"],
                   accept_load=r.get("accept_load"),  # absent in sessions saved before it
                   no_clock=no_clock)

    def view(self, now: float) -> dict[str, Any]:
        grid = sum(len(s.grid) for s in self.segments)
        budget = sum(s.budget for s in self.segments) if all(
            s.budget for s in self.segments) else None
        measured = sum(s.measured for s in self.segments)
        before = [s.before for s in self.segments if s.before is not None]
        per = float(np.median(self.job_seconds)) if self.job_seconds else None
        # ETA: the remaining budget (or, without one, one more measurement) at the median pace
        left = (budget - measured) if budget else (1 if self.state == "measuring" else 0)
        return {"tune_id": self.tune_id, "agent": self.agent, "workload": self.workload,
                "size": self.size, "goal": self.goal.as_dict(), "goal_text":
                self.goal.describe(), "state": self.state, "reason": self.reason,
                "measured": measured, "measured_before": sum(before) if before else None,
                "budget": budget, "grid": grid,
                "segments": [{"variant": s.variant, "cpus": s.order, "grid": len(s.grid),
                              "measured": s.measured, "measured_before": s.before,
                              "stop_reason": s.stop_reason}
                             for s in self.segments],
                "steps": self.steps, "job_id": self.job_id,
                "eta_s": None if per is None or self.state not in ACTIVE else
                round(per * max(left, 0), 1),
                "elapsed_s": round((self.updated if self.state in FINAL else now)
                                   - self.started, 3),
                "recommendation": self.recommendation, "config_id": self.config_id,
                "verification": self.verification, "accept_load": self.accept_load,
                "frequencies_not_tuned": self.no_clock}


def open_row(r: dict[str, Any]) -> dict[str, Any]:
    """An open session's line in ``opptune status`` (``tunes``) from its stored record."""
    segs = r.get("segments") or []
    budgets = [g.get("budget") for g in segs]
    return {"tune_id": r["tune_id"], "agent": r["agent"], "workload": r["workload"],
            "size": r["size"], "goal_text": Goal.from_dict(r["goal"]).describe(),
            "state": r["state"], "measured": sum(g.get("measured") or 0 for g in segs),
            "budget": sum(budgets) if budgets and all(budgets) else None,
            "started": r["started"], "updated": r["updated"]}


def open_text(row: dict[str, Any]) -> str:
    """'tune-... (triad (small), measuring, 3 measured, since 2026-11-27 10:15:02 UTC)'."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(row["started"]))
    return (f"{row['tune_id']} ({row['workload']} ({row['size']}), {row['state']}, "
            f"{row['measured']} configuration{'s' if row['measured'] != 1 else ''} measured, "
            f"since {since})")


def segment_grid(platform: dict[str, Any], order: list[int], max_cores: int | None,
                 clocks: bool = True) -> Grid:
    """Every (cores, frequency) the cpus of ``order`` offer (cores only without cpufreq, or
    without ``clocks``)."""
    table = (offered_frequencies(platform, order) if clocks else None) or []
    _, cc, ff = candidate_grid(platform, table if len(table) >= 2 else None,
                               max_cores=max_cores or None, order=order)
    return Grid(cc, None if ff is None else ff / 1000.0)


class Tuner:
    """The daemon's tune sessions. Called from the service loop only (``poll`` each turn)."""

    def __init__(self, daemon: Daemon):
        self.d = daemon
        self.sessions: dict[str, Session] = {}  # the sessions going on
        # finished ones whose last save failed (a finished session is otherwise read back
        # from the store): bounded, oldest first
        self._unsaved: dict[str, Session] = {}
        self._by_job: dict[str, str] = {}
        self._stopped_jobs: dict[str, str] = {}  # job id -> its stopped session (bounded)
        self._polled = time.time()  # when the last poll returned
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="opptune-tune")
        self._load()

    def _load(self) -> None:
        """Load the sessions a previous daemon on this store left unfinished; each is taken
        up when its agent talks to this daemon."""
        for r in self.d.store.open_tune_sessions():
            self._adopt(r, "resumed")

    def take_up(self, agent: str) -> None:
        """At ``agent``'s hello, before its jobs are resent: adopt its open sessions as the
        store has them, unless this daemon drives one as stored (the agent reconnected). One
        another daemon of the fleet drove (and went silent) goes on from its stored state."""
        for r in self.d.store.open_tune_sessions():
            if r.get("agent") != agent:
                continue
            s = self.sessions.get(r.get("tune_id"))
            if s is not None and s.stored == r.get("updated"):
                continue
            if s is not None:
                self._forget(s)  # stale: another daemon moved it on since
            self._adopt(r, "taken up from the store")

    def _adopt(self, r: dict[str, Any], how: str) -> None:
        """Hold the stored session ``r``, to be taken up at the next poll where its agent is
        connected here. A job still out is registered at once: the agent's hello may complete
        it before that poll."""
        try:
            s = self._restore(r)
        except DAMAGED as exc:
            self._close_unresumable(r, exc)
            return
        s.resumed = True
        s.job_started = None  # a job out across the restart: its duration is no pace
        s.stored = r.get("updated")
        self.sessions[s.tune_id] = s
        if s.job_id is not None:
            self._by_job[s.job_id] = s.tune_id
        log.info("tune %s: %s (%s, %d measured%s)", s.tune_id, how, s.state,
                 sum(g.measured for g in s.segments),
                 f", waiting for job {s.job_id}" if s.job_id else "")

    def _close_unresumable(self, r: dict[str, Any], exc: Exception) -> None:
        """Close the stored session ``r`` that no daemon can resume (a damaged record) as
        failed: left open, 'opptune status' listed it for good. Conditional on the row as
        read: of daemons sharing the store one closes it and logs it; where the row changed
        since, it is read again at its agent's next hello."""
        why = r.get("unreadable") or (f"its record has no {exc}" if isinstance(exc, KeyError)
                                      else f"{type(exc).__name__}: {exc}")
        reason = f"the stored session cannot be resumed: {why}"
        try:
            closed = self.d.store.fail_tune_session(r.get("tune_id"), r.get("updated"),
                                                    reason, time.time())
        except Exception:  # tried again at the agent's next hello
            log.exception("tune %s: closing the session that cannot be resumed",
                          r.get("tune_id"))
            return
        if closed:
            log.error("tune %s failed: %s", r.get("tune_id"), reason)

    def _forget(self, s: Session) -> None:
        """Stop driving ``s`` here (another daemon does)."""
        if self.sessions.get(s.tune_id) is s:
            del self.sessions[s.tune_id]
        if s.job_id and self._by_job.get(s.job_id) == s.tune_id:
            del self._by_job[s.job_id]
        if s.pending is not None:
            s.pending.cancel()

    def _restore(self, r: dict[str, Any]) -> Session:
        info = self.d.registry.get(r["agent"])
        return Session.from_record(r, (info.platform if info else None) or {})

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- queries ------------------------------------------------------------------------------
    def start(self, args: dict[str, Any]) -> dict[str, Any]:
        """The ``tune`` query: check everything before anything is sent, then start."""
        d = self.d
        agent, workload = args.get("agent"), args.get("workload")
        if not isinstance(agent, str) or not isinstance(workload, str):
            raise HandlerError("bad_args", "tune needs args.agent and args.workload (text)")
        goal = parse_goal(args)
        ints = {}
        for key in ("budget", "cluster", "max_cores", "reps"):
            v = args.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0
                                  or (key in ("budget", "reps") and v < 1)):
                raise HandlerError("bad_args", f"tune {key.replace('_', '-')} must be a whole "
                                               f"number >= {1 if key in ('budget', 'reps') else 0}"
                                               f", not {v!r}")
            ints[key] = v
        accept_load = args.get("accept_load")
        if accept_load is not None and not isinstance(accept_load, bool):
            raise HandlerError("bad_args", "tune args.accept_load must be true or false")
        info = d.registry.get(agent)
        if info is None:
            raise HandlerError("unknown_agent", d.registry.unknown(agent))
        if info.identity is None or not info.alive(d.config.agent_timeout_s):
            raise HandlerError("agent_offline", d.registry.offline_text(agent))
        check_max_cores(info, ints["max_cores"], ints["cluster"])
        offered = info.workload_names()
        if workload not in offered:
            raise HandlerError("unknown_workload", f"agent '{agent}' does not offer {workload}; "
                                                   f"it offers {', '.join(sorted(offered))}")
        sizes = info.workload_sizes(workload)
        size = args.get("size")
        if size is not None and (not isinstance(size, str) or (sizes and size not in sizes)):
            raise HandlerError("unknown_size", f"agent '{agent}' has no size {size!r} for "
                                               f"{workload}; it offers {', '.join(sizes)}")
        if size is None:
            # the size the workload was measured at on this board, where it was at one only
            # (what recommend takes: a tune goes on from those runs rather than starting a
            # group of its own); else the daemon's [sweep] size, as a sweep takes
            measured = sorted({g.input for g in measured_groups(d, info.platform_id, workload)
                               if not sizes or g.input in sizes})
            size = measured[0] if len(measured) == 1 else (
                d.config.sweep.size if not sizes or d.config.sweep.size in sizes else sizes[0])
        platform = info.platform or {}
        meter = platform.get("energy") if isinstance(platform.get("energy"), dict) else {}
        if goal.needs_power and not meter.get("available"):
            # without power every configuration would look alike to the Sampler: refuse
            # rather than measure the whole grid for nothing
            raise HandlerError("no_power", f"{goal.describe()} needs energy or power, and "
                                           f"board {board_name(platform, info.platform_id)} "
                                           "has no energy meter"
                                           + (f" ({meter['reason']})" if meter.get("reason")
                                              else "") + "; use --objective time")
        if goal.needs_power and meter.get("available"):
            # a meter that saw none of the workload's runs at this size would see none of the
            # tune's either: it measured 8 configurations, then failed for want of power
            rows = [r for g in measured_groups(d, info.platform_id, workload) if g.input == size
                    for r in d.store.group_energy_runs(g, True)]
            if rows and not any(r[3] is not None and r[3] > 0 for r in rows):
                raise HandlerError("no_power", f"{goal.describe()} needs energy or power, and "
                                               f"none of the {len(rows)} runs of {workload} "
                                               f"({size}) on board "
                                               f"{board_name(platform, info.platform_id)} has "
                                               "any: " + SILENT_METER.format(
                                                   meter=meter.get("source")) +
                                               "; use --objective time")
        orders = cluster_orders(platform)
        cluster = ints["cluster"]
        if cluster is not None:
            if len(orders) < 2 or cluster >= len(orders):
                raise HandlerError("bad_args", f"board {board_name(platform, info.platform_id)}"
                                               f" has {len(orders)} cluster(s): --cluster "
                                               f"must be 0..{len(orders) - 1}"
                                   if len(orders) > 1 else
                                   f"board {board_name(platform, info.platform_id)} has one "
                                   "cluster: leave out --cluster")
            parts = [(f"cluster{cluster}", orders[cluster])]
        elif len(orders) > 1:
            parts = [(f"cluster{i}", o) for i, o in enumerate(orders)]
        else:
            parts = [("", sweep_order(platform))]
        budget = ints["budget"]
        if budget is not None and budget < len(parts):
            raise HandlerError("bad_args", f"a budget of {budget} cannot measure the "
                                           f"{len(parts)} clusters: give at least {len(parts)}")
        def share(k: int, total: int | None) -> int | None:
            return None if total is None else total // len(parts) + (
                1 if k < total % len(parts) else 0)
        # a command on a virtual board runs on the agent's machine: tuned over its cores at
        # no set clock, as sweep and characterize measure it
        no_clock = clocks_never_apply(platform, info.workload_kind(workload),
                                      board_name(platform, info.platform_id))
        if no_clock and not any(segment_grid(platform, order, ints["max_cores"]).freq_mhz
                                is not None for _, order in parts):
            no_clock = None  # the board sets no clock anyway: nothing to say
        if no_clock:
            no_clock = (f"frequencies not tuned for {workload}: {no_clock}; its cores are "
                        "tuned at no set clock")
        segments, needs = [], []
        for k, (variant, order) in enumerate(parts):
            seg = Segment(variant, order, segment_grid(platform, order, ints["max_cores"],
                                                       clocks=no_clock is None),
                          share(k, budget))
            segments.append(seg)
            # the fewest parameters of a model, less the configurations stored before
            needs.append(min(fit_minimum(seg.grid), len(seg.grid)) - len(set(self._stored(
                info.platform_id, workload, size, seg, accept_load).index)))
        short = [k for k, seg in enumerate(segments)
                 if seg.budget is not None and seg.budget < needs[k]]
        if short:
            # the session could only fail at its end, after measuring: refuse it now
            seg, least = segments[short[0]], budget
            while any(share(k, least) < n for k, n in enumerate(needs)):
                least += 1
            raise HandlerError("bad_args", f"a budget of {budget} leaves {seg.budget} "
                               f"configuration{'s' if seg.budget != 1 else ''} for "
                               f"{seg.variant or 'the board'}, where a "
                               f"model needs {needs[short[0]]} more ("
                               + ("cores x frequency" if seg.grid.freq_mhz is not None
                                  else "cores") + f"): give --budget {least} or more"
                               + (", or tune one cluster (--cluster)" if len(parts) > 1
                                  else ""))
        self._refuse_second(agent)  # last: what was asked wrong is said first
        now = time.time()
        s = Session("tune-" + uuid.uuid4().hex[:16], agent, workload, size, goal, segments,
                    ints["reps"] or d.config.sweep.reps, d.config.sweep.warmup, cluster,
                    ints["max_cores"], now, updated=now, accept_load=accept_load,
                    no_clock=no_clock)
        self.sessions[s.tune_id] = s
        self._save(s)
        log.info("tune %s: %s of %s (%s) on %s over %d configurations%s", s.tune_id,
                 goal.describe(), workload, size, agent, sum(len(g.grid) for g in segments),
                 f", budget {budget}" if budget else "")
        if no_clock:
            log.warning("tune %s: %s", s.tune_id, no_clock)
        self._next(s)
        return s.view(now)

    def _refuse_second(self, agent: str) -> None:
        """Refuse a session where ``agent`` has one open: the board has one set of clocks and
        cores, and two sessions would each measure under the other's settings. The rule is
        per agent, not per workload, for that reason. This daemon holds every open session
        of an agent connected to it (taken up at its hello), so memory answers; the store
        says whether another daemon of the fleet ended one since (tune --stop there)."""
        for s in [s for s in self.sessions.values()
                  if s.agent == agent and s.state not in FINAL and not s.taken]:
            r = self.d.store.tune_session(s.tune_id) if s.stored is not None else None
            if r is not None and r.get("updated") != s.stored and r.get("state") in FINAL:
                self._forget(s)  # ended through another daemon of the fleet (tune --stop)
                if s.job_id:
                    self._job_left(s.job_id, s.tune_id)
                continue
            raise HandlerError("tune_open", f"agent '{agent}' has a tune session open: "
                               f"{open_text(open_row(s.record()))}; a second one would fight "
                               "it over the board's cores and clocks. 'opptune status' shows "
                               f"it, 'opptune tune --follow {s.tune_id}' follows it, 'opptune "
                               f"tune --stop {s.tune_id}' ends it; else it ends once it has "
                               "applied and verified a configuration (or found none that "
                               "meets its goal), or fails when the agent is silent for "
                               "agent_timeout_s "
                               f"({self.d.config.agent_timeout_s:g} s)")

    def open_sessions(self, agent: str | None = None) -> list[dict[str, Any]]:
        """The open sessions in the store (of every daemon sharing it), oldest first, as
        :func:`open_row` gives them; ``agent``: only that agent's."""
        out = []
        for r in self.d.store.open_tune_sessions():
            if agent is None or r.get("agent") == agent:
                try:
                    out.append(open_row(r))
                except DAMAGED as exc:  # one bad row, not the page
                    log.error("tune %s: stored session unreadable (%s); not listed",
                              r.get("tune_id"), exc)
        return out

    def status(self, args: dict[str, Any]) -> dict[str, Any]:
        tune_id = args.get("tune_id")
        s = (self.sessions.get(tune_id) or self._unsaved.get(tune_id)) \
            if isinstance(tune_id, str) else None
        if s is not None and self.sessions.get(tune_id) is s:
            try:
                r = self.d.store.tune_session(tune_id)
            except Exception:  # the store fails: this daemon's copy answers
                r = None
            if r is not None and r.get("updated") != s.stored:
                s = None  # another daemon of the fleet moved it on since: the store answers
        if s is None:
            # a session of another daemon sharing the store, or one that could not resume
            s = self._stored_session(tune_id)[1]
        return s.view(time.time())

    def _stored_session(self, tune_id: Any) -> tuple[dict[str, Any], Session]:
        """The stored row of session ``tune_id`` and its Session; HandlerError where there is
        none, or its record cannot be read (one closed as unresumable gives its verdict)."""
        r, s = None, None
        try:
            r = self.d.store.tune_session(tune_id) if isinstance(tune_id, str) else None
            s = self._restore(r) if r is not None else None
        except DAMAGED as exc:
            if isinstance(r, dict) and r.get("state") in FINAL:  # closed as unresumable
                raise HandlerError("internal", f"tune session {tune_id} {r['state']}: "
                                               f"{r.get('reason')}") from None
            raise HandlerError("internal", f"tune session {tune_id} is stored but cannot "
                                           f"be read: {exc}") from None
        if r is None or s is None:
            raise HandlerError("bad_args", f"no tune session {tune_id!r} in the store of this "
                                           "daemon; 'opptune status' lists the open ones")
        return r, s

    def stop(self, args: dict[str, Any]) -> dict[str, Any]:
        """The ``tune_stop`` query: end the session ``args.tune_id`` (state ``stopped``). This
        daemon ends the one it holds; else the stored row, conditionally, so that whichever
        daemon of the fleet drives it (or none) it stays ended. The reply is the session's
        view with ``stopped`` (False: it had ended before) and ``job_cancelled`` (the job it
        had out, cancelled: daemon/jobs.py JobTracker.cancel; None if none)."""
        tune_id = args.get("tune_id")
        if not isinstance(tune_id, str) or not tune_id:
            raise HandlerError("bad_args", "tune_stop needs args.tune_id (text)")
        now = time.time()
        said = "stopped by the user at " + time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                         time.gmtime(now))
        s = self.sessions.get(tune_id)
        if s is not None and not s.taken:
            job = s.job_id if s.state == "measuring" else None
            before = s.state, s.reason, s.updated
            s.state, s.reason, s.updated = ("stopped", self._stop_reason(
                said, s.state, s.config_id), time.time())
            if self._save(s):  # stored first: a stop the store lost would be resumed
                self._end(s, s.state, s.reason)
                return self._stopped(s, job, True)
            if not s.taken:
                s.state, s.reason, s.updated = before  # it goes on, as the store has it
                raise HandlerError("store", f"tune session {tune_id} goes on: the store did "
                                            "not take its stop (the daemon's log says why); "
                                            "run 'opptune tune --stop' again")
        # the store's copy: another daemon of the fleet drives the session, or none does
        for _ in range(STOP_TRIES):
            r, s = self._stored_session(tune_id)
            if s.state in FINAL:
                return self._stopped(s, None, False)
            job = s.job_id if s.state == "measuring" else None
            s.state, s.reason, s.updated = ("stopped", self._stop_reason(
                said, s.state, s.config_id), time.time())
            if self.d.store.save_tune_session(s.record(), expect=r.get("updated")):
                held = self.sessions.get(tune_id)
                if held is not None:
                    self._forget(held)  # a stale copy here: it must not go on
                self._unsaved.pop(tune_id, None)
                return self._stopped(s, job, True)
        raise HandlerError("busy", f"tune session {tune_id} was saved by another daemon each "
                                   f"of {STOP_TRIES} times this one tried to stop it; run "
                                   "'opptune tune --stop' again")

    @staticmethod
    def _stop_reason(said: str, state: str, config_id: str | None) -> str:
        if state == "verifying" and config_id:
            # pushed before the stop: the agent applies and verifies it all the same
            return f"{said}; configuration {config_id} was pushed before and stays in force"
        return said

    def _stopped(self, s: Session, job_id: str | None, now: bool) -> dict[str, Any]:
        """The stop's reply; the job still out is remembered so that its end starts no fit
        or push (it measures for a session that is over)."""
        out = s.view(time.time())
        out["stopped"] = now
        job = self.d.store.job(job_id) if job_id else None
        out["job_cancelled"] = None
        if job is not None and job["state"] in ACTIVE_JOB_STATES:
            # it would measure for a session that is over, holding the board
            c = self.d.jobs.cancel(job_id, f"cancelled: its tune session {s.tune_id} was "
                                           f"{s.reason}")
            if c["cancelled"]:
                out["job_cancelled"] = {"job_id": job_id, "state": c["was"],
                                        "told": c["told"], "via": c["via"]}
            # an older agent runs it to its end all the same: that end is no sweep's
            self._job_left(job_id, s.tune_id)
        return out

    def _job_left(self, job_id: str, tune_id: str) -> None:
        """Own the job ``job_id`` of the stopped session ``tune_id``: its end is no sweep's."""
        self._stopped_jobs[job_id] = tune_id
        while len(self._stopped_jobs) > STOPPED_JOBS_MAX:
            del self._stopped_jobs[next(iter(self._stopped_jobs))]

    # -- the loop -----------------------------------------------------------------------------
    def owns(self, job_id: str) -> bool:
        """Whether ``job_id`` is the job of a session held here (or stopped here while out)."""
        return job_id in self._by_job or job_id in self._stopped_jobs

    def job_done(self, job_id: str) -> None:
        """A session's one-point job has all its runs: ask for the next configuration."""
        stopped = self._stopped_jobs.pop(job_id, None)
        if stopped is not None:
            log.info("tune %s: job %s, out when the session was stopped, is done; its runs "
                     "are stored", stopped, job_id)
            return
        tune_id = self._by_job.pop(job_id, None)
        if tune_id is None:
            log.info("job %s of a tune session not driven here (stopped or ended while it was "
                     "out) is done; its runs are stored, nothing is fitted for it", job_id)
            return
        s = self.sessions.get(tune_id)
        if s is None or s.state != "measuring" or s.job_id != job_id:
            return
        if s.job_started is not None:
            s.job_seconds.append(time.time() - s.job_started)
        s.segments[s.current].measured += 1
        s.job_id, s.updated = None, time.time()
        if self._save(s) or not s.taken:
            self._next(s)

    def poll(self, now: float, full: bool = True) -> None:
        """Take the Sampler's finished proposals; with ``full`` (about once a second) also
        look at each session's agent, job and verification."""
        # The loop was held up since the last poll or in this one (a large batch, a slow
        # store): agents' heartbeats may be waiting unread, so none is judged gone this turn.
        held_up = now - self._polled > 0.5
        try:
            self._poll(now, full, held_up)
        finally:
            self._polled = time.time()

    def _poll(self, now: float, full: bool, held_up: bool) -> None:
        for s in list(self.sessions.values()):
            if s.state in FINAL:
                continue
            if s.pending is not None:
                if s.pending.done():
                    fut, s.pending = s.pending, None
                    finish, s.finish = s.finish, None
                    try:
                        if finish is None:
                            self._proposed(s, fut.result())
                        else:
                            self._recommended(s, fut, finish)
                    except Exception as exc:
                        log.exception("tune %s", s.tune_id)
                        what = "the sampler" if finish is None else "the recommendation"
                        self._fail(s, f"{what} failed: {type(exc).__name__}: {exc}")
                continue
            if not full:
                continue
            info = self.d.registry.get(s.agent)
            timeout = self.d.config.agent_timeout_s
            if info is not None and info.alive(timeout, now):
                if s.resumed:
                    # taken up only once its agent talks to this daemon: of daemons sharing
                    # one database, the one the agent is connected to drives the session
                    s.resumed = False
                    self._resume(s)
                    if s.state in FINAL or s.pending is not None or s.taken:
                        continue
            elif s.resumed and now - self.d.started <= timeout:
                continue  # agents reconnect a few seconds after a daemon restart
            elif self._driven_elsewhere(s):
                continue
            if info is None or (not info.alive(timeout, now) and
                                not (held_up or time.time() - now > 0.5) and
                                # agents reconnect a few seconds after a daemon restart
                                now - max(info.last_seen, self.d.started) > timeout):
                seen = "never" if info is None or not info.last_seen else \
                    f"{now - info.last_seen:.0f} s ago"
                self._fail(s, f"agent {s.agent} is gone (last seen {seen}; agent_timeout_s = "
                              f"{self.d.config.agent_timeout_s:g})")
                continue
            if s.state == "measuring" and s.job_id is not None:
                job = self.d.store.job(s.job_id)
                if job is not None and job["state"] in UNSUCCESSFUL_JOB_STATES:
                    self._fail(s, f"job {s.job_id} {job['state']}: {job.get('reason')}")
            elif s.state == "verifying" and s.config_id is not None:
                rec = self.d.store.recommendation(s.config_id)
                if rec is not None and rec["state"] in VERDICT_STATES:
                    s.verification = {k: rec[k] for k in ("state", "verified_time_s", "error",
                                                          "predicted_time_s",
                                                          "predicted_lower_s",
                                                          "predicted_upper_s",
                                                          "verified_energy_j")}
                    s.verification["predicted_energy_j"] = (rec.get("goal") or {}).get(
                        "energy_j")
                    if rec["state"] == "marked" and s.accept_load:
                        # the load is accepted: the time under it is judged against the
                        # prediction made from runs under it (the stored recommendation stays
                        # "marked": no drift is counted from a busy board)
                        state, note = judge(rec, rec["verified_time_s"],
                                            rec.get("verified_energy_j"))
                        s.verification.update(state=state, error=(
                            f"under the accepted load ({rec['error']})" if note is None else
                            f"{note}; under the accepted load ({rec['error']})"))
                    if rec["state"] in (*JUDGED, "marked"):
                        v = s.verification
                        self._end(s, "done", f"applied and {v['state']}"
                                  + (f" ({v['error']})" if v["error"] else ""))
                    else:
                        self._fail(s, f"the agent {rec['state']} the configuration: "
                                      f"{rec['error']}")

    def _driven_elsewhere(self, s: Session) -> bool:
        """True (and the session let go here) when its agent, gone from this daemon, is
        online through another daemon sharing the store (that one took the session up at the
        agent's hello), or another daemon saved the session since this one did."""
        via = self.d.registry.via(s.agent)
        if via is None:
            r = self.d.store.tune_session(s.tune_id)
            if r is None or r.get("updated") == s.stored:
                return False
        log.info("tune %s: left to the daemon %s, which has agent %s", s.tune_id,
                 f"at {via.endpoint}" if via else "that saved it since", s.agent)
        self._forget(s)
        return True

    def _resume(self, s: Session) -> None:
        """Go on with a session loaded from the store (its agent is connected)."""
        if s.state != "measuring":
            return  # verifying: the verdict is read from the store by poll
        if s.job_id is None:
            self._next(s)
            return
        job = self.d.store.job(s.job_id)
        if job is None:
            # the daemon stopped between saving the session and storing its job: the job
            # never went out, so the Sampler is asked again
            log.info("tune %s: job %s was never sent; asking the sampler again", s.tune_id,
                     s.job_id)
            self._by_job.pop(s.job_id, None)
            if s.steps and s.steps[-1].get("job_id") == s.job_id:
                s.steps.pop()
            s.job_id = None
            self._next(s)
        elif job["state"] == "done":  # finished while no daemon followed the session
            self.job_done(s.job_id)
        elif job["state"] in ACTIVE_JOB_STATES:
            self._by_job[s.job_id] = s.tune_id
            # sent by a daemon that lost the agent after its hello here: this one sends it
            self.d.jobs.resend(s.agent, s.job_id, job["state"])
        # failed or expired: poll fails the session with the job's reason

    def _next(self, s: Session) -> None:
        """Ask the Sampler (off the loop) what to measure next in the current segment."""
        seg = s.segments[s.current]
        if seg.budget is not None and seg.measured >= seg.budget:
            # the session's budget counts its own measurements, not runs stored before it
            plural = "s" if seg.budget != 1 else ""
            self._proposed(s, Proposal(None, f"the budget of {seg.budget} configuration{plural} "
                                             "is spent"))
            return
        measured = self._stored(self._platform_id(s), s.workload, s.size, seg, s.accept_load)
        if seg.before is None:  # the sampler counts these too: "every configuration is measured"
            seg.before = max(0, len(set(measured.index)) - seg.measured)
        s.pending = self._pool.submit(_propose, Sampler(s.goal), seg.grid, measured)

    def _stored(self, platform_id: str, workload: str, size: str, seg: Segment,
                accept_load: bool | None) -> Measured:
        """What the store holds on ``seg``'s grid: this session's runs and earlier ones."""
        rows = self.d.store.group_energy_runs(Group(platform_id, workload, size, seg.variant),
                                              accept_load)
        return fill_part(Part(seg.variant, seg.order, seg.grid, Measured(),
                              np.ones(len(seg.grid), bool)), rows).measured

    def _proposed(self, s: Session, proposal: Any) -> None:
        seg = s.segments[s.current]
        if proposal.index is None or seg.measured >= len(seg.grid):
            seg.stop_reason = proposal.reason if proposal.index is None else \
                "every configuration is measured"
            log.info("tune %s: %s done: %s", s.tune_id, seg.variant or "board",
                     seg.stop_reason)
            if s.current + 1 < len(s.segments):
                s.current += 1
                s.updated = time.time()
                if self._save(s) or not s.taken:
                    self._next(s)
            else:
                self._recommend(s)
            return
        i = proposal.index
        k = int(seg.grid.cores[i])
        f = None if seg.grid.freq_mhz is None else int(round(seg.grid.freq_mhz[i] * 1000))
        point: dict[str, Any] = {"cpus": seg.order[:k], "threads": k, "freq_khz": f}
        if seg.variant:
            point["variant"] = seg.variant
        job = {"job_id": new_job_id(TUNE_JOB_PREFIX), "workload": s.workload, "size": s.size,
               "points": [point], "reps": s.reps, "warmup": s.warmup}
        step = {"variant": seg.variant, "cores": k, "cpus": point["cpus"], "freq_khz": f,
                "reason": proposal.reason, "job_id": job["job_id"]}
        if f is None:  # what the cpus run at instead (the progress line says it)
            info = self.d.registry.get(s.agent)
            step["clock"] = unset_clock((info.platform if info else None) or {},
                                        point["cpus"], reaches=s.no_clock is None)
        s.steps.append(step)
        s.job_id, s.job_started, s.updated = job["job_id"], time.time(), time.time()
        self._by_job[job["job_id"]] = s.tune_id
        # saved before the job: a session never forgets a job that went out (a job id the
        # store does not know at resumption was never sent); nor is it sent where another
        # daemon moved the session on meanwhile
        if self._save(s) or not s.taken:
            self.d.jobs.send(s.agent, job)

    def _recommend(self, s: Session) -> None:
        """Fit the recommendation off the loop (seconds on a loaded daemon: agents that heard
        nothing that long took the daemon for gone); poll takes it up in
        :meth:`_recommended`. The runs are read from the store here, on the loop."""
        try:
            compute, s.finish = recommend_steps(self.d, s.agent, s.workload, s.goal, s.size,
                                                s.cluster, s.max_cores, s.accept_load)
        except HandlerError as exc:
            self._fail(s, f"no recommendation: {exc}{self._marked_note(s)}")
            return
        s.pending = self._pool.submit(compute)

    def _recommended(self, s: Session, fit: concurrent.futures.Future,
                     finish: Callable[[Any], dict[str, Any]]) -> None:
        """The recommendation's fit is done: push its configuration, or end ``unmet``."""
        s.updated = time.time()
        if not self._save(s) and s.taken:
            return  # another daemon saved it since (stopped it, say): nothing is pushed
        try:
            rec = finish(fit.result())  # the fit's HandlerError (nothing to fit) comes here
            if not rec["met"]:
                # the closest configuration breaks the user's limits: shown, never applied
                rec["applied"] = withheld(rec, tune=True, budget_spent=any(
                    g.budget is not None and len(g.grid) > g.measured >= g.budget
                    for g in s.segments))
                s.recommendation = rec
                self._end(s, "unmet", rec["applied"]["reason"])
                log.warning("tune %s: %s", s.tune_id, s.reason)
                return
            rec["applied"] = apply(self.d, rec)
        except HandlerError as exc:
            self._fail(s, f"no recommendation: {exc}{self._marked_note(s)}")
            return
        s.recommendation, s.config_id = rec, rec["applied"]["config_id"]
        s.state, s.updated = "verifying", time.time()
        self._save(s)
        log.info("tune %s: recommend %d cores at %s (config %s)", s.tune_id, rec["cores"],
                 rec.get("clock") or f"{rec['freq_khz']} kHz", s.config_id)

    def _marked_note(self, s: Session) -> str:
        """Why runs are missing when the board was busy: '; N runs marked ... left out (...)'
        (empty when none was, or the load is accepted)."""
        return marked_left_out(
            self.d.store, [Group(self._platform_id(s), s.workload, s.size, seg.variant)
                           for seg in s.segments],
            "tune again when the board is quiet, or with --accept-load for the board under "
            "that load", s.accept_load)

    def _fail(self, s: Session, reason: str) -> None:
        self._end(s, "failed", reason)
        log.warning("tune %s failed: %s", s.tune_id, reason)

    def _end(self, s: Session, state: str, reason: str) -> None:
        """Finish ``s``: saved, it leaves memory (tune_status reads it from the store), so a
        long-running daemon does not keep every session it ever ran."""
        s.state, s.reason, s.updated = state, reason, time.time()
        if s.job_id:
            self._by_job.pop(s.job_id, None)
        if s.pending is not None:
            s.pending.cancel()
        saved = self._save(s)
        if self.sessions.get(s.tune_id) is s:
            del self.sessions[s.tune_id]
        if not saved and not s.taken:
            self._unsaved[s.tune_id] = s
            while len(self._unsaved) > UNSAVED_FINISHED_MAX:
                del self._unsaved[next(iter(self._unsaved))]

    def _save(self, s: Session) -> bool:
        """Keep the session in the store; a failure is logged and the session goes on in
        memory (the measurements themselves are stored by ingest, not here). Where another
        daemon of the fleet saved it since (False, ``taken``), this one's change is dropped:
        it reads the session again if the agent is connected here, else lets it go."""
        try:
            saved = self.d.store.save_tune_session(s.record(), expect=s.stored)
        except Exception:
            log.exception("tune %s: saving the session", s.tune_id)
            return False
        if saved:
            s.stored = s.updated
            return True
        s.taken = True
        self._forget(s)
        info = self.d.registry.get(s.agent)
        try:
            r = self.d.store.tune_session(s.tune_id)
        except Exception:  # read again at the agent's next hello
            log.exception("tune %s: reading the session again", s.tune_id)
            r = None
        if info is not None and info.alive(self.d.config.agent_timeout_s) and r is not None \
                and r.get("state") not in FINAL:
            self._adopt(r, "read again: another daemon saved it since")
        else:
            log.info("tune %s: left to the daemon that saved it since", s.tune_id)
        return False

    def _platform_id(self, s: Session) -> str:
        info = self.d.registry.get(s.agent)
        return info.platform_id if info else ""


def _propose(sampler: Sampler, grid: Grid, measured: Measured) -> Proposal:
    """The Sampler's next index, with repeated runs of one configuration as one measurement."""
    return sampler.propose(grid, per_configuration(measured)[0])
