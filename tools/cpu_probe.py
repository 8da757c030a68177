"""Run one bench_suite kernel on each cpu alone, then on neighbouring pairs, to tell a slow cpu
from a kernel that scales superlinearly.

On the 16-core machine (data/bench_suite_xeon16/SOURCE.md) fib_tasks and wavefront ran 3.0x
and 2.9x faster on 2 cores than on 1, with more cpu time on 1 core than on 2 together, while
the other kernels doubled. A cpu the host shares (its time counted as the guest's user time
where steal is not accounted) would show here as one cpu slower than the others for every
kernel; a kernel effect as the same time on every cpu. On 2026-11-27 it showed a third case:
single-cpu times that differ between cpus and over minutes, the slow cpu not the same for two
kernels, without steal (the guest's single-thread speed wanders). Prints one line per run and,
per cpu set, the median time, the threads' cpu time and the steal the kernel saw (/proc/stat).

    python tools/cpu_probe.py fib_tasks [--size default] [--reps 2] [--cpus 0-15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def _steal() -> dict[int, int]:
    """Steal ticks per cpu (the 8th field of each cpuN line); empty where not counted."""
    out = {}
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                f = line.split()
                if f[0].startswith("cpu") and f[0] != "cpu" and len(f) > 8:
                    out[int(f[0][3:])] = int(f[8])
    except OSError:
        pass
    return out


def _run(kernel: str, cpus: list[int], size: str) -> dict:
    before = _steal()
    p = subprocess.run([sys.executable, "-m", "opptune.bench_suite", "run", kernel,
                        "--threads", str(len(cpus)), "--cpus", ",".join(map(str, cpus)),
                        "--size", size], capture_output=True, text=True, timeout=600)
    after = _steal()
    if p.returncode != 0:
        raise SystemExit(f"cpu_probe: {kernel} on cpus {cpus} failed: {p.stderr.strip()}")
    r = json.loads(p.stdout)
    return {"cpus": cpus, "time_s": r["time_s"],
            "cpu_s": sum(t["cpu_s"] for t in r["thread_stats"]),
            "steal_ticks": sum(after.get(c, 0) - before.get(c, 0) for c in cpus)}


def _cpus(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernel")
    ap.add_argument("--size", default="default")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cpus", help="cpus to probe, e.g. 0-15 (default: this process's)")
    ap.add_argument("--json", action="store_true", help="one JSON line per run on stdout")
    args = ap.parse_args(argv)
    cpus = _cpus(args.cpus) if args.cpus else sorted(os.sched_getaffinity(0))
    sets = [[c] for c in cpus] + [cpus[i:i + 2] for i in range(0, len(cpus) - 1, 2)]
    for s in sets:
        runs = [_run(args.kernel, s, args.size) for _ in range(args.reps)]
        if args.json:
            for r in runs:
                print(json.dumps({"kernel": args.kernel, **r}))
            continue
        print(f"{args.kernel} cpus {','.join(map(str, s)):>6}: "
              f"time {statistics.median(r['time_s'] for r in runs):7.3f} s  "
              f"cpu {statistics.median(r['cpu_s'] for r in runs):7.3f} s  "
              f"steal {max(r['steal_ticks'] for r in runs)} ticks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
