"""Heartbeats mark agents offline and online in ``opptune status``; jobs for an offline agent
expire after ``job_expiry_s`` or, with 0, wait for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from opptune.daemon.service import Daemon
from opptune.shared.config import DaemonConfig, SweepDefaults
from procs import Cluster, write_toml

OPPTUNE = str(Path(sys.executable).parent / "opptune")
JOB = {"job_id": "job-1", "workload": "w", "size": "small", "points": [[1, None]], "reps": 1,
       "warmup": 0}


@pytest.mark.parametrize("expiry, after", [(0.0, "sent"), (5.0, "expired")])
def test_jobs_of_an_offline_agent_wait_or_expire_by_policy(tmp_path, expiry, after):
    cfg = DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                       job_expiry_s=expiry, sweep=SweepDefaults(size="small"))
    d = Daemon(cfg)  # not started: expire() is called here, with a clock of our choosing
    try:
        d.store.save_job("a1", JOB, now=d.started, state="sent")
        d.jobs.expire(d.started + 3.0)  # within any limit: nothing happens
        assert d.store.job("job-1")["state"] == "sent"
        d.jobs.expire(d.started + 86400.0)  # the agent gone for a day
        j = d.store.job("job-1")
        assert j["state"] == after, j
        if after == "expired":
            assert "job_expiry_s = 5" in j["reason"]
    finally:
        d.stop()


@pytest.mark.parametrize("key, value, form", [
    ("job_expiry_s", -1, "(0: jobs for an offline agent wait for it)"),
    ("fleet_forget_s", -5, "(0: a silent daemon's row is kept)")])
def test_a_negative_seconds_key_is_a_configuration_error(tmp_path, key, value, form):
    toml = write_toml(tmp_path / "daemon.toml", {"bind": "tcp://127.0.0.1:0",
                                                 "database": str(tmp_path / "d.db"),
                                                 key: value})
    res = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--config", str(toml)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"opptune-daemon: {toml}: key '{key}' must be a number of seconds >= 0 {form}, got "
        f"{float(value)}"], res.stderr
    assert not (tmp_path / "d.db").exists()


def _alive(st) -> list[bool]:
    return [a["alive"] for a in st["agents"]]


@pytest.mark.integration
def test_a_silent_agent_goes_offline_and_comes_back_online(tmp_path):
    c = Cluster(tmp_path, auto_sweep=False)  # heartbeats every 0.5 s, agent_timeout_s = 3
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: _alive(s) == [True], timeout=30, what="the agent online")
        c.agent.send_signal(signal.SIGSTOP)  # no heartbeat from now on, connection kept
        try:
            c.wait_for(lambda s: _alive(s) == [False], timeout=30, what="the agent offline")
            human = subprocess.run([OPPTUNE, "status", "--daemon", c.endpoint],
                                   capture_output=True, text=True, timeout=60,
                                   env={**os.environ, "COLUMNS": "200"})
            lines = human.stdout.splitlines()
            head = [cell.strip() for cell in next(ln for ln in lines if "alive" in ln).split("┃")]
            row = [cell.strip() for cell in next(ln for ln in lines if "test-agent" in ln)
                   .split("│")]
            assert row[head.index("alive")] == "no", human.stdout
        finally:
            c.agent.send_signal(signal.SIGCONT)
        c.wait_for(lambda s: _alive(s) == [True], timeout=30, what="the agent online again")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()


def test_a_job_of_an_agent_another_daemon_hears_does_not_expire(tmp_path):
    """Daemons sharing one database: the agent talks to the other daemon, which records when
    it heard it; this daemon, which never saw the agent, leaves its job alone."""
    cfg = DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                       job_expiry_s=5.0, sweep=SweepDefaults(size="small"))
    d = Daemon(cfg)
    try:
        later = d.started + 86400.0
        d.store.save_platform("p1", {"n_cpus": 2}, d.started)
        d.store.save_agent("a1", "p1", [], "test", d.started)
        d.store.save_job("a1", JOB, now=d.started, state="sent")
        d.store.touch_agents({"a1": later - 1.0})  # the other daemon heard it a second ago
        d.jobs.expire(later)
        assert d.store.job("job-1")["state"] == "sent"
        d.jobs.expire(later + 60.0)  # and then nobody did for a minute
        assert d.store.job("job-1")["state"] == "expired"
    finally:
        d.stop()
