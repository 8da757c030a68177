"""Leave-one-out evaluation of MPET migration (seed 000, section 4.1, Table 5). Pure.

Each profile (A, T) of a workload measured on at least two platforms is removed and predicted
from the rest (A on the other platforms, the suite on T) as scenario (a). The error of one
prediction is the mean relative error over the trend t(1)..t(nmax) at the measured core counts;
per kind (t(1), scaling with the true t(1), full) the table gives the geometric mean, median,
70/80/95 % percentiles, min and max over all predictions, beside two baselines: the naive
t(n) = t(1)/n and the same curve as on the source platform (the reference closest to T by
mean platform distance, eq. 19).
"""

from __future__ import annotations

import math
from typing import Hashable

import numpy as np

from .mpet_curve import cpu_time_ratio, eval_curve, PARAMS
from .mpet_predict import SEED_SC, SEED_T1, MpetDatabase, NoCandidates, Selection, predict_migration

KINDS = ("t1", "scaling", "full")
METHODS = ("mpet", "naive", "same_curve")


def trend_error(pred, meas) -> float:
    """Mean relative error |pred - meas| / meas over the trend."""
    p = np.asarray(pred, dtype=float)
    m = np.asarray(meas, dtype=float)
    return float(np.mean(np.abs(p - m) / m))


def summarise(errors: list[float]) -> dict:
    """Geometric mean, median, 70/80/95 % percentiles, min, max (Table 5's columns), count."""
    e = np.asarray([x for x in errors if math.isfinite(x)], dtype=float)
    if e.size == 0:
        return {"count": 0}
    gm = float(np.exp(np.mean(np.log(np.maximum(e, 1e-9)))))
    return {"count": int(e.size), "gmean": gm, "median": float(np.median(e)),
            "p70": float(np.percentile(e, 70)), "p80": float(np.percentile(e, 80)),
            "p95": float(np.percentile(e, 95)), "min": float(e.min()), "max": float(e.max())}


def _source_ratio(db: MpetDatabase, workload, source, ns) -> np.ndarray:
    """The source platform's n t(n)/t(1): measured where it was, its fitted curve elsewhere."""
    meas = cpu_time_ratio(db.profiles[(workload, source)].get("t") or {})
    topo = db.platforms.get(source, {})
    off = 6 * len(PARAMS)
    fitted = eval_curve(db.sc[(workload, source)][off: off + 6], ns, topo.get("n_nu"),
                        topo.get("n_ht"))
    return np.array([meas.get(float(n), f) for n, f in zip(ns, fitted)])


def evaluate(db: MpetDatabase, t1_sel: Selection = SEED_T1, sc_sel: Selection = SEED_SC,
             only: set | None = None) -> dict:
    """Leave-one-out over every (workload, platform) with the workload on >= 2 platforms.

    Returns {"summary": {method: {kind: summarise(...)}}, "cases": [...], "skipped": [...]}.
    """
    on: dict[Hashable, set] = {}
    for w, p in db.profiles:
        on.setdefault(w, set()).add(p)
    errs = {m: {k: [] for k in KINDS} for m in METHODS}
    cases, skipped = [], []
    for key in sorted(db.profiles, key=str):
        a, target = key
        if len(on[a]) < 2 or (only is not None and key not in only):
            continue
        t = db.profiles[key].get("t") or {}
        ns = sorted(int(n) for n in t if t[n] is not None)
        if not ns or 1 not in ns:
            skipped.append({"workload": a, "platform": target, "why": "no t(1)"})
            continue
        meas = np.array([float(t.get(n, t.get(float(n)))) for n in ns])
        rest = db.without(key)
        try:
            pred = predict_migration(rest, a, target, t1_sel, sc_sel, ns=ns)
        except NoCandidates as exc:
            skipped.append({"workload": a, "platform": target, "why": str(exc)})
            continue
        t1 = meas[0]
        shape = np.asarray(pred.t) / pred.t1
        nsa = np.asarray(ns, dtype=float)
        dist = rest.distances()
        refs = sorted(p for p in on[a] if p != target)
        dpm = [dist.d_p_mean(p, target) for p in refs]
        source = refs[int(np.argmin([d if math.isfinite(d) else 2.0 for d in dpm]))]
        src_q = _source_ratio(rest, a, source, nsa)
        src_t1 = rest.t1((a, source))
        row = {"workload": a, "platform": target, "source": source, "ns": ns,
               "measured": meas.tolist(), "predicted": pred.t}
        found = {
            "mpet": (abs(pred.t1 - t1) / t1, trend_error(t1 * shape, meas),
                     trend_error(pred.t, meas)),
            # the naive baseline has no t(1) of its own: its full prediction uses MPET's
            "naive": (math.nan, trend_error(t1 / nsa, meas),
                      trend_error(pred.t1 / nsa, meas)),
            "same_curve": (abs(src_t1 - t1) / t1, trend_error(t1 * src_q / nsa, meas),
                           trend_error(src_t1 * src_q / nsa, meas)),
        }
        for m, vals in found.items():
            row[m] = dict(zip(KINDS, vals))
            for k, v in zip(KINDS, vals):
                errs[m][k].append(v)
        cases.append(row)
    summary = {m: {k: summarise(errs[m][k]) for k in KINDS} for m in METHODS}
    return {"summary": summary, "cases": cases, "skipped": skipped}
