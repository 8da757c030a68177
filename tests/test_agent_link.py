"""The agent's link against a test ROUTER in this process, and the real agent as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import zmq

from opptune.agent.link import Link
from opptune.agent.outbox import Outbox
from opptune.shared import protocol as P
from opptune.shared.records import RunRecord
from procs import RUN_AS_OPTION, wait_until

HB = 0.1  # fast heartbeats keep the tests short


class Router:
    """A stand-in daemon: ROUTER on a random loopback port."""

    def __init__(self, ctx, endpoint="tcp://127.0.0.1:*"):
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        deadline = time.monotonic() + 5.0
        while True:
            try:
                self.sock.bind(endpoint)
                break
            except zmq.ZMQError as exc:
                # a restarted stand-in rebinds the port its predecessor just closed, which the
                # I/O thread may still hold for a moment
                if exc.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                    self.sock.close()  # an open socket would make the context's term() hang
                    raise
                time.sleep(0.05)  # retry interval of the bind, not synchronisation
        self.endpoint = self.sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.ident = None
        self.alive = True  # answer heartbeats, as a live daemon does
        # the heartbeat's body: without "results_max", a daemon that takes no results frames
        self.welcome = {"instance": "test-daemon"}

    def recv(self, timeout=5.0):
        """Next (identity, decoded message) or None on timeout."""
        if not self.sock.poll(int(timeout * 1000)):
            return None
        ident, data = self.sock.recv_multipart()
        self.ident = ident
        msg = P.decode(data)
        if self.alive and msg["type"] == "heartbeat":
            self.send(P.make("heartbeat", "daemon", self.welcome))
        return msg

    def expect(self, pred, timeout=5.0, what="message"):
        """Receive until ``pred(msg)``; returns the messages seen (last one matches)."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.recv(max(0.0, deadline - time.monotonic()))
            if m is None:
                break
            seen.append(m)
            if pred(m):
                return seen
        raise AssertionError(f"no {what} within {timeout}s; saw {[m['type'] for m in seen]}")

    def collect(self, duration):
        out = []
        deadline = time.monotonic() + duration
        while (left := deadline - time.monotonic()) > 0:
            m = self.recv(left)
            if m is not None:
                out.append(m)
        return out

    def send(self, msg_or_bytes, ident=None):
        data = msg_or_bytes if isinstance(msg_or_bytes, bytes) else P.encode(msg_or_bytes)
        self.sock.send_multipart([ident or self.ident, data])

    def close(self):
        self.sock.close()


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    # term() waits for every socket to close: after a failed test a socket left open would
    # hang the whole run, so wait a bounded time and fail instead
    t = threading.Thread(target=c.term, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "a ZeroMQ socket of the test was left open"


@pytest.fixture
def router(ctx):
    r = Router(ctx)
    yield r
    r.close()


class LinkThread:
    def __init__(self, ctx, endpoint, outbox, on_message=None, **kw):
        self.got = []
        self.stop = threading.Event()
        self.link = Link("agent-t", endpoint, {"platform": {"id": "p"}, "workloads": []},
                         outbox, on_message or self.got.append, heartbeat_s=HB,
                         context=ctx, **kw)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.link.start()
        try:
            self.link.run(self.stop)
        finally:
            self.link.close()

    def close(self):
        self.stop.set()
        self.link.wake()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


def result_msg(seq=0, of=3):
    rec = {"platform": "p", "workload": "w", "input": "default", "cores": 1, "cpus": [0],
           "threads": 1, "rep": 0, "time_s": 1.0}
    return P.make("result", "agent-t", {"job_id": "j", "seq": seq, "of": of, "record": rec})


def test_hello_first_then_heartbeats(ctx, router, tmp_path):
    lt = LinkThread(ctx, router.endpoint, Outbox(str(tmp_path)))
    try:
        first = router.recv()
        assert first["type"] == "hello" and first["agent"] == "agent-t"
        # a routing id of its own: the daemon hears a second agent of one id too
        assert router.ident == f"agent-t/{first['body']['instance']}".encode()
        assert first["body"]["platform"] == {"id": "p"} and first["body"]["pid"] == os.getpid()
        import opptune
        assert first["body"]["agent_version"] == opptune.__version__  # one version, one place
        hbs = [m for m in router.collect(6 * HB) if m["type"] == "heartbeat"]
        assert len(hbs) >= 3
        assert hbs[0]["body"]["outbox"] == 0 and hbs[0]["body"]["instance"]
    finally:
        lt.close()


def test_result_resent_until_acked(ctx, router, tmp_path):
    ob = Outbox(str(tmp_path))
    msg = result_msg()
    ob.put(msg)
    lt = LinkThread(ctx, router.endpoint, ob, resend_s=0.2)
    try:
        router.expect(lambda m: m["type"] == "hello")
        router.send(P.make("heartbeat", "daemon", {}))  # daemon alive
        sends = [m for m in router.collect(1.0) if m["type"] == "result"]
        assert len(sends) >= 3 and all(m["id"] == msg["id"] for m in sends)
        router.send(P.make("ack", "daemon", {"ids": [msg["id"]]}))
        router.expect(lambda m: m["type"] == "heartbeat" and m["body"]["outbox"] == 0)
        later = router.collect(1.0)
        assert not [m for m in later if m["type"] == "result"]
    finally:
        lt.close()
    assert ob.count() == 0


def test_rehello_after_unknown_agent_and_new_results_flow(ctx, router, tmp_path):
    ob = Outbox(str(tmp_path))
    lt = LinkThread(ctx, router.endpoint, ob)
    try:
        router.expect(lambda m: m["type"] == "hello")
        router.send(P.error_reply("daemon", "unknown_agent", "who are you"))
        router.expect(lambda m: m["type"] == "hello", what="second hello")
        msg = result_msg(1)
        ob.put(msg)
        lt.link.notify_outbox()
        router.expect(lambda m: m["type"] == "result" and m["id"] == msg["id"])
    finally:
        lt.close()


def test_hello_again_goes_before_the_results_stored_after_it(ctx, router, tmp_path):
    """A workload's program changed while the agent runs (agent/cli.program_changed): the
    hello asked for from another thread goes out with the workloads as they are now, its
    event set once it is on the socket, and a result stored after that follows it."""
    ob = Outbox(str(tmp_path))
    programs = ["p1"]
    lt = LinkThread(ctx, router.endpoint, ob)
    lt.link.hello_body["workloads"] = lambda: [{"name": "w", "program": programs[-1]}]
    try:
        router.expect(lambda m: m["type"] == "hello")
        router.send(P.make("heartbeat", "daemon", {}))
        programs.append("p2")
        assert lt.link.hello_again().wait(5.0)
        msg = result_msg()
        ob.put(msg)
        lt.link.notify_outbox()
        seen = router.expect(lambda m: m["type"] == "result", what="the result")
        hellos = [m for m in seen if m["type"] == "hello"]
        assert [h["body"]["workloads"] for h in hellos] == [[{"name": "w", "program": "p2"}]]
        assert seen.index(hellos[0]) < len(seen) - 1
    finally:
        lt.close()


def test_malformed_messages_get_error_and_loop_survives(ctx, router, tmp_path):
    lt = LinkThread(ctx, router.endpoint, Outbox(str(tmp_path)))
    try:
        router.expect(lambda m: m["type"] == "hello")
        router.send(b"\xc1garbage")
        err = router.expect(lambda m: m["type"] == "error")[-1]
        assert err["body"]["code"] == "malformed"
        bad = {"v": 1, "type": "job", "id": "x1", "ts": 1.0, "agent": "d", "body": {}}
        router.send(__import__("msgpack").packb(bad))
        err = router.expect(lambda m: m["type"] == "error")[-1]
        assert err["body"]["code"] == "missing_field" and err["body"]["ref"] == "x1"
        router.send(P.make("result", "d", result_msg()["body"]))  # not for an agent
        err = router.expect(lambda m: m["type"] == "error")[-1]
        assert err["body"]["code"] == "unexpected_type"
        job = P.make("job", "d", {"job_id": "j", "workload": "w", "size": "default",
                                  "points": [{"cpus": [0], "threads": 1}], "reps": 1,
                                  "warmup": 0})
        router.send(job)
        router.expect(lambda m: m["type"] == "heartbeat")
        deadline = time.monotonic() + 5
        while not lt.got and time.monotonic() < deadline:
            router.recv(HB)
        assert [m["id"] for m in lt.got] == [job["id"]]
    finally:
        lt.close()


def test_daemon_gone_then_back_after_restart(ctx, tmp_path):
    """Daemon killed (socket closed without a word) and restarted on the same port: the agent
    says hello again and every unacked result arrives."""
    ob = Outbox(str(tmp_path))
    r1 = Router(ctx)
    endpoint = r1.endpoint
    lt = LinkThread(ctx, endpoint, ob, resend_s=0.3)
    try:
        r1.expect(lambda m: m["type"] == "hello")
        r1.send(P.make("heartbeat", "daemon", {"instance": "d1"}))
        msgs = [result_msg(i, 3) for i in range(3)]
        for m in msgs:
            ob.put(m)
        lt.link.notify_outbox()
        r1.expect(lambda m: m["type"] == "result")
        r1.close()  # killed before acking anything
        r2 = Router(ctx, endpoint)
        r2.alive = False  # a daemon that has not met this agent yet
        try:
            # the agent keeps heartbeating into the void; the new daemon does not know it
            r2.expect(lambda m: m["type"] == "heartbeat", timeout=10)
            r2.send(P.error_reply("daemon", "unknown_agent", "restarted"))
            seen = r2.expect(lambda m: m["type"] == "hello", timeout=5)
            got = {m["id"] for m in seen + r2.collect(1.5) if m["type"] == "result"}
            assert got == {m["id"] for m in msgs}
            r2.send(P.make("ack", "daemon", {"ids": sorted(got)}))
            r2.expect(lambda m: m["type"] == "heartbeat" and m["body"]["outbox"] == 0)
        finally:
            r2.close()
    finally:
        lt.close()
    assert ob.count() == 0


def test_window_bounds_in_flight(ctx, router, tmp_path):
    ob = Outbox(str(tmp_path))
    for i in range(30):
        ob.put(result_msg(i % 3, 3))
    lt = LinkThread(ctx, router.endpoint, ob, resend_s=30.0, window=10)

    def ten_results():
        got: list = []
        router.expect(lambda m: m["type"] == "result" and got.append(m) is None
                      and len(got) == 10, timeout=30, what="10 results")
        # the window is full: nothing more may come (a broken bound sends the 11th at once)
        return got + [m for m in router.collect(0.5) if m["type"] == "result"]

    try:
        got = ten_results()
        assert len(got) == 10  # the rest wait for acks
        router.send(P.make("ack", "daemon", {"ids": [m["id"] for m in got]}))
        more = ten_results()
        assert len(more) == 10 and not {m["id"] for m in more} & {m["id"] for m in got}
    finally:
        lt.close()


# -- the real agent process ---------------------------------------------------------------------

AGENT_TOML = """
agent_id = "board-1"
heartbeat_s = 0.2
bench_kernels = []
run_timeout_s = 20.0

[[workloads]]
name = "spin"
command = ["{py}", "-c", "import sys,os,time,json; t=time.perf_counter(); sum(range(int(sys.argv[1]))); open(os.environ['MARK'],'a').write(str(os.environ['SPIN_T'])+'\\\\n'); print(json.dumps({{'time_s': time.perf_counter()-t}}))", "{{size}}"]
sizes = ["20000", "3000000"]
threads_env = "SPIN_T"
env = {{ MARK = "{mark}" }}
"""


def start_agent(tmp_path, endpoint, extra=(), keys=""):
    """The agent with AGENT_TOML; ``keys``: more top-level TOML lines of its configuration."""
    cfg = tmp_path / "agent.toml"
    cfg.write_text(keys + AGENT_TOML.format(py=sys.executable, mark=tmp_path / "runs.txt"))
    return subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config", str(cfg),
                             "--daemon", endpoint, "--state-dir", str(tmp_path / "state"),
                             "--log-level", "DEBUG", *RUN_AS_OPTION, *extra],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "agent.log", "a"))


def job(reps, size="20000", n_points=2, job_id="job-1"):
    cpus = sorted(os.sched_getaffinity(0))
    pts = [{"cpus": cpus[: (i % len(cpus)) + 1], "threads": i + 1, "freq_khz": None}
           for i in range(n_points)]
    return P.make("job", "daemon", {"job_id": job_id, "workload": "spin", "size": size,
                                    "points": pts, "reps": reps, "warmup": 0})


@pytest.mark.integration
def test_agent_process_runs_job_refuses_bad_and_stops_on_sigterm(ctx, router, tmp_path):
    proc = start_agent(tmp_path, router.endpoint)
    try:
        hello = router.expect(lambda m: m["type"] == "hello", timeout=15)[-1]
        body = hello["body"]
        assert hello["agent"] == "board-1"
        assert [w["name"] for w in body["workloads"]] == ["spin"]
        plat = body["platform"]
        assert plat["cpus_online"] and plat["id"] and plat["cpufreq"]["available"] in (True, False)
        assert plat["virtual"] is False
        router.send(b"not msgpack at all \xc1")
        assert router.expect(lambda m: m["type"] == "error")[-1]["body"]["code"] == "malformed"
        bad = P.make("job", "daemon", {"job_id": "bad", "workload": "rm-rf", "size": "x",
                                       "points": [{"cpus": [0], "threads": 1}], "reps": 1,
                                       "warmup": 0})
        router.send(bad)
        err = router.expect(lambda m: m["type"] == "error")[-1]["body"]
        assert err["code"] == "bad_job" and "unknown workload 'rm-rf'" in err["message"]
        assert err["ref"] == bad["id"]
        router.send(job(reps=2))
        results = [m for m in router.expect(
            lambda m: m["type"] == "result" and m["body"]["seq"] == 3, timeout=20)
            if m["type"] == "result"]
        seqs = sorted({m["body"]["seq"] for m in results})
        assert seqs == [0, 1, 2, 3]
        for m in results:
            rec = RunRecord.from_dict(m["body"]["record"])
            assert rec.ok and rec.time_s > 0 and rec.user_s is not None
            assert rec.platform == plat["id"] and m["body"]["of"] == 4
        router.send(P.make("ack", "daemon", {"ids": [m["id"] for m in results]}))
        router.expect(lambda m: m["type"] == "heartbeat" and m["body"]["outbox"] == 0)
        runs = (tmp_path / "runs.txt").read_text().split()
        assert runs == ["1", "1", "2", "2"]  # threads exported; nothing ran for the bad job
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.integration
def test_agent_killed_mid_job_resumes_without_rerun(ctx, router, tmp_path):
    proc = start_agent(tmp_path, router.endpoint)
    try:
        router.expect(lambda m: m["type"] == "hello", timeout=15)
        j = job(reps=3, size="3000000", n_points=2, job_id="job-k")  # 6 runs
        router.send(j)
        first = router.expect(lambda m: m["type"] == "result" and m["body"]["seq"] >= 1,
                              timeout=30)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        ids_before = {m["body"]["seq"]: m["id"] for m in first if m["type"] == "result"}
        runs_before = len((tmp_path / "runs.txt").read_text().split())
        proc = start_agent(tmp_path, router.endpoint)
        router.expect(lambda m: m["type"] == "hello", timeout=15)
        results = {}
        deadline = time.monotonic() + 40
        while len(results) < 6 and time.monotonic() < deadline:
            m = router.recv(1.0)
            if m is not None and m["type"] == "result":
                results.setdefault(m["body"]["seq"], set()).add(m["id"])
        assert sorted(results) == list(range(6))
        assert all(len(v) == 1 for v in results.values())  # one id per seq: resent, not re-run
        for seq, mid in ids_before.items():
            assert results[seq] == {mid}
        runs = len((tmp_path / "runs.txt").read_text().split())
        # at most the run in progress at the kill is repeated (its orphan may still finish)
        assert runs <= 6 + 1 and runs - runs_before <= 6 - len(ids_before) + 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_config_error_exits_2_naming_file_and_key(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("heartbeat_s = 'fast'\n")
    p = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert str(cfg) in p.stderr and "heartbeat_s" in p.stderr


def test_restore_without_state_file_exits_0(tmp_path):
    p = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", "/dev/null",
                        "--state-dir", str(tmp_path), "--restore"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "restored nothing" in p.stderr


# wrong_group: among others, a board whose platform id changed, for what it measured before
@pytest.mark.parametrize("code", ["bad_record", "wrong_group"])
def test_result_refused_for_good_is_parked_not_resent(ctx, router, tmp_path, code):
    ob = Outbox(str(tmp_path))
    bad, transient = result_msg(), result_msg(1)
    ob.put(bad)
    ob.put(transient)
    lt = LinkThread(ctx, router.endpoint, ob, resend_s=0.2)
    try:
        router.expect(lambda m: m["type"] == "hello")
        router.send(P.make("heartbeat", "daemon", {}))
        router.expect(lambda m: m["type"] == "result" and m["id"] == bad["id"])
        router.send(P.error_reply("daemon", code, "refused: x", bad["id"]))
        router.send(P.error_reply("daemon", "store_failed", "disk full", transient["id"]))
        # once both errors are handled, the parked result is never sent again; the other is
        router.expect(lambda m: m["type"] == "heartbeat" and m["body"]["outbox"] == 1)
        later = [m["id"] for m in router.collect(1.0) if m["type"] == "result"]
        assert bad["id"] not in later and transient["id"] in later
    finally:
        lt.close()
    parked = ob.rejected()
    assert [(p["id"], p["code"]) for p in parked] == [(bad["id"], code)]
    assert P.decode(parked[0]["data"])["id"] == bad["id"]  # kept on disk, whole
    assert [i for i, _ in ob.pending()] == [transient["id"]]


def test_result_over_the_daemons_message_size_is_parked_not_resent_forever(ctx, router,
                                                                            tmp_path):
    """The daemon refuses a frame over its max_message_bytes unread, so its refusal names no
    message: the agent, told the limit in the daemon's heartbeat, parks such a result itself
    (kept on disk) instead of resending it every resend_s; the others still go."""
    ob = Outbox(str(tmp_path))
    big = result_msg(0)
    big["body"]["record"]["note"] = "x" * 3000
    small = result_msg(1)
    ob.put(big)
    ob.put(small)
    router.welcome = {"instance": "test-daemon", "max_message_bytes": 2048}
    lt = LinkThread(ctx, router.endpoint, ob, resend_s=0.2)
    try:
        router.expect(lambda m: m["type"] == "hello")
        router.send(P.make("heartbeat", "daemon", router.welcome))
        router.expect(lambda m: m["type"] == "result" and m["id"] == small["id"])
        later = [m["id"] for m in router.collect(1.0) if m["type"] == "result"]
        assert big["id"] not in later and small["id"] in later  # the small one, resent
    finally:
        lt.close()
    parked = ob.rejected()
    assert [(p["id"], p["code"]) for p in parked] == [(big["id"], "too_large")]
    assert "2048" in parked[0]["reason"] and "max_message_bytes" in parked[0]["reason"]
    assert [i for i, _ in ob.pending()] == [small["id"]]


def test_a_refusal_of_an_unread_frame_names_no_message_none(ctx, router, tmp_path, caplog):
    """A daemon whose max_message_bytes is below a hello's size (about 5 KB) refuses the hello
    unread: the refusal names no message, and the agent's line read 'refused None: ...'."""
    import logging
    lt = LinkThread(ctx, router.endpoint, Outbox(str(tmp_path)), resend_s=0.2)
    try:
        with caplog.at_level(logging.WARNING, logger="opptune.agent.link"):
            router.expect(lambda m: m["type"] == "hello")
            router.send(P.error_reply("daemon", "too_large", "message of 4960 bytes exceeds "
                                      "the daemon's limit of 1024 bytes (max_message_bytes)",
                                      None))
            said = wait_until(lambda: [r.getMessage() for r in caplog.records
                                       if "max_message_bytes" in r.getMessage()],
                              "the agent's line on the refusal", 10)
    finally:
        lt.close()
    assert "refused a message it did not read: message of 4960 bytes" in said[0], said
    assert "None" not in said[0]


def test_silence_over_curve_names_daemon_public_key_as_the_likely_cause(ctx, tmp_path, caplog):
    """Walking a fleet: an agent given a wrong daemon_public_key only logged that the daemon
    was gone (the handshake fails silently on both sides). Now the warning says to check the
    key when nothing ever came over CURVE; a plain link's silence says nothing of keys."""
    import logging
    server_pub, server_sec = zmq.curve_keypair()
    wrong_pub, _ = zmq.curve_keypair()
    own_pub, own_sec = zmq.curve_keypair()
    router = Router(ctx)
    router.sock.curve_server = True  # set before a peer connects: it applies per connection
    router.sock.curve_secretkey = server_sec

    def gone_warnings(endpoint, **kw):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="opptune.agent.link"):
            lt = LinkThread(ctx, endpoint, Outbox(str(tmp_path / str(len(kw)))), **kw)
            try:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    found = [r.getMessage() for r in caplog.records
                             if "considering it gone" in r.getMessage()]
                    if found:
                        return found
                    time.sleep(HB)  # polling interval for the log, not synchronisation
            finally:
                lt.close()
        raise AssertionError("no 'considering it gone' warning within 10 s")

    try:
        (msg,) = gone_warnings(router.endpoint,
                               curve=(wrong_pub.decode(), own_pub.decode(), own_sec.decode()))
        assert "daemon_public_key" in msg and "opptune keys server" in msg
    finally:
        router.close()
    silent = Router(ctx)
    silent.alive = False
    try:
        (msg,) = gone_warnings(silent.endpoint)
        assert "daemon_public_key" not in msg
    finally:
        silent.close()


def test_an_agent_no_daemon_ever_answered_says_what_to_check_and_keeps_saying_it(
        ctx, tmp_path, caplog, monkeypatch):
    """An agent started before its daemon, or given the wrong port, logged 'no message from
    the daemon ... considering it gone' once and then nothing while it kept trying. The line
    says that nothing ever came, what to check and that it keeps trying; a line every
    GONE_REMIND_S says it still waits, with the results waiting in the outbox."""
    import logging
    import socket
    from opptune.agent import link as link_module
    monkeypatch.setattr(link_module, "GONE_REMIND_S", 5 * HB, raising=False)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with caplog.at_level(logging.WARNING, logger="opptune.agent.link"):
        lt = LinkThread(ctx, endpoint, Outbox(str(tmp_path)))
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any(
                    "still no message" in r.getMessage() for r in caplog.records):
                time.sleep(HB)  # polling interval for the log, not synchronisation
        finally:
            lt.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(f"no message from the daemon at {endpoint} for "), lines
    assert lines[0].endswith(
        ": considering it gone; nothing has come from it since the agent connected: check "
        "that opptune-daemon runs there and that 'daemon' (--daemon) is its log's 'listening "
        "on' endpoint; the agent keeps trying and says hello once it answers"), lines
    assert any(line.startswith(f"still no message from the daemon at {endpoint} (for ")
               and line.endswith("); 0 results wait in the outbox") for line in lines[1:]), lines


def test_a_refused_key_is_logged_once_across_fail_overs(ctx, tmp_path, caplog):
    """Checked walking a fleet: the agent whose key waits says so once, not again at each
    reconnect. Two daemons refuse its key; each falls silent in turn, so the agent fails over
    A -> B -> A -> B; the refusal is logged once for the three refusing connections."""
    import logging
    a, b = Router(ctx), Router(ctx)
    refusal = "this agent's key 0123abcd waits for approval; on the daemon's host run: " \
              "opptune keys accept 0123abcd"
    try:
        with caplog.at_level(logging.INFO, logger="opptune.agent.link"):
            lt = LinkThread(ctx, [a.endpoint, b.endpoint], Outbox(str(tmp_path / "ob")))
            try:
                # A refuses three messages, then falls silent: the agent fails over to B,
                # which does the same, and back to A
                for serving, fail_overs in ((a, 1), (b, 2), (a, 3)):
                    deadline = time.monotonic() + 10
                    refused = 0
                    while lt.link.stats["failovers"] < fail_overs or refused < 3:
                        assert time.monotonic() < deadline, lt.link.stats
                        for r in (a, b):
                            if not r.sock.poll(10):
                                continue
                            ident, data = r.sock.recv_multipart()
                            if r is serving and refused < 3:
                                msg = P.decode(data)
                                r.send(P.error_reply("daemon", "key_pending", refusal,
                                                     msg["id"]), ident)
                                refused += 1
            finally:
                lt.close()
    finally:
        a.close()
        b.close()
    logged = [r.getMessage() for r in caplog.records]
    assert sum("daemon refuses this agent's messages" in m for m in logged) == 1, logged
    assert sum("failing over" in m for m in logged) >= 3, logged


def test_a_second_agent_of_one_id_is_heard_by_the_daemon(ctx, tmp_path):
    """Two boards of one host name (the default agent_id): the daemon's socket kept the first
    connection of the id and dropped the second's messages unread, so the daemon could not
    say what was wrong (the second agent only logged that the daemon was gone). Each agent
    process connects with a routing id of its own: the second's hello arrives."""
    router = Router(ctx)
    first = ctx.socket(zmq.DEALER)
    first.setsockopt(zmq.LINGER, 0)
    first.setsockopt(zmq.IDENTITY, b"agent-t")  # an agent of the id, as older agents connect
    first.connect(router.endpoint)
    try:
        first.send(P.encode(P.make("heartbeat", "agent-t", {})))
        assert router.recv() is not None and router.ident == b"agent-t"
        lt = LinkThread(ctx, router.endpoint, Outbox(str(tmp_path / "ob")))
        try:
            msgs = router.expect(lambda m: m["type"] == "hello", what="the second's hello")
            assert msgs[-1]["agent"] == "agent-t" and router.ident != b"agent-t"
        finally:
            lt.close()
    finally:
        first.close()
        router.close()
