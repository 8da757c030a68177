"""The agent's durable state: results until the daemon acknowledges them, and job progress.

SQLite in WAL mode with ``synchronous=FULL``: a result that ``put`` (or ``add_result``) returned
from is on disk and survives kill -9 and power loss. A result row and the job's next sequence
number are written in one transaction, so an agent killed mid-job resumes at the first point
it has no result for: nothing measured twice, nothing sent twice under two ids.

A configuration the daemon pushed is saved as it arrives, before it is applied; its ``applied``
reply enters the outbox in the same transaction that marks it done, so an agent killed at any
point applies (or reports) it once after a restart.

Full outbox (README, "When the agent's disk fills"): the unacked messages may hold at most
``max_bytes`` (the agent's ``outbox_max_mb``). At it, :meth:`full_reason` says why and the
executor starts no new run until acks bring it under 90 % of the bound; a finished run's result
is still written (a soft bound: no measurement is refused for it). A file beside the database
holds ``reserve_bytes`` of disk. A write the disk cannot take (SQLITE_FULL, ENOSPC) is rolled
back (the file stays consistent), the reserve is given up and the write tried again: so the
run that finished as the disk filled is stored, and the acks that follow (deletes need room
in the WAL too) get through. While the reserve is out, writes that add stop short of the last
``KEEP_FOR_ACKS`` bytes (acks delete in that room) and every write is checkpointed at once:
a WAL holding pages the database file has no room to grow for could never be checkpointed,
and every later delete would fail (the stall this prevents: acks of the same results, again
and again). Until the reserve can be made again, with 1 MiB to spare, :meth:`full_reason`
says the disk is full. A write that fails even so raises :class:`OutboxFull`; the caller
keeps the message in memory and retries. Bookkeeping (``mark_sent``, ``reset_sent``) never
takes the reserve. Each change of state
is logged once (a long full spell: one line a minute).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import threading
import time
from typing import Any, Iterable, Sequence

from ..shared import protocol as P
from .private import make_dirs, opener

log = logging.getLogger("opptune.agent.outbox")

RESUME_FRACTION = 0.9  # over the bound, new runs start again below this share of it
FULL_LOG_EVERY_S = 60.0
FULL_RETRY_S = 0.5  # while the outbox is full, room is looked for this often
# disk space held in a file beside the outbox and given up when the disk is full, so that
# acks (deletes need room in the WAL) and the finished run's result still get written
RESERVE_BYTES = 1 << 20
WAL_LIMIT_BYTES = 1 << 20
WAL_PAGES = 128
ROOM_BESIDE_RESERVE = 1 << 20  # free space the reserve must leave to be made again
# while the reserve is out, writes that add stop short of this much free space: the room that
# acks need to delete (a delete is written to the WAL before it frees anything)
KEEP_FOR_ACKS = RESERVE_BYTES // 2
ACK_CHUNK_ON_FULL = 32


class OutboxFull(Exception):
    """The outbox cannot take this write now (disk full); nothing of it was stored."""


class OutboxUnwritable(OutboxFull):
    """The outbox's file cannot be written now (a file system remounted read-only after a disk
    error, an immutable or failing file): nothing of the write was stored, and its callers
    keep what it held and try again, as on a full disk."""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# the errors of a file that cannot be written at all for now, not of a disk short of room
_UNWRITABLE_SQLITE = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
                      sqlite3.SQLITE_PERM)
_UNWRITABLE_ERRNO = (errno.EROFS, errno.EIO, errno.EPERM, errno.EACCES)


def _unwritable(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF in _UNWRITABLE_SQLITE
    return isinstance(exc, OSError) and exc.errno in _UNWRITABLE_ERRNO


def disk_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return (getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
                or "database or disk is full" in str(exc))
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id        TEXT PRIMARY KEY,
    data      BLOB NOT NULL,
    created   REAL NOT NULL,
    last_sent REAL,
    sends     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_by_created ON outbox (created);
-- messages the daemon refused for good: kept on disk (never lost), no longer resent
CREATE TABLE IF NOT EXISTS rejected (
    id       TEXT PRIMARY KEY,
    data     BLOB NOT NULL,
    created  REAL NOT NULL,
    rejected REAL NOT NULL,
    code     TEXT NOT NULL,
    reason   TEXT NOT NULL
);
-- done: 0 open, 1 finished, 2 cancelled by the daemon with its end not yet recorded (never
-- run again: the worker only records the runs it skips)
CREATE TABLE IF NOT EXISTS jobs (
    job_id   TEXT PRIMARY KEY,
    body     TEXT NOT NULL,
    next_seq INTEGER NOT NULL DEFAULT 0,
    done     INTEGER NOT NULL DEFAULT 0,
    created  REAL NOT NULL,
    ref      TEXT
);
-- pushed configurations: saved on arrival, done once their ``applied`` is in the outbox
CREATE TABLE IF NOT EXISTS configs (
    config_id TEXT PRIMARY KEY,
    data      BLOB NOT NULL,
    done      INTEGER NOT NULL DEFAULT 0,
    created   REAL NOT NULL
);
"""


class Outbox:
    """Thread-safe (one connection behind a lock): the worker adds, the link sends and acks."""

    def __init__(self, state_dir: str, name: str = "outbox.db", max_bytes: int | None = None,
                 reserve_bytes: int = RESERVE_BYTES):
        """``max_bytes``: the bound on the unacked messages' bytes (None: unbounded);
        ``reserve_bytes``: the disk space held back for acks on a full disk."""
        # made where missing; not narrowed here: the agent's start did that, or chose not to,
        # before its lock marked the directory as an agent's (private.make_dir)
        make_dirs(state_dir)
        self.path = os.path.join(state_dir, name)
        # made (or narrowed) 0600 before sqlite opens it: its journal and WAL take its mode
        os.close(opener(self.path, os.O_RDWR | os.O_CREAT))
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=10.0)
        # freed pages go back to the file system (acks make room on a full disk) and the WAL
        # stays small: a full disk cannot be blamed on the outbox's own slack
        if self._db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            if self._db.execute("PRAGMA page_count").fetchone()[0]:
                try:
                    self._db.execute("VACUUM")  # an outbox made before: converted once
                except sqlite3.Error as exc:  # no room for the copy: next start, then
                    if not disk_full(exc):
                        raise
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        # The outbox checkpoints itself (_bound_wal): SQLite's automatic checkpoint fails
        # silently on a full disk, and the log then grows with pages a checkpoint can only
        # copy into a database file that has room to grow; past the reserve, never.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        self._db.executescript(_SCHEMA)
        self._page = self._db.execute("PRAGMA page_size").fetchone()[0]
        self.max_bytes = max_bytes
        self._bytes = self._db.execute(
            "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM outbox").fetchone()[0]
        self._over_bound = False
        self.reserve_path = self.path + ".reserve"
        self.reserve_bytes = reserve_bytes
        self._full_why: str | None = None  # the last disk-full error, while the reserve is out
        self._spent = False  # the reserve was given up to a full disk (and not made since)
        self._no_reserve: str | None = None  # why the reserve could not be made, last try
        self._full_logged = -FULL_LOG_EVERY_S
        # the last line logged about the outbox said it is full: the next room is logged
        self._full_said = False
        self._full_since: float | None = None
        self._reserve_tried = -FULL_RETRY_S
        self._reserve_held = self._make_reserve()

    # -- full or not ----------------------------------------------------------------------------
    @property
    def pending_bytes(self) -> int:
        """Bytes of the messages waiting for an ack."""
        return self._bytes

    def full_reason(self) -> str | None:
        """Why no new run should start now (None: there is room). Logs each change once."""
        with self._lock:
            now = time.monotonic()
            if not self._reserve_held and now - self._reserve_tried >= FULL_RETRY_S:
                self._reserve_tried = now
                self._vacuum()
                self._reserve_held = self._make_reserve()
                self._spent = self._spent and not self._reserve_held
            if self.max_bytes is not None:
                limit = self.max_bytes * (RESUME_FRACTION if self._over_bound else 1.0)
                self._over_bound = self._bytes >= limit
            if not self._reserve_held and not self._spent:
                # never made (short of room from the start): "full" and "in use" would be
                # untrue, and the operator needs the room it waits for
                reason = self._no_reserve or "the outbox's reserve cannot be made"
            elif not self._reserve_held:
                reason = (f"the disk holding {self.path} is full ({self._full_why}); its "
                          f"reserve of {self.reserve_bytes} bytes is in use")
            elif self._over_bound:
                reason = (f"outbox holds {self._bytes} bytes of unacknowledged results, at its "
                          f"bound of {self.max_bytes} (outbox_max_mb)")
            else:
                reason = None
            self._log_state(reason)
            return reason

    def _log_state(self, reason: str | None) -> None:
        now = time.monotonic()
        if reason is None:
            if self._full_since is not None:
                # not rate-limited on its own: a room line held back left the log saying
                # the outbox was full while the agent measured. Full lines are at most one
                # a minute, and so are these.
                if self._full_said:
                    self._full_said = False
                    log.warning("outbox has room again after %.0f s: measuring resumes",
                                now - self._full_since)
                self._full_since = None
            return
        if self._full_since is None:
            self._full_since = now
        if now - self._full_logged >= FULL_LOG_EVERY_S:
            self._full_logged = now
            self._full_said = True
            log.warning("outbox full: %s; no new run starts until there is room (%s; "
                        "nothing is dropped)", reason, self._what_frees())

    def _what_frees(self) -> str:
        """What brings the room back: acks only help where results wait for them."""
        if self._over_bound:
            return "acks free it"
        if self._bytes:
            return "acks free it, or space freed on that disk"
        # an empty outbox on a full disk: no ack will come, the operator must act
        return "nothing waits for an ack, so only space freed on that disk frees it"

    def _make_reserve(self) -> bool:
        """Hold ``reserve_bytes`` of disk in a file; False when the disk has no room."""
        if self.reserve_bytes <= 0:
            return True
        try:
            if os.path.getsize(self.reserve_path) >= self.reserve_bytes:
                return True
        except OSError:
            pass
        try:
            # room for the reserve and a full WAL besides: a disk that takes back just the
            # reserve (or the WAL's own slack) would be full again after the next results
            free, need = self._free_bytes(), self.reserve_bytes + ROOM_BESIDE_RESERVE
            if free < need:
                self._no_reserve = (
                    f"the disk holding {self.path} has {_mib(free)} free, under the "
                    f"{_mib(need)} the outbox needs before a run (a reserve of "
                    f"{_mib(self.reserve_bytes)} for acks on a full disk and "
                    f"{_mib(ROOM_BESIDE_RESERVE)} beside it): free space there or give "
                    "state_dir a larger disk")
                return False
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                try:
                    os.posix_fallocate(fd, 0, self.reserve_bytes)
                except OSError as exc:
                    if disk_full(exc):
                        raise
                    # a file system without fallocate: real zeros hold the space
                    os.pwrite(fd, bytes(self.reserve_bytes), 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            return True
        except OSError as exc:
            self._no_reserve = (f"the outbox's reserve {self.reserve_path} cannot be made: "
                                f"{exc.strerror or exc}")
            if not disk_full(exc):
                log.warning("cannot keep the outbox's reserve %s: %s", self.reserve_path, exc)
            try:
                os.unlink(self.reserve_path)
            except OSError:
                pass
            return False

    def _checkpoint(self) -> bool:
        """Copy the WAL into the database and cut it to nothing; False when the disk has no
        room for it (the database file must grow for the pages new since the last one)."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            if not disk_full(exc):
                raise
            self._full_why = str(exc)
            return False
        return True

    def _bound_wal(self) -> None:
        """After a commit: a WAL past WAL_PAGES is checkpointed now, and a disk with no room
        for that gets the reserve, so the log never holds more than the reserve can take."""
        try:
            size = os.path.getsize(self.path + "-wal")
        except OSError:
            return
        if size > WAL_PAGES * self._page and not self._checkpoint() and self._reserve_held:
            self._give_up_reserve()
            self._checkpoint()

    def _vacuum(self) -> None:
        """Give pages freed by acks back to the file system (best effort), a few pages a
        transaction so that the WAL it needs fits on a full disk; at most 16 MiB a call, so
        that the link thread (heartbeats) is not held up long."""
        self._checkpoint()
        for _ in range(64):
            try:
                if not self._db.execute("PRAGMA freelist_count").fetchone()[0]:
                    break
                # executescript steps it to the end: execute() frees a single page
                self._db.executescript("PRAGMA incremental_vacuum(64);")
            except sqlite3.Error as exc:
                if not disk_full(exc):
                    raise
                break
            self._checkpoint()

    def _write(self, statements, added: int = 0, frees: bool = False,
               essential: bool = True) -> Any:
        """Run ``statements(db)`` in one transaction (call with the lock held); ``added``
        bytes count once it committed. On a full disk the transaction is rolled back and, for
        an ``essential`` write, the reserve is given up and the write tried once more;
        OutboxFull when that fails too. While the reserve is out, a write that does not
        only ``frees`` (deletes) needs KEEP_FOR_ACKS free, and each write is checkpointed at
        once: the WAL then never holds pages that the database file has no room to take."""
        for attempt in (0, 1):
            if (not self._reserve_held and not frees
                    and self._free_bytes() < KEEP_FOR_ACKS):
                raise OutboxFull(f"the disk holding {self.path} is full: its last "
                                 f"{KEEP_FOR_ACKS} bytes are kept for deleting acked results")
            try:
                out = self._transaction(statements)
            except (sqlite3.Error, OSError) as exc:
                if _unwritable(exc) and not disk_full(exc):
                    raise OutboxUnwritable(
                        f"the outbox {self.path} cannot be written ({exc}): its file system "
                        "may have been remounted read-only after a disk error (dmesg, "
                        "findmnt -T " f"{os.path.dirname(self.path)}) or lost its write "
                        "permission; fix that (mount -o remount,rw, or replace the card) "
                        "and the agent goes on by itself") from None
                if not disk_full(exc):
                    raise
                self._full_why = str(exc)
                # the failed transaction's frames go: the WAL file shrinks to nothing
                self._checkpoint()
                if self._reserve_held and essential:
                    self._give_up_reserve()
                    if attempt == 0:
                        continue
                raise OutboxFull(f"the disk holding {self.path} is full ({exc})") from None
            self._bytes += added
            if self._reserve_held:
                self._bound_wal()
            else:
                self._checkpoint()
            return out
        raise AssertionError("unreachable")

    def _free_bytes(self) -> int:
        st = os.statvfs(os.path.dirname(self.path))
        return st.f_bavail * st.f_frsize

    def _give_up_reserve(self) -> None:
        """The disk is full: its reserve goes back to it, for the writes that must get through."""
        self._reserve_held = False
        self._spent = True
        self._reserve_tried = time.monotonic()
        try:
            os.unlink(self.reserve_path)
        except OSError:
            pass
        self._log_state(f"the disk holding {self.path} is full ({self._full_why}); its reserve "
                        f"of {self.reserve_bytes} bytes is in use")

    def _transaction(self, statements) -> Any:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            out = statements(db)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite may have rolled a full write back itself
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:  # a file that cannot be written: the write's error
                    pass               # says why; SQLite rolls back at the next BEGIN
            raise
        return out

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                pass

    # -- results ------------------------------------------------------------------------------
    @staticmethod
    def _encoded(msg: dict[str, Any] | bytes, msg_id: str | None) -> tuple[str, bytes]:
        if isinstance(msg, (bytes, bytearray)):
            if msg_id is None:
                msg_id = P.decode(bytes(msg))["id"]
            return msg_id, bytes(msg)
        return msg["id"], P.encode(msg)

    def put(self, msg: dict[str, Any] | bytes, msg_id: str | None = None) -> str:
        """Store one message (dict or encoded bytes) until acked; idempotent by id."""
        mid, data = self._encoded(msg, msg_id)
        with self._lock:
            self._insert(mid, data)
        return mid

    def _insert(self, mid: str, data: bytes, then=None) -> None:
        """Add one message (and run ``then(db)`` in the same transaction); lock held."""
        def statements(db):
            n = db.execute("INSERT OR IGNORE INTO outbox (id, data, created) VALUES (?,?,?)",
                           (mid, data, time.time())).rowcount
            if then is not None:
                then(db)
            return n
        # the byte count is corrected after the commit if the id was already there
        if self._write(statements, len(data)) != 1:
            self._bytes -= len(data)

    def pending(self, limit: int | None = None) -> list[tuple[str, bytes]]:
        """Unacked messages, oldest first."""
        q = "SELECT id, data FROM outbox ORDER BY created, rowid"
        with self._lock:
            if limit is not None:
                return list(self._db.execute(q + " LIMIT ?", (int(limit),)))
            return list(self._db.execute(q))

    def due(self, sent_before: float, limit: int) -> list[tuple[str, bytes]]:
        """Unacked messages never sent or last sent before ``sent_before``, oldest first."""
        if limit <= 0:
            return []
        with self._lock:
            return list(self._db.execute(
                "SELECT id, data FROM outbox WHERE last_sent IS NULL OR last_sent < ? "
                "ORDER BY created, rowid LIMIT ?", (sent_before, int(limit))))

    def in_flight(self, sent_since: float) -> int:
        """Messages sent at or after ``sent_since`` and not yet acked."""
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM outbox WHERE last_sent >= ?",
                                    (sent_since,)).fetchone()[0]

    def mark_sent(self, ids: Iterable[str], ts: float | None = None) -> None:
        ts = time.time() if ts is None else ts
        with self._lock:
            if not self._reserve_held:
                return  # the reserve is for results and acks; unmarked ones go again sooner
            try:
                self._write(lambda db: db.executemany(
                    "UPDATE outbox SET last_sent=?, sends=sends+1 WHERE id=?",
                    [(ts, i) for i in ids]), essential=False)
            except OutboxFull:
                pass  # unmarked messages are only resent sooner

    def reset_sent(self, ids: Iterable[str] | None = None) -> None:
        """Make every pending message due now (the daemon came back or restarted), or those
        of ``ids`` (a frame of them was refused as a whole)."""
        with self._lock:
            if not self._reserve_held:
                return  # the reserve is for results and acks (they are resent when stale)
            try:
                if ids is None:
                    self._write(lambda db: db.execute("UPDATE outbox SET last_sent=NULL"),
                                essential=False)
                else:
                    self._write(lambda db: db.executemany(
                        "UPDATE outbox SET last_sent=NULL WHERE id=?", [(i,) for i in ids]),
                        essential=False)
            except OutboxFull:
                pass  # the unmarked ones are resent once stale

    def ack(self, ids: Iterable[str]) -> int:
        """Forget acknowledged messages; returns how many were pending."""
        ids = [i for i in ids if isinstance(i, str)]
        if not ids:
            return 0
        with self._lock:
            try:
                freed, n = self._write(lambda db: self._delete(db, ids), frees=True)
            except OutboxFull:
                # On a full disk even a delete needs room in the WAL for every page it
                # touches: small transactions, the WAL emptied after each, get through.
                freed = n = 0
                for k in range(0, len(ids), ACK_CHUNK_ON_FULL):
                    try:
                        f, m = self._write(
                            lambda db: self._delete(db, ids[k:k + ACK_CHUNK_ON_FULL]),
                            frees=True)
                    except OutboxFull:
                        break  # the rest stay pending: resent, and the daemon keeps each once
                    freed, n = freed + f, n + m
            self._bytes -= freed
            return n

    @staticmethod
    def _delete(db: sqlite3.Connection, ids: list[str]) -> tuple[int, int]:
        """Delete pending messages by id; (bytes freed, rows deleted)."""
        freed = n = 0
        for k in range(0, len(ids), 500):
            chunk = ids[k:k + 500]
            marks = ",".join("?" * len(chunk))
            freed += db.execute(f"SELECT COALESCE(SUM(LENGTH(data)), 0) FROM outbox "
                                f"WHERE id IN ({marks})", chunk).fetchone()[0]
            n += db.execute(f"DELETE FROM outbox WHERE id IN ({marks})", chunk).rowcount
        return freed, n

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]

    def reject(self, msg_id: str, code: str, reason: str) -> bool:
        """Move a pending message the daemon refused for good out of the resend queue, into
        the ``rejected`` table; returns whether it was pending."""
        def statements(db):
            size = db.execute("SELECT LENGTH(data) FROM outbox WHERE id=?", (msg_id,)).fetchone()
            db.execute("INSERT OR IGNORE INTO rejected SELECT id, data, created, ?, ?, ? "
                       "FROM outbox WHERE id=?", (time.time(), code, reason, msg_id))
            moved = db.execute("DELETE FROM outbox WHERE id=?", (msg_id,)).rowcount
            return moved, (size[0] if size else 0)
        with self._lock:
            try:
                moved, size = self._write(statements)
            except OutboxFull:
                return False  # stays pending; refused again when resent
            if moved:
                self._bytes -= size
            return moved > 0

    def requeue_rejected(self, codes: Sequence[str]) -> int:
        """Put the messages refused for good with one of ``codes`` back in the resend queue
        (the daemon asked for them: ``opptune recover``), under their own ids, so that a
        result the daemon stored meanwhile is acked, not stored twice. Returns how many."""
        codes = [str(c) for c in codes]
        if not codes:
            return 0
        marks = ",".join("?" * len(codes))

        def statements(db):
            size = db.execute(f"SELECT COALESCE(SUM(LENGTH(data)), 0) FROM rejected WHERE "
                              f"code IN ({marks}) AND id NOT IN (SELECT id FROM outbox)",
                              codes).fetchone()[0]
            db.execute(f"INSERT OR IGNORE INTO outbox (id, data, created) SELECT id, data, "
                       f"created FROM rejected WHERE code IN ({marks})", codes)
            moved = db.execute(f"DELETE FROM rejected WHERE code IN ({marks})", codes).rowcount
            return moved, size
        with self._lock:
            moved, size = self._write(statements, essential=False)
            self._bytes += size
        return moved

    def rejected(self) -> list[dict[str, Any]]:
        """Messages the daemon refused, with its code and reason, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT id, data, code, reason, rejected FROM rejected "
                                    "ORDER BY rejected, rowid").fetchall()
        return [{"id": i, "data": d, "code": c, "reason": r, "rejected": t}
                for i, d, c, r, t in rows]

    def rejected_counts(self) -> dict[str, int]:
        """Messages kept as refused for good: code -> count."""
        with self._lock:
            return dict(self._db.execute("SELECT code, COUNT(*) FROM rejected GROUP BY code "
                                         "ORDER BY code").fetchall())

    def other_platforms(self, platform_id: str) -> dict[str, int]:
        """Pending results measured as another platform than ``platform_id`` (the board's
        description changed since: cpus, topology, model, maximum frequency): platform ->
        count, in one warning line. The daemon stores a result only for its agent's
        platform now: it refuses these (wrong_group), and they move to the ``rejected`` table,
        kept on disk and no longer resent (:meth:`reject`)."""
        with self._lock:
            rows = list(self._db.execute("SELECT data FROM outbox"))
        other: dict[str, int] = {}
        for (data,) in rows:
            try:
                msg = P.decode(data)
                was = msg["body"]["record"]["platform"] if msg["type"] == "result" else None
            except (P.ProtocolError, KeyError, TypeError):
                continue  # not a result this check can read; the daemon judges it
            if isinstance(was, str) and was != platform_id:
                other[was] = other.get(was, 0) + 1
        if other:
            log.warning("%d results in the outbox were measured as platform %s, not this "
                        "board's platform %s (its description changed): the daemon refuses "
                        "them (wrong_group); they are then kept in the outbox's rejected "
                        "table, no longer resent", sum(other.values()),
                        ", ".join(sorted(other)), platform_id)
        return other

    # -- jobs ---------------------------------------------------------------------------------
    def save_job(self, job_id: str, body: dict[str, Any], ref: str | None = None) -> bool:
        """Remember a job before running it. False when it is already known (a resent job)."""
        with self._lock:
            return self._write(lambda db: db.execute(
                "INSERT OR IGNORE INTO jobs (job_id, body, created, ref) VALUES (?,?,?,?)",
                (job_id, json.dumps(body), time.time(), ref)).rowcount) == 1

    def job(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT body, next_seq, done, ref FROM jobs WHERE job_id=?",
                                   (job_id,)).fetchone()
        if row is None:
            return None
        return {"job_id": job_id, "body": json.loads(row[0]), "next_seq": row[1],
                "done": row[2] == 1, "cancelled": row[2] == 2, "ref": row[3]}

    def open_jobs(self) -> list[dict[str, Any]]:
        """Jobs not finished, oldest first (to resume after a restart; a cancelled one only
        to record its end)."""
        with self._lock:
            rows = list(self._db.execute(
                "SELECT job_id FROM jobs WHERE done<>1 ORDER BY created, rowid"))
        return [j for j in (self.job(r[0]) for r in rows) if j]

    def add_result(self, job_id: str, seq: int, msg: dict[str, Any] | bytes) -> str:
        """Store a job's result and advance its progress to ``seq + 1`` atomically."""
        mid, data = self._encoded(msg, None)
        with self._lock:
            self._insert(mid, data, lambda db: db.execute(
                "UPDATE jobs SET next_seq=MAX(next_seq, ?) WHERE job_id=?", (seq + 1, job_id)))
        return mid

    def cancel_job(self, job_id: str) -> bool:
        """Mark an open job cancelled: it never runs again, also after a restart. False when
        it is not open (unknown, finished or cancelled before)."""
        with self._lock:
            return self._write(lambda db: db.execute(
                "UPDATE jobs SET done=2 WHERE job_id=? AND done=0", (job_id,)).rowcount) == 1

    def finish_job(self, job_id: str) -> None:
        def statements(db):
            db.execute("UPDATE jobs SET done=1 WHERE job_id=?", (job_id,))
            # Keep a bounded history of finished jobs so a resent job is recognised.
            db.execute("DELETE FROM jobs WHERE done=1 AND job_id NOT IN (SELECT job_id "
                       "FROM jobs WHERE done=1 ORDER BY created DESC LIMIT 1000)")
        with self._lock:
            self._write(statements)

    # -- pushed configurations ----------------------------------------------------------------
    def save_config(self, config_id: str, msg: dict[str, Any]) -> bool:
        """Remember a pushed configuration before applying it. False when already known."""
        data = P.encode(msg)
        with self._lock:
            return self._write(lambda db: db.execute(
                "INSERT OR IGNORE INTO configs (config_id, data, created) VALUES (?,?,?)",
                (config_id, data, time.time())).rowcount) == 1

    def config_done(self, config_id: str) -> bool | None:
        """Whether a saved configuration was applied or reported; None when unknown."""
        with self._lock:
            row = self._db.execute("SELECT done FROM configs WHERE config_id=?",
                                   (config_id,)).fetchone()
        return None if row is None else bool(row[0])

    def open_configs(self) -> list[dict[str, Any]]:
        """The messages of configurations not yet applied nor reported, oldest first."""
        with self._lock:
            rows = list(self._db.execute(
                "SELECT data FROM configs WHERE done=0 ORDER BY created, rowid"))
        return [P.decode(r[0]) for r in rows]

    def finish_config(self, config_id: str, reply: dict[str, Any]) -> str:
        """Store the ``applied`` reply and mark the configuration done, atomically."""
        mid, data = self._encoded(reply, None)

        def then(db):
            db.execute("UPDATE configs SET done=1 WHERE config_id=?", (config_id,))
            # a bounded history, so that a repeated push is recognised
            db.execute("DELETE FROM configs WHERE done=1 AND config_id NOT IN "
                       "(SELECT config_id FROM configs WHERE done=1 "
                       "ORDER BY created DESC LIMIT 1000)")
        with self._lock:
            self._insert(mid, data, then)
        return mid
