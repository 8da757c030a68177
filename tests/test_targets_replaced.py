"""A process or unit a configuration confined is let go when another configuration of the same
target replaces it (the daemon then says the first is "no longer in force"); those of other
targets stand on (shared/standing.py). The agent's crash-safe record of originals follows, so a
restart after a kill -9 puts back only what is still changed.

The agent's real executor and worker; real child processes (this machine's /proc and
sched_setaffinity) and a unit's cgroup on a fake tree; clocks on a virtual odroid-xu4's tree
(two cpufreq policies). Every wait is on the worker's idle event."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opptune.agent.apply import Executor, Worker
from opptune.agent.knobs.cpufreq import CpuFreq, CpuFreqKnob
from opptune.agent.knobs.state import CPUSET_FILENAME, CpusetRecord, restore_at_start
from opptune.agent.outbox import Outbox
from opptune.agent.platform import discover
from opptune.agent.runner import Runner
from opptune.agent.sysfs import SysFS
from opptune.agent.targets import Targets
from opptune.agent.virtual_board import attach, make_tree
from opptune.agent.workloads import Workloads
from opptune.shared import protocol as P
from opptune.shared.config import AgentConfig, CommandWorkload
from opptune.shared.standing import narrower
from test_idle_clock import job, pinned_at, work
from fake_trees import cgroup_tree
from test_targets import applied
from test_virtual_e2e import cpufreq_state

PY = sys.executable
EVERY_CPU = os.sched_getaffinity(0)

pytestmark = pytest.mark.skipif(len(EVERY_CPU) < 2 or not {0, 1} <= EVERY_CPU,
                                reason="confining to one of cpus 0 and 1 needs both")


@contextlib.contextmanager
def agent(tmp_path, board: str | None = None, command: list[str] | None = None):
    """(executor, worker, targets, tree root): the agent's parts as it builds them, its cpu
    set record in the state directory; cpufreq from ``board``'s virtual tree when given (the
    cgroup tree lives there too), pid targets on this machine. ``command``: workload w's
    (default: one that says it took 0.01 s)."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    if board:
        attach(make_tree(board, str(root)))
    state = str(tmp_path / "state")
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=state, sysfs_root=str(root),
                      workloads=[CommandWorkload("w", command or [
                          PY, "-c", "print('{\"time_s\": 0.01}')"])])
    # the board's cpus and clocks; the command runs on this machine, as the pid targets do
    platform = discover(dataclasses.replace(cfg, virtual_board=board or "") if board
                        else dataclasses.replace(cfg, sysfs_root="/"))
    knobs = [CpuFreqKnob(CpuFreq(str(root), state_dir=state, install_handlers=False))] \
        if board else []
    wl = Workloads(cfg, catalogue={})
    targets = Targets(SysFS(str(root)), systemd=False,
                      record=CpusetRecord(os.path.join(state, CPUSET_FILENAME), str(root)))
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"], knobs=knobs), Outbox(state),
                  send=lambda m: None, state_dir=state, targets=targets)
    w = Worker(ex)
    w.start()
    try:
        yield ex, w, targets, root
    finally:
        w.stop(abort=True)
        w.join(timeout=30)
        ex.runner.close()
        assert targets.restore() == []
        ex.outbox.close()


def config(cid: str, target: dict | None, cpus=(0,), freq_khz=None, **kw) -> dict:
    body = {"config_id": cid, "workload": "w", "size": "default", "cpus": list(cpus),
            "threads": len(cpus), "freq_khz": freq_khz, "reps": 1, **kw}
    if target is not None:
        body["target"] = {**target, "window_s": 0.05}
    return P.make("config", "daemon", body)


def pid(p) -> dict:
    return {"kind": "pid", "pid": p.pid}


def recorded(state: Path) -> list[tuple]:
    """The record's entries as (owner, kind, tid or path); [] without a record file."""
    path = state / CPUSET_FILENAME
    if not path.exists():
        return []
    return [(e.get("owner"), e["kind"], e.get("tid", e.get("path")))
            for e in json.loads(path.read_text())["entries"]]


@pytest.fixture
def procs():
    """Two idle child processes (one thread each)."""
    ps = [subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
          for _ in range(2)]
    yield ps
    for p in ps:
        p.kill()
        p.wait()


def test_two_processes_configurations_stand_together_each_replaced_by_its_own(tmp_path,
                                                                             procs):
    """Before, the second process's configuration let the first process go: only the last
    applied configuration stood, whatever its target."""
    first, second = procs
    with agent(tmp_path) as (ex, w, targets, _):
        work(w, config("c1", pid(first), cpus=[0]))
        assert os.sched_getaffinity(first.pid) == {0}
        assert recorded(tmp_path / "state") == [("c1", "affinity", first.pid)]
        work(w, config("c2", pid(second), cpus=[1]))
        assert [b["ok"] for b in applied(ex)] == [True, True]
        assert os.sched_getaffinity(first.pid) == {0}  # c1 stands: another target
        assert os.sched_getaffinity(second.pid) == {1}
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2"]
        assert ex.standing_wire()["config_id"] == "c2"  # the newest, for an older daemon
        # c3 replaces c1, the first process's own: its original is what it records
        work(w, config("c3", pid(first), cpus=[1]))
        assert os.sched_getaffinity(first.pid) == {1}
        assert [c["config_id"] for c in ex.standings_wire()] == ["c2", "c3"]
        assert recorded(tmp_path / "state") == [("c2", "affinity", second.pid),
                                                ("c3", "affinity", first.pid)]
        # a kill -9 of the agent and its restart put both back
        lines = restore_at_start(str(tmp_path / "state"), str(tmp_path / "root"))
        assert len(lines) == 1 and f"thread {second.pid}" in lines[0], lines
        assert f"thread {first.pid}" in lines[0]
        assert os.sched_getaffinity(first.pid) == EVERY_CPU
        assert os.sched_getaffinity(second.pid) == EVERY_CPU


def test_the_same_process_confined_again_goes_back_to_its_original(tmp_path, procs):
    """Undone after the new change, the replaced one would put its original over the new cpu
    set; recorded after it, the new one would take the replaced cpu set for the original."""
    p = procs[0]
    with agent(tmp_path) as (ex, w, targets, _):
        work(w, config("c1", pid(p), cpus=[0]))
        work(w, config("c2", pid(p), cpus=[1]))
        assert os.sched_getaffinity(p.pid) == {1}
        (entry,) = json.loads((tmp_path / "state" / CPUSET_FILENAME).read_text())["entries"]
        assert entry["owner"] == "c2" and set(entry["cpus"]) == EVERY_CPU
        assert targets.restore() == []  # the agent stops
        assert os.sched_getaffinity(p.pid) == EVERY_CPU
    assert recorded(tmp_path / "state") == []


def test_a_unit_and_a_process_stand_together_and_a_newer_clock_holds_on_its_policy(
        tmp_path, procs, caplog):
    """The xu4's policy0 holds cpus 0-3, policy4 cpus 4-7. The unit's configuration pins
    policy4, the process's policy0: both stand (before, the process's let the unit go and put
    policy4 back). A board-wide one at another clock on policy0 then holds there (the newer
    clock; the log says the process's is overridden), and one left to the governor ends it
    and no other: policy0 back at the process's clock. A newer one for the unit, without a
    clock, replaces the unit's: policy4 back to its original."""
    caplog.set_level(logging.WARNING, "opptune.agent.standing")
    with agent(tmp_path, "odroid-xu4") as (ex, w, targets, root):
        d = cgroup_tree(root, cpus="0-7")
        before = cpufreq_state(str(root))
        work(w, config("c1", {"kind": "unit", "unit": "web"}, cpus=[4], freq_khz=1_800_000))
        assert (d / "cpuset.cpus").read_text() == "4"
        assert pinned_at(str(root), 1_800_000, "policy4")
        work(w, config("c2", pid(procs[0]), cpus=[1], freq_khz=1_000_000))
        assert (d / "cpuset.cpus").read_text() == "4"  # the unit stands
        assert pinned_at(str(root), 1_800_000, "policy4")
        assert os.sched_getaffinity(procs[0].pid) == {1}
        assert pinned_at(str(root), 1_000_000)
        assert recorded(tmp_path / "state") == [("c1", "cgroup", "/sys/fs/cgroup/system.slice/"
                                                 "web.service/cpuset.cpus"),
                                                ("c2", "affinity", procs[0].pid)]
        work(w, config("c3", None, cpus=[0, 1], freq_khz=1_400_000))  # the board's own
        assert pinned_at(str(root), 1_400_000) and pinned_at(str(root), 1_800_000, "policy4")
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2", "c3"]
        overridden = (f"applied configuration c2 (w on cpus 1 at 1000 MHz, process "
                      f"{procs[0].pid}): its clock is overridden on policy0 by c3 (1400 MHz), "
                      "applied after it")
        assert overridden in caplog.text
        # a job moves the clocks; at rest each policy is back at the clock that holds there
        caplog.set_level(logging.INFO, "opptune.agent.apply")
        work(w, job("j1", [([0, 4], 600_000)]))
        assert pinned_at(str(root), 1_400_000) and pinned_at(str(root), 1_800_000, "policy4")
        assert "idle: knobs back to the applied configurations (policy0 at 1400 MHz of c3; " \
               "policy4 at 1800 MHz of c1)" in caplog.text
    # the agent stopped (everything put back) and started again: all three stand, c3's
    # clock on policy0, said again rather than c2's set over it
    assert cpufreq_state(str(root)) == before and (d / "cpuset.cpus").read_text() == "0-7"
    caplog.clear()
    caplog.set_level(logging.INFO, "opptune.agent.standing")
    with agent(tmp_path, "odroid-xu4") as (ex, w, targets, root):
        ex.stand_again()
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2", "c3"]
        assert pinned_at(str(root), 1_400_000) and pinned_at(str(root), 1_800_000, "policy4")
        assert (d / "cpuset.cpus").read_text() == "4"
        assert os.sched_getaffinity(procs[0].pid) == {1}
        assert overridden in caplog.text
        assert caplog.text.count("in force again after the agent's start") == 3
        work(w, config("c4", None, cpus=[0, 1]))  # the workload, the governor's clock
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2"]
        assert pinned_at(str(root), 1_000_000)  # the process's clock again
        work(w, config("c5", {"kind": "unit", "unit": "web"}, cpus=[5]))
        assert [b["ok"] for b in applied(ex)] == [True] * 5
        assert (d / "cpuset.cpus").read_text() == "5"
        now = cpufreq_state(str(root))
        assert {k: v for k, v in now.items() if k.startswith("policy4/")} == \
            {k: v for k, v in before.items() if k.startswith("policy4/")}
        assert pinned_at(str(root), 1_000_000)
        assert [c["config_id"] for c in ex.standings_wire()] == ["c2", "c5"]


def test_a_process_that_exited_needs_nothing(tmp_path, procs, caplog):
    first, second = procs
    caplog.set_level(logging.WARNING)
    with agent(tmp_path) as (ex, w, targets, _):
        work(w, config("c1", pid(first), cpus=[0]))
        first.kill()
        first.wait()
        work(w, config("c2", pid(second), cpus=[1]))
        assert [b["ok"] for b in applied(ex)] == [True, True]
        assert os.sched_getaffinity(second.pid) == {1}
        # c1 stands until the agent's next start drops it (test_standing); undoing its
        # change needs nothing
        assert recorded(tmp_path / "state") == [("c1", "affinity", first.pid),
                                                ("c2", "affinity", second.pid)]
        assert targets.release("c1") == []
        assert recorded(tmp_path / "state") == [("c2", "affinity", second.pid)]
    assert caplog.records == []


def test_a_replacement_that_fails_leaves_the_configuration_in_force_confined(tmp_path, procs,
                                                                            caplog):
    """policy0's scaling_setspeed cannot be written (taken away after the agent started):
    the replacement for the same process is refused after the process was let go, and is
    confined again to the cpu set of the configuration in force."""
    caplog.set_level(logging.INFO, "opptune.agent.standing")
    first = procs[0]
    with agent(tmp_path, "odroid-xu4") as (ex, w, targets, root):
        work(w, config("c1", pid(first), cpus=[0]))
        setspeed = root / "sys/devices/system/cpu/cpufreq/policy0/scaling_setspeed"
        setspeed.unlink()
        setspeed.mkdir()
        work(w, config("c2", pid(first), cpus=[1], freq_khz=1_000_000))
        ok, refused = applied(ex)
        assert ok["ok"] and not refused["ok"], refused
        assert refused["error"].startswith("cannot apply to the target: "), refused
        assert os.sched_getaffinity(first.pid) == {0}
        assert ex.standing_wire()["config_id"] == "c1"
        assert recorded(tmp_path / "state") == [("c1", "affinity", first.pid)]
        assert "applied configuration c1 (w on cpus 0 with no set frequency, process " \
               f"{first.pid}): its target confined again" in caplog.text
        setspeed.rmdir()
        setspeed.write_text("0\n")


def test_a_verification_that_does_not_stand_leaves_the_one_in_force(tmp_path, procs):
    """keep: false (the daemon's own verification): the configuration applied to the same
    process for its window, then the process back at the cpu set of the one in force."""
    p = procs[0]
    with agent(tmp_path) as (ex, w, targets, _):
        work(w, config("c1", pid(p), cpus=[0]))
        work(w, config("c2", pid(p), cpus=[1], keep=False))
        assert [b["measured"]["target"]["tids"] for b in applied(ex)] == [[p.pid]] * 2
        assert os.sched_getaffinity(p.pid) == {0}
        assert ex.standing_wire()["config_id"] == "c1"
        # the original, not c1's cpu set, is what a restart puts back
        (entry,) = json.loads((tmp_path / "state" / CPUSET_FILENAME).read_text())["entries"]
        assert entry["owner"] == "c1" and set(entry["cpus"]) == EVERY_CPU


@pytest.mark.parametrize("how", ["exits", "pid reused"])
def test_a_process_that_exits_while_the_agent_runs_is_dropped_its_clock_put_back(
        tmp_path, procs, caplog, how):
    """Before, a process's configuration stood (and 'opptune status' said it in force) until
    the agent's next start dropped it. The link's heartbeat (Worker.watch) notices it: its
    entry leaves standing.json and the hello's standings (a hello tells the daemon), its
    clock on policy0 goes back to the original, the unit's configuration (policy4) stands.
    The process is killed and not reaped: a zombie has exited too."""
    caplog.set_level(logging.INFO, "opptune.agent.apply")
    p = procs[0]
    with agent(tmp_path, "odroid-xu4") as (ex, w, targets, root):
        told = []
        ex.say_standings = lambda: told.append([c["config_id"] for c in ex.standings_wire()])
        d = cgroup_tree(root, cpus="0-7")
        before = cpufreq_state(str(root))
        work(w, config("c1", pid(p), cpus=[1], freq_khz=1_000_000))
        work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=[4], freq_khz=1_800_000))
        w.watch()  # it runs: nothing to drop
        assert w.idle.is_set() and told == []
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2"]
        if how == "exits":
            p.kill()
            os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
            why = f"process {p.pid} exited while the agent ran"
        else:  # as if the pid now named a process started after c1 was applied
            ex._pid_starts["c1"] -= 1
            why = f"process {p.pid} exited while the agent ran (its pid now names another " \
                  "process)"
        w.watch()
        assert w.idle.wait(60)
        assert [c["config_id"] for c in ex.standings_wire()] == ["c2"]
        assert told == [["c2"]] and ex.standing_dropped == [f"c1: {why}"]
        assert kept_ids(tmp_path / "state") == ["c2"]
        assert recorded(tmp_path / "state") == [("c2", "cgroup", "/sys/fs/cgroup/system.slice/"
                                                 "web.service/cpuset.cpus")]
        now = cpufreq_state(str(root))
        assert {k: v for k, v in now.items() if k.startswith("policy0/")} == \
            {k: v for k, v in before.items() if k.startswith("policy0/")}
        assert pinned_at(str(root), 1_800_000, "policy4") and (d / "cpuset.cpus").read_text() == "4"
        assert f"applied configuration c1 (w on cpus 1 at 1000 MHz, process {p.pid}) " \
               f"dropped: {why}; the other applied configurations stand" in caplog.text
        w.watch()  # said once
        assert w.idle.wait(60) and told == [["c2"]]


def kept_ids(state: Path) -> list[str]:
    """The config ids standing.json keeps, oldest first."""
    return [e["config"]["config_id"]
            for e in json.loads((state / "standing.json").read_text())["entries"]]


# workload w as a board configuration's verification runs it: it notes the clock each policy
# is set to while it runs, then says it took 0.01 s
PEEK = """
import pathlib, sys
d = pathlib.Path(sys.argv[1]) / "sys/devices/system/cpu/cpufreq"
seen = [f"{p}={(d / p / 'scaling_governor').read_text().strip()}:"
        f"{(d / p / 'scaling_setspeed').read_text().strip()}" for p in ("policy0", "policy4")]
with open(sys.argv[2], "a") as fh:
    fh.write(" ".join(seen) + "\\n")
print('{"time_s": 0.01}')
"""


def test_a_board_configuration_without_a_clock_is_verified_at_the_clocks_others_hold(
        tmp_path, procs):
    """Before, its verification put every policy back to its governor while it ran (the
    knob's apply without a clock restored them all), undoing for that time the process's
    clock on policy0, which its cpus share, and the unit's on policy4. Now each stays: the
    board holds them with it, as at rest after it (it sets none and stands as nothing)."""
    seen = tmp_path / "seen.txt"
    command = [PY, "-c", PEEK, str(tmp_path / "root"), str(seen)]
    with agent(tmp_path, "odroid-xu4", command) as (ex, w, targets, root):
        cgroup_tree(root, cpus="0-7")
        work(w, config("c1", pid(procs[0]), cpus=[1], freq_khz=1_000_000))
        work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=[4], freq_khz=1_800_000))
        seen.unlink(missing_ok=True)
        work(w, config("c3", None, cpus=[0, 1]))  # the board's, at the governor's choice
        assert [b["ok"] for b in applied(ex)] == [True] * 3
        runs = seen.read_text().splitlines()
        assert len(runs) == 2, runs  # its warm-up and its repetition
        assert set(runs) == {"policy0=userspace:1000000 policy4=userspace:1800000"}, runs
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2"]
        assert pinned_at(str(root), 1_000_000) and pinned_at(str(root), 1_800_000, "policy4")


def test_a_process_in_a_confined_unit_runs_on_its_own_configuration_s_cpus(tmp_path, procs,
                                                                          caplog):
    """Before, a process and the unit it runs in were two targets that knew nothing of each
    other: nothing said which cpu set held for the process, and the unit's applied again
    (a kernel may reset its processes' affinity then) left it on the unit's. The rule
    (shared/standing.py): the process's own configuration, the narrower target, holds for it
    where its cpus are the unit's; the log, the hello (``in_unit``) and the applied say so.
    The process is listed in the fake unit's cgroup.procs; its affinity is this machine's."""
    caplog.set_level(logging.INFO, "opptune.agent")
    p = procs[0]
    with agent(tmp_path) as (ex, w, targets, root):
        d = cgroup_tree(root, cpus="0-7")
        (d / "cgroup.procs").write_text(f"{procs[1].pid}\n{p.pid}\n")
        told = []
        ex.say_standings = lambda: told.append(ex.standings_wire())
        work(w, config("c1", pid(p), cpus=[1]))
        assert "in_unit" not in applied(ex)[0]["measured"]["target"] and told == []
        work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=[0, 1]))
        in_web = {"kind": "pid", "pid": p.pid, "in_unit": "web.service"}
        assert [s[0]["target"] for s in told] == [in_web]  # the daemon told at once
        assert narrower(ex.standings_wire()) == {"c2": [{"pid": p.pid, "by": "c1",
                                                         "cpus": [1]}]}
        assert "applied configuration c2 (w on cpus 0-1 with no set frequency, unit web): its " \
               f"cpu set is overridden for process {p.pid} by c1 (cpus 1), the process's own: " \
               "the narrower target holds for it; the unit's other processes stay on cpus " \
               "0-1" in caplog.text
        # a kernel that resets a cgroup's processes to its cpu set when it changes
        os.sched_setaffinity(p.pid, {0, 1})
        work(w, config("c3", {"kind": "unit", "unit": "web"}, cpus=[0, 1]))
        assert os.sched_getaffinity(p.pid) == {1} and len(told) == 1
        # the process's configuration applied again: its applied names the unit
        work(w, config("c4", pid(p), cpus=[0]))
        assert applied(ex)[-1]["measured"]["target"]["in_unit"] == "web.service"
        assert os.sched_getaffinity(p.pid) == {0}
        # the unit narrowed to cpu 1: the kernel keeps the process there, whatever its own
        work(w, config("c5", {"kind": "unit", "unit": "web"}, cpus=[1]))
        assert narrower(ex.standings_wire()) == {"c4": [{"unit": "web.service", "by": "c5",
                                                         "cpus": [1]}]}
        assert f"applied configuration c4 (w on cpus 0 with no set frequency, process {p.pid}): " \
               "its cpu set is overridden by c5 (unit web.service, cpus 1), which does not " \
               "hold all of cpus 0: the kernel keeps a process within its unit's cpu set" \
               in caplog.text
        # ... and a configuration of the process on other cpus is refused, saying why
        work(w, config("c6", pid(p), cpus=[0]))
        assert applied(ex)[-1]["error"] == (
            f"cannot apply to the target: process {p.pid} runs in unit web.service, which "
            "configuration c5 confines to cpus 1: a process stays within its unit's cpu set "
            "(the kernel's cgroup cpuset); choose cpus among 1, or apply to the unit")
        assert [c["config_id"] for c in ex.standings_wire()] == ["c4", "c5"]
    # the agent started again: the same said at its start
    caplog.clear()
    with agent(tmp_path) as (ex, w, targets, root):
        ex.stand_again()
        assert ex.standings_wire()[0]["target"] == {**in_web, "kind": "pid"}
        assert "its cpu set is overridden by c5 (unit web.service, cpus 1)" in caplog.text


def test_a_sweep_point_without_a_clock_leaves_the_clocks_standings_hold_on_other_policies(
        tmp_path, procs):
    """Before, a job's point without a clock put every policy back to its governor while it
    ran (the knob's apply restored them all), undoing the unit's clock on policy4 during a
    point on cpus 0-1. A point's clock is its business on its own policies only: policy0 (the
    process's clock) goes to the governor for it, policy4 keeps the unit's. (The runs are on
    this machine's cpus: cpus 0-1, of the virtual board's policy0.)"""
    seen = tmp_path / "seen.txt"
    command = [PY, "-c", PEEK, str(tmp_path / "root"), str(seen)]
    with agent(tmp_path, "odroid-xu4", command) as (ex, w, targets, root):
        cgroup_tree(root, cpus="0-7")
        before = cpufreq_state(str(root))
        gov0 = f"policy0={before['policy0/scaling_governor']}:" \
               f"{before['policy0/scaling_setspeed']}"
        work(w, config("c1", pid(procs[0]), cpus=[1], freq_khz=1_000_000))
        work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=[4], freq_khz=1_800_000))
        assert [b["ok"] for b in applied(ex)] == [True] * 2
        seen.unlink(missing_ok=True)
        work(w, job("j1", [([0, 1], None), ([0], 1_400_000), ([1], None)]))
        assert seen.read_text().splitlines() == [
            f"{gov0} policy4=userspace:1800000",
            "policy0=userspace:1400000 policy4=userspace:1800000",
            f"{gov0} policy4=userspace:1800000"]
        # at rest, both clocks back
        assert pinned_at(str(root), 1_000_000) and pinned_at(str(root), 1_800_000, "policy4")


@pytest.mark.parametrize("unit_stands", [True, False])
def test_a_unit_verification_that_does_not_stand_gives_its_processes_their_own_cpus_again(
        tmp_path, procs, unit_stands):
    """Before, a ``keep: false`` verification of a unit put the unit's cpu set back and left
    a process of the unit that has its own configuration on whatever the kernel gave it (a
    kernel may reset a cgroup's processes to its cpu set when it changes): the process's
    configuration, in force, no longer held. Now its cpus are set again, with the unit's
    configuration in force or without one. The kernel's reset is played by setting the
    process's affinity to the unit's cpus beforehand."""
    p = procs[0]
    with agent(tmp_path) as (ex, w, targets, root):
        d = cgroup_tree(root, cpus="0-7")
        (d / "cgroup.procs").write_text(f"{procs[1].pid}\n{p.pid}\n")
        work(w, config("c1", pid(p), cpus=[1]))
        if unit_stands:
            work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=[0, 1]))
        os.sched_setaffinity(p.pid, {0, 1})
        work(w, config("c3", {"kind": "unit", "unit": "web"}, cpus=[0, 1], keep=False))
        assert all(b["ok"] for b in applied(ex))
        assert os.sched_getaffinity(p.pid) == {1}
        assert (d / "cpuset.cpus").read_text().strip() == ("0-1" if unit_stands else "0-7")
        assert [c["config_id"] for c in ex.standings_wire()] == \
            (["c1", "c2"] if unit_stands else ["c1"])
    assert os.sched_getaffinity(p.pid) == EVERY_CPU  # the agent's stop puts it back


@pytest.mark.parametrize("how", ["holds no process", "is gone"])
def test_a_unit_that_stops_while_the_agent_runs_is_dropped_one_that_restarts_is_confined_again(
        tmp_path, procs, caplog, how):
    """Before, a unit's configuration stood until the agent's next start dropped it (the unit
    gone), as a process's did. The link's heartbeat (Worker.watch) looks at the unit (here
    without systemd: its cgroup gone, or holding no process): one stopped at two heartbeats
    in a row is dropped as an exited process is (INFO line, out of standing.json, its clock
    on policy4 back, a hello); one that restarts between two (its cgroup made anew, cpuset
    empty) is confined again, not dropped."""
    caplog.set_level(logging.INFO, "opptune.agent")
    with agent(tmp_path, "odroid-xu4") as (ex, w, targets, root):
        told = []
        ex.say_standings = lambda: told.append([c["config_id"] for c in ex.standings_wire()])
        d = cgroup_tree(root, cpus="0-7")
        (d / "cgroup.procs").write_text(f"{procs[1].pid}\n")
        before = cpufreq_state(str(root))
        work(w, config("c1", pid(procs[0]), cpus=[1], freq_khz=1_000_000))
        work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=[4], freq_khz=1_800_000))
        assert (d / "cpuset.cpus").read_text() == "4"
        # a restart: seen stopped at one heartbeat, running in a new cgroup at the next
        shutil.rmtree(d)
        w.watch()
        assert w.idle.is_set() and told == []
        d = cgroup_tree(root, cpus="")
        (d / "cgroup.procs").write_text(f"{procs[1].pid}\n")
        w.watch()
        assert w.idle.wait(60)
        assert (d / "cpuset.cpus").read_text() == "4" and told == []
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2"]
        assert "applied configuration c2 (w on cpus 4 at 1800 MHz, unit web): unit web " \
               "restarted out of its cpu set" in caplog.text
        assert "applied configuration c2 (w on cpus 4 at 1800 MHz, unit web): its target " \
               "confined again" in caplog.text
        # it stops: still stopped at the next heartbeat, it is dropped
        if how == "is gone":
            shutil.rmtree(d)
        else:
            (d / "cgroup.procs").write_text("")
        w.watch()
        assert w.idle.is_set() and told == []
        w.watch()
        assert w.idle.wait(60)
        why = f"unit web.service stopped while the agent ran (its cgroup {how})"
        assert told == [["c1"]] and ex.standing_dropped == [f"c2: {why}"]
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1"]
        assert kept_ids(tmp_path / "state") == ["c1"]
        assert [r[0] for r in recorded(tmp_path / "state")] == ["c1"]
        if how == "holds no process":  # its cpu set put back: the cgroup's of its restart
            assert (d / "cpuset.cpus").read_text() == ""
        now = cpufreq_state(str(root))
        assert {k: v for k, v in now.items() if k.startswith("policy4/")} == \
            {k: v for k, v in before.items() if k.startswith("policy4/")}
        assert pinned_at(str(root), 1_000_000)
        assert f"applied configuration c2 (w on cpus 4 at 1800 MHz, unit web) dropped: {why}; " \
               "the other applied configurations stand" in caplog.text
        assert "undoing" not in caplog.text
        w.watch()  # said once
        assert w.idle.wait(60) and told == [["c1"]]


@pytest.mark.parametrize("replaces", [False, True])
def test_a_heartbeat_while_a_process_configuration_is_put_in_force_finds_nothing_exited(
        tmp_path, procs, monkeypatch, replaces):
    """Review: the worker put a pid configuration in force (standing_configs) before it kept
    its process's start time, so a heartbeat between the two saw the configuration without
    one: its process 'exited (its pid now names another process)', and the worker was woken
    for nothing. The heartbeat is made to fall there: at the worker's read of the start time
    (/proc/PID/stat). It finds nothing, for a new configuration and for one that replaces
    another on the same process; both stand."""
    from opptune.agent import apply
    p = procs[0]
    real = apply.running_start
    with agent(tmp_path) as (ex, w, targets, root):
        if replaces:
            work(w, config("c0", pid(p), cpus=[0]))
        found, said = [], []

        def heartbeat_then(at):
            found.append(ex.notice_exited())  # the link's heartbeat, in the worker's window
            said.append([c["config_id"] for c in ex.standings_wire()])  # a hello then
            return real(at)

        monkeypatch.setattr(apply, "running_start", heartbeat_then)
        work(w, config("c1", pid(p), cpus=[1]))
        assert found == [False]
        assert said == [["c0"] if replaces else []]  # what stood before, as a whole
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1"]
        assert os.sched_getaffinity(p.pid) == {1}
        w.watch()  # the next heartbeat: nothing to do
        assert w.idle.is_set() and ex.standing_dropped == []


@pytest.mark.parametrize("unit_cpus", [[0, 1], [0]])
def test_a_process_that_moves_into_a_confined_unit_is_noticed_at_the_heartbeat(
        tmp_path, procs, caplog, unit_cpus):
    """Before, a process whose configuration stands that moved into a unit another
    configuration confines was noticed only when a configuration was applied (or the agent
    restarted): meanwhile it ran on the cpus the kernel gives a process moved into a cgroup,
    the unit's, and neither the log nor the hello (``opptune status``) said which set holds
    for it. The heartbeat now reads where it runs (/proc/PID/cgroup, one read; written in the
    tree here as the kernel says it), and the outcome is that of its being there when applied:
    its own cpus again where they are among the unit's (else the unit's hold, said in a
    WARNING line), the lines said, the daemon told. Moved out again, its own cpus are set
    again and the hello no longer names the unit."""
    caplog.set_level(logging.INFO, "opptune.agent")
    p = procs[0]
    with agent(tmp_path) as (ex, w, targets, root):
        d = cgroup_tree(root, cpus="0-7")
        (d / "cgroup.procs").write_text(f"{procs[1].pid}\n")
        where = root / "proc" / str(p.pid)
        where.mkdir(parents=True)
        (where / "cgroup").write_text("0::/user.slice/session-1.scope\n")
        told = []
        ex.say_standings = lambda: told.append(ex.standings_wire())
        work(w, config("c1", pid(p), cpus=[1]))
        work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=unit_cpus))
        w.watch()  # where it was: nothing to do
        assert w.idle.is_set() and told == [] and narrower(ex.standings_wire()) == {}
        # it moves into the unit, and the kernel gives it the unit's cpus
        (where / "cgroup").write_text("0::/system.slice/web.service\n")
        os.sched_setaffinity(p.pid, set(unit_cpus))
        w.watch()
        assert w.idle.wait(60)
        in_web = {"kind": "pid", "pid": p.pid, "in_unit": "web.service"}
        assert [s[0]["target"] for s in told] == [in_web]
        assert f"applied configuration c1 (w on cpus 1 with no set frequency, process {p.pid}): " \
               f"process {p.pid} moved into unit web.service, which a configuration in force " \
               "confines" in caplog.text
        if unit_cpus == [0, 1]:  # its own holds
            assert os.sched_getaffinity(p.pid) == {1}
            assert narrower(ex.standings_wire()) == {"c2": [{"pid": p.pid, "by": "c1",
                                                             "cpus": [1]}]}
            assert "applied configuration c2 (w on cpus 0-1 with no set frequency, unit web): " \
                   f"its cpu set is overridden for process {p.pid} by c1 (cpus 1), the " \
                   "process's own: the narrower target holds for it" in caplog.text
        else:  # the kernel keeps it within the unit's
            assert os.sched_getaffinity(p.pid) == {0}
            assert narrower(ex.standings_wire()) == {"c1": [{"unit": "web.service", "by": "c2",
                                                             "cpus": [0]}]}
            assert f"applied configuration c1 (w on cpus 1 with no set frequency, process " \
                   f"{p.pid}): its cpu set is overridden by c2 (unit web.service, cpus 0), " \
                   "which does not hold all of cpus 1" in caplog.text
        w.watch()  # said once
        assert w.idle.wait(60) and len(told) == 1
        # out again, the kernel giving it its new cgroup's cpus
        (where / "cgroup").write_text("0::/user.slice/session-1.scope\n")
        os.sched_setaffinity(p.pid, EVERY_CPU)
        w.watch()
        assert w.idle.wait(60)
        assert os.sched_getaffinity(p.pid) == {1}
        assert [s[0]["target"] for s in told] == [in_web, {"kind": "pid", "pid": p.pid}]
        assert narrower(ex.standings_wire()) == {}
        assert f"process {p.pid} left unit web.service" in caplog.text
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1", "c2"]
    assert os.sched_getaffinity(p.pid) == EVERY_CPU  # the agent's stop puts it back
