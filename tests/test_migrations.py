"""Migrations from every earlier schema version: a database built at version v (migrations up to
v, rows in that version's shape) opens with the current store with every row intact and exactly
the schema a new database has; a real daemon started on an old database serves it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import msgpack
import pytest

from opptune.daemon.store import Group, ResultIn, open_store
from opptune.daemon.store.schema import MIGRATIONS, SCHEMA_VERSION
from procs import Cluster
from test_store import full_record

OLD_VERSIONS = range(1, SCHEMA_VERSION)
REC = full_record(2)

# Representative values for every column any version has; a migration that adds a NOT NULL
# column without a default, or a table, needs an entry here (the test says which).
ROWS: dict[str, list[dict]] = {
    "platforms": [{"id": "p1", "description": json.dumps({"model_name": "Cortex-A15"}),
                   "first_seen": 1.0, "last_seen": 2.0}],
    "agents": [{"id": "a1", "platform": "p1", "workloads": json.dumps(["w"]),
                "agent_version": "0.9", "first_seen": 1.0, "last_seen": 2.0,
                "doctor": json.dumps({"summary": "ok: nothing to fix"}), "doctor_at": 2.0,
                "daemon": "d1", "machine": "3f2a9c", "boot": "b0c1d2"}],
    "daemons": [{"instance": "d1", "endpoint": "tcp://db1:5555", "started": 1.0,
                 "last_seen": 2.0}],
    "daemon_versions": [{"instance": "d1", "version": "0.2.0"}],
    "agent_standings": [{"agent": "a1", "standings": json.dumps([{"config_id": "c1",
                                                                  "cpus": [0, 1]}]),
                         "dropped": "[]", "said_at": 3.0}],
    "agent_clashes": [{"agent": "a1", "instance": "d1", "claim": json.dumps(
        {"board": "pi", "platform": "p1", "instance": "i2", "machine": None, "boot": None}),
                       "since": 2.0, "last_seen": 3.0}],
    "workloads": [{"name": "w", "description": json.dumps({"kind": "bench"}), "first_seen": 1.0}],
    "jobs": [{"job_id": f"job-{i}", "agent": "a1", "workload": "w", "size": "small",
              "points": json.dumps([[2, 1800000]]), "n_points": 1, "reps": 2, "warmup": 0,
              "expected": 2, "created": 5.0 + i, "state": state, "reason": reason,
              "updated": 6.0 + i, "stopped": None, "held": None} for i, state, reason in (
                  (1, "complete", None), (2, "sent", None),
                  # stopped by the agent for its timeouts before the stop had a column
                  (3, "done", "timed out after 5 s; the job stopped after 2 points in a row "
                              "timed out (points 0, 1 of 4; ...): 2 of 4 points not run"))],
    "runs": [{"msg_id": f"m{i}", "agent": "a1", "job_id": "job-1", "seq": i, "platform": "p1",
              "workload": "w", "input": "s", "variant": "", "cores": 2, "cpus": "[0,1]",
              "threads": 2, "freq_mhz": 1800.0, "rep": i, "time_s": 0.5, "wall_s": 0.5,
              "user_s": 0.9, "sys_s": 0.01, "energy_j": 3.25, "ok": 1, "virtual": 0,
              "received": 3.0 + i, "record": json.dumps(REC.to_dict()), "record_msgpack": None,
              "throttled": 0, "marked": "interference: 40 % of cpu 1 used by pid 4711 (sh)"
              if i else None} for i in (0, 1)],
    "fits": [{"platform": "p1", "workload": "w", "input": "s", "variant": "", "model": "amdahl",
              "params": json.dumps({"t1": 1.0, "p": 0.9}), "quality": json.dumps({"r2": 0.99}),
              "runners_up": "[]", "created": 7.0}],
    "recommendations": [{"id": "c1", "agent": "a1", "platform": "p1", "workload": "w",
                         "input": "s", "variant": "", "cores": 2, "cpus": "[0,1]", "threads": 2,
                         "freq_khz": 1800000, "predicted_time_s": 0.5,
                         "predicted_lower_s": 0.45, "predicted_upper_s": 0.55, "model": "amdahl",
                         "state": "verified", "verified_time_s": 0.51, "error": None,
                         "created": 8.0, "updated": 9.0, "keep": None, "replaced_by": None,
                         "replaced_at": None, "goal": None, "verified_energy_j": None}],
    "drift": [{"agent": "a1", "platform": "p1", "workload": "w", "input": "s", "variant": "",
               "reason": "3 verifications outside the interval", "job_ids": "[]",
               "error": "off by 20 %", "since": 2.5, "agent_only": 0}],  # before the runs
    "fit_claims": [{"platform": "p1", "workload": "w", "input": "s", "variant": "",
                    "owner": None, "claimed": 7.5}],
    "tune_sessions": [{"tune_id": f"tune-{state}", "agent": "a1", "state": state,
                       "body": json.dumps({"tune_id": f"tune-{state}", "state": state}),
                       "started": 10.0, "updated": 11.0} for state in ("measuring", "done")],
    "remeasure": [{"id": "rm-1", "agent": "a1", "state": "waiting",
                   "body": json.dumps({"points": [[2, 1800000]], "retry": 1}),
                   "updated": 12.0}],
}
# a copy of a run set aside by version 6 (same columns as runs)
ROWS["runs_resent"] = [{**ROWS["runs"][0], "msg_id": "m0-again", "received": 2.5}]
# What a migration is meant to change in a row: (table, column) -> {old value: new value}
CHANGED = {("jobs", "state"): {"complete": "done"}}


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def tables(db: sqlite3.Connection) -> list[str]:
    return sorted(r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
        "AND name != 'schema_version'"))


def build(path: Path, version: int) -> dict[str, list[dict]]:
    """A database at ``version`` holding ROWS in that version's shape; returns what it holds."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied REAL NOT NULL)")
    for v in range(1, version + 1):
        for stmt in MIGRATIONS[v]:
            db.execute(stmt)
        db.execute("INSERT INTO schema_version VALUES (?, 0)", (v,))
    held = {}
    for table in tables(db):
        assert table in ROWS, f"add representative rows for table {table!r} to ROWS"
        # autoincrement keys are left to the database
        cols = [c for c in columns(db, table) if not (c == "id" and table in ("fits", "drift"))]
        rows = []
        for i, row in enumerate(ROWS[table]):
            row = dict(row)
            if table == "runs" and "record_msgpack" in cols and i == 1:
                # from version 2 on a run is stored as msgpack; the earlier JSON rows stay
                row.update(record=None, record_msgpack=msgpack.packb(REC.to_dict()))
            if table == "jobs" and version >= 3 and row["state"] == "complete":
                row["state"] = "done"  # version 3 renamed the state
            missing = [c for c in cols if c not in row]
            assert not missing, f"add values for {table}.{missing} to ROWS"
            values = {c: row[c] for c in cols}
            db.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES "
                       f"({', '.join('?' * len(values))})", tuple(values.values()))
            rows.append(values)
        held[table] = rows
    db.commit()
    db.close()
    return held


def schema_of(path: Path) -> dict:
    """Tables (columns with type, NOT NULL, default, key) and indexes: what a schema is."""
    db = sqlite3.connect(path)
    try:
        out = {t: [r[1:] for r in db.execute(f"PRAGMA table_info({t})")] for t in tables(db)}
        out["indexes"] = sorted(db.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"))
        return out
    finally:
        db.close()


@pytest.fixture(scope="module")
def current_schema(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("fresh") / "fresh.db"
    open_store(str(path)).close()
    return schema_of(path)


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_every_row_survives_and_the_schema_is_current(tmp_path, version, current_schema):
    path = tmp_path / f"v{version}.db"
    held = build(path, version)
    st = open_store(str(path))
    try:
        assert st.schema_version() == SCHEMA_VERSION
        # through the store's own API
        assert [j["job_id"] for j in st.jobs()] == ["job-1", "job-2", "job-3"]
        assert {j["job_id"]: j["state"] for j in st.jobs()} == {"job-1": "done", "job-2": "sent",
                                                               "job-3": "done"}
        # schema 14: a job stopped for its timeouts reads as stopped from its reason (kept
        # from version 3 on), with the count its text gives; no other job does
        stop = {"after_timeouts": 2} if version >= 3 else None
        assert {j["job_id"]: j["stopped"] for j in st.jobs()} == {
            "job-1": None, "job-2": None, "job-3": stop}
        assert [j["stopped"] for j in st.jobs_for("a1", "w")] == [None, None, stop]
        assert [r for _, r in st.run_records("job-1")] == [REC, REC]
        marked = version >= 8  # from version 8 on the second run is marked: out of fits
        assert st.group_runs(Group("p1", "w", "s", "")) == [(2, 1800.0, 0.5)] * (1 if marked
                                                                                  else 2)
        stored9 = version >= 9  # the doctor report and re-measures kept from version 9 on
        assert [i["id"] for i in st.remeasure_items()] == (["rm-1"] if stored9 else [])
        assert [(a["id"], a["doctor"]) for a in st.agents()] == [
            ("a1", {"summary": "ok: nothing to fix"} if stored9 else None)]
        # schema 11: no daemon holds an agent stored before (the first to hear it will)
        assert [a["daemon"] for a in st.agents()] == (["d1"] if version >= 11 else [None])
        assert [f["model"] for f in st.fits()] == ["amdahl"]
        # schema 12: a recommendation stored before stays in force as it did
        assert [(r["config_id"], r["keep"]) for r in st.recommendations()] == [("c1", None)]
        # schema 13: nothing stored before reads as replaced
        assert [(r["replaced_by"], r["replaced_at"]) for r in st.recommendations()] == \
            [(None, None)]
        # schema 16: one stored before was pushed for no goal but time, no energy measured
        assert [(r["goal"], r["verified_energy_j"]) for r in st.recommendations()] == \
            [(None, None)]
        # a new result lands beside the old ones
        st.insert_results([ResultIn("m9", "a1", "job-1", 9, REC, REC.to_dict())], now=20.0)
        assert st.job_received("job-1") == 3
    finally:
        st.close()
    assert schema_of(path) == current_schema
    db = sqlite3.connect(path)
    try:
        for table, rows in held.items():
            for row in rows:
                key, value = next(iter(row.items()))
                got = db.execute(f"SELECT {', '.join(row)} FROM {table} WHERE {key} = ?",
                                 (value,)).fetchall()
                assert len(got) == 1, (table, row)
                want = tuple(CHANGED.get((table, c), {}).get(v, v) for c, v in row.items())
                assert got[0] == want, (table, row)
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 3
    finally:
        db.close()


@pytest.mark.integration
@pytest.mark.parametrize("version", [1, SCHEMA_VERSION - 1])
def test_a_daemon_started_on_an_old_database_serves_it(tmp_path, version):
    c = Cluster(tmp_path, auto_sweep=False)
    build(c.db, version)
    c.start_daemon()
    try:
        st = c.wait_for(lambda s: bool(s["jobs"]), timeout=30, what="the daemon's status")
        assert {j["job_id"]: j["state"] for j in st["jobs"]} == {"job-1": "done",
                                                               "job-2": "sent",
                                                               "job-3": "done"}
        # the stop of a row stored before its column, in the status the daemon sends
        assert [j["stopped"] for j in st["jobs"] if j["job_id"] == "job-3"] == [
            {"after_timeouts": 2} if version >= 3 else None]
        assert st["workloads"] == ["w"]
        assert [(r["agent"], r["count"]) for r in st["runs"]] == [("a1", 2)]
        assert [f["model"] for f in st["fits"]] == ["amdahl"]
        assert [r["config_id"] for r in st["recommendations"]] == ["c1"]
    finally:
        codes = c.stop()
    assert codes == {"daemon": 0}, c.logs()
    assert c.rows("SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]


def test_runs_resent_under_a_new_id_move_aside_and_the_first_stays(tmp_path):
    """Version 6: copies of a job's sequence number stored under other message ids (before
    the unique index) move to runs_resent, the first received stays; a new copy is skipped."""
    path = tmp_path / "v5.db"
    build(path, 5)
    db = sqlite3.connect(path)
    cols = columns(db, "runs")
    first = dict(zip(cols, db.execute("SELECT * FROM runs WHERE msg_id = 'm0'").fetchone()))
    for mid, received in (("m0-again", 9.0), ("m0-again-2", 10.0)):
        row = dict(first)
        row.update(msg_id=mid, received=received, time_s=0.7)
        db.execute(f"INSERT INTO runs VALUES ({', '.join('?' * len(cols))})",
                   tuple(row[c] for c in cols))
    db.commit()
    db.close()
    st = open_store(str(path))
    try:
        assert st.group_runs(Group("p1", "w", "s", "")) == [(2, 1800.0, 0.5)] * 2
        st.insert_results([ResultIn("m1-again", "a1", "job-1", 1, REC, REC.to_dict())], now=20.0)
        assert st.job_received("job-1") == 2
    finally:
        st.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT msg_id FROM runs ORDER BY msg_id").fetchall() == [("m0",),
                                                                                   ("m1",)]
        assert db.execute("SELECT msg_id, time_s FROM runs_resent ORDER BY msg_id").fetchall() \
            == [("m0-again", 0.7), ("m0-again-2", 0.7)]
    finally:
        db.close()
