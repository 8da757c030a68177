"""Versions in a fleet: what each agent and daemon runs, shown by ``opptune status`` and marked
where older than the daemon answering, and what an agent older than configurations kept in
force does not keep, said where a configuration is applied."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest
from rich.console import Console

import opptune
from opptune.daemon import goal_cli
from opptune.daemon.goal_cli import print_verdict
from opptune.daemon.goal_query import not_kept_text
from opptune.daemon.registry import AgentInfo
from opptune.daemon.service import Daemon
from opptune.shared.config import DaemonConfig
from opptune.shared.versions import older, release
from procs import Cluster
from test_daemon_service import PLATFORM, Agent as DealerAgent
from test_goal_service import METER, Agent as GoalAgent, daemon, record  # noqa: F401

OLD = "0.1.0"  # what every commit before versions changed called itself


def test_releases_compare_by_number_and_anything_else_is_not_compared():
    assert release("0.2.0") == release("0.2") == (0, 2) and release("1.10.0") == (1, 10)
    assert older("0.1.0", "0.2.0") and older("0.9", "0.10") and not older("0.2", "0.2.0")
    assert not older("0.3.0", "0.2.0") and older("0.2.0+local", "0.3") is True
    assert older("t", "0.2.0") is None and older(None, "0.2.0") is None
    assert older("0.3.0rc1", "0.2.0") is None


@pytest.mark.integration
def test_status_shows_what_each_agent_and_daemon_runs_and_marks_the_older(tmp_path):
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False)
    c.start_daemon()
    c.start_agent()
    old = None
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), 60, "the agent's hello")
        # an agent of the previous version: its hello's field, as that code sent it
        old = DealerAgent(c.endpoint, "rpi-old")
        old.send("hello", {"platform": {**PLATFORM, "id": "plat-old"}, "workloads": ["wl"],
                           "agent_version": OLD})
        old.expect("heartbeat")
        # a daemon of the fleet that predates version records writes its row as it did
        con = sqlite3.connect(c.db)
        with con:
            con.execute("INSERT INTO daemons VALUES (?, ?, ?, ?)",
                        ("d-old", "tcp://old-host:5555", time.time(), time.time()))
        con.close()
        st = json.loads(_opptune("status", "--json", "--daemon", c.endpoint))
        agents = {a["id"]: a for a in st["agents"]}
        assert (agents["test-agent"]["version"], agents["test-agent"]["older"]) == (
            opptune.__version__, False)  # the real agent process's hello
        assert (agents["rpi-old"]["version"], agents["rpi-old"]["older"]) == (OLD, True)
        d = st["daemon"]
        assert d["version"] == opptune.__version__
        fleet = {f["instance"]: f for f in d["fleet"]}
        assert (fleet[d["instance"]]["version"], fleet[d["instance"]]["older"]) == (
            opptune.__version__, False)
        assert (fleet["d-old"]["version"], fleet["d-old"]["older"]) == (None, True)

        text = _opptune("status", "--daemon", c.endpoint)
        assert f"opptune {opptune.__version__}, up " in text.splitlines()[0]
        row = next(line for line in text.splitlines() if "rpi-old" in line)
        assert f"{OLD} (older)" in row
        row = next(line for line in text.splitlines() if "test-agent" in line)
        assert opptune.__version__ in row and "older" not in row
        line = next(line for line in text.splitlines() if "d-old" in line)
        assert line.startswith(f"fleet: daemon d-old at tcp://old-host:5555, version not "
                               f"recorded (older than {opptune.__version__}), "), line
        # and each process says it at its start
        logs = c.logs()
        assert f"(opptune {opptune.__version__}) listening on {c.endpoint}" in logs
        assert f"; opptune {opptune.__version__}; workloads: pi_integrate;" in logs
    finally:
        if old is not None:
            old.close()
        c.stop()


def _opptune(*argv: str) -> str:
    # wide enough for a table's row on one line
    out = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return out.stdout


def _applied(a, args):
    """The recommend reply's ``applied``, whatever configs the daemon pushes around it."""
    ref = a.send("query", {"what": "recommend", "args": args})
    while True:
        msg = a.expect(("reply",))
        if msg["body"].get("ref") == ref:
            assert msg["type"] == "reply", msg
            return msg["body"]["data"]["applied"]


@pytest.mark.parametrize("keeps", [False, True], ids=["before standing", "with standing"])
def test_apply_to_an_agent_that_keeps_nothing_says_so_naming_its_version(daemon, keeps):
    a = GoalAgent(daemon.endpoint, METER)
    try:
        hello = {"platform": METER, "workloads": ["wl"], "agent_version": OLD}
        if keeps:
            hello["standing"] = None  # the field, even nil, says it keeps what it applies
        a.send("hello", hello)
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3, 4)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(METER, cores)})
            a.expect("ack")
        applied = _applied(a, {"agent": "q1", "workload": "wl", "objective": "energy",
                               "apply": True, "target": {"kind": "pid", "pid": 4711}})
        if keeps:
            assert applied["not_kept"] is None
        else:
            assert applied["not_kept"] == (
                f"agent q1 runs opptune {OLD}, older than configurations kept in force: it "
                "applies and verifies this one, then leaves the board to its next job's "
                "clocks, and keeps nothing after its restart; upgrade that agent to keep it")
    finally:
        a.close()


def test_nothing_is_said_where_nothing_would_stay_and_tune_says_it_under_its_verdict(
        monkeypatch):
    old = AgentInfo("xu4", "p", version=OLD)
    assert not_kept_text(old, {"freq_khz": None}, None) is None  # governor's clock, a run
    said = not_kept_text(old, {"freq_khz": 1500000}, None)
    assert said.startswith(f"agent xu4 runs opptune {OLD}, older than configurations kept")
    assert not_kept_text(AgentInfo("xu4", "p", keeps=True), {"freq_khz": 1500000}, None) is None
    # the recommendation's own table is print_recommendation's; its applied is read here
    monkeypatch.setattr(goal_cli, "print_recommendation", lambda con, rec: None)
    session = {"tune_id": "tune-1", "goal_text": "minimum time", "workload": "wl",
               "size": "small", "agent": "xu4", "measured": 1, "grid": 1, "elapsed_s": 1.0,
               "segments": [], "state": "done", "reason": "applied and verified",
               "verification": {"state": "verified", "verified_time_s": 1.0,
                                "predicted_time_s": 1.0, "error": None}}
    for applied, last in (({"not_kept": None}, "done: applied and verified"),
                          ({"not_kept": said}, said)):
        con = Console(record=True, width=300)
        print_verdict({**session, "recommendation": {"applied": applied}}, con)
        assert con.export_text().splitlines()[-1] == last


def _old_daemon_hearing(db: str):
    """What a daemon of 8371ffa (schema 9) writes on the store ``db`` when it hears an agent
    (agent, when): the agent's row and its last_seen, no ``daemons`` row, no holder."""
    from test_store import OLD_SAVE_AGENT, OLD_TOUCH

    def heard(agent: str, when: float) -> None:
        con = sqlite3.connect(db)
        with con:
            con.execute("INSERT INTO platforms VALUES ('p', '{}', 0, 0) ON CONFLICT DO NOTHING")
            con.execute(OLD_SAVE_AGENT, (agent, "p", OLD, when, when))
            con.execute(OLD_TOUCH.format(greatest="MAX"), (when, agent))
        con.close()
    return heard


def test_a_request_for_an_agent_held_by_a_daemon_from_before_fleet_records_says_so(tmp_path):
    """Mixed fleet: sweep, tune and recommend --apply for an agent an older daemon holds (no
    ``daemons`` row, so no address to send the request to) were refused as for an agent that
    never connected ('start its opptune-agent'), though it is running; the refusal now says
    where it is (also the first request, when this daemon did not know the agent yet). One
    that went quiet keeps the usual refusal."""
    from opptune.daemon.errors import HandlerError
    from opptune.daemon.goal_query import apply
    from opptune.daemon.store import open_store

    db = str(tmp_path / "d.db")
    open_store(db).close()
    old_daemon_heard = _old_daemon_hearing(db)
    old_daemon_heard("rpi-gone", time.time() - 100)
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=db, auto_sweep=False,
                            agent_timeout_s=30))
    try:
        old_daemon_heard("rpi-old", time.time())
        said = {}
        for agent in ("rpi-old", "rpi-gone"):
            for what, request in (("sweep", lambda: d.start_sweep(agent, ["w"])),
                                  ("tune", lambda: d.tuning.start({"agent": agent,
                                                                   "workload": "w"})),
                                  ("apply", lambda: apply(d, {"agent": agent}))):
                with pytest.raises(HandlerError) as refused:
                    request()
                said[agent, what] = str(refused.value)
    finally:
        d.close()
    for what in ("sweep", "tune", "apply"):
        assert ("agent 'rpi-old' was heard 0 s ago through another daemon sharing the store "
                "that does not record its address (an older one), or through one that stopped "
                "since" in said["rpi-old", what])
        assert "start its opptune-agent" not in said["rpi-old", what]
        assert ("agent 'rpi-gone' has not connected to this daemon instance"
                in said["rpi-gone", what])
    assert "stopped since; nothing was pushed: send the request" in said["rpi-old", "apply"]


def test_an_agent_held_by_a_daemon_from_before_fleet_records_is_not_shown_offline(tmp_path):
    """Mixed fleet: a daemon of 8371ffa (schema 9) still running on the store this one
    migrated holds an agent. It raises the agent's last_seen each second but records
    neither itself (no ``daemons`` row) nor the agent's holder, so this daemon said 'alive
    no'; now '?', with a line saying why, and ``via_unrecorded`` in --json."""
    from opptune.daemon.client import query
    from opptune.daemon.status_view import print_status
    from opptune.daemon.store import open_store

    db = str(tmp_path / "d.db")
    open_store(db).close()  # migrated, as by this daemon's first start
    old_daemon_heard = _old_daemon_hearing(db)
    old_daemon_heard("rpi-gone", time.time() - 100)
    # heard just before this daemon started: by an earlier instance of it, say
    old_daemon_heard("rpi-before", time.time())
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=db, auto_sweep=False,
                            agent_timeout_s=30))
    d.start_thread()
    try:
        old_daemon_heard("rpi-old", time.time())  # the old daemon's agent, heard each second
        st = query(d.endpoint, "status", timeout_s=10)
    finally:
        d.stop()
    rows = {a["id"]: (a["alive"], a["via"], a["via_unrecorded"]) for a in st["agents"]}
    assert rows == {"rpi-old": (False, None, True), "rpi-gone": (False, None, False),
                    "rpi-before": (False, None, False)}
    (old,) = [a for a in st["agents"] if a["id"] == "rpi-old"]
    assert old["version"] == OLD and old["older"] and old["last_seen_s"] < 30
    con = Console(record=True, width=300)
    print_status(st, con)
    text = con.export_text()
    row = next(line for line in text.splitlines() if "rpi-old" in line and "│" in line)
    assert "?; see below" in row
    assert ("agent rpi-old: alive ?, heard " in text and " s ago through another daemon "
            "sharing the store that does not record which agents it holds" in text)
    row = next(line for line in text.splitlines() if "rpi-gone" in line and "│" in line)
    assert "│ no " in row
