"""Outbox: durable until acked, survives reopen and kill -9, job progress resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from opptune.agent.outbox import Outbox
from opptune.shared import protocol as P


def result(job="j1", seq=0, of=4):
    rec = {"platform": "p", "workload": "w", "input": "default", "cores": 1, "cpus": [0],
           "threads": 1, "rep": seq, "time_s": 1.0}
    return P.make("result", "agent-a", {"job_id": job, "seq": seq, "of": of, "record": rec})


def test_put_pending_ack_and_reopen(tmp_path):
    ob = Outbox(str(tmp_path))
    msgs = [result(seq=i) for i in range(3)]
    ids = [ob.put(m) for m in msgs]
    ob.put(msgs[0])  # idempotent by id
    ob.put(P.encode(msgs[1]))  # encoded bytes work too
    assert [i for i, _ in ob.pending()] == ids
    assert P.decode(ob.pending()[0][1])["id"] == ids[0]
    assert ob.ack([ids[1], "unknown-id"]) == 1
    ob.close()
    ob = Outbox(str(tmp_path))
    assert [i for i, _ in ob.pending()] == [ids[0], ids[2]]
    assert ob.count() == 2
    ob.ack(ids)
    assert ob.pending() == [] and ob.count() == 0
    ob.close()


def test_due_and_in_flight(tmp_path):
    ob = Outbox(str(tmp_path))
    ids = [ob.put(result(seq=i, of=10)) for i in range(5)]
    assert len(ob.due(sent_before=0.0, limit=100)) == 5  # never sent
    ob.mark_sent(ids[:3], ts=1000.0)
    assert [i for i, _ in ob.due(sent_before=0.0, limit=100)] == ids[3:]
    assert [i for i, _ in ob.due(sent_before=1001.0, limit=100)] == ids
    assert len(ob.due(1001.0, limit=2)) == 2
    assert ob.in_flight(sent_since=999.0) == 3
    ob.reset_sent()
    assert ob.in_flight(sent_since=0.0) == 0
    ob.close()


def test_job_progress_is_atomic_with_results(tmp_path):
    ob = Outbox(str(tmp_path))
    body = {"job_id": "j1", "workload": "w", "size": "default", "reps": 2, "warmup": 0,
            "points": [{"cpus": [0], "threads": 1}, {"cpus": [0, 1], "threads": 2}]}
    assert ob.save_job("j1", body, ref="m1") is True
    assert ob.save_job("j1", body) is False
    ob.add_result("j1", 0, result(seq=0))
    ob.add_result("j1", 1, result(seq=1))
    ob.close()
    ob = Outbox(str(tmp_path))
    (job,) = ob.open_jobs()
    assert job["job_id"] == "j1" and job["next_seq"] == 2 and job["body"] == body
    assert job["ref"] == "m1" and ob.count() == 2
    ob.finish_job("j1")
    assert ob.open_jobs() == [] and ob.job("j1")["done"]
    ob.close()


def test_survives_kill_9(tmp_path):
    """A writer killed with SIGKILL right after put() returned loses nothing."""
    code = textwrap.dedent(f"""
        import sys, os
        from opptune.agent.outbox import Outbox
        from opptune.shared import protocol as P
        ob = Outbox({str(tmp_path)!r})
        ob.save_job("j", {{"job_id": "j"}})
        for i in range(20):
            rec = {{"platform": "p", "workload": "w", "input": "d", "cores": 1, "cpus": [0],
                   "threads": 1, "rep": 0, "time_s": 1.0}}
            m = P.make("result", "a", {{"job_id": "j", "seq": i, "of": 20, "record": rec}},
                       msg_id=f"m{{i:02d}}")
            ob.add_result("j", i, m)
        print("stored", flush=True)
        sys.stdin.read()  # wait to be killed
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "stored"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    ob = Outbox(str(tmp_path))
    assert [i for i, _ in ob.pending()] == [f"m{i:02d}" for i in range(20)]
    assert ob.job("j")["next_seq"] == 20
    ob.close()


def test_reject_moves_a_message_out_of_the_queue_and_keeps_it(tmp_path):
    from opptune.agent.outbox import Outbox
    from opptune.shared import protocol as P
    ob = Outbox(str(tmp_path))
    msg = P.make("heartbeat", "a1", {})
    ob.put(msg)
    assert ob.reject(msg["id"], "bad_record", "nope") is True
    assert ob.reject(msg["id"], "bad_record", "nope") is False  # no longer pending
    assert ob.count() == 0 and ob.pending() == []
    ob.close()
    again = Outbox(str(tmp_path))  # survives a restart
    (parked,) = again.rejected()
    assert parked["id"] == msg["id"] and parked["code"] == "bad_record"
    assert P.decode(parked["data"]) == msg


def test_requeue_rejected_puts_back_only_the_codes_asked_for(tmp_path):
    """The daemon's ``resend`` (``opptune recover``): the results refused as unknown_job go
    back in the queue under their own ids and bytes; the other refusals stay kept."""
    ob = Outbox(str(tmp_path))
    msgs = [result(seq=i) for i in range(3)]
    for m in msgs:
        ob.put(m)
    two = len(P.encode(msgs[0])) + len(P.encode(msgs[1]))
    ob.reject(msgs[0]["id"], "unknown_job", "no such job")
    ob.reject(msgs[1]["id"], "unknown_job", "no such job")
    ob.reject(msgs[2]["id"], "bad_record", "nope")
    assert ob.rejected_counts() == {"bad_record": 1, "unknown_job": 2}
    assert ob.pending_bytes == 0
    assert ob.requeue_rejected(["unknown_job"]) == 2
    assert sorted(P.decode(d)["id"] for _, d in ob.pending()) == sorted(
        m["id"] for m in msgs[:2])
    assert ob.pending_bytes == two
    assert ob.rejected_counts() == {"bad_record": 1}
    assert ob.requeue_rejected(["unknown_job"]) == 0
    ob.ack([m["id"] for m in msgs[:2]])
    assert ob.pending_bytes == 0 and ob.count() == 0
    ob.close()
    again = Outbox(str(tmp_path))
    assert again.rejected_counts() == {"bad_record": 1} and again.pending_bytes == 0


def test_bound_pauses_new_runs_until_acks_bring_it_under_90_percent(tmp_path, caplog):
    """At ``max_bytes`` of unacked results the outbox says why no run may start, keeps
    taking the result of a run that finished (a soft bound: nothing refused, nothing dropped),
    warns once, and has room again below 90 % of the bound."""
    size = len(P.encode(result(seq=0, of=100)))
    ob = Outbox(str(tmp_path), max_bytes=10 * size)
    ob.save_job("j1", {"job_id": "j1"})
    ids = []
    with caplog.at_level("WARNING", logger="opptune.agent.outbox"):
        while ob.full_reason() is None:
            ids.append(ob.add_result("j1", len(ids), result(seq=len(ids), of=100)))
        assert len(ids) == 10 and ob.pending_bytes == 10 * size
        reason = ob.full_reason()
        assert "outbox_max_mb" in reason and str(10 * size) in reason
        ids.append(ob.add_result("j1", 10, result(seq=10, of=100)))  # still stored
        assert ob.count() == 11 and ob.job("j1")["next_seq"] == 11
        for _ in range(5):
            assert ob.full_reason() is not None
        ob.ack(ids[:2])  # 9 left: under the bound, not under 90 % of it
        assert ob.pending_bytes == 9 * size and ob.full_reason() is not None
        ob.ack(ids[2:3])  # 8: under 90 %
        assert ob.full_reason() is None
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("outbox full" in w for w in warnings) == 1, warnings
    assert sum("room again" in w for w in warnings) == 1, warnings
    assert [i for i, _ in ob.pending()] == ids[3:]
    ob.close()


def test_pending_bytes_survive_reopen_and_count_each_message_once(tmp_path):
    ob = Outbox(str(tmp_path), max_bytes=1 << 20)
    msgs = [result(seq=i) for i in range(3)]
    for m in msgs:
        ob.put(m)
    ob.put(msgs[0])  # a repeated id adds nothing
    total = sum(len(P.encode(m)) for m in msgs)
    assert ob.pending_bytes == total
    ob.reject(msgs[2]["id"], "bad_record", "nope")
    assert ob.pending_bytes == total - len(P.encode(msgs[2]))
    ob.close()
    ob = Outbox(str(tmp_path), max_bytes=1 << 20)
    assert ob.pending_bytes == total - len(P.encode(msgs[2]))
    ob.ack([msgs[0]["id"], msgs[1]["id"]])
    assert ob.pending_bytes == 0 and ob.full_reason() is None
    ob.close()


def test_an_outbox_made_before_the_bound_is_converted_and_keeps_its_messages(tmp_path):
    import sqlite3
    ob = Outbox(str(tmp_path))
    msgs = [result(seq=i) for i in range(3)]
    for m in msgs:
        ob.put(m)
    ob.close()
    db = sqlite3.connect(tmp_path / "outbox.db")  # as an older agent left it: no auto_vacuum
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA auto_vacuum=NONE")
    db.execute("VACUUM")
    assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    db.close()
    ob = Outbox(str(tmp_path))
    assert ob._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    assert [i for i, _ in ob.pending()] == [m["id"] for m in msgs]
    assert ob.pending_bytes == sum(len(P.encode(m)) for m in msgs)
    ob.close()


def test_results_measured_as_another_platform_are_counted_and_named_once(tmp_path, caplog):
    """A board whose description changed (new platform id) still holds results measured as
    the old one: the agent says so at start, naming both ids and what becomes of them."""
    ob = Outbox(str(tmp_path))
    old = [result(seq=i) for i in range(3)]  # platform "p"
    new = P.make("result", "agent-a", {"job_id": "j2", "seq": 0, "of": 1,
                                        "record": {**old[0]["body"]["record"], "platform": "q"}})
    for msg in (*old, new):
        ob.put(msg)
    ob.put(P.make("heartbeat", "agent-a", {}))  # not a result: not judged here
    with caplog.at_level("WARNING", logger="opptune.agent.outbox"):
        assert ob.other_platforms("q") == {"p": 3}
        assert ob.other_platforms("p") == {"q": 1}
        assert ob.other_platforms("r") == {"p": 3, "q": 1}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "3 results" in lines[0] and "platform p, not this board's platform q" in lines[0]
    assert "wrong_group" in lines[0] and "rejected table" in lines[0]
    assert ob.count() == 5  # nothing moved or dropped by looking
    ob.close()
