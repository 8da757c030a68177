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
from pathlib import Path

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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
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
                             stdin=subprocess.DEVNULL, preexec_fn=_hup(False))
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


def _hup(ignored: bool):
    """The agent's SIGHUP disposition as a terminal's child has it (default), or under nohup
    (ignored): set, not inherited from whoever runs the tests (a CI started with nohup, or in
    the background, hands its ignored signals down)."""
    return lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)


def _running_agent(tmp_path, ignore_hup: bool) -> tuple[subprocess.Popen, Path]:
    """A virtual board's agent, started (its link connecting), its output in a file."""
    tmp_path.mkdir()
    config = write_toml(tmp_path / "agent.toml", {
        "daemon": "tcp://127.0.0.1:9", "state_dir": str(tmp_path / "state"),
        "virtual_board": "rpi4", "bench_kernels": ["pi_integrate"], **AGENT_RUN_AS})
    log = tmp_path / "agent.log"
    with open(log, "wb") as fh:
        agent = subprocess.Popen(
            [sys.executable, "-m", "opptune.agent", "--config", str(config)], stdout=fh,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_hup(ignore_hup))
    wait_until(lambda: "connecting to tcp://" in log.read_text() or agent.poll() is not None,
               "the agent's start", 60, log.read_text)
    return agent, log


def test_sighup_stops_a_running_agent_as_sigterm_does_unless_nohup_ignores_it(tmp_path):
    """A closed terminal or ssh session (SIGHUP) killed a running agent outright: its board's
    clocks as a sweep left them, its state files as a kill leaves them. It stops cleanly now,
    exit 0; under nohup (SIGHUP ignored) it goes on, and SIGTERM then stops it."""
    agent, log = _running_agent(tmp_path / "hup", ignore_hup=False)
    try:
        agent.send_signal(signal.SIGHUP)
        assert agent.wait(30) == 0, log.read_text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert "SIGHUP received: stopping" in log.read_text() and \
        "agent stopped" in log.read_text(), log.read_text()
    agent, log = _running_agent(tmp_path / "nohup", ignore_hup=True)
    try:
        agent.send_signal(signal.SIGHUP)  # ignored; pending together, SIGHUP would go first
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0, log.read_text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    text = log.read_text()
    assert "SIGTERM received: stopping" in text and "SIGHUP" not in text, text
