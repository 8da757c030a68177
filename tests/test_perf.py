"""perf_event_open via ctypes on this machine: no hardware PMU, real software events."""

import os
import subprocess
import sys

import pytest

from opptune.agent.meters import perf
from opptune.agent.meters.perf import DEFAULT_EVENTS, EVENTS, PerfSession

BUSY = [sys.executable, "-c", "x = 0\nfor i in range(2500000): x += i"]
HW = [n for n, (t, _) in EVENTS.items() if t != perf.PERF_TYPE_SOFTWARE]
SW = ["task-clock", "page-faults", "context-switches", "cpu-migrations"]
HAS_PMU = os.path.exists("/sys/bus/event_source/devices/cpu") or os.path.exists(
    "/sys/bus/event_source/devices/armv8_pmuv3_0")


def test_syscall_numbers():
    assert perf.syscall_number("x86_64") == 298
    assert perf.syscall_number("aarch64") == 241
    assert perf.syscall_number("armv7l") is None or perf.syscall_number("arm") == 364
    assert perf.syscall_number("riscv64") == 241


def _check(counters, invalid, scaling):
    for name in HW:
        if counters[name] is None:
            assert invalid[name].startswith("perf_event_open:"), invalid[name]
        else:
            assert counters[name] > 0
    if not HAS_PMU:
        assert all(counters[n] is None for n in HW)
        assert counters["ipc"] is None and "needs" in invalid["ipc"]
    for name in SW:
        assert counters[name] is not None and name not in invalid
        assert scaling[name] == pytest.approx(1.0)
    assert counters["page-faults"] > 100  # a fresh python interpreter faults in its pages


def test_spawn_counts_only_the_workload():
    s = PerfSession()
    proc = s.spawn(BUSY)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    counters, invalid, scaling = s.stop()
    assert proc.returncode == 0
    _check(counters, invalid, scaling)
    cpu_s = ru.ru_utime + ru.ru_stime
    assert cpu_s > 0.1
    assert counters["task-clock"] / 1e9 == pytest.approx(cpu_s, rel=0.15, abs=0.02)


def test_start_stop_counts_child_tree():
    # The child starts a grandchild: inherit=1 must count both.
    tree = [sys.executable, "-c",
            "import subprocess, sys; subprocess.run(sys.argv[1:])"] + BUSY
    before = os.times()
    with PerfSession() as s:
        subprocess.run(tree, check=True)
    after = os.times()
    counters, invalid, scaling = s.result
    _check(counters, invalid, scaling)
    child_cpu = (after.children_user - before.children_user
                 + after.children_system - before.children_system)
    assert counters["task-clock"] / 1e9 == pytest.approx(child_cpu, rel=0.2, abs=0.05)


def test_derived_ratios_and_multiplex_scaling(monkeypatch):
    s = PerfSession(["cycles", "instructions", "branches", "branch-misses", "task-clock"])
    s.fds = {n: -1 for n in s.events}
    raw = {"cycles": (1000, 10, 5), "instructions": (1500, 10, 5), "branches": (300, 10, 10),
           "branch-misses": (0, 10, 10), "task-clock": (7, 0, 0)}
    monkeypatch.setattr(s, "read", lambda: raw)
    monkeypatch.setattr(s, "close", lambda: None)
    monkeypatch.setattr(perf.fcntl, "ioctl", lambda *a: 0)
    c, inv, sc = s.stop()
    assert c["cycles"] == 2000 and sc["cycles"] == 0.5  # scaled for multiplexing
    assert c["ipc"] == pytest.approx(1.5)
    assert c["branches_per_instruction"] == pytest.approx(300 / 3000)
    assert c["branch_miss_rate"] == 0.0  # a real zero stays zero
    assert c["task-clock"] is None and "never enabled" in inv["task-clock"]


def test_unknown_event_is_refused():
    with pytest.raises(ValueError, match="known"):
        PerfSession(["cycles", "bogus"])
    assert set(DEFAULT_EVENTS) == set(EVENTS)
