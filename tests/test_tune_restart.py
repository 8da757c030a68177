"""An ``opptune tune`` session survives kill -9 of the daemon: real daemon and agent processes on
the odroid-xu4 virtual board, the installed ``opptune tune`` following the session across the
restart; the restarted daemon (same database) resumes the session from its store and ends it
with a recommendation, measuring no configuration twice."""

from __future__ import annotations

import json
import subprocess

import pytest

from opptune.daemon.client import DaemonUnreachable, query
from procs import wait_until
from test_goal_e2e import OPPTUNE, start

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
