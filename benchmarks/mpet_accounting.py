"""MPET parameters of every bench_suite kernel at 1 and 2 threads, and how closely eq. 3 holds.

Runs each catalogue kernel --reps times per thread count on the first two allowed cpus, prints
a markdown table of the median run's t(n), R, l, w, c, d, s, j, U (accounting.py; R uses the
median one-thread time) and the identity's relative error, then the worst error over all runs.

    python3 benchmarks/mpet_accounting.py [--size small|default|large] [--reps 3]
"""
from __future__ import annotations

import argparse
import os
import sys

from opptune.bench_suite import KERNELS, run_kernel
from opptune.bench_suite.accounting import IDENTITY_RTOL, identity_time, with_redundancy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", help="size class (default: small)")
    ap.add_argument("--reps", type=int, default=3, help="runs per row (default: 3)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    print("| kernel | n | t(n) s | R | l | w | c | d | s | j | U | identity rel. err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst, runs = 0.0, 0
    for name, kernel in KERNELS.items():
        if args.size not in kernel.sizes:
            print(f"| {name} | no size class {args.size!r} |", file=sys.stderr)
            continue
        med = {}
        for n in (1, 2):
            rs = sorted((run_kernel(name, n, cpus, args.size) for _ in range(args.reps)),
                        key=lambda r: r["time_s"])
            med[n] = rs[len(rs) // 2]
            t1 = med[1]["time_s"]
            for r in rs:  # the identity on every run, not only the median
                p = with_redundancy(r["mpet"], t1)
                worst = max(worst, abs(identity_time(t1, p["R"], p["U"], n) / r["time_s"] - 1))
                runs += 1
        t1 = med[1]["time_s"]
        for n in (1, 2):
            r = med[n]
            p = with_redundancy(r["mpet"], t1)
            err = abs(identity_time(t1, p["R"], p["U"], n) / r["time_s"] - 1)
            cells = " | ".join(f"{p[k]:.4f}" for k in "lwcdsj")
            print(f"| {name} | {n} | {r['time_s']:.4f} | {p['R']:.3f} | {cells} | "
                  f"{p['U']:.3f} | {err:.1e} |")
    print(f"\nworst identity error {worst:.1e} over {runs} runs (tolerance {IDENTITY_RTOL:g})")
    return 0 if worst <= IDENTITY_RTOL else 1


if __name__ == "__main__":
    sys.exit(main())
