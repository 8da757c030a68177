"""Faults during a sweep on a virtual board, with the real daemon and agent as processes.

Kill mode (default): ``--kills N`` (50) rounds, killing the daemon and the agent alternately
with SIGKILL at a moment drawn from a seeded RNG (0..--max-ahead more results stored or
measured since the last restart), restarting it, and comparing the agent's outbox with the
daemon's store after each kill. Cut mode (``--cut-seconds S``): the agent runs in a network
namespace behind a veth pair whose daemon end goes down for S seconds mid-sweep (needs root).
Both end by waiting for the sweep to complete and checking that every result is stored
exactly once with an empty outbox. Prints one line per round and the final check; exits 1 on
a lost, duplicated or unexpected result.

    .venv/bin/python benchmarks/chaos.py                   # 50 kills
    .venv/bin/python benchmarks/chaos.py --cut-seconds 180 # the link cut for three minutes
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procs import (Cluster, VethLink, delivery, free_endpoint, kill_at_random_moment,  # noqa: E402
                   netns_usable, produced_results, wait_all_delivered, wait_until)

from opptune.agent.virtual_board import make_tree  # noqa: E402

KERNELS = ("pi_integrate", "triad", "stencil")
OUT = sys.stdout  # progress lines; stderr with --json, whose stdout is JSON only
POINTS = 4  # rpi4: 1..4 cores


def cluster(tmp: Path, reps: int, link: VethLink | None = None,
            job_expiry_s: float | None = None) -> Cluster:
    agent = {"agent_id": "pi", "virtual_board": "rpi4",
             "sysfs_root": make_tree("rpi4", str(tmp / "rpi4"))}
    daemon: dict = {"auto_recommend": False}
    if job_expiry_s is not None:
        daemon["job_expiry_s"] = job_expiry_s
    endpoint = None
    if link is not None:
        endpoint = free_endpoint()
        port = endpoint.rpartition(":")[2]
        agent.update(curve="off", daemon=f"tcp://{link.host_ip}:{port}")
        daemon.update(curve="off", bind=f"tcp://*:{port}")
    return Cluster(tmp, kernels=KERNELS, reps=reps, max_cores=4, extra_agent=agent,
                   extra_daemon=daemon, endpoint=endpoint,
                   agent_prefix=link.prefix if link else None)


def kills(args, tmp: Path) -> dict:
    rng = random.Random(args.seed)
    c = cluster(tmp, args.reps)
    c.start_daemon()
    c.start_agent()
    t0 = time.monotonic()
    done = 0
    try:
        for i in range(args.kills):
            which = "daemon" if i % 2 == 0 else "agent"
            r = kill_at_random_moment(c, which, rng, len(KERNELS), args.max_ahead)
            if r is None:
                print(f"the sweep completed after {i} kills: raise --reps", flush=True, file=OUT)
                break
            done += 1
            print(f"round {i + 1:3d}: killed {r['killed']:6s} {r['ahead']} results on, "
                  f"produced {r['produced']:4d} stored {r['stored']:4d} pending "
                  f"{r['pending']:3d}: check ok", flush=True, file=OUT)
        final = wait_all_delivered(c, len(KERNELS), timeout=args.timeout)
    finally:
        codes = c.stop()
    return {"mode": "kills", "kills": done, "seconds": round(time.monotonic() - t0, 1),
            "final": final, "exit_codes": codes}


def cut(args, tmp: Path) -> dict:
    why = netns_usable()
    if why:
        raise SystemExit(f"chaos.py --cut-seconds: {why}")
    link = VethLink()
    try:
        c = cluster(tmp, args.reps, link, args.job_expiry_s)
        state = tmp / "agent-state"
        c.start_daemon()
        c.start_agent()
        try:
            c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=60,
                       what="the agent online")
            wait_until(lambda: produced_results(state) >= 3, "a few results", 60, c.logs)
            link.cut()
            t_cut = time.monotonic()
            print(f"link cut: {delivery(state, c.db)}", flush=True, file=OUT)
            c.wait_for(lambda s: not any(a["alive"] for a in s["agents"]), timeout=60,
                       what="the agent offline")
            print(f"agent offline after {time.monotonic() - t_cut:.1f} s", flush=True, file=OUT)
            time.sleep(max(0.0, args.cut_seconds - (time.monotonic() - t_cut)))  # the fault
            during = delivery(state, c.db)
            link.restore()
            t_back = time.monotonic()
            print(f"link restored after {t_back - t_cut:.1f} s: {during}", flush=True, file=OUT)
            c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=args.timeout,
                       what="the agent back online")
            online_s = time.monotonic() - t_back
            print(f"agent online {online_s:.1f} s after the restore", flush=True, file=OUT)
            final = wait_all_delivered(c, len(KERNELS), timeout=args.timeout)
            print(f"everything delivered {time.monotonic() - t_back:.1f} s after the restore",
                  flush=True, file=OUT)
            states = c.rows("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        finally:
            codes = c.stop()
    finally:
        link.close()
    return {"mode": "cut", "cut_seconds": args.cut_seconds, "online_after_restore_s":
            round(online_s, 1), "pending_during_cut": during["pending"], "final": final,
            "job_states": dict(states), "exit_codes": codes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--max-ahead", type=int, default=6,
                    help="a kill comes 0..N results after the last restart (default 6)")
    ap.add_argument("--reps", type=int, default=None,
                    help="reps per point (default: enough for the kills, or 6 for a cut)")
    ap.add_argument("--cut-seconds", type=float, default=0.0)
    ap.add_argument("--job-expiry-s", type=float, default=None,
                    help="the daemon's job_expiry_s during a cut (default: its own, 60 s)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--json", action="store_true", help="print the summary as JSON only")
    args = ap.parse_args(argv)
    global OUT
    OUT = sys.stderr if args.json else sys.stdout
    if args.reps is None:
        args.reps = 6 if args.cut_seconds else max(6, args.kills * 4 // (len(KERNELS) * POINTS))
    with tempfile.TemporaryDirectory(prefix="opptune-chaos-") as tmp:
        try:
            out = cut(args, Path(tmp)) if args.cut_seconds else kills(args, Path(tmp))
        except AssertionError as exc:
            print(f"FAILED: {str(exc)[:4000]}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(out))
    else:
        f = out["final"]
        print(f"final check: {f['produced']} results measured, {f['stored']} stored exactly "
              f"once, {f['pending']} pending, lost {len(f['lost'])}, duplicated "
              f"{len(f['duplicates'])}, unexpected {len(f['unexpected'])}")
        print(json.dumps({k: v for k, v in out.items() if k != "final"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
