"""``opptune characterize`` (the whole bench_suite over a board, resumable) and the MPET mode of
``opptune predict`` (``--workload A --from P --to T``: seed 000's scenario (a), migration)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any


def cmd_characterize(args: argparse.Namespace) -> int:
    from .cli import _endpoint
    from .client import ask
    q: dict[str, Any] = {"agent": args.agent}
    for key in ("size", "reps", "max_cores"):
        if getattr(args, key) is not None:
            q[key] = getattr(args, key)
    endpoint = _endpoint(args)
    data, rc = ask("opptune characterize", endpoint, "characterize", q, timeout_s=args.timeout)
    if rc is not None:
        return rc
    out = sys.stderr if args.json else sys.stdout
    print(f"characterize {data['agent']}: {len(data['kernels'])} kernels at size "
          f"{data['size']}, frequencies: {data['frequencies']}", file=out)
    if data["skipped"]:
        print(f"skipped (already measured): {', '.join(data['skipped'])}", file=out)
    for j in data["under_way"]:
        print(f"under way: job {j['job_id']} {j['workload']} ({j['state']})", file=out)
    for j in data["queued"]:
        print(f"queued: job {j['job_id']} {j['workload']} ({j['n_points']} points x "
              f"{j['reps']} reps)", file=out)
    if not data["queued"] and not data["under_way"]:
        print("nothing to queue: every kernel is already measured", file=out)
    ids = [j["job_id"] for j in data["under_way"] + data["queued"]]
    rc = 0
    if args.wait and ids:
        from .client import query
        from .sweep_wait import wait_for_jobs
        rc = wait_for_jobs(endpoint, ids, timeout_s=args.timeout, prog="opptune characterize")
        if args.json:
            st = query(endpoint, "status", timeout_s=args.timeout)
            data["jobs"] = [j for j in st.get("jobs") or [] if j["job_id"] in ids]
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
    return rc


def add_parser(sub: Any, add_link_options: Any) -> None:
    p = sub.add_parser("characterize", help="run the whole bench_suite on an agent's board "
                                            "(all cores; min/mid/max frequency where it has "
                                            "cpufreq); run it again to resume")
    add_link_options(p)
    p.add_argument("--agent", required=True, help="agent id ('opptune status' lists them)")
    p.add_argument("--size", help="size class (default: [sweep] size of the daemon's "
                                  "configuration)")
    p.add_argument("--reps", type=int, help="repetitions per point")
    p.add_argument("--max-cores", type=int, help="sweep 1..N cores (default: all)")
    p.add_argument("--wait", action="store_true",
                   help="show progress until every job is done; exit 1 when one fails")
    p.set_defaults(func=cmd_characterize)


def add_predict_options(p: argparse.ArgumentParser) -> None:
    """``opptune predict``'s MPET mode, beside its --fit mode."""
    g = p.add_argument_group("MPET migration (a running daemon's measurements; seed 000 "
                             "scenario a)")
    g.add_argument("--workload", help="workload measured on --from")
    g.add_argument("--from", dest="source", metavar="P",
                   help="platform id or agent name where the workload was measured")
    g.add_argument("--to", dest="target", metavar="T",
                   help="platform id or agent name known through its suite "
                        "('opptune characterize')")
    g.add_argument("--size", help="only measurements of this size class")
    g.add_argument("--daemon", help="daemon endpoint (default: the bind address of --config)")
    g.add_argument("--config", help="daemon configuration (default /etc/opptune/daemon.toml)")
    g.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for an answer")


# -- predict --from/--to ----------------------------------------------------------------------
class MpetUsage(ValueError):
    pass


def _resolve(name: str, data: dict[str, Any], flag: str) -> str:
    if name in data["platforms"]:
        return name
    if name in data["agents"] and data["agents"][name] in data["platforms"]:
        return data["agents"][name]
    known = sorted(set(data["platforms"]) | {a for a, p in data["agents"].items()
                                             if p in data["platforms"]})
    raise MpetUsage(f"{flag} {name!r} is no platform with measurements; give a platform id or "
                    f"an agent name: {', '.join(known) or 'none measured yet'}")


def build_database(data: dict[str, Any], size: str | None):
    """(profiles, platforms) for MpetDatabase from the daemon's mpet_data answer."""
    profiles = {}
    for p in data["profiles"]:
        if size is not None and p["size"] != size:
            continue
        key = (p["workload"], p["platform"])
        if key in profiles:  # several sizes: keep the one with most core counts
            if len(profiles[key]["t"]) >= len(p["t"]):
                continue
        profiles[key] = {"t": {int(n): v for n, v in p["t"].items()},
                         "params": {int(n): v for n, v in p["params"].items()}, "counters": {}}
    platforms = {}
    for k, v in data["platforms"].items():
        # t(n) up to the most cores the platform's suite was measured on, not beyond
        most = max((n for (_, p), prof in profiles.items() if p == k for n in prof["t"]),
                   default=0)
        platforms[k] = {"n_nu": v["n_nu"], "n_ht": v["n_ht"],
                        "nmax": min(v["nmax"], most) if v["nmax"] else most}
    return profiles, platforms


def interval(db: Any, pred: Any, topo: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The model gives a point prediction only; the interval spans the predictions each single
    candidate gives (its own t(1) factor, its own scaling elements), around the weighted one."""
    import numpy as np
    from .models.mpet_curve import time_curve
    from .models.mpet_predict import reconstruct
    t1s = [float(reconstruct([[db.t1((c.workload, pred.target))]],
                             [[db.t1((pred.workload, c.platform))]],
                             [[db.t1((c.workload, c.platform))]], np.ones(1))[0])
           for c in pred.t1_candidates]
    t1s = [v for v in t1s if math.isfinite(v)] or [pred.t1]
    curves = []
    for c in pred.sc_candidates:
        sc = reconstruct(db.sc[(c.workload, pred.target)][None, :],
                         db.sc[(pred.workload, c.platform)][None, :],
                         db.sc[(c.workload, c.platform)][None, :], np.ones(1))
        sc = np.where(np.isfinite(sc), sc, pred.sc)
        curve = np.asarray(time_curve(1.0, sc, pred.ns, topo.get("n_nu"), topo.get("n_ht")))
        if np.all(np.isfinite(curve)):
            curves.append(curve)
    base = np.asarray(pred.t) / pred.t1
    curves = np.vstack(curves + [base])
    lo = np.minimum(curves.min(axis=0) * min(t1s), pred.t)
    hi = np.maximum(curves.max(axis=0) * max(t1s), pred.t)
    return [float(x) for x in lo], [float(x) for x in hi]


def cmd_predict_mpet(args: argparse.Namespace) -> int:
    from .cli import _endpoint
    from .client import ask
    from .models.mpet_predict import MpetDatabase, NoCandidates, predict_migration
    missing = [f for f, v in (("--workload", args.workload), ("--from", args.source),
                              ("--to", args.target)) if not v]
    if len(missing) == 3:
        print("opptune predict: give --fit FILE --cores N (predict from a saved fit) or "
              "--workload A --from P --to T (MPET migration)", file=sys.stderr)
        return 2
    if missing:
        print(f"opptune predict: MPET migration needs {', '.join(missing)} too (--workload A "
              "--from P --to T)", file=sys.stderr)
        return 2
    data, rc = ask("opptune predict", _endpoint(args), "mpet_data",
                   {"size": args.size} if args.size else {}, timeout_s=args.timeout)
    if rc is not None:
        return rc
    try:
        src = _resolve(args.source, data, "--from")
        dst = _resolve(args.target, data, "--to")
        if src == dst:
            raise MpetUsage("--from and --to name the same platform")
        profiles, platforms = build_database(data, args.size)
        if (args.workload, src) not in profiles:
            on = sorted(w for w, p in profiles if p == src)
            raise MpetUsage(f"workload {args.workload!r} is not measured on {args.source}: it "
                            f"has {', '.join(on) or 'nothing'}")
        suite = sorted(w for w, p in profiles if p == dst and w != args.workload)
        if not suite:
            raise MpetUsage(f"{args.target} has no suite measured: run 'opptune characterize "
                            f"--agent AGENT' on it first")
        db = MpetDatabase(profiles, platforms)
        pred = predict_migration(db, args.workload, dst, refs=[src])
    except (MpetUsage, NoCandidates) as exc:
        print(f"opptune predict: {exc}", file=sys.stderr)
        return 2
    lo, hi = interval(db.without((args.workload, dst)), pred, platforms[dst])
    measured = (profiles.get((args.workload, dst)) or {}).get("t") or {}
    rows = [{"n": n, "time_s": t, "lower_s": a, "upper_s": b,
             "measured_s": measured.get(n)} for n, t, a, b in zip(pred.ns, pred.t, lo, hi)]
    cand = {name: [{"platform": c.platform, "workload": c.workload, "d_a": c.d_a,
                    "d_p": c.d_p, "d_t": c.d_t, "weight": c.weight} for c in cs]
            for name, cs in (("t1", pred.t1_candidates), ("sc", pred.sc_candidates))}
    out = {"workload": args.workload, "from": src, "to": dst,
           "from_board": data["platforms"][src]["board"],
           "to_board": data["platforms"][dst]["board"], "t1_s": pred.t1, "prediction": rows,
           "candidates": cand,
           "interval": "min..max of the single candidates' predictions around the weighted one"}
    if args.json:
        json.dump(_clean(out), sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    print(f"{args.workload}: measured on {out['from_board']} ({src}), predicted on "
          f"{out['to_board']} ({dst}) by MPET migration (seed 000 scenario a)")
    print(f"{'n':>3}  {'t(n) s':>10}  {'interval s':>23}" +
          (f"  {'measured s':>10}" if measured else ""))
    for r in rows:
        line = f"{r['n']:>3}  {r['time_s']:>10.4g}  [{r['lower_s']:>10.4g}, {r['upper_s']:>10.4g}]"
        if measured:
            m = r["measured_s"]
            line += f"  {m:>10.4g}" if m is not None else f"  {'-':>10}"
        print(line)
    print("interval: " + out["interval"])
    for name, label in (("t1", "t(1)"), ("sc", "scaling")):
        print(f"{label} candidates (platform, workload: D_a, D_p, D_t, weight):")
        for c in cand[name]:
            print(f"  {c['platform']}, {c['workload']}: {c['d_a']:.3f}, {c['d_p']:.3f}, "
                  f"{c['d_t']:.3f}, {c['weight']:.2f}")
    if measured:
        print("(measured: the workload's own runs on the target, which the prediction did "
              "not use)")
    return 0


def _clean(v: Any) -> Any:
    """NaN (an invalid distance or weight) as null: JSON has no NaN."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
