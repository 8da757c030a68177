"""The operator's queries on the daemon's loop: how long each holds it, and its reply's bytes.

The daemon answers ``status`` and ``report`` on the loop that acknowledges every agent's
results, so their time is every agent's delay. On a store of ``--groups`` workload groups
(benchmarks/report.py's: three virtual boards, 1..4 cores x 3 clocks x 2 runs a group, a
fit each, a recommendation for every fourth) a daemon object answers, in this process, each
query as these clients send it, ``--rounds`` times in turn; the time is the answer and its
encoding (what the loop does before the socket takes the bytes), the median and range:

- ``status, every row``: no arguments, as an opptune older than paging sends it (and
  ``--json``, ``--all``);
- ``status page``: ``opptune status`` (``limit`` 20);
- ``status, one board``: ``opptune status --agent bench-rpi4`` (its 257 groups, 20 rows);
- ``sweep --wait poll``: what ``sweep --wait`` asks every 0.5 s (its jobs, the agents and the
  re-measurements: sweep_wait.jobs_query);
- ``report``: ``opptune report``'s query.

    python3 benchmarks/loop_queries.py [--groups 771] [--rounds 7] [--json] [--keep DIR]

Run it with an older opptune on ``PYTHONPATH`` for the figures before: a daemon that
predates the arguments answers every query with every row.

Measured 2026-11-27 02:56-02:58 (2 cores, load average 5.7-7.3: other sessions' tests), 771
groups, 16,448 runs, medians of 9 in two runs alternating with the code before: the whole
status 255 / 192 ms, 406,669 bytes (before: 429 / 209 ms); the page 80 / 63 ms, 24,779 bytes
(before, answered whole: 303 / 176 ms, 406,540 bytes); one board 46 / 25 ms, 18,246 bytes;
the sweep --wait poll 0.4 / 0.3 ms, 1,261 bytes (before: the whole status, 307 / 133 ms);
report 472 / 314 ms, 1.28 MB (before, a read per group: 898 / 483 ms).

2026-11-27 05:28-05:31 (load 3.1-3.3), the report query asking the status for the lists the
page reads, without the recommendations' rests_on: report 262 / 249 ms, 1,123,245 bytes
(before, alternating: 266 / 395 ms, 1,281,523 bytes); its status part alone, 15 interleaved in
one process: 67 ms median, 36 min (before: 168 / 93 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report as report_bench  # noqa: E402  (the store it builds)

PAGE = 20  # opptune status's rows per table (cli.STATUS_ROWS)
FOLLOW = {"jobs": ["job-00001"], "only": ["agents", "jobs", "remeasure"]}
QUERIES = [("status, every row", "status", None),
           ("status page", "status", {"limit": PAGE}),
           ("status, one board", "status", {"agent": "bench-rpi4", "limit": PAGE}),
           ("sweep --wait poll", "status", FOLLOW),
           ("report", "report", None)]


def measure(db: Path, rounds: int) -> dict[str, dict[str, Any]]:
    """Per query: loop milliseconds (median, min, max of ``rounds``) and reply bytes."""
    from opptune.daemon import queries
    from opptune.daemon.service import Daemon
    from opptune.shared import protocol
    from opptune.shared.config import DaemonConfig
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(db), curve="off",
                            auto_sweep=False))
    times: dict[str, list[float]] = {name: [] for name, _, _ in QUERIES}
    size: dict[str, int] = {}
    try:
        for _ in range(rounds):
            for name, what, args in QUERIES:  # in turn: the machine's load hits each alike
                t = time.perf_counter()
                data = queries.answer(d, what, dict(args or {}))
                reply = protocol.encode(protocol.make("reply", "opptune-daemon",
                                                      {"ref": "q", "data": data}),
                                        protocol.MAX_REPLY_BYTES)
                times[name].append((time.perf_counter() - t) * 1e3)
                size[name] = len(reply)
    finally:
        d.close()
    return {name: {"ms": round(statistics.median(v), 1), "ms_min": round(min(v), 1),
                   "ms_max": round(max(v), 1), "bytes": size[name]}
            for name, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=771, help="workload groups in the store")
    ap.add_argument("--rounds", type=int, default=7, help="answers of each query")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="build in DIR (kept; reused when it holds "
                                                  "a store) instead of a temp dir")
    args = ap.parse_args()
    if args.groups < 1 or args.rounds < 1:
        ap.error("--groups and --rounds must be >= 1")
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="opptune-loopq-"))
    tmp.mkdir(parents=True, exist_ok=True)
    db = tmp / "opptune.db"
    try:
        built = report_bench.build_store(db, args.groups, tmp) if not db.exists() else {}
        load = round(os.getloadavg()[0], 1)
        fig = {"store": built, "queries": measure(db, args.rounds), "load_before": load,
               "load_after": round(os.getloadavg()[0], 1)}
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(fig))
        return 0
    if built:
        print(f"store: {built['groups']} groups, {built['runs']} runs, "
              f"{built['recommendations']} recommendations")
    print(f"{'query':<20} {'loop ms (median, min-max)':>26} {'reply bytes':>12}")
    for name, q in fig["queries"].items():
        print(f"{name:<20} {q['ms']:>11} ({q['ms_min']}-{q['ms_max']}) "
              f"{q['bytes']:>12,}")
    print(f"load average {fig['load_before']} before, {fig['load_after']} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
