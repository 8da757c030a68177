"""``opptune sweep`` and ``opptune status`` as a user runs them, against a real daemon and
agent: a sweep the agent cannot run is refused at once; ``--wait`` follows the jobs to done
(exit 0), to done with a job the agent stopped for its timeouts (exit 3) or to failed/expired
(exit 1 with the reason); bad endpoints are one line, exit 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from procs import Cluster, free_endpoint, hanging_board

pytestmark = pytest.mark.integration


def opptune(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False, max_cores=1)
    with open(c.agent_toml, "a") as fh:  # a workload whose every run fails
        fh.write(f'[[workloads]]\nname = "broken"\ncommand = ["{sys.executable}", "-c", '
                 '"raise SystemExit(3)"]\n')
    c.start_daemon()
    c.start_agent()
    c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="the agent")
    yield c
    c.stop()


def test_wait_tells_a_job_the_agent_stopped_for_its_timeouts_by_its_exit_status(tmp_path):
    """A sweep whose job the agent stopped after 2 points in a row timed out (the rest never
    ran) ended 'done' and exit 0, as a complete one: a script could not tell. It exits 3 and
    says why in one line; --json gives each job's ``stopped``."""
    c = hanging_board(tmp_path, ["sh", "-c", "test {threads} -lt 2 && exit 0; exec sleep 30"])
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="the agent")
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "hangs", "--workload", "quick", "--wait", "--json")
        assert p.returncode == 3, p.stderr
        jobs = {j["workload"]: j for j in json.loads(p.stdout)}
        assert [j["state"] for j in jobs.values()] == ["done", "done"]
        assert jobs["quick"]["stopped"] is None
        hangs = jobs["hangs"]
        assert {k: v for k, v in hangs["stopped"].items() if k != "definition"} == {
            "after_timeouts": 2, "points_not_run": 1, "points": 4}
        # the point after the stop never ran: said as a cancel's runs are (it read '4/4
        # runs', as if every run had measured something)
        assert (hangs["received"], hangs["not_run"]) == (4, 1)
        lines = p.stderr.strip().splitlines()
        assert lines[-3].startswith(f"opptune sweep: job {hangs['job_id']} (hangs on rpi4 "
                                    "(virtual)) done: 3 of 4 runs measured, 1 not run; timed "
                                    "out after 1 s")
        assert lines[-1] == (
            f"opptune sweep: exit 3: 1 of 2 jobs stopped before all its points ran: hangs "
            f"({hangs['job_id']}); the agent stops a job after stop_after_timeouts points in "
            "a row timed out, keeping what ran before (where the workload is only slow, raise "
            "run_timeout_s in the agent's configuration)")
    finally:
        c.stop()


def test_sweep_refused_at_once_wait_done_and_wait_failed(cluster):
    ep = cluster.endpoint
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--workload", "pi_integrate",
                "--size", "huge")
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "opptune sweep: daemon refused the query: agent 'test-agent' has no size 'huge' for "
        "pi_integrate; it offers small, default"]
    assert p.stdout == ""
    assert cluster.status()["jobs"] == []
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--workload", "pi_integrate",
                "--size", "small", "--reps", "1", "--warmup", "0", "--max-cores", "1",
                "--wait", "--json")
    assert p.returncode == 0, p.stderr
    (job,) = json.loads(p.stdout)
    assert (job["state"], job["received"], job["expected"], job["reason"]) == \
        ("done", 1, 1, None)
    assert job["workload"] == "pi_integrate" and job["board"]
    assert "runs" in p.stderr  # the progress display went to stderr

    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--workload", "broken",
                "--reps", "1", "--warmup", "0", "--max-cores", "1", "--wait")
    assert p.returncode == 1
    assert p.stdout == ""
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("opptune sweep: job job-") and " (broken on " in last
    assert last.endswith(") failed: 1/1 runs; every run of the job failed: workload failed "
                         "with exit status 3"), p.stderr
    st = cluster.status()
    states = {j["workload"]: (j["state"], j["reason"]) for j in st["jobs"]}
    assert states["pi_integrate"] == ("done", None)
    assert states["broken"][0] == "failed"

    # a restarted daemon knows the agent from its store, but the agent is down: refused,
    # saying what to do
    cluster.kill("agent")
    cluster.agent = None
    cluster.kill("daemon")
    cluster.start_daemon()
    cluster.wait_for(lambda s: True, timeout=30, what="the restarted daemon")
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--workload", "pi_integrate")
    assert p.returncode == 1, p.stderr  # not a usage error: it may work later
    assert p.stderr.strip().splitlines() == [
        "opptune sweep: daemon refused the query: agent 'test-agent' has not connected to this "
        "daemon instance: start its opptune-agent (or wait for its hello; 'opptune status' "
        "lists the agents connected) and try again"]


def _slow_cluster(tmp_path) -> tuple[Cluster, Path]:
    """A daemon and an agent with a workload "slow" whose run lasts until the file ``go``
    (returned) exists."""
    go = tmp_path / "go"
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False, max_cores=1)
    with open(c.agent_toml, "a") as fh:
        fh.write(f'[[workloads]]\nname = "slow"\ncommand = ["{sys.executable}", "-c", '
                 f'"import os, time\\nwhile not os.path.exists({str(go)!r}): '
                 'time.sleep(0.05)"]\n')
    c.start_daemon()
    c.start_agent()
    return c, go


def test_wait_follows_a_daemon_restarted_under_it(tmp_path):
    """The DVFS walk: 'characterize --wait' (and 'sweep --wait') gave up with exit 1 as soon
    as one status query went unanswered (5 s), so a daemon restarted in the middle ended the
    command though the jobs went on; 'tune' follows a restarting daemon for up to 60 s, and
    so do they now."""
    c, go = _slow_cluster(tmp_path)
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="agent")
        cli = subprocess.Popen([sys.executable, "-m", "opptune.daemon.cli", "sweep", "--daemon",
                                c.endpoint, "--agent", "test-agent", "--workload", "slow",
                                "--reps", "1", "--warmup", "0", "--max-cores", "1", "--wait"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        c.wait_for(lambda s: any(j["workload"] == "slow" and j["state"] in ("sent", "running")
                                 for j in s["jobs"]), timeout=30, what="the slow job out")
        c.kill("daemon")
        seen = []
        for line in cli.stderr:  # until the command notices the daemon is gone
            seen.append(line)
            if "no answer from the daemon" in line:
                break
        assert seen and seen[-1].startswith("opptune sweep: no answer from the daemon"), seen
        assert seen[-1].rstrip().endswith("; retrying for up to 60 s (a restarted daemon goes "
                                          "on with the jobs of its store)"), seen
        c.start_daemon()
        go.write_text("")
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 0, "".join(seen) + err
        assert "opptune sweep: the daemon answers again; following the jobs" in err, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("job ") and last.endswith(") done: 1/1 runs"), err
    finally:
        go.write_text("")
        c.stop()


def test_wait_gives_up_after_the_reconnect_time_asked_for(tmp_path):
    """--reconnect-s: how long --wait keeps asking a daemon that stopped answering (it was
    60 s, fixed: a user, or this suite, waited out all of it)."""
    c, go = _slow_cluster(tmp_path)
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="agent")
        cli = subprocess.Popen([sys.executable, "-m", "opptune.daemon.cli", "sweep", "--daemon",
                                c.endpoint, "--agent", "test-agent", "--workload", "slow",
                                "--reps", "1", "--warmup", "0", "--max-cores", "1", "--wait",
                                "--timeout", "1", "--reconnect-s", "1.5"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        c.wait_for(lambda s: any(j["workload"] == "slow" and j["state"] in ("sent", "running")
                                 for j in s["jobs"]), timeout=30, what="the slow job out")
        c.kill("daemon")
        out, err = cli.communicate(timeout=30)  # the old default, 60 s, would time out here
        assert cli.returncode == 1, err
        assert out == "" and "Traceback" not in err
        assert "; retrying for up to 1.5 s (a restarted daemon goes on with the jobs of its " \
               "store)" in err, err
        assert err.strip().splitlines()[-1].endswith(
            "the jobs are kept in the daemon's store and go on when it runs again: 'opptune "
            "status' follows them"), err
    finally:
        go.write_text("")
        c.stop()


@pytest.mark.parametrize("command", [["sweep", "--agent", "a", "--wait"],
                                     ["characterize", "--agent", "a", "--wait"],
                                     ["tune", "--agent", "a", "--workload", "w"],
                                     ["tune", "--follow", "tune-1"]])
def test_every_waiting_command_takes_reconnect_s_and_refuses_a_bad_one(command, capsys):
    from opptune.daemon.cli import build_parser
    parser = build_parser()
    assert parser.parse_args(command).reconnect_s == 60.0
    assert parser.parse_args([*command, "--reconnect-s", "2.5"]).reconnect_s == 2.5
    assert parser.parse_args([*command, "--reconnect-s", "0"]).reconnect_s == 0.0
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([*command, f"--reconnect-s={bad}"])
        assert exc.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"opptune {command[0]}: error: argument --reconnect-s: {bad!r} is not a number "
            "of seconds: give 0 or more (default 60)")


def test_wait_says_the_jobs_are_kept_when_the_daemon_stays_away(monkeypatch):
    """A daemon that does not come back within the follow window: exit 1, and the user learns
    the jobs are kept and how to follow them again (it said only 'no answer from the
    daemon')."""
    from rich.console import Console

    from opptune.daemon import sweep_wait
    from opptune.daemon.client import DaemonUnreachable

    def gone(*a, **k):
        raise DaemonUnreachable("no answer from the daemon at tcp://127.0.0.1:9 within 5 s")
    monkeypatch.setattr(sweep_wait, "query", gone)
    monkeypatch.setattr(sweep_wait, "POLL_S", 0.05)
    for prog, again in (("opptune sweep", "'opptune status' follows them"),
                        ("opptune characterize", "run it again to follow them")):
        con = Console(record=True, width=400)
        assert sweep_wait.wait_for_jobs("tcp://127.0.0.1:9", ["job-1"], console=con,
                                        prog=prog, reconnect_s=0.3) == 1
        lines = con.export_text().strip().splitlines()
        assert lines[0] == (f"{prog}: no answer from the daemon at tcp://127.0.0.1:9 within "
                            "5 s; retrying for up to 0.3 s (a restarted daemon goes on with the "
                            "jobs of its store)")
        # the bar of a job the daemon never described: how many runs is not known yet (it
        # read '0/None runs')
        bar, = [line for line in lines if line.startswith("job-1 ")]
        assert "0/? runs" in bar and "None" not in bar, bar
        assert lines[-1] == (f"{prog}: no answer from the daemon at tcp://127.0.0.1:9 within "
                             "5 s; the jobs are kept in the daemon's store and go on when it "
                             f"runs again: {again}")


def test_wait_follows_the_jobs_through_another_daemon_of_the_fleet(monkeypatch):
    """Walking a fleet: the daemon a 'sweep --wait' asked was killed; the agent failed over
    and its jobs went on through the other daemon, but the command retried the dead one for
    60 s and ended (exit 1) saying only that the jobs go on 'when it runs again'. The fleet
    is in the status (daemon.fleet): the command goes on through a daemon that answers."""
    from rich.console import Console

    from opptune.daemon import sweep_wait
    from opptune.daemon.client import DaemonUnreachable

    def fleet(me):
        return {"instance": me, "fleet": [
            {"instance": "A", "endpoint": "tcp://a:1", "answering": me == "A"},
            {"instance": "B", "endpoint": "tcp://b:1", "answering": True},
            {"instance": "C", "endpoint": "tcp://c:1", "answering": False}]}
    job = {"job_id": "job-1", "agent": "xu4", "workload": "triad", "board": "xu4",
           "size": "small", "expected": 4, "reason": None}
    asked = []

    def query(endpoint, what, args, timeout_s):
        asked.append(endpoint)
        if endpoint == "tcp://a:1":
            if len(asked) > 1:  # killed after its first answer
                raise DaemonUnreachable(f"no answer from the daemon at {endpoint} within 5 s")
            return {"daemon": fleet("A"), "agents": [],
                    "jobs": [{**job, "received": 1, "state": "running"}]}
        return {"daemon": fleet("B"), "agents": [],
                "jobs": [{**job, "received": 4, "state": "done"}]}
    monkeypatch.setattr(sweep_wait, "query", query)
    monkeypatch.setattr(sweep_wait, "POLL_S", 0.01)
    con = Console(record=True, width=400)
    assert sweep_wait.wait_for_jobs("tcp://a:1", ["job-1"], console=con) == 0
    assert asked == ["tcp://a:1", "tcp://a:1", "tcp://b:1"]  # never the silent C
    lines = con.export_text().strip().splitlines()
    assert lines[0] == ("opptune sweep: no answer from the daemon at tcp://a:1 within 5 s; "
                        "following the jobs through the fleet's daemon at tcp://b:1 (the "
                        "agents fail over to it; 'opptune status --daemon tcp://b:1' shows "
                        "them)")
    assert lines[-1] == "job job-1 (triad on xu4) done: 4/4 runs"


def test_tune_follows_its_session_through_another_daemon_of_the_fleet(monkeypatch, capsys):
    """As sweep --wait: 'opptune tune' retried its killed daemon for 60 s and gave up although
    the fleet had another that answers for the same store; it now goes on through that one
    at once (sweep_wait.fail_over, one place for both), never through a silent one."""
    from opptune.daemon import client, goal_cli, sweep_wait
    from opptune.daemon.client import DaemonUnreachable

    def fleet(me):
        return {"instance": me, "fleet": [
            {"instance": "A", "endpoint": "tcp://a:1", "answering": me == "A"},
            {"instance": "C", "endpoint": "tcp://c:1", "answering": False},
            {"instance": "B", "endpoint": "tcp://b:1", "answering": True}]}
    session = {"tune_id": "tune-1", "workload": "triad", "agent": "xu4", "budget": None,
               "grid": 8, "eta_s": None, "steps": [], "measured": 1, "state": "measuring"}
    asked = []

    def query(endpoint, what, args, timeout_s):
        asked.append((endpoint, what))
        if what == "status":
            assert args == {"only": []}  # the daemon row alone
            return {"daemon": fleet(endpoint[6].upper())}
        if endpoint == "tcp://a:1":
            raise DaemonUnreachable(f"no answer from the daemon at {endpoint} within 5 s")
        return {**session, "measured": 3, "state": "done"}
    monkeypatch.setattr(client, "query", query)
    monkeypatch.setattr(sweep_wait, "POLL_S", 0.01)
    final = goal_cli.follow_tune("tcp://a:1", session, 5.0, quiet=True, reconnect_s=0.3)
    assert final is not None and final["state"] == "done" and final["measured"] == 3
    assert asked == [("tcp://a:1", "status"), ("tcp://a:1", "tune_status"),
                     ("tcp://b:1", "status"), ("tcp://b:1", "tune_status")]  # never C
    assert capsys.readouterr().err.split() == (
        "opptune tune: no answer from the daemon at tcp://a:1 within 5 s; following tune-1 "
        "through the fleet's daemon at tcp://b:1 (the agents fail over to it; 'opptune "
        "status --daemon tcp://b:1' shows it)").split()


def test_tune_does_not_fail_back_at_once_to_the_daemon_that_fell_silent(monkeypatch, capsys):
    """Walking a fleet: the daemon tune failed over to held its loop a few seconds and the
    command went straight back to the killed one, which that daemon's status still showed
    answering (its heartbeat was recent), and waited there 60 s. The one it left is asked
    again only in turn with the others, while none answers."""
    from opptune.daemon import client, goal_cli, sweep_wait
    from opptune.daemon.client import DaemonUnreachable

    def fleet(me):  # both answer, as each one's status says
        return {"instance": me, "fleet": [
            {"instance": "A", "endpoint": "tcp://a:1", "answering": True},
            {"instance": "B", "endpoint": "tcp://b:1", "answering": True}]}
    session = {"tune_id": "tune-1", "workload": "triad", "agent": "xu4", "budget": None,
               "grid": 8, "eta_s": None, "steps": [], "measured": 1, "state": "measuring"}
    asked, b_silent = [], [True]

    def query(endpoint, what, args, timeout_s):
        asked.append((endpoint[6], what))
        if what == "status":
            return {"daemon": fleet(endpoint[6].upper())}
        if endpoint == "tcp://a:1":
            raise DaemonUnreachable(f"no answer from the daemon at {endpoint} within 1 s")
        if b_silent.pop() if b_silent else False:
            raise DaemonUnreachable(f"no answer from the daemon at {endpoint} within 1 s")
        return {**session, "measured": 3, "state": "done"}
    monkeypatch.setattr(client, "query", query)
    monkeypatch.setattr(sweep_wait, "POLL_S", 0.01)
    final = goal_cli.follow_tune("tcp://a:1", session, 1.0, quiet=True)
    assert final is not None and final["state"] == "done"
    assert asked == [("a", "status"), ("a", "tune_status"), ("b", "status"),
                     ("b", "tune_status"), ("a", "tune_status"), ("b", "tune_status"),
                     ("b", "status")]
    err = [" ".join(line.split()) for line in capsys.readouterr().err.splitlines()]
    assert err[0].startswith("opptune tune: no answer from the daemon at tcp://a:1 within "
                             "1 s; following tune-1 through the fleet's daemon at tcp://b:1")
    assert err[1] == ("opptune tune: no answer from the daemon at tcp://b:1 within 1 s; "
                      "retrying for up to 60 s (a restarted daemon resumes the session; the "
                      "fleet's other daemons are asked in turn: tcp://a:1)")
    assert err[2:] == ["opptune tune: the daemon answers again; following tune-1"]


def test_wait_exits_1_when_the_agent_goes_away(tmp_path):
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False, max_cores=1)
    with open(c.daemon_toml) as fh:
        text = fh.read()
    c.daemon_toml.write_text(text.replace("auto_sweep", "job_expiry_s = 2.0\nauto_sweep", 1))
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="agent")
        c.kill("agent")
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--reps", "1", "--warmup", "0", "--max-cores", "1",
                    "--wait", "--json", timeout=60)
    finally:
        c.stop()
    assert p.returncode == 1, p.stderr
    (job,) = json.loads(p.stdout)
    assert job["state"] == "expired"
    assert job["reason"].startswith("agent test-agent not seen for ")
    assert "expired" in p.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("command", ["status", "sweep"])
def test_a_bad_endpoint_is_one_line_exit_2(command):
    extra = ["--agent", "x"] if command == "sweep" else []
    p = opptune(command, "--daemon", "bogus", *extra, timeout=30)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"opptune {command}: 'bogus' lacks a transport; write it as \"tcp://bogus:5555\" "
        "(or ipc:///path/to/socket)"]
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_a_port_beyond_65535_is_refused_not_taken_modulo_65536(tmp_path):
    """libzmq takes tcp://host:99999 as port 34463 (99999 mod 65536): the daemon listened
    there, logging the port it took, and 'status --daemon tcp://127.0.0.1:70000' asked port
    4464 and said no daemon listens. Both now refuse the port at once (exit 2)."""
    p = opptune("status", "--daemon", "tcp://127.0.0.1:70000", timeout=30)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.strip().splitlines() == [
        "opptune status: 'tcp://127.0.0.1:70000' has the port '70000', not a number from 0 "
        "to 65535; write it as \"tcp://127.0.0.1:5555\" with the daemon's port"]
    db = tmp_path / "opptune.db"
    d = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--bind",
                        "tcp://127.0.0.1:99999", "--database", str(db)],
                       capture_output=True, text=True, timeout=30)
    assert d.returncode == 2, d.stderr
    assert d.stderr.strip().splitlines() == [
        "opptune-daemon: --bind: 'tcp://127.0.0.1:99999' has the port '99999', not a number "
        "from 0 to 65535; write it as \"tcp://127.0.0.1:5555\" with the daemon's port"]
    assert not db.exists()


def test_a_daemon_whose_address_is_in_use_says_so_and_creates_nothing(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        db = tmp_path / "new-dir" / "opptune.db"
        p = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--bind",
                            f"tcp://127.0.0.1:{port}", "--database", str(db)],
                           capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"opptune-daemon: cannot listen on tcp://127.0.0.1:{port}: the address is in use by "
        "another process: stop it or choose another --bind (or 'bind' in the configuration)"]
    assert not db.parent.exists()
    assert free_endpoint()  # (the port is released with the socket)


def test_a_daemon_with_curve_on_whose_address_is_in_use_says_so_too(tmp_path):
    """With CURVE on (any bind but loopback's, by default) the daemon has a zmq context of
    its own; the socket that failed to bind stayed open and the context's term() waited for
    it for ever: 'opptune-daemon --bind tcp://0.0.0.0:5555' beside a running daemon hung
    without a word. It now exits 2 with the line a daemon without CURVE gives."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        config = tmp_path / "daemon.toml"
        config.write_text(f"bind = 'tcp://127.0.0.1:{port}'\ncurve = 'on'\n"
                          "database = 'opptune.db'\n")
        p = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--config",
                            str(config)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        f"opptune-daemon: cannot listen on tcp://127.0.0.1:{port}: the address is in use by "
        "another process: stop it or choose another --bind (or 'bind' in the configuration)")
    assert not (tmp_path / "opptune.db").exists()


def test_a_sweep_of_an_agent_not_connected_says_queued_not_sent(cluster):
    """'opptune sweep' of a board whose agent had stopped printed 'job ... sent: W', while
    the job waited in the daemon (state queued) for a hello that might never come. The line
    says queued and why; --json carries each job's state."""
    cluster.agent.send_signal(signal.SIGTERM)
    assert cluster.agent.wait(30) == 0
    cluster.agent = None  # stopped on purpose (wait_for fails on a dead one)
    cluster.wait_for(lambda s: not any(a["alive"] for a in s["agents"]), timeout=60,
                     what="the agent gone")
    p = opptune("sweep", "--daemon", cluster.endpoint, "--agent", "test-agent",
                "--workload", "pi_integrate")
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.strip().splitlines()
    job_id = line.split()[1]
    assert line == (f"job {job_id} queued: pi_integrate; agent test-agent is not connected "
                    "now: the job goes out when it says hello again (it expires after the "
                    "daemon's job_expiry_s without the agent); 'opptune status --agent "
                    "test-agent' shows both")
    status = cluster.status()
    assert [j["state"] for j in status["jobs"] if j["job_id"] == job_id] == ["queued"]
    p = opptune("sweep", "--daemon", cluster.endpoint, "--agent", "test-agent",
                "--workload", "pi_integrate", "--json")
    assert [j["state"] for j in json.loads(p.stdout)["jobs"]] == ["queued"]


def test_wait_says_at_once_that_the_job_waits_for_an_agent_not_connected(cluster):
    """Walking a board: 'opptune sweep --wait' of a board whose agent had stopped said
    nothing to a log or a pipe until the job expired (job_expiry_s, 60 s): the 'queued ...
    not connected' line was printed without --wait only. It comes first now, on stderr."""
    cluster.agent.send_signal(signal.SIGTERM)
    assert cluster.agent.wait(30) == 0
    cluster.agent = None
    cluster.wait_for(lambda s: not any(a["alive"] for a in s["agents"]), timeout=60,
                     what="the agent gone")
    p = subprocess.Popen([sys.executable, "-m", "opptune.daemon.cli", "sweep", "--daemon",
                          cluster.endpoint, "--agent", "test-agent", "--workload",
                          "pi_integrate", "--wait"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        first = p.stderr.readline()  # before the wait: at once, not at the job's expiry
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert first.startswith("job job-") and first.rstrip().endswith(
        "queued: pi_integrate; agent test-agent is not connected now: the job goes out when "
        "it says hello again (it expires after the daemon's job_expiry_s without the agent); "
        "'opptune status --agent test-agent' shows both"), first + err
    assert p.returncode == 130, err


def test_a_workload_named_twice_is_swept_once(cluster):
    """'--workload pi_integrate --workload pi_integrate' queued two jobs measuring the same
    points twice (and the second's runs counted as repeats of the first's)."""
    p = opptune("sweep", "--daemon", cluster.endpoint, "--agent", "test-agent", "--workload",
                "pi_integrate", "--workload", "pi_integrate", "--json")
    assert p.returncode == 0, p.stderr
    jobs = json.loads(p.stdout)["jobs"]
    assert [j["workload"] for j in jobs] == ["pi_integrate"]
    status = cluster.wait_for(lambda s: bool(s["jobs"]), timeout=30, what="the job")
    assert [j["job_id"] for j in status["jobs"]] == [jobs[0]["job_id"]]


def test_a_daemon_bound_to_another_hosts_address_says_what_bind_takes(tmp_path):
    """'--bind tcp://192.0.2.1:5555' (an address of no interface here: the daemon's own
    address written on another host, a typo) said zmq's 'Cannot assign requested address;
    give an endpoint such as ...'. It now says the host is not an address of this machine
    and what to bind to."""
    db = tmp_path / "opptune.db"
    p = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--bind",
                        "tcp://192.0.2.1:5555", "--database", str(db), "--log-level",
                        "WARNING"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "opptune-daemon: cannot listen on tcp://192.0.2.1:5555: Cannot assign requested "
        "address: the host in it is not an address of this machine; bind to one of its own "
        "addresses, or tcp://0.0.0.0:PORT for all of them"]
    assert not db.exists()


def test_wait_bars_say_when_the_jobs_wait_on_an_offline_agent():
    """Walking issue 19: 'characterize --wait' for a board that was switched off showed bars
    'queued' for up to job_expiry_s (60 s) and nothing else. The bar now names the cause."""
    from opptune.daemon.sweep_wait import state_text
    job = {"state": "queued", "agent": "x86"}
    assert state_text(job, {"id": "x86", "alive": False, "last_seen_s": 12.4}) == \
        "queued: agent x86 offline, last seen 12 s ago"
    assert state_text(job, {"id": "x86", "alive": True, "last_seen_s": 0.3}) == "queued"
    assert state_text({"state": "expired", "agent": "x86"},
                      {"id": "x86", "alive": False, "last_seen_s": 70}) == "expired"
    assert state_text(job, None) == "queued"


@pytest.fixture
def no_cpufreq(tmp_path):
    """This machine (no cpufreq) under a daemon whose [sweep] asks for every frequency."""
    c = Cluster(tmp_path, kernels=("pi_integrate", "triad"), auto_sweep=False, max_cores=1,
                reps=1)
    with open(c.daemon_toml, "a") as fh:  # the file ends in its [sweep] table
        fh.write('frequency_grid = "all"\n')
    c.start_daemon()
    c.start_agent()
    c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="the agent")
    yield c
    c.stop()


def test_a_board_without_cpufreq_is_swept_over_cores_and_says_why_once(no_cpufreq):
    """The walk: [sweep] frequency_grid = "all" made 'opptune sweep' of a board without
    cpufreq fail ("frequency_grid 'all' needs frequencies"). A missing knob is reported as
    unavailable and the sweep goes on: cores only, at the board's own frequency."""
    ep = no_cpufreq.endpoint
    why = ("frequencies not swept on board {}: no cpufreq policies under "
           "/sys/devices/system/cpu/cpufreq (kernel without cpufreq or a virtual machine); its "
           "cores are swept at its own frequency")
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    board = no_cpufreq.status()["agents"][0]["board"]
    assert data["frequencies_not_swept"] == why.format(board)
    assert data["cores_not_swept"] is None  # the hello names this machine's cpus
    assert sorted(j["workload"] for j in data["jobs"]) == ["pi_integrate", "triad"]
    assert [j["n_points"] for j in data["jobs"]] == [1, 1]

    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--workload", "pi_integrate",
                "--workload", "triad", "--wait")
    assert p.returncode == 0, p.stderr
    lines = (p.stdout + p.stderr).splitlines()
    assert sum(why.format(board) in line for line in lines) == 1, p.stdout + p.stderr
    points = no_cpufreq.rows("SELECT points FROM jobs")
    assert len(points) == 4
    assert all(pt["freq_khz"] is None for (text,) in points for pt in json.loads(text))
    assert all(j["state"] == "done" for j in no_cpufreq.status()["jobs"])

    # frequencies the user names are still refused: they were asked for, not configured
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--freq", "1000000")
    assert p.returncode == 2 and "cannot run at 1000000 kHz" in p.stderr, p.stderr
    # a frequency with its unit is the same clock
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--freq", "1GHz")
    assert p.returncode == 2 and "cannot run at 1000000 kHz" in p.stderr, p.stderr


@pytest.mark.parametrize("command", ["recommend", "tune"])
def test_recommend_and_tune_refuse_more_cores_than_the_board_as_sweep_does(cluster, command):
    """The walk: 'opptune recommend --max-cores 99' on a 2-cpu board was accepted (tune even
    ran), where 'opptune sweep --max-cores 99' is refused."""
    ep = cluster.endpoint
    sweep = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--max-cores", "99")
    assert sweep.returncode == 2
    n = len(cluster.status()["platforms"][cluster.status()["agents"][0]["platform"]]
            ["sweep_order"])
    assert f"max_cores 99 is more than the {n} cpus of board " in sweep.stderr, sweep.stderr
    p = opptune(command, "--daemon", ep, "--agent", "test-agent", "--workload", "pi_integrate",
                "--max-cores", "99")
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        sweep.stderr.strip().replace("opptune sweep:", f"opptune {command}:")]
    assert p.stdout == ""
    assert cluster.status()["jobs"] == []


def test_wait_says_how_many_runs_of_a_cancelled_job_were_measured(monkeypatch):
    """A cancelled job's runs the agent recorded as not run count in ``received``: the line
    read 'cancelled: 4/4 runs', as if the job had measured everything. It says how many runs
    were measured and how many not run; a job whose runs failed (measured) reads as before."""
    from rich.console import Console

    from opptune.daemon import sweep_wait
    job = {"agent": "xu4", "workload": "triad", "board": "xu4", "size": "small",
           "expected": 4, "received": 4}
    jobs = [{**job, "job_id": "job-1", "state": "cancelled", "not_run": 3,
             "reason": "cancelled by the user at 2026-11-27 19:00:00 UTC"},
            {**job, "job_id": "job-2", "state": "done", "not_run": 0, "reason": None}]
    monkeypatch.setattr(sweep_wait, "query", lambda *a, **k: {"daemon": {}, "agents": [],
                                                               "jobs": jobs})
    con = Console(record=True, width=400)
    assert sweep_wait.wait_for_jobs("tcp://a:1", ["job-1", "job-2"], console=con) == 4
    lines = con.export_text().strip().splitlines()
    assert lines[-3:-1] == [
        "opptune sweep: job job-1 (triad on xu4) cancelled: 1 of 4 runs measured, 3 not run "
        "(cancelled); cancelled by the user at 2026-11-27 19:00:00 UTC",
        "job job-2 (triad on xu4) done: 4/4 runs"]
    bars = [ln for ln in lines if ln.startswith("triad on xu4")]
    assert any("1/4 runs" in b for b in bars), lines
