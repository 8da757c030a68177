"""The daemon's model choice on opptune's own runs of a many-core machine: each kernel trained
on its runs at 1..K cores, predicted at the core counts above K, beside Amdahl and USL alone.

    python3 benchmarks/extrapolate_own_runs.py            # data/bench_suite_xeon16, K = 8

Reads a runs.csv as data/bench_suite_xeon16 keeps it (workload, cores, rep, time_s, marked:
every run), leaves the runs marked for interference out as the daemon does, takes the median
over repetitions (benchmarks/peer_baselines.py's ``fit_predict``, the same code path as the
peer splits: ``fitter.fit_group`` told the query, its interval pooled over the machine's other
kernels). Prints per kernel the daemon's choice and its error, then per method the pooled MAPE,
median and max APE, 90 % interval coverage and fit time.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

import numpy as np

from opptune.daemon.tidy import median_reps, read_tidy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_baselines import DAEMON, fit_predict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def tidy_groups(runs: Path, platform: str, tmp: Path) -> dict:
    """The runs.csv as opptune's tidy CSV, read back as median-over-repetitions groups."""
    out = tmp / "tidy.csv"
    with open(runs, newline="") as f, open(out, "w", newline="") as g:
        w = csv.writer(g)
        w.writerow(["platform", "workload", "input", "variant", "cores", "freq_mhz", "rep",
                    "time_s"])
        for r in csv.DictReader(f):
            if not r.get("marked"):
                w.writerow([platform, r["workload"], "default", "", r["cores"], "", r["rep"],
                            r["time_s"]])
    return {gr.key: median_reps(gr.obs) for gr in read_tidy(out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(ROOT / "data/bench_suite_xeon16/runs.csv"))
    ap.add_argument("--train-max", type=int, default=8,
                    help="train on 1..K cores, predict above K (default 8)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        groups = tidy_groups(Path(args.runs), "board", Path(tmp))
    top = max(int(o.cores.max()) for o in groups.values())
    # kernels measured to the machine's top core count (a kernel cut short has no test points)
    full = {k: o for k, o in groups.items() if int(o.cores.max()) == top}
    print(f"{args.runs}: {len(full)} kernels with 1..{top} cores, trained on 1..{args.train_max}")
    for name in (DAEMON, "amdahl", "usl"):
        ape, inside, fit_s = [], [], []
        for key, obs in sorted(full.items()):
            train = obs.subset(np.flatnonzero(obs.cores <= args.train_max))
            query = obs.subset(np.flatnonzero(obs.cores > args.train_max))
            others = [o for k, o in groups.items() if k != key] if name == DAEMON else ()
            value, lower, upper, secs, used = fit_predict(name, train, query, others)
            t = np.asarray(query.time_s, float)
            ape.append(100 * np.abs(value - t) / t)
            inside.append((lower <= t) & (t <= upper))
            fit_s.append(secs)
            if name == DAEMON:
                print(f"  {key[1]:14s} {used:8s} {np.mean(ape[-1]):6.1f} %")
        a, ins = np.concatenate(ape), np.concatenate(inside)
        print(f"{name:8s} pooled MAPE {a.mean():5.1f} %, median {np.median(a):5.1f} %, max "
              f"{a.max():5.1f} %, 90 % interval coverage {100 * ins.mean():3.0f} % "
              f"({int(ins.sum())}/{ins.size}), fit median {1000 * np.median(fit_s):.0f} ms, "
              f"max {1000 * max(fit_s):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
