"""A run's wall_s is the program's: from the child's last step before exec to its reaping. The
agent's own start (its fork, the uid change, its Python in the child) is left out and said in
extra["start_cost_s"]; a child that gives no time leaves the agent's start, unmarked."""

from __future__ import annotations

import os
import pwd
import time

import pytest

from opptune.agent import child as child_mod
from opptune.agent.child import resolve_run_as
from opptune.agent.runner import Runner
from opptune.agent.runspec import RunSpec
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload
from opptune.shared.records import RunRecord

CPU = max(os.sched_getaffinity(0))
PROGRAM_S = 0.2  # what the program itself takes (sleep): wall_s never less


def _slow_start(monkeypatch, seconds: float) -> None:
    """Make the agent's step between fork and exec take ``seconds``: the child's pre-exec
    code asks getppid whether the agent still lives, and this one sleeps first (it runs in
    the child, so the test process is not slowed)."""
    real = os.getppid

    def slow_getppid() -> int:
        time.sleep(seconds)
        return real()
    monkeypatch.setattr(os, "getppid", slow_getppid)


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # the clock the runner measures with


class WindowMeter:
    """Records when the runner started and stopped its meters (the knob/meter window)."""
    name = "window"

    def start(self, spec):
        self.t0 = now_ns()

    def stop(self, record, ctx):
        self.t1 = now_ns()


def _run(run_as=None, meters=None) -> RunRecord:
    cfg = AgentConfig(bench_kernels=[], workloads=[
        CommandWorkload("nap", ["/bin/sleep", str(PROGRAM_S)])])
    runner = Runner(Workloads(cfg, catalogue={}), "p", timeout_s=60, run_as=run_as,
                    meters=meters)
    return runner.run_once(RunSpec("nap", "default", [CPU], 1))


@pytest.mark.parametrize("user", [None, "nobody"])
def test_wall_s_leaves_the_agents_start_out_and_keeps_the_program(monkeypatch, user):
    if user is not None and (os.geteuid() != 0
                             or not any(p.pw_name == user for p in pwd.getpwall())):
        pytest.skip("run_as needs root and a user 'nobody'")
    slow = 1.5
    _slow_start(monkeypatch, slow)
    meter = WindowMeter()
    rec = _run(resolve_run_as(user) if user else None, [meter])
    assert rec.ok, rec.error
    # before: wall_s >= 1.7 s, the slow start in it; the margin (1.3 s) is the load's
    assert PROGRAM_S <= rec.wall_s < slow
    assert rec.time_s == rec.wall_s  # a command without its own time: its wall time
    assert slow <= rec.extra["start_cost_s"] < 60
    # the meters' window holds the start and the program
    assert (meter.t1 - meter.t0) / 1e9 >= rec.wall_s + rec.extra["start_cost_s"]
    assert not rec.invalid.get("wall_s") and rec.marked is None
    RunRecord.from_dict(rec.to_dict())  # the daemon takes it (extra is free-form)


@pytest.mark.parametrize("said", [None, 0, 1 << 62])
def test_a_child_that_gives_no_usable_time_measures_from_the_agents_start(monkeypatch, said):
    """No time written (None), or one outside the run (a clock it did not share): wall_s
    starts before the fork as before, and nothing says otherwise."""
    slow = 0.5
    _slow_start(monkeypatch, slow)
    monkeypatch.setattr(child_mod, "_read_start", lambda fd: said)
    rec = _run()
    assert rec.ok, rec.error
    assert rec.wall_s >= PROGRAM_S + slow
    assert "start_cost_s" not in rec.extra and "wall_s" not in rec.invalid
    assert rec.time_s == rec.wall_s


def test_a_points_budget_counts_the_start_wall_s_leaves_out():
    """An adaptive point's budget is the board's time: wall_s and the agent's start."""
    from opptune.agent.apply import board_seconds
    rec = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1,
                    rep=0, time_s=0.25, wall_s=0.5, extra={"start_cost_s": 0.125})
    assert board_seconds(rec) == 0.625
    rec.extra = {}  # an older agent's record: its wall_s holds the start
    assert board_seconds(rec) == 0.5
    rec.wall_s = None
    assert board_seconds(rec) == 0.25
