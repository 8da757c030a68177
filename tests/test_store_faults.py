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
