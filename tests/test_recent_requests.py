"""A change request sent again, or asked about again (``again``), is answered as the first one
was and never carried out twice; the daemon's memory of those answers is bounded."""

from __future__ import annotations

import threading

import pytest

from opptune.daemon import queries
from opptune.daemon.query_worker import Deferred
from opptune.daemon.recent_requests import RecentRequests, is_change
from opptune.daemon.service import Daemon
from opptune.shared.config import DaemonConfig, SweepDefaults
from test_daemon_service import Agent


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_memory_keeps_at_most_its_count_oldest_first():
    r = RecentRequests(max_count=3)
    for i in range(5):
        r.begin((b"op", f"r{i}"))
        r.done((b"op", f"r{i}"), {"i": i}, 10)
    assert len(r) == 3 and r.bytes == 30
    assert r.get((b"op", "r0")) is None and r.get((b"op", "r1")) is None
    assert r.get((b"op", "r4")).data == {"i": 4}


def test_the_memory_forgets_an_answer_after_its_age():
    clock = Clock()
    r = RecentRequests(max_age_s=60, clock=clock)
    r.begin((b"op", "old"))
    r.done((b"op", "old"), {"a": 1}, 5)
    clock.now += 30
    r.begin((b"op", "new"))
    r.done((b"op", "new"), {"a": 2}, 5)
    clock.now += 31  # 'old' answered 61 s ago, 'new' 31 s ago
    assert r.get((b"op", "old")) is None
    assert r.get((b"op", "new")).data == {"a": 2}
    assert len(r) == 1 and r.bytes == 5
    clock.now += 30
    assert r.get((b"op", "new")) is None and len(r) == 0 and r.bytes == 0


def test_the_memory_keeps_at_most_its_bytes_of_answers():
    r = RecentRequests(max_bytes=100)
    for i in range(4):
        r.begin((b"op", f"r{i}"))
        r.done((b"op", f"r{i}"), {}, 40)
    assert [r.get((b"op", f"r{i}")) is not None for i in range(4)] == [False, False, True, True]
    assert r.bytes == 80


def test_a_request_under_way_then_answered_or_refused():
    r = RecentRequests()
    key = (b"op", "r")
    r.begin(key)
    assert r.get(key).pending
    r.done(key, error=("bad_args", "no such size"))
    entry = r.get(key)
    assert not entry.pending and entry.error == ("bad_args", "no such size")
    assert r.get((b"other", "r")) is None  # known by its sender and id together
    r.done((b"op", "never begun"), {"x": 1}, 1)  # forgotten, or never seen: stays so
    assert r.get((b"op", "never begun")) is None and len(r) == 1


def test_many_requests_keep_the_memory_bounded():
    r = RecentRequests(max_count=50, max_bytes=1000)
    for i in range(10_000):
        r.begin((b"op", str(i)))
        if i % 3:  # some stay under way (their answer forgotten with them)
            r.done((b"op", str(i)), {"i": i}, 30)
    assert len(r) <= 50 and r.bytes <= 1000


@pytest.mark.parametrize("what,args,change", [
    ("sweep", {}, True), ("characterize", {}, True), ("tune", {}, True), ("import", {}, True),
    ("recommend", {"apply": True}, True), ("recommend", {}, False),
    ("keys", {"action": "accept", "id": "k"}, True), ("keys", {"action": "list"}, False),
    ("keys", {}, False), ("status", {}, False), ("tune_status", {}, False)])
def test_which_queries_are_change_requests(what, args, change):
    assert is_change(what, args) is change


def daemon_noting_again(tmp_path, handled) -> Daemon:
    """A daemon (started in a thread) that sets ``handled`` once it has handled an ``again``."""
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                            sweep=SweepDefaults(size="small", reps=1, warmup=0)))
    on_query = d._handlers["query"]

    def watching(identity, msg):
        try:
            on_query(identity, msg)
        finally:
            if msg["body"]["what"] == "again":
                handled.set()

    d._handlers["query"] = watching
    d.start_thread()
    return d


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    """A daemon whose 'sweep' answers come from ``answers`` (a list the test fills: a value,
    an exception, or a Deferred), each call counted in ``calls``; yields (daemon, operator
    socket, calls, answers, an Event set each time an 'again' was handled)."""
    calls, answers, handled = [], [], threading.Event()
    real = queries.answer

    def answer(d, what, args):
        if what != "sweep":
            return real(d, what, args)
        calls.append(args)
        out = answers.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    monkeypatch.setattr(queries, "answer", answer)
    d = daemon_noting_again(tmp_path, handled)
    op = Agent(d.endpoint, "operator-test")
    try:
        yield d, op, calls, answers, handled
    finally:
        op.close()
        d.stop()


def again(op, request):
    return op.send("query", {"what": "again", "args": {"request": request}})


def test_a_request_asked_about_again_gets_the_first_answer_and_is_not_carried_out_again(
        daemon):
    d, op, calls, answers, _ = daemon
    answers.append({"jobs": [{"job_id": "j1"}]})
    first = op.send("query", {"what": "sweep", "args": {"agent": "a1"}})
    assert op.expect("reply", ref=first)["body"]["data"] == {"jobs": [{"job_id": "j1"}]}
    ask = again(op, first)
    assert op.expect("reply", ref=ask)["body"]["data"] == {"jobs": [{"job_id": "j1"}]}
    # the very same message again (a client resending it) is answered the same way
    op.send("query", {"what": "sweep", "args": {"agent": "a1"}}, msg_id=first)
    assert op.expect("reply", ref=first)["body"]["data"] == {"jobs": [{"job_id": "j1"}]}
    assert len(calls) == 1 and d.stats["requests_asked_again"] == 2


def test_a_refused_request_asked_about_again_is_refused_again_and_the_loop_goes_on(daemon):
    d, op, calls, answers, _ = daemon
    answers.append(RuntimeError("disk on fire"))  # not a HandlerError: escapes the handler
    first = op.send("query", {"what": "sweep", "args": {"agent": "a1"}})
    err = op.expect("error", ref=first)["body"]
    assert (err["code"], err["message"]) == ("internal", "daemon error: RuntimeError: disk on "
                                                         "fire")
    ask = again(op, first)
    assert op.expect("error", ref=ask)["body"] == {**err, "ref": ask}
    assert len(calls) == 1
    st = op.send("query", {"what": "status"})  # the loop still answers
    assert "agents" in op.expect("reply", ref=st)["body"]["data"]


def test_a_request_asked_about_while_under_way_gets_one_answer_when_done(daemon):
    """A deferred answer (recommend's fit, on the worker): the question about it arrives
    while it is computed; the first's answer, once, is the answer."""
    d, op, calls, answers, handled = daemon
    computed = threading.Event()
    answers.append(Deferred(compute=lambda: computed.wait(30), finish=lambda ok: {"ok": ok}))
    first = op.send("query", {"what": "sweep", "args": {"agent": "a1"}})
    ask = again(op, first)
    assert handled.wait(30)  # asked about while under way
    computed.set()
    assert op.expect("reply")["body"] == {"ref": first, "data": {"ok": True}}
    ask2 = again(op, first)  # nothing else came in between: the next message answers this
    assert op.expect("reply")["body"] == {"ref": ask2, "data": {"ok": True}}
    assert len(calls) == 1 and ask != ask2


def test_a_request_the_daemon_does_not_remember_is_refused_not_carried_out(daemon):
    d, op, calls, answers, _ = daemon
    answers.append({"jobs": []})
    first = op.send("query", {"what": "sweep", "args": {"agent": "a1"}})
    op.expect("reply", ref=first)
    other = Agent(d.endpoint, "operator-other")
    try:  # another client's question about it: not its request
        ask = again(other, first)
        err = other.expect("error", ref=ask)["body"]
    finally:
        other.close()
    assert err["code"] == "unknown_request"
    assert err["message"].startswith(f"this daemon does not remember request {first} (it keeps "
                                     "the answers of its last 1000 change requests, each for "
                                     "600 s, since it started at ")
    assert err["message"].endswith("): nothing was done now")
    bad = op.send("query", {"what": "again", "args": {}})
    assert op.expect("error", ref=bad)["body"]["code"] == "bad_args"
    assert len(calls) == 1
