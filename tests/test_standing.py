"""A configuration a user applied outlives the agent: kept in its state directory, applied
again when the agent starts (after the originals are restored), dropped with the reason when
it cannot be (a process gone, no cpufreq).

The configuration is applied by the agent's real executor and worker on a virtual rpi4 (as in
tests/test_idle_clock.py); the restart is a real ``opptune-agent`` process on the same state
directory and tree (no daemon: the start-up does not wait for one). Pid targets use this
machine's /proc with the executor's parts in this process."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from opptune.agent.apply import Executor, Worker
from opptune.agent.outbox import Outbox
from opptune.agent.platform import discover
from opptune.agent.runner import Runner

from opptune.agent.sysfs import SysFS
from opptune.agent.targets import Targets
from opptune.agent.workloads import Workloads
from opptune.shared import protocol as P
from opptune.shared.config import AgentConfig, CommandWorkload
from procs import RUN_AS_OPTION, free_endpoint, wait_until
from test_idle_clock import config, pinned_at, work, worker_on
from test_virtual_e2e import cpufreq_state

PY = sys.executable
FILENAME = "standing.json"  # in the state directory


class AgentProc:
    """A real opptune-agent on ``state`` and the virtual rpi4 tree ``root``; no daemon."""

    def __init__(self, tmp: Path, state: Path, root: str):
        self.log = tmp / "agent.log"
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                [PY, "-m", "opptune.agent", "--daemon", free_endpoint(), "--agent-id", "a1",
                 "--state-dir", str(state), "--sysfs-root", root, "--virtual-board", "rpi4",
                 "--heartbeat", "0.5", *RUN_AS_OPTION], stdout=fh, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def started(self) -> None:
        """Wait until the agent is past its start-up (its line naming the platform)."""
        wait_until(lambda: "agent a1 on platform" in self.text() or self.proc.poll() is not None,
                   "the agent's start", 60, self.text)
        assert self.proc.poll() is None, self.text()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


def kept(path: Path) -> dict:
    """The one configuration kept in ``path`` (standing.json)."""
    (entry,) = json.loads(path.read_text())["entries"]
    return entry["config"]


def applied_before_restart(tmp_path, freq_khz=1_000_000) -> tuple[str, dict[str, str], Path]:
    """Apply a configuration at ``freq_khz`` on cpus 0,1 (as `recommend --apply` sends it),
    then stop that agent's parts: the board is back at its original (returned)."""
    with worker_on(tmp_path, "rpi4") as (ex, w, knob, root, _):
        before = cpufreq_state(root)
        work(w, config("c1", freq_khz))
        assert pinned_at(root, freq_khz)
    assert cpufreq_state(root) == before  # the agent stopped puts the originals back
    return root, before, tmp_path / "state"


def restarted_with_c1_in_force(tmp_path, state, root) -> None:
    """The agent started again over ``state``: c1's clock (1000 MHz on cpus 0-1) is set again
    and said in its log; then it is stopped."""
    agent = AgentProc(tmp_path, state, root)
    try:
        agent.started()
        assert pinned_at(root, 1_000_000), cpufreq_state(root)
        assert "applied configuration c1 (w on cpus 0-1 at 1000 MHz) in force again after " \
               "the agent's start" in agent.text()
    finally:
        assert agent.stop() == 0, agent.text()


def test_the_applied_clock_is_in_force_again_after_the_agent_restarts(tmp_path):
    root, before, state = applied_before_restart(tmp_path)
    assert kept(state / FILENAME)["freq_khz"] == 1_000_000
    restarted_with_c1_in_force(tmp_path, state, root)
    # stopped, it puts the originals back, and keeps the configuration for its next start
    assert cpufreq_state(root) == before
    assert (state / FILENAME).exists()


def test_without_cpufreq_after_the_restart_it_is_dropped_and_the_agent_goes_on(tmp_path):
    root, _, state = applied_before_restart(tmp_path)
    shutil.rmtree(Path(root) / "sys/devices/system/cpu/cpufreq")  # a kernel without the driver
    agent = AgentProc(tmp_path, state, root)
    try:
        agent.started()
        (line,) = [ln for ln in agent.text().splitlines() if "dropped" in ln]
        assert "applied configuration c1 (w on cpus 0-1 at 1000 MHz) dropped: frequency " \
               "1000000 kHz cannot be set" in line, line
        assert not (state / FILENAME).exists()
        assert "Traceback" not in agent.text()
    finally:
        assert agent.stop() == 0, agent.text()


def test_a_clock_no_longer_offered_is_dropped(tmp_path):
    root, before, state = applied_before_restart(tmp_path)
    table = Path(root) / "sys/devices/system/cpu/cpufreq/policy0/scaling_available_frequencies"
    table.write_text(" ".join(t for t in table.read_text().split() if t != "1000000") + "\n")
    agent = AgentProc(tmp_path, state, root)
    try:
        agent.started()
        assert "dropped: frequency 1000000 kHz is not offered for cpus 0-1" in agent.text()
        assert cpufreq_state(root) == before
    finally:
        assert agent.stop() == 0, agent.text()


def test_ended_by_a_configuration_left_to_the_governor_not_by_a_verification(tmp_path):
    with worker_on(tmp_path, "rpi4") as (ex, w, knob, root, _):
        kept = tmp_path / "state" / FILENAME
        kept_config = globals()["kept"]
        work(w, config("c1", 1_200_000))
        assert kept_config(kept)["config_id"] == "c1"
        # the daemon's own verification after a sweep (keep: false) leaves it standing
        work(w, config("c2", 600_000, keep=False))
        assert kept_config(kept)["config_id"] == "c1"
        assert ex.standing_wire()["config_id"] == "c1"
        work(w, config("c3", None))
        assert not kept.exists() and ex.standing_wire() is None


# -- a running process (this machine's /proc) ---------------------------------------------------

def pid_agent(tmp_path):
    """An executor's real parts on this machine, as the agent builds them at start."""
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(tmp_path / "state"),
                      workloads=[CommandWorkload("w", [PY, "-c", "print('{\"time_s\": 1}')"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    targets = Targets(SysFS("/"), systemd=False)
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"]), Outbox(cfg.state_dir),
                  send=lambda m: None, state_dir=cfg.state_dir, targets=targets)
    return ex, targets


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def confine(tmp_path, pid: int) -> None:
    """Apply a config to process ``pid`` (cpu 0), then stop that agent's parts."""
    ex, targets = pid_agent(tmp_path)
    w = Worker(ex)
    w.start()
    try:
        work(w, P.make("config", "daemon", {
            "config_id": "c1", "workload": "w", "size": "default", "cpus": [0], "threads": 1,
            "freq_khz": None, "reps": 1, "target": {"kind": "pid", "pid": pid,
                                                    "window_s": 0.05}}))
        assert os.sched_getaffinity(pid) == {0}
    finally:
        w.stop(abort=True)
        w.join(timeout=30)
        assert targets.restore() == []
        ex.outbox.close()


needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                    reason="confining to cpu 0 changes nothing on one cpu")


@needs_two_cpus
def test_the_same_process_is_confined_again(tmp_path, sleeper, caplog):
    everywhere = os.sched_getaffinity(sleeper.pid)
    confine(tmp_path, sleeper.pid)
    assert os.sched_getaffinity(sleeper.pid) == everywhere  # the agent stopped: put back
    ex, targets = pid_agent(tmp_path)
    with caplog.at_level(logging.INFO, "opptune.agent.standing"):
        ex.stand_again()
    try:
        assert os.sched_getaffinity(sleeper.pid) == {0}
        assert f"applied configuration c1 (w on cpus 0 with no set frequency, process " \
               f"{sleeper.pid}) in force again" in caplog.text
        assert ex.standing_wire()["target"] == {"kind": "pid", "pid": sleeper.pid}
    finally:
        targets.restore()
        ex.outbox.close()


@needs_two_cpus
@pytest.mark.parametrize("change, why", [
    (None, "process {pid} is gone"),
    ({"pid_start": -1}, "process {pid} is gone (its pid now names another process)"),
    ({"boot_id": "another-boot"}, "process {pid} was one of the previous boot"),
])
def test_a_process_gone_or_another_is_dropped_with_the_reason(tmp_path, sleeper, caplog,
                                                              change, why):
    pid = sleeper.pid
    confine(tmp_path, pid)
    kept = tmp_path / "state" / FILENAME
    if change is None:
        sleeper.kill()
        sleeper.wait()
    else:
        saved = json.loads(kept.read_text())
        kept.write_text(json.dumps({"entries": [{**saved["entries"][0], **change}]}))
    ex, targets = pid_agent(tmp_path)
    try:
        with caplog.at_level(logging.INFO, "opptune.agent.standing"):
            ex.stand_again()
        assert f"applied configuration c1 (w on cpus 0 with no set frequency, process " \
               f"{pid}) dropped: {why.format(pid=pid)}" in caplog.text
        assert not kept.exists()
        assert ex.standing_wire() is None and ex.standing_dropped[0].startswith("c1: ")
        if change is not None:
            assert os.sched_getaffinity(pid) != {0}  # not confined: it may not be ours
    finally:
        ex.outbox.close()


@pytest.mark.parametrize("text", ['{"config": {"cpus": [0', '[1, 2]', '{"config": 5}',
                                  '{"config": {"config_id": "c1", "workload": "w", "size": '
                                  '"default", "cpus": [0], "threads": 1, "freq_khz": "fast"}}'])
def test_a_damaged_record_applies_nothing_and_is_dropped(tmp_path, caplog, text):
    from opptune.agent.standing import StandingFile
    (tmp_path / FILENAME).write_text(text)
    with caplog.at_level(logging.WARNING, "opptune.agent.standing"):
        assert StandingFile(str(tmp_path)).load() == []
    assert f"the applied configuration in {tmp_path / FILENAME} cannot be read (" in caplog.text
    assert not (tmp_path / FILENAME).exists()


def test_forget_applied_ends_it_while_the_agent_is_stopped_and_refuses_under_a_running_one(
        tmp_path):
    """No command ended an applied configuration: the user had to find and delete the file.
    `opptune-agent --forget-applied` removes it with the agent stopped (the next start leaves
    the board at its originals); beside a running agent it refuses (that agent holds it and
    would apply it again), and without one kept it says so."""
    root, before, state = applied_before_restart(tmp_path)

    def forget() -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "opptune.agent", "--state-dir", str(state),
                               "--sysfs-root", root, "--forget-applied"],
                              capture_output=True, text=True, timeout=60)

    agent = AgentProc(tmp_path, state, root)
    try:
        agent.started()
        p = forget()
        assert p.returncode == 1 and p.stdout == "", p.stderr
        assert f"the agent on {state} is running (pid {agent.proc.pid})" in p.stderr
        assert "nothing forgotten" in p.stderr and (state / FILENAME).exists()
        assert pinned_at(root, 1_000_000)
    finally:
        assert agent.stop() == 0, agent.text()
    p = forget()
    assert p.returncode == 0, p.stderr
    assert p.stderr == ("opptune-agent: forgot the applied configuration c1 (w on cpus 0-1 at "
                        "1000 MHz): the agent's next start leaves the board at its original "
                        "settings\n")
    assert not (state / FILENAME).exists()
    (tmp_path / "next").mkdir()  # a log of its own: the first agent's says it started
    agent = AgentProc(tmp_path / "next", state, root)
    try:
        agent.started()
        assert "in force again" not in agent.text()
        assert cpufreq_state(root) == before
    finally:
        assert agent.stop() == 0, agent.text()
    p = forget()
    assert p.returncode == 0 and "no applied configuration is kept in" in p.stderr, p.stderr


# -- one configuration per target ---------------------------------------------------------------

@needs_two_cpus
def test_two_processes_stand_through_a_restart_and_one_gone_is_dropped_alone(tmp_path, caplog):
    """Before, the second process's configuration replaced the first's (one per board): only
    it came back. Both stand; after a restart, the one whose process is gone is dropped with
    a log line, and the other stands again."""
    procs = [subprocess.Popen([PY, "-c", "import time; time.sleep(600)"]) for _ in range(2)]
    try:
        first, second = procs
        ex, targets = pid_agent(tmp_path)
        w = Worker(ex)
        w.start()
        try:
            for cid, p, cpu in (("c1", first, 0), ("c2", second, 1)):
                work(w, P.make("config", "daemon", {
                    "config_id": cid, "workload": "w", "size": "default", "cpus": [cpu],
                    "threads": 1, "freq_khz": None, "reps": 1,
                    "target": {"kind": "pid", "pid": p.pid, "window_s": 0.05}}))
            assert os.sched_getaffinity(first.pid) == {0}
            assert os.sched_getaffinity(second.pid) == {1}
        finally:
            w.stop(abort=True)
            w.join(timeout=30)
            assert targets.restore() == []
            ex.outbox.close()
        saved = json.loads((tmp_path / "state" / FILENAME).read_text())
        assert [e["config"]["config_id"] for e in saved["entries"]] == ["c1", "c2"]
        first.kill()
        first.wait()
        ex, targets = pid_agent(tmp_path)
        with caplog.at_level(logging.INFO, "opptune.agent.standing"):
            ex.stand_again()
        try:
            assert f"applied configuration c1 (w on cpus 0 with no set frequency, process " \
                   f"{first.pid}) dropped: process {first.pid} is gone; the other applied " \
                   "configurations stand" in caplog.text
            assert f"applied configuration c2 (w on cpus 1 with no set frequency, process " \
                   f"{second.pid}) in force again" in caplog.text
            assert os.sched_getaffinity(second.pid) == {1}
            assert [c["config_id"] for c in ex.standings_wire()] == ["c2"]
            assert ex.standing_dropped == [f"c1: process {first.pid} is gone"]
            saved = json.loads((tmp_path / "state" / FILENAME).read_text())
            assert [e["config"]["config_id"] for e in saved["entries"]] == ["c2"]
        finally:
            targets.restore()
            ex.outbox.close()
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_file_of_an_agent_of_one_configuration_stands_after_an_upgrade(tmp_path):
    """standing.json of an agent before targets stood apart holds one ``config``: the new
    agent applies it again, and keeps it beside the next target's configuration."""
    root, _, state = applied_before_restart(tmp_path)
    saved = json.loads((state / FILENAME).read_text())
    (state / FILENAME).write_text(json.dumps(saved["entries"][0]))  # the old shape
    assert "config" in json.loads((state / FILENAME).read_text())
    restarted_with_c1_in_force(tmp_path, state, root)
    from opptune.agent.standing import StandingFile
    file = StandingFile(str(state))
    file.keep({"config_id": "c2", "workload": "w", "size": "default", "cpus": [0],
               "threads": 1, "freq_khz": None, "target": {"kind": "unit", "unit": "web"}})
    assert [e["config"]["config_id"] for e in file.load()] == ["c1", "c2"]


def test_forget_applied_ends_one_target_s_configuration_and_leaves_the_others(tmp_path):
    state = tmp_path / "state"
    state.mkdir(0o700)  # as the agent makes it: one of 0755 is narrowed, said in a line
    entries = [{"config": {"config_id": cid, "workload": "w", "size": "default", "cpus": [0],
                           "threads": 1, "freq_khz": khz, **extra}, "applied_at": 1.0}
               for cid, khz, extra in (("c1", 1_000_000, {}),
                                       ("c2", None, {"target": {"kind": "pid", "pid": 4242}}),
                                       ("c3", None, {"target": {"kind": "unit",
                                                                "unit": "web"}}))]
    (state / FILENAME).write_text(json.dumps({"entries": entries}))

    def forget(*target: str) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "opptune.agent", "--state-dir", str(state),
                               "--forget-applied", *target],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    def kept() -> list[str]:
        return [e["config"]["config_id"]
                for e in json.loads((state / FILENAME).read_text())["entries"]]

    p = forget()  # several stand: which?
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert "3 applied configurations are kept" in p.stderr
    assert "board: c1 (w on cpus 0 at 1000 MHz); pid:4242: c2 (w on cpus 0 with no set " \
           "frequency, process 4242); unit:web.service: c3" in p.stderr
    assert "say which with --forget-applied TARGET (board, pid:N, unit:NAME, or all); " \
           "nothing forgotten" in p.stderr and kept() == ["c1", "c2", "c3"]
    p = forget("pid:4242")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ("opptune-agent: forgot the applied configuration c2 (w on cpus 0 with no set "
                        "frequency, process 4242): the agent's next start leaves "
                        "process 4242 at its original settings\n"
                        "opptune-agent: 2 other applied configurations stand\n")
    assert kept() == ["c1", "c3"]
    for wrong, why in (("pid:1", "no applied configuration stands on pid:1 (kept: board: c1"),
                       ("pid:x", "--forget-applied got 'pid:x': name a target as board, pid:N")):
        p = forget(wrong)
        assert p.returncode == 2 and why in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and kept() == ["c1", "c3"]
    p = forget("unit:web")
    assert p.returncode == 0 and "forgot the applied configuration c3" in p.stderr, p.stderr
    p = forget()  # one left: as before, no target needed
    assert p.returncode == 0 and "leaves the board at its original settings" in p.stderr
    assert not (state / FILENAME).exists()
