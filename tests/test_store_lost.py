"""The daemon's SQLite file deleted or replaced under it (a restore from a backup moved to its
path): it acks nothing more, says so and exits 1 (systemd restarts it on the file now at the
path), and the agents resend every result it did not ack: none is lost."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from procs import Cluster, delivery, received, wait_all_delivered

RUNS = 400  # one job of a no-op command: the restore comes in the middle of it


def noop_cluster(tmp: Path) -> Cluster:
    c = Cluster(tmp, kernels=(), reps=RUNS, max_cores=1)
    with open(c.agent_toml, "a") as fh:
        fh.write('[[workloads]]\nname = "noop"\ncommand = ["true"]\n')
    return c


def lost_line(tmp: Path) -> list[str]:
    return [line for line in (tmp / "daemon.log").read_text(errors="replace").splitlines()
            if "results are no longer acknowledged" in line]


def wait_exit(c: Cluster, timeout: float = 30) -> int:
    try:
        return c.daemon.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the daemon still runs on a file that is gone:\n{c.logs()}")


@pytest.mark.integration
def test_a_restore_moved_under_the_daemon_loses_no_result(tmp_path):
    c = noop_cluster(tmp_path)
    state = tmp_path / "agent-state"
    db, backup = str(c.db), tmp_path / "backup.db"
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: received(s) >= 20, timeout=60, what="the sweep under way")
        # The backup and the move happen while this connection holds the write lock: the
        # backup holds every result the daemon stored (and acked) before the move, and every
        # batch the daemon commits later goes into the file moved away.
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        reader, dst = sqlite3.connect(db), sqlite3.connect(backup)
        reader.backup(dst)  # a reader: the lock's holder cannot copy its own file
        reader.close()
        dst.close()
        before = sqlite3.connect(backup).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        os.replace(backup, db)
        con.execute("ROLLBACK")
        con.close()
        assert wait_exit(c) == 1, c.logs()
        assert len(lost_line(tmp_path)) == 1 and "was replaced by another file" in \
            lost_line(tmp_path)[0], c.logs()
        # the old file's log is gone with it: the restored file reads as it was backed up
        # (else SQLite replays the old log into it)
        assert not Path(db + "-wal").exists() and not Path(db + "-shm").exists()
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == before
        waiting = delivery(state, db)
        assert waiting["pending"] > 0 and not waiting["lost"], waiting
        c.start_daemon()  # as systemd's Restart=on-failure does
        done = wait_all_delivered(c, 1, timeout=180)
        assert done["produced"] == done["stored"] == RUNS, done
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == RUNS
    finally:
        c.stop()


@pytest.mark.integration
def test_a_deleted_database_stops_the_daemon_within_its_tick(tmp_path):
    c = noop_cluster(tmp_path)
    db = str(c.db)
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: received(s) >= 20, timeout=60, what="the sweep under way")
        # the agent stopped: nothing arrives, the daemon notices on its own (its 1 s tick)
        c.agent.send_signal(signal.SIGSTOP)
        os.unlink(db)
        assert wait_exit(c) == 1, c.logs()
        assert "was deleted" in lost_line(tmp_path)[0], c.logs()
        assert not Path(db + "-wal").exists() and not Path(db + "-shm").exists()
    finally:
        if c.agent is not None and c.agent.poll() is None:
            c.agent.send_signal(signal.SIGCONT)
        c.stop()
