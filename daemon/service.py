"""opptune-daemon: the central loop. Receives agents' messages on one ROUTER socket, stores
results idempotently, plans sweeps, fits models off the ingest path and pushes recommended
configurations back.

The loop and ingest live here; the other jobs are parts with one job each: jobs.py (job
lifecycle), sweeps.py (planning sweeps), recommender.py (fits, recommendations, verification),
queries.py (the operator's queries and the status), query_worker.py (a query's
model fits, off the loop).

Ingest is batched: the loop drains whatever is waiting (up to ``batch_max`` messages), validates
every result, inserts the batch in one transaction and only after the commit sends one ``ack``
per agent listing the ids. A result whose id is already stored is acked again (the agent lost
the first ack) but stored once.
"""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import signal
import socket
import sqlite3
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import zmq

from .. import __version__
from ..shared import protocol
from ..shared.config import (DEFAULT_DAEMON_CONFIG, ConfigError, DaemonConfig,
                             is_database_url, load_daemon_config, redact_url)
from ..shared.cpus import format_cpu_list
from ..shared.curve import KeyFileError, curve_enabled, ensure_keypair, is_loopback
from ..shared.records import (RecordColumns, RecordError, RunRecord, columns_of,
                              program_of, record_columns)
from ..shared.sd_notify import notify
from ..shared.standing import key_of, overridden, with_entry
from . import queries
from .service_args import build_parser
from .errors import HandlerError
from .fitter import Fitter
from .keyring import KeyRing
from .jobs import ACTIVE_JOB_STATES, FINAL_JOB_STATES, JobTracker, closing_point
from .link import Link
from .planner import is_tune_job
from .query_worker import Deferred, QueryWorker
from .recent_requests import RecentRequests, is_change
from . import recovery
from .recovery import RECOVER_SINCE, RECOVERED, Recovery, recovered_job
from .recommender import Recommender, off_pct, verdict
from ..shared.refusals import RefusalLog
from .registry import Registry, claim_text, platform_id_of, standing_of
from .remeasure import Remeasure
from .store import Group, open_store
from .drift import Drift
from .sweeps import Sweeps
from .tuning import Tuner

log = logging.getLogger("opptune.daemon")

# how long before the drift of its program's change a run of the old program is said received
# (a millisecond: the drift counts runs received from its time on)
STALE_PROGRAM_BEFORE_S = 1e-3
# jobs whose old-program runs were logged, remembered so each is logged once: a job's runs
# arrive together (one outbox replay), so the newest few suffice and a long-lived daemon's
# memory stays bounded; one that falls out is at worst logged again
STALE_JOBS_KEPT = 1024
STORE_FAILURE_LOG_S = 60.0  # a store that keeps failing (disk full) logs one line a minute
# how long a scrape of /metrics waits for the loop's counts (the loop polls every 50 ms; one
# held up by a large batch is answered with the counts of the scrape before)
METRICS_WAIT_S = 2.0

DAEMON_ID = "daemon"
# below this a hello may not fit: about 5 KB with one workload and the doctor's report here
HELLO_ROOM_BYTES = 64 << 10


# an issued job as results are checked against it: agent, workload, input, and its points as
# (cpus, threads, variant), the cpus both as sent and sorted
_Issued = tuple[str, str, str, frozenset[tuple[tuple[int, ...], Any, str]] | None]


def reachable_endpoint(endpoint: str) -> str:
    """``endpoint`` as other hosts name it: a wildcard address (tcp://0.0.0.0:5555, what a bind
    to tcp://*:5555 reports; tcp://[::]:5555 with IPv6) becomes this host's name."""
    for wildcard in ("tcp://0.0.0.0:", "tcp://[::]:"):
        if endpoint.startswith(wildcard):
            return f"tcp://{socket.gethostname()}:{endpoint[len(wildcard):]}"
    return endpoint


def _unknown_job(job_id: str, agent: str, job: _Issued | None) -> str:
    head = f"job '{job_id[:80]}' was not issued to agent '{agent}'; its results are not stored"
    if job is not None:
        return head  # another agent's
    return (f"{head} (a job of a store this daemon no longer has: replaced, or restored from "
            f"a backup? 'opptune recover --agent {agent[:80]}' on the daemon's host stores "
            "them)")


def _wrong_group(rec: RecordColumns, platform: str, job: _Issued, job_id: str) -> str:
    """Why a result does not belong to the group its job measures."""
    if rec.platform != platform:
        what = f"platform '{rec.platform[:80]}', not the agent's '{platform}'"
    elif rec.workload != job[1] or rec.input != job[2]:
        what = (f"workload '{rec.workload[:80]}' input '{rec.input[:80]}', not the job's "
                f"'{job[1]}' input '{job[2]}'")
    else:
        # a set: a point matches in any order of its cpus (Daemon._issued)
        cpus = format_cpu_list(rec.cpus)
        cpus = cpus if len(cpus) <= 80 else cpus[:77] + "..."
        twice = ", a cpu twice" if len(set(rec.cpus)) < len(rec.cpus) else ""
        what = (f"cpus {cpus}{twice} with {rec.threads} threads variant "
                f"'{rec.variant[:80]}', none of the job's points")
    return f"a result of job '{job_id[:80]}' names {what}; it is not stored"


def _runs_config(raw: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether a verification record (as sent) measures the pushed configuration."""
    cpus = raw.get("cpus")
    return (raw.get("platform") == config["platform"] and raw.get("workload") ==
            config["workload"] and raw.get("input") == config["input"]
            and raw.get("variant", "") == config["variant"]
            and raw.get("threads") == config["threads"] and isinstance(cpus, list)
            and all(type(c) is int for c in cpus) and sorted(cpus) == sorted(config["cpus"]))


def _refusal(exc: Exception) -> tuple[str, str]:
    """The (code, message) of the error reply that answers a query which raised ``exc``."""
    if isinstance(exc, HandlerError):
        return exc.code, str(exc)
    return "internal", f"daemon error: {type(exc).__name__}: {exc}"


def _forgotten(request: str, recent: RecentRequests, started: float) -> str:
    """Why a request asked about again is not answered."""
    return (f"this daemon does not remember request {request[:64]} (it keeps the answers of "
            f"its last {recent.max_count} change requests, each for {recent.max_age_s:g} s, "
            f"since it started at {time.strftime('%H:%M:%S', time.localtime(started))}): "
            "nothing was done now")


class BindError(RuntimeError):
    """The daemon cannot listen on its endpoint; the message says why and what to do."""


class PathError(BindError):
    """A path of the configuration (``key``) the daemon cannot create or open; the message
    says which path, why, and what to give instead."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _path_error(key: str, path: Any, exc: Exception, what: str,
                fix: str | None = None) -> PathError:
    """``fix``: what is wrong with the path and what to do, where known (else the advice is
    generic)."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return PathError(key, f"({path}): cannot {what}: {why}; " + (
        fix or "give a path the daemon's user may create and write"))


def _damaged(exc: Exception, url: bool = False) -> str | None:
    """What to do with a database file SQLite cannot read (not one, or damaged); None for
    other errors. Its path is writable: the generic advice (a writable path) misled."""
    from .store.sqlite import NotAStore
    if isinstance(exc, NotAStore) and url:
        return ("the daemon left it as it is: give the store a database of its own (createdb "
                "opptune, its URL as --database or 'database' in the configuration)")
    if isinstance(exc, NotAStore):
        return ("the daemon left it as it is: give the store a path of its own (--database, "
                "or 'database' in the configuration; a new path starts an empty store)")
    if getattr(exc, "sqlite_errorname", "") not in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return None
    return ("the file is damaged or not an opptune store, and the daemon left it as it is: "
            "restore it from a backup, or move it aside (or give another --database) to start "
            "an empty store")


def _remove_made(paths: list[Path]) -> None:
    """Remove what a start made (files first, then their directory, only if empty)."""
    for p in paths:
        try:
            p.rmdir() if p.is_dir() else p.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("removing %s, made by this start: %s", p, exc)


__all__ = ["ACTIVE_JOB_STATES", "FINAL_JOB_STATES", "BindError", "Daemon", "HandlerError",
           "PathError",
           "main", "off_pct", "verdict"]


class Daemon:
    """The daemon; ``serve()`` runs the loop until ``stop()`` (or the given event) is set.

    Tests run it in a thread (``start_thread``); ``main`` runs it as a process."""

    def __init__(self, config: DaemonConfig, context: Any = None, batch_max: int = 4096):
        """``batch_max``: results handled and committed together at most (a ``results`` frame
        counts its items). Larger batches rewrite fewer index pages per result (SQLite: 11 us
        per row at 500, 7 at 4,000), but a batch that takes every result in flight leaves the
        loop idle while the agents, all waiting for their acks, send the next ones: 500 agents
        x 16 in flight, 45 s each, alternating: 8,192 gave 60,600-61,000 results/s, 4,096
        64,300-69,200, 2,048 68,400-69,600, at the same 13.3-14.6 us per result on the loop's
        thread. At about 14 us per result, 4,096 bound one batch to about 60 ms of the loop."""
        self.config = config
        self.instance = uuid.uuid4().hex[:12]
        self.started = time.time()
        self._clashes_saved = False
        self.batch_max = batch_max
        self.keyring: KeyRing | None = None
        self._auth: Any = None
        self._own_ctx: zmq.Context | None = None
        # CURVE's key pair is made before the bind (the socket is bound with its secret key);
        # what this start made of the keys directory is removed again where the bind fails
        made: list[Path] = []
        curve = None
        if curve_enabled(config.curve, config.bind):
            keys = config.keys_path()
            made = [p for p in (*(keys / f"{name}.{ext}" for name in ("server", "operator")
                                  for ext in ("key", "pub")), keys, *keys.parents)
                    if not p.exists()]
            curve = self._curve_keys()
        if curve is not None:
            # The ZAP authenticator is per context: a daemon of its own keeps two daemons in
            # one process (tests) apart.
            from zmq.auth.thread import ThreadAuthenticator
            context = self._own_ctx = zmq.Context()
            self._auth = ThreadAuthenticator(context, log=logging.getLogger("opptune.daemon.zap"))
            self._auth.start()
            # Any key may finish the handshake (so that a new board's key can be recorded
            # for approval); the loop refuses every message of a key not accepted.
            self._auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
        self.stats = {"results": 0, "duplicates_acked": 0, "batches": 0, "refused": 0,
                      "fits": 0, "fit_errors": 0, "configs_pushed": 0,
                      "refused_unknown_job": 0, "refused_too_large": 0,
                      "refused_rate_limited": 0, "jobs_held": 0, "results_frames": 0,
                      "requests_asked_again": 0}
        # Bind first: a daemon that cannot listen (address in use, bad endpoint) stops before
        # it creates a database file or directory (and leaves no key pair it made).
        try:
            self.link = Link(config.bind, context, curve=curve,
                             max_message_bytes=config.max_message_bytes,
                             rate=config.rate_limit_per_s, burst=config.rate_limit_burst,
                             stats=self.stats)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EADDRINUSE:
                why = ("the address is in use by another process: stop it or choose another "
                       "--bind (or 'bind' in the configuration)")
            elif exc.errno in (errno.EADDRNOTAVAIL, errno.ENODEV) and \
                    config.bind.startswith("tcp://"):
                # zmq says 'Cannot assign requested address' / 'No such device': the daemon
                # listens on an address of its own host (the agents name the host's address)
                why = (f"{zmq.strerror(exc.errno)}: the host in it is not an address of this "
                       "machine; bind to one of its own addresses, or tcp://0.0.0.0:PORT for "
                       "all of them")
            else:
                why = (f"{zmq.strerror(exc.errno)}; give an endpoint such as "
                       "tcp://0.0.0.0:5555 or ipc:///run/opptune.sock")
            self._stop_auth()
            _remove_made(made)
            raise BindError(f"cannot listen on {config.bind}: {why}") from None
        # failed batch commits (a full disk): logged once a minute, with their count
        self._store_failures = 0  # batches failed since the last one stored
        self._store_failure_logged = -STORE_FAILURE_LOG_S
        self._store_failure_told = False  # a line of this run of failures was logged
        self._loop_error: tuple[str, float] = ("", 0.0)  # last error the loop logged, when
        # errors agents report: one line per agent per 10 s (a flood writes no more)
        self._agent_errors = RefusalLog(log, line="agent %s reports: %s (%s)%s",
                                        more="more errors from this agent")
        self._job_owner: dict[str, _Issued] = {}  # issued job id -> what it measures (cache)
        # jobs whose old program's runs were logged, oldest first (STALE_JOBS_KEPT)
        self._stale_jobs_told: dict[str, None] = {}
        self.metrics, self.metrics_server = None, None
        try:
            if config.metrics_endpoint:
                self._serve_metrics(config.metrics_endpoint)
            try:
                self.store = open_store(config.database)
            except (OSError, sqlite3.Error) as exc:
                from .store.sqlite import NotAStore, why_not_writable
                if is_database_url(config.database):
                    if isinstance(exc, NotAStore):
                        raise _path_error("database", redact_url(config.database), exc,
                                          "use the database", _damaged(exc, url=True)) from None
                    raise  # PostgreSQL's own message says what to check
                raise _path_error("database", config.database, exc,
                                  "open the SQLite database",
                                  _damaged(exc) or why_not_writable(config.database)) from None
            self.store.accept_load = config.accept_load
        except Exception:
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.link.close()
            self._stop_auth()
            raise
        self.endpoint = self.link.endpoint
        if config.curve == "off" and not is_loopback(config.bind):
            log.warning("CURVE is off (curve = \"off\") on %s, an address other machines "
                        "reach: agents' messages travel unencrypted and unauthenticated, so "
                        "anyone who reaches the port can read them or send results as any "
                        "agent; set curve = \"auto\" (CURVE on every non-loopback link) or "
                        "bind a loopback address", config.bind)
        self._result_row = self.store.result_row
        # the store tells this daemon which agents the others of a fleet hold
        self.registry = Registry(config.agent_timeout_s, self.store, self.instance,
                                 self.keyring, self.started)
        for a in self.store.agents():
            self.registry.load(a["id"], a["platform"], self.store.platform(a["platform"]) or {},
                               a["workloads"], a["last_seen"], a["doctor"], a["doctor_at"],
                               a["agent_version"])
        self.fitter = Fitter().start()
        self.query_worker = QueryWorker()
        self.recent = RecentRequests()  # change requests' answers, for a client asking again
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        # what became of the store's file when it was deleted or replaced under the daemon
        # (store.gone): nothing is acked from then on, and the daemon stops
        self.store_lost: str | None = None
        self.recovery = Recovery(self.store)  # agents open to results of jobs the store lacks
        self.recommender = Recommender(config, self.store, self.registry, self.fitter,
                                       self.send, self.stats)
        self.recommender.owner = self.instance
        self.jobs = JobTracker(config, self.store, self.registry, self.link, DAEMON_ID,
                               self.started, self._job_done)
        self.jobs.stats = self.stats
        self.sweeps = Sweeps(config, self.registry, self.jobs)
        self.remeasure = Remeasure(config, self.store, self.jobs, self.registry,
                                   fit=self._fit_job)
        self.drift = self.recommender.drift = Drift(config, self.store, self.sweeps)
        self.tuning = Tuner(self)
        # every heartbeat says what this daemon takes: "results" frames of up to this many
        # items within this many bytes (an agent sends them only to a daemon that says so)
        self._welcome = {"instance": self.instance, "results_max": protocol.MAX_RESULTS_ITEMS,
                         "max_message_bytes": config.max_message_bytes}
        self._handlers: dict[str, Callable[[bytes, dict[str, Any]], None]] = {
            "hello": self._on_hello, "heartbeat": self._on_heartbeat,
            "applied": self._on_applied, "error": self._on_error, "query": self._on_query,
        }

    def _curve_keys(self) -> tuple[str, str]:
        """The server key pair (made on first start), the operator's, and the key ring."""
        keys = self.config.keys_path()
        try:
            server = ensure_keypair(keys / "server.key")
            operator = ensure_keypair(keys / "operator.key")
            self.keyring = KeyRing(keys / "agents.json", operator[0])
        except KeyFileError as exc:
            raise BindError(str(exc)) from None
        except OSError as exc:  # the directory itself cannot be made
            raise _path_error("keys_dir", keys, exc, "make the keys directory") from None
        log.info("CURVE on: server public key in %s (agents' daemon_public_key)",
                 keys / "server.pub")
        return server

    def _stop_auth(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_ctx is not None:
            self._own_ctx.term()
            self._own_ctx = None

    def _serve_metrics(self, endpoint: str) -> None:
        from .metrics import DaemonMetrics, MetricsError, MetricsServer
        metrics = self.metrics = DaemonMetrics(self.stats)
        try:
            self.metrics_server = MetricsServer(
                endpoint, lambda: metrics.fresh_exposition(METRICS_WAIT_S))
        except MetricsError as exc:
            raise BindError(str(exc)) from None

    def _refresh_metrics(self, now: float) -> None:
        if self.metrics is None:
            return
        counts = self.store.state_counts()
        agents = self.registry.all()
        self.metrics.refresh(sum(a.alive(self.config.agent_timeout_s, now) for a in agents),
                             len(agents), counts["jobs"], counts["recommendations"])

    def _beat(self, now: float) -> None:
        """Tell the daemons sharing the store that this one is alive, and where it listens
        (what they name to the operator for the agents it holds)."""
        self.store.save_daemon(self.instance, reachable_endpoint(self.endpoint), now,
                               __version__)
        # the boards refused here for an id another daemon holds, for that daemon's status
        # (written while there are any, and once more to clear them)
        clashes = self.registry.refused_here(now)
        if clashes or self._clashes_saved:
            self.store.save_clashes(self.instance, clashes)
        self._clashes_saved = bool(clashes)
        self.registry.log_refused_elsewhere(now)
        if self.config.fleet_forget_s > 0:
            for gone in self.store.forget_daemons(now - self.config.fleet_forget_s):
                log.info("forgot daemon %s at %s of the fleet: no heartbeat since %s (over "
                         "fleet_forget_s = %g s)", gone["instance"], gone["endpoint"],
                         time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(gone["last_seen"])),
                         self.config.fleet_forget_s)

    # -- running ----------------------------------------------------------------------------
    def serve(self, stop_event: threading.Event | None = None) -> None:
        stop = stop_event or self.stop_event
        log.info("opptune-daemon %s (opptune %s) listening on %s, store %s", self.instance,
                 __version__, self.endpoint, redact_url(self.config.database))
        if self.metrics_server is not None:
            log.info("metrics on http://%s/metrics", self.metrics_server.endpoint)
        if self.config.max_message_bytes < HELLO_ROOM_BYTES:
            log.warning("max_message_bytes = %d: an agent's hello (its workloads and its board's "
                        "description: several KB, tens with many workloads) over it is refused "
                        "unread and that agent never connects; %d or more leaves room",
                        self.config.max_message_bytes, HELLO_ROOM_BYTES)
        # bound: under systemd (Type=notify) `systemctl start` returns now, so a command
        # run after it finds the daemon listening, not a refused connection
        notify("READY=1")
        next_flush = time.monotonic() + 1.0
        self._beat(time.time())
        while not stop.is_set() and not self.stop_event.is_set():
            try:
                if self.link.poll(50):
                    self._ingest()
                self._finish_queries()
                if self.metrics is not None and self.metrics.wanted:
                    # asked once: a store that fails is read again at the next scrape only
                    self.metrics.wanted = False
                    self._refresh_metrics(time.time())  # a scrape waits for it
                for outcome in self.fitter.outcomes():
                    if self.metrics is not None:
                        self.metrics.fit_duration.observe(outcome.seconds)
                    self.recommender.on_fit(outcome)
                full = time.monotonic() >= next_flush
                self.tuning.poll(time.time(), full)
                if full:
                    next_flush = time.monotonic() + 1.0
                    if self._store_gone():
                        break
                    self.store.touch_agents(self.registry.take_dirty(), self.instance)
                    self.jobs.expire(time.time())
                    self.jobs.tell_held_cancels(time.time())  # cancels another daemon took
                    self.remeasure.tick(time.time())  # marked points, once the board is quiet
                    recovery.tick(self, time.time())  # `opptune recover` run on another daemon
                    self.recommender.retry_waiting()  # groups another daemon was fitting
                    self._beat(time.time())
            except Exception as exc:  # the loop outlives any one failure
                # the same error again and again (a full disk) is logged once a minute
                text, at = self._loop_error
                now = time.monotonic()
                if repr(exc) != text or now - at >= STORE_FAILURE_LOG_S:
                    self._loop_error = (repr(exc), now)
                    log.exception("error in the daemon loop; continuing")

    def _ingest(self) -> None:
        """Drain and handle one batch with the cyclic garbage collector paused.

        A batch's messages live until handled, its rows until the commit, and all die by
        reference count; collections during the batch only scan them again and again
        (500 agents, 20 s: 2.0 s in collections, 0.03 s paused; results per CPU second of the
        daemon +8 %). The switch is process-wide: daemons in threads of one process (tests)
        may resume it early for each other, which costs speed only."""
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            self.handle_batch(self.link.recv_batch(self.batch_max))
        finally:
            if paused:
                gc.enable()

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
        self.query_worker.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.tuning.close()
        if self.store_lost is not None:
            # nothing more into the lost file; its journal goes, so that the file now at the
            # path opens as it is
            self.link.close()
            self._stop_auth()
            self.store.abandon()
            log.info("opptune-daemon %s stopped", self.instance)
            return
        try:
            self.store.touch_agents(self.registry.take_dirty(), self.instance)
            self.recommender.release_claims()
            self.store.drop_daemon(self.instance)  # its agents are online through it no more
        except Exception:
            log.exception("saving last-seen times and fit claims at shutdown")
        self.link.close()
        self._stop_auth()
        self.store.close()
        log.info("opptune-daemon %s stopped", self.instance)

    # -- messages ---------------------------------------------------------------------------
    def send(self, identity: bytes, msg_type: str, body: dict[str, Any]) -> bool:
        return self.link.send(identity, protocol.make(msg_type, DAEMON_ID, body))

    def refuse(self, identity: bytes, code: str, message: str, ref: str | None) -> None:
        self.stats["refused"] += 1
        if code == "unknown_job":
            self.stats["refused_unknown_job"] += 1
        self.link.refusals.refused(identity, code, f"{message} (message {ref})")
        self.link.send(identity, protocol.error_reply(DAEMON_ID, code, message, ref),
                       quiet=True)

    def handle_batch(self, batch: list[tuple[bytes, dict[str, Any]] | None]) -> None:
        """Handle messages in arrival order; results are stored together at the end.

        Consumes ``batch``: each entry is set to None once handled, so that a message is freed
        right away, while its memory is still in the cache (only its row lives on to the
        commit), not all together after the commit."""
        now = time.time()
        rows: list[tuple] = []
        acks: dict[bytes, list[str]] = {}
        touched: dict[str, list[Any]] = {}  # job id -> [of, agent, results, closed points]
        seen: dict[bytes, Any] = {}  # identity -> the AgentInfo it spoke for, in this batch
        keyring = self.keyring
        for i, (identity, msg) in enumerate(batch):
            batch[i] = None
            try:
                if keyring is not None:
                    keyring.check(self.link.peer_keys.get(identity), msg["agent"], msg["type"])
                if msg["type"] == "result":
                    self._take_result(identity, msg["agent"], msg["id"], msg["body"], now,
                                      rows, acks, touched, seen)
                    continue
                if msg["type"] == "results":
                    self._take_results(identity, msg, now, rows, acks, touched, seen)
                    continue
                handler = self._handlers.get(msg["type"])
                if handler is None:
                    raise HandlerError("unexpected_type",
                                       f"the daemon does not accept '{msg['type']}' messages")
                handler(identity, msg)
            except HandlerError as exc:
                if exc.code in ("key_rejected", "key_revoked"):
                    self._key_withdrawn(identity, msg["agent"])
                self.refuse(identity, exc.code, str(exc), msg.get("id"))
            except Exception as exc:
                log.exception("handling %s %s", msg.get("type"), msg.get("id"))
                self.refuse(identity, "internal", f"daemon error: {type(exc).__name__}: {exc}",
                            msg.get("id"))
        if rows:
            self._commit_results(rows, acks, touched, now)

    def _key_withdrawn(self, identity: bytes, agent: str) -> None:
        """The agent on this connection speaks with a key the operator rejected or revoked,
        maybe through another daemon sharing keys_dir: nothing more goes to it, as after
        'opptune keys revoke' here (queries.keys), instead of jobs sent until it times out."""
        info = self.registry.get(agent)
        if info is not None and info.identity == identity:
            info.identity = None

    def _take_results(self, identity: bytes, msg: dict[str, Any], now: float,
                      rows: list[tuple], acks: dict[bytes, list[str]],
                      touched: dict[str, list[Any]], seen: dict[bytes, Any]) -> None:
        """A ``results`` frame: each item through the single result's path; an item refused
        gets its own error (ref = its id) and the others go in. An agent that has not said
        hello is refused once for the whole frame."""
        agent = msg["agent"]
        self._speaker(identity, agent, now, seen)
        self.stats["results_frames"] += 1
        check, take = protocol.check_item, self._take_result
        for msg_id, body in msg["body"]["items"]:
            try:
                check(msg, msg_id, body)
                take(identity, agent, msg_id, body, now, rows, acks, touched, seen)
            except (HandlerError, protocol.ProtocolError) as exc:
                self.refuse(identity, exc.code, str(exc), msg_id)
            except Exception as exc:
                log.exception("handling result %s of a results frame", msg_id)
                self.refuse(identity, "internal", f"daemon error: {type(exc).__name__}: {exc}",
                            msg_id)

    def _speaker(self, identity: bytes, agent: str, now: float, seen: dict[bytes, Any]) -> Any:
        """The AgentInfo of ``agent`` speaking from ``identity``; HandlerError when it has not
        said hello. One look-up per agent and batch: ``now`` is the batch's, so a second one
        would change nothing."""
        info = seen.get(identity)
        if info is None or info.agent_id != agent:
            info = self.registry.seen(agent, identity, now)
            if info is None:
                raise HandlerError("unknown_agent", f"agent '{agent}' has not said hello")
            seen[identity] = info
        return info

    def _take_result(self, identity: bytes, agent: str, msg_id: str, body: dict[str, Any],
                     now: float, rows: list[tuple], acks: dict[bytes, list[str]],
                     touched: dict[str, list[Any]], seen: dict[bytes, Any]) -> None:
        """One validated result (a ``result`` message's or a ``results`` item's) into the
        batch as its row, or HandlerError naming why not."""
        info = seen.get(identity)
        if info is None or info.agent_id != agent:
            info = self._speaker(identity, agent, now, seen)
        job = self._issued(body["job_id"])
        adopt = False
        if job is None or job[0] != agent:
            # Only measurements the daemon asked this agent for are stored: a made-up job id
            # (or another agent's) would slip fabricated runs into the fits. A job the store
            # never knew, from an agent the operator opened (`opptune recover`: the store was
            # replaced), is stored as recovered, in its group on the agent's own platform.
            adopt = job is None and self.recovery.until(agent, now) is not None
            if not adopt:
                raise HandlerError("unknown_job", _unknown_job(body["job_id"], agent, job))
        raw = body["record"]
        # The columns straight from the map where they are all that is needed; the full record
        # where the fast read cannot tell (from_dict refuses it, naming why) or where the
        # record has more to say (an adaptive point's closing record)
        rec, cols = None, record_columns(raw)
        if cols is None:
            try:
                rec = RunRecord.from_dict(raw)
            except RecordError as exc:
                raise HandlerError("bad_record", f"invalid run record: {exc}") from None
            cols = columns_of(rec)
        # ...and only in the group the job measures: the agent's platform, the job's workload
        # and input, one of its points (cpus, threads, variant). The platform is the speaking
        # connection's: where two boards share the id, the one not holding it is heard too,
        # its runs under its own platform (a job it was sent while it held the id)
        claim = info.claims.get(identity)
        platform = claim.platform_id if claim is not None else info.platform_id
        if adopt:
            if cols.platform != platform:
                raise HandlerError("wrong_group", f"a result of job '{body['job_id'][:80]}' "
                                                  f"names platform '{cols.platform[:80]}', not "
                                                  f"the agent's '{platform}'; it is not stored")
            job = self._recover(agent, body, cols, now)
        if (cols.platform != platform or cols.workload != job[1]
                or cols.input != job[2]
                or (job[3] is not None  # a recovered job's points are not known
                    and (tuple(cols.cpus), cols.threads, cols.variant) not in job[3]
                    and (tuple(sorted(cols.cpus)), cols.threads, cols.variant) not in job[3])):
            raise HandlerError("wrong_group", _wrong_group(cols, platform, job, body["job_id"]))
        job_id = body["job_id"]
        # only an adaptive point's last record says it closes it (in extra["point"]: such a
        # record is built in full)
        point = closing_point(rec) if rec is not None and rec.extra else None
        received = now
        ran, current = program_of(raw), info.program(cols.workload)
        if ran is not None and current is not None and ran != current:
            received = self._before_redefinition(agent, job_id, cols, now)
        rows.append(self._result_row(msg_id, agent, job_id, body["seq"], cols, raw, received))
        ids = acks.get(identity)
        if ids is None:
            acks[identity] = [msg_id]
        else:
            ids.append(msg_id)
        job = touched.get(job_id)
        if job is None:
            job = touched[job_id] = [body["of"], agent, 1, None]
        else:
            job[2] += 1
        if point is not None:
            if job[3] is None:
                job[3] = []
            job[3].append(point)

    def _before_redefinition(self, agent: str, job_id: str, cols: RecordColumns,
                             now: float) -> float:
        """When to say a run of a program its agent's hello no longer has was received: just
        before the drift that hello recorded for its group (drift.Drift.redefined), so that it
        counts with the runs of the old program, which no longer count, and not as the new
        one's (it waited in the agent's outbox across the restart that changed the program).
        ``now`` where no drift ends it."""
        since = self.store.drift_since(Group(cols.platform, cols.workload, cols.input,
                                             cols.variant), agent)
        if since is None:
            return now
        if job_id not in self._stale_jobs_told:
            self._stale_jobs_told[job_id] = None
            while len(self._stale_jobs_told) > STALE_JOBS_KEPT:
                del self._stale_jobs_told[next(iter(self._stale_jobs_told))]
            log.info("agent %s: runs of job %s measured the program of %s from before its "
                     "change: stored before its drift (they do not count)", agent, job_id,
                     cols.workload)
        # a result in the hello's own batch is older than the hello already (the batch's time)
        return min(now, since - STALE_PROGRAM_BEFORE_S)

    def _recover(self, agent: str, body: dict[str, Any], cols: RecordColumns,
                 now: float) -> _Issued:
        """The job row of a result of a job the store never issued, ``agent`` open to them
        (daemon/recovery.py): its workload and input are its first result's."""
        job_id = body["job_id"]
        job = recovered_job(job_id, cols.workload, cols.input, body["of"])
        job["reason"] = ("a job this store never issued (a store replaced or restored from "
                         "a backup); its results stored on 'opptune recover' since " +
                         time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now)))
        self.store.save_job(agent, job, now, state=RECOVERED)
        log.info("agent %s: job %s (%s, input %s) is not in this store: its results are "
                 "stored as recovered", agent, job_id, cols.workload, cols.input)
        self._job_owner[job_id] = (agent, cols.workload, cols.input, None)
        return self._job_owner[job_id]

    def _issued(self, job_id: str) -> _Issued | None:
        """The agent a job was issued to, its workload, input and points (None: a recovered
        job's, not known); None for a job never issued. Cached: one dict lookup per
        result."""
        issued = self._job_owner.get(job_id)
        if issued is None:
            job = self.store.job(job_id)
            if job is None:
                return None
            if len(self._job_owner) >= 100_000:
                self._job_owner.clear()
            # each point's cpus as sent (records list them so) and sorted (any order matches)
            points = None if job["state"] == RECOVERED else frozenset(
                (tuple(order(p.get("cpus") or ())), p.get("threads"), str(p.get("variant", "")))
                for p in job["points"] for order in (list, sorted))
            issued = self._job_owner[job_id] = (job["agent"], job["workload"], job["size"],
                                                points)
        return issued

    def _commit_results(self, rows: list[tuple], acks: dict[bytes, list[str]],
                        touched: dict[str, list[Any]], now: float) -> None:
        try:
            self.store.insert_rows(rows)
        except Exception as exc:
            # Nothing is acked: every agent keeps its results and sends them again.
            self._store_failures += 1
            mono = time.monotonic()
            # one line a minute however the failures come: a nearly full disk lets a small
            # batch through now and then, and each such success must not start a new line
            # (and traceback) of its own
            if mono - self._store_failure_logged >= STORE_FAILURE_LOG_S:
                self._store_failure_logged = mono
                log.error("storing a batch of %d results failed (%d failed batches so far; "
                          "none acked, the agents resend them): %s", len(rows),
                          self._store_failures, exc, exc_info=not self._store_failure_told)
                self._store_failure_told = True
            for identity in acks:
                self.link.send(identity, protocol.error_reply(
                    DAEMON_ID, "store_failed", f"results not stored: {exc}", None))
            return
        if self._store_failures:
            if self._store_failure_told:
                log.warning("storing results works again after %d failed batches",
                            self._store_failures)
                self._store_failure_told = False
            self._store_failures = 0
        if self._store_gone():
            return  # stored in a file that is no longer the database: the agents keep them
        self.stats["results"] += len(rows)
        self.stats["batches"] += 1
        send_ack = self.link.send_ack
        for identity, ids in acks.items():
            send_ack(identity, ids, DAEMON_ID)
        recovered = [j for j in touched if (job := self._issued(j)) is not None
                     and job[3] is None]
        for job_id in recovered:
            # no end to wait for (runs the lost store had acked never come): its groups are
            # fitted as its runs arrive, with nothing pushed to the board for them
            _of, agent, _new, _closing = touched.pop(job_id)
            for group in self.store.job_groups(job_id):
                self.recommender.request_fit(group, agent=agent, job_id=job_id,
                                             recommend_after=False)
        self.jobs.results_stored(touched, now)

    def _store_gone(self) -> bool:
        """Whether the store's file was deleted or replaced under the daemon (a restore from
        a backup moved there, say). What is stored from then on goes into a file that no
        longer has a name, lost at the exit: the daemon acks nothing more (the agents keep
        their results) and stops, with exit status 1, so that systemd (Restart=on-failure)
        starts it again on the file now at the path, and the agents resend."""
        if self.store_lost is None:
            why = self.store.gone()
            if why is None:
                return False
            self.store_lost = why
            log.error("the database file %s %s while the daemon ran: results are no longer "
                      "acknowledged (the agents keep them and send them again); the daemon "
                      "stops, to be started again on the file now at that path (systemd "
                      "restarts it; else start opptune-daemon again)", self.config.database, why)
            self.stop_event.set()
        return True

    def _job_done(self, job_id: str, agent: str) -> None:
        # a tune session's measurement: the session goes on; a tune job no session here holds
        # (stopped or ended while it was out, before a restart too) is no sweep to fit
        if self.tuning.owns(job_id) or is_tune_job(job_id):
            self.tuning.job_done(job_id)
            return
        # marked points to be measured again: fit now, recommend once they are clean (a
        # re-measure job another daemon of the fleet judged first is fitted there)
        again = self.remeasure.job_done(job_id, agent)
        if again is not None:
            self._fit_job(job_id, agent, again)

    def _fit_job(self, job_id: str, agent: str, again: bool) -> None:
        """Fit the groups of a finished job; recommend unless its marked points wait."""
        for group in self.store.job_groups(job_id):
            self.recommender.request_fit(group, agent=agent, job_id=job_id,
                                         recommend_after=not again)

    # -- hello, heartbeat, applied, error, query ----------------------------------------------
    def _on_hello(self, identity: bytes, msg: dict[str, Any]) -> None:
        agent, body, now = msg["agent"], msg["body"], time.time()
        if not agent:
            raise HandlerError("bad_agent", "hello needs a non-empty agent id")
        platform = body["platform"]
        pid = platform_id_of(agent, platform)
        self.store.save_platform(pid, platform, now)
        instance = body.get("instance") if isinstance(body.get("instance"), str) else None
        # which machine and boot (absent: an older agent, a board without the ids)
        machine, boot = body.get("machine"), body.get("boot")
        holder = self.registry.claim(agent, identity, pid, platform, instance, now,
                                     machine=machine, boot=boot)
        via = None
        if holder is None:  # held by another board through another daemon of the fleet?
            holder, via = self.registry.claim_elsewhere(
                agent, identity, pid, platform, instance, now, machine=machine,
                boot=boot) or (None, None)
        if holder is not None:
            # another board holds the id and is alive (registry logs it): this one is heard,
            # its results stored, but it does not take over the holder's jobs and record;
            # the refusal of its hello puts the clash in its own log too
            self.send(identity, "heartbeat", self._welcome)
            self.refuse(identity, "agent_id_in_use", _id_in_use(
                agent, holder, "this board gets no jobs (its results are stored)", via),
                msg["id"])
            return
        # read from the store, not the registry: the hello before may have gone to another
        # daemon of the fleet
        stored = self.store.agent(agent)
        if stored is not None and stored["platform"] == pid:
            # a workload whose program changed: its runs from before no longer count
            self.drift.redefined(agent, pid, stored["workloads"], body["workloads"], now)
        self.store.save_agent(agent, pid, list(body["workloads"]), body["agent_version"], now,
                              body.get("doctor"), self.instance, machine, boot)
        standings, dropped = _standings(body)
        info = self.registry.hello(agent, identity, pid, platform, list(body["workloads"]), now,
                                   doctor=body.get("doctor"), standings=standings,
                                   standings_dropped=dropped, instance=instance,
                                   keeps="standing" in body,
                                   per_target=isinstance(body.get("standings"), list),
                                   version=body["agent_version"], machine=machine, boot=boot)
        log.info("hello from agent %s (platform %s, %d workloads)", agent, pid,
                 len(info.workloads))
        if info.keeps:  # what stands, kept for a restart of this daemon (or another's start)
            self.store.save_standings(agent, info.standings, info.standings_dropped, now)
        self.send(identity, "heartbeat", self._welcome)
        for text in dropped:
            self.recommender.dropped(agent, text, others=bool(standings))
        # the agent's tune sessions first: its jobs resent below may complete one of theirs
        self.tuning.take_up(agent)
        swept = self.jobs.resume(agent)
        self.recommender.send_unsent(agent, identity)
        if self.recovery.until(agent, now) is not None:
            recovery.ask(self, agent, now)  # opened by `opptune recover` while it was away
        if self.config.auto_sweep:
            for name in info.workload_names():
                if name not in swept:
                    self.sweeps.auto(agent, name)

    def _on_heartbeat(self, identity: bytes, msg: dict[str, Any]) -> None:
        info = self.registry.seen(msg["agent"], identity, time.time())
        if info is None and msg["agent"] in self.registry:
            # its hello lost to another board's that is gone now: the error makes it say
            # hello again, and take the id
            raise HandlerError("unknown_agent", f"agent '{msg['agent']}': say hello again (the "
                                                "board that held this id is gone)")
        if info is not None and info.identity == identity:  # not another board's of the id
            if "outbox" in msg["body"]:
                info.outbox = msg["body"]["outbox"]
            info.outbox_full = msg["body"].get("outbox_full")
            if "instance" in msg["body"]:
                info.instance = msg["body"]["instance"]
        self.send(identity, "heartbeat", self._welcome)

    def _on_error(self, identity: bytes, msg: dict[str, Any]) -> None:
        self.registry.seen(msg["agent"], identity, time.time())
        b = msg["body"]
        if self.recovery.refused(b.get("ref")) is not None:
            log.warning("agent %s does not take the request for its refused results "
                        "('opptune recover'): %s; they stay in its outbox's rejected table: "
                        "upgrade the agent to opptune %s or later, then run 'opptune recover' "
                        "again", msg["agent"], b["message"][:200], RECOVER_SINCE)
            return
        self._agent_errors.refused(msg["agent"], b["code"],
                                   f"{b['message'][:500]} (about {str(b.get('ref'))[:80]})")
        self.jobs.agent_error(msg["agent"], b)

    def _on_applied(self, identity: bytes, msg: dict[str, Any]) -> None:
        agent, body, now = msg["agent"], msg["body"], time.time()
        info = self.registry.seen(agent, identity, now)
        if info is None:
            raise HandlerError("unknown_agent", f"agent '{agent}' has not said hello")
        if info.identity != identity:
            # another board of the id (a clash): configurations are the holder's, and this
            # board's verification would mark the holder's applied, verified, even standing
            held, via = info.held_via or (info.claims.get(info.identity), None)
            raise HandlerError("agent_id_in_use", _id_in_use(
                agent, held,
                f"its verification of configuration '{str(body['config_id'])[:80]}' is not "
                "stored: the configurations of this id are the holder's", via))
        rec = self.store.recommendation(body["config_id"])
        if rec is None or rec["agent"] != agent:
            # verification runs are stored only for a configuration pushed to this agent
            raise HandlerError("unknown_config", f"no configuration '{body['config_id']}' was "
                                                 f"pushed to agent '{agent}'")
        for i, raw in enumerate(body.get("records") or []):
            if isinstance(raw, dict) and not _runs_config(raw, rec):
                raise HandlerError("wrong_group", f"verification record {i} of configuration "
                                                  f"'{body['config_id']}' does not measure it "
                                                  "(platform, workload, input, variant, cpus or "
                                                  "threads differ); nothing of it is stored")
        self.recommender.applied(agent, msg, rec, now)
        if body["ok"] and rec.get("keep") is not False and info.keeps:
            self._stands(agent, info, rec, body, now)
        if not self._store_gone():
            self.send(identity, "ack", {"ids": [msg["id"]]})

    def _stands(self, agent: str, info: Any, rec: dict[str, Any], body: dict[str, Any],
                now: float) -> None:
        """The agent's rule (agent/apply.py, shared/standing.py): applied and verified, ``rec``
        stands in place of the one in force on its target (its hello's, or the last applied
        there), the others stand on; an agent that keeps one per board replaces whatever
        stood. An agent older than either rule left the board to its next job's clocks:
        nothing stands (the caller's ``info.keeps``)."""
        new = standing_of(rec, body)
        if info.per_target:
            info.standings, old = with_entry(info.standings, new,
                                             key_of(new) if new else "board")
            before = [old] if old else []
        else:
            before, info.standings = info.standings, [new] if new else []
        for old in before:
            self.recommender.replaced(agent, old.get("config_id"), rec, now)
        if not before:
            self.recommender.replaced(agent, None, rec, now)
        info.standings_dropped = []
        self.store.save_standings(agent, info.standings, info.standings_dropped, now)
        over = overridden(info.standings, info.platform)
        for old in info.standings:
            lost = [o for o in over.get(str(old.get("config_id")), [])
                    if o["by"] == rec["config_id"]]
            if lost:
                log.info("config %s of agent %s: its clock is overridden on %s by %s, applied "
                         "after it; it stands for its cpu set", old.get("config_id"), agent,
                         ", ".join(o["policy"] for o in lost), rec["config_id"])

    def _on_query(self, identity: bytes, msg: dict[str, Any]) -> None:
        queries.check_local(self, identity)
        what, args = msg["body"]["what"], msg["body"].get("args") or {}
        if what == "again":  # a client that got no answer asks once more about its request
            self._answer_again(identity, msg["id"], args.get("request"))
            return
        if not is_change(what, args):
            self._answer(identity, msg["id"], what, args, None)
            return
        key = (identity, msg["id"])
        if self.recent.get(key) is not None:  # the same message again: answered as before
            self._answer_again(identity, msg["id"], msg["id"])
            return
        self.recent.begin(key)
        self._answer(identity, msg["id"], what, args, key)

    def _answer(self, identity: bytes, ref: str, what: str, args: dict[str, Any],
                key: tuple[bytes, str] | None) -> None:
        """Answer a query; with ``key``, a change request, remember the answer (the reply's
        data or the refusal) for the client that asks again."""
        try:
            data = queries.answer(self, what, args)
            if isinstance(data, Deferred):  # a fit: answered when the worker is done
                self.query_worker.submit(identity, ref, data, key)
                return
            size = self._reply(identity, ref, what, data)
        except Exception as exc:
            if key is not None:
                self.recent.done(key, error=_refusal(exc))
            raise
        if key is not None:
            self.recent.done(key, data, size)

    def _answer_again(self, identity: bytes, ref: str, request: Any) -> None:
        """Answer request ``request`` of this client, asked about again (message ``ref``),
        as it was answered: never carried out a second time."""
        if not isinstance(request, str) or not request:
            raise HandlerError("bad_args", "again needs args.request, the id of the request "
                                           "asked about again")
        entry = self.recent.get((identity, request))
        if entry is None:
            raise HandlerError("unknown_request", _forgotten(request, self.recent,
                                                             self.started))
        self.stats["requests_asked_again"] += 1
        if entry.pending:
            return  # under way: its answer goes to this client under the request's id
        if entry.error is not None:
            raise HandlerError(*entry.error)
        self._reply(identity, ref, "again", entry.data)

    def _reply(self, identity: bytes, ref: str, what: str, data: Any) -> int:
        """Send a query's reply and return its size in bytes; HandlerError when it cannot be
        sent (too large, say): the operator hears why instead of a timeout."""
        reply = protocol.make("reply", DAEMON_ID, {"ref": ref, "data": data})
        try:
            encoded = protocol.encode(reply, protocol.MAX_REPLY_BYTES)
        except protocol.ProtocolError as exc:
            raise HandlerError(exc.code, f"the reply to '{what[:40]}' cannot be sent: "
                                         f"{exc}") from None
        self.link.send_encoded(identity, encoded, "reply")
        return len(encoded)

    def _finish_queries(self) -> None:
        """Send the replies of the queries the worker has computed (and remember those of
        change requests)."""
        for job in self.query_worker.done():
            try:
                if job.error is not None:
                    raise job.error
                data = job.deferred.finish(job.value)
                size = self._reply(job.identity, job.ref, "the query", data)
                if job.key is not None:
                    self.recent.done(job.key, data, size)
                continue
            except Exception as exc:
                error = _refusal(exc)
                if job.key is not None:
                    self.recent.done(job.key, error=error)
                if not isinstance(exc, HandlerError):
                    log.error("answering query %s: %s: %s", job.ref, type(exc).__name__, exc)
            self.refuse(job.identity, *error, job.ref)

    # -- the parts' entry points, for callers of the daemon object ----------------------------
    def status(self) -> dict[str, Any]:
        return queries.status(self)

    def start_sweep(self, agent: str, workloads: list[str] | None = None,
                    **options: Any) -> list[dict[str, Any]]:
        return self.sweeps.start(agent, workloads, **options)

    def request_fit(self, *args: Any, **kw: Any) -> None:
        self.recommender.request_fit(*args, **kw)

    def push_recommendation(self, *args: Any, **kw: Any) -> dict[str, Any] | None:
        return self.recommender.push(*args, **kw)


def _standings(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """(what stands on the board, why what stood was dropped at the agent's restart) from a
    hello: its ``standings`` lists, or, from an agent that keeps one per board, its
    ``standing`` and ``standing_dropped`` (shared/protocol.py)."""
    standings = body.get("standings")
    if not isinstance(standings, list):
        standings = [body["standing"]] if isinstance(body.get("standing"), dict) else []
    dropped = body.get("standings_dropped")
    if not isinstance(dropped, list):
        dropped = [body["standing_dropped"]] if isinstance(body.get("standing_dropped"),
                                                           str) else []
    return ([e for e in standings if isinstance(e, dict)],
            [d for d in dropped if isinstance(d, str)])


def _id_in_use(agent: str, holder: Any, what: str, via: str | None = None) -> str:
    """The refusal of a board that says it is ``agent`` while ``holder`` (a registry Claim)
    holds the id: names the holder (and the endpoint ``via`` of the daemon of the fleet it is
    connected to, where not this one), what is not taken, and what to do."""
    held = f", {claim_text(holder)}" if holder is not None else ""
    daemon = f"the daemon at {via}" if via else "this daemon"
    return (f"agent id '{agent}' is held by another agent connected to {daemon}{held}: "
            f"{what}; set agent_id in its agent.toml to a name of its own (default: the host "
            "name) and restart the agent")


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Start the daemon that ``args`` (service_args' options) describe and serve until a
    signal stops it; the exit status."""
    try:
        config = load_daemon_config(args.config, bind=args.bind, database=args.database,
                                    log_level=args.log_level, auto_sweep=args.auto_sweep,
                                    metrics_endpoint=args.metrics_endpoint)
    except ConfigError as exc:
        print(f"opptune-daemon: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, config.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        daemon = Daemon(config)
    except PathError as exc:
        if exc.key == "database" and args.database:
            where = "--database"
        else:
            source = Path(args.config) if args.config else DEFAULT_DAEMON_CONFIG
            where = (f"{source}: key '{exc.key}'" if args.config or source.exists()
                     else f"default '{exc.key}'")
        print(f"opptune-daemon: {where} {exc}", file=sys.stderr)
        return 2
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
    return 1 if daemon.store_lost is not None else 0


if __name__ == "__main__":
    sys.exit(main())
