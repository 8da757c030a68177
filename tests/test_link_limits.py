"""Per-agent limits on the daemon's link, over real sockets: a flooding client is refused
(rate_limited) while a well-behaved agent keeps getting acks quickly; an oversized frame is
refused unread; the real agent keeps and resends the results the daemon rate-limited."""

import subprocess
import sys
import time

import pytest
import zmq

from opptune.daemon.service import Daemon
from opptune.shared import config as C
from opptune.shared import protocol as P
from opptune.shared.config import ConfigError, DaemonConfig, SweepDefaults, load_daemon_config
from opptune.shared.records import RunRecord
from procs import wait_until
from procs import Cluster, all_jobs_complete, expected, write_toml

PLATFORM = {"id": "plat-test", "sweep_order": [0, 1], "cpus_online": [0, 1]}

FLOODER = r"""
import sys, zmq
from opptune.shared import protocol as P
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.IDENTITY, b"flood")
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.SNDHWM, 10000)
s.connect(sys.argv[1])
data = P.encode(P.make("heartbeat", "flood", {}))
print("ready", flush=True)
while True:
    try:
        s.send(data, zmq.NOBLOCK)
    except zmq.Again:
        pass
    while s.poll(0):
        s.recv()
"""


def make_daemon(tmp_path, **limits):
    cfg = DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                       auto_sweep=True, agent_timeout_s=30,
                       sweep=SweepDefaults(size="small", reps=1, warmup=0), **limits)
    d = Daemon(cfg)
    d.start_thread()
    return d


def dealer(endpoint, ident):
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, ident.encode())
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    return s


def expect(sock, msg_type, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(left * 1000)):
            raise AssertionError(f"no {msg_type} within {timeout_s} s")
        msg = P.decode(sock.recv())
        if msg["type"] == msg_type:
            return msg


def record(cores, rep, workload="wl"):
    return RunRecord(platform="plat-test", workload=workload, input="small", cores=cores,
                     cpus=[0, 1][:cores], threads=cores, rep=rep, time_s=1.0 / cores,
                     virtual=True).to_dict()


def test_flooder_is_refused_while_a_good_agent_gets_prompt_acks(tmp_path):
    d = make_daemon(tmp_path, rate_limit_per_s=500.0, rate_limit_burst=100)
    flood = subprocess.Popen([sys.executable, "-c", FLOODER, d.endpoint],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    good = dealer(d.endpoint, "good")
    try:
        assert flood.stdout.readline().strip() == b"ready"
        good.send(P.encode(P.make("hello", "good", {"platform": PLATFORM, "workloads": ["wl"],
                                                    "agent_version": "t"})))
        job = expect(good, "job")["body"]
        # wait until the flood is being refused, then measure the good agent
        deadline = time.monotonic() + 10
        while d.stats["refused_rate_limited"] < 1000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert d.stats["refused_rate_limited"] >= 1000
        lat = []
        for i in range(200):
            time.sleep(0.01)  # pacing: the good agent stays well under its 500/s
            mid = P.new_id()
            body = {"job_id": job["job_id"], "seq": 0, "of": 2, "record": record(1, 0)}
            t0 = time.perf_counter()
            good.send(P.encode(P.make("result", "good", body, msg_id=mid)))
            while True:
                msg = expect(good, "ack", timeout_s=5.0)
                if mid in msg["body"]["ids"]:
                    break
            lat.append(time.perf_counter() - t0)
        assert flood.poll() is None  # it flooded the whole time
        lat.sort()
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        print(f"good agent's ack latency under flood: p50 {p50 * 1e3:.1f} ms, "
              f"p99 {p99 * 1e3:.1f} ms; flood refused {d.stats['refused_rate_limited']}")
        assert p99 < 0.5
        assert d.stats["refused_rate_limited"] >= 1000
        assert d.link.refusals.by_code["rate_limited"] == d.stats["refused_rate_limited"]
        # the bounded log: far fewer lines than refusals
        assert d.link.refusals.unlogged >= d.stats["refused_rate_limited"] - 100
    finally:
        flood.kill()
        flood.wait()
        good.close(0)
        d.stop()


def test_oversized_frame_refused_without_decoding(tmp_path, monkeypatch):
    seen = []
    real = P.decode

    def spy(data):
        seen.append(len(data))
        return real(data)

    monkeypatch.setattr(P, "decode", spy)
    d = make_daemon(tmp_path, max_message_bytes=4096)
    s = dealer(d.endpoint, "big")
    try:
        s.send(b"\x81" + b"x" * 5000)  # not even msgpack: only its length is looked at
        err = expect(s, "error")["body"]
        assert err["code"] == "too_large" and "max_message_bytes" in err["message"]
        assert d.stats["refused_too_large"] == 1
        assert all(n <= 4096 for n in seen)
        # still served: a small query is answered
        s.send(P.encode(P.make("query", "big", {"what": "status"})))
        assert expect(s, "reply")["body"]["data"]["daemon"]["stats"]["refused_too_large"] == 1
    finally:
        s.close(0)
        d.stop()


def test_outstanding_jobs_limited_rest_queued_in_the_daemon(tmp_path):
    d = make_daemon(tmp_path, max_outstanding_jobs=1)
    a = dealer(d.endpoint, "a1")
    try:
        a.send(P.encode(P.make("hello", "a1", {"platform": PLATFORM, "agent_version": "t",
                                               "workloads": ["w1", "w2", "w3"]})))
        seen = []
        for _ in range(3):
            job = expect(a, "job")["body"]
            seen.append(job["workload"])
            # only this one is out: the others wait queued in the daemon
            a.send(P.encode(P.make("query", "a1", {"what": "status"})))
            st = expect(a, "reply")["body"]["data"]
            states = sorted(j["state"] for j in st["jobs"] if j["state"] != "done")
            assert states == ["queued"] * (2 - len(seen) + 1) + ["sent"], states
            of = len(job["points"]) * job["reps"]
            seq = 0
            for p in job["points"]:
                for rep in range(job["reps"]):
                    body = {"job_id": job["job_id"], "seq": seq, "of": of,
                            "record": record(len(p["cpus"]), rep, job["workload"])}
                    a.send(P.encode(P.make("result", "a1", body)))
                    seq += 1
        assert sorted(seen) == ["w1", "w2", "w3"]
        assert d.stats["jobs_held"] == 2
    finally:
        a.close(0)
        d.stop()


@pytest.mark.parametrize("key,value", [("max_message_bytes", 10), ("rate_limit_per_s", 0),
                                       ("rate_limit_burst", 0), ("max_outstanding_jobs", 0)])
def test_invalid_limit_names_the_key(tmp_path, key, value):
    p = write_toml(tmp_path / "d.toml", {key: value})
    with pytest.raises(ConfigError) as exc:
        load_daemon_config(p)
    assert f"key '{key}'" in str(exc.value) and str(p) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_defaults_are_valid_and_documented():
    cfg = load_daemon_config(None)
    assert cfg.max_message_bytes == P.MAX_MESSAGE_BYTES
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    text = (root / "etc" / "daemon.toml").read_text() + (root / "README.md").read_text()
    for key, *_ in C.LIMIT_KEYS:
        assert key in text


def test_agent_resends_rate_limited_results_nothing_lost(tmp_path):
    # Under load the results came slower than 4 a second besides the agent's 2 heartbeats,
    # and nothing was refused: heartbeats every 2 s leave the limit to the results, 2 a
    # second with a burst of 2, which the 3 repetitions of one point exceed at any pace
    # the machine measures small runs at.
    c = Cluster(tmp_path, kernels=("pi_integrate", "triad"), reps=3, max_cores=2,
                extra_agent={"heartbeat_s": 2.0})
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 8.0,
        "auto_sweep": True, "auto_recommend": False, "rate_limit_per_s": 2.0,
        "rate_limit_burst": 2, "accept_load": True,  # a loaded machine: no re-measure jobs
    }, {"sweep": {"size": "small", "reps": 3, "warmup": 0, "max_cores": 2}})
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: all_jobs_complete(s, 2) and
                        s["daemon"]["stats"]["refused_rate_limited"] > 0, timeout=90,
                        what="every result stored despite rate limiting")
        n = expected(st)
        assert n == 2 * 2 * 3
        assert c.rows("SELECT COUNT(*) FROM runs") == [(n,)]
        assert c.rows("SELECT COUNT(DISTINCT job_id || '/' || seq) FROM runs") == [(n,)]
    finally:
        codes = c.stop()
    log = (tmp_path / "agent.log").read_text()
    assert "rate_limited" in log
    assert codes["agent"] == 0, c.logs()


@pytest.mark.parametrize("bind", ["tcp://127.0.0.1:0", "tcp://0.0.0.0:0"])
def test_link_reads_req_envelopes_and_refuses_extra_frames(bind):
    """Both receive paths (loopback: frames as bytes; other addresses: frames with their
    peer's address): a REQ peer's envelope is read and its reply enveloped, a message of two
    frames is refused as bad_frame, the next valid one is read."""
    from opptune.daemon.link import Link
    link = Link(bind)
    endpoint = link.endpoint.replace("0.0.0.0", "127.0.0.1")
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    bad = dealer(endpoint, "bad")
    try:
        req.connect(endpoint)
        req.send(P.encode(P.make("heartbeat", "req-agent", {})))

        def one():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if link.poll(100):
                    got = link.recv_batch(10)
                    if got:
                        return got
            raise AssertionError("nothing received")

        [(identity, msg)] = one()
        assert msg["type"] == "heartbeat" and msg["agent"] == "req-agent"
        assert link.send(identity, P.make("heartbeat", "daemon", {}))
        assert req.poll(10_000) and P.decode(req.recv())["type"] == "heartbeat"
        bad.send_multipart([b"one", b"two"])
        bad.send(P.encode(P.make("heartbeat", "bad", {})))
        assert [m["agent"] for _, m in one()] == ["bad"]
        assert expect(bad, "error")["body"]["code"] == "bad_frame"
    finally:
        req.close()
        bad.close()
        link.close()


def test_a_limit_below_a_hellos_size_is_warned_at_the_start(tmp_path, caplog):
    """max_message_bytes takes 1024 and up, but an agent's hello is several KB: a daemon set
    below that refused every hello unread and no agent ever connected, with nothing said at
    its start. It says so; the default says nothing."""
    import logging
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with caplog.at_level(logging.WARNING, logger="opptune.daemon"):
        small = make_daemon(tmp_path / "a", max_message_bytes=4096)
        default = make_daemon(tmp_path / "b")
        try:
            said = wait_until(lambda: [r.getMessage() for r in caplog.records
                                       if "max_message_bytes = " in r.getMessage()],
                              "the start's warning", 10)
        finally:
            small.stop()
            default.stop()
    assert len(said) == 1 and said[0].startswith("max_message_bytes = 4096: an agent's hello")
    assert "65536 or more leaves room" in said[0]
