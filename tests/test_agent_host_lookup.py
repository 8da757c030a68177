"""An agent whose daemon's host name does not resolve. Walking a board with 'daemon =
"tcp://nosuchhost.invalid:5555"' (a misspelt name): ZeroMQ resolves it at each reconnect
without a word, and the agent's warning said to check that opptune-daemon runs there. It now
says the host does not resolve (agent/host_lookup.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from opptune.agent.host_lookup import host_of
from procs import AGENT_RUN_AS, wait_until, write_toml


@pytest.mark.parametrize("endpoint, host", [
    ("tcp://daemon.lan:5555", "daemon.lan"),
    ("tcp://eth0;daemon.lan:5555", "daemon.lan"),
    ("tcp://10.0.0.1:5555", None),
    ("tcp://[::1]:5555", None),
    ("tcp://*:5555", None),
    ("ipc:///run/opptune.sock", None)])
def test_only_a_host_name_is_looked_up(endpoint, host):
    assert host_of(endpoint) == host


def test_an_agent_whose_daemon_host_does_not_resolve_says_so(tmp_path):
    # .invalid never resolves (RFC 6761); with no resolver at all the lookup fails too
    config = write_toml(tmp_path / "agent.toml", {
        "daemon": "tcp://nosuchhost.invalid:5555", "curve": "off", "agent_id": "a1",
        "state_dir": str(tmp_path / "state"), "virtual_board": "rpi4", "heartbeat_s": 0.2,
        "bench_kernels": ["pi_integrate"], **AGENT_RUN_AS})
    log = tmp_path / "agent.log"
    with open(log, "wb") as fh:
        agent = subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config",
                                  str(config)], stdout=fh, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: "considering it gone" in log.read_text() or agent.poll() is not None,
                   "the agent's warning", 60, log.read_text)
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0, log.read_text()
    (line,) = [ln for ln in log.read_text().splitlines() if "considering it gone" in ln]
    assert ("no message from the daemon at tcp://nosuchhost.invalid:5555 for " in line
            and ": considering it gone; its host nosuchhost.invalid does not resolve (" in line
            and "): check the host in 'daemon' (--daemon), or this board's name resolution "
                "(/etc/hosts, DNS); the agent keeps trying and says hello once it answers"
            in line), line
