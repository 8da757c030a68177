"""perf_event_open via ctypes on this machine: no hardware PMU, real software events."""

import errno
import json
import os
import struct
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


# __NR_perf_event_open as the kernel's tables give it (torvalds/linux), per syscall ABI:
# syscall_64.tbl 298, syscall_32.tbl 336, arch/arm/tools/syscall.tbl 364, asm-generic/unistd.h
# 241, powerpc syscall.tbl 319, s390 syscall.tbl 331. A wrong edit of the agent's table fails.
KERNEL_NR = {"x86_64": 298, "i386": 336, "arm": 364, "aarch64": 241, "riscv64": 241,
             "riscv32": 241, "loongarch64": 241, "ppc": 319, "ppc64": 319, "s390": 331,
             "s390x": 331}

# (uname machine, pointer bits of the process) -> the number that process must use
MACHINES = [
    ("x86_64", 64, 298), ("amd64", 64, 298), ("i686", 32, 336), ("i386", 32, 336),
    ("x86_64", 32, 336),  # i386 userland on an x86_64 kernel
    ("aarch64", 64, 241), ("arm64", 64, 241),
    ("armv7l", 32, 364), ("armv6l", 32, 364), ("armv5tel", 32, 364),
    ("armv8l", 32, 364),  # armhf userland on an arm64 kernel under linux32
    ("aarch64", 32, 364),  # armhf userland on an arm64 kernel: the compat (arm) table
    ("riscv64", 64, 241), ("loongarch64", 64, 241),
    ("ppc64le", 64, 319), ("ppc64", 64, 319), ("ppc64", 32, 319), ("ppc", 32, 319),
    ("s390x", 64, 331), ("s390x", 32, 331),
]


def test_syscall_table_matches_the_kernels_tables():
    assert perf.SYSCALL_NR == KERNEL_NR


@pytest.mark.parametrize("machine,bits,nr", MACHINES)
def test_machine_names_map_to_the_process_abis_number(machine, bits, nr):
    assert perf.syscall_number(machine, bits, multiarch="") == nr


def test_unknown_machines_and_x32_have_no_number():
    assert perf.syscall_number("mips64", 64, multiarch="") is None
    assert perf.syscall_number("armv7l", 64, multiarch="") is None  # no 64-bit arm32
    assert perf.syscall_number("x86_64", 32, multiarch="x86_64-linux-gnux32") is None


def test_this_interpreter_has_a_number():
    import struct
    nr = perf.syscall_number()
    assert nr == KERNEL_NR[perf.process_abi()]
    if os.uname().machine == "x86_64":
        assert nr == (298 if struct.calcsize("P") == 8 else 336)


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


class _FakePMU:
    """A PMU without some events: perf_event_open fails for them with the given errno, and
    every other counter is a pipe holding (value, enabled, running)."""

    def __init__(self, lacks: dict[str, int]):
        self.lacks = {perf.EVENTS[n]: e for n, e in lacks.items()}
        self.fds: list[int] = []

    def open(self, type_, config, pid, flags):
        if (type_, config) in self.lacks:
            e = self.lacks[(type_, config)]
            raise OSError(e, os.strerror(e))
        r, w = os.pipe()
        os.write(w, struct.pack("QQQ", 1000 + config, 10, 10))
        os.close(w)
        self.fds.append(r)
        return r


LACKS = {"branches": errno.ENOENT, "LLC-loads": errno.EOPNOTSUPP,
         "LLC-load-misses": errno.EINVAL}


@pytest.fixture
def fake_pmu(monkeypatch):
    pmu = _FakePMU(LACKS)
    monkeypatch.setattr(perf, "perf_event_open", pmu.open)
    monkeypatch.setattr(perf.fcntl, "ioctl", lambda *a: 0)
    return pmu


def test_an_event_the_pmu_lacks_is_unavailable_by_name_and_the_others_count(fake_pmu):
    from opptune.shared.records import RunRecord
    meter = perf.PerfMeter()
    meter.start(None)
    rec = RunRecord(platform="p", workload="w", input="i", cores=1, cpus=[0], threads=1, rep=0)
    meter.stop(rec, {})
    assert rec.invalid["counter:branches"].startswith("perf_event_open: ENOENT")
    assert "Operation not supported" in rec.invalid["counter:LLC-loads"]
    assert "EINVAL" in rec.invalid["counter:LLC-load-misses"]
    assert rec.counters["branches"] is None and rec.counters["LLC-loads"] is None
    for name in set(EVENTS) - set(LACKS):
        assert rec.counters[name] == 1000 + EVENTS[name][1], name
        assert f"counter:{name}" not in rec.invalid
    assert rec.counters["ipc"] == pytest.approx(1001 / 1000)  # instructions / cycles
    assert rec.counters["branch_miss_rate"] is None  # needs the missing branches
    assert "counter:branches_per_instruction" in rec.invalid


def test_platform_facts_name_the_events_the_pmu_lacks(fake_pmu):
    from opptune.agent.platform import perf_availability
    facts = perf_availability("/")
    assert facts["available"] is True
    assert set(facts["unavailable"]) == set(LACKS)
    assert "ENOENT" in facts["unavailable"]["branches"]
    assert "cycles" in facts["events"] and "branches" not in facts["events"]
    assert facts["syscall_nr"] == perf.syscall_number()


def test_default_events_are_generic_ones_the_arm_pmu_drivers_map():
    # armv7 (perf_event_v7.c) and PMUv3 (arm_pmuv3.c) map these generic ids; no raw codes
    hw = {n: c for n, (t, c) in EVENTS.items() if t == perf.PERF_TYPE_HARDWARE}
    assert set(hw.values()) <= set(range(0, 10))  # enum perf_hw_id
    assert all(t in (perf.PERF_TYPE_HARDWARE, perf.PERF_TYPE_HW_CACHE, perf.PERF_TYPE_SOFTWARE)
               for t, _ in EVENTS.values())


_DROPPED = r"""
import json, os, sys
from opptune.agent.child import resolve_run_as, spawn
from opptune.agent.meters.perf import PerfSession
s = PerfSession().start()
proc = spawn(json.loads(sys.argv[1]), dict(os.environ), None, None, None,
             resolve_run_as("nobody"))
_, status, ru = os.wait4(proc.pid, 0)
counters, invalid, _ = s.stop()
print(json.dumps({"task_clock": counters["task-clock"], "cpu_s": ru.ru_utime + ru.ru_stime,
                  "status": status, "effective": open("/proc/self/status").read()
                  .split("CapEff:")[1].split()[0]}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"),
                    reason="needs root and setpriv (util-linux) to drop capabilities")
def test_perf_counters_follow_a_workload_dropped_to_run_as_without_ptrace():
    """The agent's unit kept CAP_SYS_PTRACE "to attach perf counters to a workload of another
    user", which lets uid 0 write any process's memory through /proc/PID/mem. The runner opens
    the counters on its own thread and the child inherits them before it drops to run_as:
    counted with the unit's capabilities only (systemd/opptune-agent.service)."""
    caps = "-all,+setuid,+setgid,+kill,+sys_nice"
    # a shell loop: this interpreter may sit where nobody cannot reach it (a 0700 home)
    busy = ["/bin/sh", "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"]
    res = subprocess.run(["/usr/bin/setpriv", "--bounding-set", caps, "--inh-caps=-all",
                          sys.executable, "-c", _DROPPED, json.dumps(busy)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["status"] == 0 and int(got["effective"], 16) & (1 << 19) == 0  # no SYS_PTRACE
    assert got["cpu_s"] > 0.1
    assert got["task_clock"] / 1e9 == pytest.approx(got["cpu_s"], rel=0.2, abs=0.05)
