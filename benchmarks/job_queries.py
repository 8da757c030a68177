"""The store's job queries that grow with the jobs kept: the loop's tick and the status page.

Stores on SQLite or (``--postgres``) a throwaway PostgreSQL server (tests/pgserver.py's):

- for each ``--cancelled-share`` (default 0.02 and 0.5), ``--jobs`` jobs (default 100,000), all
  done but ``--held`` cancelled ones whose agent's end is awaited and that share of them
  cancelled and ended: the queries the daemon's loop makes once a second whatever happens
  (``held_cancels``: the cancels another daemon took; ``active_jobs``: what may expire) and at
  each /metrics scrape (``state_counts``), the query plans of the statements they run
  (EXPLAIN), their milliseconds and CPU milliseconds (with PostgreSQL, the server's too); and
  ``hello``: a daemon's resume of one agent's jobs at its hello (daemon/jobs.py resume; 2,000
  jobs of 50 agents' 100,000, none to resend);
- ``--cancelled`` cancelled jobs (default 1,000) of 4 runs each, one measured and three its
  agent recorded as not run: ``opptune status``'s jobs, every row (``--json``, ``--all``) and
  its page of 20, their milliseconds and the SQL statements each ran (the ``not_run`` count).
  ``--only tick`` or ``--only status`` measures one of the two;
- beside the jobs of each tick store (unless ``--no-history``), what a fleet keeps for good:
  ``--recs`` recommendations (default 20,000, none unsent), ``--tunes`` finished tune sessions
  (10,000) and ``--never-clean`` re-measure items of points never measured clean (2,000), and
  the reads that grew with them: at each hello ``take_unsent`` and ``open_tunes`` (the
  recommendations made while the agent was away, its tune sessions to take up), each second
  ``remeasure_tick`` (daemon/remeasure.py), and ``failed_note``: why a recommend found every
  run of a workload failed (daemon/goal_query.py; 2,000 jobs of the agent's 100,000).

Times are medians (min-max) of ``--rounds``; run it with an older opptune on ``PYTHONPATH``
for the figures before.

    python3 benchmarks/job_queries.py [--postgres] [--only tick|status] [--jobs 100000]
        [--cancelled-share 0.02 0.5] [--cancelled 1000]

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

Schema 21 (jobs.held, its partial index jobs_held), ``--only tick``, 100,000 jobs of which
2,000 / 50,000 cancelled, 3 held; 2026-11-28 03:00-03:01, load average 4.8-5.8, medians of 15
(SQLite, two runs alternating with the code before) and 30 (PostgreSQL). held_cancels before
(jobs_state: every cancelled row read): SQLite 1.1-1.2 / 16.0 ms CPU (1.1-1.3 / 18.6-20.3 ms
wall); PostgreSQL 1.5 / 19 ms wall, the server's CPU 1.3 / 12.7 ms (a seq scan at 50,000).
After: SQLite 0.01 / 0.01-0.02 ms, PostgreSQL 0.14 / 0.04 ms wall, server CPU under its
10 ms tick over 30 calls. state_counts, unchanged: 3.9-4.1 ms CPU on SQLite, 11-13 ms of the
server's on PostgreSQL (every job counted, by index on SQLite, a seq scan on PostgreSQL); the
loop, which counted each second with metrics_endpoint set, counts at each scrape only since.

The resume at a hello reading the agent's jobs only (jobs_agent_workload) instead of every job,
03:04-03:05 (load 2.5-4.9), medians of 9, 2,000 / 50,000 cancelled: before, SQLite 339 / 443
ms CPU (558 / 800 ms wall), PostgreSQL 213 / 367 ms CPU + 256 / 274 ms of the server's (701 /
851 ms wall); after, SQLite 6.4 / 7.4 ms CPU, PostgreSQL 3.3 / 3.2 ms + 5.6 ms of the
server's (18 / 13 ms wall).

A hello's and the tick's reads of what is kept for good, ``--only tick --cancelled-share 0.02
--rounds 15``, 2026-11-28 03:27-03:29 (load average 5.1-10.2), the code before (PYTHONPATH)
and after alternating, medians of 15, CPU: before, SQLite take_unsent 2.3-2.5 ms (a scan of
every recommendation, under the write lock), open_tunes 0.9 ms (every tune session scanned),
remeasure_tick 17.4-17.7 ms (every item read and decoded, each second), failed_note 353-360
ms (every job with its run counts); PostgreSQL 1.1 + 1.3 ms of the server's, 0.13 + 0.67,
14.5 + 2.0 and 265 + 243 ms. After (schema 23's recommendations_unsent; open states named
for tune_sessions_state; the tick reading the waiting and sent items; the agent's jobs of
the workload by jobs_agent_workload): SQLite 0.00, 0.01, 0.10 and 15-16 ms (the 2,000 jobs'
failed runs looked up one job at a time, as before); PostgreSQL 0.03, 0.03, 0.08 and 45 ms
+ 26 ms of the server's (the server's CPU under its 10 ms tick over 15 calls for the first
three). SQLite's plans are those of a store never analysed, as the daemon leaves it: told by
ANALYZE that most sessions are in one of two states, its planner scans tune_sessions (0.36
ms).
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def timed(call: Callable[[], Any], rounds: int, server: Any = None) -> dict[str, float]:
    """Wall milliseconds (median, min, max) and this process's CPU milliseconds (median) of
    ``rounds`` calls; with ``server`` (the PostgreSQL backend's process, psutil) also its CPU
    milliseconds, the mean (the kernel counts it in 10 ms ticks)."""
    times, cpu = [], []
    before = _cpu(server)
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        call()
        cpu.append((time.process_time() - c) * 1e3)
        times.append((time.perf_counter() - t) * 1e3)
    out = {"ms": round(statistics.median(times), 2), "ms_min": round(min(times), 2),
           "ms_max": round(max(times), 2), "cpu_ms": round(statistics.median(cpu), 2)}
    if server is not None:
        out["server_cpu_ms"] = round((_cpu(server) - before) * 1e3 / rounds, 2)
    return out


def _cpu(proc: Any) -> float:
    """User + system CPU seconds of a psutil process so far (0 without one)."""
    if proc is None:
        return 0.0
    t = proc.cpu_times()
    return t.user + t.system


def backend(store: Any) -> Any:
    """The process of a PostgreSQL store's connection on this machine (psutil); None for
    SQLite, whose work is this process's."""
    if hasattr(store.db, "set_trace_callback"):
        return None
    import psutil
    return psutil.Process(int(store.db.execute("SELECT pg_backend_pid()").fetchone()[0]))


def counting(store: Any) -> Callable[[], int]:
    """Count the SQL statements ``store`` runs from now on; returns the counter's reader."""
    ran: list[tuple[str, Any]] = []
    statements(store, ran)
    return lambda: len(ran)


def plan(store: Any, sql: str, args: tuple) -> list[str]:
    """The query plan of ``sql`` as the back end says it."""
    if hasattr(store.db, "set_trace_callback"):
        return [r[-1] for r in store.db.execute("EXPLAIN QUERY PLAN " + sql, args)]
    return [r[0] for r in store.db.execute("EXPLAIN " + sql, args)]


def fill_jobs(store: Any, n: int, held: int, cancelled_share: float) -> None:
    """``n`` one-point jobs: done, every 1/``cancelled_share``-th cancelled (ended), the last
    ``held`` cancelled and held. From schema 21 on the held ones are marked in ``jobs.held``
    too, as the store marks them (an older store has no such column)."""
    every = max(1, round(1 / cancelled_share)) if cancelled_share > 0 else 0
    ended = json.dumps({"cancelled": True, "at": 1.0, "held": False}, separators=(",", ":"))
    holds = json.dumps({"cancelled": True, "at": 1.0, "held": True}, separators=(",", ":"))
    marked = store.schema_version() >= 21
    rows = []
    for i in range(n):
        state, stopped = "done", None
        if i >= n - held:
            state, stopped = "cancelled", holds
        elif every and i % every == 0:
            state, stopped = "cancelled", ended
        rows.append((f"job-{i:07d}", f"agent-{i % 50}", "w", "small", ONE_POINT, 1, 4, 0, 4,
                     float(i), state, None, float(i), stopped)
                    + ((1 if stopped is holds else None,) if marked else ()))
    columns = JOB_COLUMNS + (", held" if marked else "")
    with store._tx() as db:
        db.executemany(f"INSERT INTO jobs ({columns}) VALUES "
                       f"({', '.join('?' * len(rows[0]))})", rows)


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


def tick(location: str, args: argparse.Namespace, share: float) -> dict[str, Any]:
    from opptune.daemon.store import open_store
    store = open_store(location)
    try:
        t = time.perf_counter()
        fill_jobs(store, args.jobs, args.held, share)
        built = round(time.perf_counter() - t, 1)
        if hasattr(store.db, "set_trace_callback"):
            store.db.execute("ANALYZE")
        else:
            store.db.execute("ANALYZE jobs")
        assert len(store.held_cancels()) == args.held
        cancelled = store.state_counts()["jobs"]["cancelled"]
        out: dict[str, Any] = {"jobs": args.jobs, "cancelled": cancelled, "built_s": built,
                               "schema": store.schema_version()}
        server = backend(store)
        for name, call in (("held_cancels", store.held_cancels),
                           ("active_jobs", store.active_jobs),
                           ("state_counts", store.state_counts)):
            ran: list[tuple[str, Any]] = []
            statements(store, ran)
            call()
            statements(store, None)
            out[name] = {**timed(call, args.rounds, server),
                         "plan": [p for sql, a in ran for p in plan(store, sql, a)]}
    finally:
        store.close()
    out["hello"] = hello(location, args)
    if args.history:
        out["history"] = history(location, args)
    return out


def hello(location: str, args: argparse.Namespace) -> dict[str, Any]:
    """What a daemon does with the store at an agent's hello to resume the agent's jobs
    (daemon/jobs.py resume), for one agent of the 50: its jobs are all done or cancelled."""
    from opptune.daemon.service import Daemon
    from opptune.shared.config import DaemonConfig
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=location, curve="off",
                            auto_sweep=False))
    try:
        return timed(lambda: d.jobs.resume("agent-7"), args.rounds, backend(d.store))
    finally:
        d.close()


def fill_history(store: Any, args: argparse.Namespace) -> None:
    """What a long-running fleet keeps besides its jobs: ``--recs`` recommendations of the 50
    agents (verified: none unsent), ``--tunes`` finished tune sessions (and one open), and
    ``--never-clean`` workloads' points never measured clean (and one item waiting for its
    backoff, due in an hour)."""
    recs = [(f"cfg-{i:07d}", f"agent-{i % 50}", "p", f"w{i % 20}", "small", "", 1, "[0]", 1,
             None, 1.0, 0.9, 1.1, "amdahl", "verified", 1.0, None, float(i), float(i))
            for i in range(args.recs)]
    done = json.dumps({"state": "done"})
    tunes = [(f"tune-{i:07d}", f"agent-{i % 50}", "done", done, float(i), float(i))
             for i in range(args.tunes)]
    tunes.append(("tune-open", "agent-7", "measuring", json.dumps({"state": "measuring"}),
                  float(args.tunes), float(args.tunes)))
    points = [{"cores": c, "cpus": list(range(c)), "freq_khz": None, "reason":
               "interference: 48 % of cpu 1 used by pid 4711 (sh)", "retries": 3}
              for c in (1, 2, 3, 4)]
    items = [(f"never:agent-{i % 50}/w{i // 50}/small", f"agent-{i % 50}", "never_clean",
              json.dumps({"workload": f"w{i // 50}", "size": "small", "points": points}), 1.0)
             for i in range(args.never_clean)]
    items.append(("rm-waiting", "agent-7", "waiting", json.dumps(
        {"job": {"workload": "w0", "size": "small", "reps": 4, "warmup": 0,
                 "points": [{"cpus": [0], "threads": 1}]}, "attempt": 1,
         "due": time.time() + 3600, "reasons": {"0": "interference"}, "job_id": None}), 2.0))
    with store._tx() as db:
        db.executemany("INSERT INTO recommendations (id, agent, platform, workload, input, "
                       "variant, cores, cpus, threads, freq_khz, predicted_time_s, "
                       "predicted_lower_s, predicted_upper_s, model, state, verified_time_s, "
                       "error, created, updated) VALUES "
                       f"({', '.join('?' * len(recs[0]))})", recs)
        db.executemany("INSERT INTO tune_sessions VALUES (?, ?, ?, ?, ?, ?)", tunes)
        db.executemany("INSERT INTO remeasure VALUES (?, ?, ?, ?, ?)", items)
        # every run of agent-7's workload w failed: what failed_note looks into
        db.execute("INSERT INTO runs (msg_id, agent, job_id, seq, platform, workload, input, "
                   "variant, cores, cpus, threads, rep, ok, virtual, received, record) VALUES "
                   "('m-failed', 'agent-7', 'job-0000007', 0, 'p', 'w', 'small', '', 1, '[0]', "
                   "1, 0, 0, 0, 1.0, '{\"error\": \"workload failed with exit status 3\"}')")


def history(location: str, args: argparse.Namespace) -> dict[str, Any]:
    """The store reads that grow with what a fleet keeps, made at each hello (take_unsent:
    the recommendations made while the agent was away; open_tune_sessions: its tune
    sessions to take up), each second (the re-measure tick) and where a recommendation has
    no run to fit (failed_note: why the runs failed)."""
    from opptune.daemon.goal_query import failed_note
    from opptune.daemon.service import Daemon
    from opptune.shared.config import DaemonConfig
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=location, curve="off",
                            auto_sweep=False))
    try:
        fill_history(d.store, args)
        if not hasattr(d.store.db, "set_trace_callback"):
            # as PostgreSQL's autovacuum would; the daemon never analyses an SQLite store (its
            # planner, told that most tune sessions are in one state of two, scans them)
            d.store.db.execute("ANALYZE")
        assert d.store.take_unsent("agent-7", time.time()) == []
        assert [r["tune_id"] for r in d.store.open_tune_sessions()] == ["tune-open"]
        assert "failed" in failed_note(d, "agent-7", "w")
        server = backend(d.store)
        out: dict[str, Any] = {"recs": args.recs, "tunes": args.tunes,
                               "never_clean": args.never_clean}
        for name, call in (("take_unsent", lambda: d.store.take_unsent("agent-7", 1.0)),
                           ("open_tunes", d.store.open_tune_sessions),
                           ("remeasure_tick", lambda: d.remeasure.tick(time.time())),
                           ("failed_note", lambda: failed_note(d, "agent-7", "w"))):
            ran: list[tuple[str, Any]] = []
            statements(d.store, ran)
            call()
            statements(d.store, None)
            out[name] = {**timed(call, args.rounds, server), "plan": [
                p for sql, a in ran if sql.lstrip().upper().startswith("SELECT")
                for p in plan(d.store, sql, a)]}
        return out
    finally:
        d.close()


def figure_line(query: str, f: dict, plan: str | None) -> str:
    """One query's figures as printed: wall median (range), CPU, the server's, the plan."""
    server = f" + server {f['server_cpu_ms']} ms" if "server_cpu_ms" in f else ""
    return (f"  {query:<14} {f['ms']} ms ({f['ms_min']}-{f['ms_max']}), CPU {f['cpu_ms']} "
            f"ms{server}" + (f"; plan: {plan}" if plan is not None else ""))


def plan_text(steps: list[str]) -> str:
    """Plan steps joined, each once, with how often it came where more than once (a read
    per job)."""
    seen: dict[str, int] = {}
    for step in steps:
        step = re.sub(r"'[^']*'::text\b", "'...'", step)  # PostgreSQL writes the values in
        seen[step] = seen.get(step, 0) + 1
    return " | ".join(s + (f" (x{n})" if n > 1 else "") for s, n in seen.items())


def statements(store: Any, into: list[tuple[str, Any]] | None) -> None:
    """Keep the SQL statements ``store`` runs (with their arguments) in ``into``; None:
    stop keeping them."""
    if hasattr(store.db, "set_trace_callback"):  # sqlite3 writes the values in
        store.db.set_trace_callback(None if into is None else
                                    lambda sql: into.append((sql, ())))
        return
    if into is None:
        store.db.__dict__.pop("execute", None)
        return
    execute = store.db.execute

    def wrapped(sql: str, args: Any = ()) -> Any:
        into.append((sql, args))
        return execute(sql, args)
    store.db.execute = wrapped


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
    ap.add_argument("--cancelled-share", type=float, nargs="+", default=[0.02, 0.5],
                    help="of --jobs, the share cancelled and ended: a store each "
                         "(default 0.02 0.5: 2,000 and 50,000 of 100,000)")
    ap.add_argument("--cancelled", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--recs", type=int, default=20_000,
                    help="recommendations kept, of 50 agents (none unsent)")
    ap.add_argument("--tunes", type=int, default=10_000, help="finished tune sessions kept")
    ap.add_argument("--never-clean", type=int, default=2_000,
                    help="re-measure items of points never measured clean")
    ap.add_argument("--no-history", dest="history", action="store_false",
                    help="leave out the reads of recommendations, tune sessions, re-measure "
                         "items and failed runs")
    ap.add_argument("--only", choices=("tick", "status"),
                    help="measure the loop's tick queries only, or the status only")
    ap.add_argument("--postgres", action="store_true",
                    help="start a throwaway PostgreSQL server (tests/pgserver.py) and use it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if min(args.jobs, args.cancelled, args.rounds) < 1 or \
            not all(0 <= s < 1 for s in args.cancelled_share):
        ap.error("--jobs, --cancelled and --rounds must be >= 1, --cancelled-share in [0, 1)")
    shares = [] if args.only == "status" else args.cancelled_share
    tmp = Path(tempfile.mkdtemp(prefix="opptune-jobq-"))
    server = None
    try:
        if args.postgres:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from ingest import pg_server
            server = pg_server()
            where = [server.new_database() for _ in range(len(shares) + 1)]
        else:
            where = [str(tmp / f"jobs{i}.db") for i in range(len(shares) + 1)]
        load = round(os.getloadavg()[0], 1)
        fig = {"store": "postgresql" if args.postgres else "sqlite",
               "tick": [tick(w, args, share) for w, share in zip(where, shares)],
               "status": None if args.only == "tick" else page(where[-1], args),
               "load_before": load, "load_after": round(os.getloadavg()[0], 1)}
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(fig))
        return 0
    for t in fig["tick"]:
        print(f"{fig['store']} (schema {t['schema']}): {args.jobs:,} jobs, {t['cancelled']:,} "
              f"cancelled ({args.held} cancels held), built in {t['built_s']} s")
        for q in ("held_cancels", "active_jobs", "state_counts", "hello"):
            print(figure_line(q, t[q], " | ".join(t[q]["plan"]) if "plan" in t[q] else None))
        h = t.get("history")
        if h:
            print(f"  kept beside: {h['recs']:,} recommendations, {h['tunes']:,} finished tune "
                  f"sessions, {h['never_clean']:,} never-clean re-measure items")
            for q in ("take_unsent", "open_tunes", "remeasure_tick", "failed_note"):
                print(figure_line(q, h[q], plan_text(h[q]["plan"])))
    if fig["status"] is not None:
        print(f"status of {args.cancelled:,} cancelled jobs (4 runs, 3 not run):")
        for name in ("every row", "page of 20"):
            f = fig["status"][name]
            print(f"  {name:<14} {f['ms']} ms ({f['ms_min']}-{f['ms_max']}), "
                  f"{f['statements']} SQL statements, {f['rows']} rows")
    print(f"load average {fig['load_before']} before, {fig['load_after']} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
