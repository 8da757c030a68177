"""cpufreq and cpu sets come back after a kill -9 of the agent: the records it saved before each
change are restored at its next start, which says so in its log.

Real processes killed with SIGKILL (no handler, no atexit) on the fake sysfs trees; every wait
is on observable state (a line on a pipe, a file, the daemon's status)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from opptune.agent.knobs.state import CPUSET_FILENAME, STATE_FILENAME, restore_at_start
from opptune.agent.virtual_board import make_tree
from procs import all_jobs_complete, received
from fake_trees import cgroup_tree
from test_virtual_e2e import cpufreq_state, start

PY = sys.executable

CHILD = textwrap.dedent("""
    import os, sys, subprocess
    from opptune.agent.knobs.cpufreq import CpuFreq
    from opptune.agent.knobs.state import CPUSET_FILENAME, CpusetRecord
    from opptune.agent.sysfs import SysFS
    from opptune.agent.targets import Targets
    from opptune.agent.virtual_board import attach
    root, state_dir, victim = sys.argv[1], sys.argv[2], int(sys.argv[3])
    attach(root)
    cf = CpuFreq(root, state_dir=state_dir)
    cf.set({"policy4": 800000, "policy0": 600000})
    rec = CpusetRecord(os.path.join(state_dir, CPUSET_FILENAME), root)
    t = Targets(SysFS(root), systemd=False, record=rec)
    t.apply({"kind": "unit", "unit": "web"}, [0])
    t.apply({"kind": "pid", "pid": victim}, [0])
    print("ready", flush=True)
    sys.stdin.read()  # until killed
""")


def _wait_until(pred, what, timeout=60.0, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        for p in procs:
            assert p.poll() is None, f"process died ({p.returncode}) waiting for {what}"
        time.sleep(0.05)  # polling a file: the state we wait on has no event to block on
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="pinning needs two cpus")
def test_sigkilled_knob_owner_is_undone_from_its_records(tmp_path):
    root = make_tree("odroid-xu4", str(tmp_path / "board"))
    d = cgroup_tree(Path(root))
    state = tmp_path / "st"
    before = cpufreq_state(root)
    victim = subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    all_cpus = os.sched_getaffinity(victim.pid)
    child = subprocess.Popen([PY, "-c", CHILD, root, str(state), str(victim.pid)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["ready"]
        child.send_signal(signal.SIGKILL)
        assert child.wait(20) == -signal.SIGKILL
        # what the killed process changed is still changed, and recorded
        assert cpufreq_state(root)["policy4/scaling_governor"] == "userspace"
        assert (d / "cpuset.cpus").read_text().strip() == "0"
        assert os.sched_getaffinity(victim.pid) == {0}
        recorded = json.loads((state / CPUSET_FILENAME).read_text())["entries"]
        assert [e["kind"] for e in recorded] == ["cgroup", "affinity"]

        lines = restore_at_start(str(state), root)
        assert cpufreq_state(root) == before
        assert (d / "cpuset.cpus").read_text().strip() == "0-1"
        assert os.sched_getaffinity(victim.pid) == all_cpus
        assert not (state / STATE_FILENAME).exists() and not (state / CPUSET_FILENAME).exists()
        assert len(lines) == 2 and f"left by pid {child.pid}" in lines[0], lines
        assert "policy4 governor ondemand" in lines[0], lines
        assert "cpuset.cpus = 0-1" in lines[1] and f"thread {victim.pid}" in lines[1], lines
        assert restore_at_start(str(state), root) == []  # nothing left: says nothing
    finally:
        for p in (child, victim):
            p.kill()
            p.wait()


def test_a_thread_that_ended_is_not_restored(tmp_path):
    from opptune.agent.knobs.state import CpusetRecord, thread_start_time
    victim = subprocess.Popen([PY, "-c", "pass"])
    victim.wait()
    rec = CpusetRecord(str(tmp_path / CPUSET_FILENAME), str(tmp_path))
    # a tid that names no thread now (or another one: its start time differs)
    rec.save({"kind": "affinity", "tid": victim.pid, "cpus": [0], "start": -1})
    assert thread_start_time(os.getpid()) is not None
    lines = restore_at_start(str(tmp_path), str(tmp_path))
    assert lines and "nothing still confined" in lines[0]
    assert not (tmp_path / CPUSET_FILENAME).exists()


@pytest.mark.integration
def test_agent_killed_mid_sweep_restores_at_next_start(tmp_path):
    c, root = start(tmp_path, "odroid-xu4", {"max_cores": 2, "frequency_grid": "3"})
    before = cpufreq_state(root)
    record = tmp_path / "agent-state" / STATE_FILENAME
    c.start_daemon()
    c.start_agent()
    try:
        # mid-sweep: a result stored and the agent's cpufreq record written
        c.wait_for(lambda s: received(s) >= 1 and record.exists(), timeout=60,
                   what="a first result with cpufreq changed")
        c.kill("agent")
        saved = json.loads(record.read_text())["policies"]
        assert saved and cpufreq_state(root) != before  # the kill left the board pinned
        c.start_agent()
        log = tmp_path / "agent.log"
        _wait_until(lambda: "cpufreq restored from" in log.read_text(errors="replace"),
                    "the restore line in the agent's log", procs=(c.agent,))
        line = next(ln for ln in log.read_text().splitlines() if "cpufreq restored from" in ln)
        for pol in saved:
            assert f"{pol} governor {before[pol + '/scaling_governor']}" in line, line
        c.wait_for(lambda s: all_jobs_complete(s, 1), timeout=120, what="the sweep to finish")
    finally:
        codes = c.stop()
    assert codes["agent"] == 0, c.logs()
    # the restarted agent took the real originals (not the pinned state) as its own
    assert cpufreq_state(root) == before
    assert not record.exists()


def test_a_damaged_record_of_the_originals_says_what_to_do_by_hand(tmp_path):
    """A record that cannot be read (an SD card's damage) said only JSON's complaint
    ('restoring from .../cpufreq-state.json failed: Expecting property name ...'), and one
    holding JSON that is not an object ended the agent's start in a traceback. Each now says
    that the originals are lost, what to check and set back by hand, and to remove the file
    then; the file stays (only the user knows when the board is back)."""
    state = tmp_path / "state"
    state.mkdir()
    cpufreq = state / STATE_FILENAME
    cpufreq.write_text("{bad")
    p = subprocess.run([PY, "-m", "opptune.agent", "--virtual-board", "rpi4", "--state-dir",
                        str(state), "--restore"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"opptune-agent: nothing restored: {cpufreq} cannot be read (Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1)): the original cpufreq governor "
        "and limits it kept are lost, and the agent sets no frequency while the file is there; "
        "check that the board is at its own settings (cpupower frequency-info, cpupower "
        f"frequency-set) and set them back by hand where not, then remove {cpufreq}"]
    assert cpufreq.read_text() == "{bad"
    cpufreq.unlink()
    cpusets = state / CPUSET_FILENAME
    cpusets.write_text("[1, 2]")
    assert restore_at_start(str(state), str(tmp_path)) == [
        f"{cpusets} cannot be read (a JSON list, not an object): the original cpu sets (the "
        "affinity of confined processes, the AllowedCPUs of confined units) it kept are lost; "
        "check that the board is at its own settings (taskset -p, systemctl set-property) and "
        f"set them back by hand where not, then remove {cpusets}"]
    assert cpusets.read_text() == "[1, 2]"


def test_a_damaged_record_is_said_once_at_the_agents_start(tmp_path):
    """The agent's start logged a damaged cpufreq record twice: from its restore, then again
    as 'cpufreq knob unavailable: <the same text>'. Once now, with what to do."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    record = state / STATE_FILENAME
    record.write_text("{bad")
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        agent = subprocess.Popen(
            [PY, "-m", "opptune.agent", "--virtual-board", "rpi4", "--state-dir", str(state),
             "--daemon", "tcp://127.0.0.1:9", "--agent-id", "damaged"],
            stdout=subprocess.DEVNULL, stderr=log, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 60
            # past the restore and the knobs: the link starts after both
            while "connecting to" not in log_path.read_text():
                assert agent.poll() is None and time.monotonic() < deadline, \
                    log_path.read_text()
                time.sleep(0.05)
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
    text = log_path.read_text()
    assert text.count(f"{record} cannot be read") == 1, text
    assert f"set them back by hand where not, then remove {record}" in text
    assert "cpufreq knob unavailable" not in text, text
    assert record.read_text() == "{bad"
