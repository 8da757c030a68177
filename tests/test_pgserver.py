"""The throwaway PostgreSQL server of the tests (tests/pgserver.py) ends with the process that
started it: a test run killed by ``timeout`` (SIGKILL) left it running before (pg_ctl
detached it), and each killed run added one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import pgserver
from procs import wait_until

STARTER = """
import json, sys
sys.path.insert(0, {tests!r})
from pgserver import PgServer
server = PgServer()
print(json.dumps({{"data": str(server.data), "url": server.url()}}), flush=True)
sys.stdin.read()  # held until the test kills this process
"""


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie waiting for its reaper has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def test_a_killed_test_process_takes_its_server_with_it():
    why = pgserver.unavailable()
    if why:
        pytest.skip(why)
    import psycopg
    pid = None
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER.format(tests=str(Path(__file__).parent))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = starter.stdout.readline()
        assert line, "the starter ended before its server was up"
        server = json.loads(line)
        # the postmaster's pid, first line of its lock file
        pid = int((Path(server["data"]) / "postmaster.pid").read_text().split()[0])
        with psycopg.connect(server["url"], autocommit=True) as c:  # it serves
            assert c.execute("SELECT 1").fetchone() == (1,)
        assert running(pid)
        os.kill(starter.pid, signal.SIGKILL)  # as timeout(1) kills a test run
        starter.wait(30)
        wait_until(lambda: not running(pid), "the server's end", 30)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server["url"], connect_timeout=5)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(30)
        if pid is not None and running(pid):  # this test failed: it is stopped here
            os.kill(pid, signal.SIGQUIT)
