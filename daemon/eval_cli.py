"""``opptune eval``: how prediction error falls with the number of measurements (seed 003,
section 4.3): each model fitted on random subsets of each group's configurations and judged on
the rest. analysis_args registers its parser."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .fit_cli import UsageError, _groups, _numbers, _table, dump_json
from .models import registry
from .models.base import NotEnoughData, Observations
from .progress import terminal_progress
from .tidy import TidyError

# seed 003's learners, compared beside the analytic models where scikit-learn is installed
SEED003_LEARNERS = ("krr", "svr", "dtree")


def _speedup(times: np.ndarray, obs: Observations, ref: np.ndarray) -> np.ndarray:
    return ref / times


def _t1_ref(obs: Observations) -> np.ndarray:
    """Measured single-core time at each row's frequency (speedup reference, eq. 1); where a
    frequency has no p = 1 row, the smallest core count's time times its cores."""
    fq = np.nan_to_num(obs.freq_mhz if obs.freq_mhz is not None else np.zeros(len(obs)), nan=0.0)
    ref = np.empty(len(obs))
    for f in np.unique(fq):
        at = fq == f
        i = np.flatnonzero(at)[np.argmin(obs.cores[at])]
        ref[at] = obs.time_s[i] * obs.cores[i]
    return ref


def default_eval_models() -> list[str]:
    from .models.select import ANALYTIC  # scipy: not for every command's parser (fit_cli)
    avail = set(registry.available())
    return [m for m in (*ANALYTIC, *SEED003_LEARNERS) if m in avail]


def training_mask(n: int, size: int, seed: int, group_index: int, rep: int) -> np.ndarray:
    """The random training subset of one draw of ``eval``: ``size`` of ``n`` configurations,
    seeded by (seed, group index, size, rep) so every model and every later run sees the same
    draw."""
    rng = np.random.default_rng([seed, group_index, size, rep])
    train = np.zeros(n, bool)
    train[rng.choice(n, size, replace=False)] = True
    return train


def run_eval(groups: list[tuple[str, Observations]], sizes: list[int], reps: int, seed: int,
             models: list[str]) -> list[dict[str, Any]]:
    """One record per (group, model, size, rep): test MSE of speedup and MAPE of time on all
    configurations outside the random training subset (seeded per group, size and rep)."""
    records = []
    for gi, (label, obs) in enumerate(groups):
        ok = np.isfinite(obs.time_s) & (obs.time_s > 0)
        obs = obs.subset(ok)
        n = len(obs)
        ref = _t1_ref(obs) if n else np.array([])
        for size in sizes:
            if size >= n:
                continue
            for rep in range(reps):
                train = training_mask(n, size, seed, gi, rep)
                test = obs.subset(~train)
                for name in models:
                    rec = {"group": label, "model": name, "size": size, "rep": rep,
                           "n_test": int((~train).sum()), "fit_s": None, "mape": None,
                           "mse_speedup": None, "error": None}
                    try:
                        t0 = time.perf_counter()
                        fitted = registry.get(name).fit(obs.subset(train))
                        rec["fit_s"] = time.perf_counter() - t0
                        pred = fitted.predict(test).value
                        truth = test.time_s
                        rec["mape"] = float(np.mean(100 * np.abs(pred - truth) / truth))
                        rec["mse_speedup"] = float(np.mean((ref[~train] / pred - ref[~train] / truth) ** 2))
                    except NotEnoughData as exc:
                        rec["error"] = str(exc)
                    records.append(rec)
    return records


def eval_drops(groups: list[tuple[str, Observations]], sizes: list[int],
               records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``run_eval`` left out and why: one entry per (group, size) it skipped, per group
    whose rows without a time > 0 it left out, and per (group, model, size) whose fits failed
    (keys group, size, model, reason; None where an entry is about every size or model)."""
    drops: list[dict[str, Any]] = []
    for label, obs in groups:
        ok = np.isfinite(obs.time_s) & (obs.time_s > 0)
        n = int(ok.sum())
        if n < len(obs):
            drops.append({"group": label, "size": None, "model": None,
                          "reason": f"{len(obs) - n} of {len(obs)} configurations have no "
                                    "time > 0 and were left out"})
        for size in sizes:
            if size >= n:
                drops.append({"group": label, "size": size, "model": None,
                              "reason": f"size {size} >= the group's {n} configurations with a "
                                        "time: none would be left to test"})
    failed: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("error") is not None:
            failed.setdefault((r["group"], r["size"], r["model"]), []).append(r)
    reps = {}
    for r in records:
        k = (r["group"], r["size"], r["model"])
        reps[k] = reps.get(k, 0) + 1
    for (label, size, model), rs in failed.items():
        drops.append({"group": label, "size": size, "model": model,
                      "reason": f"{len(rs)} of {reps[(label, size, model)]} fits failed: "
                                f"{rs[0]['error']}"})
    return drops


def _say_drops(drops: list[dict[str, Any]], n_groups: int) -> None:
    """The drops on stderr, one line per size and model (or reason) rather than per group."""
    lines: dict[tuple, list[dict[str, Any]]] = {}
    for d in drops:
        if d["model"] is not None:
            key: tuple = (d["size"], d["model"], "")
        elif d["size"] is not None:
            key = (d["size"], None, "it has fewer configurations with a time than the size, "
                                    "so none would be left to test")
        else:
            key = (None, None, "configurations without a time > 0 left out")
        lines.setdefault(key, []).append(d)
    for (size, model, reason), ds in lines.items():
        who = "; ".join(d["group"] for d in ds[:4]) + (" ..." if len(ds) > 4 else "")
        if model is not None:
            print(f"note: eval size {size}, model {model}: fits failed in {len(ds)} of "
                  f"{n_groups} groups ({ds[0]['reason']}): {who}", file=sys.stderr)
        elif size is not None:
            print(f"note: eval left out size {size} for {len(ds)} of {n_groups} groups "
                  f"({reason}): {who}", file=sys.stderr)
        else:
            print(f"note: eval: {reason} in {len(ds)} of {n_groups} groups: "
                  + "; ".join(f"{d['group']} ({d['reason'].split(' have')[0]})" for d in ds[:4])
                  + (" ..." if len(ds) > 4 else ""), file=sys.stderr)


def summarise(records: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, float]]:
    """Median over groups and reps per (model, size) of MAPE and speedup MSE."""
    acc: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in records:
        if r.get("mape") is not None:
            a = acc.setdefault((r["model"], r["size"]), {"mape": [], "mse_speedup": []})
            a["mape"].append(r["mape"])
            a["mse_speedup"].append(r["mse_speedup"])
    return {k: {"median_mape": float(np.median(v["mape"])),
                "median_mse_speedup": float(np.median(v["mse_speedup"])), "fits": len(v["mape"])}
            for k, v in sorted(acc.items())}


def plot_eval(summary: dict[tuple[str, int], dict[str, float]], path: Path) -> None:
    """Median error vs number of measurements (log x), one line per model (Agg backend)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for model in sorted({m for m, _ in summary}):
        pts = sorted((s, v) for (m, s), v in summary.items() if m == model)
        xs = [s for s, _ in pts]
        axes[0].plot(xs, [v["median_mse_speedup"] for _, v in pts], marker="o", label=model)
        axes[1].plot(xs, [v["median_mape"] for _, v in pts], marker="o", label=model)
    for ax, title in zip(axes, ("median MSE of speedup", "median MAPE of time (%)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("number of measurements (training set)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def relative_time_from_speedup(obs: Observations) -> Observations:
    """Rows without a time get 1/speedup (time relative to the reference configuration; MAPE
    and speedup ratios do not depend on the unit)."""
    sp = obs.counters.get("speedup")
    if sp is None:
        return obs
    out = obs.subset(np.arange(len(obs)))
    miss = ~np.isfinite(out.time_s) & np.isfinite(sp) & (sp > 0)
    out.time_s = np.where(miss, 1.0 / np.where(sp > 0, sp, 1.0), out.time_s)
    return out


def cmd_eval(args: argparse.Namespace) -> int:
    try:
        groups = _groups(args.data, args.zero_times)
    except TidyError as exc:
        print(f"opptune eval: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "group", ""):
        labels = [lab for lab, _ in groups]
        groups = [(lab, o) for lab, o in groups if args.group in lab]
        if not groups:
            print(f"opptune eval: no group of {args.data} contains {args.group!r}; groups: "
                  f"{', '.join(labels)}", file=sys.stderr)
            return 2
    if getattr(args, "time_from_speedup", False):
        groups = [(lab, relative_time_from_speedup(o)) for lab, o in groups]
    models = [m for m in args.models.split(",") if m] or default_eval_models()
    for m in models:
        try:
            registry.get(m)
        except (ValueError, ImportError, AttributeError) as exc:
            print(f"opptune eval: model {m}: {exc}", file=sys.stderr)
            return 2
    try:
        sizes = [int(s) for s in _numbers(args.train_sizes, "--train-sizes", whole=True)]
        if args.reps < 1:
            raise UsageError(f"--reps needs a whole number >= 1 (random subsets per size), "
                             f"got {args.reps}")
    except UsageError as exc:
        print(f"opptune eval: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None
    if out is not None:  # before the eval, which may take minutes
        if out.exists() and not out.is_dir():
            print(f"opptune eval: --out {args.out}: is a file, not a directory; name a "
                  "directory", file=sys.stderr)
            return 2
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"opptune eval: --out {args.out}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
    say = terminal_progress("opptune eval")  # minutes on a large CSV
    if say:
        fits = args.reps * len(models) * sum(
            sum(1 for size in sizes if size < int(np.sum(np.isfinite(o.time_s) & (o.time_s > 0))))
            for _, o in groups)
        say(f"{fits} fits: models {', '.join(models)} at training sizes "
            f"{', '.join(map(str, sizes))}, {args.reps} random subsets each, on "
            f"{len(groups)} group{'s' if len(groups) != 1 else ''}...")
    records = run_eval(groups, sizes, args.reps, args.seed, models)
    if not records:
        largest = max(int(np.sum(np.isfinite(o.time_s) & (o.time_s > 0))) for _, o in groups)
        print(f"opptune eval: every training size ({args.train_sizes}) leaves no test configuration: "
              f"the largest group has {largest} configurations with a time; give smaller sizes",
              file=sys.stderr)
        return 2
    summary = summarise(records)
    if not summary:
        print(f"opptune eval: no fit succeeded ({len(records)} tried); e.g. {records[0]['model']} on "
              f"{records[0]['group']} at size {records[0]['size']}: {records[0]['error']}",
              file=sys.stderr)
        return 1
    drops = eval_drops(groups, sizes, records)
    if args.json:
        print(dump_json({
            "data": args.data, "models": models, "sizes": sizes, "reps": args.reps,
            "seed": args.seed,
            "summary": [{"model": m, "size": s, **v} for (m, s), v in summary.items()],
            "dropped": drops, "records": records}))
    else:
        _say_drops(drops, len(groups))
        _table(f"median over groups x {args.reps} reps",
               ["model", "size", "MAPE %", "MSE speedup", "fits"],
               [[m, s, f"{v['median_mape']:.2f}", f"{v['median_mse_speedup']:.4g}", v["fits"]]
                for (m, s), v in summary.items()])
    if out is not None:
        with (out / "eval.jsonl").open("w") as fh:
            for r in records:
                fh.write(dump_json(r) + "\n")
        if summary:
            plot_eval(summary, out / "eval.png")
    return 0
