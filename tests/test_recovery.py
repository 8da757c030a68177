"""daemon/recovery.py's answer to `opptune recover` and the command's line per agent, where the
agent is connected here, to another daemon of the fleet, or nowhere yet."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from opptune.daemon.errors import HandlerError
from opptune.daemon.recover_cli import agent_line
from opptune.daemon.recovery import DEFAULT_FOR_S, Recovery, answer
from opptune.daemon.registry import Via
from opptune.daemon.store import open_store


class FakeDaemon:
    """What answer() reads: a registry of three agents (one connected here, one through the
    daemon at tcp://b:5555, one offline), a store's counts, a link that takes messages."""

    def __init__(self):
        here = SimpleNamespace(agent_id="here", identity=b"here")
        there = SimpleNamespace(agent_id="there", identity=None)
        away = SimpleNamespace(agent_id="away", identity=None)
        agents = {a.agent_id: a for a in (here, there, away)}
        self.sent: list = []
        self.registry = SimpleNamespace(
            get=agents.get, all=lambda: list(agents.values()),
            via=lambda a, now=None: Via("tcp://b:5555", now) if a == "there" else None)
        self.store = open_store(":memory:")
        self.store.recovered_counts = lambda a: (1, 7) if a == "here" else (0, 0)
        self.recovery = Recovery(self.store)
        self.link = SimpleNamespace(send=lambda ident, msg: self.sent.append((ident, msg))
                                    or True)


def test_every_agent_is_opened_and_each_says_where_it_is_asked():
    d = FakeDaemon()
    before = time.time()
    rows = {r["agent"]: r for r in answer(d, {})["agents"]}
    assert {a: (r["known"], r["told"], r["via"], r["jobs"], r["runs"])
            for a, r in rows.items()} == {
        "here": (True, True, None, 1, 7), "there": (True, False, "tcp://b:5555", 0, 0),
        "away": (True, False, None, 0, 0)}
    assert [(ident, m["type"], m["body"]) for ident, m in d.sent] == [
        (b"here", "resend", {"codes": ["unknown_job"]})]
    for name in rows:
        assert d.recovery.until(name, time.time()) == pytest.approx(
            before + DEFAULT_FOR_S, abs=5)
    assert d.recovery.refused(d.sent[0][1]["id"]) == "here"  # an older agent's refusal
    assert agent_line(rows["there"]).endswith(
        "it is connected to the daemon at tcp://b:5555, which asks it within a second (the "
        "opening is in the store every daemon of the fleet reads); recovered so far: 0 jobs, "
        "0 runs")
    assert "not connected: asked at its next hello" in agent_line(rows["away"])
    assert "asked for them now; recovered so far: 1 jobs, 7 runs" in agent_line(rows["here"])


def test_an_unknown_agent_is_opened_and_said_to_be_unknown_and_bad_args_refused():
    d = FakeDaemon()
    (row,) = answer(d, {"agent": "typo", "for_s": 60})["agents"]
    assert (row["known"], row["told"], row["via"]) == (False, False, None)
    assert "not heard by this daemon yet (is the id right?" in agent_line(row)
    assert d.recovery.until("typo", time.time() + 120) is None  # 60 s only
    for bad in ({"for_s": 0}, {"for_s": "1"}, {"for_s": True}, {"for_s": 10**9},
                {"agent": ""}, {"agent": 3}):
        with pytest.raises(HandlerError) as exc:
            answer(d, bad)
        assert exc.value.code == "bad_args"


def test_recover_is_a_change_request_answered_again_not_carried_out_twice():
    """A recover whose answer came late is asked about again (the client's ``changes``), so
    the daemon keeps its answer as for the other change requests."""
    from opptune.daemon.recent_requests import is_change
    assert is_change("recover", {}) and is_change("recover", {"agent": "a"})


def test_also_asks_for_other_refusals_and_is_checked():
    """``--also too_large``: the agent is asked for those too (the daemon checks them again
    as any result); the opening keeps the codes for the agent's next hello."""
    d = FakeDaemon()
    rows = {r["agent"]: r for r in answer(d, {"also": ["too_large", "unknown_job"]})["agents"]}
    assert rows["here"]["codes"] == ["unknown_job", "too_large"]
    assert d.sent[0][1]["body"] == {"codes": ["unknown_job", "too_large"]}
    assert d.recovery.codes("away", time.time()) == ["unknown_job", "too_large"]  # its hello
    assert "(and those refused as too_large are sent again)" in agent_line(rows["here"])
    for bad in ({"also": "too_large"}, {"also": ["Too Large"]}, {"also": [3]},
                {"also": ["a"] * 9}):
        with pytest.raises(HandlerError) as exc:
            answer(d, bad)
        assert exc.value.code == "bad_args"


def test_an_opening_another_daemon_made_is_seen_once_whatever_its_clock():
    """Each daemon's tick asks the agents opened since its last look: an opening made on a
    host whose clock is behind (an older time than one seen before) is new all the same; one
    this daemon asked for already, or expired, is not asked again."""
    store = open_store(":memory:")
    now = time.time()
    store.open_recovery("old", now - 1, ["unknown_job"], now - 3600)  # before: at its hello
    r = Recovery(store)
    assert r.opened_since(now) == []
    store.open_recovery("a", now + 60, ["unknown_job"], now)
    assert r.opened_since(now) == ["a"] and r.opened_since(now) == []
    store.open_recovery("b", now + 60, ["unknown_job"], now - 30)  # a clock 30 s behind
    assert r.opened_since(now) == ["b"]
    store.open_recovery("a", now + 120, ["unknown_job", "too_large"], now + 1)  # asked here
    r.told("a", now)
    assert r.opened_since(now) == []
    store.open_recovery("c", now + 60, ["unknown_job"], now + 2)
    assert r.opened_since(now + 61) == []  # expired before it was seen
