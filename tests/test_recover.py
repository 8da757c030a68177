"""A store restored from an older backup under a sweep: the agents' results of the job it never
issued are refused (unknown_job) and kept in their outboxes' rejected tables; `opptune recover`
stores every one of them, once, under a job of state ``recovered`` (daemon/recovery.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from procs import Cluster, _agent_snapshot, delivery, received, wait_until

from opptune.daemon.client import query

RUNS = 200  # one job of a no-op command: the restore comes in the middle of it


@pytest.mark.integration
def test_results_of_jobs_a_restored_store_never_issued_are_recovered(tmp_path):
    c = Cluster(tmp_path, kernels=(), reps=RUNS, max_cores=1, auto_sweep=False)
    with open(c.agent_toml, "a") as fh:
        fh.write('[[workloads]]\nname = "noop"\ncommand = ["true"]\n')
    state, db, backup = tmp_path / "agent-state", str(c.db), tmp_path / "backup.db"
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), what="the agent's hello")
        src, dst = sqlite3.connect(db), sqlite3.connect(backup)
        src.backup(dst)  # the backup knows the agent, not the job issued after it
        src.close()
        dst.close()
        query(c.endpoint, "sweep", {"agent": "test-agent", "workloads": ["noop"]},
              timeout_s=10)
        c.wait_for(lambda s: received(s) >= 20, timeout=60, what="the sweep under way")
        c.daemon.terminate()
        assert c.daemon.wait(30) == 0, c.logs()
        (job_id,) = [j for (j,) in c.rows("SELECT job_id FROM jobs")]
        # what the lost store acknowledged is gone from the board: the rest is in the outbox
        at_stop = delivery(state, db)
        gone = at_stop["produced"] - at_stop["pending"]
        assert gone >= 20 and at_stop["rejected"] == 0, at_stop
        for suffix in ("-wal", "-shm"):
            Path(db + suffix).unlink(missing_ok=True)
        os.replace(backup, db)
        c.start_daemon()

        def all_refused():
            jobs, outbox, rejected = _agent_snapshot(state)
            done = jobs.get(job_id) == RUNS and not outbox
            return rejected if done else None
        refused = wait_until(all_refused, "the job's end, its results refused", 120, c.logs)
        assert refused == RUNS - gone, (refused, gone)
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == 0
        # an agent started again says what it keeps and what to do
        c.agent.terminate()
        assert c.agent.wait(30) == 0, c.logs()
        c.start_agent()
        said = wait_until(lambda: [line for line in (tmp_path / "agent.log").read_text()
                                   .splitlines() if "the daemon refused for good" in line],
                          "the agent's line on its kept results", 60, c.logs)
        assert (f"the outbox keeps {RUNS - gone} results the daemon refused for good "
                f"({RUNS - gone} as unknown_job), not sent again; ") in said[-1], said
        assert "'opptune recover --agent test-agent'" in said[-1], said
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), what="the agent back")

        cli = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "recover", "--agent",
                              "test-agent", "--daemon", c.endpoint], capture_output=True,
                             text=True, timeout=60)
        assert cli.returncode == 0 and "asked for them now" in cli.stdout, cli
        assert cli.stderr == "", cli.stderr

        def recovered():
            jobs, outbox, rejected = _agent_snapshot(state)
            stored = c.rows("SELECT COUNT(*) FROM runs WHERE job_id = ?", job_id)[0][0]
            return stored if not outbox and not rejected and stored >= RUNS - gone else None
        assert wait_until(recovered, "the refused results stored", 120, c.logs) == RUNS - gone
        assert c.rows("SELECT COUNT(DISTINCT seq), COUNT(*) FROM runs") == [
            (RUNS - gone, RUNS - gone)]
        assert c.rows("SELECT agent, workload, state, expected FROM jobs") == [
            ("test-agent", "noop", "recovered", RUNS)]
        again = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "recover",
                                "--daemon", c.endpoint, "--json"], capture_output=True,
                               text=True, timeout=60)
        assert again.returncode == 0, again
        (row,) = json.loads(again.stdout)["agents"]
        assert (row["agent"], row["jobs"], row["runs"]) == ("test-agent", 1, RUNS - gone)
        assert "sent again" in (tmp_path / "agent.log").read_text()
    finally:
        c.stop()


@pytest.mark.integration
def test_results_too_large_for_the_daemon_come_back_once_its_limit_is_raised(tmp_path):
    """Results over the daemon's max_message_bytes are kept by the agent (too_large, never
    sent); once the operator raises the limit, `opptune recover --also too_large` brings them
    in: every one stored once, the job done."""
    c = Cluster(tmp_path, kernels=(), reps=3, max_cores=1, auto_sweep=False,
                extra_daemon={"max_message_bytes": 16384})  # a hello takes about 5 KB
    big = "print('{\"time_s\": 0.01, \"check_value\": \"' + 'x' * 20000 + '\"}')"
    with open(c.agent_toml, "a") as fh:
        fh.write(f'[[workloads]]\nname = "big"\ncommand = ["{sys.executable}", "-c", '
                 f'{json.dumps(big)}]\n')
    state = tmp_path / "agent-state"
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), what="the agent's hello")
        query(c.endpoint, "sweep", {"agent": "test-agent", "workloads": ["big"]}, timeout_s=10)

        def kept():
            return _agent_snapshot(state)[2] == 3
        wait_until(kept, "the three results kept as too large", 120, c.logs)
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == 0
        c.daemon.terminate()
        assert c.daemon.wait(30) == 0, c.logs()
        text = c.daemon_toml.read_text()
        c.daemon_toml.write_text(text.replace("max_message_bytes = 16384",
                                              "max_message_bytes = 1048576"))
        c.start_daemon()
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), what="the agent back")
        cli = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "recover",
                              "--agent", "test-agent", "--also", "too_large", "--daemon",
                              c.endpoint], capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0 and "(and those refused as too_large are sent again)" in \
            cli.stdout, cli
        c.wait_for(lambda s: any(j["state"] == "done" for j in s["jobs"]), timeout=120,
                   what="the job done with its three runs")
        assert c.rows("SELECT COUNT(DISTINCT seq), COUNT(*) FROM runs") == [(3, 3)]
        assert _agent_snapshot(state)[1:] == ([], 0)
    finally:
        c.stop()
