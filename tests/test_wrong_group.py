"""An accepted agent stores results only in the group the daemon asked it to measure: a result of
an issued job that names another platform, workload, input or point, and a verification record
that does not measure its pushed configuration, are refused (``wrong_group``) and not stored,
against the daemon as a process and a client speaking the protocol over CURVE."""

from __future__ import annotations

import time

import pytest

from opptune.daemon.store import open_store
from procs import db_rows
from test_daemon_service import PLATFORM, record
from test_duplicates import accepted_client, cluster  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration


def refusal(client, ref):
    reply = client.next(("ack", "error"))
    assert reply is not None, "no answer"
    assert reply["type"] == "error" and reply["body"]["ref"] == ref, reply
    return reply["body"]


def groups(db):
    return db_rows(db, "SELECT DISTINCT platform, workload, input, variant, cpus, threads "
                       "FROM runs")


def test_results_outside_the_jobs_group_are_refused_and_not_stored(cluster, tmp_path):  # noqa: F811
    c = cluster
    client = accepted_client(c, tmp_path)
    try:
        job = client.next(("job",))["body"]
        of = len(job["points"]) * job["reps"]

        def body(seq, **changes):
            rec = record(2, 0)  # cpus [0, 2], 2 threads: the job's second point
            rec.update(changes)
            return {"job_id": job["job_id"], "seq": seq, "of": of, "record": rec}

        wrong = [({"platform": "plat-other"}, "platform 'plat-other', not the agent's "
                                              "'plat-test'"),
                 ({"workload": "evil"}, "workload 'evil' input 'small', not the job's 'wl'"),
                 ({"input": "large"}, "input 'large', not the job's 'wl' input 'small'"),
                 ({"cpus": [1, 3]}, "cpus 1,3 with 2 threads"),
                 ({"threads": 64}, "cpus 0,2 with 64 threads"),
                 ({"variant": "cluster9"}, "variant 'cluster9', none of the job's points")]
        for changes, why in wrong:
            mid = client.send("result", body(3, **changes))
            err = refusal(client, mid)
            assert err["code"] == "wrong_group" and why in err["message"], err
            assert "not stored" in err["message"], err
        assert groups(c.db) == []
        # the same result in the job's group is acked and stored (cpus in another order too)
        ok = [client.send("result", body(3)), client.send("result", body(4, cpus=[2, 0]))]
        client.acks(ok)
        assert sorted(db_rows(c.db, "SELECT seq FROM runs")) == [(3,), (4,)]
        assert {g[:4] + g[5:] for g in groups(c.db)} == {("plat-test", "wl", "small", "", 2)}
    finally:
        client.sock.close(0)


def test_a_board_whose_platform_changed_has_its_older_results_refused(cluster, tmp_path):  # noqa: F811
    """The policy for a board whose description changed (a new platform id in a new hello):
    results are stored only under the agent's platform now, so what it measured as the old
    platform and still holds is refused as wrong_group, naming both ids (the agent then keeps
    those in its outbox's rejected table, see agent/outbox.py other_platforms); what it
    measures as the new platform, for the same job, is stored."""
    c = cluster
    client = accepted_client(c, tmp_path)
    try:
        job = client.next(("job",))["body"]
        of = len(job["points"]) * job["reps"]

        def body(seq, platform):
            rec = {**record(2, 0), "platform": platform}  # the job's second point
            return {"job_id": job["job_id"], "seq": seq, "of": of, "record": rec}

        client.acks([client.send("result", body(0, "plat-test"))])
        client.send("hello", {"platform": {**PLATFORM, "id": "plat-new"}, "workloads": ["wl"],
                              "agent_version": "test"})
        mid = client.send("result", body(1, "plat-test"))
        err = refusal(client, mid)
        assert err["code"] == "wrong_group", err
        assert "platform 'plat-test', not the agent's 'plat-new'" in err["message"], err
        client.acks([client.send("result", body(2, "plat-new"))])
        assert db_rows(c.db, "SELECT seq, platform FROM runs ORDER BY seq") == [
            (0, "plat-test"), (2, "plat-new")]
    finally:
        client.sock.close(0)


def test_verification_records_that_do_not_measure_the_config_are_refused(cluster, tmp_path):  # noqa: F811
    c = cluster
    client = accepted_client(c, tmp_path)
    try:
        assert client.next(("job",)) is not None  # the daemon knows the agent now
        store = open_store(str(c.db))
        try:
            store.save_recommendation({
                "config_id": "cfg-1", "agent": client.id, "platform": "plat-test",
                "workload": "wl", "input": "small", "variant": "", "cores": 2,
                "cpus": [0, 2], "threads": 2, "predicted_time_s": 1.0,
                "predicted_lower_s": 0.5, "predicted_upper_s": 20.0}, time.time())
        finally:
            store.close()

        def applied(rec):
            return client.send("applied", {"config_id": "cfg-1", "ok": True, "time_s": 5.0,
                                           "error": None, "records": [record(2, 0), rec]})

        for changes in ({"workload": "evil"}, {"platform": "plat-other"}, {"cpus": [0, 1]},
                        {"threads": 8}, {"variant": "x=1"}):
            rec = record(2, 1)
            rec.update(changes)
            err = refusal(client, applied(rec))
            assert err["code"] == "wrong_group" and "record 1 of configuration 'cfg-1'" in \
                err["message"], err
        assert groups(c.db) == []
        state = db_rows(c.db, "SELECT state FROM recommendations WHERE id = 'cfg-1'")
        assert state == [("pushed",)]
        mid = applied(record(2, 1))
        reply = client.next(("ack", "error"))
        assert reply["type"] == "ack" and reply["body"]["ids"] == [mid], reply
        assert len(db_rows(c.db, "SELECT msg_id FROM runs WHERE job_id = 'cfg-1'")) == 2
    finally:
        client.sock.close(0)


def test_a_wrong_points_cpus_read_as_a_cpu_set():
    """The refusal wrote the result's cpus as a Python list ('cpus [0, 1, 2, ...]'); they are
    a set (a point matches in any order of them), written as the kernel lists one."""
    from opptune.daemon.service import _wrong_group
    from opptune.shared.records import record_columns
    job = ("a1", "wl", "small", frozenset())

    def why(cpus):
        rec = record_columns({**record(len(cpus)), "cpus": cpus, "threads": len(cpus)})
        return _wrong_group(rec, "plat-test", job, "job-1")
    assert why([*range(8, 16), *range(0, 8)]) == (
        "a result of job 'job-1' names cpus 0-15 with 16 threads variant '', none of the "
        "job's points; it is not stored")
    assert "names cpus 3, a cpu twice with 2 threads" in why([3, 3])
    odd = why(list(range(1, 200, 2)))
    assert "names cpus 1,3,5," in odd and "... with 100 threads" in odd and len(odd) < 200
