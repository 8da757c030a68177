"""``opptune cancel``: a job stopped for good, end to end. Real daemon and agent processes on
a virtual rpi4 with command workloads: 'slow' answers at 1 thread and from 2 threads on sleeps
(each run writes its pid first, so the test can see the process), 'quick' always answers.

A running job's process is killed, its runs measured before stay stored, the rest are
recorded as not run, the job is ``cancelled`` (exit 4 of ``sweep --wait``) and stays so across
daemon and agent restarts; the agent goes on with its next job. A job queued in the daemon is
cancelled without the agent; one queued on the agent is dropped there; an unknown id is one
line, exit 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from opptune.daemon.client import query
from opptune.daemon.store import open_store
from procs import Cluster, wait_until

pytestmark = pytest.mark.integration


def opptune(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                          capture_output=True, text=True, timeout=timeout)


# the cluster's options: the virtual rpi4's agent with the command workloads only
OPTIONS = {"kernels": (), "auto_sweep": False, "max_cores": 4, "reps": 1,
           "extra_agent": {"virtual_board": "rpi4", "run_timeout_s": 240.0}}


def add_workloads(c: Cluster) -> None:
    """'slow', 'quick' and 'tree' in the agent's configuration; their pids in tmp/pids."""
    pids = c.tmp / "pids"
    pids.mkdir()
    slow = ["sh", "-c", f"echo $$ > {pids}/{{threads}}; test {{threads}} -lt 2 && "
                        "echo '{\"time_s\": 0.01}' && exit 0; exec sleep 300"]
    # a script whose own child hangs: the grandchild writes its pid
    tree = ["sh", "-c", f"sleep 300 & echo $! > {pids}/tree; wait"]
    c.agent_toml.write_text(c.agent_toml.read_text() + "".join(
        f"[[workloads]]\nname = \"{name}\"\ncommand = {json.dumps(cmd)}\n"
        for name, cmd in (("slow", slow), ("quick", ["true"]), ("tree", tree))))


def board(tmp_path, **daemon) -> Cluster:
    """The daemon and agent (started) of the virtual rpi4 with 'slow' and 'quick'."""
    c = Cluster(tmp_path, **OPTIONS, extra_daemon={"auto_recommend": False, **daemon})
    add_workloads(c)
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), 30, "the agent's hello")
    except BaseException:
        c.stop()
        raise
    return c


def sweep(c, workload: str) -> str:
    p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                workload, "--json")
    assert p.returncode == 0, p.stderr
    (job,) = json.loads(p.stdout)["jobs"]
    return job["job_id"]


def job_of(st: dict, job_id: str) -> dict:
    return next(j for j in st["jobs"] if j["job_id"] == job_id)


def gone(pid: int) -> bool:
    """Whether neither the process nor anything of its process group is left."""
    for probe in (os.kill, os.killpg):
        try:
            probe(pid, 0)
            return False
        except ProcessLookupError:
            pass
    return True


def test_cancel_a_running_job_kills_its_process_keeps_its_runs_and_stays_cancelled(tmp_path):
    c = board(tmp_path)
    waiting = None
    try:
        waiting = subprocess.Popen([sys.executable, "-m", "opptune.daemon.cli", "sweep",
                                    "--daemon", c.endpoint, "--agent", "test-agent",
                                    "--workload", "slow", "--wait", "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        st = c.wait_for(lambda s: any(j["received"] >= 1 for j in s["jobs"]), 60,
                        "the first run of the slow job")
        (slow,) = [j["job_id"] for j in st["jobs"]]
        quick = sweep(c, "quick")  # waits on the agent behind the slow job
        pidfile = tmp_path / "pids" / "2"
        pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(),
                             "the hanging run's process", 60, c.logs))
        assert not gone(pid)

        p = opptune("cancel", slow, "--daemon", c.endpoint)
        assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
        assert p.stdout.splitlines() == [
            f"opptune cancel: job {slow} (slow on test-agent) cancelled (running, 1/4 runs): "
            "test-agent stops it now; the runs it measured are kept, and those under way are "
            "stored as they arrive"]
        wait_until(lambda: gone(pid), "the cancelled run's process to be gone", 30, c.logs)

        st = c.wait_for(lambda s: job_of(s, slow)["received"] == 4
                        and job_of(s, quick)["state"] == "done", 60,
                        "the agent's end of the cancelled job and the next job")
        j = job_of(st, slow)
        assert j["state"] == "cancelled"
        assert j["not_run"] == 3  # of the 4 runs stored, one was measured
        assert j["reason"].startswith("cancelled by the user at ")
        assert j["stopped"]["cancelled"] is True
        # the runs table said '3 failed' of the runs the jobs table says '3 not run'
        (counts,) = [r for r in st["runs"] if r["workload"] == "slow"]
        assert (counts["count"], counts["failed"], counts["not_run"]) == (1, 3, 3)
        out = opptune("status", "--daemon", c.endpoint, "--agent", "test-agent")
        assert out.returncode == 0, out.stderr
        (row,) = [ln for ln in out.stdout.splitlines() if "│ slow " in ln and "(3 not run)" in ln]
        # the run measured before is stored; the three others are recorded as not run
        rows = c.rows("SELECT seq, ok FROM runs WHERE job_id=? ORDER BY seq", slow)
        assert rows == [(0, 1), (1, 0), (2, 0), (3, 0)]
        store = open_store(str(c.db))
        try:
            last = store.job_last_run(slow)
        finally:
            store.close()
        assert last["error"] == "not run: the job was cancelled by the daemon before run 2 of 4"
        assert last["extra"]["stopped"] == {"cancelled": True, "runs_not_run": 3, "points": 4,
                                            "points_not_run": 3}
        # the agent's end seen: the cancel is not sent again
        wait_until(lambda: "its agent has ended it" in (tmp_path / "daemon.log").read_text(),
                   "the daemon to see the agent's end", 30, c.logs)

        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 4, out + err
        assert [(j["state"], j["received"], j["not_run"]) for j in json.loads(out)] == \
            [("cancelled", 4, 3)]
        assert (f"opptune sweep: job {slow} (slow on rpi4 (virtual)) cancelled: 1 of 4 runs "
                "measured, 3 not run (cancelled); cancelled by the user at ") in err, err
        assert err.strip().splitlines()[-1] == (
            "opptune sweep: exit 4: 1 of 1 job cancelled (opptune cancel, tune --stop); the "
            "runs measured before are kept")

        # cancelled again: said in one line, exit 0
        p = opptune("cancel", slow, "--daemon", c.endpoint)
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.startswith(f"opptune cancel: job {slow} (slow on test-agent) had "
                                   "already ended: cancelled: 1 of 4 runs measured, 3 not run "
                                   "(cancelled); cancelled by the user at "), p.stdout

        # restarts: neither the daemon nor the agent runs it again
        mark = len((tmp_path / "agent.log").read_text())
        c.stop()
        c.start_daemon()
        c.start_agent()
        st = c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), 30, "the agent again")
        assert job_of(st, slow)["state"] == "cancelled"
        quick2 = sweep(c, "quick")  # a job after the hello: the agent has resumed what it had
        c.wait_for(lambda s: job_of(s, quick2)["state"] == "done", 60, "a job after restarts")
        assert job_of(c.status(), slow)["state"] == "cancelled"
        assert f"resending unfinished job {slow}" not in (tmp_path / "daemon.log").read_text()
        assert slow not in (tmp_path / "agent.log").read_text()[mark:]
        assert c.rows("SELECT COUNT(*) FROM runs WHERE job_id=?", slow) == [(4,)]
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
        c.stop()


def test_cancel_queued_jobs_in_the_daemon_and_on_the_agent_and_an_unknown_id(tmp_path):
    # one job out with the agent at a time: the third waits in the daemon
    c = board(tmp_path, max_outstanding_jobs=2)
    try:
        slow = sweep(c, "slow")
        on_agent = sweep(c, "quick")
        in_daemon = sweep(c, "quick")
        wait_until(lambda: (tmp_path / "pids" / "2").exists(), "the slow job's hanging run",
                   60, c.logs)
        st = c.wait_for(lambda s: job_of(s, on_agent)["state"] == "sent"
                        and job_of(s, in_daemon)["state"] == "queued", 30, "the queues")

        p = opptune("cancel", in_daemon, "--daemon", c.endpoint, "--json")
        assert p.returncode == 0, p.stderr
        (j,) = json.loads(p.stdout)["jobs"]
        assert (j["job_id"], j["was"], j["state"], j["cancelled"], j["told"]) == \
            (in_daemon, "queued", "cancelled", True, None)

        p = opptune("cancel", on_agent, "--daemon", c.endpoint)
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith(f"opptune cancel: job {on_agent} (quick on test-agent) "
                                   "cancelled (sent, 0/4 runs): test-agent stops it now")

        # every unfinished job of the agent: the slow one
        p = opptune("cancel", "--agent", "test-agent", "--daemon", c.endpoint, "--json")
        assert p.returncode == 0, p.stderr
        assert [j["job_id"] for j in json.loads(p.stdout)["jobs"]] == [slow]
        st = c.wait_for(lambda s: job_of(s, slow)["received"] == 4
                        and job_of(s, on_agent)["received"] == 4, 60, "the agent's ends")
        assert [job_of(st, j)["state"] for j in (slow, on_agent, in_daemon)] == \
            ["cancelled"] * 3
        # the job queued on the agent never ran: its runs are all recorded as not run
        assert c.rows("SELECT COUNT(*) FROM runs WHERE job_id=? AND ok=1", on_agent) == [(0,)]
        assert c.rows("SELECT COUNT(*) FROM runs WHERE job_id=?", in_daemon) == [(0,)]
        p = opptune("cancel", "--agent", "test-agent", "--daemon", c.endpoint)
        assert (p.returncode, p.stdout) == (0, "opptune cancel: agent test-agent has no "
                                               "unfinished job: nothing to cancel\n")

        # an unknown id: one line, exit 1; bad input: exit 2
        p = opptune("cancel", "job-nope", "--daemon", c.endpoint)
        assert p.returncode == 1 and p.stdout == "", p.stdout + p.stderr
        assert p.stderr.splitlines() == [
            "opptune cancel: daemon refused the query: no job job-nope in this daemon's "
            "store; 'opptune status' lists the jobs"]
        p = opptune("cancel", "--daemon", c.endpoint)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    finally:
        c.stop()


def dead(pid: int) -> bool:
    """Whether the process has ended (a zombie not yet reaped by init counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_killed_agent_takes_its_running_workload_with_it(tmp_path):
    """An agent killed with SIGKILL (the OOM killer, kill -9) left its workload's process
    running: the restarted agent resumed the job and started a fresh run beside the orphan,
    which skewed every measurement on the board until it ended (cancel never stopped it).
    The child now dies with the agent (parent-death signal)."""
    c = board(tmp_path)
    try:
        sweep(c, "slow")
        pidfile = tmp_path / "pids" / "2"
        pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(),
                             "the hanging run's process", 60, c.logs))
        assert not dead(pid)
        c.kill("agent")
        wait_until(lambda: dead(pid), "the run's process to die with the agent", 30, c.logs)
    finally:
        c.stop()


def test_a_restarted_agent_kills_what_the_killed_agents_run_left(tmp_path):
    """The workload's own children (a script's commands) do not get the parent-death signal:
    the agent started again on the state directory kills every process of the run left under
    way, says so in its log, and goes on with the job."""
    c = board(tmp_path)
    try:
        sweep(c, "tree")
        pidfile = tmp_path / "pids" / "tree"
        pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(),
                             "the script's child", 60, c.logs))
        c.kill("agent")
        assert not dead(pid)  # the script died with the agent, its child did not
        pidfile.unlink()
        c.start_agent()
        wait_until(lambda: dead(pid), "the restarted agent to kill the leftover", 60, c.logs)
        # the agent logs the kill once kill_leftovers returned, a moment after the pid died
        said = (f"killed 1 process(es) left running by the run a killed agent did not finish: "
                f"pid {pid}")
        wait_until(lambda: said in (tmp_path / "agent.log").read_text(), "the kill logged", 60,
                   c.logs)
        # the job resumed: its run started again, a new child
        again = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(),
                               "the resumed run's child", 60, c.logs))
        assert again != pid and not dead(again)
    finally:
        c.stop()


def hanging_run(c: Cluster) -> int:
    """The pid of the slow job's run that hangs (its second point, 2 threads)."""
    pidfile = c.tmp / "pids" / "2"
    return int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(),
                          "the hanging run's process", 60, c.logs))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_cancel_through_another_daemon_of_the_fleet_stops_the_job_at_once(
        tmp_path, request, backend):
    """Two daemon processes on one store, the agent connected to daemon 0; the cancel goes to
    daemon 1, which cannot reach the agent. Daemon 0 reads it from the store at its next
    tick and tells the agent: the run is killed within seconds, not at the agent's next
    hello (before, a job of hours ran on to its end)."""
    from test_fleet import Fleet
    url = (str(tmp_path / "fleet.db") if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    # a loaded machine may hold a daemon back for seconds: the agent's failover (3 heartbeats
    # unanswered) and the daemons' agent_timeout_s wait longer than the defaults of the tests
    f = Fleet(tmp_path, url, **{**OPTIONS, "extra_agent": {
        **OPTIONS["extra_agent"], "heartbeat_s": 2.0}}, extra_daemon={
            "auto_recommend": False, "agent_timeout_s": 10.0})
    add_workloads(f)
    f.start_daemons()
    f.start_agent()
    try:
        # the agent's hello goes to daemon 0, or to daemon 1 where 0 was slow to answer
        holder = int(wait_until(lambda: next((str(i) for i in (0, 1) if any(
            a["alive"] for a in (query(f.endpoints[i], "status") or {}).get("agents", []))),
            None), "the agent's hello", 60, f.logs))
        f.use(holder)
        slow = sweep(f, "slow")
        pid = hanging_run(f)
        f.use(1 - holder)
        f.wait_for(lambda s: any(a["via"] == f.endpoints[holder] for a in s["agents"]), 30,
                   "the other daemon seeing the agent online through the holder")
        p = opptune("cancel", slow, "--daemon", f.endpoints[1 - holder])
        assert p.returncode == 0 and p.stderr == "", p.stdout + p.stderr
        assert p.stdout.splitlines() == [
            f"opptune cancel: job {slow} (slow on test-agent) cancelled (running, 1/4 runs): "
            f"test-agent is connected to the daemon at {f.endpoints[holder]}, which tells it "
            "to stop it within a few seconds; the runs it measured are kept"]
        # the agent never said hello again: only the holder's tick can have told it
        wait_until(lambda: gone(pid), "the cancelled run's process to be gone", 30, f.logs)
        assert (f"job {slow} was cancelled through another daemon"
                in (tmp_path / f"daemon{holder}.log").read_text())
        said = (tmp_path / "agent.log").read_text()
        assert "saying hello" not in said and "failing over" not in said, said
        st = f.wait_for(lambda s: job_of(s, slow)["received"] == 4, 60,
                        "the agent's end of the cancelled job")
        assert job_of(st, slow)["state"] == "cancelled"
        assert f.rows("SELECT seq, ok FROM runs WHERE job_id=? ORDER BY seq", slow) == \
            [(0, 1), (1, 0), (2, 0), (3, 0)]
        wait_until(lambda: not job_of(f.status(), slow)["stopped"]["held"],
                   "the agent's end seen (the cancel is not sent again)", 30, f.logs)
    finally:
        codes = f.stop()
    assert codes == {"agent": 0, "daemon": 0}, f.logs()


def test_a_cancel_while_the_agent_is_away_reaches_it_at_its_hello_and_an_ended_job_stays(
        tmp_path):
    """The agent is stopped with the slow job under way: the cancel is kept for it ('told at
    its next hello'); started again, it resumes the job and is told at its hello: the job
    ends cancelled with its measured run and the rest not run, which status and --json say.
    A job that had ended is said so, exit 0; --json gives JSON alone."""
    c = board(tmp_path)
    try:
        quick = sweep(c, "quick")
        c.wait_for(lambda s: job_of(s, quick)["state"] == "done", 60, "the quick job")
        slow = sweep(c, "slow")
        hanging_run(c)
        c.agent.send_signal(signal.SIGTERM)
        assert c.agent.wait(30) == 0, c.logs()
        c.agent = None  # stopped on purpose: the status waits below do not take it for a death
        c.wait_for(lambda s: not any(a["alive"] for a in s["agents"]), 30, "the agent gone")
        p = opptune("cancel", slow, "--daemon", c.endpoint)
        assert (p.returncode, p.stderr) == (0, ""), p.stdout + p.stderr
        assert p.stdout.splitlines() == [
            f"opptune cancel: job {slow} (slow on test-agent) cancelled (running, 1/4 runs): "
            "test-agent is not connected to this daemon: it is told at its next hello, and the "
            "job never runs again; the runs it measured are kept"]
        (tmp_path / "pids" / "2").unlink()
        c.start_agent()
        st = c.wait_for(lambda s: job_of(s, slow)["received"] == 4
                        and not job_of(s, slow)["stopped"]["held"], 60,
                        "the agent's end of the job cancelled while it was away")
        j = job_of(st, slow)
        assert (j["state"], j["not_run"]) == ("cancelled", 3)
        assert c.rows("SELECT seq, ok FROM runs WHERE job_id=? ORDER BY seq", slow) == \
            [(0, 1), (1, 0), (2, 0), (3, 0)]
        out = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "status", "--daemon",
                              c.endpoint], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "300"})  # a row on one line
        row = next(ln for ln in out.stdout.splitlines() if slow in ln and "\u2502" in ln)
        assert "1/4 measured, 3 not run" in row, out.stdout

        # a job done: said in one line, exit 0; with --json, JSON alone on stdout
        p = opptune("cancel", quick, "--daemon", c.endpoint)
        assert (p.returncode, p.stderr) == (0, ""), p.stdout + p.stderr
        assert p.stdout == (f"opptune cancel: job {quick} (quick on test-agent) had already "
                            "ended: done: 4/4 runs\n")
        p = opptune("cancel", quick, "--daemon", c.endpoint, "--json")
        assert (p.returncode, p.stderr) == (0, ""), p.stdout + p.stderr
        (j,) = json.loads(p.stdout)["jobs"]
        assert (j["state"], j["cancelled"], j["told"], j["not_run"]) == \
            ("done", False, None, 0)
        assert c.rows("SELECT state FROM jobs WHERE job_id=?", quick) == [("done",)]
    finally:
        c.stop()
