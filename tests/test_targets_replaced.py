"""A process or unit a configuration confined is let go when another configuration replaces it
(the daemon then says the first is "no longer in force"), and the agent's crash-safe record of
originals follows, so a restart after a kill -9 puts back only what is still changed.

The agent's real executor and worker; real child processes (this machine's /proc and
sched_setaffinity) and a unit's cgroup on a fake tree; clocks on a virtual odroid-xu4's tree
(two cpufreq policies). Every wait is on the worker's idle event."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
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
from test_idle_clock import pinned_at, work
from fake_trees import cgroup_tree
from test_targets import applied
from test_virtual_e2e import cpufreq_state

PY = sys.executable
EVERY_CPU = os.sched_getaffinity(0)

pytestmark = pytest.mark.skipif(len(EVERY_CPU) < 2 or not {0, 1} <= EVERY_CPU,
                                reason="confining to one of cpus 0 and 1 needs both")


@contextlib.contextmanager
def agent(tmp_path, board: str | None = None):
    """(executor, worker, targets, tree root): the agent's parts as it builds them, its cpu
    set record in the state directory; cpufreq from ``board``'s virtual tree when given (the
    cgroup tree lives there too), pid targets on this machine."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    if board:
        attach(make_tree(board, str(root)))
    state = str(tmp_path / "state")
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=state, sysfs_root=str(root),
                      workloads=[CommandWorkload("w", [PY, "-c", "print('{\"time_s\": 0.01}')"])])
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


def test_a_process_is_let_go_when_another_configuration_replaces_its_own(tmp_path, procs):
    first, second = procs
    with agent(tmp_path) as (ex, w, targets, _):
        work(w, config("c1", pid(first), cpus=[0]))
        assert os.sched_getaffinity(first.pid) == {0}
        assert recorded(tmp_path / "state") == [("c1", "affinity", first.pid)]
        work(w, config("c2", pid(second), cpus=[1]))
        assert [b["ok"] for b in applied(ex)] == [True, True]
        # c1 is no longer in force: its process runs where it ran before
        assert os.sched_getaffinity(first.pid) == EVERY_CPU
        assert os.sched_getaffinity(second.pid) == {1}
        assert ex.standing_wire()["config_id"] == "c2"
        # the record holds only what is still changed
        assert recorded(tmp_path / "state") == [("c2", "affinity", second.pid)]
        # a user moves the first process after it was let go; a kill -9 of the agent and its
        # restart put back the second only, leaving the user's choice alone
        os.sched_setaffinity(first.pid, {1})
        lines = restore_at_start(str(tmp_path / "state"), str(tmp_path / "root"))
        assert len(lines) == 1 and f"thread {second.pid}" in lines[0], lines
        assert f"thread {first.pid}" not in lines[0]
        assert os.sched_getaffinity(first.pid) == {1}
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


def test_a_unit_and_its_clock_are_let_go_for_a_process_on_another_policy(tmp_path, procs):
    """The xu4's policy0 holds cpus 0-3, policy4 cpus 4-7: the unit's configuration pinned
    policy4, the process's replaces it on cpu 1 (policy0), and a command's configuration left
    to the governor ends that one in turn."""
    with agent(tmp_path, "odroid-xu4") as (ex, w, targets, root):
        d = cgroup_tree(root, cpus="0-7")
        before = cpufreq_state(str(root))
        work(w, config("c1", {"kind": "unit", "unit": "web"}, cpus=[4], freq_khz=1_800_000))
        assert (d / "cpuset.cpus").read_text() == "4"
        assert pinned_at(str(root), 1_800_000, "policy4")
        work(w, config("c2", pid(procs[0]), cpus=[1], freq_khz=1_000_000))
        assert (d / "cpuset.cpus").read_text().strip() == "0-7"  # let go
        now = cpufreq_state(str(root))
        assert {k: v for k, v in now.items() if k.startswith("policy4/")} == \
            {k: v for k, v in before.items() if k.startswith("policy4/")}
        assert os.sched_getaffinity(procs[0].pid) == {1}
        assert pinned_at(str(root), 1_000_000)
        assert recorded(tmp_path / "state") == [("c2", "affinity", procs[0].pid)]
        work(w, config("c3", None, cpus=[0, 1]))  # the workload, the governor's clock
        assert [b["ok"] for b in applied(ex)] == [True] * 3
        assert os.sched_getaffinity(procs[0].pid) == EVERY_CPU
        assert cpufreq_state(str(root)) == before
        assert recorded(tmp_path / "state") == [] and ex.standing_wire() is None


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
        assert recorded(tmp_path / "state") == [("c2", "affinity", second.pid)]
    assert caplog.records == []


def test_a_replacement_that_fails_leaves_the_configuration_in_force_confined(tmp_path, procs,
                                                                            caplog):
    """The unit's cgroup has no cpuset.cpus (the controller not enabled): the replacement is
    refused after the first process was let go, which is confined again."""
    caplog.set_level(logging.INFO, "opptune.agent.standing")
    first = procs[0]
    with agent(tmp_path) as (ex, w, targets, root):
        (cgroup_tree(root) / "cpuset.cpus").unlink()
        work(w, config("c1", pid(first), cpus=[0]))
        work(w, config("c2", {"kind": "unit", "unit": "web"}, cpus=[1]))
        ok, refused = applied(ex)
        assert ok["ok"] and not refused["ok"] and "has no cpuset.cpus" in refused["error"]
        assert os.sched_getaffinity(first.pid) == {0}
        assert ex.standing_wire()["config_id"] == "c1"
        assert recorded(tmp_path / "state") == [("c1", "affinity", first.pid)]
        assert "applied configuration c1 (w on cpus 0 with no set frequency, process " \
               f"{first.pid}): its target confined again" in caplog.text


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
