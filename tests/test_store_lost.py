"""The daemon's SQLite file deleted or replaced under it (a restore from a backup moved to its
path): it acks nothing more, says so and exits 1 (systemd restarts it on the file now at the
path), and the agents resend every result it did not ack: none is lost."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from procs import Cluster, delivery, received, wait_all_delivered, wait_until

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


# SQLite's checkpoint lock: byte 121 of the -shm (os_unix.c: the locks start at 120, the
# writer's first, the checkpointer's next; https://www.sqlite.org/walformat.html)
CKPT_LOCK_BYTE = 121


@pytest.mark.integration
def test_an_older_backup_copied_over_the_open_file_stops_the_daemon_and_stays_as_copied(
        tmp_path):
    """`cp backup.db opptune.db` while the daemon writes: it keeps the inode, so the check
    of the file's identity never saw it; the daemon acked on, and its checkpoints wrote its
    pages into the copy. Now it stops as for a moved restore, the copy is left as copied,
    and after the restart every result the agent still held is stored (those acked between
    the backup and the copy are the restore's loss, as with a moved one)."""
    c = noop_cluster(tmp_path)
    state = tmp_path / "agent-state"
    db, backup = str(c.db), str(tmp_path / "backup.db")
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: received(s) >= 20, timeout=60, what="the sweep under way")
        reader, dst = sqlite3.connect(db), sqlite3.connect(backup)
        reader.backup(dst)
        reader.close()
        dst.close()
        before = sqlite3.connect(backup).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        wait_until(lambda: os.stat(db).st_size > os.stat(backup).st_size,
                   "the store grown past the backup", 60, c.logs)
        # Holding the write lock (what was acked is what is committed now) and the
        # checkpoint lock: a checkpoint under way when the copy began would still write into
        # it (the hole README names); from here the daemon's next one looks first
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        shm = os.open(db + "-shm", os.O_RDWR)
        try:
            fcntl.lockf(shm, fcntl.LOCK_EX, 1, CKPT_LOCK_BYTE)
            acked = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
            shutil.copyfile(backup, db)
            con.execute("ROLLBACK")
            con.close()
        finally:
            os.close(shm)
        assert wait_exit(c) == 1, c.logs()
        assert len(lost_line(tmp_path)) == 1 and "was written by another program" in \
            lost_line(tmp_path)[0], c.logs()
        assert not any(Path(db + x).exists() for x in ("-wal", "-shm", ".restore"))
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == before
        assert c.rows("PRAGMA integrity_check") == [("ok",)]
        waiting = delivery(state, db)
        # the results the agent held are kept; lost: those acked after the backup, no more
        assert waiting["pending"] > 0 and len(waiting["lost"]) <= acked - before, waiting
        c.start_daemon()  # as systemd's Restart=on-failure does
        # (the job is never done in the restored store: the runs acked after the backup
        # are missing from it, and from the board)
        wait_until(lambda: (lambda d: d["produced"] == RUNS and d["pending"] == 0)(
            delivery(state, db)), "every result the agent held delivered", 180, c.logs)
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == before + RUNS - acked
        assert c.rows("SELECT COUNT(DISTINCT msg_id) FROM runs") == \
            c.rows("SELECT COUNT(*) FROM runs")
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


def _count(path: str) -> tuple[int, str]:
    con = sqlite3.connect(path)
    try:
        return (con.execute("SELECT COUNT(*) FROM t").fetchone()[0],
                con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def test_an_older_backup_copied_over_the_open_store_is_noticed_and_kept_as_copied(tmp_path):
    """`cp backup.db opptune.db` onto the open file keeps its inode: before, nothing noticed
    it and the store's last close checkpointed its log into the copy (the restore came back
    undone, or "database disk image is malformed"). Now gone() says another program wrote
    the file (smaller than any checkpoint leaves it), and abandon() leaves the copy as it
    was copied, with no journal of the old file beside it."""
    from opptune.daemon.store.sqlite import OVERWRITTEN, SQLiteStore
    path, backup = str(tmp_path / "s.db"), str(tmp_path / "backup.db")
    # no checkpoint thread pass during the test (an hour apart): the test checkpoints
    s = SQLiteStore(path, checkpoint_s=3600)
    s.db.execute("CREATE TABLE t(i INTEGER, pad TEXT)")
    s.db.executemany("INSERT INTO t VALUES (?, ?)", ((i, "p" * 200) for i in range(500)))
    dst = sqlite3.connect(backup)
    s.db.backup(dst)
    dst.close()
    s.db.executemany("INSERT INTO t VALUES (?, ?)", ((i, "p" * 200) for i in range(500, 3000)))
    s.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    assert os.stat(path).st_size > os.stat(backup).st_size
    assert s.gone() is None  # its own checkpoint: the file grew
    s.db.executemany("INSERT INTO t VALUES (?, ?)", ((i, "p" * 200) for i in range(3000, 3100)))
    shutil.copyfile(backup, path)
    assert s.gone() == OVERWRITTEN and "copied" in OVERWRITTEN
    s.abandon()
    assert not any(Path(path + x).exists() for x in ("-wal", "-shm", ".restore"))
    assert _count(path) == (500, "ok")


def test_other_connections_checkpoints_are_no_other_program_s_write(tmp_path):
    """Another daemon of a fleet on the file (a second store, here in this process) and a
    reader checkpoint it too: the file grows, which is no alarm; a smaller file is."""
    from opptune.daemon.store.sqlite import OVERWRITTEN, SQLiteStore
    path = str(tmp_path / "s.db")
    s = SQLiteStore(path, checkpoint_s=0.01)
    other = SQLiteStore(path, checkpoint_s=0.01)
    try:
        other.db.execute("CREATE TABLE t(i INTEGER, pad TEXT)")
        size = os.stat(path).st_size
        other.db.executemany("INSERT INTO t VALUES (?, ?)", ((i, "p" * 200) for i in range(500)))
        wait_until(lambda: os.stat(path).st_size > size, "a checkpoint into the file", 20)
        reader = sqlite3.connect(path)
        reader.execute("PRAGMA wal_checkpoint(PASSIVE)")
        reader.close()
        assert s.gone() is None and other.gone() is None
        os.truncate(path, os.stat(path).st_size - 4096)
        assert s.gone() == OVERWRITTEN
    finally:
        other.close()
        s.close()
