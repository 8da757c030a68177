"""The agent's durable state: results until the daemon acknowledges them, and job progress.

SQLite in WAL mode with ``synchronous=FULL``: a result that ``put`` (or ``add_result``) returned
from is on disk and survives kill -9 and power loss. A result row and the job's next sequence
number are written in one transaction, so an agent killed mid-job resumes at the first point
it has no result for: nothing measured twice, nothing sent twice under two ids.

A configuration the daemon pushed is saved as it arrives, before it is applied; its ``applied``
reply enters the outbox in the same transaction that marks it done, so an agent killed at any
point applies (or reports) it once after a restart.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from typing import Any, Iterable

from ..shared import protocol as P

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

    def __init__(self, state_dir: str, name: str = "outbox.db"):
        os.makedirs(state_dir, exist_ok=True)
        self.path = os.path.join(state_dir, name)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=10.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

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
            self._db.execute("INSERT OR IGNORE INTO outbox (id, data, created) VALUES (?,?,?)",
                             (mid, data, time.time()))
        return mid

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
            self._db.executemany("UPDATE outbox SET last_sent=?, sends=sends+1 WHERE id=?",
                                 [(ts, i) for i in ids])

    def reset_sent(self) -> None:
        """Make every pending message due now (the daemon came back or restarted)."""
        with self._lock:
            self._db.execute("UPDATE outbox SET last_sent=NULL")

    def ack(self, ids: Iterable[str]) -> int:
        """Forget acknowledged messages; returns how many were pending."""
        ids = [i for i in ids if isinstance(i, str)]
        if not ids:
            return 0
        with self._lock:
            cur = self._db.executemany("DELETE FROM outbox WHERE id=?", [(i,) for i in ids])
            return cur.rowcount

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]

    def reject(self, msg_id: str, code: str, reason: str) -> bool:
        """Move a pending message the daemon refused for good out of the resend queue, into
        the ``rejected`` table; returns whether it was pending."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR IGNORE INTO rejected SELECT id, data, created, ?, ?, ? "
                                 "FROM outbox WHERE id=?", (time.time(), code, reason, msg_id))
                moved = self._db.execute("DELETE FROM outbox WHERE id=?", (msg_id,)).rowcount
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return moved > 0

    def rejected(self) -> list[dict[str, Any]]:
        """Messages the daemon refused, with its code and reason, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT id, data, code, reason, rejected FROM rejected "
                                    "ORDER BY rejected, rowid").fetchall()
        return [{"id": i, "data": d, "code": c, "reason": r, "rejected": t}
                for i, d, c, r, t in rows]

    # -- jobs ---------------------------------------------------------------------------------
    def save_job(self, job_id: str, body: dict[str, Any], ref: str | None = None) -> bool:
        """Remember a job before running it. False when it is already known (a resent job)."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO jobs (job_id, body, created, ref) VALUES (?,?,?,?)",
                (job_id, json.dumps(body), time.time(), ref))
            return cur.rowcount == 1

    def job(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT body, next_seq, done, ref FROM jobs WHERE job_id=?",
                                   (job_id,)).fetchone()
        if row is None:
            return None
        return {"job_id": job_id, "body": json.loads(row[0]), "next_seq": row[1],
                "done": bool(row[2]), "ref": row[3]}

    def open_jobs(self) -> list[dict[str, Any]]:
        """Jobs not finished, oldest first (to resume after a restart)."""
        with self._lock:
            rows = list(self._db.execute(
                "SELECT job_id FROM jobs WHERE done=0 ORDER BY created, rowid"))
        return [j for j in (self.job(r[0]) for r in rows) if j]

    def add_result(self, job_id: str, seq: int, msg: dict[str, Any] | bytes) -> str:
        """Store a job's result and advance its progress to ``seq + 1`` atomically."""
        mid, data = self._encoded(msg, None)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR IGNORE INTO outbox (id, data, created) "
                                 "VALUES (?,?,?)", (mid, data, time.time()))
                self._db.execute("UPDATE jobs SET next_seq=MAX(next_seq, ?) WHERE job_id=?",
                                 (seq + 1, job_id))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return mid

    def finish_job(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE jobs SET done=1 WHERE job_id=?", (job_id,))
            # Keep a bounded history of finished jobs so a resent job is recognised.
            self._db.execute("DELETE FROM jobs WHERE done=1 AND job_id NOT IN (SELECT job_id "
                             "FROM jobs WHERE done=1 ORDER BY created DESC LIMIT 1000)")

    # -- pushed configurations ----------------------------------------------------------------
    def save_config(self, config_id: str, msg: dict[str, Any]) -> bool:
        """Remember a pushed configuration before applying it. False when already known."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO configs (config_id, data, created) VALUES (?,?,?)",
                (config_id, P.encode(msg), time.time()))
            return cur.rowcount == 1

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
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR IGNORE INTO outbox (id, data, created) "
                                 "VALUES (?,?,?)", (mid, data, time.time()))
                self._db.execute("UPDATE configs SET done=1 WHERE config_id=?", (config_id,))
                # a bounded history, so that a repeated push is recognised
                self._db.execute("DELETE FROM configs WHERE done=1 AND config_id NOT IN "
                                 "(SELECT config_id FROM configs WHERE done=1 "
                                 "ORDER BY created DESC LIMIT 1000)")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return mid
