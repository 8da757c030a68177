"""Adaptive repetition vs a fixed 10 repetitions on the bench_suite kernels, on this machine.

Per kernel and core count (1 and 2; one warmup each), real runs through bench_suite's runner:
a fixed 10 runs and, interleaved with them, adaptive runs (shared/point_stats.py: stop once
the 95 % interval of the median is within +-target, at least --min-reps runs, at most
--max-reps). Both are scored with the same estimator (point_stats.relative_ci, from pyperf's
median and stdev).

Size: by default each kernel runs at the size, between its "small" and "default" classes
(geometric steps), whose one-core run first takes --run-s (0.1 s) or more. "small" runs take a
few ms, where a scheduler tick or a page fault is a sizeable share of a run: that measures the
machine's jitter rather than a workload's. Sweeps run "default" (1-2 s a run on a board),
which would make this benchmark take most of an hour; 0.1 s runs are long against that jitter
and keep it to a few minutes. --size CLASS runs a size class instead.

Prints per point the interval (+- % of the median) of both and the runs used, then the totals:
the runs saved, the median intervals, and the share of points where the adaptive interval is
within the target or at least as tight as the fixed one. Target: >= 40 % fewer runs with a
median adaptive interval within the target or the fixed one's, on a quiet machine.

    python benchmarks/adaptive_reps.py [--target 0.02] [--max-reps 10] [--min-reps 3]
        [--trials 2] [--run-s 0.1 | --size small] [--json]
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
SIZE_STEPS = 10  # geometric steps from "small" to "default" when calibrating a size


def _run(kernel: str, cpus: list[int], size: str | int) -> float:
    return float(run_kernel(kernel, len(cpus), cpus, size)["time_s"])


def calibrated_size(kernel: str, cpu: int, run_s: float) -> int:
    """The first size from "small" towards "default" (geometric steps) whose one-core run
    takes ``run_s`` or more (the fastest of 3 runs: the least disturbed by other work);
    "default" if none does."""
    small, default = KERNELS[kernel].sizes["small"], KERNELS[kernel].sizes["default"]
    for step in range(SIZE_STEPS + 1):
        size = max(small, round(small * (default / small) ** (step / SIZE_STEPS)))
        if min(_run(kernel, [cpu], size) for _ in range(3)) >= run_s:
            return size
    return default


def measure(kernel: str, cpus: list[int], size: str | int, rule: StopRule) -> dict:
    """A fixed 10 runs and the adaptive runs of one point, interleaved (fixed, adaptive,
    fixed, ...) so that both see the same conditions of a machine whose load drifts."""
    _run(kernel, cpus, size)  # warmup, as a sweep does
    fixed: list[float] = []
    values: list[float] = []
    spent = 0.0
    reason = rel = None
    while len(fixed) < FIXED or reason is None:
        if len(fixed) < FIXED:
            fixed.append(_run(kernel, cpus, size))
        if reason is None:
            values.append(_run(kernel, cpus, size))
            spent += values[-1]
            reason, rel = stop_reason(rule, values, len(values), spent)
    return {"kernel": kernel, "cores": len(cpus), "size": size,
            "median_s": statistics.median(fixed), "fixed_ci": relative_ci(fixed),
            "adaptive_ci": rel, "adaptive_runs": len(values), "stop": reason}


def summarise(rows: list[dict], target: float) -> dict:
    fixed_runs = FIXED * len(rows)
    adaptive_runs = sum(r["adaptive_runs"] for r in rows)
    # within the target, or at least as tight as fixed 10 where that is wider
    as_good = sum(r["adaptive_ci"] is not None and
                  r["adaptive_ci"] <= max(target, r["fixed_ci"]) + 1e-12 for r in rows)
    med_fixed = statistics.median(r["fixed_ci"] for r in rows)
    med_adaptive = statistics.median(r["adaptive_ci"] if r["adaptive_ci"] is not None
                                     else float("inf") for r in rows)
    saved = 1 - adaptive_runs / fixed_runs
    return {
        "points": len(rows), "fixed_runs": fixed_runs, "adaptive_runs": adaptive_runs,
        "runs_saved": saved, "median_fixed_ci": med_fixed, "median_adaptive_ci": med_adaptive,
        "points_as_good": as_good, "share_as_good": as_good / len(rows),
        "stops": {s: sum(r["stop"] == s for r in rows) for s in ("ci", "max_reps", "budget")},
        "met": saved >= 0.40 and med_adaptive <= max(target, med_fixed) + 1e-12,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=float, default=0.02)
    ap.add_argument("--max-reps", type=int, default=FIXED)
    ap.add_argument("--min-reps", type=int, default=StopRule(FIXED).min_reps)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--run-s", type=float, default=0.1,
                    help="calibrate each kernel's size to one-core runs of this long")
    ap.add_argument("--size", help="a size class (e.g. small, default) instead of --run-s")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rule = StopRule(max_reps=args.max_reps, target_ci=args.target, min_reps=args.min_reps)
    cpus_all = sorted(os.sched_getaffinity(0))
    load_before = os.getloadavg()
    sizes = {k: args.size or calibrated_size(k, cpus_all[0], args.run_s) for k in KERNELS}
    rows = []
    for _ in range(args.trials):
        for kernel in KERNELS:
            for n in (1, 2):
                if n <= len(cpus_all):
                    rows.append(measure(kernel, cpus_all[:n], sizes[kernel], rule))
    summary = summarise(rows, args.target)
    summary.update(target=args.target, max_reps=args.max_reps, min_reps=rule.min_reps,
                   size=args.size or f"calibrated to {args.run_s:g} s runs",
                   loadavg_before=load_before, loadavg_after=os.getloadavg())
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}))
        return
    print(f"{'kernel':14} {'cores':>5} {'size':>10} {'median s':>9} {'fixed10 +-%':>11} "
          f"{'adaptive +-%':>12} {'runs':>5} stop")
    for r in rows:
        ad = "-" if r["adaptive_ci"] is None else f"{100 * r['adaptive_ci']:.2f}"
        print(f"{r['kernel']:14} {r['cores']:5d} {r['size']:>10} {r['median_s']:9.4f} "
              f"{100 * r['fixed_ci']:11.2f} {ad:>12} {r['adaptive_runs']:5d} {r['stop']}")
    s = summary
    print(f"\n{s['points']} points ({s['size']}; min {s['min_reps']}, max {s['max_reps']} runs, "
          f"target +-{100 * s['target']:g} %): fixed {s['fixed_runs']} runs, adaptive "
          f"{s['adaptive_runs']} runs ({100 * s['runs_saved']:.0f} % fewer); median interval "
          f"+-{100 * s['median_fixed_ci']:.2f} % (fixed 10) vs +-"
          f"{100 * s['median_adaptive_ci']:.2f} % (adaptive), same estimator; "
          f"{s['points_as_good']}/{s['points']} points ({100 * s['share_as_good']:.0f} %) within "
          f"the target or at least as tight as fixed 10; stops {s['stops']}; load average "
          f"{s['loadavg_before'][0]:.2f} before, {s['loadavg_after'][0]:.2f} after")
    busy = max(s["loadavg_before"][0], s["loadavg_after"][0]) > 0.5 * len(cpus_all)
    print(f"target (>= 40 % fewer runs, median interval within the target or fixed 10's): "
          f"{'met' if s['met'] else 'NOT met'}"
          + (f" (machine busy: load above half of its {len(cpus_all)} cpus; the target is for "
             "a quiet machine)" if busy else ""))


if __name__ == "__main__":
    main()
