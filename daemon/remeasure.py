"""Re-measurement of marked points: a job whose runs at some points were marked (interference,
throttling; agent/meters/interference.py) gets a job of just those points, same workload,
size, reps and warmup, after a backoff (``remeasure_backoff_s``, one wait per retry); a point
still marked after the last retry is reported as never measured clean.

"Quiet" is judged cheaply, without a probe of its own: the backoff has passed, the agent is
connected and has no other job out (its own sweep would be the neighbour). The daemon has no
fresher load figure of the board between jobs (heartbeats carry none, the doctor report is
the hello's, and the points' last runs are the marked ones), so the re-measure job itself is
the probe: its runs say whether the board was quiet, and each counts as a retry.

Driven from the service loop's once-a-second tick (:meth:`Remeasure.tick`). Every item is also
kept in the store (table ``remeasure``, schema 9) at each change: points waiting for their
backoff (state ``waiting``, with their due time), a re-measure job out (``sent``, the same row:
one write moves it), and a workload's points never measured clean (``never_clean``). A daemon
restarted on the store takes them up: a job out is waited for (its agent resends it), one the
store never saw (the daemon stopped between the row and the send) waits again, one that
finished meanwhile is judged once its agent is connected (and its fit requested, as a live
completion's is: the recommendation goes to the agent), and one that failed is given up with
a log line."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ..shared.config import DaemonConfig
from .jobs import ACTIVE_JOB_STATES, JobTracker
from .planner import new_job_id
from .registry import Registry
from .store import Store

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
        # (job id, agent, marked points queued again): a judged job's fit, as the service
        # requests it for a live completion
        self.fit = fit
        self.store = store
        self.jobs = jobs
        self.registry = registry
        self.pending: list[Pending] = []
        self._sent: dict[str, Pending] = {}  # re-measure job id -> what it measures again
        # (agent, workload, size) -> points never measured clean: cores, cpus, freq, reason
        self.never_clean: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        self._finished: list[tuple[str, str]] = []  # (job id, agent): done with no daemon
        self._load(time.time())

    # -- the store: every change is written as it happens, read back at start -----------------
    def _load(self, now: float) -> None:
        """Take up what a previous daemon on this store left (see the module's docstring)."""
        for item in self.store.remeasure_items():
            try:
                b = item["body"]
                if item["state"] == "never_clean":
                    self.never_clean[(item["agent"], b["workload"], b["size"])] = \
                        list(b["points"])
                    continue
                p = Pending.from_body(item["agent"], item["id"], b)
            except (KeyError, TypeError, ValueError) as exc:
                log.error("re-measure item %s: cannot read it back (%s); left out",
                          item.get("id"), exc)
                continue
            job_id = b.get("job_id") if item["state"] == "sent" else None
            job = self.store.job(job_id) if job_id else None
            if job_id is None or job is None:
                if job_id is not None:  # stored, then stopped before the job went out
                    self._save(p, now)
                self.pending.append(p)
            elif job["state"] in ACTIVE_JOB_STATES:
                self._sent[job_id] = p  # its agent's hello resends it
            elif job["state"] == "done":
                self._sent[job_id] = p
                self._finished.append((job_id, p.agent))
            else:
                log.warning("re-measure job %s of %s %s while no daemon followed it: its "
                            "points stay reported as marked", job_id, p.agent, job["state"])
                self._forget(p)
        if self.pending or self._sent or self.never_clean:
            log.info("re-measure: resumed %d waiting, %d out, %d never clean",
                     len(self.pending), len(self._sent), len(self.never_clean))

    def _save(self, p: Pending, now: float, job_id: str | None = None) -> None:
        self._write(lambda: self.store.save_remeasure(
            p.key, p.agent, "sent" if job_id else "waiting", p.body(job_id), now))

    def _forget(self, p: Pending) -> None:
        self._write(lambda: self.store.delete_remeasure(p.key))

    def _set_never_clean(self, key: tuple[str, str, str], points: list[dict[str, Any]],
                         now: float) -> None:
        row = "never:" + "/".join(key)
        if points:
            self.never_clean[key] = points
            self._write(lambda: self.store.save_remeasure(
                row, key[0], "never_clean", {"workload": key[1], "size": key[2],
                                             "points": points}, now))
        elif self.never_clean.pop(key, None) is not None:
            self._write(lambda: self.store.delete_remeasure(row))

    @staticmethod
    def _write(op: Any) -> None:
        """A store write; a failure is logged and the item goes on in memory (as before the
        store kept it: only a restart would forget it)."""
        try:
            op()
        except Exception:
            log.exception("keeping the re-measure state in the store")

    def job_done(self, job_id: str, agent: str, now: float | None = None) -> bool:
        """A job completed: queue its marked points again (True: the caller's fit need not
        recommend yet, the points' clean runs are to come), or report them after the last
        retry. A failure here is logged: the job's fit goes on regardless."""
        try:
            return self._job_done(job_id, agent, time.time() if now is None else now)
        except Exception:
            log.exception("re-measuring the marked points of job %s", job_id)
            return False

    def _job_done(self, job_id: str, agent: str, now: float) -> bool:
        sent = self._sent.pop(job_id, None)
        if sent is not None:
            self._forget(sent)
        attempt = sent.attempt if sent is not None else 0
        job = self.store.job(job_id)
        if job is None or self.config.accept_load:
            return False
        marks = marked_points(job["points"], [r for _, r in self.store.run_records(job_id)])
        key = (agent, job["workload"], job["size"])
        if not marks:
            if attempt:
                log.info("re-measure job %s of %s: every point measured clean", job_id, agent)
            # measured clean since (a retry, a new sweep): no longer reported
            done = {tuple(p["cpus"]) for p in job["points"]}
            if key in self.never_clean:
                self._set_never_clean(key, [p for p in self.never_clean[key]
                                            if tuple(p["cpus"]) not in done], now)
            return False
        backoff = list(self.config.remeasure_backoff_s)
        if attempt >= len(backoff):
            self._set_never_clean(key, [
                {"cores": len(job["points"][i]["cpus"]), "cpus": job["points"][i]["cpus"],
                 "freq_khz": job["points"][i].get("freq_khz"), "reason": why,
                 "retries": attempt} for i, why in sorted(marks.items())], now)
            log.warning("%s of %s on %s: no clean measurement after %d retries at %s",
                        job["workload"], job["size"], agent, attempt,
                        "; ".join(never_clean_text(p) for p in self.never_clean[key]))
            return False
        points = [job["points"][i] for i in sorted(marks)]
        again = {k: job[k] for k in ("workload", "size", "reps", "warmup")}
        again["points"] = points
        p = Pending(agent, again, attempt + 1, now + backoff[attempt],
                    dict(enumerate(marks[i] for i in sorted(marks))))
        self.pending.append(p)
        self._save(p, now)
        log.info("job %s of %s: %d points marked (%s); measured again in %g s (retry %d of "
                 "%d)", job_id, agent, len(points), next(iter(marks.values())),
                 backoff[attempt], attempt + 1, len(backoff))
        return True

    def tick(self, now: float) -> None:
        """Judge the jobs that finished while no daemon followed them, and send the
        re-measure jobs whose backoff has passed, on boards that look quiet."""
        for job_id, agent in list(self._finished):
            # judged once the agent is here: the fit's recommendation is pushed to it
            if self._connected(agent, now):
                self._finished.remove((job_id, agent))
                self._judge(job_id, agent, now)
        if not self.pending:
            return
        busy = None
        for p in list(self.pending):
            if p.due > now:
                continue
            if not self._connected(p.agent, now):
                continue
            if busy is None:
                busy = {j["agent"] for j in self.store.active_jobs()
                        if j["state"] in ACTIVE_JOB_STATES}
            if p.agent in busy:
                continue
            self.pending.remove(p)
            job = {**p.job, "job_id": new_job_id()}
            self._sent[job["job_id"]] = p
            # stored before the job goes out: a job id the store never saw was never sent
            self._save(p, now, job["job_id"])
            self.jobs.send(p.agent, job)
            busy.add(p.agent)
            log.info("re-measure job %s for %s: %s of %s, %d points (retry %d)",
                     job["job_id"], p.agent, job["workload"], job["size"],
                     len(job["points"]), p.attempt)

    def _connected(self, agent: str, now: float) -> bool:
        info = self.registry.get(agent)
        return info is not None and info.alive(self.config.agent_timeout_s, now)

    def _judge(self, job_id: str, agent: str, now: float) -> None:
        """Judge a finished job and request its fit (recommending unless points wait)."""
        again = self.job_done(job_id, agent, now)
        if self.fit is not None:
            try:
                self.fit(job_id, agent, again)
            except Exception:
                log.exception("requesting the fit of job %s", job_id)

    def status(self, now: float) -> list[dict[str, Any]]:
        """Pending re-measurements and points reported never clean, for ``opptune status``."""
        out: list[dict[str, Any]] = [
            {"agent": p.agent, "workload": p.job["workload"], "size": p.job["size"],
             "state": "waiting", "retry": p.attempt, "due_in_s": round(max(0.0, p.due - now), 1),
             "job_id": None,
             "points": [{"cores": len(pt["cpus"]), "cpus": pt["cpus"],
                         "freq_khz": pt.get("freq_khz"), "reason": p.reasons.get(i)}
                        for i, pt in enumerate(p.job["points"])]} for p in self.pending]
        for job_id, sent in self._sent.items():
            row = self.store.job(job_id)
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
                for (a, w, s), pts in sorted(self.never_clean.items())]
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


def never_clean_text(p: dict[str, Any]) -> str:
    """'no clean measurement at 2 cores: interference: 48 % of cpu 1 used by pid 4711 (sh)'."""
    at = f"{p['cores']} core{'s' if p['cores'] != 1 else ''}"
    if p.get("freq_khz"):
        at += f" at {p['freq_khz'] / 1000:g} MHz"
    return f"no clean measurement at {at}: {p.get('reason') or 'marked'}"
