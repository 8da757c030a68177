"""Time of one tune proposal (the Sampler's next configuration) on a table board and on a
board whose cpufreq is a continuous range (intel_pstate / amd-pstate: 100 MHz steps).

    python3 benchmarks/tune_proposal.py [--sessions 2] [--boards a,b] [--quick] [--json]

Boards (grids made by the daemon's own ``tuning.segment_grid`` from a platform as an agent
describes it; times and power from the virtual x86-2numa board's model, 1 % log-normal noise,
3 runs per configuration as ``opptune tune`` measures):

* ``table 8x8``: 8 cores, a table of 8 clocks 1200..3200 MHz (64 configurations);
* ``range 16c``: 16 cores, a continuous range 800..4000 MHz (16 x 33 = 528);
* ``x86-2numa``: the virtual board itself, 32 cpus, 1200..3200 MHz (32 x 21 = 672).

Each board replays tune sessions (goals time, energy, EDP; workloads from compute to memory
bound) until the Sampler stops, from nothing measured (``fresh``) and after a sweep of every
core count at the range's ends and middle (``swept``: what ``characterize`` or the demo leave
in the store). Every proposal that fits the models is timed (``tuning._propose``, the call the
daemon's worker makes); the initial design's are instant and left out. Prints per board and
start the grid size, the proposals timed, their median and p90 wall time and CPU time (this
process's: steadier than wall time on a loaded machine), the configurations measured per
session and the regret of the final choice against the full grid's best (true values).
Also times the first proposal in a fresh process (the imports a daemon pays once).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from opptune.agent import virtual_board as vb
from opptune.daemon.objectives import Goal, choose, objective_values
from opptune.daemon.sampling import Grid, Measured, Sampler
from opptune.daemon.tuning import _propose, segment_grid

REPS = 3
NOISE = 0.01
GOALS = ("time", "energy", "edp")
# the truth of x86-2numa, then a compute-bound and a memory-bound workload
VARIANTS = ({}, {"f": 0.99, "m1": 0.01, "m2": 0.05}, {"m1": 0.30, "m2": 0.40, "k": 2.0})
BOARDS = {  # name: cores, table (kHz) or None, range (kHz) or None
    "table 8x8": (8, [1200000 + round(i * 2000000 / 7 / 100000) * 100000 for i in range(8)],
                  None),
    "range 16c": (16, None, (800000, 4000000)),
    "x86-2numa": (32, None, (1200000, 3200000)),
}


def platform(cores: int, table: list[int] | None, rng: tuple[int, int] | None) -> dict:
    """What an agent's hello says of such a board (one policy per cpu, as intel_pstate)."""
    names = [f"policy{c}" for c in range(cores)]
    freqs = list(rng) if rng else table
    return {"sweep_order": list(range(cores)),
            "policies": [{"name": n, "cpus": [c], "related_cpus": [c]}
                         for c, n in enumerate(names)],
            "cpufreq": {"available": True, "frequencies_khz": {n: freqs for n in names},
                        "continuous": names if rng else []}}


def truth(grid: Grid, variant: dict) -> tuple[np.ndarray, np.ndarray]:
    spec = vb.board_spec("x86-2numa")
    spec["truth"].update(variant)
    cl = spec["clusters"][0]
    cl["min_khz"], cl["max_khz"] = int(grid.freq_khz.min()), int(grid.freq_khz.max())
    t, p = [], []
    for k, f in zip(grid.cores.astype(int), grid.freq_khz.astype(int)):
        r = vb.run_model(spec, list(range(k)), k, {c: int(f) for c in range(k)})
        t.append(r["time_s"])
        p.append(r["power_w"])
    return np.array(t), np.array(p)


def swept(grid: Grid) -> list[int]:
    """Every core count at the lowest, middle and highest clock (planner's grid "3")."""
    fs = np.unique(grid.freq_mhz)
    pick = {fs[0], fs[len(fs) // 2], fs[-1]}
    return [i for i in range(len(grid)) if grid.freq_mhz[i] in pick]


def session(grid: Grid, t: np.ndarray, p: np.ndarray, goal: Goal, before: list[int],
            rng: np.random.Generator) -> tuple[list[float], int, float]:
    """Proposal times (model-based ones: wall, CPU of this process), configurations
    measured, regret of the choice."""
    m = Measured()

    def measure(i: int) -> None:
        for _ in range(REPS):
            m.add(i, t[i] * rng.lognormal(0, NOISE), p[i] * rng.lognormal(0, NOISE))
    for i in before:
        measure(i)
    sampler, times, n = Sampler(goal), [], 0
    while True:
        t0, c0 = time.perf_counter(), time.process_time()
        prop = _propose(sampler, grid, m)
        dt = (time.perf_counter() - t0, time.process_time() - c0)
        if prop.reason != "initial design":
            times.append(dt)
        if prop.index is None:
            break
        measure(prop.index)
        n += 1
    chosen = sampler.estimate(grid, m).choice.index
    j = objective_values(goal, t, p)
    best = choose(goal, t, p, grid.cores, grid.freq_khz).index
    return times, n, float(j[chosen] / j[best] - 1)


def first_proposal_s() -> tuple[float, float]:
    """A proposal in a fresh process, after the daemon's own imports (what a daemon pays at
    its first tune): the imports the sampler adds, and one proposal (wall, CPU seconds)."""
    out = subprocess.run([sys.executable, __file__, "--first"], capture_output=True,
                         text=True, check=True)
    wall, cpu = out.stdout.split()[-2:]
    return float(wall), float(cpu)


def _first() -> None:
    import opptune.daemon.service  # noqa: F401  (the daemon's imports come before)
    plat = platform(*BOARDS["x86-2numa"])
    grid = segment_grid(plat, plat["sweep_order"], None)
    t, p = truth(grid, {})
    m = Measured()
    for i in swept(grid):
        m.add(i, t[i], p[i])
    t0, c0 = time.perf_counter(), time.process_time()
    _propose(Sampler(Goal("time")), grid, m)
    print(time.perf_counter() - t0, time.process_time() - c0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--sessions", type=int, default=2, help="noise seeds per goal and "
                    "workload (default 2)")
    ap.add_argument("--boards", default=",".join(BOARDS), help="comma-separated: "
                    + ", ".join(BOARDS))
    ap.add_argument("--quick", action="store_true",
                    help="one workload, the time goal, one session per start")
    ap.add_argument("--no-first", action="store_true",
                    help="leave out the first proposal in a fresh process")
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--first", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.first:
        _first()
        return 0
    if args.sessions < 1:
        ap.error(f"--sessions must be 1 or more, not {args.sessions}")
    boards = args.boards.split(",")
    for name in boards:
        if name not in BOARDS:
            ap.error(f"unknown board {name!r}; choose from: {', '.join(BOARDS)}")
    variants, goals = (VARIANTS[:1], GOALS[:1]) if args.quick else (VARIANTS, GOALS)
    sessions = 1 if args.quick else args.sessions
    plat = platform(*BOARDS["table 8x8"])  # the imports and first calls, untimed
    warm = segment_grid(plat, plat["sweep_order"], None)
    session(warm, *truth(warm, {}), Goal("energy"), [], np.random.default_rng(0))
    rows = []
    for name in boards:
        plat = platform(*BOARDS[name])
        grid = segment_grid(plat, plat["sweep_order"], None)
        for start in ("fresh", "swept"):
            times, measured, regret = [], [], []
            for vi, var in enumerate(variants):
                t, p = truth(grid, var)
                for goal in goals:
                    for seed in range(sessions):
                        rng = np.random.default_rng([vi, GOALS.index(goal), seed])
                        ts, n, r = session(grid, t, p, Goal(goal),
                                           swept(grid) if start == "swept" else [], rng)
                        times += ts
                        measured.append(n)
                        regret.append(r)
            rows.append({"board": name, "start": start, "grid": len(grid),
                         "proposals": len(times),
                         "median_ms": 1000 * float(np.median([x[0] for x in times])),
                         "p90_ms": 1000 * float(np.percentile([x[0] for x in times], 90)),
                         "cpu_median_ms": 1000 * float(np.median([x[1] for x in times])),
                         "cpu_p90_ms": 1000 * float(np.percentile([x[1] for x in times], 90)),
                         "measured_median": float(np.median(measured)),
                         "regret_median_pct": 100 * float(np.median(regret)),
                         "regret_p90_pct": 100 * float(np.percentile(regret, 90))})
            if not args.json:
                r = rows[-1]
                print(f"{name:10} {start:6} grid {r['grid']:4}: {r['proposals']:4} proposals, "
                      f"median {r['median_ms']:6.1f} ms, p90 {r['p90_ms']:6.1f} ms (CPU "
                      f"{r['cpu_median_ms']:.1f} / {r['cpu_p90_ms']:.1f} ms); "
                      f"{r['measured_median']:.0f} measured per session; regret median "
                      f"{r['regret_median_pct']:.2f} %, p90 {r['regret_p90_pct']:.2f} %",
                      flush=True)
    first = None if args.no_first else first_proposal_s()
    if args.json:
        print(json.dumps({"rows": rows, "first_proposal_s": first and first[0],
                          "first_proposal_cpu_s": first and first[1]}))
    elif first is not None:
        print(f"first proposal in a fresh process (x86-2numa, swept, after the daemon's "
              f"imports): {first[0]:.2f} s (CPU {first[1]:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
