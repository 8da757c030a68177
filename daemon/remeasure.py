"""Re-measurement of marked points: a job whose runs at some points were marked (interference,
throttling; agent/meters/interference.py) gets a job of just those points, same workload,
size, reps and warmup, after a backoff (``remeasure_backoff_s``, one wait per retry); a point
still marked after the last retry is reported as never measured clean.

"Quiet" is judged cheaply, without a probe of its own: the backoff has passed, the agent is
connected and has no other job out (its own sweep would be the neighbour). The daemon has no
fresher load figure of the board between jobs (heartbeats carry none, the doctor report is
the hello's, and the points' last runs are the marked ones), so the re-measure job itself is
the probe: its runs say whether the board was quiet, and each counts as a retry.

Driven from the service loop's once-a-second tick (:meth:`Remeasure.tick`). The state lives in
the store only (table ``remeasure``, schema 9), read afresh at each use, so that daemons sharing
one store (a PostgreSQL fleet) see one state: points waiting for their backoff (state
``waiting``, with their due time), a re-measure job out (``sent``, the same row: one write moves
it), and a workload's points never measured clean (``never_clean``). A daemon acts only on the
items of agents connected to it, and each move is conditional on the row's state (the daemon
whose update or delete hits the row acts; another, at the same moment, does not). So a daemon
started on the store takes them up as its agents connect: a job out is waited for (its agent
resends it), one the store never saw (a daemon stopped between the row and the send) waits
again, one that finished meanwhile is judged (and its fit requested, as a live completion's
is: the recommendation goes to the agent), and one that failed is given up with a log line."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ..shared.config import DaemonConfig
from .jobs import ACTIVE_JOB_STATES, JobTracker
from .planner import REMEASURE_JOB_PREFIX, is_remeasure_job, new_job_id
from .registry import Registry
from .store import Store

# A job done this recently is being judged by the daemon that stored its last result (in the
# same pass of its loop), which another daemon of the fleet still counting the agent as its
# own (it moved away within agent_timeout_s) leaves to it. Either judges it once: the claim on
# its item decides (_job_done), so this only lets the live completion go first.
JUDGED_WHERE_STORED_S = 5.0

log = logging.getLogger("opptune.daemon")


@dataclass
class Pending:
    """Points of one job waiting to be measured again."""
    agent: str
    job: dict[str, Any]  # the job to send (its id made when sent)
    attempt: int  # retries sent so far for these points
    due: float  # time.time() from which it may go
    reasons: dict[int, str] = field(default_factory=dict)  # point index -> last mark
    key: str = field(default_factory=lambda: "rm-" + uuid.uuid4().hex[:16])  # its store row

    def body(self, job_id: str | None = None) -> dict[str, Any]:
        """The store row's body (``job_id``: the job sent for it)."""
        return {"job": self.job, "attempt": self.attempt, "due": self.due,
                "reasons": {str(i): r for i, r in self.reasons.items()}, "job_id": job_id}

    @classmethod
    def from_body(cls, agent: str, key: str, b: dict[str, Any]) -> Pending:
        return cls(agent, dict(b["job"]), int(b["attempt"]), float(b["due"]),
                   {int(i): str(r) for i, r in (b.get("reasons") or {}).items()}, key)


class Remeasure:
    def __init__(self, config: DaemonConfig, store: Store, jobs: JobTracker,
                 registry: Registry, fit: Callable[[str, str, bool], None] | None = None):
        self.config = config
        self.store = store
        self.jobs = jobs
        self.registry = registry
        # (job id, agent, marked points queued again): a judged job's fit, as the service
        # requests it for a live completion
        self.fit = fit
        pending, never = self._items()
        if pending or never:
            log.info("re-measure: %d waiting, %d out, %d never clean in the store",
                     sum(j is None for _, j in pending), sum(j is not None for _, j in pending),
                     len(never))

    # -- the store: the one copy of the state ---------------------------------------------------
    def _items(self, states: tuple[str, ...] | None = None
               ) -> tuple[list[tuple[Pending, str | None]],
                          dict[tuple[str, str, str], list[dict[str, Any]]]]:
        """The stored items (in one of ``states``; None: all): (waiting or sent item, the job
        id sent for it), and the points never measured clean by (agent, workload, size)."""
        pending: list[tuple[Pending, str | None]] = []
        never: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for item in self.store.remeasure_items(states):
            try:
                b = item["body"]
                if item["state"] == "never_clean":
                    never[(item["agent"], b["workload"], b["size"])] = list(b["points"])
                    continue
                p = Pending.from_body(item["agent"], item["id"], b)
            except (KeyError, TypeError, ValueError) as exc:
                log.error("re-measure item %s: cannot read it back (%s); left out",
                          item.get("id"), exc)
                continue
            pending.append((p, b.get("job_id") if item["state"] == "sent" else None))
        return pending, never

    @property
    def never_clean(self) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
        """(agent, workload, size) -> points never measured clean: cores, cpus, freq, reason."""
        return self._items(("never_clean",))[1]

    def _set_never_clean(self, key: tuple[str, str, str], points: list[dict[str, Any]],
                         had: bool, now: float) -> None:
        row = "never:" + "/".join(key)
        if points:
            self._write(lambda: self.store.save_remeasure(
                row, key[0], "never_clean", {"workload": key[1], "size": key[2],
                                             "points": points}, now))
        elif had:
            self._write(lambda: self.store.delete_remeasure(row))

    @staticmethod
    def _write(op: Any) -> Any:
        """A store write; a failure is logged (None): the item stays as the store has it."""
        try:
            return op()
        except Exception:
            log.exception("keeping the re-measure state in the store")
            return None

    def job_done(self, job_id: str, agent: str, now: float | None = None) -> bool | None:
        """A job completed: queue its marked points again (True: the caller's fit need not
        recommend yet, the points' clean runs are to come), or report them after the last
        retry (False). None: a re-measure job another daemon of the fleet judged (and
        fitted) already. A failure here is logged: the job's fit goes on regardless."""
        try:
            return self._job_done(job_id, agent, time.time() if now is None else now)
        except Exception:
            log.exception("re-measuring the marked points of job %s", job_id)
            return False

    def _job_done(self, job_id: str, agent: str, now: float) -> bool:
        pending, never = self._items()
        sent = next((p for p, j in pending if j == job_id), None)
        # the claim on the item is the judgement: whoever deletes it judges the job, and one
        # that finds it gone already is no first sweep (it would begin the retries again)
        if sent is None and is_remeasure_job(job_id):
            return None
        if sent is not None and not self.store.delete_remeasure(sent.key, "sent"):
            return None
        attempt = sent.attempt if sent is not None else 0
        job = self.store.job(job_id)
        if job is None or self.config.accept_load:
            return False
        marks = marked_points(job["points"], [r for _, r in self.store.run_records(job_id)])
        key = (agent, job["workload"], job["size"])
        if not marks:
            if attempt:
                log.info("re-measure job %s of %s: every point measured clean", job_id, agent)
            # measured clean since (a retry, a new sweep) at its cpus and clock: no longer
            # reported; a clean run at another clock (or the governor's) says nothing of it
            done = {(tuple(p["cpus"]), p.get("freq_khz")) for p in job["points"]}
            if key in never:
                self._set_never_clean(key, [p for p in never[key] if (
                    tuple(p["cpus"]), p.get("freq_khz")) not in done], True, now)
            return False
        backoff = list(self.config.remeasure_backoff_s)
        if attempt >= len(backoff):
            points = [
                {"cores": len(job["points"][i]["cpus"]), "cpus": job["points"][i]["cpus"],
                 "freq_khz": job["points"][i].get("freq_khz"), "reason": why,
                 "retries": attempt} for i, why in sorted(marks.items())]
            self._set_never_clean(key, points, key in never, now)
            log.warning("%s of %s on %s: no clean measurement after %d retries: %s",
                        job["workload"], job["size"], agent, attempt,
                        "; ".join(marked_point_text(p) for p in points))
            return False
        points = [job["points"][i] for i in sorted(marks)]
        again = {k: job[k] for k in ("workload", "size", "reps", "warmup")}
        again["points"] = points
        p = Pending(agent, again, attempt + 1, now + backoff[attempt],
                    dict(enumerate(marks[i] for i in sorted(marks))))
        self._write(lambda: self.store.save_remeasure(p.key, agent, "waiting", p.body(), now))
        log.info("job %s of %s: %d points marked (%s); measured again in %g s (retry %d of "
                 "%d)", job_id, agent, len(points), next(iter(marks.values())),
                 backoff[attempt], attempt + 1, len(backoff))
        return True

    def tick(self, now: float) -> None:
        """For the agents connected to this daemon: send the re-measure jobs whose backoff
        has passed, on boards that look quiet, and follow the jobs sent (one finished while
        no daemon followed it is judged here)."""
        # the items that may act only: the points never measured clean, one row per
        # workload ever marked, wait for no tick (2,000 of them were 16 ms of CPU a second)
        pending = [(p, j) for p, j in self._items(("waiting", "sent"))[0]
                   if self._connected(p.agent, now)]
        busy = None
        for p, job_id in pending:
            if job_id is not None:
                self._follow(p, job_id, now)
                continue
            if p.due > now:
                continue
            if busy is None:
                busy = {j["agent"] for j in self.store.active_jobs()
                        if j["state"] in ACTIVE_JOB_STATES}
            if p.agent in busy:
                continue
            job = {**p.job, "job_id": new_job_id(REMEASURE_JOB_PREFIX)}
            # stored before the job goes out (a job id the store never saw was never sent),
            # and only by the daemon whose update finds the row still waiting
            if not self._write(lambda: self.store.move_remeasure(
                    p.key, "waiting", "sent", p.body(job["job_id"]), now)):
                continue
            self.jobs.send(p.agent, job)
            busy.add(p.agent)
            log.info("re-measure job %s for %s: %s (%s), %d points (retry %d)",
                     job["job_id"], p.agent, job["workload"], job["size"],
                     len(job["points"]), p.attempt)

    def _follow(self, p: Pending, job_id: str, now: float) -> None:
        """A sent item of an agent connected here, by its job's stored state."""
        job = self.store.job(job_id)
        if job is None:  # stored, then stopped before the job went out: it waits again
            self._write(lambda: self.store.move_remeasure(p.key, "sent", "waiting", p.body(),
                                                          now))
        elif job["state"] == "done":
            # finished while no daemon followed it (stopped, restarted): judged here
            if job["updated"] <= now - JUDGED_WHERE_STORED_S:
                self._judge(job_id, p.agent, now)
        elif job["state"] not in ACTIVE_JOB_STATES:
            if self._write(lambda: self.store.delete_remeasure(p.key, "sent")):
                log.warning("re-measure job %s of %s %s: its points stay reported as marked",
                            job_id, p.agent, job["state"])
        # active: its agent's hello resent it; its completion judges it

    def _connected(self, agent: str, now: float) -> bool:
        info = self.registry.get(agent)
        return info is not None and info.alive(self.config.agent_timeout_s, now)

    def _judge(self, job_id: str, agent: str, now: float) -> None:
        """Judge a finished job and request its fit (recommending unless points wait)."""
        again = self.job_done(job_id, agent, now)
        if again is not None and self.fit is not None:
            try:
                self.fit(job_id, agent, again)
            except Exception:
                log.exception("requesting the fit of job %s", job_id)

    def status(self, now: float) -> list[dict[str, Any]]:
        """Pending re-measurements and points reported never clean, for ``opptune status``."""
        pending, never = self._items()
        out: list[dict[str, Any]] = [
            {"agent": p.agent, "workload": p.job["workload"], "size": p.job["size"],
             "state": "waiting", "retry": p.attempt, "due_in_s": round(max(0.0, p.due - now), 1),
             "job_id": None,
             "points": [{"cores": len(pt["cpus"]), "cpus": pt["cpus"],
                         "freq_khz": pt.get("freq_khz"), "reason": p.reasons.get(i)}
                        for i, pt in enumerate(p.job["points"])]}
            for p, job_id in pending if job_id is None]
        for sent, job_id in pending:
            row = self.store.job(job_id) if job_id is not None else None
            if row is not None:
                out.append({"agent": row["agent"], "workload": row["workload"],
                            "size": row["size"], "state": "measuring", "retry": sent.attempt,
                            "due_in_s": None, "job_id": job_id, "points": [
                                {"cores": len(pt["cpus"]), "cpus": pt["cpus"],
                                 "freq_khz": pt.get("freq_khz"), "reason": None}
                                for pt in row["points"]]})
        out += [{"agent": a, "workload": w, "size": s, "state": "never clean",
                 "retry": max((p["retries"] for p in pts), default=0), "due_in_s": None,
                 "job_id": None, "points": pts}
                for (a, w, s), pts in sorted(never.items())]
        return out


def marked_points(points: list[dict[str, Any]], records: list[Any]) -> dict[int, str]:
    """Index -> latest mark of the job's points that have a marked successful run (a run is
    matched to its point by cpus and set frequency)."""
    index = {(tuple(p["cpus"]), p.get("freq_khz"), p.get("variant", "")): i
             for i, p in enumerate(points)}
    by_cpus = {}
    for i, p in enumerate(points):
        by_cpus.setdefault((tuple(p["cpus"]), p.get("variant", "")), []).append(i)
    out: dict[int, str] = {}
    for r in records:
        if not r.ok or not r.marked:
            continue
        khz = round(r.freq_mhz * 1000) if r.freq_mhz else None
        i = index.get((tuple(r.cpus), khz, r.variant))
        if i is None:  # the frequency was not set (governor's) or read back rounded
            same = by_cpus.get((tuple(r.cpus), r.variant), [])
            i = same[0] if len(same) == 1 else None
        if i is not None:
            out[i] = r.marked
    return out


def marked_point_text(p: dict[str, Any]) -> str:
    """'at 2 cores: interference: 48 % of cpu 1 used by pid 4711 (sh)'."""
    at = f"{p['cores']} core{'s' if p['cores'] != 1 else ''}"
    if p.get("freq_khz"):
        at += f" at {p['freq_khz'] / 1000:g} MHz"
    return f"at {at}: {p.get('reason') or 'marked'}"


def never_clean_text(p: dict[str, Any]) -> str:
    """'no clean measurement at 2 cores: interference: 48 % of cpu 1 used by pid 4711 (sh)'."""
    return f"no clean measurement {marked_point_text(p)}"
