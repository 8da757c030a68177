"""Measurement overhead the agent adds to one run, on this machine.

Times (median of N): perf counter setup + read (the exec-gated spawn vs a plain Popen of
/bin/true), energy meter start/stop, and setting + verifying a frequency on a fake tree (the
sysfs writes and the verification read; a real board adds the hardware's settle time, which
the agent waits for with a bounded poll), and the interference accounting of a run (two
/proc/stat reads, /proc/loadavg; target < 0.5 ms), with what a marked run adds to name the
offender. Target: < 1 ms per run plus the settle time.

    python benchmarks/agent_overhead.py [-n 200]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
import time

from opptune.agent.knobs.cpufreq import CpuFreq
from opptune.agent.meters.energy import EnergyMeter
from opptune.agent.meters.interference import InterferenceMeter, proc_ticks
from opptune.agent.meters.perf import PerfSession
from opptune.agent.runner import RunSpec
from opptune.agent.sysfs import SysFS
from opptune.agent.topology import read_topology
from opptune.agent.virtual_board import make_tree
from opptune.shared.records import RunRecord


def _median_ms(fn, n: int) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def _time_fake_kernel(fs) -> list[float]:
    """Wrap the fake tree's kernel-emulation hooks; returns the list their durations go to."""
    spent: list[float] = []
    for name in ("before_write", "after_write"):
        hook = getattr(fs, name)
        if hook is None:
            continue

        def timed(*a, _hook=hook):
            t0 = time.perf_counter()
            try:
                return _hook(*a)
            finally:
                spent.append(time.perf_counter() - t0)
        setattr(fs, name, timed)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    n = ap.parse_args().n
    rows = []

    def plain():
        subprocess.Popen(["/bin/true"]).wait()

    def gated():
        s = PerfSession()
        s.spawn(["/bin/true"]).wait()
        s.stop()

    def inherit():
        s = PerfSession().start()
        subprocess.Popen(["/bin/true"]).wait()
        s.stop()

    def counters_only():
        s = PerfSession().start()
        s.stop()

    base = _median_ms(plain, n)
    rows.append(("spawn /bin/true, no counters (reference)", base))
    rows.append(("perf open+enable+read+close, 14 events", _median_ms(counters_only, n)))
    rows.append(("spawn with counters, inherit mode: added", _median_ms(inherit, n) - base))
    rows.append(("spawn with counters, exec gate: added", _median_ms(gated, n) - base))

    # the share set out of reach: every run takes the unmarked path, which every run pays
    meter = InterferenceMeter("/", max_share=0.999)
    spec = RunSpec("w", "s", [0], 1)
    rec = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1, rep=0)
    ru = resource.getrusage(resource.RUSAGE_SELF)

    def interference():
        meter.start(spec)
        meter.stop(rec, {"rusage": ru, "pid": None, "json": None})
    rows.append(("interference start+stop, this machine's /proc (per run)",
                 _median_ms(interference, n)))
    nproc = len(proc_ticks(SysFS("/")))
    rows.append((f"  marked runs only: one scan of {nproc} processes (two, {meter.window_s:g} s "
                 "apart)", _median_ms(lambda: proc_ticks(SysFS("/")), max(5, n // 20))))

    with tempfile.TemporaryDirectory() as tmp:
        for board, settings in (("odroid-xu4", [{"policy4": 1000000}, {"policy4": 1800000}]),
                                ("x86-2numa", [{"policy0": 1500000}, {"policy0": 3000000}])):
            root = make_tree(board, f"{tmp}/{board}")
            cf = CpuFreq(root, state_dir=f"{tmp}/{board}-state", install_handlers=False)
            i = [0]
            emulated = _time_fake_kernel(cf.fs)

            def flip():
                emulated.clear()
                t0 = time.perf_counter()
                cf.set(settings[i[0] % 2])
                i[0] += 1
                return (time.perf_counter() - t0) * 1e3, sum(emulated) * 1e3
            samples = [flip() for _ in range(n)]
            method = cf.policies()[0]["method"]
            rows.append((f"set+verify one policy ({board}, {method}), fake tree",
                         statistics.median(t for t, _ in samples)))
            # The fake tree emulates the kernel's cpufreq reaction in Python on every write;
            # on a board the kernel does that. The agent's own share excludes it.
            rows.append(("  of which the agent's own work (fake-kernel time excluded)",
                         statistics.median(t - e for t, e in samples)))
            cf.close()
            m = EnergyMeter.discover(root, sample_interval_s=0.01)
            rows.append((f"energy start+stop ({m.backend.source})",
                         _median_ms(lambda: m.start().stop(), n)))
        root = make_tree("x86-2numa", f"{tmp}/topo")
        rows.append(("read_topology x86-2numa (once per agent start)",
                     _median_ms(lambda: read_topology(root), max(5, n // 20))))
    rows.append(("read_topology this machine (once per agent start)",
                 _median_ms(lambda: read_topology("/"), max(5, n // 20))))
    width = max(len(r[0]) for r in rows)
    print(f"agent overhead per run, median of {n} (ms)")
    for name, ms in rows:
        print(f"  {name:<{width}}  {ms:8.3f}")


if __name__ == "__main__":
    main()
