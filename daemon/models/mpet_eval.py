"""Leave-one-out evaluation of MPET (seed 000, section 4.1, Table 5; and scenario (b)). Pure.

Each profile (A, T) of a workload measured on at least two platforms is removed and predicted
from the rest (A on the other platforms, the suite on T) as scenario (a). The error of one
prediction is the mean relative error over the trend t(1)..t(nmax) at the measured core counts;
per kind (t(1), scaling with the true t(1), full) the table gives the geometric mean, median,
70/80/95 % percentiles, min and max over all predictions, beside two baselines: the naive
t(n) = t(1)/n and the same curve as on the source platform (the reference closest to T by
mean platform distance, eq. 19).

``evaluate_scalability`` does the same for scenario (b) (not evaluated in the seed): each
profile measured at one core and more is cut to its 1-core runs and its t(n) predicted from the
other workloads on its platform; scaling error (its own t(1)) beside t(1)/n.

``evaluate_nested`` chooses the selection settings inside the leave-one-out: for each workload
A, the settings of a fixed grid are scored by leave-one-out over the database without any of
A's profiles, and A's predictions use the best (t(1) and sc chosen separately). A's own
measurements never take part in choosing how A is predicted.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Hashable

import numpy as np

from .mpet_database import MpetDatabase
from .mpet_predict import (DEFAULT_SC, DEFAULT_T1, RATIO_SC, SEED_SC, SEED_T1, NoCandidates,
                           Selection, predict_migration, predict_scalability)
from .mpet_scenarios import scalability_band, with_serial

KINDS = ("t1", "scaling", "full")
METHODS = ("mpet", "naive", "same_curve")
STATS = ("gmean", "median", "p70", "p80", "p95", "min", "max")  # summarise's, beside count


def _ratio_variants(base: Selection, counts) -> list[Selection]:
    """``base`` at each (n_platforms, n_workloads): k = 0 (equal weights), and k = 1 or 3
    weighted by each of D_a, D_p, D_t (eq. 22)."""
    out = []
    for n_p, n_w in counts:
        out.append(dataclasses.replace(base, n_platforms=n_p, n_workloads=n_w, k=0))
        for k in (1, 3):
            for w in ("a", "p", "t"):
                out.append(dataclasses.replace(base, n_platforms=n_p, n_workloads=n_w, k=k,
                                               weight=w))
    return out


def _grid_t1() -> list[Selection]:
    out = [DEFAULT_T1]
    for mean in ("geometric", "arithmetic"):
        for n in (5, 3, 1):
            for wd in ("mean", "individual"):
                for k in (0, 3):
                    out.append(dataclasses.replace(SEED_T1, n_platforms=n, n_workloads=n,
                                                   workload_distance=wd, k=k, mean=mean,
                                                   basis="sc"))
    ratio = dataclasses.replace(SEED_T1, mean="geometric", basis="t1-ratio")
    out += _ratio_variants(ratio, ((5, 5), (3, 3)))
    out.append(dataclasses.replace(ratio, n_platforms=1, n_workloads=1))
    return list(dict.fromkeys(out))


def _grid_sc() -> list[Selection]:
    # the grid as fixed before "q-chosen" became the default (RATIO_SC was the default then);
    # q-chosen is itself a choice made per prediction on T's data
    out = [RATIO_SC]
    for base in (dataclasses.replace(RATIO_SC, basis="sc"), SEED_SC):
        for n_p, n_w in ((3, 10), (5, 5), (3, 3), (1, 1)):
            for k in (3, 0):
                out.append(dataclasses.replace(base, n_platforms=n_p, n_workloads=n_w, k=k))
    ratio = dataclasses.replace(SEED_SC, space="curve", mean="geometric", basis="q-ratio")
    out += _ratio_variants(ratio, ((3, 10), (5, 5), (3, 3)))
    return list(dict.fromkeys(out))


# Fixed before looking at any result: the seed's choices (counts 1..10 as in its Fig. 10,
# mean or individual workload distance, k = 0 or 3, as in section 4.1) crossed with this
# module's departures (geometric mean, eq. 21 on q(n) values, ratio distances with each of the
# seed's weights). The defaults come first, so a tie keeps them.
T1_GRID = _grid_t1()
SC_GRID = _grid_sc()


def trend_error(pred, meas) -> float:
    """Mean relative error |pred - meas| / meas over the trend."""
    p = np.asarray(pred, dtype=float)
    m = np.asarray(meas, dtype=float)
    return float(np.mean(np.abs(p - m) / m))


def gmean(errors) -> float:
    e = np.asarray([x for x in errors if math.isfinite(x)], dtype=float)
    return float(np.exp(np.mean(np.log(np.maximum(e, 1e-9))))) if e.size else math.nan


def summarise(errors: list[float]) -> dict:
    """Geometric mean, median, 70/80/95 % percentiles, min, max (Table 5's columns), count;
    each None without errors (eval-mpet's JSON keeps every key, docs/json-output.md)."""
    e = np.asarray([x for x in errors if math.isfinite(x)], dtype=float)
    if e.size == 0:
        return {"count": 0, **{k: None for k in STATS}}
    return {"count": int(e.size), "gmean": gmean(e), "median": float(np.median(e)),
            "p70": float(np.percentile(e, 70)), "p80": float(np.percentile(e, 80)),
            "p95": float(np.percentile(e, 95)), "min": float(e.min()), "max": float(e.max())}


def _platforms_of(db: MpetDatabase) -> dict[Hashable, set]:
    on: dict[Hashable, set] = {}
    for w, p in db.profiles:
        on.setdefault(w, set()).add(p)
    return on


def _cases(db: MpetDatabase, only=None):
    """(key, ns, measured) of every profile to predict, and the skipped ones."""
    on = _platforms_of(db)
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
        cases.append((key, ns, np.array([float(t.get(n, t.get(float(n)))) for n in ns])))
    return cases, skipped


def _score(db: MpetDatabase, t1_grid: list[Selection], sc_grid: list[Selection]):
    """Leave-one-out geometric-mean error of t(1) per t1 setting and of scaling per sc one."""
    e1 = [[] for _ in t1_grid]
    es = [[] for _ in sc_grid]
    cases, _ = _cases(db)
    for key, ns, meas in cases:
        rest = db.without(key)
        for i in range(max(len(t1_grid), len(sc_grid))):
            t1_sel, sc_sel = t1_grid[i % len(t1_grid)], sc_grid[i % len(sc_grid)]
            try:
                pred = predict_migration(rest, key[0], key[1], t1_sel, sc_sel, ns=ns,
                                         interval="none")
            except NoCandidates:
                break
            if i < len(t1_grid):
                e1[i].append(abs(pred.t1 - meas[0]) / meas[0])
            if i < len(sc_grid):
                es[i].append(trend_error(meas[0] * np.asarray(pred.t) / pred.t1, meas))
    big = math.inf
    s1 = [gmean(e) if e else big for e in e1]
    ss = [gmean(e) if e else big for e in es]
    s1 = [big if not math.isfinite(x) else x for x in s1]
    ss = [big if not math.isfinite(x) else x for x in ss]
    return s1, ss


def choose_settings(db: MpetDatabase, t1_grid=None, sc_grid=None) -> tuple[Selection, Selection]:
    """The t(1) and sc settings with the lowest leave-one-out error on ``db`` (first on ties)."""
    t1_grid = t1_grid or T1_GRID
    sc_grid = sc_grid or SC_GRID
    s1, ss = _score(db, t1_grid, sc_grid)
    return t1_grid[int(np.argmin(s1))], sc_grid[int(np.argmin(ss))]


def evaluate(db: MpetDatabase, t1_sel: Selection = DEFAULT_T1, sc_sel: Selection = DEFAULT_SC,
             only: set | None = None, settings=None, single_reference: bool = False,
             done: Callable[[int, int], None] | None = None) -> dict:
    """Leave-one-out over every (workload, platform) with the workload on >= 2 platforms.

    ``settings``: workload -> (t1_sel, sc_sel), overriding the two for that workload.
    ``single_reference``: each profile predicted once from each of the workload's other
    platforms alone (what ``opptune predict --from P`` does with one P), instead of once from
    all of them (section 4.1); the source-curve baseline is then that reference's.
    Returns {"summary": {method: {kind: summarise(...)}}, "cases": [...], "skipped": [...],
    "interval": {count, covered, single, calibrated, level, width}} (covered: cases whose
    measured t(n) lay inside the predicted interval at every n; single: cases resting on one
    candidate; calibrated: cases whose interval was calibrated on the target's other
    workloads, level: their mean nominal level, null without any; width: the median over the
    cases of the largest upper/lower over n).
    """
    on = _platforms_of(db)
    errs = {m: {k: [] for k in KINDS} for m in METHODS}
    cases, skipped = _cases(db, only)
    rows = []
    runs = list(_runs(db, cases, on, single_reference))
    for i, (key, ns, meas, refs) in enumerate(runs):
        if done:
            done(i, len(runs))
        a, target = key
        rest = db.without(key)
        s1, ss = (settings or {}).get(a, (t1_sel, sc_sel))
        try:
            pred = predict_migration(rest, a, target, s1, ss, refs=refs, ns=ns)
        except NoCandidates as exc:
            skipped.append({"workload": a, "platform": target, "why": str(exc)})
            continue
        t1 = meas[0]
        shape = np.asarray(pred.t) / pred.t1
        nsa = np.asarray(ns, dtype=float)
        dist = rest.distances()
        dpm = [dist.d_p_mean(p, target) for p in refs]
        source = refs[int(np.argmin([d if math.isfinite(d) else 2.0 for d in dpm]))]
        src_q = rest.q_values((a, source), nsa)
        src_t1 = rest.t1((a, source))
        inside = bool(np.all((np.asarray(pred.lower) <= meas) & (meas <= np.asarray(pred.upper))))
        row = {"workload": a, "platform": target, "references": refs, "source": source, "ns": ns,
               "measured": meas.tolist(), "predicted": pred.t, "lower": pred.lower,
               "upper": pred.upper, "single_candidate": pred.single_candidate,
               "level": pred.level, "inside": inside,
               "curves": {"mpet": pred.t, "naive": (1.0 / nsa).tolist(),
                          "same_curve": (src_q / nsa).tolist()}}
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
        rows.append(row)
    if done:
        done(len(runs), len(runs))
    summary = {m: {k: summarise(errs[m][k]) for k in KINDS} for m in METHODS}
    return {"summary": summary, "cases": rows, "skipped": skipped,
            "interval": _interval_summary(rows)}


def evaluate_scalability(db: MpetDatabase, sel: Selection = SEED_SC,
                         done: Callable[[int, int], None] | None = None) -> dict:
    """Scenario (b) left one out: every profile with t(1) and at least one more core count is
    cut to its 1-core runs and predicted from the other workloads on its platform
    (``predict_scalability``, interval ``scalability_band``). Returns ``evaluate``'s shape,
    for "mpet" and "naive" (t(1)/n); t(1) is the measured one, so there is no t(1) error and
    "full" holds the same errors as "scaling"."""
    errs = {m: {k: [] for k in KINDS} for m in METHODS}
    rows, skipped = [], []
    keys = []
    for key in sorted(db.profiles, key=str):
        t = db.profiles[key].get("t") or {}
        ns = sorted(int(n) for n in t if t[n] is not None)
        if 1 in ns and len(ns) >= 2:
            keys.append((key, t, ns))
    for i, (key, t, ns) in enumerate(keys):
        if done:
            done(i, len(keys))
        a, plat = key
        meas = np.array([float(t.get(n, t.get(float(n)))) for n in ns])
        sub = with_serial(db, key)
        try:
            pred = predict_scalability(sub, a, plat, sel, ns=ns)
        except NoCandidates as exc:
            skipped.append({"workload": a, "platform": plat, "why": str(exc)})
            continue
        lo, hi, _, level = scalability_band(sub, pred, db.platforms.get(plat, {}), pred.t)
        inside = bool(np.all((np.asarray(lo) <= meas) & (meas <= np.asarray(hi))))
        found = {"mpet": trend_error(pred.t, meas),
                 "naive": trend_error(meas[0] / np.asarray(ns, dtype=float), meas)}
        for m, v in found.items():
            errs[m]["scaling"].append(v)
            errs[m]["full"].append(v)
        rows.append({"workload": a, "platform": plat, "ns": ns, "measured": meas.tolist(),
                     "predicted": pred.t, "lower": lo, "upper": hi, "level": level,
                     "single_candidate": pred.single_candidate, "inside": inside,
                     **{m: {"scaling": v, "full": v} for m, v in found.items()},
                     "curves": {"mpet": pred.t,
                                "naive": (1.0 / np.asarray(ns, dtype=float)).tolist()}})
    if done:
        done(len(keys), len(keys))
    summary = {m: {k: summarise(errs[m][k]) for k in KINDS} for m in METHODS}
    return {"summary": summary, "cases": rows, "skipped": skipped,
            "interval": _interval_summary(rows)}


def operating_points(rows: list[dict], choose, tolerance: float,
                     methods: tuple[str, ...] = METHODS + ("measured",)) -> dict:
    """What each method's predicted curve would have run the workload at: the core count
    ``choose(ns, curve, tolerance)`` picks from it (the recommender's rule: the fewest cores
    within ``tolerance`` of the best predicted time), judged on the measured times. Per method
    of the cases' "curves": {count, within: the share of cases whose measured time there is
    within ``tolerance`` of the measured best (the rule's own criterion met), mean / median /
    p95 / max of the slowdown measured t(chosen) / min measured t - 1, and the same rule on
    the measured times themselves as "measured" (its slowdown is at most ``tolerance``)}.
    A curve with no positive time to choose by (eq. 21 on elements can give one) is a choice
    not made: counted in "failed" and as not within, left out of the slowdowns. Each of
    ``methods`` is there, a method without curves (scenario b has no source curve) with count
    0 and None."""
    slow: dict[str, list[float]] = {}
    for r in rows:
        meas = np.asarray(r["measured"], dtype=float)
        for m, curve in {**r.get("curves", {}), "measured": meas}.items():
            try:
                i = choose(r["ns"], curve, tolerance)
            except ValueError:
                slow.setdefault(m, []).append(math.nan)
                continue
            slow.setdefault(m, []).append(float(meas[i] / meas.min() - 1.0))
    out = {m: {"count": 0, "failed": 0, "within": None,
               **{k: None for k in ("mean", "median", "p95", "max")}}
           for m in methods if m not in slow}
    for m, s in slow.items():
        e = np.asarray(s)
        made = e[np.isfinite(e)]
        out[m] = {"count": int(e.size), "failed": int(e.size - made.size),
                  "within": float(np.sum(made <= tolerance + 1e-12) / e.size)}
        out[m].update({k: None for k in ("mean", "median", "p95", "max")} if not made.size else
                      {"mean": float(made.mean()), "median": float(np.median(made)),
                       "p95": float(np.percentile(made, 95)), "max": float(made.max())})
    return {m: out[m] for m in [*methods, *(m for m in out if m not in methods)]}


def _interval_summary(rows: list[dict]) -> dict:
    """The cases' intervals: {count, covered, single, calibrated, level, width} (``evaluate``)."""
    levels = [r["level"] for r in rows if r["level"] is not None]
    # a prediction without a positive time (eq. 21 on elements can give none) has no width:
    # the median is over those that have one
    with np.errstate(all="ignore"):
        ratios = [np.asarray(r["upper"], dtype=float) / np.asarray(r["lower"], dtype=float)
                  for r in rows]
    widths = [float(np.max(x)) for x in ratios if x.size and np.all(np.isfinite(x) & (x > 0))]
    return {"count": len(rows), "covered": sum(r["inside"] for r in rows),
            "single": sum(r["single_candidate"] for r in rows), "calibrated": len(levels),
            "level": float(np.mean(levels)) if levels else None,
            "width": float(np.median(widths)) if widths else None}


def _runs(db: MpetDatabase, cases, on: dict, single_reference: bool):
    """(key, ns, measured, references) of each prediction: one per case from all of the
    workload's other platforms, or one per case and reference."""
    for key, ns, meas in cases:
        refs = sorted((p for p in on[key[0]] if p != key[1]), key=str)
        for group in ([[p] for p in refs] if single_reference else [refs]):
            yield key, ns, meas, group


def evaluate_nested(db: MpetDatabase, t1_grid=None, sc_grid=None,
                    done: Callable[[str, int, int], None] | None = None) -> dict:
    """``evaluate`` with each workload's settings chosen by ``choose_settings`` on the
    database without that workload (see the module docstring); "chosen" lists them.
    ``done(what, i, n)`` is told each step of the two phases."""
    chosen = {}
    names = sorted(_platforms_of(db), key=str)
    for i, a in enumerate(names):
        if done:
            done("workloads' settings chosen", i, len(names))
        train = MpetDatabase({k: v for k, v in db.profiles.items() if k[0] != a}, db.platforms,
                             {k: v for k, v in db.sc.items() if k[0] != a}, db.counters)
        if not _cases(train)[0]:
            chosen[a] = (DEFAULT_T1, DEFAULT_SC)
            continue
        chosen[a] = choose_settings(train, t1_grid, sc_grid)
    if done:
        done("workloads' settings chosen", len(names), len(names))
    res = evaluate(db, settings=chosen,
                   done=(lambda i, n: done("predictions", i, n)) if done else None)
    res["chosen"] = {a: {"t1": dataclasses.asdict(s1), "sc": dataclasses.asdict(ss)}
                     for a, (s1, ss) in chosen.items()}
    return res
