"""Idempotency and store faults through the daemon's API, on both back ends: a resent result is
acked again and stored once; a result is acked only once stored (a lost database connection
acks nothing, and the resend after it is stored once)."""

from __future__ import annotations

import time

import pytest

from opptune.daemon.service import Daemon
from opptune.shared import protocol as P
from opptune.shared.config import DaemonConfig, SweepDefaults
from procs import db_rows
from test_daemon_service import Agent as _Agent, record


class Agent(_Agent):
    def expect_any(self, types, ref, timeout_s=10.0):
        """The next message of one of ``types`` about message ``ref`` (an ack of it, or an
        error naming it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                raise AssertionError(f"no {types} message within {timeout_s} s")
            msg = P.decode(self.sock.recv())
            if msg["type"] in types and ref in (msg["body"].get("ids") or
                                                [msg["body"].get("ref")]):
                return msg


@pytest.fixture(params=["sqlite", "postgresql"])
def daemon(request, tmp_path):
    db = (str(tmp_path / "d.db") if request.param == "sqlite"
          else request.getfixturevalue("pg_url"))
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=db, auto_sweep=True,
                            agent_timeout_s=30, sweep=SweepDefaults(size="small", reps=2,
                                                                    warmup=0)))
    d.start_thread()
    yield d
    d.stop()


def count(d: Daemon, sql: str, *args) -> int:
    return db_rows(d.config.database, sql, *args)[0][0]


def test_resent_results_are_acked_again_and_stored_once(daemon):
    a = Agent(daemon.endpoint)
    a.hello()
    job = a.expect("job")["body"]
    bodies = [{"job_id": job["job_id"], "seq": i, "of": 8, "record": record(1, i)}
              for i in range(3)]
    ids = [a.send("result", b) for b in bodies]
    got = []
    while len(got) < 3:
        got += a.expect("ack")["body"]["ids"]
    assert sorted(got) == sorted(ids)
    # every one again (lost acks), one of them twice in a row
    for mid, body in [*zip(ids, bodies), (ids[0], bodies[0])]:
        a.send("result", body, msg_id=mid)
    again = []
    while len(again) < 4:
        again += a.expect("ack")["body"]["ids"]
    assert sorted(again) == sorted([*ids, ids[0]])
    assert count(daemon, "SELECT COUNT(*) FROM runs") == 3
    assert count(daemon, "SELECT COUNT(DISTINCT msg_id) FROM runs") == 3
    a.close()


def test_a_lost_database_connection_acks_nothing_and_the_resend_is_stored_once(pg_url,
                                                                               tmp_path):
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=pg_url, auto_sweep=True,
                            agent_timeout_s=30, sweep=SweepDefaults(size="small", reps=2,
                                                                    warmup=0)))
    d.start_thread()
    a = Agent(d.endpoint)
    try:
        a.hello()
        job = a.expect("job")["body"]
        # the job is stored just after it is sent: cut only once it is there (a job whose
        # save fails after it was sent is a separate fault: its results are unknown_job)
        deadline = time.monotonic() + 10
        while not db_rows(pg_url, "SELECT 1 FROM jobs WHERE job_id = ?", job["job_id"]):
            assert time.monotonic() < deadline, "the job was never stored"
            time.sleep(0.01)
        refused = 0
        for seq in range(5):  # the loop's own periodic queries may meet the cut first
            body = {"job_id": job["job_id"], "seq": seq, "of": 8, "record": record(1, seq)}
            # the server drops the daemon's connection (a restart, a network cut)
            db_rows(pg_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                            "datname = current_database() AND pid <> pg_backend_pid()")
            mid = a.send("result", body)
            reply = a.expect_any(("ack", "error"), mid)
            stored = count(d, "SELECT COUNT(*) FROM runs WHERE msg_id = ?", mid)
            if reply["type"] == "ack":  # acked means stored
                assert reply["body"]["ids"] == [mid] and stored == 1
                continue
            refused += 1
            assert reply["body"]["code"] in ("internal", "store_failed") and stored == 0
            a.send("result", body, msg_id=mid)  # the agent resends: the daemon reconnected
            assert a.expect("ack")["body"]["ids"] == [mid]
            a.send("result", body, msg_id=mid)
            assert a.expect("ack")["body"]["ids"] == [mid]
            assert count(d, "SELECT COUNT(*) FROM runs WHERE msg_id = ?", mid) == 1
            break
        assert refused == 1, "the cut connection never failed a result"
    finally:
        a.close()
        d.stop()


_FAULT = {  # a commit of results that fails until the fault is removed: (install, remove)
    "sqlite": (["CREATE TRIGGER no_runs BEFORE INSERT ON runs "
                "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"],
               ["DROP TRIGGER no_runs"]),
    "postgresql": (["CREATE FUNCTION no_runs() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION "
                    "'injected fault'; END $$ LANGUAGE plpgsql",
                    "CREATE TRIGGER no_runs BEFORE INSERT ON runs FOR EACH ROW EXECUTE "
                    "FUNCTION no_runs()"],
                   ["DROP TRIGGER no_runs ON runs", "DROP FUNCTION no_runs()"]),
}


def _ddl(location: str, statements: list[str]) -> None:
    if location.startswith("postgresql://"):
        import psycopg
        with psycopg.connect(location, autocommit=True) as con:
            for s in statements:
                con.execute(s)
        return
    import sqlite3
    con = sqlite3.connect(location, isolation_level=None)
    try:
        for s in statements:
            con.execute(s)
    finally:
        con.close()


def stored_job(a: Agent, db: str) -> dict:
    """The job the daemon sends ``a`` at its hello, once the store holds it."""
    a.hello()
    job = a.expect("job")["body"]
    deadline = time.monotonic() + 10
    while not db_rows(db, "SELECT 1 FROM jobs WHERE job_id = ?", job["job_id"]):
        assert time.monotonic() < deadline, "the job was never stored"
        time.sleep(0.01)
    return job


def test_a_batch_whose_commit_fails_is_not_acked_and_its_resend_is_stored_once(daemon):
    """The ingest writer's commit fails (a trigger aborts it): the agent hears store_failed
    and no ack, nothing is stored; sent again once the fault is gone, it is acked and stored
    once, and the daemon goes on acking new results."""
    db = daemon.config.database
    install, remove = _FAULT["postgresql" if db.startswith("postgresql://") else "sqlite"]
    a = Agent(daemon.endpoint)
    try:
        job = stored_job(a, db)
        _ddl(db, install)
        bodies = [{"job_id": job["job_id"], "seq": i, "of": 8, "record": record(1, i)}
                  for i in range(3)]
        mid = a.send("result", bodies[0])
        seen = []
        deadline = time.monotonic() + 10
        while True:  # every message up to the refusal: none of them acks the result
            assert time.monotonic() < deadline and a.sock.poll(1000), "no store_failed"
            msg = P.decode(a.sock.recv())
            seen.append(msg)
            if msg["type"] == "error":
                break
        assert msg["body"]["code"] == "store_failed" and "injected fault" in \
            msg["body"]["message"]
        assert not [m for m in seen if m["type"] == "ack"]
        assert count(daemon, "SELECT COUNT(*) FROM runs") == 0
        _ddl(db, remove)
        a.send("result", bodies[0], msg_id=mid)  # the agent resends
        assert a.expect("ack")["body"]["ids"] == [mid]
        a.send("result", bodies[0], msg_id=mid)  # and once more (a lost ack)
        assert a.expect("ack")["body"]["ids"] == [mid]
        later = [a.send("result", b) for b in bodies[1:]]
        got = []
        while len(got) < 2:
            got += a.expect("ack")["body"]["ids"]
        assert sorted(got) == sorted(later)
        assert count(daemon, "SELECT COUNT(*) FROM runs WHERE msg_id = ?", mid) == 1
        assert count(daemon, "SELECT COUNT(*) FROM runs") == 3
    finally:
        a.close()


def test_failures_between_stored_batches_write_one_line_a_minute(daemon, caplog):
    """A nearly full disk lets a small batch through now and then: each such success reset
    the once-a-minute limit, so every failure after one logged its line and a traceback again
    and every success 'works again' (tests/test_disk_full.py saw 3 tracebacks). Now the lines
    stay at one a minute however failures and successes alternate."""
    db = daemon.config.database
    install, remove = _FAULT["postgresql" if db.startswith("postgresql://") else "sqlite"]
    a = Agent(daemon.endpoint)
    try:
        job = stored_job(a, db)
        caplog.set_level("WARNING", logger="opptune")
        for i in range(3):  # fail, then stored, three times over
            _ddl(db, install)
            body = {"job_id": job["job_id"], "seq": i, "of": 8, "record": record(1, i)}
            mid = a.send("result", body)
            assert a.expect("error")["body"]["code"] == "store_failed"  # names no message
            _ddl(db, remove)
            a.send("result", body, msg_id=mid)
            assert a.expect("ack")["body"]["ids"] == [mid]
        assert count(daemon, "SELECT COUNT(*) FROM runs") == 3
        failed = [r for r in caplog.records if "failed batches so far" in r.getMessage()]
        again = [r for r in caplog.records if "works again" in r.getMessage()]
        assert len(failed) == 1 and failed[0].exc_info is not None, failed
        assert len(again) == 1, again
    finally:
        a.close()
