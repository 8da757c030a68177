"""A stop asked for while the agent starts. Walking a board: Ctrl-C in the first second of
opptune-agent (it loads, checks its workloads, reads the board) printed a KeyboardInterrupt
traceback from wherever it was, and SIGTERM killed it outright (what the start had changed
left as it was), since the agent took those signals only once started. Now the console
script takes them first, and the agent stops where it can: one line, exit 0.

The agent is held in its start by a fifo in place of its board's /etc/machine-id, which it
reads once as it starts (agent/machine_id.py): the test's open of the fifo's other end
returns once the agent is there, the signal goes, then the id is written and the start goes
on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fake_trees import fake_tree
from opptune.agent.state_lock import hold
from procs import AGENT_RUN_AS, wait_until, write_toml


def _writer(fifo: str, agent: subprocess.Popen) -> int | None:
    """The fifo's write end once the agent opened it to read (None while it has not)."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader yet
        assert agent.poll() is None, "the agent ended before it read its machine id"
        return None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_agent_starts_stops_it_in_one_line(tmp_path, signum):
    root = fake_tree(tmp_path, "rpi4")
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    fifo = os.path.join(root, "etc", "machine-id")
    os.mkfifo(fifo)
    state = tmp_path / "state"
    config = write_toml(tmp_path / "agent.toml", {
        "daemon": "tcp://127.0.0.1:9", "state_dir": str(state), "virtual_board": "rpi4",
        "sysfs_root": root, "bench_kernels": ["pi_integrate"], **AGENT_RUN_AS})
    agent = subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config", str(config)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
    try:
        fd = wait_until(lambda: _writer(fifo, agent), "the agent reading its machine id", 60)
        agent.send_signal(signum)
        try:
            os.write(fd, b"0123456789abcdef0123456789abcdef\n")
        except BrokenPipeError:  # the agent died at the signal (the defect)
            pass
        finally:
            os.close(fd)
        out, err = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    name = signal.Signals(signum).name
    assert "Traceback" not in err, err
    assert agent.returncode == 0, err
    assert (f"{name} received while starting: stopping before connecting to the daemon; "
            "nothing was run") in err
    assert "connecting to tcp://" not in err  # it never connected
    hold(str(state)).close()  # the state directory is free for the next agent
