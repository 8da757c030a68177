"""Replay every split in data/peer-baselines/*.json with opptune's models and compare with peers.

For each evaluation: training times = median over repetitions of the group's rows in
data/<dataset>/data.csv at the training (cores, freq) configurations; test = the JSON's test
configurations and measured times. Pooled MAPE over all test points of a file, mean fit wall time.

    python3 benchmarks/peer_baselines.py [--models amdahl,usl,memwall,auto,auto_x] [--json]

The default columns are the three analytic models, ``auto`` (the choice ``opptune fit`` makes)
and ``auto_x`` (the choice the daemon makes: it is told the configurations it will predict);
the last column compares ``auto_x`` with the best peer.

``auto`` = k-fold CV choice among the analytic models (amdahl, usl, memwall); ``auto_all`` =
k-fold CV choice among every installed model (regression family and learners included, slower).
``auto_x`` / ``auto_xall``: the same pools, but the choice is told the query (``target=``): where
the test configurations lie outside the training range (extrapolate-cores, leave-freq-out, the
random draws that leave out the smallest/largest core counts) candidates are scored by forward
chaining instead of random folds. Only the training rows are used; the query's times are not.
These use select.choose's default rule; ``auto_x_fb`` / ``auto_x_combine`` name the rule
("fallback" / "combine": forecast combination).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from opptune.daemon.models import registry
from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.select import ANALYTIC, choose
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


def fit_predict(name: str, train: Observations, query: Observations) -> tuple[np.ndarray, float, str]:
    """Predicted times, fit seconds and the name actually used (auto: the chosen model)."""
    t0 = time.perf_counter()
    if name in AUTO:
        pool, extrap, rule = AUTO[name]
        kw = {} if rule is None else {"rule": rule}
        sel = choose(train, pool, target=query if extrap else None, **kw)
        model, used = sel.model, sel.name
    else:
        model, used = registry.get(name).fit(train), name
    fit_s = time.perf_counter() - t0
    return model.predict(query).value, fit_s, used


def replay(path: Path, models: list[str]) -> dict:
    """One JSON file replayed: per model pooled MAPE, mean fit time, failures, choices."""
    spec = json.loads(path.read_text())
    groups = _load_groups(spec["dataset"])
    ape: dict[str, list[np.ndarray]] = {m: [] for m in models}
    fit_s: dict[str, list[float]] = {m: [] for m in models}
    failed: dict[str, int] = {m: 0 for m in models}
    chosen: dict[str, dict[str, int]] = {m: {} for m in models}
    done: dict[str, set[int]] = {m: set() for m in models}
    for i, ev in enumerate(spec["evaluations"]):
        obs = groups[tuple(ev["group"])]
        train = _pick(obs, ev["train"])
        test = np.asarray(ev["test"], float)
        fq = np.where(test[:, 1] < 0, np.nan, test[:, 1])
        query = Observations.query(test[:, 0], fq)
        truth = np.asarray(ev["test_time"], float)
        for m in models:
            try:
                pred, s, used = fit_predict(m, train, query)
            except NotEnoughData:
                failed[m] += 1
                continue
            ape[m].append(100 * np.abs(pred - truth) / truth)
            fit_s[m].append(s)
            done[m].add(i)
            chosen[m][used] = chosen[m].get(used, 0) + 1
    peers = {k: {"mape": v["mape"], "fit_s": v["fit_s_mean"], "n_fits": v["n_fits"]}
             for k, v in spec["summary"].items()}
    # best peer on exactly the evaluations our reference model (last in --models) fitted
    ref = models[-1]
    peer_ape: dict[str, list[np.ndarray]] = {}
    for i, ev in enumerate(spec["evaluations"]):
        if i not in done[ref]:
            continue
        truth = np.asarray(ev["test_time"], float)
        for k, v in ev["peers"].items():
            if v.get("pred") is not None:
                peer_ape.setdefault(k, []).append(100 * np.abs(np.asarray(v["pred"], float) - truth) / truth)
    same = {k: float(np.mean(np.concatenate(v))) for k, v in peer_ape.items()
            if len(v) == len(done[ref])}
    best = min(same, key=same.get)
    ours = {m: {"mape": float(np.mean(np.concatenate(ape[m]))) if ape[m] else float("nan"),
                "fit_s": float(np.mean(fit_s[m])) if fit_s[m] else float("nan"),
                "n_fits": len(fit_s[m]), "failed": failed[m], "chosen": chosen[m]}
            for m in models}
    return {"file": path.name, "dataset": spec["dataset"], "split": spec["split"],
            "evals": spec["n_evaluations"], "ours": ours, "peers": peers,
            "best_peer": {"name": best, "mape": same[best], "fit_s": peers[best]["fit_s"],
                          "on_evals": len(done[ref])}}


def _warm_up() -> None:
    # first fits pay for lazy imports (scipy.stats, sklearn); keep that out of the timings
    p = np.array([1.0, 2, 4, 8, 1, 2, 4, 8])
    obs = Observations(cores=p, time_s=10 / p + 1, freq_mhz=np.repeat([1000.0, 2000.0], 4))
    for name in registry.available():
        try:
            registry.get(name).fit(obs).predict(obs)
        except Exception:  # noqa: BLE001 - warm-up only
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="amdahl,usl,memwall,auto,auto_x",
                    help="comma-separated registry names, plus auto / auto_all")
    ap.add_argument("--files", default="*.json", help="glob under data/peer-baselines")
    ap.add_argument("--json", action="store_true", help="one JSON object per file")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    _warm_up()
    results = [replay(p, models) for p in sorted((DATA / "peer-baselines").glob(args.files))]
    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0
    pick = next((m for m in ("auto_xall", "auto_x", "auto_x_combine", "auto_all", "auto")
                 if m in models), models[-1])
    head = ["dataset / split", "evals", *models, "best peer", f"{pick} vs best"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in results:
        cells = [f"{r['dataset']} {r['split']}", str(r["evals"])]
        for m in models:
            o = r["ours"][m]
            note = f" ({o['n_fits']}/{r['evals']})" if o["n_fits"] != r["evals"] else ""
            cells.append(f"{o['mape']:.1f}% / {1e3 * o['fit_s']:.0f} ms{note}")
        b = r["best_peer"]
        cells.append(f"{b['name']} {b['mape']:.1f}% / {b['fit_s']:.2f} s"
                     + (f" (on {b['on_evals']})" if b["on_evals"] != r["evals"] else ""))
        d = r["ours"][pick]["mape"] - b["mape"]
        cells.append(f"{'ok' if d <= 0 else 'behind'} ({d:+.1f} pt)")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
