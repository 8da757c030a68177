"""A workload's program changed (drift.Drift.redefined): the runs of the old program that
reach the daemon after the hello that says so (they waited in the agent's outbox) count with
the old program's, not the new one's."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from opptune.daemon.drift import REDEFINED
from opptune.daemon.service import Daemon
from opptune.daemon.store import Group, open_store
from opptune.shared.config import DaemonConfig
from procs import Cluster, db_rows, produced_results, wait_until


BENCH = """\
import json, time
time.sleep(0.4)
print(json.dumps({{"time_s": 0.4, "version": {version}}}))
"""


def opptune(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                          capture_output=True, text=True, timeout=120)


def test_a_size_with_a_job_out_and_no_run_yet_gets_its_drift_too(tmp_path):
    """The hello that says a program changed records its drift for each size with runs, and
    now for each size the agent was sent a job of: that job's runs of the old program may
    all still be in the agent's outbox, with nothing stored to date the change against."""
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    try:
        d.store.save_job("a", {"job_id": "j", "workload": "w", "size": "large", "reps": 1,
                               "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 1.0)
        before = [{"name": "w", "kind": "command", "sizes": ["large"], "program": "p1"}]
        after = [{**before[0], "program": "p2"}]
        assert d.drift.redefined("a", "p", before, after, 5.0) == ["w"]
        assert [(e["workload"], e["input"], e["since"]) for e in d.store.drift_events()] == [
            ("w", "large", 5.0)]
    finally:
        d.close()


@pytest.mark.integration
def test_old_program_runs_replayed_from_the_outbox_stay_before_the_drift(tmp_path):
    """Real daemon and agent: a sweep of a command workload; the daemon is killed after its
    first runs are stored, the agent measures the rest into its outbox and stops. Its script
    is edited (a new program: agent/program_id.py), daemon and agent start again: the hello
    records the drift, then the outbox's runs of the old script arrive. They are stored (none
    lost) but before the drift: no run of the old script counts for the group. Before, they
    counted as the new script's, received after its drift."""
    script = tmp_path / "bench.py"
    script.write_text(BENCH.format(version=1))
    c = Cluster(tmp_path, kernels=(), auto_sweep=False, reps=4, max_cores=2,
                extra_daemon={"auto_recommend": False},
                extra_agent={"virtual_board": "rpi4"})
    c.agent_toml.write_text(c.agent_toml.read_text() + (
        f'[[workloads]]\nname = "w"\ncommand = {json.dumps([sys.executable, str(script)])}\n'
        'sizes = ["small"]\n'))
    state = tmp_path / "agent-state"
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="hello")
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "w", "--json")
        assert p.returncode == 0, p.stdout + p.stderr + c.logs()
        (job_id,) = [j["job_id"] for j in json.loads(p.stdout)["jobs"]]
        n = 2 * 4  # 2 core counts (max_cores), 4 repetitions
        wait_until(lambda: c.rows("SELECT COUNT(*) FROM runs")[0][0] >= 1, "a stored run",
                   timeout=60)
        c.kill("daemon")
        wait_until(lambda: produced_results(state) == n, "the agent's runs", timeout=60)
        c.agent.terminate()
        c.agent.wait(20)
        c.agent = None
        pending = db_rows(state / "outbox.db", "SELECT COUNT(*) FROM outbox")[0][0]
        stored_before = c.rows("SELECT COUNT(*) FROM runs")[0][0]
        assert pending >= 1 and stored_before < n, (pending, stored_before)

        script.write_text(BENCH.format(version=2))
        c.start_daemon()
        # the agent's hello answered before its outbox goes (as after any restart of the
        # agent alone): its results come in batches after the hello's
        c.wait_for(lambda s: True, timeout=30, what="the daemon")
        c.start_agent()
        c.wait_for(lambda s: any(j["job_id"] == job_id and j["received"] == n
                                 for j in s["jobs"]), timeout=60, what="the replay")
        platform = c.rows("SELECT platform FROM agents WHERE id='test-agent'")[0][0]
        store = open_store(str(c.db))
        try:
            events = [e for e in store.drift_events() if e["workload"] == "w"]
            assert [(e["input"], e["reason"]) for e in events] == [("small", REDEFINED)]
            since = events[0]["since"]
            received = [r for (r,) in c.rows("SELECT received FROM runs WHERE job_id=?",
                                             job_id)]
            assert len(received) == n  # every run stored, none twice
            assert all(r < since for r in received), (received, since)
            assert store.group_runs(Group(platform, "w", "small", "")) == []
        finally:
            store.close()
        assert "measured the program of w from before its change" in \
            (tmp_path / "daemon.log").read_text()
    finally:
        c.stop()
