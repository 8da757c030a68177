"""Floods write few log lines: a real agent sent thousands of bad frames, bad jobs and error
messages by its daemon logs a line per kind (then one a minute), answers every one and still
runs jobs; a real daemon sent thousands of ``error`` messages by an accepted agent logs one line
per agent per 10 s and still stores results."""

from __future__ import annotations

import time

import pytest

from opptune.shared import protocol as P
from procs import db_rows
from test_agent_link import ctx, job, router, start_agent  # noqa: F401 (fixtures)
from test_daemon_service import record
from test_duplicates import accepted_client, cluster  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

N = 1500


def log_lines(path, *marks):
    text = path.read_text(errors="replace") if path.exists() else ""
    return [ln for ln in text.splitlines() if any(m in ln for m in marks)]


def test_agent_flooded_by_its_daemon_logs_a_few_lines_and_still_serves(ctx, router,  # noqa: F811
                                                                        tmp_path):
    proc = start_agent(tmp_path, router.endpoint)
    log = tmp_path / "agent.log"
    try:
        router.expect(lambda m: m["type"] == "hello", timeout=15)
        before = len(log_lines(log, ""))
        bad_job = P.make("job", "daemon", {"job_id": "bad", "workload": "rm-rf", "size": "x",
                                           "points": [{"cpus": [0], "threads": 1}], "reps": 1,
                                           "warmup": 0})
        # in rounds below the sockets' queue limits, each round's answers awaited: every bad
        # frame and bad job is answered, in order, so all of the round was handled
        for r in range(0, N, 100):
            for i in range(r, r + 100):
                router.send(P.make("error", "daemon", {"code": "odd", "message": f"no {i}",
                                                       "ref": f"m{i}"}))
                router.send(b"\xc1 not msgpack %d" % i)
                router.send(P.make("job", "daemon", {**bad_job["body"], "job_id": f"bad-{i}"}))
            answers = {"malformed": 0, "bad_job": 0}
            deadline = time.monotonic() + 30
            while answers != {"malformed": 100, "bad_job": 100}:
                m = router.recv(max(0.0, deadline - time.monotonic()))
                assert m is not None, f"round {r}: answers missing, got {answers}"
                if m["type"] == "error":
                    answers[m["body"]["code"]] += 1
        refused = log_lines(log, "refused")
        assert len(refused) == 3, refused  # one line per kind within the minute
        assert any("refused a message from the daemon at" in ln and "(malformed)" in ln
                   for ln in refused), refused
        assert any("refused a job from the daemon: bad-0: point 0: unknown workload 'rm-rf'" in ln
                   for ln in refused), refused
        assert any("refused m0: no 0 (odd)" in ln for ln in refused), refused
        assert len(log_lines(log, "")) - before < 40  # and nothing else per frame
        router.send(job(reps=1, n_points=1, job_id="after"))
        router.expect(lambda m: m["type"] == "result" and m["body"]["job_id"] == "after",
                      timeout=30, what="a result of the job sent after the flood")
    finally:
        proc.kill()
        proc.wait()


def test_daemon_flooded_with_agent_errors_logs_a_few_lines_and_still_stores(cluster,  # noqa: F811
                                                                             tmp_path):
    c = cluster
    log = c.tmp / "daemon.log"
    client = accepted_client(c, tmp_path)
    try:
        job_body = client.next(("job",))["body"]
        before = len(log_lines(log, ""))
        for i in range(N):
            client.send("error", {"code": "odd", "message": f"trouble {i}", "ref": f"m{i}"})
        of = len(job_body["points"]) * job_body["reps"]
        mid = client.send("result", {"job_id": job_body["job_id"], "seq": 0, "of": of,
                                     "record": record(1, 0)})
        client.acks([mid])  # handled after every error before it
        lines = log_lines(log, "reports:")
        # one line per agent per 10 s: a run slower than 10 s may log a second one
        assert 1 <= len(lines) <= 2, lines
        assert "agent dup reports: trouble 0 (about m0) (odd)" in lines[0], lines
        assert len(log_lines(log, "")) - before < 20, log_lines(log, "")[before:][:30]
        assert db_rows(c.db, "SELECT seq FROM runs") == [(0,)]
    finally:
        client.sock.close(0)
