"""Prometheus metrics of the daemon, served over HTTP on ``metrics_endpoint`` (off when empty).

Names are ``opptune_<subsystem>_<name>_<unit>``. Every metric lives in a registry of this daemon
(not prometheus_client's global one), so tests and several daemons in one process do not clash.

Values come from what the daemon already counts: the stats dict (live), the fit durations the
loop observes, and a snapshot of the registry and the store (agents online, jobs and
recommendations by state) that the loop takes when a scrape asks for it: the store and the
registry belong to the loop's thread, the HTTP server runs in its own. The store's counts
read every job kept (4 ms of CPU with 100,000 on SQLite, 12 ms of PostgreSQL's): once a
scrape, not once a second.
"""

from __future__ import annotations

import errno
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..shared.config import metrics_problem
from .jobs import ACTIVE_JOB_STATES, FINAL_JOB_STATES

log = logging.getLogger("opptune.daemon.metrics")

# (metric name without _total, stats key, help)
STAT_COUNTERS = (
    ("opptune_ingest_results", "results", "Run results stored and acknowledged (a resent "
                                          "duplicate counts again)"),
    ("opptune_ingest_batches", "batches", "Batches of results committed in one transaction"),
    ("opptune_link_refused_messages", "refused", "Messages answered with an error"),
    ("opptune_link_refused_too_large", "refused_too_large",
     "Frames refused unread for exceeding max_message_bytes"),
    ("opptune_link_refused_rate_limited", "refused_rate_limited",
     "Frames refused unread for exceeding their agent's rate limit"),
    ("opptune_fit_fits", "fits", "Models fitted and stored"),
    ("opptune_fit_errors", "fit_errors", "Fits or recommendations that failed"),
    ("opptune_recommend_pushed", "configs_pushed", "Recommended configurations sent to agents"),
)

# recommendation states in the store -> counters; "applied" = the agent ran it and reported:
# a verdict on its run time (verified, unconfirmed, off; marked: its runs were disturbed), or
# what it measured of a running process or unit (state "applied"), or that it failed
RECOMMEND_COUNTERS = (
    ("opptune_recommend_applied", ("verified", "unconfirmed", "off", "marked", "applied",
                                   "failed"),
     "Recommendations the agent applied and measured"),
    ("opptune_recommend_verified", ("verified",),
     "Recommendations whose measured time lay within a prediction interval that confirms "
     "the prediction"),
    ("opptune_recommend_unconfirmed", ("unconfirmed",),
     "Recommendations whose measured time lay within a prediction interval too wide to "
     "confirm the prediction"),
    ("opptune_recommend_off", ("off",),
     "Recommendations whose measured time left the prediction interval"),
    ("opptune_recommend_refused", ("refused",), "Recommendations the agent refused"),
)

JOB_STATES = ACTIVE_JOB_STATES + FINAL_JOB_STATES


ALLOWED_METHODS = "GET, HEAD"


class MetricsError(RuntimeError):
    """The metrics endpoint cannot be served; the message says why and what to do."""


def parse_endpoint(value: str) -> tuple[str, int]:
    """("host", port) from "HOST:PORT" ("[::1]:9464" for IPv6); ValueError with the fix."""
    problem = metrics_problem(value)
    if problem:
        raise ValueError(problem)
    host, _, port = value.strip().rpartition(":")
    return (host[1:-1] if host.startswith("[") and host.endswith("]") else host), int(port)


class DaemonMetrics:
    """The daemon's registry of metrics; ``snapshot`` is refreshed by the loop, when
    ``wanted`` (a scrape waits in :meth:`fresh_exposition`)."""

    def __init__(self, stats: dict[str, int]):
        self.stats = stats
        self.registry = CollectorRegistry(auto_describe=True)
        self.fit_duration = Histogram(
            "opptune_fit_duration_seconds", "Time to choose and fit a model for a group",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry)
        self._snapshot: dict[str, Any] = {"agents_online": 0, "agents_known": 0,
                                          "jobs": {}, "recommendations": {}}
        self._refreshed = threading.Condition()
        self._generation = 0  # snapshots taken
        self.wanted = False  # a scrape waits for the loop's next snapshot
        self.registry.register(_Collector(self))

    def refresh(self, agents_online: int, agents_known: int, jobs: dict[str, int],
                recommendations: dict[str, int]) -> None:
        """New values from the loop (replaced whole: the collector reads it unlocked)."""
        snapshot = {"agents_online": agents_online, "agents_known": agents_known,
                    "jobs": dict(jobs), "recommendations": dict(recommendations)}
        with self._refreshed:
            self._snapshot = snapshot
            self._generation += 1
            self.wanted = False
            self._refreshed.notify_all()

    def fresh_exposition(self, wait_s: float) -> bytes:
        """The exposition once the loop has taken a snapshot asked for now (HTTP thread);
        after ``wait_s`` without one (the loop held up), with the last snapshot."""
        with self._refreshed:
            taken = self._generation
            self.wanted = True
            self._refreshed.wait_for(lambda: self._generation != taken, wait_s)
        return self.exposition()

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Collector:
    """Reads the stats dict and the snapshot at scrape time."""

    def __init__(self, metrics: DaemonMetrics):
        self.m = metrics

    def collect(self) -> Iterator[Any]:
        stats = dict(self.m.stats)
        for name, key, text in STAT_COUNTERS:
            yield CounterMetricFamily(name, text, value=stats.get(key, 0))
        snap = self.m.snapshot()
        recs = snap["recommendations"]
        for name, states, text in RECOMMEND_COUNTERS:
            yield CounterMetricFamily(name, text, value=sum(recs.get(s, 0) for s in states))
        yield GaugeMetricFamily("opptune_agents_online", "Agents seen within agent_timeout_s",
                                value=snap["agents_online"])
        yield GaugeMetricFamily("opptune_agents_known", "Agents the daemon knows",
                                value=snap["agents_known"])
        jobs = GaugeMetricFamily("opptune_jobs", "Sweep jobs by state", labels=["state"])
        for state in JOB_STATES + tuple(sorted(set(snap["jobs"]) - set(JOB_STATES))):
            jobs.add_metric([state], snap["jobs"].get(state, 0))
        yield jobs


class MetricsServer:
    """HTTP server answering GET and HEAD of /metrics (and /) from ``exposition`` in a thread
    of its own; other standard methods get 405 with Allow."""

    def __init__(self, endpoint: str, exposition: Callable[[], bytes]):
        host, port = parse_endpoint(endpoint)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics is served here")
                    return
                body = exposition()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            # a monitor's health check asks HEAD: the same answer without the body
            do_HEAD = do_GET

            def refuse(self) -> None:
                """405 with Allow: http.server answers a method it has no do_ for with 501
                (not implemented), which reads as a broken server, not a wrong request."""
                body = f"{self.command} is not served here: use GET /metrics\n".encode()
                self.send_response(405)
                self.send_header("Allow", ALLOWED_METHODS)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = \
                refuse

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("metrics %s: " + fmt, self.client_address[0], *args)

        server_cls = ThreadingHTTPServer
        if ":" in host:  # an IPv6 address
            import socket
            server_cls = type("V6Server", (ThreadingHTTPServer,),
                              {"address_family": socket.AF_INET6})
        try:
            self.httpd = server_cls((host, port), Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = ("the port is in use by another process: stop it, choose another "
                       "metrics_endpoint, or set it to \"\" to turn metrics off")
            else:
                why = f"{exc.strerror or exc}; give a local address such as 127.0.0.1:9464"
            raise MetricsError(f"cannot serve metrics on {endpoint}: {why}") from None
        self.httpd.daemon_threads = True
        self.endpoint = f"{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={
            "poll_interval": 0.2}, name="opptune-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)
