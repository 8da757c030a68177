"""An ``opptune tune`` session survives kill -9 of the daemon: real daemon and agent processes on
the odroid-xu4 virtual board, the installed ``opptune tune`` following the session across the
restart; the restarted daemon (same database) resumes the session from its store and ends it
with a recommendation, measuring no configuration twice."""

from __future__ import annotations

import json
import subprocess

import pytest

from opptune.daemon.client import DaemonUnreachable, query
from opptune.daemon.service import Daemon
from opptune.daemon.store import ResultIn, open_store
from opptune.shared.config import DaemonConfig, SweepDefaults
from opptune.shared.records import RunRecord
from procs import wait_until
from test_goal_e2e import OPPTUNE, start
from test_goal_service import METER, Agent, record

pytestmark = pytest.mark.integration


def stored(c) -> dict | None:
    """The session as the daemon last saved it (None before it is saved)."""
    rows = c.rows("SELECT body FROM tune_sessions")
    assert len(rows) <= 1, rows
    return json.loads(rows[0][0]) if rows else None


def measured(session: dict | None) -> int:
    return 0 if session is None else sum(g["measured"] for g in session["segments"])


def test_a_tune_session_goes_on_after_kill_9_of_the_daemon(tmp_path):
    c = start(tmp_path, kernels=("pi_integrate",))
    err = tmp_path / "tune.err"
    cli = None
    try:
        with open(err, "w") as fh:
            # --timeout 1: the CLI notices the daemon's absence within the test's time
            cli = subprocess.Popen([OPPTUNE, "tune", "--daemon", c.endpoint, "--agent",
                                    "test-agent", "--workload", "pi_integrate", "--objective",
                                    "energy", "--cluster", "1", "--budget", "4", "--timeout",
                                    "1", "--json", "--no-progress"], stdout=subprocess.PIPE,
                                   stderr=fh, text=True, cwd=tmp_path)
        first = wait_until(lambda: measured(stored(c)) >= 1 and stored(c), "one configuration "
                           "measured and saved", 120, c.logs)
        c.kill("daemon")
        before = stored(c)
        assert before["state"] == "measuring" and measured(before) >= measured(first)
        tune_id = before["tune_id"]
        # the CLI keeps following: it says so once and waits for the daemon
        wait_until(lambda: "retrying" in err.read_text(), "the CLI's retry message", 30,
                   lambda: err.read_text())
        assert cli.poll() is None, err.read_text()

        c.start_daemon()

        def status():
            try:
                return query(c.endpoint, "tune_status", {"tune_id": tune_id}, timeout_s=1.0)
            except DaemonUnreachable:
                return None
        st = wait_until(status, "the restarted daemon's answer", 30, c.logs)
        assert st["tune_id"] == tune_id and st["measured"] >= measured(before)
        assert st["state"] in ("measuring", "verifying", "done"), st

        out, _ = cli.communicate(timeout=180)
        text = err.read_text()
        assert cli.returncode == 0, text + out + c.logs()
        assert "Traceback" not in text and "the daemon answers again" in text
        s = json.loads(out)  # stdout holds only JSON
        assert s["tune_id"] == tune_id and s["state"] == "done", s
        assert s["recommendation"] and s["verification"]["state"] in ("verified", "off")
        # the count went on from where it was: the budget, each configuration once
        assert s["measured"] == 4 == len(s["steps"])
        configs = [(*x["cpus"], x["freq_khz"]) for x in s["steps"]]
        assert len(set(configs)) == len(configs), s["steps"]
        # the steps saved before the kill are the first steps (bar one whose job never left)
        done_before = before["steps"][:measured(before)]
        assert s["steps"][:len(done_before)] == done_before
        jobs = dict(c.rows("SELECT job_id, state FROM jobs"))
        assert all(jobs.get(x["job_id"]) == "done" for x in s["steps"]), (jobs, s["steps"])
        assert stored(c)["state"] == "done"
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
            cli.wait()
        c.stop()


# -- each way a session can be caught by a restart, against the daemon loop in a thread and a
# -- test DEALER agent (real sockets); the daemon is stopped and another started on its store

def daemon_on(db, agent_timeout_s=30.0, **config) -> Daemon:
    """A daemon loop in a thread on the store ``db`` (no auto sweep, one run per point);
    ``config``: more DaemonConfig keys."""
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(db), auto_sweep=False,
                            agent_timeout_s=agent_timeout_s,
                            sweep=SweepDefaults(size="small", reps=1, warmup=0), **config))
    d.start_thread()
    return d


def answer(a: Agent, job: dict) -> None:
    (point,) = job["points"]
    a.send("result", {"job_id": job["job_id"], "seq": 0, "of": 1,
                      "record": record(METER, len(point["cpus"]))})


def status(a: Agent, tune_id: str) -> dict:
    reply = a.query("tune_status", {"tune_id": tune_id})
    assert reply["type"] == "reply", reply
    return reply["body"]["data"]


def finish(a: Agent, tune_id: str, first: dict | None = None) -> dict:
    """Answer every job until the configuration comes; apply it; the session's last view."""
    msg = first or a.expect(("job", "config"))
    while msg["type"] == "job":
        answer(a, msg["body"])
        msg = a.expect(("job", "config"))
    a.send("applied", {"config_id": msg["body"]["config_id"], "ok": True,
                       "records": [record(METER, len(msg["body"]["cpus"]))]})
    return wait_until(lambda: (lambda s: s if s["state"] in ("done", "failed") else None)(
        status(a, tune_id)), "the verdict", 20)


def started_tune(tmp_path):
    d = daemon_on(tmp_path / "d.db")
    a = Agent(d.endpoint, METER)
    s = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
    return d, a, s["body"]["data"]["tune_id"]


def test_a_job_out_across_the_restart_is_waited_for(tmp_path):
    d, a, tune_id = started_tune(tmp_path)
    job = a.expect("job")["body"]
    d.stop()
    a.close()
    d = daemon_on(tmp_path / "d.db")
    try:
        a = Agent(d.endpoint, METER)  # the hello: the daemon resends the job still out
        again = a.expect("job")["body"]
        assert again["job_id"] == job["job_id"]
        st = status(a, tune_id)
        assert st["state"] == "measuring" and st["measured"] == 0
        assert [x["job_id"] for x in st["steps"]] == [job["job_id"]]
        answer(a, again)
        nxt = a.expect(("job", "config"))
        assert status(a, tune_id)["measured"] == 1
        end = finish(a, tune_id, nxt)
        assert end["state"] == "done" and end["steps"][0]["job_id"] == job["job_id"]
        assert end["measured"] == len(end["steps"]) == len({x["cores"] for x in end["steps"]})
    finally:
        a.close()
        d.stop()


def test_a_job_done_while_no_daemon_followed_counts_and_the_session_goes_on(tmp_path):
    d, a, tune_id = started_tune(tmp_path)
    job = a.expect("job")["body"]
    d.stop()
    a.close()
    # the window a kill -9 can hit: the job's run stored and the job done, the session not
    # saved again yet
    st = open_store(str(tmp_path / "d.db"))
    (point,) = job["points"]
    rec = RunRecord.from_dict(record(METER, len(point["cpus"])))
    st.insert_results([ResultIn("m-1", "q1", job["job_id"], 0, rec, rec.to_dict())], 1.0)
    st.set_job_state(job["job_id"], "done")
    st.close()
    d = daemon_on(tmp_path / "d.db")
    try:
        a = Agent(d.endpoint, METER)
        nxt = a.expect(("job", "config"))
        assert nxt["type"] == "config" or nxt["body"]["job_id"] != job["job_id"]
        assert status(a, tune_id)["measured"] == 1
        end = finish(a, tune_id, nxt)
        assert end["state"] == "done" and end["steps"][0]["job_id"] == job["job_id"]
        assert end["measured"] == len(end["steps"]) == len({x["cores"] for x in end["steps"]})
    finally:
        a.close()
        d.stop()


def test_a_verifying_session_takes_the_verdict_after_the_restart(tmp_path):
    d, a, tune_id = started_tune(tmp_path)
    msg = a.expect(("job", "config"))
    while msg["type"] == "job":
        answer(a, msg["body"])
        msg = a.expect(("job", "config"))
    before = status(a, tune_id)
    assert before["state"] == "verifying"
    d.stop()
    a.close()
    d = daemon_on(tmp_path / "d.db")
    try:
        a = Agent(d.endpoint, METER)
        assert status(a, tune_id)["state"] == "verifying"
        a.send("applied", {"config_id": msg["body"]["config_id"], "ok": True,
                           "records": [record(METER, len(msg["body"]["cpus"]))]})
        end = wait_until(lambda: (lambda s: s if s["state"] != "verifying" else None)(
            status(a, tune_id)), "the verdict", 20)
        assert end["state"] == "done" and end["verification"]["state"] in ("verified", "off")
        assert end["steps"] == before["steps"] and end["config_id"] == before["config_id"]
    finally:
        a.close()
        d.stop()


def test_a_resumed_session_waits_agent_timeout_s_for_its_agent_then_fails(tmp_path):
    d, a, tune_id = started_tune(tmp_path)
    a.expect("job")
    d.stop()
    a.close()
    d = daemon_on(tmp_path / "d.db", agent_timeout_s=3.0)
    try:
        s = d.tuning.sessions[tune_id]
        # not failed at the first polls (about one a second) although its agent is not
        # connected to this daemon: only agent_timeout_s after the daemon's start
        wait_until(lambda: s.state == "failed", "the agent judged gone", 15)
        assert s.updated - d.started >= 3.0, s.updated - d.started
        assert "agent q1 is gone" in s.reason
        assert open_store(str(tmp_path / "d.db")).tune_session(tune_id)["state"] == "failed"
    finally:
        d.stop()


def test_a_daemon_sharing_the_store_leaves_a_session_driven_by_the_one_with_its_agent(
        tmp_path):
    d, a, tune_id = started_tune(tmp_path)
    other = daemon_on(tmp_path / "d.db", agent_timeout_s=1.5)  # the agent is not with it
    try:
        assert tune_id in other.tuning.sessions  # loaded, waiting for its agent
        answer(a, a.expect("job")["body"])  # the first daemon goes on and saves
        nxt = a.expect(("job", "config"))
        wait_until(lambda: tune_id not in other.tuning.sessions, "the other daemon leaving "
                   "the session", 15)
        assert status(a, tune_id)["state"] != "failed"
        end = finish(a, tune_id, nxt)
        assert end["state"] == "done"
        assert open_store(str(tmp_path / "d.db")).tune_session(tune_id)["state"] == "done"
    finally:
        a.close()
        other.stop()
        d.stop()


def test_the_daemon_the_agent_moves_to_takes_the_session_up_from_the_store(tmp_path):
    """Two daemons on one store, both started before the session: its agent leaves the one
    that runs it for the other, which takes the session up at the agent's hello (the job out
    resent) and ends it, each configuration measured once; the first still holds its copy
    (the agent left it within agent_timeout_s) and answers tune_status from the store."""
    d1 = daemon_on(tmp_path / "d.db")
    d2 = daemon_on(tmp_path / "d.db")
    a = Agent(d1.endpoint, METER)
    try:
        tune_id = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"}
                          )["body"]["data"]["tune_id"]
        job = a.expect("job")["body"]
        assert tune_id not in d2.tuning.sessions
        a.close()
        a = Agent(d2.endpoint, METER)  # its hello: d2 takes the session up
        assert a.expect("job")["body"]["job_id"] == job["job_id"]
        answer(a, job)
        nxt = a.expect(("job", "config"))
        assert status(a, tune_id)["measured"] == 1
        end = finish(a, tune_id, nxt)
        assert end["state"] == "done" and end["steps"][0]["job_id"] == job["job_id"]
        assert end["measured"] == len(end["steps"]) == len({x["cores"] for x in end["steps"]})
        assert d1.tuning.sessions[tune_id].state == "measuring"  # its stale copy
        st = query(d1.endpoint, "tune_status", {"tune_id": tune_id}, timeout_s=5.0)
        assert st["state"] == "done" and st["steps"] == end["steps"]
        assert [r["state"] for r in open_store(str(tmp_path / "d.db")).open_tune_sessions()
                ] == []
    finally:
        a.close()
        d2.stop()
        d1.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path):
    """Where the daemons' store lives: an SQLite file, or a new database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "d.db")
    return request.getfixturevalue("pg_url")


def test_a_stored_session_that_cannot_be_resumed_is_closed_as_failed(location, caplog):
    """A session whose stored record could not be resumed was left open for good: 'opptune
    status' listed it among the open ones, and the restarted daemon said so again at each
    hello of its agent. It is closed as failed with the reason, said once, and the others
    resume."""
    import logging

    caplog.set_level(logging.ERROR, logger="opptune.daemon")
    d = daemon_on(location)
    a = Agent(d.endpoint, METER)
    try:
        ids = [a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"}
                       )["body"]["data"]["tune_id"]]
        job = a.expect("job")["body"]
    finally:
        a.close()
        d.stop()
    st = open_store(location)
    try:
        good = st.tune_session(ids[0])
        damaged = {**good, "tune_id": "tune-damaged", "started": 1.0,
                   "updated": 5.0, "segments": [{**good["segments"][0], "order": None}]}
        st.save_tune_session(damaged)
        lacking = {**damaged, "tune_id": "tune-lacking", "segments": [
            {k: v for k, v in good["segments"][0].items() if k != "budget"}]}
        st.save_tune_session(lacking)
        st.db.execute("INSERT INTO tune_sessions VALUES ('tune-bad', 'q1', 'measuring', "
                      "'{not json', 1.0, 1.0)")
        before = {r["tune_id"] for r in st.open_tune_sessions()}
        assert before == {ids[0], "tune-damaged", "tune-lacking", "tune-bad"}
    finally:
        st.close()

    d = daemon_on(location)
    try:
        st = open_store(location)
        try:
            rows = {t: st.tune_session(t) for t in ("tune-damaged", "tune-lacking")}
            assert [r["tune_id"] for r in st.open_tune_sessions()] == ids
            state = dict(st.db.execute("SELECT tune_id, state FROM tune_sessions").fetchall())
        finally:
            st.close()
        assert state["tune-bad"] == "failed"
        assert rows["tune-damaged"]["state"] == "failed" and rows["tune-damaged"]["reason"] \
            == "the stored session cannot be resumed: TypeError: 'NoneType' object is not " \
               "iterable"
        assert rows["tune-lacking"]["reason"] == \
            "the stored session cannot be resumed: its record has no 'budget'"
        # the rest of the record is kept as it was
        assert rows["tune-lacking"]["steps"] == good["steps"]
        said = [r.getMessage() for r in caplog.records if "cannot be resumed" in r.getMessage()]
        assert said == ["tune tune-bad failed: the stored session cannot be resumed: its "
                        "stored body is not JSON (Expecting property name enclosed in double "
                        "quotes: line 1 column 2 (char 1))",
                        "tune tune-damaged failed: the stored session cannot be resumed: "
                        "TypeError: 'NoneType' object is not iterable",
                        "tune tune-lacking failed: the stored session cannot be resumed: its "
                        "record has no 'budget'"]
        a = Agent(d.endpoint, METER)  # its hello takes its sessions up from the store again
        resent = a.expect("job")
        assert resent["body"]["job_id"] == job["job_id"]
        err = a.query("tune_status", {"tune_id": "tune-bad"})
        assert err["type"] == "error" and "cannot be read" in err["body"]["message"]
        err = a.query("tune_status", {"tune_id": "tune-damaged"})  # closed: its verdict
        assert err["body"]["message"] == "tune session tune-damaged failed: the stored " \
            "session cannot be resumed: TypeError: 'NoneType' object is not iterable"
        err = a.query("tune_status", {"tune_id": "tune-nothing"})
        assert err["body"]["code"] == "bad_args" and "in the store of this daemon; 'opptune " \
            "status' lists the open ones" in err["body"]["message"]
        assert status(a, ids[0])["state"] == "measuring"
        st = a.query("status", {})["body"]["data"]
        assert [t["tune_id"] for t in st["tunes"]] == ids
        # said once: not again at the hello
        assert len([r for r in caplog.records if "cannot be resumed" in r.getMessage()]) == 3
        # the board's one open session is the resumed one: once it ends, a tune starts
        assert finish(a, ids[0], resent)["state"] == "done"
        again = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
        assert again["type"] == "reply", again
    finally:
        a.close()
        d.stop()
