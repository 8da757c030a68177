"""A job is stored before it is sent: a job the store could not keep never reaches the agent
(its results would all be refused as unknown_job and lost)."""

import sqlite3

import pytest

from opptune.daemon.jobs import JobTracker
from opptune.daemon.registry import Registry
from opptune.daemon.store import open_store
from opptune.shared.config import DaemonConfig


class RecordingLink:
    def __init__(self):
        self.sent = []

    def send(self, identity, msg):
        self.sent.append((identity, msg))
        return True


JOB = {"job_id": "j1", "workload": "pi_integrate", "size": "small", "reps": 1, "warmup": 0,
       "points": [{"cores": 1, "cpus": [0], "threads": 1, "freq_khz": None}]}


def tracker(tmp_path):
    store = open_store(str(tmp_path / "opptune.db"))
    reg = Registry(timeout_s=30)
    reg.hello("a1", b"id-a1", "p1", {}, [], now=0.0)
    link = RecordingLink()
    return JobTracker(DaemonConfig(), store, reg, link, "daemon", 0.0, lambda *a: None), \
        store, link


def test_a_job_the_store_refuses_is_not_sent(tmp_path, monkeypatch):
    jobs, store, link = tracker(tmp_path)

    def full(*a, **k):
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(store, "save_job", full)
    with pytest.raises(sqlite3.OperationalError):
        jobs.send("a1", dict(JOB))
    assert link.sent == []


def test_a_stored_job_goes_out_and_is_marked_sent(tmp_path):
    jobs, store, link = tracker(tmp_path)
    jobs.send("a1", dict(JOB))
    assert [m["type"] for _, m in link.sent] == ["job"]
    assert store.job("j1")["state"] == "sent"
