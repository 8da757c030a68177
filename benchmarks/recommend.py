"""Recommendation quality from few measurements: full grids replayed as if measured.

For every workload grid (virtual boards and the real grids under data/ with power or
energy) and every goal, each method measures some configurations (a replay: the grid's own
values) and recommends one. Regret = true objective of the recommendation / the full-grid
oracle's - 1. A recommendation that violates the true deadline or power cap is a failure: it
counts as infinite regret in the percentiles (nearest rank) and in the ``fail`` column.

Goals: time, energy, edp, ed2p, energy under a deadline (1.5 x the grid's minimum time),
time under a power cap (the median power of the grid's configurations). Both limits are
absolute numbers, the same for every method.

Methods (budget B = floor(15 % of the grid), at least 3, the fewest points that determine a
3-parameter time and power model; the measurements actually used are reported):

* opptune: daemon.sampling.Sampler (at most B).
* random: B distinct configurations at random, the best measured feasible one.
* bo: optuna's TPE sampler over the grid scaled to [0, 1] (snapped to the nearest unmeasured
  configuration), B trials, infeasible values penalised; the best measured feasible one.
* model: the plain physically shaped model: corners measured (2 on a cores-only grid),
  t = t1*(s + (1-s)/p)*(f0/f)^a and P = Ps + p*c*f^b fitted, its predicted optimum.
* governor: the performance governor: all cores at the highest frequency (nothing measured).
* race: race-to-idle: at the highest frequency, the fastest core count (every core count
  measured at f_max).
* oracle: the full grid's best (every configuration measured).

Usage: python benchmarks/recommend.py [--quick] [--json] [--datasets a,b]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import optimize

ROOT = Path(__file__).resolve().parent.parent

from opptune.agent import virtual_board as vb  # noqa: E402
from opptune.daemon.objectives import Goal, choose, feasible, objective_values  # noqa: E402
from opptune.daemon.sampling import Grid, Measured, Sampler, space_filling, _unit  # noqa: E402

DATA = ROOT / "data"
SHARE = 0.15
MIN_BUDGET = 3  # + 1 on a cores x frequency grid: see budget()
OBJECTIVES = ("time", "energy", "edp", "ed2p", "energy@deadline", "time@cap")
METHODS = ("opptune", "random", "bo", "model", "governor", "race", "oracle")


@dataclass
class Workload:
    dataset: str
    name: str
    grid: Grid
    time_s: np.ndarray
    power_w: np.ndarray


# ------------------------------------------------------------------------------ datasets

# Virtual workloads: the board's own truth, then variants from compute bound to memory bound
# (f = parallel fraction, m1/m2 = memory fractions, k = memory stall growth with frequency).
VARIANTS = [{}, {"f": 0.99, "m1": 0.01, "m2": 0.05}, {"f": 0.80},
            {"m1": 0.30, "m2": 0.40, "k": 2.0}, {"f": 0.50, "m1": 0.10},
            {"f": 0.999, "m1": 0.02, "m2": 0.60, "k": 1.0}]


def virtual(n_variants: int = len(VARIANTS)) -> list[Workload]:
    """Each virtual board's clusters, grid cores x frequency, through vb.run_model."""
    out = []
    for board in vb.BOARDS:
        spec = vb.board_spec(board)
        for ci, cl in enumerate(spec["clusters"]):
            freqs = cl.get("freqs_khz") or list(range(cl["min_khz"], cl["max_khz"] + 1, 200000))
            cpus = cl["cpus"][: 16] if len(cl["cpus"]) > 16 else cl["cpus"]
            for vi, var in enumerate(VARIANTS[:n_variants]):
                s = vb.board_spec(board)
                s["truth"].update(var)
                rows = [(p, f, vb.run_model(s, cpus[:p], p, {c: f for c in cpus[:p]}))
                        for p in range(1, len(cpus) + 1) for f in freqs]
                out.append(Workload(
                    "virtual", f"{board}/c{ci}/v{vi}",
                    Grid([r[0] for r in rows], [r[1] / 1000 for r in rows]),
                    np.array([r[2]["time_s"] for r in rows]),
                    np.array([r[2]["power_w"] for r in rows])))
    return out


def _read(name: str) -> list[dict]:
    with open(DATA / name / "data.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _grids(dataset: str, rows, key, cores, freq, t, p, min_points: int = 4) -> list[Workload]:
    """Group rows by ``key``; mean time and power per (cores, freq)."""
    groups: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        try:
            tv, pv = t(r), p(r)
        except (ValueError, ZeroDivisionError):
            continue
        if not (math.isfinite(tv) and math.isfinite(pv) and tv > 0 and pv > 0):
            continue
        groups[key(r)][(cores(r), freq(r))].append((tv, pv))
    out = []
    for k, cells in sorted(groups.items()):
        if len(cells) < min_points:
            continue
        cf = sorted(cells, key=lambda c: (c[0], c[1] or 0))
        has_f = cf[0][1] is not None
        out.append(Workload(dataset, k, Grid([c[0] for c in cf],
                                             [c[1] for c in cf] if has_f else None),
                            np.array([np.mean([v[0] for v in cells[c]]) for c in cf]),
                            np.array([np.mean([v[1] for v in cells[c]]) for c in cf])))
    return out


def armpm() -> list[Workload]:
    return _grids("armpm_xu3", _read("armpm_xu3_parsec"), lambda r: r["workload"],
                  lambda r: int(r["cores"]), lambda r: float(r["freq_mhz"]),
                  lambda r: float(r["time_s"]), lambda r: float(r["power_w"]))


def powmon() -> list[Workload]:
    """Time per 1e9 instructions = 1e9 / INST_SPEC rate; energy per unit of work follows
    (power / throughput). ``idle`` does no work and is left out."""
    rows = [r for r in _read("powmon_xu3_a15") if r["workload"] != "idle"]
    return _grids("powmon_xu3", rows, lambda r: r["workload"], lambda r: int(r["cores"]),
                  lambda r: float(r["freq_mhz"]), lambda r: 1e9 / float(r["ev_0x1b_per_s"]),
                  lambda r: float(r["power_w"]))


def poet() -> list[Workload]:
    """time = 1/speedup, power = powerup; each table (per cluster on the XU3) is a grid."""
    return _grids("poet_bard", _read("poet_bard_configs"),
                  lambda r: f"{r['platform']}/{r['workload']}/{r['variant'] or 'all'}",
                  lambda r: int(r["cores"]), lambda r: float(r["freq_mhz"]),
                  lambda r: 1.0 / float(r["speedup"]), lambda r: float(r["powerup"]))


def loghin() -> list[Workload]:
    """Cores only (freq None); grids with fewer than 4 core counts are left out."""
    return _grids("loghin", _read("loghin_multicore_energy"),
                  lambda r: f"{r['platform']}/{r['workload']}/{r['variant']}",
                  lambda r: int(r["cores"]), lambda r: None,
                  lambda r: float(r["time_s"]), lambda r: float(r["power_w"]))


DATASETS = {"virtual": virtual, "armpm_xu3": armpm, "powmon_xu3": powmon, "poet_bard": poet,
            "loghin": loghin}


# ------------------------------------------------------------------------------ goals

def goal_for(obj: str, w: Workload) -> Goal:
    if obj == "energy@deadline":
        return Goal("energy", deadline_s=1.5 * float(w.time_s.min()))
    if obj == "time@cap":
        return Goal("time", power_cap_w=float(np.median(w.power_w)))
    return Goal(obj)


def budget(w: Workload) -> int:
    """15 % of the grid, but at least the points that fit the smallest models (3 on a cores x
    frequency grid, 2 on a cores-only one) plus one to check their optimum."""
    least = MIN_BUDGET + (1 if w.grid.freq_mhz is not None else 0)
    return min(len(w.grid), max(least, int(math.floor(SHARE * len(w.grid)))))


def _best_measured(goal: Goal, w: Workload, idx: list[int]) -> int:
    idx = list(dict.fromkeys(idx))
    t, p = w.time_s[idx], w.power_w[idx]
    g = w.grid
    c = choose(goal, t, p, g.cores[idx], None if g.freq_khz is None else g.freq_khz[idx])
    return idx[c.index]


# ------------------------------------------------------------------------------ methods

def m_opptune(goal, w, b, seed):
    s, m = Sampler(goal, budget=b), Measured()
    while (prop := s.propose(w.grid, m)).index is not None:
        m.add(prop.index, w.time_s[prop.index], w.power_w[prop.index])
    return s.estimate(w.grid, m).choice.index, len(m)


def m_random(goal, w, b, seed):
    idx = np.random.default_rng(seed).choice(len(w.grid), size=b, replace=False)
    return _best_measured(goal, w, [int(i) for i in idx]), b


def _penalised(goal, w, i):
    v = math.log(objective_values(goal, w.time_s[i:i + 1], w.power_w[i:i + 1])[0])
    if not feasible(goal, w.time_s[i:i + 1], w.power_w[i:i + 1])[0]:
        over = 0.0
        if goal.deadline_s:
            over += max(w.time_s[i] / goal.deadline_s - 1, 0)
        if goal.power_cap_w:
            over += max(w.power_w[i] / goal.power_cap_w - 1, 0)
        v += 100.0 + over
    return v


def m_bo(goal, w, b, seed):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    unit = _unit(w.grid)
    dims = 2 if w.grid.freq_mhz is not None else 1
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=min(MIN_BUDGET, b)))
    done: list[int] = []
    for _ in range(b):
        trial = study.ask()
        u = np.array([trial.suggest_float(f"u{d}", 0.0, 1.0) for d in range(dims)])
        d = np.abs(unit[:, :dims] - u).sum(axis=1)
        d[done] = np.inf
        i = int(np.argmin(d))
        done.append(i)
        study.tell(trial, _penalised(goal, w, i))
    return _best_measured(goal, w, done), b


def _plain_fit(w: Workload, idx: list[int]):
    """Amdahl time with a frequency power law and static + dynamic power on ``idx``."""
    g = w.grid
    p = g.cores[idx]
    x = (g.freq_mhz[idx] / g.freq_mhz.max()) if g.freq_mhz is not None else np.ones(len(idx))
    t, pw = w.time_s[idx], w.power_w[idx]
    has_f = g.freq_mhz is not None

    def tm(th, p, x):
        return th[0] * (th[1] + (1 - th[1]) / p) * x ** (-th[2] if has_f else 0.0)

    def pm(th, p, x):
        return th[0] + p * th[1] * x ** (th[2] if has_f else 1.0)

    rt = optimize.least_squares(lambda th: np.log(tm(th, p, x)) - np.log(t),
                                [t.max(), 0.1, 1.0], bounds=([1e-12, 0, 0], [np.inf, 1, 2]))
    rp = optimize.least_squares(lambda th: np.log(np.maximum(pm(th, p, x), 1e-300))
                                - np.log(pw), [pw.min() / 2, pw.max() / p.max() / 2, 2.0],
                                bounds=([0, 0, 0], [np.inf, np.inf, 4]))
    xg = (g.freq_mhz / g.freq_mhz.max()) if has_f else np.ones(len(g))
    return tm(rt.x, g.cores, xg), pm(rp.x, g.cores, xg)


def m_model(goal, w, b, seed):
    idx = space_filling(w.grid, 4 if w.grid.freq_mhz is not None else 2)
    t, p = _plain_fit(w, idx)
    c = choose(goal, t, p, w.grid.cores, w.grid.freq_khz)
    return c.index, len(idx)


def m_governor(goal, w, b, seed):
    f = np.zeros(len(w.grid)) if w.grid.freq_mhz is None else w.grid.freq_mhz
    return int(np.lexsort((w.grid.cores, f))[-1]), 0


def m_race(goal, w, b, seed):
    f = np.zeros(len(w.grid)) if w.grid.freq_mhz is None else w.grid.freq_mhz
    top = np.flatnonzero(f == f.max())
    return int(top[np.argmin(w.time_s[top])]), int(top.size)


def m_oracle(goal, w, b, seed):
    c = choose(goal, w.time_s, w.power_w, w.grid.cores, w.grid.freq_khz)
    return c.index, len(w.grid)


RUN = {"opptune": m_opptune, "random": m_random, "bo": m_bo, "model": m_model,
       "governor": m_governor, "race": m_race, "oracle": m_oracle}


def regret(goal: Goal, w: Workload, i: int, best: int) -> float:
    """inf when the recommendation breaks the true limits."""
    if not feasible(goal, w.time_s[i:i + 1], w.power_w[i:i + 1])[0]:
        return math.inf
    v = objective_values(goal, w.time_s, w.power_w)
    return float(v[i] / v[best] - 1.0)


def _rank(vals: list[float], q: float) -> float:
    """Nearest-rank percentile (infinite values sort last)."""
    s = sorted(vals)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def run(datasets: dict, methods, objectives, quick: bool) -> list[dict]:
    rows = []
    for ds, loader in datasets.items():
        wls = loader(2) if (quick and ds == "virtual") else loader()
        if quick:
            wls = wls[:: max(1, len(wls) // 6)]
        for obj in objectives:
            res = defaultdict(lambda: {"regret": [], "meas": [], "share": []})
            for k, w in enumerate(wls):
                goal = goal_for(obj, w)
                best = m_oracle(goal, w, 0, 0)[0]
                b = budget(w)
                for m in methods:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        i, n = RUN[m](goal, w, b, seed=k)
                    r = res[m]
                    r["regret"].append(regret(goal, w, i, best))
                    r["meas"].append(n)
                    r["share"].append(n / len(w.grid))
            for m in methods:
                r = res[m]
                rows.append({"dataset": ds, "objective": obj, "method": m,
                             "workloads": len(wls),
                             "median_regret": _rank(r["regret"], 0.5),
                             "p90_regret": _rank(r["regret"], 0.9),
                             "failures": int(sum(math.isinf(v) for v in r["regret"])),
                             "measurements": float(np.mean(r["meas"])),
                             "grid_share": float(np.mean(r["share"])),
                             "grid_points": float(np.mean([len(w.grid) for w in wls]))})
    return rows


def _pct(v: float) -> str:
    return "fail" if math.isinf(v) else f"{100 * v:.1f}"


def table(rows: list[dict], methods) -> str:
    """Wide table: per dataset x objective, per method 'median/p90 %' (+ failures)."""
    by = defaultdict(dict)
    for r in rows:
        by[(r["dataset"], r["objective"])][r["method"]] = r
    head = f"{'dataset':<11} {'objective':<16} {'n':>3} " + " ".join(f"{m:>15}" for m in methods)
    lines = ["regret % median/p90 (failures = recommendation breaks the limit; inf regret)",
             head, "-" * len(head)]
    for (ds, obj), ms in by.items():
        cells = []
        for m in methods:
            r = ms[m]
            c = f"{_pct(r['median_regret'])}/{_pct(r['p90_regret'])}"
            if r["failures"]:
                c += f" ({r['failures']}f)"
            cells.append(f"{c:>15}")
        n = next(iter(ms.values()))["workloads"]
        lines.append(f"{ds:<11} {obj:<16} {n:>3} " + " ".join(cells))
    lines += ["", "mean measurements used (% of grid), over the objectives",
              f"{'dataset':<11} {'grid':>6} " + " ".join(f"{m:>15}" for m in methods)]
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        cells = []
        for m in methods:
            rr = [r for r in rows if r["dataset"] == ds and r["method"] == m]
            cells.append(f"{np.mean([r['measurements'] for r in rr]):>6.1f} "
                         f"({100 * np.mean([r['grid_share'] for r in rr]):>4.1f}%)")
        g = rows[[r["dataset"] for r in rows].index(ds)]["grid_points"]
        lines.append(f"{ds:<11} {g:>6.1f} " + " ".join(f"{c:>15}" for c in cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few workloads per dataset")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--datasets", default=",".join(DATASETS),
                    help=f"comma-separated subset of {','.join(DATASETS)}")
    args = ap.parse_args(argv)
    names = [d.strip() for d in args.datasets.split(",") if d.strip()]
    bad = [d for d in names if d not in DATASETS]
    if bad:
        print(f"unknown dataset {bad[0]!r}; choose from {', '.join(DATASETS)}", file=sys.stderr)
        return 2
    methods = list(METHODS)
    note = None
    try:
        import optuna  # noqa: F401
    except ImportError:
        methods.remove("bo")
        note = "bo skipped: optuna is not installed (pip install 'opptune[bench]')"
    t0 = time.perf_counter()
    rows = run({d: DATASETS[d] for d in names}, methods, OBJECTIVES, args.quick)
    took = time.perf_counter() - t0
    if args.json:
        clean = [{k: (None if isinstance(v, float) and math.isinf(v) else v)
                  for k, v in r.items()} for r in rows]  # JSON has no infinity: None = fail
        print(json.dumps({"rows": clean, "methods": methods, "seconds": took, "note": note}))
        return 0
    if note:
        print(note)
    print(table(rows, methods))
    print(f"\n{took:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
