"""``opptune characterize``: the whole bench_suite over a board, resumable."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .options import add_reconnect_option, below_least


def cmd_characterize(args: argparse.Namespace) -> int:
    from .client import ask, daemon_endpoint
    if below_least("characterize", args, {"reps": 1, "max_cores": 0}):
        return 2
    q: dict[str, Any] = {"agent": args.agent}
    for key in ("size", "reps", "max_cores"):
        if getattr(args, key) is not None:
            q[key] = getattr(args, key)
    if args.no_commands:
        q["commands"] = False
    if args.retry_stopped:
        q["retry_stopped"] = True
    if args.per_cluster:
        q["per_cluster"] = True
    endpoint = daemon_endpoint(args)
    data, rc = ask("opptune characterize", endpoint, "characterize", q, timeout_s=args.timeout,
                   changes=f"'opptune status --agent {args.agent}' lists the jobs it queued; "
                           "running this again is safe (it skips what is measured or under "
                           "way)")
    if rc is not None:
        return rc
    out = sys.stderr if args.json else sys.stdout
    n = len(data["kernels"])
    other = data.get("kernel_sizes") or {}  # absent from an older daemon's answer
    used = {other.get(k, data["size"]) for k in data["kernels"]}
    print(f"characterize {data['agent']}: {n} kernel{'s' if n != 1 else ''} at size "
          f"{used.pop() if len(used) == 1 else data['size']}, frequencies: "
          f"{data['frequencies']}", file=out)
    if other:
        from .cli import size_instead_text
        print(size_instead_text(data["size"], other, "measured"), file=out)
    if args.per_cluster:
        clusters = data.get("clusters")
        if clusters is None:
            print("--per-cluster: this daemon is older than it and measures the whole board; "
                  "upgrade it", file=out)
        elif clusters:
            names = ", ".join(f"{data['agent']}:{c}" for c in clusters)
            print(f"each cluster alone, a platform of its own for 'opptune predict': {names}",
                  file=out)
        else:
            print("--per-cluster: the board has one cluster: measured as a whole", file=out)
    if data.get("commands"):
        print("command workloads (t(n) only, MPET runtime parameters invalid): " + ", ".join(
            f"{c} (size {data['command_sizes'][c]})" for c in data["commands"]), file=out)
    if data.get("commands_at_no_clock"):  # absent from an older daemon's answer
        off = data["commands_at_no_clock"]
        print(f"{', '.join(off['workloads'])}: measured over the cores at no set clock "
              f"({off['why']})", file=out)
    if data["skipped"]:
        print(f"skipped (already measured): {', '.join(data['skipped'])}", file=out)
    if data.get("drifted"):  # absent from an older daemon's answer
        print(f"measured again, their runs from before a drift no longer count ('opptune "
              f"status' lists the drift): {', '.join(data['drifted'])}", file=out)
    if data.get("redefined"):  # absent from an older daemon's answer
        n = len(data["redefined"])
        print(f"measured again, {n} workload{'s' * (n != 1)} whose program changed in the "
              f"agent's configuration (command, arguments or environment) or on the board "
              f"(its executable, a script, the built kernels; the runs from before stay "
              f"stored but no longer count): {', '.join(data['redefined'])}",
              file=out)
    for j in data.get("again") or []:  # absent from an older daemon's answer
        how = "stopped before all its points ran" if j["state"] == "done" else j["state"]
        print(f"measured again: {j['workload']}: its last job {j['job_id']} {how}: "
              f"{j['reason'] or 'no reason given'}", file=out)
    left_out = data.get("not_retried") or []  # absent from an older daemon's answer
    for j in left_out:
        print(f"not measured again: {j['workload']} (size {j['size']}): its last 2 jobs over "
              f"the points characterize measures ({', '.join(j['job_ids'])}, whoever sent them) "
              f"each stopped after {j['after_timeouts']} points in a row timed out, with the "
              "workload defined as it is now; change its command or run_timeout_s in the "
              "agent's configuration, or give --retry-stopped to measure it anyway", file=out)
    for j in data["under_way"]:
        print(f"under way: job {j['job_id']} {j['workload']} ({j['state']})", file=out)
    from .cli import job_state_note
    for j in data["queued"]:
        # sent, queued (the agent not connected) or held, as sweep says it; an older
        # daemon's answer does not say which: "queued", as this printed
        state = j.get("state") or "queued"
        note = job_state_note(state, data["agent"]) if j.get("state") else ""
        print(f"{state}: job {j['job_id']} {j['workload']} ({j['n_points']} points x "
              f"{j['reps']} rep{'s' * (j['reps'] != 1)}){note}", file=out)
    if not data["queued"] and not data["under_way"]:
        print("nothing to queue: " + ("the other workloads are already measured" if left_out
                                      else "every workload is already measured"), file=out)
    ids = [j["job_id"] for j in data["under_way"] + data["queued"]]
    rc = 0
    if args.wait and ids:
        from .client import query
        from .sweep_wait import jobs_query, wait_for_jobs
        try:
            rc = wait_for_jobs(endpoint, ids, timeout_s=args.timeout,
                               prog="opptune characterize", reconnect_s=args.reconnect_s)
        except KeyboardInterrupt:
            if args.json:  # the jobs were queued: their ids still reach the reader
                json.dump(data, sys.stdout, indent=2, sort_keys=True)
                print()
            raise
        if args.json:
            st = query(endpoint, "status", jobs_query(ids), timeout_s=args.timeout)
            data["jobs"] = [j for j in st.get("jobs") or [] if j["job_id"] in ids]
    if args.wait and left_out and rc == 0:
        # a workload left out is not characterised either: as a job stopped early
        from .sweep_wait import STOPPED_EXIT
        n = len(left_out)
        print(f"opptune characterize: exit {STOPPED_EXIT}: {n} workload{'s' * (n != 1)} not "
              f"measured again, {'its' if n == 1 else 'their'} last jobs having stopped for "
              "their timeouts (above)", file=sys.stderr)
        rc = STOPPED_EXIT
    if args.json:
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        print()
    return rc


def add_parser(sub: Any, add_link_options: Any) -> None:
    p = sub.add_parser("characterize", help="run the whole bench_suite (and the agent's "
                                            "command workloads) on an agent's board (all "
                                            "cores, or [sweep] max_cores; min/mid/max "
                                            "frequency where it has cpufreq); run it again "
                                            "to resume", description=(
        "MPET's characterisation of a board: queue every bench_suite kernel the agent offers "
        "(and its command workloads) over the board's cores, at the min, mid and max "
        "frequency of each cpufreq policy (else its own clock). Run it again to resume: a "
        "kernel with a done job of that size is skipped. What it measures is what 'opptune "
        "predict --workload' and 'opptune eval-mpet --daemon' predict from."))
    add_link_options(p)
    p.add_argument("--agent", metavar="ID", required=True, help="agent id (see opptune status)")
    p.add_argument("--size", help="size class, refused where a kernel lacks it (default: "
                                  "[sweep] size of the daemon's configuration, or a kernel's "
                                  "first size where it lacks that one)")
    p.add_argument("--reps", type=int, help="repetitions per point (default: [sweep] reps of "
                                             "the daemon's configuration)")
    p.add_argument("--max-cores", type=int, help="sweep 1..N cores (0 = all; default: [sweep] "
                                                 "max_cores of the daemon's configuration)")
    p.add_argument("--no-commands", action="store_true",
                   help="leave out the agent's command workloads (external programs, run with "
                        "OMP_NUM_THREADS or their threads_env = the core count); default: "
                        "they are characterised too, at --size where they have it, else at "
                        "their first size")
    p.add_argument("--retry-stopped", action="store_true",
                   help="measure again a workload whose last two jobs at this size over the "
                        "points characterize measures (its own, or sweeps of those points; a "
                        "sweep of other points does not count) the agent stopped for their "
                        "timeouts (stop_after_timeouts) while it was defined as it is now; "
                        "without it such a workload is left out, saying so (a changed command "
                        "or run_timeout_s counts as new)")
    p.add_argument("--per-cluster", action="store_true",
                   help="on a board with several clusters (big.LITTLE), measure each cluster "
                        "alone instead of the whole board: each is then a platform of its "
                        "own for 'opptune predict' and 'eval-mpet', named AGENT:cluster<i> "
                        "(run characterize with and without it to have both)")
    p.add_argument("--wait", action="store_true",
                   help="show progress until every job is done; exit 0 when every workload "
                        "is measured over all its points, 3 when the agent stopped a job "
                        "after points in a row timed out or a workload was left out for that, "
                        "4 when a job was cancelled (opptune cancel), "
                        "1 when one fails (Ctrl-C stops waiting, not the jobs; run it again "
                        "to resume)")
    add_reconnect_option(p, "the jobs (--wait)")
    p.set_defaults(func=cmd_characterize)
