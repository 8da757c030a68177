"""Hostile frames over real sockets: a daemon process and an agent process each refuse them
by name, keep running and serve a real peer afterwards; the short run of benchmarks/fuzz.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from opptune.shared import protocol as P
from procs import Cluster, all_jobs_complete
from test_agent_link import Router, job, start_agent

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent


def _env(**kw):
    msg = {"v": 1, "type": "heartbeat", "id": P.new_id(), "ts": 1.0, "agent": "evil",
           "body": {}}
    msg.update(kw)
    return msgpack.packb(msg, use_bin_type=True)


REC = {"platform": "p", "workload": "w", "input": "s", "cores": 1, "cpus": [0], "threads": 1,
       "rep": 0, "time_s": 1.0}
# one frame per refusal reason the daemon gives before or while handling a message
HOSTILE = {
    "malformed": [b"\xc1\x00garbage"],
    "too_large": [b"\x00" * (P.MAX_MESSAGE_BYTES + 1)],
    "bad_frame": [b"one", b"two"],
    "bad_type": [_env(ts="yesterday")],
    "missing_field": [_env(type="result", body={"job_id": "j"})],
    "bad_version": [_env(v=7)],
    "unknown_type": [_env(type="launch")],
    "bad_id": [_env(id="")],
    "bad_agent": [_env(agent="a" * 65)],
    "bad_value": [_env(type="hello", body={"platform": {"x": b"\x00"}, "workloads": [],
                                           "agent_version": "1"})],
    "unknown_agent": [_env(type="result", agent="never-said-hello",
                           body={"job_id": "j", "seq": 0, "of": 1, "record": REC})],
    "unexpected_type": [_env(type="ack", body={"ids": ["x"]})],
    "unknown_query": [_env(type="query", body={"what": "rm -rf /"})],
}


def test_daemon_process_refuses_each_frame_by_name_and_serves_an_agent(tmp_path):
    c = Cluster(tmp_path, kernels=("pi_integrate",), reps=1, max_cores=1)
    c.start_daemon()
    ctx = zmq.Context()
    try:
        c.wait_for(lambda s: True, timeout=30, what="the daemon")
        for code, frames in HOSTILE.items():
            # each from a peer of its own: the bounded log writes one line per peer
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.IDENTITY, f"evil-{code}".encode())
            s.setsockopt(zmq.LINGER, 0)
            s.connect(c.endpoint)
            s.send_multipart(frames)
            assert s.poll(10_000), f"no answer to the {code} frame"
            err = P.decode(s.recv())
            assert err["type"] == "error" and err["body"]["code"] == code, err
            s.close(0)
        refusals = c.status()["daemon"]["refusals"]
        assert refusals["by_code"] == {code: 1 for code in HOSTILE}
        assert refusals["total"] == len(HOSTILE) and refusals["unlogged"] == 0
        c.start_agent()
        st = c.wait_for(lambda s: all_jobs_complete(s, 1) and s["agents"][0]["outbox"] == 0,
                        timeout=120, what="the real agent's sweep stored and acked")
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == st["jobs"][0]["expected"] > 0
        assert c.status()["daemon"]["refusals"]["total"] == len(HOSTILE)
    finally:
        ctx.term()
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    log = (tmp_path / "daemon.log").read_text()
    lines = [line for line in log.splitlines() if "refused a message from" in line]
    assert len(lines) == len(HOSTILE)  # each refusal once, with its reason
    for code in HOSTILE:
        assert sum(line.endswith(f"({code})") for line in lines) == 1, (code, lines)
    assert "Traceback" not in log


def test_agent_process_refuses_hostile_frames_and_runs_a_valid_job(tmp_path):
    ctx = zmq.Context()
    router = Router(ctx)
    proc = start_agent(tmp_path, router.endpoint)
    try:
        router.expect(lambda m: m["type"] == "hello", timeout=15)
        valid = job(reps=1, n_points=1)["body"]
        frames = [
            (b"\xc1\x00garbage", "malformed"),
            (_env(agent="daemon", type="launch"), "unknown_type"),
            (_env(agent="daemon", type="job", body={**valid, "reps": "many"}), "bad_type"),
            (_env(agent="daemon", type="job", body={**valid, "reps": 2**63}), "bad_value"),
            (_env(agent="daemon", type="job", body={**valid, "x": b"\x00"}), "bad_value"),
            (_env(agent="daemon", type="job", body={**valid, "x": [[[[[[[[[[[[[[[[[[0]]]]]]]]]]
                                                                       ]]]]]]]]}), "bad_value"),
            (_env(agent="daemon", type="job", body={**valid, "workload": "sh"}), "bad_job"),
            (_env(agent="daemon", type="job", body={**valid, "points": [
                {"cpus": [4096], "threads": 1}]}), "bad_job"),
            (_env(agent="daemon", type="hello", body={"platform": {}, "workloads": [],
                                                      "agent_version": "x"}),
             "unexpected_type"),
        ]
        for data, code in frames:
            router.send(data)
            err = router.expect(lambda m: m["type"] == "error")[-1]["body"]
            assert err["code"] == code, (code, err)
        assert proc.poll() is None
        ok = job(reps=2, n_points=1, job_id="after-the-storm")
        router.send(ok)
        got = router.expect(lambda m: m["type"] == "result" and m["body"]["seq"] == 1,
                            timeout=20)
        results = [m for m in got if m["type"] == "result"]
        assert {m["body"]["job_id"] for m in results} == {"after-the-storm"}
        # this stand-in acks nothing, so the agent resends a result once it is stale (2
        # heartbeats, 0.4 s: under load, sooner than the next rep): a resend carries its
        # result's id, and the workload ran once per rep
        ids = {m["body"]["seq"]: {r["id"] for r in results if r["body"]["seq"] ==
                                  m["body"]["seq"]} for m in results}
        assert sorted(ids) == [0, 1] and all(len(v) == 1 for v in ids.values()), results
        assert (tmp_path / "runs.txt").read_text().splitlines() == ["1", "1"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        router.close()
        ctx.term()
    assert "Traceback" not in (tmp_path / "agent.log").read_text()


def test_fuzz_benchmark_short_run():
    """The CI-sized run of benchmarks/fuzz.py: every check it makes holds."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz.py"), "--inputs",
                           "3000", "--agent-inputs", "1500", "--json"],
                          capture_output=True, text=True, timeout=400)
    out = json.loads(proc.stdout)
    assert out["checks"] == {k: True for k in out["checks"]}, (out, proc.stderr[-3000:])
    assert proc.returncode == 0
    assert out["daemon"]["inputs"] == 3000 and out["daemon"]["hangs"] == 0
    assert out["daemon"]["kinds"]["items"] > 100  # results frames with hostile item lists
    assert out["refusals"]["total"] > 2000  # nearly every generated input is refused
    assert out["agent_served"]["results_stored"] == out["agent_served"]["expected"]
