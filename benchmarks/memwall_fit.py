"""Fit time and training cost of the variable-delay (memwall) model on every peer training set.

Replays the training sets of data/peer-baselines/*.json (split reading from peer_baselines.py)
and fits ``MemWallModeler`` (``--model amdahl`` / ``usl``: those instead) once per set:

* ``default``: the model as the daemon fits it (timed): count, mean, p95, max per file and over all.
* the **full** four-parameter fit (no nested Amdahl test) with the numpy solver and with scipy's
  ``least_squares`` (the previous solver, kept callable for this comparison): final training
  cost (squared log residuals) compared fit by fit, and the scipy fit time back to back.

    python3 benchmarks/memwall_fit.py [--model memwall] [--files GLOB] [--save runs.json]
                                      [--compare runs.json] [--poet] [--poet-only]
    python3 benchmarks/memwall_fit.py --instructions 32      # needs valgrind, ~1.5 min

``--numpy``: eq. 15 by the numpy reference instead of the compiled ``_memwall_eq15`` (the
costs must be equal; the times show what the compiled inner loop saves).

``--save`` writes the per-fit records; ``--compare`` reads such a file (e.g. recorded with an
older commit) and compares its costs with this run's fits (full and default).

``--poet`` also replays the fits of ``opptune eval`` on poet_bard_configs, Xeon groups (random
training subsets of 8, 16, 32, 64 configurations, 10 draws, the same seeds as
``opptune eval --data data/poet_bard_configs/data.csv
--time-from-speedup --group xeon --train-sizes 8,16,32,64 --reps 10``): the default fit's wall
time per training size (median, p95, max, count over 50 ms), its median test MAPE / MSE of
speedup (must equal the eval's), and its training cost for ``--compare``.

``--instructions SIZES`` counts the instructions per default fit of the poet sets of those
sizes under valgrind (cachegrind): wall time on a shared VM moves by 1.5x from hour to hour,
instruction counts do not, so two versions of the solver are compared on them.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from peer_baselines import DATA, _load_groups, _pick, _warm_up

from opptune.daemon.eval_cli import _t1_ref, relative_time_from_speedup, training_mask
from opptune.daemon.fit_cli import _groups
from opptune.daemon.models.amdahl import AmdahlModeler
from opptune.daemon.models.base import NotEnoughData
from opptune.daemon.models.memwall import MemWallModeler
from opptune.daemon.models.usl import USLModeler

MODELS = {"memwall": MemWallModeler, "amdahl": AmdahlModeler, "usl": USLModeler}

LIMIT_MS = 50.0       # issue 4 target per fit
REL_TOL = 1e-9        # cost "equal" within this relative difference
EXACT = 1e-20         # per point: below it a fit is exact (the fit stops there), so two costs
                      # under it are equal whatever their rounding noise


EXTRA: dict[str, object] = {}   # options for every modeler of the run (--numpy: native=False)


def _modeler(cls: type, **kw: object):
    """A ``cls`` modeler with these options and ``EXTRA`` (an option this version lacks is
    left out), None when it has no ``solver`` option to ask for."""
    kw = {**EXTRA, **kw}
    accepted = inspect.signature(cls.__init__).parameters
    if "solver" in kw and "solver" not in accepted:
        return None
    return cls(**{k: v for k, v in kw.items() if k in accepted})


def _timed_fit(modeler, train) -> tuple[float, float, float]:
    """(wall milliseconds, CPU milliseconds of this thread, training cost) of one fit."""
    t0, c0 = time.perf_counter(), time.thread_time()
    fit = modeler.fit(train)
    ms, cpu = 1e3 * (time.perf_counter() - t0), 1e3 * (time.thread_time() - c0)
    return ms, cpu, float(fit.cost)


def run(files: str, model: str = "memwall") -> list[dict]:
    """One record per training set: file, evaluation index, n, times (ms) and costs."""
    cls = MODELS[model]
    default = _modeler(cls)
    full = _modeler(cls, nested=False)
    scipy = _modeler(cls, nested=False, solver="scipy")
    out = []
    for path in sorted((DATA / "peer-baselines").glob(files)):
        spec = json.loads(path.read_text())
        groups = _load_groups(spec["dataset"])
        for i, ev in enumerate(spec["evaluations"]):
            train = _pick(groups[tuple(ev["group"])], ev["train"])
            rec: dict = {"file": path.stem, "eval": i, "n": len(train)}
            try:
                rec["ms"], rec["cpu"], rec["cost_default"] = _timed_fit(default, train)
                rec["ms_full"], rec["cpu_full"], rec["cost"] = _timed_fit(full, train)
                if scipy is not None:
                    rec["ms_scipy"], rec["cpu_scipy"], rec["cost_scipy"] = _timed_fit(scipy, train)
            except NotEnoughData:
                continue
            out.append(rec)
    return out


POET = DATA / "poet_bard_configs" / "data.csv"
POET_SIZES = (8, 16, 32, 64)


def poet_sets(sizes: tuple[int, ...] = POET_SIZES, reps: int = 10, seed: int = 0):
    """(label, rep, size, all observations, training mask) of each poet Xeon fit of
    ``opptune eval`` (same groups, draws and seeds as eval_cli.run_eval)."""
    groups = [(lab, relative_time_from_speedup(o)) for lab, o in _groups(str(POET))
              if "xeon" in lab]
    for gi, (label, obs) in enumerate(groups):
        obs = obs.subset(np.isfinite(obs.time_s) & (obs.time_s > 0))
        n = len(obs)
        for size in sizes:
            if size >= n:
                continue
            for rep in range(reps):
                yield label, rep, size, obs, training_mask(n, size, seed, gi, rep)


def run_poet(model: str = "memwall", reps: int = 10, seed: int = 0) -> list[dict]:
    """One record per poet Xeon fit (``poet_sets``): file "poet-<size>", eval = index of the
    draw, times, costs, test MAPE (%) and MSE of speedup."""
    cls = MODELS[model]
    default, full = _modeler(cls), _modeler(cls, nested=False)
    out = []
    for label, rep, size, obs, train in poet_sets(reps=reps, seed=seed):
        ref = _t1_ref(obs)
        rec: dict = {"file": f"poet-{size:02d}", "eval": f"{label}#{rep}", "n": size}
        try:
            t0, c0 = time.perf_counter(), time.thread_time()
            fit = default.fit(obs.subset(train))
            rec["ms"] = 1e3 * (time.perf_counter() - t0)
            rec["cpu"] = 1e3 * (time.thread_time() - c0)
            rec["cost_default"] = float(fit.cost)
            rec["nested"] = fit.params.get("nested")
            rec["ms_full"], rec["cpu_full"], rec["cost"] = _timed_fit(
                full, obs.subset(train))
        except NotEnoughData:
            continue
        test = obs.subset(~train)
        pred = fit.predict(test).value
        rec["mape"] = float(np.mean(100 * np.abs(pred - test.time_s) / test.time_s))
        rec["mse"] = float(np.mean((ref[~train] / pred - ref[~train] / test.time_s) ** 2))
        out.append(rec)
    return out


def _fit_loop(sizes: tuple[int, ...], count: int, model: str) -> None:
    """The default fits of the first ``count`` poet sets of these sizes, nothing else (what
    ``--instructions`` runs under valgrind)."""
    modeler = _modeler(MODELS[model])
    for i, (_, _, _, obs, train) in enumerate(poet_sets(sizes)):
        if i >= count:
            break
        modeler.fit(obs.subset(train))


def count_instructions(sizes: tuple[int, ...], model: str,
                       numpy: bool = False) -> tuple[float, int]:
    """(instructions per default fit, fits) over the poet sets of these sizes: valgrind's
    cachegrind counts the interpreter's instructions for all fits and for one fit (start-up,
    imports and a first fit), and the difference is divided by the fits in between. Unlike
    wall time it does not move with the load or the VM's speed, so two versions of the
    solver can be compared on it."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind on the PATH (e.g. apt install valgrind)")
    n = sum(1 for _ in poet_sets(sizes))

    def refs(count: int) -> int:
        cmd = [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, __file__, "--model", model, "--fit-loop",
               ",".join(map(str, sizes)), str(count), *(["--numpy"] if numpy else [])]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        m = re.search(r"I\s+refs:\s+([\d,]+)", out)
        if m is None:
            raise SystemExit(f"no instruction count in valgrind's output:\n{out[-2000:]}")
        return int(m.group(1).replace(",", ""))

    with ThreadPoolExecutor(2) as pool:        # two valgrind processes, one per core
        full, one = pool.map(refs, (n, 1))
    return (full - one) / (n - 1), n


def _poet_report(recs: list[dict]) -> None:
    """Default fit time distribution and median test errors per training size."""
    print("\npoet Xeon (opptune eval fits), default fit:")
    for f in sorted({r["file"] for r in recs}):
        rs = [r for r in recs if r["file"] == f]
        ms = np.array([r["ms"] for r in rs])
        print(f"  {f}: {ms.size:3d} fits  median {np.median(ms):5.1f}  p95 "
              f"{np.percentile(ms, 95):5.1f}  max {ms.max():5.1f} ms  > {LIMIT_MS:.0f} ms: "
              f"{int(np.sum(ms > LIMIT_MS))}  (CPU max {max(r['cpu'] for r in rs):5.1f})  "
              f"median MAPE {np.median([r['mape'] for r in rs]):.2f} %  "
              f"MSE {np.median([r['mse'] for r in rs]):.4g}  "
              f"nested {sum(bool(r['nested']) for r in rs)}")


def _stats(ms: list[float]) -> str:
    a = np.asarray(ms)
    return (f"{a.size:4d} fits  mean {a.mean():6.1f}  p95 {np.percentile(a, 95):6.1f}  "
            f"max {a.max():6.1f} ms  > {LIMIT_MS:.0f} ms: {int(np.sum(a > LIMIT_MS))}")


def _compare(recs: list[dict], ref: dict[tuple[str, int], float], label: str,
             key: str = "cost") -> None:
    """Cost ``key`` of this run's fits against reference costs, fit by fit."""
    worse, better, same = [], 0, 0
    for r in recs:
        c0 = ref.get((r["file"], r["eval"]))
        if c0 is None or key not in r:
            continue
        if max(r[key], c0) <= EXACT * r["n"]:
            same += 1
        elif r[key] <= c0 * (1 + REL_TOL):
            if r[key] < c0 * (1 - REL_TOL):
                better += 1
            else:
                same += 1
        else:
            worse.append((r, c0))
    if not same + better + len(worse):
        return                                  # no record of this kind in the reference
    print(f"\n{key} vs {label}: {same} equal, {better} lower, {len(worse)} higher")
    for r, c0 in worse:
        print(f"  higher: {r['file']} eval {r['eval']} (n={r['n']}): {r[key]:.6g} vs "
              f"{c0:.6g} ({100 * (r[key] / c0 - 1):+.3g} %)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default="*.json", help="glob under data/peer-baselines")
    ap.add_argument("--model", default="memwall", choices=sorted(MODELS),
                    help="amdahl / usl: the same comparison for the one- and two-parameter models")
    ap.add_argument("--save", help="write the per-fit records to this JSON file")
    ap.add_argument("--compare", help="compare costs with records saved by --save")
    ap.add_argument("--poet", action="store_true",
                    help="also replay the poet Xeon fits of opptune eval (time distribution)")
    ap.add_argument("--poet-only", action="store_true", help="only the poet Xeon fits")
    ap.add_argument("--instructions", metavar="SIZES",
                    help="instructions per default poet fit of these training sizes (e.g. "
                         "32 or 16,64), counted under valgrind; nothing else is run")
    ap.add_argument("--numpy", action="store_true",
                    help="memwall: eq. 15 by the numpy reference, not the compiled extension")
    ap.add_argument("--fit-loop", nargs=2, metavar=("SIZES", "COUNT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.numpy:
        EXTRA["native"] = False
    if args.fit_loop:
        _fit_loop(tuple(int(x) for x in args.fit_loop[0].split(",")), int(args.fit_loop[1]),
                  args.model)
        return 0
    if args.instructions:
        sizes = tuple(int(x) for x in args.instructions.split(","))
        per_fit, n = count_instructions(sizes, args.model, args.numpy)
        print(f"{args.model}: {per_fit / 1e6:.1f} M instructions per default fit "
              f"(poet Xeon, sizes {args.instructions}, {n} fits, valgrind cachegrind)")
        return 0
    _warm_up()
    recs = [] if args.poet_only else run(args.files, args.model)
    poet = run_poet(args.model) if args.poet or args.poet_only else []
    if args.save:
        Path(args.save).write_text(json.dumps(recs + poet))
    columns = [("ms", "default fit, wall"), ("cpu", "default fit, CPU of the thread"),
               ("ms_full", "full fit (numpy solver), wall"),
               ("ms_scipy", "full fit (scipy least_squares), wall"),
               ("cpu_scipy", "full fit (scipy least_squares), CPU of the thread")]
    for key, label in columns:
        if not any(key in r for r in recs):
            continue
        print(f"\n{label} time per fit:")
        for f in sorted({r["file"] for r in recs}):
            print(f"  {f:45s} {_stats([r[key] for r in recs if r['file'] == f])}")
        print(f"  {'all':45s} {_stats([r[key] for r in recs])}")
    if poet:
        _poet_report(poet)
    if any("cost_scipy" in r for r in recs):
        _compare(recs, {(r["file"], r["eval"]): r["cost_scipy"] for r in recs}, "scipy solver")
    if args.compare:
        old = json.loads(Path(args.compare).read_text())
        for key in ("cost", "cost_default"):
            ref = {(r["file"], r["eval"]): r[key] for r in old if key in r}
            if recs:
                _compare(recs, ref, f"{args.compare} (peer sets)", key)
            if poet:
                _compare(poet, ref, f"{args.compare} (poet)", key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
