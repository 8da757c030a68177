"""``opptune tune --stop ID`` and ``--follow ID``: a session the daemon runs is ended, or
followed again after Ctrl-C. Real daemon and agent processes on the odroid-xu4 virtual board
for one daemon; daemon loops in threads sharing one store, and a test agent, for the sessions
a daemon holds only in the store or that another daemon of the fleet drives."""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import select
import signal
import subprocess
import threading
import time

import pytest

from opptune.agent.virtual_board import make_tree
from opptune.daemon import tuning
from opptune.daemon.client import query
from opptune.daemon.store import open_store
from opptune.shared import protocol as P
from procs import Cluster, wait_until
from test_goal_e2e import OPPTUNE, one_line, opptune
from test_goal_service import METER, Agent
from test_tune_restart import answer, daemon_on, status

pytestmark = pytest.mark.integration


def tune_cli(c, *more: str) -> subprocess.Popen:
    """`opptune tune` of pi_integrate on cluster 1 of the virtual board, in the background."""
    return subprocess.Popen([OPPTUNE, "tune", "--daemon", c.endpoint, "--agent", "test-agent",
                             "--workload", "pi_integrate", "--objective", "energy",
                             "--cluster", "1", "--no-progress", *more],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=c.tmp)


def open_tunes(c) -> list[dict]:
    p = opptune("status", "--daemon", c.endpoint, "--json", cwd=c.tmp)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["tunes"]


def board(tmp_path) -> Cluster:
    """The daemon and the virtual board's agent, started; agent_timeout_s 30: the tests hold
    the agent (SIGSTOP) for a few seconds while commands start up and are answered."""
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False, max_cores=0,
                extra_agent={"virtual_board": "odroid-xu4",
                             "sysfs_root": make_tree("odroid-xu4", str(tmp_path / "board"))},
                extra_daemon={"agent_timeout_s": 30.0})
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), 30, "the agent's hello")
    except BaseException:
        c.stop()
        raise
    return c


def read_until(fd: int, needle: str, timeout: float) -> str:
    """What the terminal ``fd`` shows until ``needle`` appears (AssertionError at timeout)."""
    seen, deadline = b"", time.monotonic() + timeout
    while needle.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {needle!r} on the terminal: {seen.decode(errors='replace')}"
        if select.select([fd], [], [], left)[0]:
            try:
                seen += os.read(fd, 4096)
            except OSError:  # EIO: the command has exited
                raise AssertionError(f"no {needle!r} on the terminal before the command "
                                     f"exited: {seen.decode(errors='replace')}") from None
    return seen.decode(errors="replace")


def test_stop_ends_the_session_its_job_runs_out_and_nothing_is_pushed(tmp_path):
    c = board(tmp_path)
    first = second = None
    try:
        first = tune_cli(c, "--reps", "4")
        st = c.wait_for(lambda s: any(j["received"] > 0 for j in s["jobs"]), 90,
                        "a run of the session's first job")
        (tune_id,) = [t["tune_id"] for t in st["tunes"]]
        # the agent is held mid-job: the job is certainly out when the stop comes
        c.agent.send_signal(signal.SIGSTOP)
        try:
            p = opptune("tune", "--stop", tune_id, "--daemon", c.endpoint, cwd=tmp_path)
        finally:
            c.agent.send_signal(signal.SIGCONT)
        assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 2, p.stdout
        assert re.fullmatch(rf"opptune tune: {tune_id} \(pi_integrate \(small\) on test-agent, "
                            r"\d+ configurations? measured\) is stopped: stopped by the user at "
                            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC; nothing more is measured or "
                            r"applied for it", lines[0]), lines[0]
        job_id = re.fullmatch(r"its job (job-\S+) \((sent|running), one configuration\) is "
                              r"cancelled: test-agent stops it now; the runs it measured are "
                              r"stored, and count for later tunes and recommendations",
                              lines[1]).group(1)
        # the command that started it ends, saying why
        out, err = first.communicate(timeout=60)
        assert first.returncode == 1, out + err
        assert "Traceback" not in err
        assert err.strip().splitlines()[-1].startswith(
            f"opptune tune: {tune_id} stopped: stopped by the user at "), err
        assert "stopped: stopped by the user at " in out  # the verdict's last line
        (body,) = c.rows("SELECT body FROM tune_sessions")
        assert json.loads(body[0])["state"] == "stopped"
        assert open_tunes(c) == []
        # the job is cancelled on the agent (its end recorded); nothing is fitted or pushed
        wait_until(lambda: f"job {job_id} cancelled: its agent has ended it"
                   in (tmp_path / "daemon.log").read_text(), "the stopped session's job", 60,
                   c.logs)
        st = c.wait_for(lambda s: True)
        assert st["recommendations"] == [], st["recommendations"]
        (job,) = [j for j in st["jobs"] if j["job_id"] == job_id]
        assert job["state"] == "cancelled", job
        assert job["reason"].startswith(f"cancelled: its tune session {tune_id} was stopped by "
                                        "the user at "), job
        assert f"job {job_id} cancelled by the daemon" in (tmp_path / "agent.log").read_text()

        # stopped again: said in one line, exit 0; followed: its verdict, exit 1
        p = opptune("tune", "--stop", tune_id, "--daemon", c.endpoint, cwd=tmp_path)
        assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
        assert p.stdout.strip() == (f"opptune tune: {tune_id} had already ended: stopped: "
                                    f"{json.loads(body[0])['reason']}")
        p = opptune("tune", "--follow", tune_id, "--daemon", c.endpoint, "--json",
                    cwd=tmp_path)
        assert p.returncode == 1, p.stdout + p.stderr
        assert json.loads(p.stdout)["state"] == "stopped"  # stdout holds only JSON
        assert p.stderr.strip().splitlines() == [
            f"opptune tune: {tune_id} stopped: {json.loads(body[0])['reason']}"]

        # the board is free: a new session starts at once, and --stop --json ends it
        second = tune_cli(c, "--json")
        new = c.wait_for(lambda s: len(s["tunes"]) == 1, 60, "the second session")["tunes"]
        p = opptune("tune", "--stop", new[0]["tune_id"], "--daemon", c.endpoint, "--json",
                    cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
        data = json.loads(p.stdout)
        assert data["tune_id"] == new[0]["tune_id"] and data["state"] == "stopped"
        assert data["stopped"] is True and data["reason"].startswith("stopped by the user at ")
        assert data["job_cancelled"] is None or set(data["job_cancelled"]) == {
            "job_id", "state", "told", "via"}
        p = opptune("tune", "--stop", new[0]["tune_id"], "--daemon", c.endpoint, "--json",
                    cwd=tmp_path)
        assert p.returncode == 0 and json.loads(p.stdout)["stopped"] is False
        out, err = second.communicate(timeout=60)
        assert second.returncode == 1 and json.loads(out)["state"] == "stopped", out + err
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
        if c.agent is not None and c.agent.poll() is None:
            c.agent.send_signal(signal.SIGCONT)
        c.stop()


def test_follow_takes_a_session_up_again_after_ctrl_c_and_wrong_ids_are_one_line(tmp_path):
    c = board(tmp_path)
    first = follow = None
    master, slave = pty.openpty()
    try:
        first = tune_cli(c, "--budget", "3")
        c.wait_for(lambda s: any(j["received"] > 0 for j in s["jobs"]), 90, "a run")
        # the agent is held until --follow shows the session going on
        c.agent.send_signal(signal.SIGSTOP)
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=30)
        assert first.returncode == 130, out + err
        tune_id = re.search(r"stopped following (tune-\w+)", err).group(1)
        said = " ".join(err.split())
        assert f"'opptune tune --follow {tune_id}' follows it again, 'opptune tune --stop " \
               f"{tune_id}' ends it" in said, err
        # while it is open, a second tune names both commands
        p = opptune("tune", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", cwd=tmp_path)
        one_line(p, 1, f"'opptune tune --follow {tune_id}' follows it, 'opptune tune --stop "
                       f"{tune_id}' ends it")
        # followed to its end: progress on the terminal, the verdict on stdout, tune's exit
        # status
        follow = subprocess.Popen([OPPTUNE, "tune", "--follow", tune_id, "--daemon",
                                   c.endpoint], stdout=subprocess.PIPE, stderr=slave,
                                  text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
        os.close(slave)
        slave = None
        shown = read_until(master, "of 3 (budget) configurations", 60)
        assert "tune pi_integrate on test-agent" in shown, shown
        c.agent.send_signal(signal.SIGCONT)
        while select.select([master], [], [], 240)[0]:  # the terminal, read to its end
            try:
                if not os.read(master, 4096):
                    break
            except OSError:  # EIO: the command has exited
                break
        out, _ = follow.communicate(timeout=240)
        assert follow.returncode == 0, out + c.logs()
        assert f"tune {tune_id}: minimum energy of pi_integrate (small) on test-agent: " \
               "measured 3 of " in out
        assert out.strip().splitlines()[-1].startswith("done: applied and "), out
        p = opptune("tune", "--follow", tune_id, "--daemon", c.endpoint, "--json",
                    cwd=tmp_path)
        assert p.returncode == 0 and json.loads(p.stdout)["state"] == "done"
        # already done: a stop changes nothing
        p = opptune("tune", "--stop", tune_id, "--daemon", c.endpoint, cwd=tmp_path)
        assert p.returncode == 0 and p.stdout.startswith(
            f"opptune tune: {tune_id} had already ended: done: applied and "), p.stdout
        # unknown ids and wrong options: one line each, exit 2
        for argv, needle in (
                (["--stop", "tune-nosuch"], "no tune session 'tune-nosuch' in the store"),
                (["--follow", "tune-nosuch"], "no tune session 'tune-nosuch'"),
                (["--stop", "tune-nosuch", "--json"], "no tune session 'tune-nosuch'"),
                (["--stop", tune_id, "--agent", "test-agent"],
                 "--stop takes a session's id only; leave out --agent"),
                (["--follow", " "], "--follow needs a session's id"),
                (["--workload", "pi_integrate"], "--agent is needed to start a session "
                                                 "(--follow TUNE_ID or --stop TUNE_ID")):
            one_line(opptune("tune", *argv, "--daemon", c.endpoint, cwd=tmp_path), 2, needle)
    finally:
        for proc in (first, follow):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
        os.close(master)
        if slave is not None:
            os.close(slave)
        if c.agent is not None and c.agent.poll() is None:
            c.agent.send_signal(signal.SIGCONT)
        c.stop()


# -- a fleet: daemon loops in threads on one SQLite store, a test agent --------------------------

def start_on(a) -> tuple[str, dict]:
    """A tune session of the test agent: its id and first job."""
    tune_id = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"}
                      )["body"]["data"]["tune_id"]
    return tune_id, a.expect("job")["body"]


def stop_via(d, tune_id: str) -> dict:
    return query(d.endpoint, "tune_stop", {"tune_id": tune_id}, timeout_s=5.0)


def test_a_session_only_in_the_store_is_stopped_and_not_resumed(tmp_path):
    d1 = daemon_on(tmp_path / "d.db")
    d2 = daemon_on(tmp_path / "d.db")  # started before the session: it holds no copy
    a = Agent(d1.endpoint, METER)
    try:
        tune_id, job = start_on(a)
        a.close()
        d1.stop()  # no daemon drives the session now: it is in the store only
        assert tune_id not in d2.tuning.sessions
        data = stop_via(d2, tune_id)
        assert data["stopped"] is True and data["state"] == "stopped"
        # the agent is not connected to d2 (nor to any daemon): it is told at its next hello
        assert data["job_cancelled"] == {"job_id": job["job_id"], "state": "sent",
                                         "told": False, "via": None}
        row = open_store(str(tmp_path / "d.db")).tune_session(tune_id)
        assert row["state"] == "stopped" and row["reason"] == data["reason"]
        assert stop_via(d2, tune_id)["stopped"] is False
        # a daemon started on the store does not resume it; the agent's hello there gets the
        # cancel of its job, not the job
        d3 = daemon_on(tmp_path / "d.db")
        try:
            assert tune_id not in d3.tuning.sessions
            a = Agent(d3.endpoint, METER)
            assert a.expect(("cancel", "job"))["body"] == {"job_id": job["job_id"]}
            assert status(a, tune_id)["state"] == "stopped"
            assert a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"}
                           )["type"] == "reply"  # the board is free
        finally:
            a.close()
            d3.stop()
    finally:
        a.close()
        d2.stop()
        d1.stop()


def test_a_session_another_daemon_drives_is_stopped_there_and_let_go(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="opptune.daemon")
    d1 = daemon_on(tmp_path / "d.db")
    d2 = daemon_on(tmp_path / "d.db")
    a = Agent(d1.endpoint, METER)
    try:
        tune_id, job = start_on(a)
        assert tune_id in d1.tuning.sessions and tune_id not in d2.tuning.sessions
        data = stop_via(d2, tune_id)
        assert data["stopped"] is True and data["job_cancelled"]["job_id"] == job["job_id"]
        # the job, cancelled by d2 (which the agent does not talk to), is cancelled at the
        # agent by d1, which reads the cancel from the store: not only at its next hello
        assert a.expect("cancel")["body"] == {"job_id": job["job_id"]}
        # d1, which has the agent, still holds its copy: a new tune of the board is taken
        # all the same (the store says the session ended), and status answers from the store
        assert status(a, tune_id)["state"] == "stopped"
        reply = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
        assert reply["type"] == "reply", reply
        new_id = reply["body"]["data"]["tune_id"]
        assert tune_id not in d1.tuning.sessions
        # the stopped session's job ends at the agent: d1 saves nothing over the stop, and
        # fits and pushes nothing for it; the next job is the new session's
        answer(a, job)
        wait_until(lambda: f"job {job['job_id']} cancelled: its agent has ended it"
                   in caplog.text, "the stopped session's job", 20)
        nxt = a.expect("job")["body"]
        assert nxt["job_id"] != job["job_id"]
        assert status(a, new_id)["steps"][0]["job_id"] == nxt["job_id"]
        st = open_store(str(tmp_path / "d.db"))
        assert st.tune_session(tune_id)["state"] == "stopped"
        assert st.recommendations() == []
    finally:
        a.close()
        d2.stop()
        d1.stop()


def test_a_stop_while_the_sampler_works_elsewhere_pushes_nothing(tmp_path, monkeypatch):
    # the window between the last job's end and the recommendation: d1's sampler says "stop
    # measuring" after d2 stopped the session; d1 must not apply the configuration
    reached, go = threading.Event(), threading.Event()
    propose = tuning._propose

    def held(sampler, grid, measured):
        out = propose(sampler, grid, measured)
        if out.index is None:  # measured enough: held until the stop is saved
            reached.set()
            assert go.wait(30)
        return out
    monkeypatch.setattr(tuning, "_propose", held)
    d1 = daemon_on(tmp_path / "d.db")
    d2 = daemon_on(tmp_path / "d.db")
    a = Agent(d1.endpoint, METER)

    def next_job() -> dict | None:
        """The next job d1 sends; None once its sampler has said stop."""
        while not reached.is_set():
            if a.sock.poll(50):
                msg = P.decode(a.sock.recv())
                if msg["type"] == "job":
                    return msg["body"]
        return None
    try:
        tune_id, job = start_on(a)
        while job is not None:
            answer(a, job)
            job = next_job()
        assert status(a, tune_id)["measured"] >= 2  # enough for a recommendation
        assert stop_via(d2, tune_id)["stopped"] is True
        go.set()
        wait_until(lambda: tune_id not in d1.tuning.sessions, "d1 letting the session go", 15)
        st = open_store(str(tmp_path / "d.db"))
        assert st.tune_session(tune_id)["state"] == "stopped"
        assert st.recommendations() == []  # nothing applied: no configuration stored or sent
    finally:
        go.set()
        a.close()
        d2.stop()
        d1.stop()


def test_a_stop_the_store_does_not_take_leaves_the_session_going_on(tmp_path):
    d = daemon_on(tmp_path / "d.db")
    a = Agent(d.endpoint, METER)
    try:
        tune_id, job = start_on(a)
        save = d.store.save_tune_session

        def refused(*args, **kwargs):
            raise OSError("disk full")
        d.store.save_tune_session = refused
        err = a.query("tune_stop", {"tune_id": tune_id})
        assert err["type"] == "error" and err["body"]["code"] == "store", err
        assert err["body"]["message"] == (f"tune session {tune_id} goes on: the store did not "
                                          "take its stop (the daemon's log says why); run "
                                          "'opptune tune --stop' again")
        assert status(a, tune_id)["state"] == "measuring"
        d.store.save_tune_session = save
        data = a.query("tune_stop", {"tune_id": tune_id})["body"]["data"]
        assert data["stopped"] is True and data["job_cancelled"]["job_id"] == job["job_id"]
        assert open_store(str(tmp_path / "d.db")).tune_session(tune_id)["state"] == "stopped"
        assert tune_id not in d.tuning.sessions
    finally:
        a.close()
        d.stop()


def test_stop_names_the_daemon_of_the_fleet_that_tells_the_agent(monkeypatch, capsys):
    """A stop through a daemon the agent is not connected to: its job is cancelled at the
    agent by the daemon that holds it (it said 'told at its next hello', a job of hours
    running on)."""
    import argparse

    from opptune.daemon import client, goal_cli
    data = {"tune_id": "tune-1", "stopped": True, "workload": "wl", "size": "small",
            "agent": "q1", "measured": 2, "state": "stopped", "reason": "stopped by the user",
            "job_cancelled": {"job_id": "job-1", "state": "running", "told": False,
                              "via": "tcp://d1:5555"}}
    monkeypatch.setattr(client, "ask", lambda *a, **k: (data, None))
    args = argparse.Namespace(timeout=5.0, json=False)
    assert goal_cli.stop_tune(args, "tcp://d2:5555", "tune-1") == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "its job job-1 (running, one configuration) is cancelled: q1 is connected to the "
        "daemon at tcp://d1:5555, which tells it to stop it within a few seconds; the runs it "
        "measured are stored, and count for later tunes and recommendations")


def test_stop_of_a_queued_job_says_a_daemon_that_sent_it_meanwhile_stops_it(monkeypatch,
                                                                             capsys):
    """A session's job found queued by the stop may go out from another daemon of the fleet
    at that instant, which then tells the agent to stop it (jobs.py, _sent_cancelled): the
    stop said 'it had not been sent', as 'opptune cancel' did before it said both orders
    truly; both now say it in one text."""
    import argparse

    from opptune.daemon import cancel_cli, client, goal_cli
    data = {"tune_id": "tune-1", "stopped": True, "workload": "wl", "size": "small",
            "agent": "q1", "measured": 0, "state": "stopped", "reason": "stopped by the user",
            "job_cancelled": {"job_id": "job-1", "state": "queued", "told": None,
                              "via": None}}
    monkeypatch.setattr(client, "ask", lambda *a, **k: (data, None))
    args = argparse.Namespace(timeout=5.0, json=False)
    assert goal_cli.stop_tune(args, "tcp://d2:5555", "tune-1") == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert "had not been sent" not in line
    assert line == (
        "its job job-1 (queued, one configuration) is cancelled: it was queued, not sent, when "
        "cancelled: it is never sent (a daemon of the fleet that sent it at that instant tells "
        "the agent to stop it); the runs it measured are stored, and count for later tunes "
        "and recommendations")
    cancelled = {"job_id": "job-1", "workload": "wl", "agent": "q1", "cancelled": True,
                 "was": "queued", "told": None, "via": None, "received": 0, "expected": 4}
    assert cancel_cli.job_line(cancelled).endswith(
        cancel_cli.stop_text("q1", "queued", None, None))
