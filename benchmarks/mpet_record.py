"""MPET: record every prediction of the leave-one-out evaluations, to check that a change
(a faster distance, a reordered sum) leaves the predictions as they were.

    python3 benchmarks/mpet_record.py --out after.json [--quick]
    python3 benchmarks/mpet_record.py --compare before.json after.json

Records, per data set of benchmarks/mpet.py and per setup of `opptune eval-mpet` (default,
q-ratio, ratio, sc-distance, seed, nested; the default with --single-reference; --scenario b),
every prediction the evaluation makes: t(1), t(n), the interval and its level, the bases, the
sc choice, sc, and each candidate with its distances, weight and validated error (the nested
setup's inner scoring predictions: t(1) and t(n) only), and the printed table; then the
predictions of benchmarks/mpet.py's synthetic databases (20 workloads x 5 platforms with and
without the runtime parameters, 40 without). ``--quick`` leaves out the nested setup (most of
the time). Run the code before on PYTHONPATH for the before file. ``--compare`` prints how
many values differ, bit for bit and beyond a relative 1e-12, and the largest relative
difference, over the evaluations both records have; exit 1 if any differs beyond that or
the records do not line up.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mpet import datasets, synthetic_database  # noqa: E402

import opptune.daemon.models.mpet_eval as mpet_eval  # noqa: E402
from opptune.daemon.models.mpet_predict import predict_migration  # noqa: E402
from opptune.daemon.mpet_cli import format_table, run  # noqa: E402

SETUPS = ("default", "q-ratio", "ratio", "sc-distance", "seed", "nested")
TOLERANCE = 1e-12


def _num(x):
    """A float as JSON keeps it exactly (repr round-trips); NaN and inf as strings."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, dict):
        return {str(k): _num(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_num(v) for v in x]
    if hasattr(x, "tolist"):
        return _num(x.tolist())
    if isinstance(x, int):
        return x
    x = float(x)
    return x if math.isfinite(x) else repr(x)


def _candidate(c) -> dict:
    return _num({"platform": str(c.platform), "workload": str(c.workload), "d_a": c.d_a,
                 "d_p": c.d_p, "d_t": c.d_t, "weight": c.weight, "var": c.var,
                 "usable": c.usable})


def _prediction(pred, full: bool = True) -> dict:
    out = {"workload": str(pred.workload), "target": str(pred.target), "t1": _num(pred.t1),
           "t": _num(pred.t)}
    if full:
        out.update({"ns": pred.ns, "sc": _num(pred.sc), "lower": _num(pred.lower),
                    "upper": _num(pred.upper), "level": _num(pred.level),
                    "calibrated": pred.calibrated, "single": pred.single_candidate,
                    "t1_basis": pred.t1_basis, "sc_basis": pred.sc_basis,
                    "sc_choice": _num(pred.sc_choice), "suite": _num(pred.suite),
                    "t1_candidates": [_candidate(c) for c in pred.t1_candidates],
                    "sc_candidates": [_candidate(c) for c in pred.sc_candidates]})
    return out


def record(quick: bool) -> dict:
    """Every prediction of the evaluations (see the module docstring), in order."""
    out: dict = {"evaluations": [], "synthetic": []}
    log: list = []
    orig_mig, orig_scal, orig_band = (mpet_eval.predict_migration, mpet_eval.predict_scalability,
                                      mpet_eval.scalability_band)

    def mig(*a, **kw):
        pred = orig_mig(*a, **kw)
        log.append(_prediction(pred, full=kw.get("interval") != "none"))
        return pred

    def scal(*a, **kw):
        pred = orig_scal(*a, **kw)
        log.append(_prediction(pred))
        return pred

    def band(*a, **kw):
        got = orig_band(*a, **kw)
        log.append({"band": _num(got)})
        return got

    mpet_eval.predict_migration, mpet_eval.predict_scalability = mig, scal
    mpet_eval.scalability_band = band
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, path in datasets(Path(tmp)):
                runs = [{"setup": s} for s in SETUPS if not (quick and s == "nested")]
                runs += [{"setup": "default", "single_reference": True}, {"scenario": "b"}]
                for kw in runs:
                    del log[:]
                    tables = []
                    for res in run([str(path)], **kw):
                        res["data"] = name
                        # the table without its time per prediction, which varies
                        tables.append(format_table({**res, "ms_per_prediction": 0.0})
                                      .split("\n"))
                    print(f"{name} {kw}: {len(log)} predictions", file=sys.stderr)
                    out["evaluations"].append({"data": name, "run": _num(kw),
                                               "predictions": list(log), "tables": tables})
    finally:
        mpet_eval.predict_migration, mpet_eval.predict_scalability = orig_mig, orig_scal
        mpet_eval.scalability_band = orig_band
    for n_w, runtime in ((20, True), (20, False), (40, False)):
        db = synthetic_database(n_workloads=n_w, runtime_parameters=runtime)
        for i in range(20):
            out["synthetic"].append({"db": [n_w, runtime], **_prediction(
                predict_migration(db, f"W{i}", f"P{i % 5}"))})
    return out


def _walk(a, b, where, diffs: dict):
    """Count the leaves of a and b: equal, equal within TOLERANCE, different; structure."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            diffs["structure"].append(where)
            return
        for k in a:
            _walk(a[k], b[k], f"{where}.{k}", diffs)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            diffs["structure"].append(where)
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{where}[{i}]", diffs)
    elif isinstance(a, float) and isinstance(b, (float, int)) or \
            isinstance(a, int) and isinstance(b, float):
        if a == b:
            diffs["equal"] += 1
            return
        rel = abs(a - b) / max(abs(a), abs(b))
        diffs["max_rel"] = max(diffs["max_rel"], rel)
        if rel <= TOLERANCE:
            diffs["close"] += 1
        else:
            diffs["different"].append((where, a, b))
    elif a == b:
        diffs["equal"] += 1
    else:
        diffs["different"].append((where, a, b))


def compare(before: dict, after: dict) -> int:
    diffs = {"equal": 0, "close": 0, "max_rel": 0.0, "different": [], "structure": []}
    # a --quick record against a whole one: the evaluations both have
    both = {json.dumps([e["data"], e["run"]]) for e in after["evaluations"]} & \
        {json.dumps([e["data"], e["run"]]) for e in before["evaluations"]}
    before, after = ({**r, "evaluations": [e for e in r["evaluations"] if json.dumps(
        [e["data"], e["run"]]) in both]} for r in (before, after))
    _walk(before, after, "", diffs)
    n_pred = sum(len(e["predictions"]) for e in after.get("evaluations", [])) + \
        len(after.get("synthetic", []))
    print(f"{n_pred} predictions; values: {diffs['equal']} bit-identical, {diffs['close']} "
          f"within {TOLERANCE:g} relative (largest {diffs['max_rel']:.3g}), "
          f"{len(diffs['different'])} different, {len(diffs['structure'])} not lining up")
    for where, a, b in (diffs["different"] + [(w, "", "") for w in diffs["structure"]])[:20]:
        print(f"  {where}: {a!r} -> {b!r}")
    return 1 if diffs["different"] or diffs["structure"] else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the record here")
    ap.add_argument("--quick", action="store_true", help="without the nested setup")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        return compare(before, after)
    if not args.out:
        ap.error("give --out FILE or --compare BEFORE AFTER")
    Path(args.out).write_text(json.dumps(record(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
