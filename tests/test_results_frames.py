"""``results`` frames over real sockets: the daemon takes each item through the single result's
path (per-item acks and refusals, a malformed frame refused whole, items counted by the rate
limiter and by batch_max); the agent's link sends frames only to a daemon that advertises
them and falls back to single results when a frame is refused; a real agent with a backlog
after a daemon kill -9 delivers it in frames, every result stored once."""

from __future__ import annotations

import logging
import sqlite3
import time

import msgpack
import pytest
import zmq

from opptune.agent.outbox import Outbox
from opptune.daemon.link import Link as DaemonLink, RateLimiter
from opptune.shared import protocol as P
from opptune.shared.config import ConfigError, load_agent_config
from procs import Cluster, assert_delivery, produced_results, stored_results, wait_all_delivered
from procs import wait_until, write_toml
from test_agent_link import LinkThread, Router, ctx, result_msg, router  # noqa: F401 (fixtures)
from test_link_limits import PLATFORM, dealer, expect, make_daemon, record

ADVERTISED = {"instance": "new-daemon", "results_max": P.MAX_RESULTS_ITEMS,
              "max_message_bytes": P.MAX_MESSAGE_BYTES}


# -- the daemon -------------------------------------------------------------------------------
def _hello_and_job(sock, agent):
    sock.send(P.encode(P.make("hello", agent, {"platform": PLATFORM, "workloads": ["wl"],
                                               "agent_version": "t"})))
    welcome = expect(sock, "heartbeat")["body"]
    return welcome, expect(sock, "job")["body"]


def _item(job, seq, **body):
    """A results frame's item: a new id and a result's body."""
    return P.pack_item(P.new_id(), {"job_id": job["job_id"], "seq": seq, "of": 1000,
                                    "record": record(1, seq % 7), **body})


def _id(item):
    return msgpack.unpackb(item)[0]


def _answers(sock, want_ids, timeout_s=10.0):
    """Acked ids and errors (code, ref) until every id of ``want_ids`` is answered."""
    acked: set[str] = set()
    errors: list[tuple[str, str | None]] = []
    deadline = time.monotonic() + timeout_s
    while not want_ids <= acked | {ref for _, ref in errors}:
        left = deadline - time.monotonic()
        assert left > 0 and sock.poll(int(left * 1000)), (acked, errors)
        msg = P.decode(sock.recv())
        if msg["type"] == "ack":
            acked |= set(msg["body"]["ids"])
        elif msg["type"] == "error":
            errors.append((msg["body"]["code"], msg["body"]["ref"]))
    return acked, errors


def _count_runs(d, job_id):
    con = sqlite3.connect(d.config.database)
    try:
        return con.execute("SELECT COUNT(*) FROM runs WHERE job_id = ?", (job_id,)).fetchone()[0]
    finally:
        con.close()


def test_daemon_advertises_frames_acks_items_and_refuses_a_bad_one_alone(tmp_path):
    d = make_daemon(tmp_path)
    s = dealer(d.endpoint, "a1")
    try:
        welcome, job = _hello_and_job(s, "a1")
        assert welcome["results_max"] == P.MAX_RESULTS_ITEMS
        assert welcome["max_message_bytes"] == d.config.max_message_bytes
        items = [_item(job, i) for i in range(5)]
        bad = _item(job, 9, of=9)  # seq >= of
        wrong = _item({"job_id": "never-issued"}, 0)
        frame_items = items[:2] + [bad, items[2], wrong] + items[3:]
        ids = [_id(i) for i in items]
        s.send(P.pack_results("a1", frame_items, msg_id="frame-1"))
        acked, errors = _answers(s, set(ids) | {_id(bad), _id(wrong)})
        assert acked == set(ids)
        assert sorted(errors) == sorted([("bad_value", _id(bad)), ("unknown_job", _id(wrong))])
        assert d.stats["results"] == 5 and d.stats["results_frames"] == 1
        # the same frame again: acked again, stored once
        s.send(P.pack_results("a1", items))
        acked, _ = _answers(s, set(ids))
        assert acked == set(ids)
        assert _count_runs(d, job["job_id"]) == 5
    finally:
        s.close(0)
        d.stop()


def test_a_malformed_frame_is_refused_whole_and_the_agent_still_served(tmp_path):
    d = make_daemon(tmp_path)
    s = dealer(d.endpoint, "a1")
    try:
        _, job = _hello_and_job(s, "a1")
        # an item that is a whole result message, not an [id, body] pair
        whole = P.encode(P.make("result", "a1", {"job_id": job["job_id"], "seq": 1, "of": 1000,
                                                 "record": record(1, 0)}))
        s.send(P.pack_results("a1", [_item(job, 0), whole], msg_id="frame-bad"))
        err = expect(s, "error")["body"]
        assert (err["code"], err["ref"]) == ("malformed", "frame-bad")
        too_many = [_item(job, i) for i in range(P.MAX_RESULTS_ITEMS + 1)]
        s.send(P.pack_results("a1", too_many, msg_id="frame-big"))
        err = expect(s, "error")["body"]
        assert (err["code"], err["ref"]) == ("bad_value", "frame-big")
        assert _count_runs(d, job["job_id"]) == 0 and d.stats["results_frames"] == 0
        # a frame from an agent that never said hello: one refusal for the frame
        stranger = dealer(d.endpoint, "stranger")
        try:
            stranger.send(P.pack_results("stranger", [_item(job, i) for i in range(3)],
                                         msg_id="frame-x"))
            err = expect(stranger, "error")["body"]
            assert (err["code"], err["ref"]) == ("unknown_agent", "frame-x")
            assert not stranger.poll(200)  # one error, not one per item
        finally:
            stranger.close(0)
        good = [_item(job, i) for i in range(3)]
        s.send(P.pack_results("a1", good))
        acked, errors = _answers(s, {_id(g) for g in good})
        assert len(acked) == 3 and errors == []
        assert _count_runs(d, job["job_id"]) == 3
    finally:
        s.close(0)
        d.stop()


def test_the_rate_limiter_counts_items(tmp_path):
    # 5 results/s with bursts of 10: a frame of 20 gets in (on one token; the rest is a debt
    # of about 10 tokens, two seconds at this rate), the next frame sent at once does not
    d = make_daemon(tmp_path, rate_limit_per_s=5.0, rate_limit_burst=10)
    s = dealer(d.endpoint, "a1")
    try:
        _, job = _hello_and_job(s, "a1")
        limited = d.stats["refused_rate_limited"]
        first = [_item(job, i) for i in range(20)]
        second = [_item(job, 20 + i) for i in range(20)]
        s.send(P.pack_results("a1", first))
        s.send(P.pack_results("a1", second))
        acked, _ = _answers(s, {_id(f) for f in first})
        wait_until(lambda: d.stats["refused_rate_limited"] > limited, "the second frame refused",
                   timeout=10)
        assert d.stats["refused_rate_limited"] == limited + 1
        assert _count_runs(d, job["job_id"]) == 20
    finally:
        s.close(0)
        d.stop()


def test_a_frame_of_bad_items_is_logged_at_the_bounded_rate(tmp_path, caplog):
    d = make_daemon(tmp_path)
    s = dealer(d.endpoint, "a1")
    try:
        _, job = _hello_and_job(s, "a1")
        caplog.set_level(logging.WARNING, logger="opptune")
        bad = [_item(job, 9, of=9) for _ in range(P.MAX_RESULTS_ITEMS)]
        s.send(P.pack_results("a1", bad))
        _, errors = _answers(s, {_id(b) for b in bad})
        assert len(errors) == P.MAX_RESULTS_ITEMS  # each item told why
        lines = [r for r in caplog.records if "refused" in r.getMessage()]
        assert len(lines) == 1 and d.link.refusals.unlogged >= P.MAX_RESULTS_ITEMS - 1
    finally:
        s.close(0)
        d.stop()


def test_rate_limiter_charge_makes_a_debt_the_rate_pays():
    now = [0.0]
    lim = RateLimiter(rate=10.0, burst=5, clock=lambda: now[0])
    assert lim.allow(b"p")
    lim.charge(b"p", 15)  # a frame of 16 items: 5 - 16 = -11 tokens
    assert not lim.allow(b"p")
    now[0] = 1.1  # 11 tokens back: -11 + 11 = 0, still below one
    assert not lim.allow(b"p")
    now[0] = 1.25
    assert lim.allow(b"p")


def test_batch_max_cuts_by_items_not_frames():
    ctx = zmq.Context()
    link = DaemonLink("inproc://frames-batch", ctx)
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, b"a1")
    s.connect("inproc://frames-batch")
    try:
        items = [P.pack_item(f"r{i}", {"job_id": "j", "seq": i, "of": 99, "record": {}})
                 for i in range(16)]
        for _ in range(4):  # inproc: each is in the ROUTER's queue once send returns
            s.send(P.pack_results("a1", items))
        s.send(P.encode(P.make("heartbeat", "a1", {})))
        first = link.recv_batch(32)
        assert [len(m["body"]["items"]) for _, m in first] == [16, 16]
        assert [m["type"] for _, m in link.recv_batch(40)] == ["results", "results",
                                                                 "heartbeat"]
    finally:
        s.close(0)
        link.close()
        ctx.term()


# -- the agent's link against a stand-in daemon -----------------------------------------------
def _outbox_with(tmp_path, n):
    ob = Outbox(str(tmp_path))
    ids = [ob.put(result_msg(i, n)) for i in range(n)]
    return ob, ids


def test_an_old_daemon_gets_single_results(ctx, router, tmp_path):
    ob, ids = _outbox_with(tmp_path, 5)
    lt = LinkThread(ctx, router.endpoint, ob, per_frame=16)
    try:
        seen = router.expect(lambda m: m["type"] == "result" and m["id"] == ids[-1],
                             timeout=10, what="the last result")
        assert "results" not in [m["type"] for m in seen]
        assert [m["id"] for m in seen if m["type"] == "result"] == ids
        router.send(P.make("ack", "daemon", {"ids": ids}))
        wait_until(lambda: ob.count() == 0, "the outbox emptied by the ack", timeout=10)
    finally:
        lt.close()


def test_a_backlog_goes_in_frames_to_a_daemon_that_advertises_them(ctx, router, tmp_path):
    router.welcome = ADVERTISED
    ob, ids = _outbox_with(tmp_path, 40)
    lt = LinkThread(ctx, router.endpoint, ob, per_frame=16)
    try:
        frames: list = []
        router.expect(lambda m: m["type"] == "results" and frames.append(m) is None
                      and len(frames) == 3, timeout=10, what="three frames")
        assert [len(f["body"]["items"]) for f in frames] == [16, 16, 8]
        assert [mid for f in frames for mid, _ in f["body"]["items"]] == ids
        assert all(f["agent"] == "agent-t" for f in frames)
        assert [b["seq"] for f in frames for _, b in f["body"]["items"]] == list(range(40))
        router.send(P.make("ack", "daemon", {"ids": ids}))  # the daemon acks items
        wait_until(lambda: ob.count() == 0, "the outbox emptied by the ack", timeout=10)
        # a single due result still goes alone, and so does what is not a result
        one = ob.put(result_msg(0, 1))
        lt.link.notify_outbox()
        got = router.expect(lambda m: m["type"] in ("result", "results"), timeout=10)[-1]
        assert (got["type"], got["id"]) == ("result", one)
        assert lt.link.stats["frames"] == 3
    finally:
        lt.close()


def test_unknown_type_for_a_frame_falls_back_to_single_results(ctx, router, tmp_path):
    """A daemon that advertised frames but refuses one as a whole (as one that does not know
    the type would: unknown_type naming the frame): its results are resent singly, none parked
    as refused, and frames stay off on this connection."""
    router.welcome = ADVERTISED
    ob, ids = _outbox_with(tmp_path, 6)
    lt = LinkThread(ctx, router.endpoint, ob, per_frame=16)
    try:
        frame = router.expect(lambda m: m["type"] == "results", timeout=10)[-1]
        router.send(P.error_reply("daemon", "unknown_type", "unknown message type 'results'",
                                  frame["id"]))
        singles: list = []
        router.expect(lambda m: m["type"] == "result" and singles.append(m["id"]) is None
                      and len(singles) == 6, timeout=10, what="six single results")
        assert singles == ids
        assert ob.rejected() == [] and ob.count() == 6
        router.send(P.make("ack", "daemon", {"ids": ids}))
        wait_until(lambda: ob.count() == 0, "the outbox emptied by the ack", timeout=10)
        assert lt.link.stats["frames_refused"] == 1
        more = [ob.put(result_msg(i, 3)) for i in range(3)]
        lt.link.notify_outbox()
        got: list = []
        seen = router.expect(lambda m: m["type"] == "result" and got.append(m["id"]) is None
                             and len(got) == 3, timeout=10, what="three more single results")
        assert got == more and "results" not in [m["type"] for m in seen]
    finally:
        lt.close()


def test_failover_to_an_older_daemon_sends_single_results(ctx, tmp_path):
    new, old = Router(ctx), Router(ctx)
    new.welcome = ADVERTISED
    ob, ids = _outbox_with(tmp_path, 4)
    lt = LinkThread(ctx, [new.endpoint, old.endpoint], ob, per_frame=16)
    try:
        new.expect(lambda m: m["type"] == "results", timeout=10)
        new.alive = False  # gone: no answers; the agent fails over after 3 heartbeats
        new.close()
        seen = old.expect(lambda m: m["type"] == "result" and m["id"] == ids[-1], timeout=15,
                          what="the results resent to the older daemon")
        assert "results" not in [m["type"] for m in seen]
        assert {m["id"] for m in seen if m["type"] == "result"} == set(ids)
    finally:
        lt.close()
        old.close()


# -- the real agent and daemon ----------------------------------------------------------------
@pytest.mark.parametrize("per_frame", [16, 1])
def test_backlog_after_an_outage_is_delivered_in_frames_each_result_once(tmp_path, per_frame):
    """Results measured while the daemon was down (the agent killed too, so that none waits
    in ZeroMQ's queue): at the agent's next start they go in frames, each stored once; with
    results_per_frame = 1 one per message."""
    c = Cluster(tmp_path, kernels=("pi_integrate", "triad"), reps=4, max_cores=2,
                extra_agent={"results_per_frame": per_frame})
    state = tmp_path / "agent-state"
    c.start_daemon()
    c.start_agent()
    try:
        wait_until(lambda: stored_results(c.db) >= 2, "first results stored", 120, c.logs)
        c.kill("daemon")
        before = produced_results(state)
        wait_until(lambda: produced_results(state) >= before + 4, "a backlog of 4", 120, c.logs)
        c.kill("agent")
        backlog = assert_delivery(state, c.db, context=c.logs())["pending"]
        assert backlog >= 4
        c.agent = None  # killed on purpose (wait_for fails on a dead process)
        c.start_daemon()
        # up before the agent: its hello is answered at once, so the backlog goes in frames
        c.wait_for(lambda s: True, timeout=60, what="the daemon back")
        c.start_agent()
        if per_frame > 1:
            c.wait_for(lambda s: s["daemon"]["stats"]["results_frames"] > 0, timeout=60,
                       what="the backlog sent in results frames")
        wait_all_delivered(c, 2)
        frames = c.status()["daemon"]["stats"]["results_frames"]
        assert frames > 0 if per_frame > 1 else frames == 0
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert "Traceback" not in c.logs()


def test_only_this_agents_results_go_in_frames(ctx, router, tmp_path):
    """An ``applied`` reply waiting in the outbox beside results goes as itself, never as a
    frame's item (the daemon would refuse it there as not a result)."""
    router.welcome = ADVERTISED
    ob = Outbox(str(tmp_path))
    ids = [ob.put(result_msg(i, 6)) for i in range(3)]
    applied = ob.put(P.make("applied", "agent-t", {"config_id": "c1", "ok": True}))
    ids += [ob.put(result_msg(i, 6)) for i in range(3, 6)]
    lt = LinkThread(ctx, router.endpoint, ob, per_frame=16)
    try:
        got: dict = {}
        router.expect(lambda m: got.setdefault(m["type"], m) and {"results", "applied"} <= set(got),
                      timeout=10, what="a frame and the applied reply")
        assert [mid for mid, _ in got["results"]["body"]["items"]] == ids
        assert got["applied"]["id"] == applied
    finally:
        lt.close()


def test_frames_keep_under_the_daemons_message_size(ctx, router, tmp_path):
    router.welcome = {**ADVERTISED, "max_message_bytes": 2048}
    ob, ids = _outbox_with(tmp_path, 40)
    lt = LinkThread(ctx, router.endpoint, ob, per_frame=64)
    try:
        got: list = []
        router.expect(lambda m: m["type"] in ("result", "results") and got.append(m) is None
                      and sum(len(m["body"].get("items", [0])) for m in got) == 40,
                      timeout=10, what="all 40 results")
        assert all(len(msgpack.packb(m, use_bin_type=True)) <= 2048 for m in got)
        assert len(got) > 2 and [m["type"] for m in got].count("results") >= 2
        sent = [i for m in got for i in ([mid for mid, _ in m["body"]["items"]]
                                          if m["type"] == "results" else [m["id"]])]
        assert sent == ids
    finally:
        lt.close()


@pytest.mark.parametrize("value", [0, 65, "16", 2.5])
def test_results_per_frame_out_of_range_names_file_key_and_form(tmp_path, value):
    p = write_toml(tmp_path / "agent.toml", {"results_per_frame": value})
    with pytest.raises(ConfigError) as exc:
        load_agent_config(p)
    text = str(exc.value)
    assert str(p) in text and "results_per_frame" in text and "1 to 64" in text, text


def test_results_per_frame_defaults_to_16():
    assert load_agent_config(None).results_per_frame == 16
