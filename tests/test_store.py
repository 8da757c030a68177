"""The store on both back ends (SQLite, and PostgreSQL on a throwaway server): schema version,
idempotent batches, jobs, fits, recommendations, migrations, fitting claims."""

import json
import sqlite3
import threading

import pytest

from opptune.daemon.store import Group, ResultIn, open_store
from opptune.daemon.store.schema import MIGRATIONS, SCHEMA_VERSION
from opptune.shared.records import RunRecord


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path):
    """Where a fresh store lives: an SQLite file, or a new database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def st(location):
    """A fresh store at ``location``, closed after the test (one that failed too)."""
    store = open_store(location)
    yield store
    store.close()


def count(st, sql, *args):
    return st.db.execute(sql, args).fetchone()[0]


def record(cores=1, time_s=1.0, **kw):
    rec = RunRecord(platform="p", workload="w", input="s", cores=cores,
                    cpus=list(range(cores)), threads=cores, rep=0, time_s=time_s, **kw)
    return rec


def item(msg_id, seq=0, cores=1, time_s=1.0, job="job-1"):
    rec = record(cores, time_s)
    return ResultIn(msg_id, "a1", job, seq, rec, rec.to_dict())


def test_wal_and_schema_version(tmp_path):  # SQLite only: WAL
    path = tmp_path / "s.db"
    st = open_store(str(path))
    assert st.schema_version() == SCHEMA_VERSION
    assert st.journal_mode() == "wal"
    st.close()
    # Reopening applies no migration twice and keeps the version.
    st = open_store(str(path))
    assert st.schema_version() == SCHEMA_VERSION
    st.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [r[0] for r in db.execute("SELECT version FROM schema_version")] == \
        list(range(1, SCHEMA_VERSION + 1))


def test_insert_is_idempotent_and_acks_all(st):
    assert st.insert_results([item("m1"), item("m2", seq=1)], now=1.0) == ["m1", "m2"]
    # The same id again (a lost ack), alone and inside a batch with a new one.
    assert st.insert_results([item("m1")], now=2.0) == ["m1"]
    assert st.insert_results([item("m2", seq=1), item("m3", seq=2)], now=3.0) == ["m2", "m3"]
    assert count(st, "SELECT COUNT(*) FROM runs") == 3
    assert count(st, "SELECT COUNT(*) FROM runs WHERE msg_id='m1'") == 1
    assert st.job_received("job-1") == 3
    # the same id twice in one batch
    assert st.insert_results([item("m4", seq=3), item("m4", seq=3)], now=4.0) == ["m4", "m4"]
    assert count(st, "SELECT COUNT(*) FROM runs WHERE msg_id='m4'") == 1
    st.db.execute("DELETE FROM runs WHERE msg_id='m4'")
    assert st.run_counts() == [{"agent": "a1", "platform": "p", "workload": "w", "input": "s",
                                "count": 3, "failed": 0, "not_run": 0, "marked": 0}]


def test_run_counts_count_successful_runs_and_failed_ones_apart(st):
    """status' runs table and the report's Fleet said 58 runs where 4 of them failed: a
    failed run measured nothing and is in no fit, so it is counted apart."""
    bad = record(time_s=None, wall_s=0.4, ok=False, error="exit 1")  # it ran, and failed
    # recorded without being run (a job cancelled): failed too, and counted apart again
    skipped = record(time_s=None, ok=False, error="not run: the job was cancelled")
    st.insert_results([item("m1"), item("m2", seq=1),
                       ResultIn("m3", "a1", "job-1", 2, bad, bad.to_dict()),
                       ResultIn("m4", "a1", "job-1", 3, skipped, skipped.to_dict())], now=1.0)
    assert st.run_counts() == [{"agent": "a1", "platform": "p", "workload": "w", "input": "s",
                                "count": 2, "failed": 2, "not_run": 1, "marked": 0}]


def test_stored_ids_names_the_runs_stored_among_many(st):
    """opptune import skips the values it stored before by asking for their ids."""
    st.insert_results([item(f"m{k}", seq=k) for k in range(0, 1200, 3)], now=1.0)
    asked = [f"m{k}" for k in range(1200)] + ["other"]  # more than one query's worth
    assert st.stored_ids(asked) == {f"m{k}" for k in range(0, 1200, 3)}
    assert st.stored_ids([]) == set()


def test_failed_batch_stores_nothing(st):
    bad = item("m2")
    bad = bad._replace(record=record(cores=1, time_s=1.0), agent=None)  # NOT NULL violated
    with pytest.raises(Exception, match="(?i)not.null"):
        st.insert_results([item("m1"), bad], now=1.0)
    assert st.run_counts() == []
    # the store still works after the failed transaction
    assert st.insert_results([item("m1")], now=2.0) == ["m1"]
    assert st.job_received("job-1") == 1


def test_held_cancels_are_the_cancelled_jobs_whose_agents_end_is_awaited(st):
    """What a daemon of a fleet reads each second to tell its agents of the cancels another
    daemon took (daemon/jobs.py tell_held_cancels)."""
    for k in range(4):
        st.save_job("a1", {"job_id": f"job-{k}", "workload": "w", "size": "s", "reps": 1,
                           "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, float(k))
    st.set_job_state("job-1", "cancelled", "by the user",
                     stopped={"cancelled": True, "at": 1.0, "held": True})
    st.set_job_state("job-2", "cancelled", "by the user",
                     stopped={"cancelled": True, "at": 1.0, "held": False})  # its end stored
    st.set_job_state("job-3", "cancelled", "by the user",
                     stopped={"cancelled": True, "at": 1.0, "held": True})
    assert st.held_cancels() == [{"job_id": "job-1", "agent": "a1"},
                                 {"job_id": "job-3", "agent": "a1"}]


def test_a_cancel_is_held_until_a_write_of_the_job_ends_it(st):
    """Schema 21: ``jobs.held`` (what held_cancels reads) follows each write of the job's
    ``stopped``: the agent's end stored, its refusal, a job saved again under its id; a
    row whose column an earlier daemon left set reads as its ``stopped`` says."""
    for k in range(5):
        st.save_job("a1", {"job_id": f"job-{k}", "workload": "w", "size": "s", "reps": 1,
                           "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, float(k))
        st.set_job_state(f"job-{k}", "cancelled", "by the user",
                         stopped={"cancelled": True, "at": 1.0, "held": True})

    def held():
        marked = [r[0] for r in st.db.execute("SELECT job_id FROM jobs WHERE held = 1 "
                                              "ORDER BY created")]
        return [j["job_id"] for j in st.held_cancels()], marked

    everyone = [f"job-{k}" for k in range(5)]
    assert held() == (everyone, everyone)
    assert "held" not in st.job("job-0") and st.job("job-0")["stopped"]["held"] is True
    # its agent's end stored (daemon/jobs.py _cancel_end), an older agent's refusal
    st.set_job_state("job-1", "cancelled", "by the user", only_from=("cancelled",),
                     stopped={"cancelled": True, "at": 1.0, "held": False})
    st.set_job_state("job-2", "cancelled", "by the user; refused", only_from=("cancelled",),
                     stopped={"cancelled": True, "at": 1.0, "held": False,
                              "refused": "unknown_type"})
    # saved again under its id (a new job), and one a daemon of an earlier version ended:
    # its stopped written, the column left as it was
    st.save_job("a1", {"job_id": "job-3", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 3.0)
    st.db.execute("UPDATE jobs SET stopped = ? WHERE job_id = ?",
                  (json.dumps({"cancelled": True, "at": 1.0, "held": False}), "job-4"))
    assert held() == (["job-0"], ["job-0", "job-4"])
    # held again (sent as another daemon cancelled it: daemon/jobs.py _sent_cancelled)
    st.set_job_state("job-1", "cancelled", "by the user", only_from=("cancelled",),
                     stopped={"cancelled": True, "at": 1.0, "held": True})
    assert held() == (["job-0", "job-1"], ["job-0", "job-1", "job-4"])


def test_a_recovered_job_keeps_its_expected_count_and_reason_and_is_counted(st):
    """`opptune recover` (daemon/recovery.py): a job row for a job the store never issued,
    with no points, the runs the agent counted as expected and its reason; recovered_counts
    gives its jobs and runs per agent, on both back ends."""
    from opptune.daemon.recovery import RECOVERED, recovered_job
    job = recovered_job("lost-1", "w", "s", 5)
    job["reason"] = "a job this store never issued"
    st.save_job("a1", job, 1.0, state=RECOVERED)
    st.save_job("a1", {"job_id": "job-1", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 1.0)
    assert st.recovered_counts("a1") == (1, 0)
    rows = [ResultIn(f"m{k}", "a1", job_id, k, rec, rec.to_dict())
            for k, job_id in ((0, "lost-1"), (1, "lost-1"), (2, "job-1"))
            for rec in [record()]]
    st.insert_results(rows, now=2.0)
    assert st.recovered_counts("a1") == (1, 2) and st.recovered_counts("b1") == (0, 0)
    row = st.job("lost-1")
    assert (row["state"], row["expected"], row["n_points"], row["points"], row["reason"]) == (
        "recovered", 5, 0, [], "a job this store never issued")
    assert st.job("job-1")["expected"] == 1  # an issued job's: its points times its reps


def test_a_recover_opening_is_stored_replaced_and_listed_by_time(st):
    """`opptune recover`'s openings (schema 24) on both back ends: one row per agent, a new
    opening replacing the last, listed by the time they were made, the times kept to the
    millisecond (PostgreSQL's REAL would not)."""
    st.open_recovery("a1", 1795860000.125, ["unknown_job"], 1795856400.5)
    st.open_recovery("b1", 1795860100.0, ["unknown_job", "too_large"], 1795856500.25)
    assert st.recoveries("a1") == [{"agent": "a1", "until": 1795860000.125,
                                    "codes": ["unknown_job"], "opened": 1795856400.5}]
    assert [r["agent"] for r in st.recoveries()] == ["a1", "b1"]
    st.open_recovery("a1", 1795861000.0, ["unknown_job", "bad_record"], 1795856600.75)
    assert [(r["agent"], r["codes"], r["opened"]) for r in st.recoveries()] == [
        ("b1", ["unknown_job", "too_large"], 1795856500.25),
        ("a1", ["unknown_job", "bad_record"], 1795856600.75)]
    assert st.recoveries("c1") == []


def test_the_runs_recorded_without_running_are_told_from_those_measured(st):
    """The runs an agent recorded without running them count in ``received`` (stored) but
    measured nothing: a cancel's, and those a timeout left (before, a job's runs skipped after
    a timeout counted as measured); a run that ran and failed was measured. Counted in the
    jobs' query itself, on both back ends."""
    st.save_job("a1", {"job_id": "job-1", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}] * 4}, 1.0)

    def result(seq, error=None, stop=None, job="job-1", ran=True):
        rec = record(time_s=None if error else 1.0, ok=error is None, error=error,
                     wall_s=1.0 if ran else None, extra={"stopped": stop} if stop else {})
        return ResultIn(f"{job}-m{seq}", "a1", job, seq, rec, rec.to_dict())

    def not_run(job="job-1"):
        (row,) = st.jobs_page(job_ids=[job])[0]
        assert [j for j in st.jobs() if j["job_id"] == job] == [row]
        return row["received"], row["not_run"]

    assert not_run() == (0, 0)
    st.insert_results([result(0), result(1, error="exit status 1")], now=2.0)
    assert not_run() == (2, 0)  # one measured, one measured and failed
    stop = {"cancelled": True, "runs_not_run": 2, "points": 4, "points_not_run": 2}
    why = "not run: the job was cancelled by the daemon before run 3 of 4"
    st.insert_results([result(3, why, stop, ran=False)], now=3.0)  # run 2's still on its way
    st.set_job_state("job-1", "cancelled", "by the user",
                     stopped={"cancelled": True, "at": 3.0, "held": False})
    assert not_run() == (3, 1)
    st.insert_results([result(2, why, stop, ran=False)], now=4.0)
    assert not_run() == (4, 2)
    # a job whose point timed out: the run that timed out ran, the rest of the point did not
    st.save_job("a1", {"job_id": "job-2", "workload": "w", "size": "s", "reps": 3,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 5.0)
    skipped = "not run: repetition 0 of this point timed out after 5 s"
    st.insert_results([result(0, "timed out after 5 s", job="job-2"),
                       result(1, skipped, job="job-2", ran=False),
                       result(2, skipped, job="job-2", ran=False)], now=6.0)
    assert not_run("job-2") == (3, 2)
    # a cancelled job the agent ran to its end (an older agent), or had not begun: none
    st.save_job("a1", {"job_id": "job-3", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 7.0)
    st.set_job_state("job-3", "cancelled", "by the user")
    assert not_run("job-3") == (0, 0)


def query_plans(st):
    """A reader of the query plans of the SELECT statements ``st`` runs in a call: the
    returned ``plans(call)`` gives them as one text. PostgreSQL is told not to scan, as it
    would a table this small."""
    sqlite = hasattr(st.db, "set_trace_callback")
    ran: list[tuple] = []
    run = st.db.execute
    if sqlite:
        st.db.set_trace_callback(lambda sql: ran.append((sql, ())))  # values written in
    else:
        st.db.execute("SET enable_seqscan = off")
        st.db.execute = lambda sql, args=(): (ran.append((sql, args)), run(sql, args))[1]

    def plans(call):
        ran.clear()
        call()
        said = [(sql, args) for sql, args in ran if sql.lstrip().upper().startswith("SELECT")]
        if sqlite:
            st.db.set_trace_callback(None)
        out = [" | ".join(str(r[-1] if sqlite else r[0]) for r in run(
            ("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + sql, args))
            for sql, args in said]
        if sqlite:
            st.db.set_trace_callback(lambda sql: ran.append((sql, ())))
        return " || ".join(out)
    return plans


def test_the_loops_job_reads_and_the_not_run_count_use_their_indexes(st):
    """Schema 18: the jobs the loop reads each second that may expire are found by state, not
    by a scan of every job (100,000 jobs: 68 ms a second on SQLite,
    benchmarks/job_queries.py), and the runs recorded without running by their partial index.
    Schema 21: the cancels held by their own partial index (jobs_held), not among every
    cancelled job kept (by state, 17 ms with 50,000 cancelled). The plans of the statements
    the store runs."""
    plans = query_plans(st)
    held, active = plans(st.held_cancels), plans(st.active_jobs)
    assert "jobs_held" in held and "jobs_state" in active, (held, active)
    assert "runs_not_run" in plans(lambda: st.jobs_page(job_ids=["job-1"]))
    if hasattr(st.db, "set_trace_callback"):  # found in created order: no sort of its own
        assert "TEMP B-TREE" not in held, held


@pytest.fixture
def hello_rows(st):
    """``st`` with what a hello and the tick read: a1's recommendation verified and a2's
    unsent, a1's tune sessions (two open), a never-clean item, a1's job of w whose run
    failed."""
    g = Group("p", "w", "s", "")
    for i, state in enumerate(("verified", "unsent")):
        st.save_recommendation({"config_id": f"cfg-{i}", "agent": f"a{i + 1}", **g.as_dict(),
                                "cores": 1, "cpus": [0], "threads": 1, "state": state}, 1.0)
    for i, state in enumerate(("done", "measuring", "stopped", "verifying")):
        st.save_tune_session({"tune_id": f"tune-{i}", "agent": "a1", "state": state,
                              "started": float(i), "updated": float(i)})
    st.save_remeasure("never:a1/w/s", "a1", "never_clean",
                      {"workload": "w", "size": "s", "points": []}, 1.0)
    st.save_job("a1", {"job_id": "job-1", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 1.0)
    failed = record(time_s=None, ok=False, error="workload failed with exit status 3")
    st.insert_results([ResultIn("m1", "a1", "job-1", 0, failed, failed.to_dict())], 2.0)
    return st


def test_a_hello_asks_the_index_for_unsent_recommendations(hello_rows):
    """Each hello asks whether its agent has recommendations unsent; found by the partial
    index recommendations_unsent (schema 23), not in a scan of every recommendation kept
    (20,000: 2.4 ms of CPU on SQLite, benchmarks/job_queries.py). The answers stay."""
    st, said = hello_rows, {}
    assert "recommendations_unsent" in query_plans(st)(
        lambda: said.setdefault("a1", st.take_unsent("a1", 3.0)))
    assert said["a1"] == [] and [r["config_id"] for r in st.take_unsent("a2", 3.0)] \
        == ["cfg-1"]


def test_a_hello_finds_the_open_tune_sessions_by_index(hello_rows):
    """Each hello takes up its agent's open tune sessions: found by the index on state, not
    in a scan of every session kept (10,000 finished: 1.0 ms of CPU on SQLite). The same
    sessions, oldest first."""
    st, said = hello_rows, {}
    assert "tune_sessions_state" in query_plans(st)(
        lambda: said.setdefault("open", st.open_tune_sessions()))
    assert [r["tune_id"] for r in said["open"]] == ["tune-1", "tune-3"]


def test_the_remeasure_tick_leaves_the_points_never_measured_clean_alone(hello_rows, caplog):
    """The once-a-second tick reads the re-measure items waiting or out only, no longer every
    workload's points never measured clean (2,000 of them: 16 ms of CPU a second on SQLite,
    benchmarks/job_queries.py): one whose stored body is damaged was logged as unreadable at
    every tick. The status still reads them, and says so once."""
    from opptune.daemon.remeasure import Remeasure
    from opptune.shared.config import DaemonConfig
    st = hello_rows
    st.db.execute("INSERT INTO remeasure VALUES ('never:a1/w2/s', 'a1', 'never_clean', "
                  "'{not json', 1.0)")
    rm = Remeasure(DaemonConfig(), st, None, None)
    caplog.clear()
    for now in (3.0, 4.0, 5.0):
        rm.tick(now)
    assert [r.getMessage() for r in caplog.records] == []
    assert [m["workload"] for m in rm.status(5.0)] == ["w"]
    assert ["not JSON" in r.getMessage() for r in caplog.records] == [True]


def test_why_the_runs_failed_is_looked_up_in_the_agents_jobs_of_the_workload(hello_rows):
    """A recommend whose runs all failed says why from the agent's jobs of the workload,
    found by index (jobs_agent_workload), not from every job kept with its run counts
    (100,000: 0.36 s of CPU on SQLite). The same text."""
    from types import SimpleNamespace

    from opptune.daemon.goal_query import failed_note
    st, said = hello_rows, {}
    assert "jobs_agent_workload" in query_plans(st)(
        lambda: said.setdefault("note", failed_note(SimpleNamespace(store=st), "a1", "w")))
    assert said["note"] == ("; its one run on 'a1' failed (workload failed with exit status "
                            "3): 'opptune status --agent a1' gives each job's reason")


def test_a_hello_with_nothing_unsent_waits_for_no_writer(tmp_path):
    """An agent's hello with no recommendation unsent (the usual one) reads without the
    store's write lock: before, every hello took it (BEGIN IMMEDIATE) and waited out another
    writer, or failed after the busy timeout. One with a recommendation to take still takes
    it under the lock, once."""
    from opptune.daemon.store.sqlite import SQLiteStore
    path = str(tmp_path / "s.db")
    st = SQLiteStore(path, busy_timeout_s=0.2, checkpoint_s=None)
    g = Group("p", "w", "s", "")
    for i, state in enumerate(("verified", "unsent")):
        st.save_recommendation({"config_id": f"cfg-{i}", "agent": f"a{i + 1}", **g.as_dict(),
                                "cores": 1, "cpus": [0], "threads": 1, "state": state}, 1.0)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        assert st.take_unsent("a1", 2.0) == []
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            st.take_unsent("a2", 2.0)
        writer.execute("ROLLBACK")
        assert [r["config_id"] for r in st.take_unsent("a2", 3.0)] == ["cfg-1"]
        assert st.take_unsent("a2", 4.0) == []
    finally:
        writer.close()
        st.close()


def test_jobs_groups_fits_recommendations(st):
    st.save_platform("p", {"sweep_order": [1, 0]}, 1.0)
    st.save_agent("a1", "p", ["w", {"name": "w2", "sizes": ["s"]}], "0.1", 1.0)
    assert st.platform("p") == {"sweep_order": [1, 0]}
    assert [a["id"] for a in st.agents()] == ["a1"]
    assert st.workloads() == ["w", "w2"]
    job = {"job_id": "job-1", "workload": "w", "size": "s", "reps": 2, "warmup": 0,
           "points": [{"cpus": [1], "threads": 1, "freq_khz": None}]}
    st.save_job("a1", job, 2.0)
    st.insert_results([item("m1", 0, 1, 2.0), item("m2", 1, 2, 1.1)], now=3.0)
    jobs = st.jobs()
    assert jobs[0]["expected"] == 2 and jobs[0]["received"] == 2 and jobs[0]["state"] == "sent"
    st.set_job_state("job-1", "complete")
    assert st.job("job-1")["state"] == "complete"
    assert st.job("job-1")["points"] == job["points"]
    g = Group("p", "w", "s", "")
    assert st.job_groups("job-1") == [g] and st.groups() == [g]
    assert st.group_runs(g) == [(1, None, 2.0), (2, None, 1.1)]
    st.save_fit(g, "amdahl", {"s": 0.1}, {"rmse": float("nan")}, [{"name": "usl"}], 4.0)
    st.save_fit(g, "usl", {"c": 0.2}, {"rmse": 0.01}, [], 5.0)
    fits = st.fits()
    assert len(fits) == 1 and fits[0]["model"] == "usl" and fits[0]["params"] == {"c": 0.2}
    rec = {"config_id": "cfg-1", "agent": "a1", **g.as_dict(), "cores": 2, "cpus": [1, 0],
           "threads": 2, "predicted_time_s": 1.1}
    st.save_recommendation(rec, 6.0)
    assert st.recommendation("cfg-1")["state"] == "pushed"
    assert st.update_recommendation("cfg-1", "verified", 7.0, verified_time_s=1.05)
    r = st.recommendation("cfg-1")
    assert (r["state"], r["verified_time_s"], r["cpus"]) == ("verified", 1.05, [1, 0])
    assert not st.update_recommendation("nope", "verified", 7.0)
    # stored without keep (as before it was): it stays
    assert r["keep"] is None
    st.save_recommendation({**rec, "config_id": "cfg-2", "keep": False}, 8.0)
    assert st.recommendation("cfg-2")["keep"] is False
    assert st.take_unsent("a1", 9.0) == [] and st.recommendations()[-1]["keep"] is False


def test_a_recommendations_goal_and_measured_energy_are_kept(st):
    """Schema 15: the goal a recommendation was pushed for (with its predicted energy) and the
    energy its verification measured are kept and read back; a time one's are None."""
    g = Group("p", "w", "s", "")
    goal = {"objective": "edp", "energy_j": {"value": 10.0, "lower": 9.0, "upper": 11.5}}
    rec = {"config_id": "cfg-e", "agent": "a1", **g.as_dict(), "cores": 2, "cpus": [0, 1],
           "threads": 2, "predicted_time_s": 1.1, "goal": goal}
    st.save_recommendation(rec, 1.0)
    st.save_recommendation({**rec, "config_id": "cfg-t", "goal": None}, 1.0)
    assert st.update_recommendation("cfg-e", "verified", 2.0, verified_time_s=1.0,
                                    verified_energy_j=10.4)
    r, t = st.recommendation("cfg-e"), st.recommendation("cfg-t")
    assert (r["goal"], r["verified_energy_j"]) == (goal, 10.4)
    assert (t["goal"], t["verified_energy_j"]) == (None, None)


def test_a_jobs_stop_for_its_timeouts_is_kept_and_read_back(st):
    """Schema 14: the agent's stop of a job (``stopped``) is kept with its state and read
    back by every job query; another state change clears it. The job's last run is the
    record of its highest seq, as sent."""
    stop = {"after_timeouts": 2, "points_not_run": 3, "points": 5, "definition": "ab12"}
    for created, job_id in enumerate(("job-1", "job-2")):
        st.save_job("a1", {"job_id": job_id, "workload": "w", "size": "s", "reps": 1,
                           "warmup": 0, "points": [{"cpus": [0], "threads": 1}] * 5}, created)
    assert st.job_last_run("job-1") is None
    last = record(time_s=None, ok=False, error="not run: the job stopped after 2 points ...",
                  extra={"stopped": stop})
    st.insert_results([item("m1", 0), ResultIn("m2", "a1", "job-1", 4, last, last.to_dict())],
                      now=2.0)
    assert st.job_last_run("job-1") == last.to_dict()
    assert st.set_job_state("job-1", "done", "the job stopped after 2 points ...", stopped=stop)
    assert st.job("job-1")["stopped"] == stop and st.job("job-2")["stopped"] is None
    assert [j["stopped"] for j in st.jobs()] == [stop, None]
    assert [j["stopped"] for j in st.jobs_page(job_ids=["job-1"], limit=1)[0]] == [stop]
    assert [j["stopped"] for j in st.jobs_for("a1", "w")] == [stop, None]
    st.set_job_state("job-1", "expired", "agent a1 not seen for 61 s")
    assert st.job("job-1")["stopped"] is None


def test_unsent_recommendations_are_taken_once_newest_per_group(st):
    g, g2 = Group("p", "w", "s", ""), Group("p", "w2", "s", "")

    def rec(cid, group, state, agent="a1", error=None):
        return {"config_id": cid, "agent": agent, **group.as_dict(), "cores": 1, "cpus": [0],
                "threads": 1, "predicted_time_s": 1.0, "state": state, "error": error}
    st.save_recommendation(rec("old", g, "unsent"), 1.0)
    st.save_recommendation(rec("new", g, "unsent"), 2.0)
    st.save_recommendation(rec("pushed-later", g2, "unsent"), 1.5)
    st.save_recommendation(rec("done", g2, "verified"), 3.0)  # newer: pushed-later is stale
    st.save_recommendation(rec("pid", Group("p", "w3", "s", ""), "unsent",
                               error="not sent: ... apply it again"), 2.0)
    st.save_recommendation(rec("other-agent", g, "unsent", agent="a2"), 2.0)
    taken = st.take_unsent("a1", 5.0)
    assert [r["config_id"] for r in taken] == ["new"]
    assert taken[0]["state"] == "pushed" and taken[0]["cpus"] == [0]
    states = {r["config_id"]: r["state"] for r in st.recommendations()}
    assert states == {"old": "superseded", "new": "pushed", "pushed-later": "superseded",
                      "done": "verified", "pid": "unsent", "other-agent": "unsent"}
    assert "newer recommendation" in st.recommendation("old")["error"]
    # a second daemon on the same store (or the same agent's next hello) takes nothing again
    assert st.take_unsent("a1", 6.0) == []


def test_run_points_per_group_with_energy_virtual_and_marked_flags(location):
    store = open_store(location)
    try:
        store.save_platform("p", {"id": "p"}, 1.0)
        recs = [RunRecord(platform="p", workload="w", input="s", cores=c, cpus=list(range(c)),
                          threads=c, rep=0, time_s=1.0 / c, energy_j=2.0 * c, virtual=True,
                          marked="interference: 50 % of cpu 1" if c == 2 else None)
                for c in (1, 2)]
        recs.append(RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0],
                              threads=1, rep=1, ok=False, error="exit 1"))
        store.insert_results([ResultIn(f"m{i}", "a1", "j", i, r, r.to_dict())
                              for i, r in enumerate(recs)], 2.0)
        pts = store.run_points()
        assert list(pts) == [Group("p", "w", "s", "")]
        assert pts[Group("p", "w", "s", "")] == [(1, None, 1.0, 2.0, True, False),
                                                 (2, None, 0.5, 4.0, True, True)]
    finally:
        store.close()


def full_record(cores=2, rep=0):
    return record(cores, 0.5, freq_mhz=1800.0, freq_observed_mhz={"policy0": 1800.0},
                  counters={"instructions": 1.5e9, "cycles": None, "ipc": 0.81},
                  invalid={"cycles": "ENOENT"}, energy_j=3.25, energy_source="rapl:package-0",
                  thread_stats=[{"busy_s": 0.4, "wait_s": 0.01}] * cores, started_at=1.7e9,
                  extra={"note": "x"})


def test_the_whole_record_is_kept_and_read_back(st):
    recs = [full_record(2, rep) for rep in range(3)]
    st.insert_results([ResultIn(f"m{i}", "a1", "job-1", i, r, r.to_dict())
                       for i, r in enumerate(recs)], now=1.0)
    got = st.run_records("job-1")
    assert [m for m, _ in got] == ["m0", "m1", "m2"]
    assert [g for _, g in got] == recs


class OldStore:
    """A store built by hand up to ``version`` (the migrations as an older daemon ran them)."""

    def __init__(self, location, version):
        self.pg = location.startswith("postgresql://")
        if self.pg:
            from opptune.daemon.store.postgres import _Conn, pg_sql
            self.db, self.sql = _Conn(location), pg_sql
        else:
            self.db, self.sql = sqlite3.connect(location), str
        self.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                     "applied REAL NOT NULL)")
        for v in range(1, version + 1):
            for stmt in MIGRATIONS[v]:
                self.execute(stmt)
            self.execute("INSERT INTO schema_version VALUES (?, 0)", v)

    def execute(self, sql, *args):
        return self.db.execute(self.sql(sql), args)

    def close(self):
        if not self.pg:
            self.db.commit()
        self.db.close()


def test_a_version_1_store_is_migrated_with_every_row_intact(location):
    db = OldStore(location, 1)
    old = full_record(1)
    db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
               "old-1", "a1", "job-1", 0, "p", "w", "s", "", 1, "[0]", 1, 1800.0, 0, 0.5, None,
               None, None, 3.25, 1, 0, 1.0, json.dumps(old.to_dict()))
    db.close()
    st = open_store(location)
    assert st.schema_version() == SCHEMA_VERSION
    new = full_record(1, rep=1)
    st.insert_results([ResultIn("new-1", "a1", "job-1", 1, new, new.to_dict())], now=2.0)
    (m0, r0), (m1, r1) = st.run_records("job-1")
    assert (m0, m1) == ("old-1", "new-1")
    assert (r0, r1) == (old, new)
    assert st.group_runs(Group("p", "w", "s", "")) == [(1, 1800.0, 0.5), (1, 1800.0, 0.5)]
    assert st.job_received("job-1") == 2
    # the indexes came back with the rebuilt table
    sql = ("SELECT indexname FROM pg_indexes WHERE tablename='runs'" if db.pg else
           "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='runs'")
    names = {r[0] for r in st.db.execute(sql)}
    assert {"runs_job_seq", "runs_group"} <= names and "runs_job" not in names
    st.close()


def test_migration_is_logged_in_one_line(location, caplog):
    """A fresh store said 'migrated to schema version N' once per version, ten lines at the
    daemon's first start (found by the README walk): one line now, and none when the store
    is already current."""
    import logging
    caplog.set_level(logging.INFO, logger="opptune.daemon.store")
    st = open_store(location)
    shown = st.path
    st.close()
    said = [r.getMessage() for r in caplog.records if "schema version" in r.getMessage()]
    assert said == [f"store {shown} created (schema version {SCHEMA_VERSION})"]
    caplog.clear()
    open_store(location).close()
    assert not [r for r in caplog.records if "schema version" in r.getMessage()]


def test_a_version_1_store_logs_its_migration_in_one_line(location, caplog):
    import logging
    OldStore(location, 1).close()
    caplog.set_level(logging.INFO, logger="opptune.daemon.store")
    st = open_store(location)
    shown = st.path
    st.close()
    said = [r.getMessage() for r in caplog.records if "schema version" in r.getMessage()]
    assert said == [f"store {shown} migrated from schema version 1 to {SCHEMA_VERSION}"]


def test_a_version_2_store_gets_job_states_and_keeps_its_jobs(location):
    db = OldStore(location, 2)
    for job_id, state in (("job-1", "complete"), ("job-2", "sent")):
        db.execute("INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                   job_id, "a1", "w", "small", "[]", 0, 1, 0, 0, 5.0, state)
    db.close()
    st = open_store(location)
    assert st.schema_version() == SCHEMA_VERSION
    got = {j["job_id"]: (j["state"], j["reason"], j["updated"]) for j in st.jobs()}
    assert got == {"job-1": ("done", None, 5.0), "job-2": ("sent", None, 5.0)}
    assert st.set_job_state("job-2", "failed", "refused", now=9.0, only_from=("sent",))
    assert not st.set_job_state("job-2", "running", now=9.5, only_from=("sent",))
    assert {j["job_id"]: j["state"] for j in st.active_jobs()} == {}
    assert st.job("job-2")["reason"] == "refused" and st.job("job-2")["updated"] == 9.0
    st.close()


def test_a_0_5_0_store_gives_the_same_held_cancels_from_its_column(location):
    """Schema 21 on a store of opptune 0.5.0 (schema 20), its jobs as that version writes
    them: the migration marks the cancels held that 0.5.0's query finds (the same list,
    oldest first), and only those; a cancel its agent ends then is no longer held."""
    db = OldStore(location, 20)
    dumps = json.JSONEncoder(separators=(",", ":")).encode  # the store's (sqlite._dumps)
    held = dumps({"cancelled": True, "at": 1.0, "held": True})
    ended = dumps({"cancelled": True, "at": 1.0, "held": False})
    for job_id, state, created, stopped in (
            ("job-1", "cancelled", 5.0, held),
            ("job-2", "cancelled", 6.0, ended),  # its agent's end stored
            ("job-3", "cancelled", 7.0, dumps({"cancelled": True, "at": 1.0, "held": False,
                                               "refused": "unknown_type"})),
            ("job-4", "cancelled", 8.0, None),  # cancelled before schema 14
            ("job-5", "done", 9.0, dumps({"after_timeouts": 2, "points_not_run": 1,
                                          "points": 3, "definition": None})),
            ("job-6", "sent", 10.0, None),
            ("job-0", "cancelled", 1.0, held)):  # the oldest: listed first
        db.execute("INSERT INTO jobs (job_id, agent, workload, size, points, n_points, reps, "
                   "warmup, expected, created, state, reason, updated, stopped) VALUES "
                   "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", job_id, "a1", "w", "small",
                   '[{"cpus":[0],"threads":1}]', 1, 1, 0, 1, created, state,
                   "cancelled by the user" if state == "cancelled" else None, created, stopped)
    # 0.5.0's held_cancels, on the store as it left it
    before = [{"job_id": r[0], "agent": r[1]} for r in db.execute(
        "SELECT job_id, agent, stopped FROM jobs WHERE state='cancelled' AND stopped LIKE ? "
        "ORDER BY created", '%"held":true%').fetchall() if json.loads(r[2])["held"] is True]
    db.close()
    st = open_store(location)
    try:
        assert st.schema_version() == SCHEMA_VERSION
        assert before == [{"job_id": "job-0", "agent": "a1"}, {"job_id": "job-1", "agent": "a1"}]
        assert st.held_cancels() == before
        assert [r[0] for r in st.db.execute("SELECT job_id FROM jobs WHERE held = 1 "
                                            "ORDER BY created")] == ["job-0", "job-1"]
        assert {j["job_id"]: j["stopped"] for j in st.jobs()}["job-1"] == json.loads(held)
        assert st.set_job_state("job-0", "cancelled", "cancelled by the user",
                                only_from=("cancelled",),
                                stopped={"cancelled": True, "at": 1.0, "held": False})
        assert st.held_cancels() == [{"job_id": "job-1", "agent": "a1"}]
    finally:
        st.close()


def test_a_store_newer_than_the_daemon_is_refused(location):
    db = OldStore(location, SCHEMA_VERSION)
    db.execute("INSERT INTO schema_version VALUES (?, 0)", SCHEMA_VERSION + 1)
    db.close()
    with pytest.raises(RuntimeError, match="newer than this daemon's"):
        open_store(location)


def test_a_fit_claim_is_held_by_one_daemon_at_a_time(location):
    """Two stores on one database (two daemons): one claims a group, the other is refused
    until it is released or its lease runs out."""
    a, b = open_store(location), open_store(location)
    g = Group("p", "w", "s", "")
    assert a.claim_fit(g, "daemon-a", now=10.0, lease_s=60)
    assert a.claim_fit(g, "daemon-a", now=11.0, lease_s=60)  # again by its holder
    assert not b.claim_fit(g, "daemon-b", now=12.0, lease_s=60)
    b.release_fit(g, "daemon-b")  # not b's: nothing changes
    assert not b.claim_fit(g, "daemon-b", now=13.0, lease_s=60)
    a.release_fit(g, "daemon-a")
    assert b.claim_fit(g, "daemon-b", now=14.0, lease_s=60)
    # b dies holding it: after the lease, a takes it over
    assert not a.claim_fit(g, "daemon-a", now=73.0, lease_s=60)
    assert a.claim_fit(g, "daemon-a", now=74.0, lease_s=60)
    assert b.claim_fit(Group("p", "w", "s", "other"), "daemon-b", now=75.0, lease_s=60)
    a.close()
    b.close()


def test_racing_claims_are_won_once(location):
    """Eight daemons claim the same groups at once, over and over: every round has exactly
    one winner per group."""
    stores = [open_store(location) for _ in range(8)]
    groups = [Group("p", f"w{i}", "s", "") for i in range(3)]
    try:
        for rnd in range(5):
            wins: list[tuple[int, Group]] = []
            barrier = threading.Barrier(len(stores))

            def claim(i, st):
                barrier.wait()
                for g in groups:
                    if st.claim_fit(g, f"d{i}", now=float(rnd), lease_s=1e9):
                        wins.append((i, g))

            threads = [threading.Thread(target=claim, args=(i, st))
                       for i, st in enumerate(stores)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert sorted(g for _, g in wins) == sorted(groups)
            for i, g in wins:
                stores[i].release_fit(g, f"d{i}")
    finally:
        for st in stores:
            st.close()


def test_a_tune_session_round_trips_and_only_unfinished_ones_are_open(location):
    """What a restarted daemon resumes from: the whole session back as it was saved (its
    goal, segments, steps, job), grids recomputed from the board; done and failed sessions
    are not reopened."""
    from opptune.agent.virtual_board import board_spec
    from opptune.daemon.objectives import Goal
    from opptune.daemon.tuning import Segment, Session, segment_grid
    from test_goal_recommend import platform_of

    platform = platform_of(board_spec("odroid-xu4"))
    order = platform["clusters"][1]
    goal = Goal("energy", deadline_s=2.5, power_cap_w=4.0)
    seg = Segment("cluster1", order, segment_grid(platform, order, None), 5, 2,
                  stop_reason=None)
    s = Session("tune-a", "a1", "pi_integrate", "small", goal, [seg], 2, 0, 1, None, 100.0,
                current=0, job_id="job-7", job_started=101.5, job_seconds=[1.25, 1.5],
                steps=[{"variant": "cluster1", "cores": 2, "cpus": order[:2],
                        "freq_khz": 1400000, "reason": "largest spread", "job_id": "job-6"}],
                updated=102.0)
    st = open_store(location)
    try:
        st.save_tune_session(s.record())
        done = Session("tune-b", "a1", "pi_integrate", "small", Goal(), [seg], 2, 0, None,
                       None, 99.0, state="done", reason="applied and verified",
                       recommendation={"cores": 2, "freq_khz": 1400000, "nan": float("nan")},
                       config_id="cfg-1", verification={"state": "verified"}, updated=103.0)
        st.save_tune_session(done.record())
        assert [r["tune_id"] for r in st.open_tune_sessions()] == ["tune-a"]
        back = Session.from_record(st.open_tune_sessions()[0], platform)
        assert back.goal == goal and Goal.from_dict(goal.as_dict()) == goal
        assert back.record() == s.record()
        assert list(back.segments[0].grid.cores) == list(seg.grid.cores) and \
            list(back.segments[0].grid.freq_mhz) == list(seg.grid.freq_mhz)
        # a later save replaces the row: the session is final and no longer open
        s.state, s.job_id, s.updated = "failed", None, 104.0
        st.save_tune_session(s.record())
        assert st.open_tune_sessions() == []
        assert st.tune_session("tune-a")["state"] == "failed"
        b = st.tune_session("tune-b")
        assert b["recommendation"] == {"cores": 2, "freq_khz": 1400000, "nan": None}
        assert b["verification"] == {"state": "verified"} and b["config_id"] == "cfg-1"
        assert st.tune_session("tune-nothing") is None
    finally:
        st.close()


def test_a_tune_session_save_can_be_conditional_on_the_row_as_last_seen(location):
    """Daemons of a fleet move a session on only from the row they last saw: a save that
    expects another ``updated`` changes nothing and says so."""
    from opptune.daemon.objectives import Goal
    from opptune.daemon.tuning import Session

    s = Session("tune-a", "a1", "w", "small", Goal(), [], 1, 0, None, None, 1.0,
                updated=2.0, job_id="job-1")
    st = open_store(location)
    try:
        assert st.save_tune_session(s.record()) is True
        s.job_id, s.updated = "job-2", 3.0  # another daemon moved it on from 2.0
        assert st.save_tune_session(s.record(), expect=2.0) is True
        s.job_id, s.updated = "job-3", 4.0  # this one still expects 2.0: refused
        assert st.save_tune_session(s.record(), expect=2.0) is False
        assert st.tune_session("tune-a")["job_id"] == "job-2"
        assert st.save_tune_session(s.record(), expect=3.0) is True
        assert st.tune_session("tune-a")["job_id"] == "job-3"
        assert st.save_tune_session({**s.record(), "tune_id": "tune-none"}, expect=1.0) is False
        assert st.tune_session("tune-none") is None
    finally:
        st.close()


def test_the_doctor_report_and_remeasure_items_survive_a_reopen(location):
    """Schema 9: an agent's last doctor report (cleared by a hello without one) and the
    re-measure items (replaced by id, deleted, an unreadable one left out) are read back by
    the next store opened on the same database."""
    report = {"summary": "1 warning (governor ondemand)", "warnings": 1, "checks": []}
    st = open_store(location)
    try:
        st.save_platform("p", {}, 1.0)
        st.save_agent("a1", "p", ["w"], "t", 5.0, report)
        st.save_agent("a2", "p", ["w"], "t", 5.0)
        st.save_remeasure("r1", "a1", "waiting", {"attempt": 1, "due": 9.5}, 6.0)
        st.save_remeasure("r2", "a1", "sent", {"attempt": 1}, 7.0)
        st.save_remeasure("r1", "a1", "waiting", {"attempt": 2, "due": 19.5}, 8.0)
        st.save_remeasure("gone", "a2", "never_clean", {"points": []}, 8.5)
        st.delete_remeasure("gone")
        st.db.execute("INSERT INTO remeasure VALUES ('bad', 'a1', 'sent', '{oops', 9.0)")
    finally:
        st.close()
    st = open_store(location)
    try:
        agents = {a["id"]: (a["doctor"], a["doctor_at"]) for a in st.agents()}
        assert agents == {"a1": (report, 5.0), "a2": (None, None)}
        assert [(r["id"], r["state"], r["body"]) for r in st.remeasure_items()] == [
            ("r2", "sent", {"attempt": 1}), ("r1", "waiting", {"attempt": 2, "due": 19.5})]
        st.save_agent("a1", "p", ["w"], "t", 10.0)  # an agent older than the report
        assert [a["doctor"] for a in st.agents()] == [None, None]
    finally:
        st.close()


# what a daemon before schema 11 (commit 8371ffa) wrote of the agents it held: at the hello,
# and each second for those it heard; neither names the daemon
OLD_SAVE_AGENT = ("INSERT INTO agents (id, platform, workloads, agent_version, first_seen, "
                  "last_seen, doctor, doctor_at) VALUES (?, ?, '[]', ?, ?, ?, NULL, NULL) "
                  "ON CONFLICT(id) DO UPDATE SET agent_version=excluded.agent_version, "
                  "last_seen=excluded.last_seen")
OLD_TOUCH = "UPDATE agents SET last_seen={greatest}(last_seen, ?) WHERE id=?"


def old_daemon_heard(st, agent: str, when: float, version: str = "0.1.0") -> None:
    """``agent`` said hello to a daemon of 8371ffa sharing ``st`` and was heard at ``when``."""
    with st._tx() as db:
        db.execute(OLD_SAVE_AGENT, (agent, "p", version, when, when))
        db.execute(OLD_TOUCH.format(greatest=st._greatest), (when, agent))


def test_agents_heard_through_a_daemon_that_records_no_row_are_found(st):
    """A daemon older than schema 11 still running on the migrated store raises its agents'
    last_seen and records neither itself nor them: those agents, heard recently and held by
    no daemon that answers, are told apart from the gone ones."""
    st.save_platform("p", {}, 1.0)
    st.save_daemon("A", "tcp://a:5555", 10.0)
    st.save_daemon("B", "tcp://b:5555", 10.0)
    old_daemon_heard(st, "old1", 10.0)  # never held by a new daemon
    st.save_agent("moved", "p", ["w"], "t", 5.0, daemon="A")  # A held it, then the old one
    old_daemon_heard(st, "moved", 10.0)
    st.save_agent("atB", "p", ["w"], "t", 10.0, daemon="B")  # online through B: not these
    old_daemon_heard(st, "gone", 2.0)  # heard long ago
    st.save_agent("deadC", "p", ["w"], "t", 4.0, daemon="C")
    st.save_daemon("C", "tcp://c:5555", 4.0)  # C silent since 4; the old daemon hears it at 10
    old_daemon_heard(st, "deadC", 10.0)

    def heard(instance, since):
        return {a["id"]: (a["last_seen"], a["agent_version"])
                for a in st.agents_heard_unrecorded(instance, since)}
    assert heard("A", 8.0) == {"old1": (10.0, "0.1.0"), "moved": (10.0, "0.1.0"),
                               "deadC": (10.0, "0.1.0")}
    # B's own atB is alive there; "moved" reads as A's, which still answers (A says "?")
    assert set(heard("B", 8.0)) == {"old1", "deadC", "atB"}
    assert heard("A", 10.5) == {}


def test_which_daemon_holds_an_agent_is_recorded(st):
    """Schema 11: the daemon an agent's hello and messages came to holds it; another daemon
    sharing the store reads it back with that daemon's endpoint while both are recent, and not
    once that daemon stopped or fell silent."""
    st.save_platform("p", {}, 1.0)
    st.save_daemon("A", "tcp://a:5555", 10.0)
    st.save_daemon("B", "tcp://b:5555", 10.0)
    st.save_agent("a1", "p", ["w"], "t", 10.0, daemon="A")
    st.save_agent("a2", "p", ["w"], "t", 10.0, daemon="B")
    st.save_agent("a3", "p", ["w"], "t", 10.0)  # stored by a daemon before schema 11
    assert {a["id"]: a["daemon"] for a in st.agents()} == {"a1": "A", "a2": "B", "a3": None}

    def elsewhere(instance, since):
        return {a["id"]: (a["endpoint"], a["last_seen"], a["workloads"])
                for a in st.agents_elsewhere(instance, since)}
    assert elsewhere("B", 5.0) == {"a1": ("tcp://a:5555", 10.0, ["w"])}
    assert elsewhere("A", 5.0) == {"a2": ("tcp://b:5555", 10.0, ["w"])}
    # B hears a1 later (it failed over): B holds it; A's older news changes nothing
    st.touch_agents({"a1": 12.0}, "B")
    st.touch_agents({"a1": 11.0}, "A")
    st.save_daemon("B", "tcp://b:5555", 12.0)
    assert {a["id"]: (a["daemon"], a["last_seen"]) for a in st.agents()}["a1"] == ("B", 12.0)
    assert elsewhere("A", 11.5) == {"a1": ("tcp://b:5555", 12.0, ["w"])}
    assert elsewhere("B", 5.0) == {}
    # a touch naming no daemon keeps the holder
    st.touch_agents({"a1": 13.0})
    assert {a["id"]: a["daemon"] for a in st.agents()}["a1"] == "B"
    # B silent since 12: not online through it; B stopped: neither
    assert elsewhere("A", 12.5) == {}
    st.drop_daemon("B")
    assert elsewhere("A", 5.0) == {}
    # A killed, a new daemon C at its endpoint: A's agents are online through none
    st.touch_agents({"a2": 14.0}, "A")
    st.save_daemon("A", "tcp://a:5555", 14.0)
    assert elsewhere("B", 12.0) == {"a2": ("tcp://a:5555", 14.0, ["w"])}
    st.save_daemon("C", "tcp://a:5555", 14.5)
    assert elsewhere("B", 12.0) == elsewhere("C", 12.0) == {}


def test_the_fleets_daemons_are_listed_with_their_last_heartbeat(st):
    """Status shows every daemon of the fleet (one killed keeps its row, its heartbeat ageing:
    nothing is deleted behind the operator's back) until a daemon starts at its endpoint."""
    assert st.daemons() == []
    st.save_daemon("B", "tcp://b:5555", 10.0)
    st.save_daemon("A", "tcp://a:5555", 10.0)
    st.save_daemon("A", "tcp://a:5555", 11.0)  # A's next heartbeat
    assert [(d["instance"], d["endpoint"], d["started"], d["last_seen"])
            for d in st.daemons()] == [("A", "tcp://a:5555", 10.0, 11.0),
                                       ("B", "tcp://b:5555", 10.0, 10.0)]
    st.save_daemon("C", "tcp://a:5555", 20.0)  # A was killed; C listens there now
    assert [d["instance"] for d in st.daemons()] == ["C", "B"]
    st.drop_daemon("B")  # B stopped
    assert [d["instance"] for d in st.daemons()] == ["C"]


def test_daemons_silent_past_an_age_are_forgotten(location):
    """A daemon stopped for good at an endpoint never used again kept its row (and its
    'not answering' line in every status) forever: forget_daemons drops the rows whose last
    heartbeat is older than the bound and returns them; the others stay."""
    st = open_store(location)
    try:
        st.save_daemon("A", "tcp://a:5555", 10.0)
        st.save_daemon("B", "tcp://b:5555", 10.0)
        st.save_daemon("B", "tcp://b:5555", 100.0)  # B beats on; A fell silent at 10
        assert st.forget_daemons(10.0) == []  # not older than the bound: kept
        assert [d["instance"] for d in st.daemons()] == ["A", "B"]
        assert st.forget_daemons(50.0) == [{"instance": "A", "endpoint": "tcp://a:5555",
                                            "started": 10.0, "last_seen": 10.0,
                                            "version": None}]
        assert [d["instance"] for d in st.daemons()] == ["B"]
        assert st.forget_daemons(50.0) == []
    finally:
        st.close()


def test_daemons_record_their_version_beside_an_older_daemons_row(location):
    """Each daemon's heartbeat records its version; a daemon of an earlier version still
    running on the migrated store writes its row as it always did (INSERT without column
    names: one more column in ``daemons`` made it fail) and reads back with no version."""
    st = open_store(location)
    try:
        st.save_daemon("new", "tcp://n:5555", 10.0, "0.2.0")
        with st._tx() as db:  # the older daemon's statement (daemon/store/sqlite.py at 6a4cca1)
            db.execute("INSERT INTO daemons VALUES (?, ?, ?, ?) ON CONFLICT(instance) DO "
                       "UPDATE SET endpoint=excluded.endpoint, last_seen=excluded.last_seen",
                       ("old", "tcp://o:5555", 10.0, 10.0))
        assert [(d["instance"], d["version"]) for d in st.daemons()] == [
            ("new", "0.2.0"), ("old", None)]
        st.save_daemon("new", "tcp://n:5555", 11.0, "0.3.0")  # restarted on newer code
        st.save_daemon("later", "tcp://o:5555", 12.0, "0.3.0")  # old was killed: its row goes
        assert [(d["instance"], d["version"]) for d in st.daemons()] == [
            ("new", "0.3.0"), ("later", "0.3.0")]
        st.drop_daemon("new")
        assert st.forget_daemons(20.0)[0]["version"] == "0.3.0"
        assert st.daemons() == []
        with st._tx() as db:  # nothing left of them in the version table either
            assert db.execute("SELECT COUNT(*) FROM daemon_versions").fetchone()[0] == 0
    finally:
        st.close()


def _run(workload, cores, time_s, **kw):
    return RunRecord(platform="p", workload=workload, input="s", cores=cores,
                     cpus=list(range(cores)), threads=cores, rep=0, time_s=time_s, **kw)


def test_report_runs_are_run_points_and_group_runs_in_one_pass(st):
    """The report query reads every group's runs and fit rows in one statement; per group
    they are exactly run_points' and group_runs' (marked, throttled, failed, an off
    verification and runs from before a drift left out of the fit rows as group_runs does)."""
    g1, g2 = Group("p", "w1", "s", ""), Group("p", "w2", "s", "")
    st.save_recommendation({"config_id": "cfg-off", "agent": "a1", **g1.as_dict(),
                            "cores": 2, "cpus": [0, 1], "threads": 2, "state": "off"}, 1.0)
    old = [_run("w1", 1, 3.0), _run("w1", 2, 9.9)]  # before the drift below
    st.insert_results([ResultIn(f"o{i}", "a1", "job-old", i, r, r.to_dict())
                       for i, r in enumerate(old)], 1.0)
    st.save_drift("a1", g1, "off twice", [], None, 2.0)
    new = [_run("w1", 1, 2.0), _run("w1", 2, 1.1), _run("w1", 2, 1.2, marked="busy"),
           _run("w1", 4, 0.9, throttled=True), _run("w2", 1, 5.0),
           _run("w2", 3, 2.0, freq_mhz=1800.0), _run("w2", 2, None, ok=False, error="x")]
    st.insert_results([ResultIn(f"n{i}", "a1", "job-new", i, r, r.to_dict())
                       for i, r in enumerate(new)], 3.0)
    verification = _run("w1", 2, 7.0)
    st.insert_results([ResultIn("v", "a1", "cfg-off", 0, verification,
                                verification.to_dict())], 3.0)
    both = st.report_runs()
    assert list(both) == [g1, g2]
    points = st.run_points()
    for g in (g1, g2):  # in (cores, freq) order; runs of one configuration in any order
        assert [sorted(r[:6] for r in both[g][0]), sorted(both[g][1])] == [
            sorted(points[g]), sorted(st.group_runs(g))]
        assert [r[:2] for r in both[g][0]] == [r[:2] for r in points[g]]
        # each run says why the fit leaves it out, None for exactly the fit's rows
        assert sorted(r[:3] for r in both[g][0] if r[6] is None) == sorted(both[g][1])
    assert both[g1][1] == [(1, None, 2.0), (2, None, 1.1)]  # the rest is left out
    assert sorted((r[0], r[2], r[6]) for r in both[g1][0] if r[6]) == [
        (1, 3.0, "drift"), (2, 1.2, "marked"), (2, 7.0, "off"), (2, 9.9, "drift"),
        (4, 0.9, "throttled")]
    loaded = st.report_runs(accept_load=True)
    assert [sorted(loaded[g][1]) for g in (g1, g2)] == \
        [sorted(st.group_runs(g, accept_load=True)) for g in (g1, g2)]
    assert (2, None, 1.2) in loaded[g1][1]
    assert [r[6] for r in loaded[g1][0] if r[2] == 1.2] == [None]


def test_workload_outcomes_count_stored_and_successful_runs(st):
    """What 'opptune export' calls measured: a workload with a successful run stored, per
    agent; one whose runs all failed has runs and no successful one."""
    rows = [("a1", _run("w1", 1, 2.0)), ("a1", _run("w1", 2, None, ok=False, error="x")),
            ("a1", _run("w2", 1, None, ok=False, error="x")), ("a2", _run("w2", 1, 3.0))]
    st.insert_results([ResultIn(f"m{i}", agent, None, None, r, r.to_dict())
                       for i, (agent, r) in enumerate(rows)], 1.0)
    assert st.workload_outcomes() == [
        {"agent": "a1", "workload": "w1", "runs": 2, "ok": 1},
        {"agent": "a1", "workload": "w2", "runs": 1, "ok": 0},
        {"agent": "a2", "workload": "w2", "runs": 1, "ok": 1}]
    assert st.workload_outcomes("a2") == [{"agent": "a2", "workload": "w2", "runs": 1,
                                           "ok": 1}]
    assert st.workload_outcomes("nobody") == []


def test_status_pages_pick_the_rows_that_need_a_look_and_count_them_all(st):
    """A page of jobs: the unfinished, then the latest updated, in creation order; of fits
    and recommendations: the newest; of run counts: the latest received. Each with how many
    rows there are in all, for one agent or all."""
    for i, (agent, state, updated) in enumerate([
            ("a1", "done", 10.0), ("a1", "running", 2.0), ("a1", "done", 30.0),
            ("a1", "failed", 20.0), ("a2", "queued", 1.0), ("a2", "done", 40.0)]):
        st.save_job(agent, {"job_id": f"job-{i}", "workload": "w", "size": "s", "reps": 1,
                            "warmup": 0, "points": [{"cpus": [0], "threads": 1,
                                                     "freq_khz": None}]}, float(i),
                    state=state)
        st.set_job_state(f"job-{i}", state, now=updated)
    rows, total = st.jobs_page(limit=3)
    assert [j["job_id"] for j in rows] == ["job-1", "job-4", "job-5"] and total == 6
    rows, total = st.jobs_page("a1", limit=2)
    assert [j["job_id"] for j in rows] == ["job-1", "job-2"] and total == 4
    assert st.jobs_page(job_ids=["job-3", "nope"])[1] == 1
    assert st.jobs_page(job_ids=[]) == ([], 0)
    assert st.jobs_page() == (st.jobs(), 6)

    groups = [Group("p", f"w{i}", "s", "") for i in range(4)] + [Group("q", "w0", "s", "")]
    for i, g in enumerate(groups):
        st.save_fit(g, "amdahl", {"s": i}, {}, [], float(i))
    st.save_fit(groups[0], "usl", {"c": 1}, {}, [], 9.0)  # refitted last: the newest
    rows, total = st.fits_page(limit=2)
    assert [(f["workload"], f["model"]) for f in rows] == [("w0", "usl"), ("w0", "amdahl")]
    assert [f["platform"] for f in rows] == ["p", "q"] and total == 5
    rows, total = st.fits_page("p", limit=2)
    assert [f["workload"] for f in rows] == ["w0", "w3"] and total == 4
    rows, total = st.fits_page(groups=[groups[1], groups[4]])
    assert [(f["platform"], f["workload"]) for f in rows] == [("p", "w1"), ("q", "w0")]
    assert st.fits_page() == (st.fits(), 5)

    for i, agent in enumerate(["a1", "a2", "a1", "a1"]):
        st.save_recommendation({"config_id": f"cfg-{i}", "agent": agent,
                                **groups[i].as_dict(), "cores": 1, "cpus": [0],
                                "threads": 1}, float(i))
    rows, total = st.recommendations_page(limit=2)
    assert [r["config_id"] for r in rows] == ["cfg-2", "cfg-3"] and total == 4
    rows, total = st.recommendations_page("a1", limit=5)
    assert [r["config_id"] for r in rows] == ["cfg-0", "cfg-2", "cfg-3"] and total == 3
    assert st.recommendations_page() == (st.recommendations(), 4)

    for i, (agent, workload) in enumerate([("a1", "w0"), ("a2", "w1"), ("a1", "w2")]):
        r = _run(workload, 1, 1.0)
        st.insert_results([ResultIn(f"m{i}", agent, None, None, r, r.to_dict())],
                          float(i))
    rows, total = st.run_counts_page(limit=2)
    assert [(r["agent"], r["workload"]) for r in rows] == [("a1", "w2"), ("a2", "w1")]
    assert total == 3
    rows, total = st.run_counts_page("a1")
    assert [r["workload"] for r in rows] == ["w0", "w2"] and total == 2
    assert st.run_counts_page() == (st.run_counts(), 3)
    assert st.run_counts_page("nobody", limit=1) == ([], 0)


def test_fits_and_profiles_take_the_runs_since_their_groups_last_drift(st):
    """One rule on both back ends: a group's runs received before its last drift event are
    out of its fit (group_runs, point_marks) and of MPET's profiles (profile_runs); another
    group's stay."""
    g, other = Group("p", "w", "s", ""), Group("p", "v", "s", "")
    st.save_job("a1", {"job_id": "job-1", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 0.5)

    def put(msg_id, seq, workload, time_s, now):
        rec = RunRecord(platform="p", workload=workload, input="s", cores=1, cpus=[0],
                        threads=1, rep=0, time_s=time_s)
        st.insert_results([ResultIn(msg_id, "a1", "job-1", seq, rec, rec.to_dict())], now)

    put("m1", 0, "w", 2.0, 1.0)
    put("m2", 1, "v", 3.0, 1.0)
    st.save_drift("a1", g, "off twice", [], None, 5.0)
    st.save_drift("a1", g, "off twice again", [], None, 7.0)  # the last one counts
    put("m3", 2, "w", 4.0, 6.0)
    put("m4", 3, "w", 5.0, 7.0)
    assert [t for _, _, t in st.group_runs(g)] == [5.0]
    assert [t for _, _, t in st.group_runs(other)] == [3.0]
    assert [(m["cores"], m["clean"]) for m in st.point_marks(g)] == [(1, 1)]
    assert sorted((w, t) for _, w, _, _, _, t, *_ in st.profile_runs(None)) == \
        [("v", 3.0), ("w", 5.0)]
    assert sorted(w for _, w, *_ in st.profile_runs(False)) == ["v", "w"]
    assert list(st.profile_runs(True)) == []


def test_a_drift_of_one_agent_ends_its_runs_only(st):
    """On both back ends: a drift saved agent_only (a changed program, drift.Drift.redefined)
    ends the runs its agent sent before it in the fit rows, report and profiles; another
    agent's runs of the group stay; drift_since counts it for its agent only. Before schema
    17 it ended every agent's runs."""
    g = Group("p", "w", "s", "")
    for agent in ("a1", "a2"):
        st.save_job(agent, {"job_id": f"job-{agent}", "workload": "w", "size": "s", "reps": 1,
                            "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 0.5)
    for i, (agent, time_s, now) in enumerate([("a1", 2.0, 1.0), ("a2", 3.0, 1.0),
                                              ("a1", 4.0, 6.0)]):
        rec = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1,
                        rep=0, time_s=time_s)
        st.insert_results([ResultIn(f"m{i}", agent, f"job-{agent}", i, rec, rec.to_dict())],
                          now)
    st.save_drift("a1", g, "program changed", [], None, 5.0, agent_only=True)
    assert sorted(t for _, _, t in st.group_runs(g)) == [3.0, 4.0]
    assert sorted(t for *_, t in st.report_runs()[g][1]) == [3.0, 4.0]
    assert sorted(t for _, _, _, _, _, t, *_ in st.profile_runs(None)) == [3.0, 4.0]
    assert sum(m["clean"] for m in st.point_marks(g)) == 2
    assert st.drift_since(g) is None and st.drift_since(g, "a1") == 5.0
    assert st.drift_since(g, "a2") is None
    assert [e["agent_only"] for e in st.drift_events()] == [True]


def test_swept_clocks_are_those_of_jobs_not_of_verifications(st):
    """The clocks a drift measures again, on both back ends: the group's runs of jobs (marked
    and from before a drift too), not a recommendation's verification runs nor another
    group's or a failed run's."""
    g = Group("p", "w", "s", "")
    st.save_recommendation({"config_id": "c1", "agent": "a1", **g.as_dict(), "cores": 1,
                            "cpus": [0], "threads": 1, "freq_khz": 1_200_000}, now=0.5)
    runs = [("job-1", "w", 600.0, None, True), ("job-1", "w", 1500.0, "busy", True),
            ("c1", "w", 1200.0, None, True), ("job-1", "v", 900.0, None, True),
            ("job-1", "w", 800.0, None, False), ("job-1", "w", None, None, True)]
    for i, (job, workload, mhz, marked, ok) in enumerate(runs):
        rec = RunRecord(platform="p", workload=workload, input="s", cores=1, cpus=[0],
                        threads=1, rep=0, time_s=1.0 if ok else None, freq_mhz=mhz,
                        marked=marked, ok=ok, error=None if ok else "crashed")
        st.insert_results([ResultIn(f"m{i}", "a1", job, i, rec, rec.to_dict())], now=1.0)
    st.save_drift("a1", g, "off twice", [], None, 2.0)
    assert st.swept_clocks_khz(g) == [600_000, 1_500_000]
    assert st.swept_clocks_khz(Group("p", "x", "s", "")) == []


def test_a_clusters_drift_ends_the_whole_board_groups_old_runs(st):
    """A drift of cluster1's group: the whole-board group (no variant) of that workload and
    size ran on cluster1 too, so its runs from before are out of its fit (group_runs,
    point_marks, report_runs) and of MPET's profiles, on both back ends; cluster0's group
    keeps its runs (it never ran on cluster1)."""
    st.save_job("a1", {"job_id": "job-1", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 0.5)
    board, c0, c1 = (Group("p", "w", "s", v) for v in ("", "cluster0", "cluster1"))

    def put(seq, group, time_s, now):
        rec = RunRecord(platform="p", workload="w", input="s", variant=group.variant,
                        cores=1, cpus=[0], threads=1, rep=0, time_s=time_s)
        st.insert_results([ResultIn(f"m{seq}", "a1", "job-1", seq, rec, rec.to_dict())], now)

    put(0, board, 2.0, 1.0)
    put(1, c0, 3.0, 1.0)
    put(2, c1, 4.0, 1.0)
    st.save_drift("a1", c1, "off twice", [], None, 5.0)
    put(3, board, 2.5, 6.0)
    assert st.drift_since(board) == 5.0 and st.drift_since(c0) is None
    assert [t for _, _, t in st.group_runs(board)] == [2.5]
    assert [t for _, _, t in st.group_runs(c0)] == [3.0]
    assert st.group_runs(c1) == []
    assert [m["clean"] for m in st.point_marks(board)] == [1]
    assert {g.variant: [t for _, _, t in fit] for g, (_, fit) in st.report_runs().items()} \
        == {"": [2.5], "cluster0": [3.0], "cluster1": []}
    # MPET's profiles: the whole board's since the drift, and cluster0's (its own platform)
    assert sorted((r[8], r[5]) for r in st.profile_runs(None)) == [("", 2.5),
                                                                   ("cluster0", 3.0)]


def test_a_whole_board_drift_ends_its_cluster_groups_old_runs(st):
    """The reverse: a drift of the whole-board group (no variant). Its cluster<i> groups of
    that workload and size measured the same cores before it: their runs from before are out
    of their fits (group_runs, point_marks, report_runs) on both back ends, those after it
    count. Before, only the whole-board group lost them. Another size's clusters keep
    theirs."""
    st.save_job("a1", {"job_id": "job-1", "workload": "w", "size": "s", "reps": 1,
                       "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 0.5)
    board, c0, c1, other = (Group("p", "w", size, v) for size, v in (
        ("s", ""), ("s", "cluster0"), ("s", "cluster1"), ("l", "cluster0")))

    def put(seq, group, time_s, now):
        rec = RunRecord(platform="p", workload="w", input=group.input, variant=group.variant,
                        cores=1, cpus=[0], threads=1, rep=0, time_s=time_s)
        st.insert_results([ResultIn(f"m{seq}", "a1", "job-1", seq, rec, rec.to_dict())], now)

    for seq, (group, time_s) in enumerate([(board, 2.0), (c0, 3.0), (c1, 4.0), (other, 5.0)]):
        put(seq, group, time_s, 1.0)
    st.save_drift("a1", board, "off twice", [], None, 5.0)
    put(4, c1, 4.5, 6.0)
    assert [st.drift_since(g) for g in (board, c0, c1, other)] == [5.0, 5.0, 5.0, None]
    assert st.group_runs(board) == [] and st.group_runs(c0) == []
    assert [t for _, _, t in st.group_runs(c1)] == [4.5]
    assert [t for _, _, t in st.group_runs(other)] == [5.0]
    assert st.point_marks(c0) == [] and [m["clean"] for m in st.point_marks(c1)] == [1]
    assert {(g.input, g.variant): [t for _, _, t in fit]
            for g, (_, fit) in st.report_runs().items()} == \
        {("s", ""): [], ("s", "cluster0"): [], ("s", "cluster1"): [4.5], ("l", "cluster0"): [5.0]}
    # every run is still drawn: only the fit leaves them out
    assert {g.variant + g.input: len(points) for g, (points, _) in st.report_runs().items()} \
        == {"s": 1, "cluster0s": 1, "cluster1s": 2, "cluster0l": 1}


def test_a_replaced_recommendation_keeps_its_verdict(st):
    """set_replaced notes the configuration that took a recommendation's place on its board,
    on both back ends; its state, verdict and time stay, a save of the row again keeps the
    note, and (None, None) clears it (applied again)."""
    rec = {"config_id": "cfg-1", "agent": "a1", "platform": "p", "workload": "w", "input": "s",
           "variant": "", "cores": 2, "cpus": [0, 1], "threads": 2, "keep": True}
    st.save_recommendation(rec, 1.0)
    st.update_recommendation("cfg-1", "verified", 2.0, verified_time_s=1.5, error="+1 %")
    assert st.recommendation("cfg-1")["replaced_by"] is None
    assert st.set_replaced("cfg-1", "cfg-2", 3.0) and not st.set_replaced("cfg-9", "x", 3.0)
    got = st.recommendation("cfg-1")
    assert (got["state"], got["verified_time_s"], got["error"], got["updated"]) == \
        ("verified", 1.5, "+1 %", 2.0)
    assert (got["replaced_by"], got["replaced_at"]) == ("cfg-2", 3.0)
    st.save_recommendation({**rec, "state": "verified"}, 4.0)
    assert st.recommendation("cfg-1")["replaced_by"] == "cfg-2"
    st.set_replaced("cfg-1", None, None)
    assert st.recommendations()[0]["replaced_by"] is None


def test_a_tune_session_that_cannot_be_resumed_is_closed_only_as_last_seen(st):
    """A damaged session is closed as failed, its unreadable body kept as it was; of daemons
    sharing the store, one that read the row before another saved it changes nothing."""
    st.db.execute("INSERT INTO tune_sessions VALUES ('tune-x', 'q1', 'measuring', "
                  "'{not json', 1.0, 2.0)")
    (r,) = st.open_tune_sessions()  # the columns stand in for the body
    assert r == {"tune_id": "tune-x", "agent": "q1", "state": "measuring", "started": 1.0,
                 "updated": 2.0, "unreadable": r["unreadable"]}
    assert r["unreadable"].startswith("its stored body is not JSON (")
    assert st.fail_tune_session("tune-x", 1.0, "why", 3.0) is False
    assert st.fail_tune_session("tune-none", 2.0, "why", 3.0) is False
    assert [r["tune_id"] for r in st.open_tune_sessions()] == ["tune-x"]
    assert st.fail_tune_session("tune-x", 2.0, "why", 3.0) is True
    assert st.open_tune_sessions() == []
    assert [tuple(x) for x in st.db.execute("SELECT state, body, updated FROM tune_sessions"
                                            ).fetchall()] == [("failed", "{not json", 3.0)]
    # a readable body takes the state and the reason; the rest is kept
    st.db.execute("INSERT INTO tune_sessions VALUES ('tune-y', 'q1', 'measuring', "
                  "'{\"tune_id\": \"tune-y\", \"steps\": [1], \"updated\": 4.0}', 1.0, 4.0)")
    (r,) = st.open_tune_sessions()
    assert r == {"tune_id": "tune-y", "steps": [1], "updated": 4.0, "agent": "q1",
                 "state": "measuring", "started": 1.0}
    assert st.fail_tune_session("tune-y", 4.0, "why", 5.0) is True
    assert st.tune_session("tune-y") == {"tune_id": "tune-y", "steps": [1], "updated": 5.0,
                                         "state": "failed", "reason": "why"}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_what_stands_on_a_board_is_kept_for_the_next_daemon(tmp_path, request, backend):
    """Schema 19: the last hello's standings, replaced by each one after it; None before."""
    url = (str(tmp_path / "s.db") if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    st = open_store(url)
    try:
        assert st.standings_of("a1") is None
        first = [{"config_id": "cfg-1", "cpus": [0, 1], "freq_khz": 1_500_000,
                  "target": {"kind": "pid", "pid": 42, "in_unit": "web.service"}}]
        st.save_standings("a1", first, [], 1_795_000_000.5)
        st.save_standings("a1", [], ["cfg-1: process 42 is gone"], 1_795_000_100.25)
        st.save_standings("a2", first, [], 7.0)
    finally:
        st.close()
    st = open_store(url)
    try:
        assert st.standings_of("a1") == {"standings": [], "dropped": ["cfg-1: process 42 is "
                                                                      "gone"],
                                         "at": 1_795_000_100.25}
        assert st.standings_of("a2") == {"standings": first, "dropped": [], "at": 7.0}
    finally:
        st.close()


def test_the_clashes_a_daemon_refuses_are_kept_for_the_holders_daemon(st):
    """Schema 22: a daemon's refusals of another board for an id another daemon holds are
    kept (each save replaces its own), read by the other daemons while both the refusal and
    its daemon's heartbeat are recent, and gone with that daemon."""
    st.save_daemon("A", "tcp://a:5555", 10.0)
    st.save_daemon("B", "tcp://b:5555", 10.0)
    claim = {"board": "pi", "platform": "p", "instance": "i2", "machine": "m2", "boot": None}
    st.save_clashes("B", [{"agent": "vm", "claim": claim, "since": 7.0, "last_seen": 9.5},
                          {"agent": "old", "claim": claim, "since": 1.0, "last_seen": 2.0}])

    def seen(instance, since):
        return [(c["agent"], c["claim"], c["since"], c["last_seen"], c["endpoint"])
                for c in st.clashes_elsewhere(instance, since)]
    assert seen("A", 5.0) == [("vm", claim, 7.0, 9.5, "tcp://b:5555")]
    assert seen("B", 5.0) == []  # its own
    st.save_clashes("B", [{"agent": "vm", "claim": claim, "since": 7.0, "last_seen": 11.0}])
    assert seen("A", 5.0) == [("vm", claim, 7.0, 11.0, "tcp://b:5555")]
    assert seen("A", 10.5) == []  # B's heartbeat (10.0) is older than that
    st.save_clashes("B", [])
    assert seen("A", 5.0) == []
    st.save_clashes("B", [{"agent": "vm", "claim": claim, "since": 7.0, "last_seen": 9.5}])
    st.drop_daemon("B")
    assert seen("A", 5.0) == []
