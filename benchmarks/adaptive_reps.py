"""Adaptive repetition vs a fixed 10 repetitions on the bench_suite kernels, on this machine.

Per kernel and core count (1 and 2; size small; one warmup each), real runs through
bench_suite's runner: a fixed 10 runs, then adaptive runs (shared/point_stats.py: stop once the
95 % order-statistic interval of the median is within +-target, at least 6 runs, at most
--max-reps). Prints for each the interval (+- % of the median) and the runs used, and the
totals. Target: the adaptive points reach the interval of the fixed ones (or the target, where
10 runs are tighter than it) with at least 40 % fewer runs.

    python benchmarks/adaptive_reps.py [--target 0.02] [--max-reps 10] [--trials 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from opptune.bench_suite.catalogue import KERNELS
from opptune.bench_suite.runner import run_kernel
from opptune.shared.point_stats import StopRule, relative_ci, stop_reason

FIXED = 10


def _run(kernel: str, cpus: list[int]) -> float:
    return float(run_kernel(kernel, len(cpus), cpus, "small")["time_s"])


def measure(kernel: str, cpus: list[int], rule: StopRule) -> dict:
    _run(kernel, cpus)  # warmup, as a sweep does
    fixed = [_run(kernel, cpus) for _ in range(FIXED)]
    _run(kernel, cpus)
    values: list[float] = []
    spent = 0.0
    while True:
        values.append(_run(kernel, cpus))
        spent += values[-1]
        reason, rel = stop_reason(rule, values, len(values), spent)
        if reason:
            break
    return {"kernel": kernel, "cores": len(cpus), "fixed_ci": relative_ci(fixed),
            "adaptive_ci": rel, "adaptive_runs": len(values), "stop": reason}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=float, default=0.02)
    ap.add_argument("--max-reps", type=int, default=FIXED)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rule = StopRule(max_reps=args.max_reps, target_ci=args.target)
    cpus_all = sorted(os.sched_getaffinity(0))
    rows = []
    for _ in range(args.trials):
        for kernel in KERNELS:
            for n in (1, 2):
                if n <= len(cpus_all):
                    rows.append(measure(kernel, cpus_all[:n], rule))
    fixed_runs = FIXED * len(rows)
    adaptive_runs = sum(r["adaptive_runs"] for r in rows)
    # "as good as fixed 10": within the target, or within the fixed interval where that is wider
    as_good = sum(r["adaptive_ci"] is not None and
                  r["adaptive_ci"] <= max(args.target, r["fixed_ci"]) + 1e-12 for r in rows)
    summary = {
        "points": len(rows), "fixed_runs": fixed_runs, "adaptive_runs": adaptive_runs,
        "runs_saved": 1 - adaptive_runs / fixed_runs,
        "median_fixed_ci": statistics.median(r["fixed_ci"] for r in rows),
        "median_adaptive_ci": statistics.median(r["adaptive_ci"] if r["adaptive_ci"] is not None
                                                else float("inf") for r in rows),
        "points_as_good_as_fixed": as_good,
        "stops": {s: sum(r["stop"] == s for r in rows) for s in ("ci", "max_reps", "budget")},
        "target": args.target, "max_reps": args.max_reps, "loadavg": os.getloadavg(),
    }
    summary["met"] = summary["runs_saved"] >= 0.40 and as_good == len(rows)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}))
        return
    print(f"{'kernel':14} {'cores':>5} {'fixed10 +-%':>11} {'adaptive +-%':>12} {'runs':>5} stop")
    for r in rows:
        ad = "-" if r["adaptive_ci"] is None else f"{100 * r['adaptive_ci']:.2f}"
        print(f"{r['kernel']:14} {r['cores']:5d} {100 * r['fixed_ci']:11.2f} {ad:>12} "
              f"{r['adaptive_runs']:5d} {r['stop']}")
    s = summary
    print(f"\n{s['points']} points: fixed {s['fixed_runs']} runs, adaptive {s['adaptive_runs']} "
          f"runs ({100 * s['runs_saved']:.0f} % fewer); median interval +-"
          f"{100 * s['median_fixed_ci']:.2f} % (fixed 10) vs +-{100 * s['median_adaptive_ci']:.2f}"
          f" % (adaptive); {s['points_as_good_as_fixed']}/{s['points']} points as good as fixed "
          f"10 or within the target; stops {s['stops']}; load average {s['loadavg'][0]:.2f}")
    print(f"target (>= 40 % fewer runs, every point as good): {'met' if s['met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
