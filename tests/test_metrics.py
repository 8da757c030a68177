"""Prometheus metrics: a real daemon process serves them on its metrics_endpoint while a real
agent on a virtual board sweeps; the scrape, parsed by prometheus_client's parser, agrees with
what the daemon stored. Bad or busy endpoints: one line, exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from opptune.agent.virtual_board import make_tree
from opptune.daemon.metrics import DaemonMetrics
from opptune.daemon.service import Daemon
from opptune.daemon.store import open_store
from opptune.shared.config import DaemonConfig
from procs import Cluster, free_endpoint, recommendations_final, wait_until, write_toml

BIN = Path(sys.executable).parent


def free_port() -> int:
    return int(free_endpoint().rsplit(":", 1)[1])


def scrape(address: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.mark.integration
def test_scraped_metrics_match_what_the_daemon_stored(tmp_path):
    root = make_tree("odroid-xu4", str(tmp_path / "board"))
    c = Cluster(tmp_path, kernels=("pi_integrate",),
                extra_agent={"virtual_board": "odroid-xu4", "sysfs_root": root})
    address = f"127.0.0.1:{free_port()}"
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": True, "auto_recommend": True, "verify_reps": 2,
        "metrics_endpoint": address,
    }, {"sweep": {"size": "small", "reps": 2, "warmup": 0, "max_cores": 2,
                  "frequency_grid": "list", "frequencies": [1_000_000, 1_400_000]}})
    c.start_daemon()
    c.start_agent()
    try:
        # the sweep's fit, then the refit with the verification runs
        st = c.wait_for(lambda s: recommendations_final(s, 1)
                        and s["daemon"]["stats"]["fits"] >= 2, timeout=50,
                        what="a measured recommendation and the refit after it")
        sweep_runs = c.rows("SELECT COUNT(*) FROM runs WHERE job_id IN "
                            "(SELECT job_id FROM jobs)")[0][0]
        (rec,) = st["recommendations"]
        want = {
            ("opptune_ingest_results_total", ()): sweep_runs,
            ("opptune_fit_fits_total", ()): 2,
            ("opptune_recommend_pushed_total", ()): 1,
            ("opptune_recommend_applied_total", ()): 1,
            ("opptune_recommend_verified_total", ()): int(rec["state"] == "verified"),
            ("opptune_recommend_off_total", ()): int(rec["state"] == "off"),
            ("opptune_agents_online", ()): 1,
            ("opptune_jobs", (("state", "done"),)): 1,
            ("opptune_jobs", (("state", "running"),)): 0,
        }
        # the store's part is refreshed by the loop about once a second: poll, bounded
        deadline = time.monotonic() + 10
        while True:
            got = scrape(address)
            seen = {k: got.get(k) for k in want}
            if seen == want or time.monotonic() > deadline:
                break
        assert seen == want
        assert sweep_runs == 2 * 2 * 2  # cores 1..2 x 2 frequencies x 2 reps
        assert got[("opptune_fit_errors_total", ())] == 0
        # one fit per sweep, one per verification refit at least; each timed
        assert got[("opptune_fit_duration_seconds_count", ())] >= st["daemon"]["stats"]["fits"]
        assert got[("opptune_fit_duration_seconds_sum", ())] > 0
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://{address}/other", timeout=5)
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    # the port is released with the daemon (REUSEADDR: the scrapes' connections linger in
    # TIME_WAIT; a port still listened on refuses the bind all the same)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(tuple((address.split(":")[0], int(address.split(":")[1]))))


def test_the_store_is_counted_at_each_scrape_not_each_second(tmp_path):
    """The jobs and recommendations by state read every job kept (100,000: 4 ms of CPU on
    SQLite, 12 ms of PostgreSQL's, benchmarks/job_queries.py): the daemon's loop counted them
    each second, scraped or not. It counts them when a scrape asks, and the scrape gets them
    as of then. The statements the loop runs on its store, traced."""
    db = str(tmp_path / "d.db")
    address = f"127.0.0.1:{free_port()}"
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=db, auto_sweep=False,
                            metrics_endpoint=address))
    ran: list[str] = []
    d.store.db.set_trace_callback(ran.append)  # before the loop's thread uses it

    def said(text: str) -> int:
        return sum(text in sql for sql in list(ran))
    d.start_thread()
    try:
        # the loop's heartbeat, at its start and at two ticks after it
        wait_until(lambda: said("INSERT INTO daemons ") >= 3, "three heartbeats of the loop")
        assert said("FROM jobs GROUP BY state") == 0
        other = open_store(db)  # a job stored by another daemon of the fleet
        other.save_job("a1", {"job_id": "job-1", "workload": "w", "size": "small", "reps": 1,
                              "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 1.0)
        other.close()
        got = scrape(address)
        assert got[("opptune_jobs", (("state", "sent"),))] == 1
        assert said("FROM jobs GROUP BY state") == 1
    finally:
        d.stop()


def test_two_daemons_metrics_do_not_share_a_registry():
    a, b = DaemonMetrics({"results": 3}), DaemonMetrics({"results": 5})
    assert b"opptune_ingest_results_total 3.0" in a.exposition()
    assert b"opptune_ingest_results_total 5.0" in b.exposition()


def test_applied_counts_every_recommendation_the_agent_applied_and_measured():
    """A configuration applied to a running process or unit is stored 'applied' (what the
    agent measured over its window), one whose verification runs were disturbed 'marked':
    both were applied and measured, and opptune_recommend_applied_total left them out."""
    m = DaemonMetrics({})
    m.refresh(1, 1, {}, {"verified": 2, "off": 1, "marked": 1, "applied": 3, "failed": 1,
                         "refused": 4, "pushed": 5, "unsent": 6, "superseded": 7,
                         "unconfirmed": 8})
    got = {(s.name): s.value for f in text_string_to_metric_families(m.exposition().decode())
           for s in f.samples}
    assert got["opptune_recommend_applied_total"] == 2 + 1 + 1 + 3 + 1 + 8
    assert got["opptune_recommend_verified_total"] == 2
    assert got["opptune_recommend_unconfirmed_total"] == 8
    assert got["opptune_recommend_off_total"] == 1
    assert got["opptune_recommend_refused_total"] == 4


def test_every_metric_served_is_named_in_the_readme_metrics_section():
    """The section listed the counters 'since the daemon's start' without the two of frames
    refused unread (named only in "The link's security"): a scraper's list from the section
    missed them."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("### Metrics", 1)[1].split("\n### ", 1)[0]
    m = DaemonMetrics({})
    served = {f.name for f in text_string_to_metric_families(m.exposition().decode())
              if not f.name.endswith("_created")}  # prometheus_client's, of each histogram
    missing = sorted(n for n in served
                     if n not in section and f"{n}_total" not in section
                     and f"_{n.rsplit('_', 1)[-1]}_total" not in section)
    assert missing == []


def run_daemon(tmp_path, *extra, config_text=None):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(config_text or f'bind = "{free_endpoint()}"\n'
                                  f'database = "{tmp_path / "db" / "o.db"}"\n')
    return subprocess.run([str(BIN / "opptune-daemon"), "--config", str(cfg), *extra],
                          capture_output=True, text=True, timeout=30)


def one_line(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("opptune-daemon: ")
    for n in needles:
        assert n in lines[0], lines[0]


def test_metrics_port_in_use_is_one_line_and_no_database(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_daemon(tmp_path, "--metrics-endpoint", f"127.0.0.1:{port}")
    one_line(proc, f"cannot serve metrics on 127.0.0.1:{port}", "in use", "metrics_endpoint")
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("value", ["9464", "localhost:", "127.0.0.1:99999", "http://h:1"])
def test_bad_metrics_endpoint_in_config_names_the_key(tmp_path, value):
    proc = run_daemon(tmp_path, config_text=f'metrics_endpoint = "{value}"\n'
                                            f'database = "{tmp_path / "db" / "o.db"}"\n')
    one_line(proc, "key 'metrics_endpoint'", "HOST:PORT", "127.0.0.1:9464")
    assert not (tmp_path / "db").exists()


def test_head_is_answered_as_get_without_a_body_and_other_methods_get_405():
    """HEAD (a monitor's health check) was answered 501 'Unsupported method': the server
    looked broken. Now HEAD has GET's status and headers and no body; POST and the other
    standard methods get 405 with Allow, the way to ask."""
    import http.client

    from opptune.daemon.metrics import MetricsServer
    body = b"opptune_up 1.0\n"
    server = MetricsServer(f"127.0.0.1:{free_port()}", lambda: body)
    host, port = server.endpoint.rsplit(":", 1)

    def ask(method: str, path: str = "/metrics") -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    try:
        status, got, text = ask("GET")
        assert (status, text) == (200, body)
        status, head, text = ask("HEAD")
        assert (status, text) == (200, b"")
        assert head["Content-Type"] == got["Content-Type"]
        assert head["Content-Length"] == str(len(body))
        assert ask("HEAD", "/other")[0] == 404
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            status, headers, text = ask(method)
            assert status == 405 and headers["Allow"] == "GET, HEAD", (method, status)
            assert b"use GET /metrics" in text
    finally:
        server.close()
