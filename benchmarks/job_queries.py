"""The store's job queries that grow with the jobs kept: the loop's tick and the status page.

Two stores, on SQLite or (``--postgres``) a throwaway PostgreSQL server (tests/pgserver.py's):

- ``--jobs`` jobs (default 100,000), all done but ``--held`` cancelled ones whose agent's end is
  awaited and ``--cancelled-share`` of them cancelled and ended: the queries the daemon's loop
  makes once a second whatever happens (``held_cancels``: the cancels another daemon took;
  ``active_jobs``: what may expire), their query plans (EXPLAIN) and milliseconds;
- ``--cancelled`` cancelled jobs (default 1,000) of 4 runs each, one measured and three its
  agent recorded as not run: ``opptune status``'s jobs, every row (``--json``, ``--all``) and
  its page of 20, their milliseconds and the SQL statements each ran (the ``not_run`` count).

Times are medians (min-max) of ``--rounds``; run it with an older opptune on ``PYTHONPATH``
for the figures before.

    python3 benchmarks/job_queries.py [--postgres] [--jobs 100000] [--cancelled 1000]

Measured 2026-11-27 22:00-22:15 (2 cores, load average 13-16: other sessions' tests), 100,000
jobs, 2,000 of them cancelled, medians of 9: schema 17 (every job scanned, then sorted)
held_cancels 68 ms (35-99) and active_jobs 64 ms (38-148) on SQLite, 109 ms (50-186) and 97
ms (25-208) on PostgreSQL: over 0.1 s of each second of the daemon's loop. Schema 18
(jobs_state): 15 ms (3-42, the 2,000 cancelled rows read) and 0.02 ms on SQLite, 8 ms (3-22)
and 0.2 ms on PostgreSQL.

The status of 1,000 cancelled jobs, the same runs: before, one more read per cancelled job (its
last run, for its count of runs not run), 1,004 SQL statements for every row, 134 ms (98-281)
on SQLite and 940 ms (539-1669) on PostgreSQL; 25 statements for the page of 20, 11 ms and 27
ms. With the count in the jobs' query (and schema 18's runs_not_run): 4 statements, 32 ms
(16-62) and 94 ms (70-114); the page 5 statements, 1.2 ms and 10 ms.
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
from typing import Any, Callable

ONE_POINT = json.dumps([{"cpus": [0], "threads": 1}])
JOB_COLUMNS = ("job_id, agent, workload, size, points, n_points, reps, warmup, expected, "
               "created, state, reason, updated, stopped")


def timed(call: Callable[[], Any], rounds: int) -> dict[str, float]:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) * 1e3)
    return {"ms": round(statistics.median(times), 2), "ms_min": round(min(times), 2),
            "ms_max": round(max(times), 2)}


def counting(store: Any) -> Callable[[], int]:
    """Count the SQL statements ``store`` runs from now on; returns the counter's reader."""
    n = [0]

    def one(*_: Any) -> None:
        n[0] += 1
    if hasattr(store.db, "set_trace_callback"):  # sqlite3
        store.db.set_trace_callback(one)
    else:  # the PostgreSQL back end's wrapper
        execute = store.db.execute

        def wrapped(sql: str, args: Any = ()) -> Any:
            one()
            return execute(sql, args)
        store.db.execute = wrapped
    return lambda: n[0]


def plan(store: Any, sql: str, args: tuple) -> list[str]:
    """The query plan of ``sql`` as the back end says it."""
    if hasattr(store.db, "set_trace_callback"):
        return [r[-1] for r in store.db.execute("EXPLAIN QUERY PLAN " + sql, args)]
    return [r[0] for r in store.db.execute("EXPLAIN " + sql, args)]


def fill_jobs(store: Any, n: int, held: int, cancelled_share: float) -> None:
    """``n`` one-point jobs: done, every 1/``cancelled_share``-th cancelled (ended), the last
    ``held`` cancelled and held."""
    every = max(1, round(1 / cancelled_share)) if cancelled_share > 0 else 0
    ended = json.dumps({"cancelled": True, "at": 1.0, "held": False}, separators=(",", ":"))
    holds = json.dumps({"cancelled": True, "at": 1.0, "held": True}, separators=(",", ":"))
    rows = []
    for i in range(n):
        state, stopped = "done", None
        if i >= n - held:
            state, stopped = "cancelled", holds
        elif every and i % every == 0:
            state, stopped = "cancelled", ended
        rows.append((f"job-{i:07d}", f"agent-{i % 50}", "w", "small", ONE_POINT, 1, 4, 0, 4,
                     float(i), state, None, float(i), stopped))
    with store._tx() as db:
        db.executemany(f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES "
                       "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def fill_cancelled(store: Any, n: int) -> None:
    """``n`` cancelled jobs of 4 runs: one measured, three not run (as the agent records a
    cancel: failed without running, ``extra.stopped``)."""
    from opptune.daemon.store import ResultIn
    from opptune.shared.records import RunRecord
    why = "not run: the job was cancelled by the daemon before run 2 of 4"
    stop = {"cancelled": True, "runs_not_run": 3, "points": 1, "points_not_run": 0}
    for i in range(n):
        job_id = f"job-{i:05d}"
        store.save_job("a1", {"job_id": job_id, "workload": "w", "size": "small", "reps": 4,
                              "warmup": 0, "points": json.loads(ONE_POINT)}, float(i))
        items = []
        for seq in range(4):
            rec = RunRecord(platform="p", workload="w", input="small", cores=1, cpus=[0],
                            threads=1, rep=seq, time_s=1.0 if seq == 0 else None,
                            wall_s=1.0 if seq == 0 else None, ok=seq == 0,
                            error=None if seq == 0 else why,
                            extra={} if seq == 0 else {"stopped": stop})
            items.append(ResultIn(f"m-{i}-{seq}", "a1", job_id, seq, rec, rec.to_dict()))
        store.insert_results(items, float(i))
        store.set_job_state(job_id, "cancelled", "cancelled by the user",
                            stopped={"cancelled": True, "at": float(i), "held": False})


def tick(location: str, args: argparse.Namespace) -> dict[str, Any]:
    from opptune.daemon.store import open_store
    store = open_store(location)
    try:
        t = time.perf_counter()
        fill_jobs(store, args.jobs, args.held, args.cancelled_share)
        built = round(time.perf_counter() - t, 1)
        if hasattr(store.db, "set_trace_callback"):
            store.db.execute("ANALYZE")
        else:
            store.db.execute("ANALYZE jobs")
        assert len(store.held_cancels()) == args.held
        held_sql = ("SELECT job_id, agent, stopped FROM jobs WHERE state='cancelled' AND "
                    "stopped LIKE ? ORDER BY created", ('%"held":true%',))
        active_sql = ("SELECT job_id, agent, state FROM jobs WHERE state IN ('queued', 'sent', "
                      "'running') ORDER BY created", ())
        return {"jobs": args.jobs, "built_s": built,
                "held_cancels": {**timed(store.held_cancels, args.rounds),
                                 "plan": plan(store, *held_sql)},
                "active_jobs": {**timed(store.active_jobs, args.rounds),
                                "plan": plan(store, *active_sql)}}
    finally:
        store.close()


def page(location: str, args: argparse.Namespace) -> dict[str, Any]:
    from opptune.daemon import queries
    from opptune.daemon.service import Daemon
    from opptune.daemon.store import open_store
    from opptune.shared.config import DaemonConfig
    store = open_store(location)
    try:
        fill_cancelled(store, args.cancelled)
    finally:
        store.close()
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=location, curve="off",
                            auto_sweep=False))
    try:
        statements = counting(d.store)
        out: dict[str, Any] = {"cancelled_jobs": args.cancelled}
        for name, q in (("every row", {"only": ["jobs"]}),
                        ("page of 20", {"only": ["jobs"], "limit": 20})):
            before = statements()
            rows = queries.answer(d, "status", dict(q))["jobs"]
            ran = statements() - before
            assert all(j.get("not_run") == 3 for j in rows), rows[:1]
            out[name] = {**timed(lambda: queries.answer(d, "status", dict(q)), args.rounds),
                         "statements": ran, "rows": len(rows)}
        return out
    finally:
        d.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--held", type=int, default=3)
    ap.add_argument("--cancelled-share", type=float, default=0.02,
                    help="of --jobs, the share cancelled and ended (default 0.02)")
    ap.add_argument("--cancelled", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--postgres", action="store_true",
                    help="start a throwaway PostgreSQL server (tests/pgserver.py) and use it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if min(args.jobs, args.cancelled, args.rounds) < 1 or not 0 <= args.cancelled_share < 1:
        ap.error("--jobs, --cancelled and --rounds must be >= 1, --cancelled-share in [0, 1)")
    tmp = Path(tempfile.mkdtemp(prefix="opptune-jobq-"))
    server = None
    try:
        if args.postgres:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from ingest import pg_server
            server = pg_server()
            where = [server.new_database(), server.new_database()]
        else:
            where = [str(tmp / "tick.db"), str(tmp / "page.db")]
        load = round(os.getloadavg()[0], 1)
        fig = {"store": "postgresql" if args.postgres else "sqlite",
               "tick": tick(where[0], args), "status": page(where[1], args),
               "load_before": load, "load_after": round(os.getloadavg()[0], 1)}
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(fig))
        return 0
    print(f"{fig['store']}: {args.jobs:,} jobs ({args.held} cancels held), "
          f"built in {fig['tick']['built_s']} s")
    for q in ("held_cancels", "active_jobs"):
        f = fig["tick"][q]
        print(f"  {q:<14} {f['ms']} ms ({f['ms_min']}-{f['ms_max']}); plan: "
              f"{' | '.join(f['plan'])}")
    print(f"status of {args.cancelled:,} cancelled jobs (4 runs, 3 not run):")
    for name in ("every row", "page of 20"):
        f = fig["status"][name]
        print(f"  {name:<14} {f['ms']} ms ({f['ms_min']}-{f['ms_max']}), "
              f"{f['statements']} SQL statements, {f['rows']} rows")
    print(f"load average {fig['load_before']} before, {fig['load_after']} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
