"""Ctrl-C while opptune-agent starts (its imports, the board's discovery: under load, a second
or more) printed a KeyboardInterrupt traceback; it now says in one line what was interrupted
and that nothing was started, exit 130. A real agent process, held at a known point of its
start by a fake tree whose /proc/cpuinfo is a FIFO that the test writes nothing to."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from fake_trees import fake_tree
from procs import AGENT_RUN_AS, write_toml


def _writer_when_read(fifo: str, proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """A write end of ``fifo`` once ``proc`` opened it to read (ENXIO until then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the agent never read the board's cpuinfo"
        time.sleep(0.02)


def test_ctrl_c_while_the_agent_starts_is_one_line_not_a_traceback(tmp_path):
    root = fake_tree(tmp_path, "rpi4")
    fifo = os.path.join(root, "proc", "cpuinfo")
    os.unlink(fifo)
    os.mkfifo(fifo)
    config = write_toml(tmp_path / "agent.toml", {
        "daemon": "tcp://127.0.0.1:1", "state_dir": str(tmp_path / "state"),
        # an id of its own: one id is held per machine and daemon (agent/state_lock.py)
        "sysfs_root": root, "agent_id": f"starting-{uuid.uuid4().hex[:12]}", **AGENT_RUN_AS})
    agent = subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config", str(config)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writer = None
    try:
        writer = _writer_when_read(fifo, agent)  # it reads the board: blocked in its start
        agent.send_signal(signal.SIGINT)
        out, err = agent.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert agent.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == (
        "opptune-agent: interrupted while starting, before it connected to the daemon: no "
        "workload was started and no knob set; start it again"), err
    assert out == ""


def test_ctrl_c_while_the_daemon_starts_is_one_line_not_a_traceback(tmp_path):
    """The same for opptune-daemon (its imports take 0.3 s at load 8): held in its start by a
    FIFO as its configuration file."""
    fifo = str(tmp_path / "daemon.toml")
    os.mkfifo(fifo)
    daemon = subprocess.Popen([str(Path(sys.executable).parent / "opptune-daemon"), "--config",
                               fifo], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writer = None
    try:
        writer = _writer_when_read(fifo, daemon)  # it reads its configuration
        daemon.send_signal(signal.SIGINT)
        out, err = daemon.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert daemon.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines() == [
        "opptune-daemon: interrupted while starting, before it served: no agent or command was "
        "answered; start it again"], err
    assert out == "" and not list(tmp_path.glob("*.db*"))
