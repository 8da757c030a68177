"""The heartbeat's look at the configurations in force (agent/target_watch.py): its CPU cost
and how long it holds the link's thread.

Ten pid configurations (idle child processes of this script, four of them listed in a unit's
cgroup, ``/proc/PID/cgroup`` written in the tree as the kernel says it) and three unit
configurations on a fake cgroup v2 tree, called as the link calls it at each heartbeat
(``Executor.notice_exited``), ``-n`` times. Two cases:

* ``running``: the three units run (cgroup.events ``populated 1``): no systemd, no systemctl;
* ``systemd, stopped``: under systemd (a fake ``systemctl`` that answers ``ActiveState=active``
  after ``--systemctl-ms``), the three units' cgroups empty (a unit restarting): systemd is
  asked. The link's thread waits on it where the look is made on that thread. Heartbeats
  are paced ``--interval`` apart (a look made off the link's thread has the time to end).

Prints, per case, the CPU time (user + sys of this process, all its threads, children
excluded) per heartbeat and the wall time the link's thread spends in each, in microseconds
(median of ``--rounds``).

    python benchmarks/target_watch.py [-n 300] [--rounds 5] [--systemctl-ms 20]
                                      [--interval 0.2] [--json]

Measured on the 2-core development VM, 2026-11-28 03:23-03:25 (load average 4.4-5.8), ``-n
1000``, the code before the unitwatch branch and after it in turns: running, 72 / 79 us of
CPU per heartbeat before, 133 / 116 us after (the ten /proc/PID/cgroup reads that notice a
process moved into a confined unit); systemd with the units stopped, 2.3-2.6 ms of CPU per
heartbeat either way (three systemctl started), the link's thread held 77-80 ms per heartbeat
before, 0.7-1.2 ms after (systemctl runs on a thread of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opptune.agent.apply import Executor
from opptune.agent.outbox import Outbox
from opptune.agent.platform import discover
from opptune.agent.runner import Runner
from opptune.agent.sysfs import SysFS
from opptune.agent.targets import Targets
from opptune.agent.workloads import Workloads
from opptune.shared.config import AgentConfig, CommandWorkload

PIDS, UNITS, IN_UNIT = 10, 3, 4


def _tree(root: Path, procs: list[subprocess.Popen], populated: bool) -> None:
    base = root / "sys/fs/cgroup"
    (base / "system.slice").mkdir(parents=True, exist_ok=True)
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for i in range(UNITS):
        d = base / "system.slice" / f"u{i}.service"
        d.mkdir(exist_ok=True)
        (d / "cpuset.cpus").write_text("0-1\n")
        (d / "cgroup.events").write_text(f"populated {int(populated)}\nfrozen 0\n")
        (d / "cgroup.procs").write_text("".join(f"{p.pid}\n" for p in procs[:IN_UNIT])
                                        if i == 0 and populated else "")
    for k, p in enumerate(procs):
        d = root / "proc" / str(p.pid)
        d.mkdir(parents=True, exist_ok=True)
        where = "/system.slice/u0.service" if k < IN_UNIT else "/user.slice"
        (d / "cgroup").write_text(f"0::{where}\n")


def _executor(tmp: Path, targets: Targets, procs: list[subprocess.Popen]) -> Executor:
    state = str(tmp / "state")
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=state, sysfs_root="/",
                      workloads=[CommandWorkload("w", ["/bin/true"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"]), Outbox(state),
                  send=lambda m: None, state_dir=state, targets=targets)
    base = {"workload": "w", "size": "default", "cpus": [0], "threads": 1, "freq_khz": None}
    ex.standing_configs = (
        [{**base, "config_id": f"p{k}", "target": {"kind": "pid", "pid": p.pid}}
         for k, p in enumerate(procs)]
        + [{**base, "config_id": f"u{i}", "target": {"kind": "unit", "unit": f"u{i}.service"}}
           for i in range(UNITS)])
    ex._pid_starts = {f"p{k}": _start(p.pid) for k, p in enumerate(procs)}
    ex._in_unit = {f"p{k}": "u0.service" for k in range(IN_UNIT)}
    return ex


def _start(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])


def _systemctl(tmp: Path, ms: int) -> str:
    fake = tmp / "systemctl"
    fake.write_text(f"#!/bin/sh\nsleep {ms / 1000:.3f}\n"
                    "printf 'LoadState=loaded\\nActiveState=active\\n'\n")
    fake.chmod(0o755)
    return str(fake)


def _time(ex: Executor, n: int, interval: float) -> tuple[float, float]:
    """(CPU of this process, wall of the call) microseconds per call of the heartbeat's look,
    calls ``interval`` s apart (0: back to back)."""
    ex.notice_exited()  # caches warm, as at a heartbeat after the first
    time.sleep(interval)
    wall = 0.0
    c0 = time.process_time()
    for _ in range(n):
        w0 = time.perf_counter()
        if ex.notice_exited():
            raise SystemExit("the look found a target gone: the set-up is wrong")
        wall += time.perf_counter() - w0
        if interval:
            time.sleep(interval)  # the heartbeat period
    return (time.process_time() - c0) / n * 1e6, wall / n * 1e6


def measure(n: int, rounds: int, systemctl_ms: int, interval: float
            ) -> dict[str, dict[str, float]]:
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE) for _ in range(PIDS)]
    out: dict[str, dict[str, float]] = {}
    try:
        for case, populated in (("running", True), ("systemd, stopped", False)):
            with tempfile.TemporaryDirectory() as td:
                tmp = Path(td)
                _tree(tmp / "root", procs, populated)
                systemd = not populated
                targets = Targets(SysFS(str(tmp / "root")), systemd=systemd,
                                  systemctl=_systemctl(tmp, systemctl_ms) if systemd else None)
                ex = _executor(tmp, targets, procs)
                # a stopped unit is asked at most once per heartbeat: fewer calls, same cost
                calls = n if populated else max(3, n // 30)
                got = [_time(ex, calls, 0.0 if populated else interval)
                       for _ in range(rounds)]
                close = getattr(ex, "close", None)  # an agent before its systemd look has none
                if close is not None:
                    close()
                ex.outbox.close()
            out[case] = {"cpu_us": round(statistics.median(c for c, _ in got), 1),
                         "wall_us": round(statistics.median(w for _, w in got), 1),
                         "calls": calls}
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=300, help="heartbeats per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--systemctl-ms", type=int, default=20,
                    help="how long the fake systemctl takes to answer")
    ap.add_argument("--interval", type=float, default=0.2,
                    help="seconds between heartbeats where the units are stopped")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = measure(args.n, args.rounds, args.systemctl_ms, args.interval)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_1min": load, **res}))
        return
    print(f"heartbeat look, {PIDS} pids ({IN_UNIT} in a unit) and {UNITS} units "
          f"(load {load:.2f}):")
    for case, r in res.items():
        print(f"  {case:18s} cpu {r['cpu_us']:9.1f} us   link thread wall {r['wall_us']:9.1f} "
              f"us per heartbeat ({r['calls']} heartbeats x {args.rounds})")


if __name__ == "__main__":
    main()
