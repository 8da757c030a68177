"""Replay every split in data/peer-baselines/*.json with opptune's model choice, beside every peer.

For each evaluation: training times = median over repetitions of the group's rows in
data/<dataset>/data.csv at the training (cores, freq) configurations; test = the JSON's test
configurations and measured times. Per split and method: pooled MAPE over all test points,
median and maximum APE, coverage (share of test points inside the 90 % prediction interval,
with the counts; the peers published no intervals) and fit wall time per group (median / max).

    python3 benchmarks/peer_baselines.py [--models opptune,auto_x,amdahl,...] [--json]
    python3 benchmarks/peer_baselines.py --prior   # the prior on one-core-count evaluations

Default: one opptune row, ``opptune`` = the choice the daemon makes
(``fitter.fit_group(train, target=query, others=...)``: its candidate pool, told the
configurations it will predict, its interval pooled over the platform's other groups in the
dataset as the daemon pools the store's; their replays are cached across evaluations as in
the daemon, and the fit time includes them), then every peer, then a summary (opptune vs
the best peer per split). The peers are scored on the evaluations opptune fitted (loghin: 7
evaluations have one training point).

Variants (``--models``): registry names (one model), ``auto`` = k-fold CV choice among the
analytic models (``opptune fit``), ``auto_all`` = the same among every installed model;
``auto_x`` / ``auto_xall``: the same pools told the query (``target=``); ``auto_x_fb`` /
``auto_x_combine`` / ``auto_x_1se`` / ``auto_x_min`` name select.choose's rule. Only the
training rows are used; the query's times are not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from opptune.daemon.fitter import fit_group
from opptune.daemon.models import registry
from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.select import ANALYTIC, choose
from opptune.daemon.recommend import platform_others
from opptune.daemon.tidy import median_reps, read_tidy

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
# name -> (candidate pool (None = every installed model), told the query?, choice rule
# (None = select.choose's default))
OLD_POOL = ["amdahl", "usl", "memwall"]
AUTO: dict[str, tuple[list[str] | None, bool, str | None]] = {
    "auto": (list(ANALYTIC), False, None), "auto_all": (None, False, None),
    "auto_x": (list(ANALYTIC), True, None), "auto_xall": (None, True, None),
    # rule "fallback" (lowest CV MAPE, hold fallback) and "combine" (forecast combination of
    # the validated candidates, raw and end-anchored: select.combination_weights)
    "auto_x_fb": (list(ANALYTIC), True, "fallback"),
    "auto_x_combine": (list(ANALYTIC), True, "combine"),
    "auto_combine": (list(ANALYTIC), False, "combine"),
    # one-standard-error rule (simplest model within 1 SE of the best), hold baseline included
    "auto_x_1se": (list(ANALYTIC), True, "1se"),
    # the previous choice (lowest CV MAPE outright, no hold baseline), for comparison
    "auto_x_min": (OLD_POOL, True, "min"), "auto_min": (OLD_POOL, False, "min"),
}
DAEMON = "opptune"  # the daemon's choice: fitter.fit_group(train, target=query, others=)


def _load_groups(dataset: str) -> dict[tuple, Observations]:
    # relearn records runs shorter than its timer as 0 s: missing, as the peers read them
    return {g.key: median_reps(g.obs)
            for g in read_tidy(DATA / dataset / "data.csv", zero_time="missing")}


def _pick(obs: Observations, configs: list[list[float]]) -> Observations:
    """Rows of ``obs`` at the (cores, freq) configurations; freq -1 = no frequency axis."""
    fq = np.nan_to_num(obs.freq_mhz if obs.freq_mhz is not None else np.full(len(obs), np.nan),
                       nan=-1.0)
    idx = []
    for c, f in configs:
        hit = np.flatnonzero((obs.cores == c) & np.isclose(fq, f))
        if hit.size == 0:
            raise KeyError(f"configuration cores={c} freq={f} not in data")
        idx.append(hit[0])
    return obs.subset(np.array(idx))


def fit_predict(name: str, train: Observations, query: Observations,
                others: list[Observations] = ()
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, str]:
    """Predicted times with their 90 % interval (value, lower, upper), fit seconds and the
    name actually used (a choice: the chosen model). ``others``: the platform's other
    groups, what the daemon's store holds beside the group (opptune only)."""
    t0 = time.perf_counter()
    if name == DAEMON:
        model, _ = fit_group(train, target=query, others=others)
        used = model.name
    elif name in AUTO:
        pool, extrap, rule = AUTO[name]
        kw = {} if rule is None else {"rule": rule}
        sel = choose(train, pool, target=query if extrap else None, **kw)
        model, used = sel.model, sel.name
    else:
        model, used = registry.get(name).fit(train), name
    fit_s = time.perf_counter() - t0
    pr = model.predict(query)
    return (np.asarray(pr.value, float), np.asarray(pr.lower, float),
            np.asarray(pr.upper, float), fit_s, used)


def _stats(ape: list[np.ndarray], fit_s: list[float], inside: list[np.ndarray] | None) -> dict:
    """Pooled MAPE, median / max APE (%), coverage (%), fit median / max (s), fits."""
    a = np.concatenate(ape) if ape else np.empty(0)
    nan = float("nan")
    ins = np.concatenate(inside) if inside else np.empty(0, bool)
    cov = 100 * float(np.mean(ins)) if ins.size else nan
    return {"mape": float(np.mean(a)) if a.size else nan,
            "median_ape": float(np.median(a)) if a.size else nan,
            "max_ape": float(np.max(a)) if a.size else nan,
            "coverage": cov, "inside": int(ins.sum()), "points": int(ins.size),
            "fit_s_median": float(np.median(fit_s)) if fit_s else nan,
            "fit_s_max": float(np.max(fit_s)) if fit_s else nan,
            "fit_s": float(np.mean(fit_s)) if fit_s else nan,
            "n_fits": len(fit_s)}


def replay(path: Path, models: list[str]) -> dict:
    """One JSON file replayed: per model and per peer pooled MAPE, median and max APE,
    interval coverage, fit times; the peers on the evaluations the first model fitted."""
    spec = json.loads(path.read_text())
    groups = _load_groups(spec["dataset"])
    ape: dict[str, list[np.ndarray]] = {m: [] for m in models}
    inside: dict[str, list[np.ndarray]] = {m: [] for m in models}
    fit_s: dict[str, list[float]] = {m: [] for m in models}
    failed: dict[str, int] = {m: 0 for m in models}
    chosen: dict[str, dict[str, int]] = {m: {} for m in models}
    done: dict[str, set[int]] = {m: set() for m in models}
    for i, ev in enumerate(spec["evaluations"]):
        key = tuple(ev["group"])
        obs = groups[key]
        train = _pick(obs, ev["train"])
        # the store beside the group: the platform's other groups, all their rows (never
        # the group's own test rows); their replays size opptune's interval (fit_group)
        others = platform_others(key, groups.items())
        test = np.asarray(ev["test"], float)
        fq = np.where(test[:, 1] < 0, np.nan, test[:, 1])
        query = Observations.query(test[:, 0], fq)
        truth = np.asarray(ev["test_time"], float)
        for m in models:
            try:
                pred, lo, hi, s, used = fit_predict(m, train, query, others)
            except NotEnoughData:
                failed[m] += 1
                continue
            ape[m].append(100 * np.abs(pred - truth) / truth)
            inside[m].append((lo <= truth) & (truth <= hi))
            fit_s[m].append(s)
            done[m].add(i)
            chosen[m][used] = chosen[m].get(used, 0) + 1
    ref = models[0]
    # every peer on the evaluations the reference (first) model fitted; a peer that a time
    # budget stopped is scored on the ones it fitted (n_fits says how many)
    peer_ape: dict[str, list[np.ndarray]] = {k: [] for k in spec["summary"]}
    peer_fit: dict[str, list[float]] = {k: [] for k in spec["summary"]}
    for i, ev in enumerate(spec["evaluations"]):
        if i not in done[ref]:
            continue
        truth = np.asarray(ev["test_time"], float)
        for k, v in ev["peers"].items():
            if v.get("pred") is not None:
                peer_ape.setdefault(k, []).append(
                    100 * np.abs(np.asarray(v["pred"], float) - truth) / truth)
                peer_fit.setdefault(k, []).append(float(v["fit_s"]))
    peers = {k: {**_stats(peer_ape[k], peer_fit[k], None), "of": len(done[ref])}
             for k in peer_ape if peer_ape[k]}
    complete = {k: v for k, v in peers.items() if v["n_fits"] == len(done[ref])}
    best = min(complete, key=lambda k: complete[k]["mape"]) if complete else None
    ours = {m: {**_stats(ape[m], fit_s[m], inside[m]), "failed": failed[m],
                "chosen": chosen[m]} for m in models}
    return {"file": path.name, "dataset": spec["dataset"], "split": spec["split"],
            "evals": spec["n_evaluations"], "ours": ours, "peers": peers,
            "best_peer": ({"name": best, **peers[best], "on_evals": len(done[ref])} if best
                          else {"name": None, "mape": float("nan"), "median_ape": float("nan"),
                                "max_ape": float("nan"), "fit_s_median": float("nan"),
                                "on_evals": 0})}


def prior_check(path: Path) -> list[dict]:
    """The evaluations of ``path`` with a single training core count, predicted by the prior
    (models/prior.py) from three sources in turn, every other group of the dataset as the
    store: the platform's other workloads only; the default order (this workload on other
    platforms first); the nearest platforms by MPET distance only (this workload's curves
    withheld). Per source: MAPE, median and max APE, points inside the interval."""
    from opptune.daemon.models.prior import StoredGroup, fit_prior
    spec = json.loads(path.read_text())
    groups = _load_groups(spec["dataset"])
    out = []
    for source in ("platform", "default", "similar"):
        ape, inside, used = [], [], set()
        for ev in spec["evaluations"]:
            key = tuple(ev["group"])
            train = _pick(groups[key], ev["train"])
            if np.unique(train.cores).size > 1:
                continue
            test = np.asarray(ev["test"], float)
            query = Observations.query(test[:, 0], np.where(test[:, 1] < 0, np.nan, test[:, 1]))
            truth = np.asarray(ev["test_time"], float)
            wl = "/".join(map(str, key[1:]))
            others = platform_others(key, groups.items())
            stored = [StoredGroup("/".join(map(str, k[1:])), k[0], o)
                      for k, o in groups.items() if k != key
                      and not (source == "similar" and k[1:] == key[1:])]
            try:
                if source == "platform":
                    fit = fit_prior(train, others)
                else:
                    fit = fit_prior(train, others if source == "default" else [], workload=wl,
                                    platform=key[0], stored=stored)
            except NotEnoughData:
                continue
            pr = fit.predict(query)
            ape.append(100 * np.abs(pr.value - truth) / truth)
            inside.append((pr.lower <= truth) & (truth <= pr.upper))
            used.add(str(fit.quality["prior_source"]))
        a = np.concatenate(ape) if ape else np.full(1, np.nan)
        out.append({"source": source, "evals": len(ape), "mape": float(np.mean(a)),
                    "median_ape": float(np.median(a)), "max_ape": float(np.max(a)),
                    "inside": int(np.concatenate(inside).sum()) if inside else 0,
                    "points": int(sum(i.size for i in inside)), "used": sorted(used)})
    return out


def _warm_up() -> None:
    # first fits pay for lazy imports (scipy.stats, sklearn); keep that out of the timings
    p = np.array([1.0, 2, 4, 8, 1, 2, 4, 8])
    obs = Observations(cores=p, time_s=10 / p + 1, freq_mhz=np.repeat([1000.0, 2000.0], 4))
    for name in registry.available():
        try:
            registry.get(name).fit(obs).predict(obs)
        except Exception:  # noqa: BLE001 - warm-up only
            pass


def _row(name: str, o: dict, evals: int) -> str:
    cov = "n/a" if o["coverage"] != o["coverage"] else _cov(o)
    note = f" ({o['n_fits']}/{evals})" if o["n_fits"] != evals else ""
    return (f"| {name}{note} | {o['mape']:.2f}% | {o['median_ape']:.2f}% | {o['max_ape']:.1f}% "
            f"| {cov} | {_ms(o['fit_s_median'])} / {_ms(o['fit_s_max'])} |")


def _cov(o: dict) -> str:
    """Coverage with its counts: on a split of a few dozen test points one point moves it by
    several percent (18 points at a true 90 %: 18 / 18 inside has probability 0.15)."""
    return f"{o['coverage']:.0f}% ({o['inside']}/{o['points']})"


def _ms(s: float) -> str:
    if s != s:
        return "-"
    return f"{1e3 * s:.0f} ms" if s < 1 else f"{s:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DAEMON,
                    help=f"comma-separated: {DAEMON} (the daemon's choice, default), registry "
                         f"names, or the choices {', '.join(AUTO)}")
    ap.add_argument("--files", default="*.json", help="glob under data/peer-baselines")
    ap.add_argument("--json", action="store_true", help="one JSON object per file")
    ap.add_argument("--prior", action="store_true",
                    help="instead: the prior-based prediction on the evaluations with one "
                         "training core count, per source of curves")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    known = set(registry.MODELERS) | set(AUTO) | {DAEMON}
    bad = [m for m in models if m not in known]
    if not models or bad:
        print(f"peer_baselines: unknown model {', '.join(bad) or '(none given)'}; "
              f"use {DAEMON}, {', '.join(AUTO)} or {', '.join(registry.MODELERS)}",
              file=sys.stderr)
        return 2
    files = sorted((DATA / "peer-baselines").glob(args.files))
    if not files:
        print(f"peer_baselines: no file matches {args.files!r} under "
              f"{DATA / 'peer-baselines'}", file=sys.stderr)
        return 2
    if args.prior:
        checks = {p.name: prior_check(p) for p in files}
        if args.json:
            print(json.dumps(checks))
            return 0
        print("| file | curves from | evals | MAPE | median APE | max APE | inside the 90 % "
              "interval | sources used |")
        print("|---|---|---|---|---|---|---|---|")
        for name, rows in checks.items():
            for r in rows:
                if r["evals"]:
                    print(f"| {name} | {r['source']} | {r['evals']} | {r['mape']:.1f}% "
                          f"| {r['median_ape']:.1f}% | {r['max_ape']:.1f}% "
                          f"| {r['inside']} / {r['points']} | {'; '.join(r['used'])} |")
        return 0
    _warm_up()
    results = [replay(p, models) for p in files]
    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0
    ref = models[0]
    for r in results:
        print(f"### {r['dataset']} {r['split']} ({r['evals']} evaluations)\n")
        print("| method | pooled MAPE | median APE | max APE | 90 % interval coverage "
              "| fit time per group (median / max) |")
        print("|---|---|---|---|---|---|")
        for m in models:
            print(_row(m, r["ours"][m], r["evals"]))
        for k, o in sorted(r["peers"].items(), key=lambda kv: kv[1]["mape"]):
            print(_row(k, o, r["best_peer"]["on_evals"]))
        print()
    print(f"### Summary: {ref} vs the best peer\n")
    print(f"| dataset / split | evals | {ref}: MAPE / median / max APE | coverage "
          "| fit median / max | best peer: MAPE / median / max APE, fit median | verdict |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        o, b = r["ours"][ref], r["best_peer"]
        note = f" ({o['n_fits']}/{r['evals']})" if o["n_fits"] != r["evals"] else ""
        d = o["mape"] - b["mape"]
        verdict = ("no fit" if d != d else "ok" if d <= 0 else "behind") + f" ({d:+.2f} pt)"
        print(f"| {r['dataset']} {r['split']} | {r['evals']}{note} "
              f"| {o['mape']:.2f}% / {o['median_ape']:.2f}% / {o['max_ape']:.1f}% "
              f"| {_cov(o)} | {_ms(o['fit_s_median'])} / {_ms(o['fit_s_max'])} "
              f"| {b['name']} {b['mape']:.2f}% / {b['median_ape']:.2f}% / {b['max_ape']:.1f}%, "
              f"{_ms(b['fit_s_median'])} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
