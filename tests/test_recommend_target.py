"""``opptune recommend --pid`` on this machine (a real board to the agent): the command waits
for the agent's answer and prints it. It printed "pushed ... 'opptune status' shows its
verification" and exited 0 whatever the agent did, a refusal included (walking a board:
``--pid 999999``, a process that had exited)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from procs import Cluster

pytestmark = pytest.mark.integration

OPPTUNE = str(Path(sys.executable).parent / "opptune")


def opptune(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([OPPTUNE, *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env=env)


def test_recommend_pid_says_what_the_agent_did(tmp_path):
    c = Cluster(tmp_path, kernels=("pi_integrate",), max_cores=2, reps=2)
    target = subprocess.Popen(["sleep", "300"])
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: s["recommendations"], 120, "the sweep's recommendation")
        base = ["--daemon", c.endpoint, "--agent", "test-agent", "--workload", "pi_integrate"]
        p = opptune("recommend", *base, "--pid", str(target.pid), cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr + c.logs()
        text = " ".join(p.stdout.split())
        m = re.search(rf"(cfg-\w+) on test-agent: applied to pid {target.pid}; .* cpus busy "
                      r"over [\d.]+ s; 'opptune status' shows what it measured", text)
        assert m, text
        (rec,) = [r for r in c.status()["recommendations"] if r["config_id"] == m.group(1)]
        assert rec["state"] == "applied"
        assert os.sched_getaffinity(target.pid) == set(rec["cpus"])  # 1 or 2 cpus, by load

        p = opptune("recommend", *base, "--pid", str(gone.pid), "--json", cwd=tmp_path)
        assert p.returncode == 1, p.stdout + p.stderr
        applied = json.loads(p.stdout)["applied"]
        assert applied["state"] == "refused"
        assert applied["reason"].startswith(f"no process {gone.pid} on this machine")
    finally:
        target.kill()
        target.wait()
        c.stop()


def recommend_for_pid(c: Cluster, pid: int, cwd) -> str:
    """Once the sweep's recommendation is there, recommend pi_integrate for process ``pid``;
    its config_id."""
    c.wait_for(lambda s: s["recommendations"], 120, "the sweep's recommendation")
    p = opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                "pi_integrate", "--pid", str(pid), "--json", cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr + c.logs()
    return json.loads(p.stdout)["applied"]["config_id"]


def test_a_process_that_exits_is_no_longer_in_force_while_the_agent_runs(tmp_path):
    """Before, status said the process's configuration was in force until the agent's next
    start. The agent notices the exit at a heartbeat, drops it and says hello again."""
    c = Cluster(tmp_path, kernels=("pi_integrate",), max_cores=2, reps=2)
    target = subprocess.Popen(["sleep", "300"])
    c.start_daemon()
    c.start_agent()
    try:
        cid = recommend_for_pid(c, target.pid, tmp_path)
        st = c.status()
        assert [e["config_id"] for e in st["agents"][0]["standings"]] == [cid]
        target.kill()
        target.wait()
        why = f"process {target.pid} exited while the agent ran"
        st = c.wait_for(lambda s: s["agents"][0]["standings"] == [], 30,
                        "the process's configuration dropped")
        assert st["agents"][0]["standings_dropped"] == [f"{cid}: {why}"]
        (rec,) = [r for r in st["recommendations"] if r["config_id"] == cid]
        assert rec["error"].endswith(f"no longer in force: {why}; the board is at its "
                                     "original settings"), rec["error"]
        p = opptune("status", "--daemon", c.endpoint, cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"the applied configuration was dropped while the agent ran: {cid}: {why}; " \
               "the board is at its original settings" in " ".join(p.stdout.split()), p.stdout
        agent_log = (tmp_path / "agent.log").read_text()
        assert f"process {target.pid}) dropped: {why}; the board goes back to its original " \
               "settings" in agent_log, agent_log
    finally:
        target.kill()
        target.wait()
        c.stop()


def test_a_restarted_daemon_shows_what_stood_as_of_the_last_hello(tmp_path):
    """Before, a daemon restarted while the agent was away said only that it did not know
    what stood there; now what the store kept of the agent's last hello, as of when, not yet
    confirmed, until a hello confirms it."""
    c = Cluster(tmp_path, kernels=("pi_integrate",), max_cores=2, reps=2)
    target = subprocess.Popen(["sleep", "300"])
    c.start_daemon()
    c.start_agent()
    try:
        cid = recommend_for_pid(c, target.pid, tmp_path)
        codes = c.stop()  # the agent first: nothing tells the next daemon what stands
        assert codes == {"agent": 0, "daemon": 0}, c.logs()
        c.agent = None
        c.start_daemon()
        st = c.wait_for(lambda s: bool(s["agents"]), 30, "the restarted daemon")
        (row,) = st["agents"]
        assert row["standing_known"] is False and row["standings_as_of"] is not None
        assert [e["config_id"] for e in row["standings"]] == [cid]
        p = opptune("status", "--daemon", c.endpoint, cwd=tmp_path)
        text = " ".join(p.stdout.split())
        assert re.search(rf"applied configuration {cid} in force as of \d{{4}}-\d\d-\d\d "
                         rf"[\d:]+, not yet confirmed: pi_integrate on cpus [\d-]+ with no set "
                         rf"frequency, process {target.pid}", text), p.stdout
        c.start_agent()  # its hello confirms it
        st = c.wait_for(lambda s: s["agents"][0]["standing_known"], 60, "the agent's hello")
        assert st["agents"][0]["standings_as_of"] is None
        assert [e["config_id"] for e in st["agents"][0]["standings"]] == [cid]
    finally:
        target.kill()
        target.wait()
        c.stop()


def test_a_unit_that_stops_is_no_longer_in_force_while_the_agent_runs(tmp_path):
    """Before, status said the unit's configuration was in force until the agent's next
    start. The agent (reading a fake cgroup tree: no systemd there) notices at a heartbeat
    that the unit's cgroup is gone, and again at the next, drops it and says hello again."""
    from fake_trees import cgroup_tree
    root = tmp_path / "root"
    d = cgroup_tree(root, cpus="0-1")
    cpu = root / "sys/devices/system/cpu"  # cpus 0-1 (this machine's), no cpufreq
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-1\n")
    (d / "cgroup.procs").write_text(f"{os.getpid()}\n")
    c = Cluster(tmp_path, kernels=("pi_integrate",), max_cores=2, reps=2,
                extra_agent={"sysfs_root": str(root)})
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: s["recommendations"], 120, "the sweep's recommendation")
        p = opptune("recommend", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--unit", "web", "--json", cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr + c.logs()
        cid = json.loads(p.stdout)["applied"]["config_id"]
        st = c.status()
        assert [e["config_id"] for e in st["agents"][0]["standings"]] == [cid]
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
        why = "unit web.service stopped while the agent ran (its cgroup is gone)"
        st = c.wait_for(lambda s: s["agents"][0]["standings"] == [], 30,
                        "the unit's configuration dropped")
        assert st["agents"][0]["standings_dropped"] == [f"{cid}: {why}"]
        (rec,) = [r for r in st["recommendations"] if r["config_id"] == cid]
        assert rec["error"].endswith(f"no longer in force: {why}; the board is at its "
                                     "original settings"), rec["error"]
        agent_log = (tmp_path / "agent.log").read_text()
        assert f"unit web) dropped: {why}; the board goes back to its original settings" \
               in agent_log, agent_log
        assert "undoing" not in agent_log, agent_log
    finally:
        c.stop()
