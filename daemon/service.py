"""opptune-daemon: the central loop. Receives agents' messages on one ROUTER socket, stores
results idempotently, plans sweeps, fits models off the ingest path and pushes recommended
configurations back.

Ingest is batched: the loop drains whatever is waiting (up to ``batch_max`` messages), validates
every result, inserts the batch in one transaction and only after the commit sends one ``ack``
per agent listing the ids. A result whose id is already stored is acked again (the agent lost
the first ack) but stored once.
"""

from __future__ import annotations

import argparse
import logging
import signal
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Callable

import zmq

from ..shared import protocol
from ..shared.config import ConfigError, DaemonConfig, SweepDefaults, load_daemon_config
from ..shared.records import RecordError, RunRecord
from .fitter import FitOutcome, FitRequest, Fitter
from .link import Link
from .planner import (PlanError, cluster_order, physical_cores, plan_sweep, sweep_order,
                      unoffered_frequencies)
from .recommend import recommend, target_observations
from .registry import Registry, board_name, platform_id_of
from .store import Group, ResultIn, open_store

log = logging.getLogger("opptune.daemon")

DAEMON_ID = "daemon"


class HandlerError(Exception):
    """A request that cannot be served; answered with an ``error`` carrying ``code``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class BindError(RuntimeError):
    """The daemon cannot listen on its endpoint; the message says why and what to do."""


ACTIVE_JOB_STATES = ("queued", "sent", "running")
FINAL_JOB_STATES = ("done", "failed", "expired")


class Daemon:
    """The daemon; ``serve()`` runs the loop until ``stop()`` (or the given event) is set.

    Tests run it in a thread (``start_thread``); ``main`` runs it as a process."""

    def __init__(self, config: DaemonConfig, context: Any = None, batch_max: int = 4096):
        self.config = config
        self.instance = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.batch_max = batch_max
        # Bind first: a daemon that cannot listen (address in use, bad endpoint) stops before
        # it creates a database file or directory.
        try:
            self.link = Link(config.bind, context)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EADDRINUSE:
                why = ("the address is in use by another process: stop it or choose another "
                       "--bind (or 'bind' in the configuration)")
            else:
                why = (f"{zmq.strerror(exc.errno)}; give an endpoint such as "
                       "tcp://0.0.0.0:5555 or ipc:///run/opptune.sock")
            raise BindError(f"cannot listen on {config.bind}: {why}") from None
        try:
            self.store = open_store(config.database)
        except Exception:
            self.link.close()
            raise
        self.endpoint = self.link.endpoint
        self.registry = Registry(config.agent_timeout_s)
        for a in self.store.agents():
            self.registry.load(a["id"], a["platform"], self.store.platform(a["platform"]) or {},
                               a["workloads"], a["last_seen"])
        self.fitter = Fitter().start()
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        # job id -> (runs counted in the store at the last look, results received since): the
        # store is asked for a job's distinct count only once it could be complete.
        self._job_progress: dict[str, list[int]] = {}
        self._complete_jobs: set[str] = set()
        self._running_jobs: set[str] = set()  # marked running in the store by this instance
        self._job_msgs: dict[str, str] = {}  # id of a sent job message -> job id
        # Groups whose last fit (or recommendation) failed, with the reason: status "fit_errors".
        self._fit_errors: dict[Group, dict[str, Any]] = {}
        self.stats = {"results": 0, "duplicates_acked": 0, "batches": 0, "refused": 0,
                      "fits": 0, "configs_pushed": 0}
        self._handlers: dict[str, Callable[[bytes, dict[str, Any]], None]] = {
            "hello": self._on_hello, "heartbeat": self._on_heartbeat,
            "applied": self._on_applied, "error": self._on_error, "query": self._on_query,
        }

    # -- running ----------------------------------------------------------------------------
    def serve(self, stop_event: threading.Event | None = None) -> None:
        stop = stop_event or self.stop_event
        log.info("opptune-daemon %s listening on %s, store %s", self.instance, self.endpoint,
                 self.config.database)
        next_flush = time.monotonic() + 1.0
        while not stop.is_set() and not self.stop_event.is_set():
            try:
                if self.link.poll(50):
                    self.handle_batch(self.link.recv_batch(self.batch_max))
                for outcome in self.fitter.outcomes():
                    self._on_fit(outcome)
                if time.monotonic() >= next_flush:
                    next_flush = time.monotonic() + 1.0
                    self.store.touch_agents(self.registry.take_dirty())
                    self._expire_jobs(time.time())
            except Exception:  # the loop outlives any one failure
                log.exception("error in the daemon loop; continuing")

    def start_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.serve, name="opptune-daemon", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.fitter.stop()
        try:
            self.store.touch_agents(self.registry.take_dirty())
        except Exception:
            log.exception("saving last-seen times at shutdown")
        self.link.close()
        self.store.close()
        log.info("opptune-daemon %s stopped", self.instance)

    # -- messages ---------------------------------------------------------------------------
    def send(self, identity: bytes, msg_type: str, body: dict[str, Any]) -> bool:
        return self.link.send(identity, protocol.make(msg_type, DAEMON_ID, body))

    def refuse(self, identity: bytes, code: str, message: str, ref: str | None) -> None:
        self.stats["refused"] += 1
        log.warning("refused %s from %r: %s", ref, identity, message)
        self.link.send(identity, protocol.error_reply(DAEMON_ID, code, message, ref))

    def handle_batch(self, batch: list[tuple[bytes, dict[str, Any]]]) -> None:
        """Handle messages in arrival order; results are stored together at the end."""
        now = time.time()
        results: list[ResultIn] = []
        acks: dict[bytes, list[str]] = {}
        touched: dict[str, tuple[int, str]] = {}
        for identity, msg in batch:
            try:
                if msg["type"] == "result":
                    self._take_result(identity, msg, now, results, acks, touched)
                    continue
                handler = self._handlers.get(msg["type"])
                if handler is None:
                    raise HandlerError("unexpected_type",
                                       f"the daemon does not accept '{msg['type']}' messages")
                handler(identity, msg)
            except HandlerError as exc:
                self.refuse(identity, exc.code, str(exc), msg.get("id"))
            except Exception as exc:
                log.exception("handling %s %s", msg.get("type"), msg.get("id"))
                self.refuse(identity, "internal", f"daemon error: {type(exc).__name__}: {exc}",
                            msg.get("id"))
        if results:
            self._commit_results(results, acks, touched, now)

    def _take_result(self, identity: bytes, msg: dict[str, Any], now: float,
                     results: list[ResultIn], acks: dict[bytes, list[str]],
                     touched: dict[str, tuple[int, str]]) -> None:
        agent = msg["agent"]
        if self.registry.seen(agent, identity, now) is None:
            raise HandlerError("unknown_agent", f"agent '{agent}' has not said hello")
        body = msg["body"]
        try:
            rec = RunRecord.from_dict(body["record"])
        except RecordError as exc:
            raise HandlerError("bad_record", f"invalid run record: {exc}") from None
        results.append(ResultIn(msg["id"], agent, body["job_id"], body["seq"], rec,
                                body["record"]))
        acks.setdefault(identity, []).append(msg["id"])
        prev = touched.get(body["job_id"])
        touched[body["job_id"]] = (body["of"], agent) if prev is None else prev

    def _commit_results(self, results: list[ResultIn], acks: dict[bytes, list[str]],
                        touched: dict[str, tuple[int, str]], now: float) -> None:
        try:
            self.store.insert_results(results, now)
        except Exception as exc:
            # Nothing is acked: every agent keeps its results and sends them again.
            log.exception("storing a batch of %d results failed", len(results))
            for identity in acks:
                self.link.send(identity, protocol.error_reply(
                    DAEMON_ID, "store_failed", f"results not stored: {exc}", None))
            return
        self.stats["results"] += len(results)
        self.stats["batches"] += 1
        for identity, ids in acks.items():
            self.send(identity, "ack", {"ids": ids})
        counts: dict[str, int] = {}
        for r in results:
            counts[r.job_id] = counts.get(r.job_id, 0) + 1
        for job_id, (of, agent) in touched.items():
            if job_id not in self._running_jobs and job_id not in self._complete_jobs:
                self._running_jobs.add(job_id)
                # an expired job whose agent came back with results runs again
                self.store.set_job_state(job_id, "running", now=now,
                                         only_from=("queued", "sent", "expired"))
            self._check_job(job_id, of, agent, counts.get(job_id, 0))

    def _check_job(self, job_id: str, of: int, agent: str, new: int) -> None:
        if job_id in self._complete_jobs:
            return
        prog = self._job_progress.get(job_id)
        if prog is None:
            prog = self._job_progress[job_id] = [0, 0]
            new = of  # unknown history (e.g. after a restart): look once
        prog[1] += new
        if prog[0] + prog[1] < of:
            return
        received = self.store.job_received(job_id)
        prog[0], prog[1] = received, 0
        if received < of:
            return
        self._complete_jobs.add(job_id)
        self._job_progress.pop(job_id, None)
        self._running_jobs.discard(job_id)
        ok, errors = self.store.job_failures(job_id)
        if not ok:
            reason = f"every run of the job failed: {'; '.join(errors) or 'no error text'}"
            self.store.set_job_state(job_id, "failed", reason)
            log.warning("job %s of %s failed: %s", job_id, agent, reason)
            return
        self.store.set_job_state(job_id, "done")
        log.info("job %s of %s done (%d runs, %d successful)", job_id, agent, received, ok)
        for group in self.store.job_groups(job_id):
            self.request_fit(group, agent=agent, job_id=job_id)

    def request_fit(self, group: Group, agent: str | None = None, job_id: str | None = None,
                    recommend_after: bool = True) -> None:
        """Queue a fit of ``group`` from its stored successful runs."""
        rows = self.store.group_runs(group)
        target, phys = None, None
        try:
            platform, order, freqs = self._grid_inputs(agent, group, rows)
            phys = physical_cores(platform, order)
            target = target_observations(platform, _axis(freqs), order=order)
        except Exception as exc:  # no target: the choice falls back to k-fold validation
            log.warning("no query grid for %s: %s", "/".join(group), exc)
        self.fitter.submit(FitRequest(group, rows, agent, job_id, recommend_after,
                                      target=target, phys_cores=phys))

    def _grid_inputs(self, agent: str | None, group: Group, rows: Any
                     ) -> tuple[dict[str, Any], list[int], list[int] | None]:
        """(platform description, cpu order, measured frequencies in kHz or None) for a group:
        a ``cluster<i>`` variant recommends within that cluster; frequencies come from the
        group's runs, so the candidate grid has a frequency axis exactly when the model does."""
        info = self.registry.get(agent) if agent else None
        platform = (info.platform if info else None) or self.store.platform(group.platform) or {}
        order = cluster_order(platform, group.variant)
        measured = [f for _, f, _ in rows]
        freqs = None
        if measured and all(f is not None and f == f for f in measured):
            freqs = sorted({int(round(f * 1000)) for f in measured})
        return platform, order, freqs

    # -- hello, heartbeat, applied, error ----------------------------------------------------
    def _on_hello(self, identity: bytes, msg: dict[str, Any]) -> None:
        agent, body, now = msg["agent"], msg["body"], time.time()
        if not agent:
            raise HandlerError("bad_agent", "hello needs a non-empty agent id")
        platform = body["platform"]
        pid = platform_id_of(agent, platform)
        self.store.save_platform(pid, platform, now)
        self.store.save_agent(agent, pid, list(body["workloads"]), body["agent_version"], now)
        info = self.registry.hello(agent, identity, pid, platform, list(body["workloads"]), now)
        log.info("hello from agent %s (platform %s, %d workloads)", agent, pid,
                 len(info.workloads))
        self.send(identity, "heartbeat", {"instance": self.instance})
        swept = self._resume_jobs(agent)
        if self.config.auto_sweep:
            for name in info.workload_names():
                if name not in swept:
                    self._auto_sweep(agent, name)

    def _resume_jobs(self, agent: str) -> set[str]:
        """At an agent's hello, resend each of its unfinished jobs (queued, sent, running or
        expired; the agent ignores one it already has); a job whose runs are all stored is
        completed instead. Returns the workloads that have a job in any state (a failed one
        is not sent again: it would fail the same way)."""
        workloads = set()
        for j in self.store.jobs():
            if j["agent"] != agent:
                continue
            workloads.add(j["workload"])
            if j["state"] in FINAL_JOB_STATES and j["state"] != "expired":
                continue
            if j["received"] >= j["expected"]:
                self._check_job(j["job_id"], j["expected"], agent, 0)
                continue
            job = self.store.job(j["job_id"])
            if job is not None:
                log.info("resending unfinished job %s (%s) to %s", j["job_id"], j["state"],
                         agent)
                self._send_job(agent, {k: job[k] for k in ("job_id", "workload", "size",
                                                           "points", "reps", "warmup")},
                               save=False)
        return workloads

    def _auto_sweep(self, agent: str, workload: str) -> None:
        """Sweep ``workload`` as configured; on a board that cannot honour the configured
        frequency grid, sweep cores only and say why."""
        try:
            self.start_sweep(agent, [workload])
        except HandlerError as exc:
            log.warning("sweep of %s for %s as configured: %s; sweeping cores only at the "
                        "board's own frequency", workload, agent, exc)
            self.start_sweep(agent, [workload], frequency_grid="none")

    def _expire_jobs(self, now: float) -> None:
        """Expiry policy: a queued, sent or running job expires when its agent has not been
        seen for ``job_expiry_s`` (counted from this daemon's start at the earliest, so a
        restart does not expire the jobs of agents about to reconnect)."""
        limit = self.config.job_expiry_s
        for j in self.store.active_jobs():
            info = self.registry.get(j["agent"])
            last = max(info.last_seen if info else 0.0, self.started)
            if now - last <= limit:
                continue
            reason = (f"agent {j['agent']} not seen for {now - last:.0f} s (job_expiry_s = "
                      f"{limit:g}); the job is sent again when the agent says hello")
            if self.store.set_job_state(j["job_id"], "expired", reason, now=now,
                                        only_from=ACTIVE_JOB_STATES):
                self._running_jobs.discard(j["job_id"])
                log.warning("job %s expired: %s", j["job_id"], reason)

    def start_sweep(self, agent: str, workloads: list[str] | None = None,
                    size: str | None = None, reps: int | None = None,
                    warmup: int | None = None, max_cores: int | None = None,
                    frequency_grid: str | int | None = None, per_cluster: bool | None = None,
                    frequencies: list[int] | None = None) -> list[dict[str, Any]]:
        """Plan and send one sweep job per workload to ``agent``; returns for each job its
        job_id, workload, size, n_points, reps. Options left None take ``[sweep]``'s; a grid
        the platform cannot honour raises HandlerError("bad_args") before anything is sent."""
        info = self.registry.get(agent)
        if info is None:
            raise HandlerError("unknown_agent", f"no agent '{agent}'")
        if info.identity is None:
            raise HandlerError("agent_offline", f"agent '{agent}' has not connected to this "
                                                "daemon instance")
        names = workloads if workloads else info.workload_names()
        offered = set(info.workload_names())
        bad = [w for w in names if w not in offered]
        if bad:
            raise HandlerError("unknown_workload", f"agent '{agent}' does not offer "
                                                   f"{', '.join(bad)}; it offers "
                                                   f"{', '.join(sorted(offered)) or 'nothing'}")
        self._check_sweep_args(agent, info, names, size, max_cores, frequencies)
        ids: list[dict[str, Any]] = []
        jobs: list[dict[str, Any]] = []
        for name in names:
            job_size = size
            if job_size is None:
                sizes = info.workload_sizes(name)
                job_size = (self.config.sweep.size if not sizes or self.config.sweep.size
                            in sizes else sizes[0])
            try:
                job = plan_sweep(info.platform, name, self.config.sweep, size=job_size,
                                 reps=reps, warmup=warmup, max_cores=max_cores,
                                 frequencies=frequencies, frequency_grid=frequency_grid,
                                 per_cluster=per_cluster)
            except (PlanError, ValueError) as exc:
                raise HandlerError("bad_args", f"cannot plan a sweep of {name} for {agent}: "
                                               f"{exc}") from None
            jobs.append(job)
        for job in jobs:
            self._send_job(agent, job)
            ids.append({"job_id": job["job_id"], "workload": job["workload"],
                        "size": job["size"], "n_points": len(job["points"]),
                        "reps": job["reps"]})
        return ids

    @staticmethod
    def _check_sweep_args(agent: str, info: Any, names: list[str], size: str | None,
                          max_cores: int | None, frequencies: list[int] | None) -> None:
        """Refuse, before anything is sent, a size, core count or frequency the agent's
        catalogue (its hello) or board does not offer."""
        board = board_name(info.platform, info.platform_id)
        if size is not None:
            for name in names:
                sizes = info.workload_sizes(name)
                if sizes and size not in sizes:
                    raise HandlerError("unknown_size", f"agent '{agent}' has no size "
                                                       f"'{size}' for {name}; it offers "
                                                       f"{', '.join(sizes)}")
        n_cpus = len(sweep_order(info.platform))
        if max_cores and max_cores > n_cpus:
            raise HandlerError("bad_args", f"max_cores {max_cores} is more than the {n_cpus} "
                                           f"cpus of board {board}; use 1..{n_cpus} (0 = all)")
        if frequencies:
            bad, offered, reason = unoffered_frequencies(info.platform, frequencies)
            if bad:
                raise HandlerError("bad_args", f"board {board} cannot run at "
                                               f"{', '.join(map(str, bad))} kHz: "
                                               + (f"it offers {', '.join(map(str, offered))} kHz"
                                                  if offered else reason))

    def _send_job(self, agent: str, job: dict[str, Any], save: bool = True) -> None:
        """Send a job; it is stored as "sent", or "queued" when it could not be delivered
        (then it goes out at the agent's next hello)."""
        info = self.registry.get(agent)
        msg = protocol.make("job", DAEMON_ID, job)
        sent = info is not None and info.identity is not None and \
            self.link.send(info.identity, msg)
        if sent:
            # the agent's refusal (an ``error``) names this message id
            self._job_msgs[msg["id"]] = job["job_id"]
        if save:
            self.store.save_job(agent, job, time.time(), state="sent" if sent else "queued")
        elif sent:
            self.store.set_job_state(job["job_id"], "sent", only_from=("queued", "expired"))
        if not sent:
            log.warning("job %s for %s not delivered; it is resent at the agent's next hello",
                        job["job_id"], agent)
        else:
            log.info("sent job %s (%s, %d points x %d reps) to %s", job["job_id"],
                     job["workload"], len(job["points"]), job["reps"], agent)

    def _on_heartbeat(self, identity: bytes, msg: dict[str, Any]) -> None:
        info = self.registry.seen(msg["agent"], identity, time.time())
        if info is not None:
            if "outbox" in msg["body"]:
                info.outbox = msg["body"]["outbox"]
            if "instance" in msg["body"]:
                info.instance = msg["body"]["instance"]
        self.send(identity, "heartbeat", {"instance": self.instance})

    def _on_error(self, identity: bytes, msg: dict[str, Any]) -> None:
        self.registry.seen(msg["agent"], identity, time.time())
        b = msg["body"]
        log.warning("agent %s reports error %s about %s: %s", msg["agent"], b["code"],
                    b.get("ref"), b["message"])
        ref = b.get("ref")
        job_id = self._job_msgs.get(ref) if ref else None
        if job_id is None and ref and ref.startswith("job-"):
            job_id = ref  # an agent may name the job itself
        if job_id is not None:
            reason = f"agent {msg['agent']} refused the job: {b['message']} ({b['code']})"
            if self.store.set_job_state(job_id, "failed", reason,
                                        only_from=ACTIVE_JOB_STATES + ("expired",)):
                self._running_jobs.discard(job_id)
                self._complete_jobs.add(job_id)
                log.warning("job %s failed: %s", job_id, reason)

    def _on_applied(self, identity: bytes, msg: dict[str, Any]) -> None:
        agent, body, now = msg["agent"], msg["body"], time.time()
        if self.registry.seen(agent, identity, now) is None:
            raise HandlerError("unknown_agent", f"agent '{agent}' has not said hello")
        rec = self.store.recommendation(body["config_id"])
        if rec is None:
            raise HandlerError("unknown_config", f"no configuration '{body['config_id']}'")
        if body["ok"]:
            stored: list[ResultIn] = []
            for i, raw in enumerate(body.get("records") or []):
                try:
                    stored.append(ResultIn(f"{msg['id']}:{i}", agent, body["config_id"], i,
                                           RunRecord.from_dict(raw), raw))
                except RecordError as exc:
                    log.warning("applied %s: verification record %d ignored: %s",
                                body["config_id"], i, exc)
            if stored:
                self.store.insert_results(stored, now)
            verified = body.get("time_s")
            if verified is None:
                times = [r.record.time_s for r in stored if r.record.ok and r.record.time_s
                         is not None]
                verified = statistics.median(times) if times else None
            state, note = verdict(verified, rec.get("predicted_time_s"),
                                  rec.get("predicted_lower_s"), rec.get("predicted_upper_s"))
            self.store.update_recommendation(body["config_id"], state, now,
                                             verified_time_s=verified, error=note)
            log.info("config %s measured by %s: %s s (predicted %s s): %s%s", body["config_id"],
                     agent, verified, rec.get("predicted_time_s"), state,
                     f", {note}" if note else "")
            # Verification runs are measurements too: refit, but do not push again.
            self.request_fit(Group(rec["platform"], rec["workload"], rec["input"],
                                   rec["variant"]), recommend_after=False)
        else:
            error = body.get("error") or "refused without a reason"
            self.store.update_recommendation(body["config_id"], "refused", now, error=error)
            log.warning("config %s refused by %s: %s", body["config_id"], agent, error)
        self.send(identity, "ack", {"ids": [msg["id"]]})

    # -- fits and recommendations ------------------------------------------------------------
    def _on_fit(self, out: FitOutcome) -> None:
        req = out.request
        name = "/".join(req.group)
        if out.error or out.model is None:
            log.warning("no model for %s: %s", name, out.error)
            self._fit_failed(req.group, f"no model: {out.error or 'the fit gave none'}",
                             req.agent, req.job_id)
            return
        self._fit_errors.pop(req.group, None)
        d = out.description
        self.store.save_fit(req.group, d.get("model", out.model.name), d.get("params", {}),
                            d.get("quality", {}), out.runners_up, time.time())
        self.stats["fits"] += 1
        log.info("fitted %s: %s in %.3f s", name, d.get("model"), out.seconds)
        if req.recommend and req.agent and self.config.auto_recommend:
            self.push_recommendation(req.agent, req.group, out.model, req.job_id, req.rows)

    def _fit_failed(self, group: Group, error: str, agent: str | None,
                    job_id: str | None) -> None:
        self._fit_errors[group] = {"group": group.as_dict(), "error": error, "agent": agent,
                                   "job_id": job_id, "at": time.time()}

    def push_recommendation(self, agent: str, group: Group, model: Any,
                            job_id: str | None = None, rows: Any = None
                            ) -> dict[str, Any] | None:
        """Recommend (cores, frequency) for ``group`` from ``model`` and push it to ``agent``.

        Candidates: cores 1..n of the group's cpu order (the board's, or its cluster's), and,
        when the group was measured at two or more frequencies, every frequency the policies
        of the candidate cpus offer. A group measured at one frequency is recommended at it."""
        info = self.registry.get(agent)
        if rows is None:
            rows = self.store.group_runs(group)
        platform, order, freqs = self._grid_inputs(agent, group, rows)
        try:
            r = recommend(model, platform, self.config.tolerance, _axis(freqs), order=order)
        except ValueError as exc:
            log.warning("no recommendation for %s: %s", "/".join(group), exc)
            self._fit_failed(group, f"no recommendation: {exc}", agent, job_id)
            return None
        if r.freq_khz is None and freqs and len(freqs) == 1:
            r.freq_khz = r.best_freq_khz = freqs[0]  # measured there only: keep it there
        config_id = "cfg-" + uuid.uuid4().hex[:20]
        body = {"config_id": config_id, "workload": group.workload, "size": group.input,
                "cpus": r.cpus, "threads": r.threads, "freq_khz": r.freq_khz,
                "reps": self.config.verify_reps, "predicted_time_s": r.predicted_time_s}
        if group.variant:
            body["variant"] = group.variant  # verification runs join the group they came from
        sent = info is not None and info.identity is not None and self.send(
            info.identity, "config", body)
        rec = {"config_id": config_id, "agent": agent, **group.as_dict(), "cores": r.cores,
               "cpus": r.cpus, "threads": r.threads, "freq_khz": r.freq_khz,
               "predicted_time_s": r.predicted_time_s, "predicted_lower_s": r.lower_s,
               "predicted_upper_s": r.upper_s, "model": getattr(model, "name", None),
               "state": "pushed" if sent else "unsent"}
        self.store.save_recommendation(rec, time.time())
        if sent:
            self.stats["configs_pushed"] += 1
        log.info("recommend %s for %s: %d cores at %s, predicted %.4g s (best %d cores, "
                 "%.4g s)%s", config_id, "/".join(group), r.cores, freq_text(r.freq_khz),
                 r.predicted_time_s, r.best_cores, r.best_time_s, "" if sent else " (not sent)")
        return rec

    # -- queries -----------------------------------------------------------------------------
    def _on_query(self, identity: bytes, msg: dict[str, Any]) -> None:
        what = msg["body"]["what"]
        args = msg["body"].get("args") or {}
        if what == "status":
            data = self.status()
        elif what == "sweep":
            data = {"jobs": self._query_sweep(args)}
        elif what == "fit":
            data = {"queued": self._query_fit(args)}
        else:
            raise HandlerError("unknown_query", f"unknown query '{what[:40]}'; known: status, "
                                                "sweep, fit")
        self.send(identity, "reply", {"ref": msg["id"], "data": data})

    def _query_sweep(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        agent = args.get("agent")
        if not isinstance(agent, str):
            raise HandlerError("bad_args", "sweep needs args.agent (an agent id)")
        workloads = args.get("workloads")
        if isinstance(workloads, str):
            workloads = [workloads]
        if workloads is not None and not (isinstance(workloads, list)
                                          and all(isinstance(w, str) for w in workloads)):
            raise HandlerError("bad_args", "sweep args.workloads must be a list of names")
        ints = {}
        for key in ("reps", "warmup", "max_cores"):
            v = args.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0
                                  or (key == "reps" and v < 1)):
                raise HandlerError("bad_args", f"sweep args.{key} must be a non-negative "
                                               "integer (reps >= 1)")
            ints[key] = v
        size = args.get("size")
        if size is not None and not isinstance(size, str):
            raise HandlerError("bad_args", "sweep args.size must be text")
        grid = args.get("frequency_grid")
        if grid is not None:
            try:
                grid = SweepDefaults.parse_grid(grid, "args.frequency_grid")
            except ConfigError as exc:
                raise HandlerError("bad_args", f"sweep {exc}") from None
        per_cluster = args.get("per_cluster")
        if per_cluster is not None and not isinstance(per_cluster, bool):
            raise HandlerError("bad_args", "sweep args.per_cluster must be true or false")
        freqs = args.get("frequencies")
        if freqs is not None and not (isinstance(freqs, list) and all(
                isinstance(f, int) and not isinstance(f, bool) and f > 0 for f in freqs)):
            raise HandlerError("bad_args", "sweep args.frequencies must be a list of kHz "
                                           "integers")
        return self.start_sweep(agent, workloads, size=size, frequency_grid=grid,
                                per_cluster=per_cluster, frequencies=freqs, **ints)

    def _query_fit(self, args: dict[str, Any]) -> list[dict[str, str]]:
        """Refit the stored groups matching args.platform/workload/input/variant (each
        optional); with args.recommend and args.agent, push a recommendation afterwards."""
        queued = []
        for g in self.store.groups():
            if any(args.get(k) not in (None, getattr(g, k)) for k in Group._fields):
                continue
            self.request_fit(g, agent=args.get("agent") if args.get("recommend") else None)
            queued.append(g.as_dict())
        return queued

    def status(self) -> dict[str, Any]:
        """The daemon's state for ``opptune status``; the shape is documented in the README
        (every key present every time, null for a missing value)."""
        now = time.time()
        agents = [{"id": a.agent_id, "board": board_name(a.platform, a.platform_id),
                   "platform": a.platform_id,
                   "alive": a.alive(self.config.agent_timeout_s, now),
                   "last_seen_s": round(now - a.last_seen, 3) if a.last_seen else None,
                   "outbox": a.outbox} for a in self.registry.all()]
        boards = {a["id"]: a["board"] for a in agents}
        fits = [{"group": {k: f[k] for k in ("platform", "workload", "input", "variant")},
                 "model": f["model"], "params": f["params"], "quality": f["quality"],
                 "runners_up": f["runners_up"]} for f in self.store.fits()]
        recs = [{"config_id": r["config_id"], "agent": r["agent"],
                 "group": {k: r[k] for k in ("platform", "workload", "input", "variant")},
                 "cores": r["cores"], "cpus": r["cpus"], "freq_khz": r["freq_khz"],
                 "predicted_time_s": r["predicted_time_s"],
                 "predicted_lower_s": r["predicted_lower_s"],
                 "predicted_upper_s": r["predicted_upper_s"], "state": r["state"],
                 "verified_time_s": r["verified_time_s"],
                 "off_pct": off_pct(r["verified_time_s"], r["predicted_time_s"])
                 if r["state"] == "off" else None, "error": r["error"]}
                for r in self.store.recommendations()]
        jobs = [{"job_id": j["job_id"], "agent": j["agent"],
                 "board": boards.get(j["agent"], j["agent"]), "workload": j["workload"],
                 "size": j["size"], "expected": j["expected"], "received": j["received"],
                 "state": j["state"], "reason": j["reason"], "created": j["created"],
                 "updated": j["updated"]} for j in self.store.jobs()]
        fit_errors = [{k: e[k] for k in ("group", "error", "agent", "job_id")}
                      for _, e in sorted(self._fit_errors.items())]
        return {
            "daemon": {"instance": self.instance, "uptime_s": round(now - self.started, 3),
                       "endpoint": self.endpoint, "database": self.config.database,
                       "stats": dict(self.stats)},
            "agents": agents,
            # What each agent's board offers (knob availability, topology), for operators.
            "platforms": {a["platform"]: self.store.platform(a["platform"])
                          for a in agents if a["platform"]},
            "workloads": self.store.workloads(),
            "runs": self.store.run_counts(),
            "jobs": jobs,
            "fits": fits,
            "fit_errors": fit_errors,
            "recommendations": recs,
        }


def freq_text(freq_khz: int | None) -> str:
    """A frequency for messages; None is the governor's choice, not "None kHz"."""
    return "the governor's frequency" if freq_khz is None else f"{freq_khz} kHz"


def verdict(measured: float | None, predicted: float | None, lower: float | None,
            upper: float | None) -> tuple[str, str | None]:
    """A recommendation's state after its verification runs: "verified" only when the measured
    time lies within the prediction interval stored with it; otherwise "off" with how far
    off, relative to the prediction ("failed" when nothing was measured)."""
    if measured is None:
        return "failed", "no verification run gave a time"
    if lower is not None and upper is not None and lower <= measured <= upper:
        return "verified", None
    if not predicted:
        return "off", "no prediction interval to compare with"
    pct = (measured - predicted) / predicted * 100
    interval = (f"interval {lower:.4g}..{upper:.4g} s" if lower is not None and upper is not None
                else "no interval")
    return "off", (f"off by {pct:+.1f} % (measured {measured:.4g} s, predicted "
                   f"{predicted:.4g} s, {interval})")


def off_pct(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return round((measured - predicted) / predicted * 100, 2)


def _axis(freqs: list[int] | None) -> list[int] | None:
    """Measured frequencies when they form a frequency axis (two or more), else None."""
    return freqs if freqs and len(freqs) >= 2 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opptune-daemon", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="daemon TOML file (default /etc/opptune/daemon.toml)")
    parser.add_argument("--bind", help="ZeroMQ endpoint to bind, e.g. tcp://0.0.0.0:5555, "
                                       "tcp://127.0.0.1:0 (random port), ipc:///run/opptune.sock")
    parser.add_argument("--database", help="SQLite file of the store")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument("--auto-sweep", action="store_true", default=None,
                        help="send a sweep to every agent that says hello")
    parser.add_argument("--endpoint-file", help="write the bound endpoint to this file once "
                                                "listening (useful with a random port)")
    args = parser.parse_args(argv)
    try:
        config = load_daemon_config(args.config, bind=args.bind, database=args.database,
                                    log_level=args.log_level, auto_sweep=args.auto_sweep)
    except ConfigError as exc:
        print(f"opptune-daemon: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, config.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        daemon = Daemon(config)
    except BindError as exc:
        print(f"opptune-daemon: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"opptune-daemon: cannot start: {exc}", file=sys.stderr)
        return 1

    def _stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        daemon.stop_event.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.endpoint_file:
        with open(args.endpoint_file + ".tmp", "w") as fh:
            fh.write(daemon.endpoint + "\n")
        import os
        os.replace(args.endpoint_file + ".tmp", args.endpoint_file)
    try:
        daemon.serve()
    finally:
        daemon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
