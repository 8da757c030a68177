"""A real agent process refuses configurations it cannot honour, says why, and runs nothing."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest
import zmq

from opptune.shared import protocol as P
from procs import AGENT_RUN_AS, write_toml

pytestmark = pytest.mark.integration


@pytest.fixture
def agent_and_router(tmp_path):
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("tcp://127.0.0.1:*")
    endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    cfg = write_toml(tmp_path / "agent.toml", {
        "agent_id": "refusing-agent", "daemon": endpoint, "state_dir": str(tmp_path / "state"),
        "heartbeat_s": 0.5, "bench_kernels": ["pi_integrate"], **AGENT_RUN_AS})
    log = open(tmp_path / "agent.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config", str(cfg)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield router, proc, tmp_path
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
        router.close(0)
        ctx.term()


def _recv(router, want: str, timeout_ms: int = 20000):
    """The next message of type ``want`` (heartbeats and hellos pass by)."""
    while router.poll(timeout_ms):
        ident, data = router.recv_multipart()
        msg = P.decode(data)
        if msg["type"] == want:
            return ident, msg
    raise AssertionError(f"no {want} message from the agent")


def _applied(router, config_id: str, timeout_ms: int = 20000):
    """The agent's ``applied`` reply to ``config_id``, each reply acked as the daemon would
    (an unacked one is resent from the outbox and would pass for the next config's)."""
    while True:
        ident, msg = _recv(router, "applied", timeout_ms)
        router.send_multipart([ident, P.encode(P.make("ack", "daemon", {"ids": [msg["id"]]}))])
        if msg["body"]["config_id"] == config_id:
            return msg


def _config(**kw):
    body = {"config_id": P.new_id(), "workload": "pi_integrate", "size": "small", "cpus": [0],
            "threads": 1, "freq_khz": None, "reps": 1}
    body.update(kw)
    return body


def test_refuses_more_cores_than_it_has_and_unknown_workloads(agent_and_router):
    router, proc, tmp = agent_and_router
    ident, hello = _recv(router, "hello")
    online = hello["body"]["platform"]["cpus_online"]
    too_many = list(range(max(online) + 1 + 8))
    cases = [
        (_config(cpus=too_many, threads=len(too_many)), ("cpu", "online")),
        (_config(workload="rm-rf"), ("rm-rf",)),
        (_config(size="galactic"), ("galactic",)),
    ]
    for body, needles in cases:
        router.send_multipart([ident, P.encode(P.make("config", "daemon", body))])
        applied = _applied(router, body["config_id"])
        assert applied["body"]["ok"] is False
        err = applied["body"]["error"]
        assert all(n in err for n in needles), err
        assert not applied["body"].get("records")
    # A valid config afterwards still runs: the refusals left the agent serving.
    good = _config(cpus=[online[0]])
    router.send_multipart([ident, P.encode(P.make("config", "daemon", good))])
    applied = _applied(router, good["config_id"], timeout_ms=60000)
    assert applied["body"]["ok"] is True and applied["body"]["time_s"] > 0
    assert proc.poll() is None


def test_malformed_frame_gets_an_error_and_the_agent_goes_on(agent_and_router):
    router, proc, _ = agent_and_router
    ident, _ = _recv(router, "hello")
    router.send_multipart([ident, b"\xc1 not msgpack"])
    _, err = _recv(router, "error")
    assert err["body"]["code"] == "malformed"
    router.send_multipart([ident, P.encode(P.make("heartbeat", "daemon", {}))])
    _recv(router, "heartbeat")
    assert proc.poll() is None


def test_a_real_agent_pins_a_running_process_and_refuses_itself(agent_and_router):
    """Over the wire: a pid target gets the cpu set on every thread; the agent's own pid and
    a gone process are refused with the reason."""
    router, proc, tmp = agent_and_router
    ident, hello = _recv(router, "hello")
    target = subprocess.Popen([sys.executable, "-c", "import sys, threading\n"
                               "threading.Thread(target=sys.stdin.read, daemon=True).start()\n"
                               "print('ready', flush=True)\nsys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        for t, needle in (({"kind": "pid", "pid": proc.pid}, "is the agent itself"),
                          ({"kind": "pid", "pid": 2 ** 22 + 9}, "no process 4194313")):
            body = _config(target=t)
            router.send_multipart([ident, P.encode(P.make("config", "daemon", body))])
            applied = _applied(router, body["config_id"])
            assert applied["body"]["ok"] is False and needle in applied["body"]["error"]
        body = _config(target={"kind": "pid", "pid": target.pid, "window_s": 0.2})
        router.send_multipart([ident, P.encode(P.make("config", "daemon", body))])
        b = _applied(router, body["config_id"])["body"]
        assert b["ok"] is True and b["records"] == [] and b["time_s"] is None, b
        tids = sorted(int(t) for t in os.listdir(f"/proc/{target.pid}/task"))
        assert b["measured"]["target"]["tids"] == tids and len(tids) == 2
        assert all(os.sched_getaffinity(t) == {0} for t in tids)
    finally:
        target.kill()
        target.wait()
