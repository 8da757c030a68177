"""A pushed configuration survives kill -9 of the agent: applied, or reported, after a restart."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from opptune.shared import protocol as P
from procs import AGENT_RUN_AS
from test_agent_link import Router, ctx, router  # noqa: F401 (fixtures)

# Holds (sleeps) while the ARM file exists, after writing its pid: the agent is then killed
# between receiving the configuration and reporting it
HOLD = """\
import json, os, sys, time
if os.path.exists(os.environ["ARM"]):
    with open(os.environ["PIDF"], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)
print(json.dumps({"time_s": 0.01}))
"""


def agent_toml(tmp_path, endpoint, with_hold=True):
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    lines = ['agent_id = "board-c"', f'daemon = "{endpoint}"', "heartbeat_s = 0.2",
             "bench_kernels = []", f'state_dir = "{tmp_path / "state"}"',
             *(f'{k} = "{v}"' for k, v in AGENT_RUN_AS.items())]
    name = "hold" if with_hold else "other"
    lines += ["[[workloads]]", f'name = "{name}"',
              f'command = ["{sys.executable}", "{script}", "{{size}}"]', 'sizes = ["1"]',
              f'env = {{ ARM = "{tmp_path / "arm"}", PIDF = "{tmp_path / "pid"}" }}']
    path = tmp_path / ("agent.toml" if with_hold else "agent-other.toml")
    path.write_text("\n".join(lines) + "\n")
    return path


def start(cfg, tmp_path):
    return subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config", str(cfg),
                             "--log-level", "DEBUG"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "agent.log", "a"))


def config_msg(cpus):
    return P.make("config", "daemon", {"config_id": "cfg-k", "workload": "hold", "size": "1",
                                       "cpus": cpus, "threads": 1, "freq_khz": None,
                                       "reps": 2})


def saved_configs(tmp_path):
    with sqlite3.connect(tmp_path / "state" / "outbox.db") as db:
        return db.execute("SELECT config_id, done FROM configs").fetchall()


def kill_while_applying(router, tmp_path):
    """Start the agent, push the config, SIGKILL the agent while its first run holds."""
    (tmp_path / "arm").write_text("")
    proc = start(agent_toml(tmp_path, router.endpoint), tmp_path)
    try:
        hello = router.expect(lambda m: m["type"] == "hello", timeout=15)[-1]
        router.send(config_msg(hello["body"]["platform"]["cpus_online"][:1]))
        deadline = time.monotonic() + 20
        while not (tmp_path / "pid").exists():  # answering heartbeats meanwhile
            assert time.monotonic() < deadline, "the config's run never started"
            router.recv(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        try:
            os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    (tmp_path / "arm").unlink()
    assert saved_configs(tmp_path) == [("cfg-k", 0)]


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.integration
def test_config_received_before_kill_is_applied_after_restart(router, tmp_path):
    kill_while_applying(router, tmp_path)
    proc = start(agent_toml(tmp_path, router.endpoint), tmp_path)
    try:
        router.expect(lambda m: m["type"] == "hello", timeout=15)
        applied = router.expect(lambda m: m["type"] == "applied", timeout=30)[-1]
        body = applied["body"]
        assert body["config_id"] == "cfg-k" and body["ok"] is True
        assert body["time_s"] == pytest.approx(0.01) and len(body["records"]) == 2
        router.send(P.make("ack", "daemon", {"ids": [applied["id"]]}))
        router.expect(lambda m: m["type"] == "heartbeat" and m["body"]["outbox"] == 0)
    finally:
        stop(proc)
    assert saved_configs(tmp_path) == [("cfg-k", 1)]


@pytest.mark.integration
def test_config_that_can_no_longer_run_is_reported_after_restart(router, tmp_path):
    kill_while_applying(router, tmp_path)
    # restarted with a configuration that no longer offers the workload
    proc = start(agent_toml(tmp_path, router.endpoint, with_hold=False), tmp_path)
    try:
        router.expect(lambda m: m["type"] == "hello", timeout=15)
        body = router.expect(lambda m: m["type"] == "applied", timeout=30)[-1]["body"]
        assert body["config_id"] == "cfg-k" and body["ok"] is False
        assert "after the agent restarted" in body["error"] and "hold" in body["error"]
        assert body["records"] == [] and body["time_s"] is None
    finally:
        stop(proc)
    assert saved_configs(tmp_path) == [("cfg-k", 1)]
