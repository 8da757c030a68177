"""``opptune tune`` in a fleet, with real processes: two daemons on one PostgreSQL database,
the odroid-xu4 virtual board's agent listing both. The daemon that runs the session is
killed with SIGKILL mid-way: the agent fails over, the other daemon takes the session up from
the store and ends it, and the installed ``opptune tune`` follows it there, naming that
daemon. Where no other daemon answers, the command says so and exits 1."""

from __future__ import annotations

import json
import subprocess

import pytest

from fake_trees import make_tree
from procs import db_rows, wait_until
from test_fleet import Fleet
from test_goal_e2e import OPPTUNE

pytestmark = pytest.mark.integration


def fleet(tmp_path, pg_url) -> Fleet:
    f = Fleet(tmp_path, pg_url, auto_sweep=False, extra_agent={
        "virtual_board": "odroid-xu4", "sysfs_root": make_tree("odroid-xu4",
                                                               str(tmp_path / "board"))})
    f.start_daemons()
    f.start_agent()
    f.wait_for(lambda s: any(a["alive"] for a in s["agents"]), 30, "the agent's hello")
    return f


def tune(f: Fleet, err, *more: str) -> subprocess.Popen:
    """``opptune tune`` through daemon 0 (--timeout 1: it notices a silent daemon at once)."""
    with open(err, "w") as fh:
        return subprocess.Popen([OPPTUNE, "tune", "--daemon", f.endpoints[0], "--agent",
                                 "test-agent", "--workload", "pi_integrate", "--objective",
                                 "energy", "--cluster", "1", "--budget", "4", "--reps", "1",
                                 "--timeout", "1", "--json", "--no-progress", *more],
                                stdout=subprocess.PIPE, stderr=fh, text=True, cwd=f.tmp)


def stored(url: str) -> list[dict]:
    return [json.loads(b) for (b,) in db_rows(url, "SELECT body FROM tune_sessions")]


def measured(sessions: list[dict]) -> int:
    return sum(g["measured"] for s in sessions for g in s["segments"])


def test_tune_goes_on_through_the_other_daemon_when_its_own_is_killed(tmp_path, pg_url):
    f = fleet(tmp_path, pg_url)
    err = tmp_path / "tune.err"
    cli = None
    try:
        cli = tune(f, err)
        wait_until(lambda: measured(stored(pg_url)) >= 1, "one configuration measured and "
                   "saved by daemon 0", 120, f.logs)
        f.kill("daemon")
        (before,) = stored(pg_url)
        assert before["state"] == "measuring", before
        out, _ = cli.communicate(timeout=240)
        text = err.read_text()
        assert cli.returncode == 0, text + out + f.logs()
        assert "Traceback" not in text
        # it named the daemon it followed at once, not waiting out the killed one
        assert text.startswith(f"opptune tune: no answer from the daemon at {f.endpoints[0]} "
                               f"within 1 s; following {before['tune_id']} through the "
                               f"fleet's daemon at {f.endpoints[1]}"), text
        s = json.loads(out)  # stdout holds only JSON
        assert s["tune_id"] == before["tune_id"] and s["state"] == "done", s
        assert s["verification"]["state"] in ("verified", "off"), s
        # one session, gone on from its stored state: the steps before the kill first, the
        # budget spent once, each configuration measured once, every step's job done
        (row,) = stored(pg_url)
        assert row["state"] == "done"
        assert s["measured"] == 4 == len(s["steps"])
        done_before = before["steps"][:measured([before])]
        assert s["steps"][:len(done_before)] == done_before
        configs = [(*x["cpus"], x["freq_khz"]) for x in s["steps"]]
        assert len(set(configs)) == len(configs), s["steps"]
        jobs = dict(db_rows(pg_url, "SELECT job_id, state FROM jobs"))
        assert all(jobs.get(x["job_id"]) == "done" for x in s["steps"]), (jobs, s["steps"])
        runs = db_rows(pg_url, "SELECT job_id, COUNT(*), COUNT(DISTINCT seq) FROM runs "
                               "WHERE job_id IS NOT NULL GROUP BY job_id")
        assert all(n == distinct for _, n, distinct in runs), runs  # none stored twice
        assert f"failing over to {f.endpoints[1]}" in (tmp_path / "agent.log").read_text()
        assert "taken up from the store" in (tmp_path / "daemon1.log").read_text()
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
            cli.wait()
        f.stop()


def test_tune_says_so_when_no_other_daemon_of_the_fleet_answers(tmp_path, pg_url):
    f = fleet(tmp_path, pg_url)
    err = tmp_path / "tune.err"
    cli = None
    try:
        f.daemons[1].kill()  # the other daemon is gone before the session begins
        f.daemons[1].wait(10)
        f.wait_for(lambda s: [x["answering"] for x in s["daemon"]["fleet"]
                              if x["endpoint"] == f.endpoints[1]] == [False], 30,
                   "daemon 1 shown not answering")
        cli = tune(f, err, "--reconnect-s", "2")
        # two measured: the command has read the fleet from daemon 0's status meanwhile
        wait_until(lambda: measured(stored(pg_url)) >= 2, "two configurations measured", 120,
                   f.logs)
        f.kill("daemon")
        out, _ = cli.communicate(timeout=60)  # it waits --reconnect-s for a restart
        text = err.read_text()
        assert cli.returncode == 1, text + out
        assert out == "" and "Traceback" not in text
        assert f"; retrying for up to 2 s (a restarted daemon resumes the session; the " \
               f"fleet's other daemons are asked in turn: {f.endpoints[1]})" in text, text
        tune_id = stored(pg_url)[0]["tune_id"]
        last = text.strip().splitlines()[-1]
        assert last.startswith(f"opptune tune: no answer from the daemon at {f.endpoints[0]} "
                               f"nor from the other daemons of its fleet ({f.endpoints[1]}) "
                               "for "), text
        assert last.endswith(f"the session {tune_id} is kept in the store and goes on "
                             "through the daemon its agent connects to"), last
        assert "following" not in text  # never followed to the silent one
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
            cli.wait()
        f.stop()
