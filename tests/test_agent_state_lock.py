"""One agent per state directory. A second opptune-agent started on the directory of a running
one (found walking a board: the first started from a shell that lost its pid) logged "cpufreq
restored from .../cpufreq-state.json (left by pid N)" while N still ran, putting the originals
back under the first agent's sweep, shared its outbox, and was never answered by the daemon
(same agent id): it is now refused at start, naming the other agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from opptune.agent.cli import main as agent_main
from opptune.agent.state_lock import AgentIdBusy, StateDirBusy, hold, hold_id
from procs import AGENT_RUN_AS, RUN_AS_OPTION


def test_a_held_state_dir_is_refused_with_the_holders_pid(tmp_path):
    first = hold(str(tmp_path))
    try:
        with pytest.raises(StateDirBusy) as info:
            hold(str(tmp_path))
        assert info.value.pid == os.getpid()
    finally:
        first.close()
    hold(str(tmp_path)).close()  # let go: the next one gets it


def _config(tmp_path, state):
    path = tmp_path / "agent.toml"
    path.write_text(f"daemon = 'tcp://127.0.0.1:9'\nstate_dir = '{state}'\n"
                    "virtual_board = 'rpi4'\nbench_kernels = ['pi_integrate']\n"
                    + "".join(f"{k} = '{v}'\n" for k, v in AGENT_RUN_AS.items()))
    return path


def _connecting(agent: subprocess.Popen) -> None:
    """Return once ``agent`` connects (its own start-up restore and locks are behind it)."""
    said: list[str] = []
    while not said or "connecting to" not in said[-1]:
        said.append(agent.stderr.readline())
        assert said[-1], "".join(said)  # it exited


def test_a_second_agent_on_a_running_agents_state_dir_exits_naming_it(tmp_path):
    state = tmp_path / "state"
    config = _config(tmp_path, state)
    first = subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config", str(config)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _connecting(first)
        # what the first agent saved before changing a knob: the second must not restore it
        saved = state / "cpufreq-state.json"
        saved.write_text(json.dumps({"pid": first.pid, "policies": {}}))
        second = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(config)],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        (line,) = [ln for ln in second.stderr.splitlines() if ln.startswith("opptune-agent:")]
        assert line == (f"opptune-agent: the state directory {state} ({config}: key "
                        f"'state_dir') is in use by another agent (pid {first.pid}): its outbox "
                        "and saved cpufreq settings are that agent's; stop it first, or give "
                        "this agent a state directory of its own")
        assert saved.exists() and first.poll() is None
    finally:
        first.terminate()
        first.wait(timeout=30)
    # the lock went with the process: the directory is free again
    hold(str(state)).close()


def test_the_option_is_named_when_the_state_dir_came_from_it(tmp_path, capsys):
    state = tmp_path / "state"
    holder = hold(str(state))
    try:
        assert agent_main(["--daemon", "tcp://127.0.0.1:9", "--state-dir", str(state),
                           "--virtual-board", "rpi4", *RUN_AS_OPTION]) == 1
    finally:
        holder.close()
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("opptune-agent:")]
    assert line.startswith(f"opptune-agent: the state directory {state} (--state-dir) is in "
                           f"use by another agent (pid {os.getpid()})")
    assert not (state / "outbox.db").exists()


def test_an_agent_id_is_held_per_daemon_with_the_holders_pid():
    first = hold_id("board-a", "tcp://127.0.0.1:9")
    try:
        with pytest.raises(AgentIdBusy) as info:
            hold_id("board-a", "tcp://127.0.0.1:9")
        assert info.value.pid == os.getpid()
        # another id, or the same id of another daemon's store, is another board
        hold_id("board-b", "tcp://127.0.0.1:9").close()
        hold_id("board-a", "tcp://127.0.0.1:10").close()
    finally:
        first.close()
    hold_id("board-a", "tcp://127.0.0.1:9").close()  # let go: the next one gets it


def test_a_second_agent_of_one_id_on_this_machine_exits_naming_the_first(tmp_path):
    """Found walking this machine: a second agent of the running one's id, on a state
    directory of its own, said hello; the daemon took it for the first's restart and sent it
    the job the first was running, and both ran it at once on the same cpus. It is refused at
    start now, naming the first. A virtual board is not this machine: not held."""
    daemon = f"tcp://127.0.0.1:{9 + os.getpid() % 1000}"
    configs = []
    for name in ("one", "two"):
        path = tmp_path / f"{name}.toml"
        path.write_text(f"daemon = '{daemon}'\nstate_dir = '{tmp_path / name}'\n"
                        f"agent_id = 'walk-{os.getpid()}'\nbench_kernels = ['pi_integrate']\n"
                        + "".join(f"{k} = '{v}'\n" for k, v in AGENT_RUN_AS.items()))
        configs.append(path)
    first = subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config",
                              str(configs[0])],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _connecting(first)
        second = subprocess.run([sys.executable, "-m", "opptune.agent", "--config",
                                 str(configs[1])], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, second.stderr
        (line,) = [ln for ln in second.stderr.splitlines() if ln.startswith("opptune-agent:")]
        assert line == (f"opptune-agent: an agent with agent_id 'walk-{os.getpid()}' for the "
                        f"daemon at {daemon} already runs on this machine (pid {first.pid}): "
                        "two agents of one id are one board twice and would run the same jobs "
                        "on the same cpus at once; stop that one first, or give this one an "
                        "agent_id of its own")
        assert "Traceback" not in second.stderr
        # its state directory is let go: an agent of another id starts on it
        assert not (tmp_path / "two" / "agent.lock").exists() or \
            hold(str(tmp_path / "two")).close() is None
    finally:
        first.terminate()
        first.communicate(timeout=60)
