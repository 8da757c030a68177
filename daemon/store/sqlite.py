"""SQLite back end of the store: one file, WAL mode, migrations by schema version.

WAL with ``synchronous=NORMAL`` keeps every committed transaction across a crash or kill -9 of
the daemon process, and lets readers (the operator's tools) run beside the writer. What it gives
up: on an OS crash or power loss, the transactions committed since the last checkpoint (at most
about ``checkpoint_s``, 0.5 s, of them) can be lost although they were acknowledged, and the
agents have dropped them from their outboxes. ``FULL`` would close that window with an fsync per
batch, measured here at +100 ms per commit of 2,000 results (58 -> 156 ms): the ack latency
target could not be met. The database itself is never corrupted either way.

The WAL is copied into the database by a checkpoint thread. Under a steady stream of commits a
passive checkpoint never catches up with the log, so the log never starts over and grows
without bound (measured: 1 GB a minute at 12,000 results/s); past ``WAL_RESTART_BYTES`` the
thread restarts it, holding off the writer only for the frames committed since its passive
pass.

A disk with little room left (``LOW_ROOM_BYTES``) gets the same restart much earlier, once the
log holds more than a quarter of the free space (the writer checkpoints its own log past that,
and the thread truncates the file, giving its space back): a checkpoint copies pages the log holds for a database that has to grow, so a log
that filled the disk could never be checkpointed (measured: a 16 MB disk full again 2 s after
room was made, the store stalled for good). A batch that fails on the full disk is rolled back
and not acknowledged (the agents resend it); storing resumes once there is room.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from itertools import groupby
from pathlib import Path
from typing import Any, Iterator, Sequence

import msgpack

from ...shared.records import RecordColumns, RunRecord, columns_of, job_stop
from . import TUNE_OPEN_STATES, Group, ResultIn, Store
from .schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger("opptune.daemon.store")

# NaN in a counter is kept as JSON's NaN extension (Python reads it back) rather than refused.
_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode
_packb = msgpack.Packer(use_bin_type=True).pack

WAL_RESTART_BYTES = 64 << 20
# an agent at its hello (both back ends): the columns named, as schema 9 added the doctor's
# (schema 11 the daemon that holds it, schema 20 its board's hashed machine and boot ids)
SAVE_AGENT = ("INSERT INTO agents (id, platform, workloads, agent_version, first_seen, last_seen, "
              "doctor, doctor_at, daemon, machine, boot) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
              "ON CONFLICT(id) DO UPDATE SET platform=excluded.platform, "
              "workloads=excluded.workloads, agent_version=excluded.agent_version, "
              "last_seen=excluded.last_seen, doctor=excluded.doctor, "
              "doctor_at=excluded.doctor_at, daemon=excluded.daemon, machine=excluded.machine, "
              "boot=excluded.boot")
# the agents a daemon heard (both back ends; the SQL of the greater of two values differs):
# the holder changes only with a time no earlier than the stored one
TOUCH_AGENT = ("UPDATE agents SET daemon=CASE WHEN ? >= last_seen THEN COALESCE(?, daemon) "
               "ELSE daemon END, last_seen={greatest}(last_seen, ?) WHERE id=?")
# a run its agent recorded without running it: failed, and no wall time (nothing was started
# to time: skipped after a cancel or a timeout, a knob not set, a program that cannot start);
# written as schema 18's partial index runs_not_run says it, so that the planners use it
NOT_RUN_SQL = "ok = 0 AND wall_s IS NULL"
# below this much free disk the log restarts at a quarter of the free space, and is truncated
LOW_ROOM_BYTES = 4 * WAL_RESTART_BYTES
LOW_ROOM_POLL_FRACTION = 0.1  # ...and is looked at ten times as often
CACHE_KIB = 32 << 10  # the writer's page cache: RSS grows by this much at most, then stays


def why_not_writable(path: str) -> str | None:
    """Why SQLite cannot write a database at ``path`` where its place is to blame, with what
    to do; None when the directory and the file are writable (the error is another one).
    SQLite creates its journal files (``-wal``, ``-shm``) beside the database, so a writable
    file in a read-only directory fails too, as "attempt to write a readonly database"."""
    p = Path(path).expanduser().absolute()
    where = p.parent
    user = f"uid {os.geteuid()}"
    if where.is_dir() and not os.access(where, os.W_OK):
        try:
            how = ("it is on a read-only file system"
                   if os.statvfs(where).f_flag & os.ST_RDONLY else f"its mode forbids {user}")
        except OSError:
            how = f"{user} may not write it"
        journal = f"{p.name}-wal, {p.name}-shm"
        made = (f"SQLite creates its journal ({journal}) beside the database" if p.exists()
                else f"SQLite creates the database there, with its journal ({journal})")
        return (f"the directory {where} is not writable ({how}), and {made}: make the "
                f"directory writable for the daemon's user ({user}), or move the database "
                "to a directory that is")
    if p.is_file() and not os.access(p, os.W_OK):
        return (f"the file is not writable for the daemon's user ({user}): give that user "
                "write access to it (chown or chmod), or move the database")
    return None


class NotAStore(sqlite3.DatabaseError):
    """An SQLite database with tables but no opptune schema (another program's file, given as
    the store by mistake): refused before anything is written to it."""


def _refuse_foreign(db: sqlite3.Connection) -> None:
    """NotAStore where ``db`` holds tables and no opptune ``schema_version`` table (a store's
    first table; an empty file or database becomes a new store)."""
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                      "AND name NOT LIKE 'sqlite_%'")}
    cols = [r[1] for r in db.execute("PRAGMA table_info(schema_version)")]
    refuse_foreign(names, cols, "SQLite")


def refuse_foreign(tables: set[str], version_columns: list[str], kind: str) -> None:
    """NotAStore where a database holds ``tables`` but not opptune's ``schema_version``
    (with ``version_columns``, its columns in order); ``kind``: SQLite or PostgreSQL."""
    if not tables or ("schema_version" in tables and version_columns == ["version",
                                                                         "applied"]):
        return
    shown = sorted(tables)
    more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    raise NotAStore(f"it is {'an' if kind == 'SQLite' else 'a'} {kind} database of another "
                    f"program, not an opptune store (its tables: {', '.join(shown[:5])}{more})")


def _stored_record(text: str | None, packed: bytes | None) -> Any:
    """A run's record as the agent sent it: from its msgpack column where the row has one,
    else from its JSON text."""
    return json.loads(text) if packed is None else msgpack.unpackb(packed)


def drift_ends_sql(drift: str, variant: str) -> str:
    """store.drift_ends in SQL: whether the drift row ``drift`` (an alias) ends the runs of
    the group whose variant is the SQL expression ``variant``."""
    return f"({drift}.variant = {variant} OR {drift}.variant = '' OR {variant} = '')"


# A run received before its group's last drift event measured the old behaviour: the group's
# fits and MPET's profiles of it leave it out; the whole-board group (no variant) and its
# cluster<i> groups ran on the same cores, so a drift of either ends the other's runs too
# (store.drift_ends). The condition on the row's own group, for a query over every group
# (profile_runs); a query of one group reads drift_since once and compares (_fit_where: the
# same rule, 1.5-2x faster on a 20,000-run group).
# A drift of one agent only (drift.agent_only: a changed program) ends that agent's runs
# received before it, whatever the platform's drifts: one condition per row (the group's other
# agents' runs stay in), added only where such a drift exists (it made a fit's read of a
# 20,000-run group 1.5x slower)
_NOT_AGENT_DRIFTED = (" AND NOT EXISTS (SELECT 1 FROM drift a WHERE a.agent_only = 1 AND "
                      "a.agent = runs.agent AND a.platform = runs.platform AND "
                      "a.workload = runs.workload AND a.input = runs.input AND "
                      + drift_ends_sql("a", "runs.variant") + " AND a.since > runs.received)")
_SINCE_DRIFT = ("received >= COALESCE((SELECT MAX(d.since) FROM drift d WHERE "
                "d.agent_only = 0 AND d.platform = runs.platform AND "
                "d.workload = runs.workload AND d.input = runs.input AND "
                + drift_ends_sql("d", "runs.variant") + "), 0)")


class SQLiteStore(Store):
    # the writer's wal_autocheckpoint (see _bound_log); -1: left alone (PostgreSQL's subclass)
    _autockpt = -1
    # (st_dev, st_ino) of the files opened, by suffix; none for PostgreSQL's subclass
    _files: dict[str, tuple[int, int] | None] = {}
    # the largest size of the database file seen: in WAL mode only checkpoints write that
    # file, and a checkpoint (this store's, another daemon's on the file, any reader's) never
    # shrinks it (no auto_vacuum), so a smaller file is another program's write (an older
    # backup copied over the open file: ``gone``)
    _size = 0
    _overwritten = False

    def __init__(self, path: str, busy_timeout_s: float = 10.0, checkpoint_s: float | None = 0.5):
        if path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Autocommit mode: transactions are opened explicitly so that a batch is exactly one.
        self.db = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s,
                                  check_same_thread=False)
        try:
            # before the first write: WAL mode and the schema would change someone else's file
            _refuse_foreign(self.db)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            # Each batch of results inserts at one place per open job in the (job_id, seq)
            # index: with 500 agents, 500 leaf pages that SQLite's default 2 MiB cache keeps
            # evicting and reading back. 32 MiB holds them (and what the msg_id index appends
            # to).
            self.db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            # a restarted WAL file is cut back to this size instead of staying at its largest
            self.db.execute(f"PRAGMA journal_size_limit={WAL_RESTART_BYTES}")
            self._migrate()
            self._page = self.db.execute("PRAGMA page_size").fetchone()[0]
            # the files this connection opened (main, -wal, -shm): gone() and abandon()
            self._files = _identities(path) if path != ":memory:" else {}
            self._size = os.stat(path).st_size if path != ":memory:" else 0
            self._size_lock = threading.Lock()
        except BaseException:
            # a store refused (read-only place, newer schema) holds the file open no longer
            self.db.close()
            raise
        self._ckpt_stop = threading.Event()
        self._ckpt: threading.Thread | None = None
        if checkpoint_s and path != ":memory:":
            # Checkpoints (copying the WAL into the database, with an fsync) run on a thread of
            # their own: one SQLite call with the GIL released, so on a second core and not
            # inside the ingest loop's commits.
            self._autockpt = 0
            self.db.execute("PRAGMA wal_autocheckpoint=0")
            self._ckpt = threading.Thread(target=self._checkpointer, args=(checkpoint_s,),
                                          name="opptune-store-checkpoint", daemon=True)
            self._ckpt.start()

    def _checkpointer(self, interval_s: float) -> None:
        # timeout: how long a restart may wait for the writer's transaction and for readers
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                             timeout=2.0)
        try:
            db.execute(f"PRAGMA journal_size_limit={WAL_RESTART_BYTES}")
            page = db.execute("PRAGMA page_size").fetchone()[0]
            wait = interval_s
            while not self._ckpt_stop.wait(wait):
                room = self._room()
                low = room < LOW_ROOM_BYTES
                wait = interval_s * (LOW_ROOM_POLL_FRACTION if low else 1.0)
                # a file another program wrote (a backup copied over it) gets none of this
                # store's pages: they would damage the restore
                if self._overwritten or self._shrunk():
                    self._overwritten = True
                    continue
                try:
                    _, frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if frames * page > (room // 4 if low else WAL_RESTART_BYTES):
                        mode = "TRUNCATE" if low else "RESTART"
                        db.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
                except sqlite3.Error as exc:  # busy, or no room yet: try again next time
                    log.debug("checkpoint: %s", exc)
                # the size this checkpoint left, seen at once: a copy made right after it
                # is compared with that, not with the size before it
                if self._shrunk():
                    self._overwritten = True
        finally:
            db.close()

    def _bound_log(self) -> None:
        """Near a full disk the writer checkpoints its own log once it outgrows a quarter of
        the free space (the thread looks too seldom to stop a fast stream filling the disk)."""
        if self._autockpt < 0:
            return  # no checkpoint thread: SQLite's own autocheckpoint bounds the log
        room = self._room()
        pages = 0
        if room < LOW_ROOM_BYTES:
            pages = 1 << max(4, (room // 4 // self._page).bit_length() - 1)  # few changes
        if pages != self._autockpt:
            self.db.execute(f"PRAGMA wal_autocheckpoint={pages}")
            self._autockpt = pages

    def _room(self) -> int:
        """Free bytes on the database's file system (a large figure when unknown)."""
        try:
            st = os.statvfs(Path(self.path).parent)
        except OSError:
            return LOW_ROOM_BYTES
        return st.f_bavail * st.f_frsize

    # -- plumbing -------------------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
            self.db.execute("COMMIT")
        except BaseException:
            # a COMMIT that failed (disk full) may leave the transaction open: the next
            # batch would find it and fail too
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise

    def _migrate(self) -> None:
        with self._tx() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_version "
                       "(version INTEGER PRIMARY KEY, applied REAL NOT NULL)")
        current = self.schema_version()
        if current > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path}: database schema version {current} is newer than "
                               f"this daemon's ({SCHEMA_VERSION}); upgrade opptune")
        for version in sorted(v for v in MIGRATIONS if v > current):
            with self._tx() as db:
                for stmt in MIGRATIONS[version]:
                    db.execute(stmt)
                db.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
        if current < SCHEMA_VERSION:
            log.info(migrated_text(self.path, current))

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.db.execute(sql, args)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def journal_mode(self) -> str:
        return self.db.execute("PRAGMA journal_mode").fetchone()[0]

    def schema_version(self) -> int:
        row = self.db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    # -- platforms and agents -------------------------------------------------------------------
    def save_platform(self, platform_id: str, description: dict[str, Any], now: float) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO platforms VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                       "description=excluded.description, last_seen=excluded.last_seen",
                       (platform_id, _dumps(description), now, now))

    def platform(self, platform_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT description FROM platforms WHERE id=?",
                              (platform_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def save_agent(self, agent_id: str, platform_id: str, workloads: list[Any],
                   agent_version: str, now: float,
                   doctor: dict[str, Any] | None = None, daemon: str | None = None,
                   machine: str | None = None, boot: str | None = None) -> None:
        with self._tx() as db:
            db.execute(SAVE_AGENT, (agent_id, platform_id, _dumps(workloads), agent_version, now,
                                    now, None if doctor is None else _json_safe(doctor),
                                    None if doctor is None else now, daemon, machine, boot))
            for w in workloads:
                name = w.get("name") if isinstance(w, dict) else w
                if isinstance(name, str):
                    db.execute("INSERT INTO workloads VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                               (name, _dumps(w if isinstance(w, dict) else {}), now))

    _greatest = "MAX"  # the greater of two values (PostgreSQL: GREATEST)

    def touch_agents(self, last_seen: dict[str, float], daemon: str | None = None) -> None:
        if not last_seen:
            return
        with self._tx() as db:
            db.executemany(TOUCH_AGENT.format(greatest=self._greatest),
                           [(ts, daemon, ts, a) for a, ts in last_seen.items()])

    def agents(self) -> list[dict[str, Any]]:
        return self._agent_rows("SELECT * FROM agents ORDER BY id")

    def agent(self, agent_id: str) -> dict[str, Any] | None:
        rows = self._agent_rows("SELECT * FROM agents WHERE id=?", (agent_id,))
        return rows[0] if rows else None

    def save_standings(self, agent_id: str, standings: list[Any], dropped: list[Any],
                       at: float) -> None:
        """What stands on ``agent_id``'s board, as its hello said it at ``at`` (and the
        configurations applied since): shown after a daemon restart until the next hello."""
        with self._tx() as db:
            db.execute("INSERT INTO agent_standings VALUES (?, ?, ?, ?) ON CONFLICT(agent) DO "
                       "UPDATE SET standings=excluded.standings, dropped=excluded.dropped, "
                       "said_at=excluded.said_at",
                       (agent_id, _json_safe(standings), _json_safe(dropped), at))

    def standings_of(self, agent_id: str) -> dict[str, Any] | None:
        """{"standings", "dropped", "at"} as :meth:`save_standings` kept them; None: none
        kept (an agent not heard since schema 19, or one that says nothing of them)."""
        row = self.db.execute("SELECT standings, dropped, said_at FROM agent_standings "
                              "WHERE agent=?", (agent_id,)).fetchone()
        if row is None:
            return None
        return {"standings": json.loads(row[0]), "dropped": json.loads(row[1]), "at": row[2]}

    def save_daemon(self, instance: str, endpoint: str, now: float,
                    version: str | None = None) -> None:
        with self._tx() as db:
            # an earlier daemon at this endpoint was killed (two cannot listen on one): none of
            # its agents is online through it
            db.execute("DELETE FROM daemons WHERE endpoint=? AND instance<>?",
                       (endpoint, instance))
            db.execute("INSERT INTO daemons VALUES (?, ?, ?, ?) ON CONFLICT(instance) DO UPDATE "
                       "SET endpoint=excluded.endpoint, last_seen=excluded.last_seen",
                       (instance, endpoint, now, now))
            if version is not None:
                db.execute("INSERT INTO daemon_versions VALUES (?, ?) ON CONFLICT(instance) DO "
                           "UPDATE SET version=excluded.version", (instance, version))
            # the versions of daemons whose rows went (an older daemon removes rows too)
            db.execute("DELETE FROM daemon_versions WHERE instance NOT IN "
                       "(SELECT instance FROM daemons)")

    def drop_daemon(self, instance: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM daemons WHERE instance=?", (instance,))
            db.execute("DELETE FROM daemon_versions WHERE instance=?", (instance,))
            db.execute("DELETE FROM agent_clashes WHERE instance=?", (instance,))

    def save_clashes(self, instance: str, clashes: list[dict[str, Any]]) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM agent_clashes WHERE instance=?", (instance,))
            db.executemany("INSERT INTO agent_clashes VALUES (?, ?, ?, ?, ?)",
                           [(c["agent"], instance, _json_safe(c["claim"]), c["since"],
                             c["last_seen"]) for c in clashes])

    def clashes_elsewhere(self, instance: str, since: float) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT c.agent, c.claim, c.since, c.last_seen, d.endpoint FROM agent_clashes c "
            "JOIN daemons d ON d.instance = c.instance WHERE c.instance <> ? AND "
            "c.last_seen >= ? AND d.last_seen >= ? ORDER BY c.agent, d.endpoint",
            (instance, since, since))
        out = []
        for r in rows:
            try:
                r["claim"] = json.loads(r["claim"])
            except ValueError:
                continue  # a row no daemon of this code wrote: nothing to show of it
            if isinstance(r["claim"], dict):
                out.append(r)
        return out

    _DAEMON_ROWS = ("SELECT d.instance, d.endpoint, d.started, d.last_seen, v.version FROM "
                    "daemons d LEFT JOIN daemon_versions v ON v.instance = d.instance ")

    def daemons(self) -> list[dict[str, Any]]:
        return self._rows(self._DAEMON_ROWS + "ORDER BY d.endpoint, d.instance")

    def forget_daemons(self, before: float) -> list[dict[str, Any]]:
        sql = self._DAEMON_ROWS + "WHERE d.last_seen < ? ORDER BY d.endpoint, d.instance"
        if not self._rows(sql, (before,)):  # the usual case, each heartbeat: no write lock
            return []
        with self._tx() as db:
            cur = db.execute(sql, (before,))
            gone = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
            db.execute("DELETE FROM daemons WHERE last_seen < ?", (before,))
            db.execute("DELETE FROM agent_clashes WHERE instance NOT IN "
                       "(SELECT instance FROM daemons)")
            db.execute("DELETE FROM daemon_versions WHERE instance NOT IN "
                       "(SELECT instance FROM daemons)")
        return gone

    def agents_elsewhere(self, instance: str, since: float,
                         agent_id: str | None = None) -> list[dict[str, Any]]:
        one = "" if agent_id is None else "AND a.id = ? "
        return self._agent_rows(
            "SELECT a.*, d.endpoint FROM agents a JOIN daemons d ON d.instance = a.daemon "
            f"WHERE a.daemon <> ? AND a.last_seen >= ? AND d.last_seen >= ? {one}ORDER BY a.id",
            (instance, since, since) + (() if agent_id is None else (agent_id,)))

    def agents_heard_unrecorded(self, instance: str, since: float) -> list[dict[str, Any]]:
        return self._agent_rows(
            "SELECT a.* FROM agents a LEFT JOIN daemons d ON d.instance = a.daemon "
            "WHERE a.last_seen >= ? AND (d.instance IS NULL OR d.instance = ? "
            "OR d.last_seen < ?) ORDER BY a.id", (since, instance, since))

    def _agent_rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        rows = self._rows(sql, args)
        for r in rows:
            r["workloads"] = json.loads(r["workloads"])
            try:
                r["doctor"] = json.loads(r["doctor"]) if r["doctor"] else None
            except ValueError as exc:  # the report only informs: the agent is still known
                log.error("agent %s: stored doctor report is not JSON (%s)", r["id"], exc)
                r["doctor"] = None
        return rows

    def workloads(self) -> list[str]:
        return [r[0] for r in self.db.execute(
            "SELECT name FROM workloads UNION SELECT DISTINCT workload FROM runs ORDER BY 1")]

    # -- jobs -----------------------------------------------------------------------------------
    def save_job(self, agent_id: str, job: dict[str, Any], now: float, state: str = "sent") -> None:
        points = job["points"]
        with self._tx() as db:
            db.execute("INSERT INTO jobs (job_id, agent, workload, size, points, n_points, "
                       "reps, warmup, expected, created, state, reason, updated, stopped, "
                       "held) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL) "
                       "ON CONFLICT(job_id) DO UPDATE SET agent=excluded.agent, "
                       "workload=excluded.workload, size=excluded.size, points=excluded.points, "
                       "n_points=excluded.n_points, reps=excluded.reps, "
                       "warmup=excluded.warmup, expected=excluded.expected, "
                       "created=excluded.created, state=excluded.state, "
                       "reason=excluded.reason, updated=excluded.updated, "
                       "stopped=excluded.stopped, held=excluded.held",
                       (job["job_id"], agent_id, job["workload"], job["size"], _dumps(points),
                        len(points), job["reps"], job["warmup"],
                        job.get("expected", len(points) * job["reps"]),
                        now, state, job.get("reason"), now, None))
            db.execute("INSERT INTO workloads(name, first_seen) VALUES (?, ?) "
                       "ON CONFLICT DO NOTHING", (job["workload"], now))

    def recovered_counts(self, agent: str) -> tuple[int, int]:
        """(jobs, runs) stored as recovered for ``agent`` (daemon/recovery.py)."""
        row = self.db.execute(
            "SELECT COUNT(DISTINCT j.job_id), COUNT(r.msg_id) FROM jobs j LEFT JOIN runs r "
            "ON r.job_id = j.job_id WHERE j.agent = ? AND j.state = 'recovered'",
            (agent,)).fetchone()
        return int(row[0]), int(row[1])

    def open_recovery(self, agent: str, until: float, codes: list[str], now: float) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO recovery VALUES (?, ?, ?, ?) ON CONFLICT(agent) DO UPDATE "
                       "SET open_until=excluded.open_until, codes=excluded.codes, "
                       "opened=excluded.opened", (agent, until, json.dumps(codes), now))

    def recoveries(self, agent: str | None = None) -> list[dict[str, Any]]:
        where, args = _where(agent=agent)
        return [{"agent": a, "until": float(u), "codes": list(json.loads(c)),
                 "opened": float(o)} for a, u, c, o in self.db.execute(
                     f"SELECT agent, open_until, codes, opened FROM recovery{where} "
                     "ORDER BY opened", args)]

    def set_job_state(self, job_id: str, state: str, reason: str | None = None,
                      now: float | None = None, only_from: Sequence[str] | None = None,
                      stopped: dict[str, Any] | None = None) -> bool:
        sql = "UPDATE jobs SET state=?, reason=?, updated=?, stopped=?, held=? WHERE job_id=?"
        args: list[Any] = [state, reason, time.time() if now is None else now,
                           None if stopped is None else _dumps(stopped),
                           1 if _held(state, stopped) else None, job_id]
        if only_from:
            sql += f" AND state IN ({','.join('?' * len(only_from))})"
            args += list(only_from)
        with self._tx() as db:
            return db.execute(sql, args).rowcount > 0

    def job_failures(self, job_id: str) -> tuple[int, list[str]]:
        ok = int(self.db.execute("SELECT COUNT(*) FROM runs WHERE job_id=? AND ok=1",
                                 (job_id,)).fetchone()[0])
        return ok, ([] if ok else self.job_errors(job_id))

    def job_errors(self, job_id: str) -> list[str]:
        errors: list[str] = []
        for text, packed in self.db.execute(
                "SELECT record, record_msgpack FROM runs WHERE job_id=? AND ok=0 ORDER BY seq",
                (job_id,)):
            error = _stored_record(text, packed).get("error")
            if isinstance(error, str) and error and error not in errors:
                errors.append(error)
        return errors

    def job_last_run(self, job_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT record, record_msgpack FROM runs WHERE job_id=? "
                              "ORDER BY seq DESC LIMIT 1", (job_id,)).fetchone()
        if row is None:
            return None
        data = _stored_record(row[0], row[1])
        return data if isinstance(data, dict) else None

    def _job_row(self, r: dict[str, Any]) -> dict[str, Any]:
        if "points" in r:
            r["points"] = json.loads(r["points"])
        r.pop("held", None)  # the index's copy of stopped.held: ``stopped`` says it
        # a row stored before the column (or by a daemon that read only the agent's text)
        # says its stop in its reason
        r["stopped"] = (json.loads(r["stopped"]) if r["stopped"] else
                        job_stop(r["reason"]) if r["state"] in ("done", "failed") else None)
        return r

    def job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM jobs WHERE job_id=?", (job_id,))
        return self._job_row(rows[0]) if rows else None

    def jobs(self) -> list[dict[str, Any]]:
        return self.jobs_page()[0]

    def jobs_page(self, agent: str | None = None, job_ids: Sequence[str] | None = None,
                  limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
        where, args = _where(agent=agent, job_id=job_ids)
        picked = f"SELECT * FROM jobs{where}"
        if limit is not None:
            picked += (" ORDER BY CASE WHEN state IN ('queued', 'sent', 'running') THEN 0 "
                       "ELSE 1 END, updated DESC, created DESC LIMIT ?")
        # received and not_run are counted for the rows picked only (an index lookup each:
        # runs_job_seq, and runs_not_run, which holds the runs recorded without running only)
        rows = [self._job_row(r) for r in self._rows(
            "SELECT j.job_id, j.agent, j.workload, j.size, j.expected, j.state, j.reason, "
            "j.created, j.updated, j.stopped, (SELECT COUNT(DISTINCT seq) FROM runs r WHERE "
            "r.job_id = j.job_id) AS received, (SELECT COUNT(*) FROM runs r WHERE "
            f"r.job_id = j.job_id AND {NOT_RUN_SQL}) AS not_run FROM ({picked}) AS j "
            "ORDER BY j.created", args + ([] if limit is None else [limit]))]
        return rows, self._total(rows, limit, f"SELECT COUNT(*) FROM jobs{where}", args)

    def _total(self, rows: list[Any], limit: int | None, count_sql: str,
               args: Sequence[Any]) -> int:
        """How many rows match: those given unless ``limit`` may have cut them."""
        if limit is None or len(rows) < limit:
            return len(rows)
        return int(self.db.execute(count_sql, args).fetchone()[0])

    def active_jobs(self) -> list[dict[str, Any]]:
        return self._rows("SELECT job_id, agent, state FROM jobs "
                          "WHERE state IN ('queued', 'sent', 'running') ORDER BY created")

    def held_cancels(self) -> list[dict[str, Any]]:
        # the held rows only (schema 21, jobs_held); their ``stopped`` decides, as a daemon of
        # an earlier version on a migrated store ends a cancel without clearing the column
        rows = self._rows("SELECT job_id, agent, state, stopped FROM jobs WHERE held = 1 "
                          "ORDER BY created")
        return [{"job_id": r["job_id"], "agent": r["agent"]} for r in rows
                if r["stopped"] and _held(r["state"], json.loads(r["stopped"]))]

    def jobs_for(self, agent_id: str, workload: str) -> list[dict[str, Any]]:
        return [self._job_row(r) for r in self._rows(
            "SELECT * FROM jobs WHERE agent=? AND workload=? ORDER BY created",
            (agent_id, workload))]

    def job_received(self, job_id: str) -> int:
        return int(self.db.execute("SELECT COUNT(DISTINCT seq) FROM runs WHERE job_id=?",
                                   (job_id,)).fetchone()[0])

    def job_groups(self, job_id: str) -> list[Group]:
        return [Group(*r) for r in self.db.execute(
            "SELECT DISTINCT platform, workload, input, variant FROM runs WHERE job_id=?",
            (job_id,))]

    # -- runs -----------------------------------------------------------------------------------
    def insert_results(self, items: Sequence[ResultIn], now: float) -> list[str]:
        row = self.result_row
        self.insert_rows([row(it.msg_id, it.agent, it.job_id, it.seq,
                              it.columns or columns_of(it.record), it.raw, now)
                          for it in items])
        return [it.msg_id for it in items]

    @staticmethod
    def result_row(msg_id: str, agent: str, job_id: str | None, seq: int | None,
                   cols: RecordColumns, raw: dict[str, Any], now: float) -> tuple:
        """One result's row of ``runs`` (its record packed whole beside the columns)."""
        (platform, workload, inp, variant, cores, cpus, threads, freq, rep, time_s, wall, user,
         sys_, energy, ok, virtual, throttled, marked) = cols
        # int(): sqlite3 binds a bool by a slower path than an int, and PostgreSQL's INTEGER
        # columns take no bool
        return (msg_id, agent, job_id, seq, platform, workload, inp, variant, cores,
                _cpus_text(cpus), threads, freq, rep, time_s, wall, user, sys_, energy, int(ok),
                int(virtual), now, None, _packb(raw), int(throttled), marked)

    def insert_rows(self, rows: Sequence[tuple]) -> None:
        self._bound_log()
        with self._tx() as db:
            # Only a repeat is skipped (the same message id, or the same job and sequence
            # number under a new id); any other violation fails the batch (OR IGNORE would
            # also drop rows breaking NOT NULL, and they would be acked).
            db.executemany("INSERT INTO runs VALUES "
                           "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                           "ON CONFLICT DO NOTHING", rows)

    def stored_ids(self, msg_ids: Sequence[str]) -> set[str]:
        ids = list(msg_ids)
        found: set[str] = set()
        for k in range(0, len(ids), 500):  # within SQLite's limit of bound parameters
            part = ids[k:k + 500]
            found.update(r[0] for r in self.db.execute(
                f"SELECT msg_id FROM runs WHERE msg_id IN ({','.join('?' * len(part))})",
                part))
        return found

    def run_records(self, job_id: str) -> list[tuple[str, RunRecord]]:
        out = []
        for msg_id, text, packed in self.db.execute(
                "SELECT msg_id, record, record_msgpack FROM runs WHERE job_id=? ORDER BY seq",
                (job_id,)):
            out.append((msg_id, RunRecord.from_dict(_stored_record(text, packed))))
        return out

    def run_counts(self) -> list[dict[str, Any]]:
        return self.run_counts_page()[0]

    def run_counts_page(self, agent: str | None = None, limit: int | None = None
                        ) -> tuple[list[dict[str, Any]], int]:
        where, args = _where(agent=agent)
        # one pass over the runs either way: the window counts the rows before the limit
        rows = self._rows(
            "SELECT agent, platform, workload, input, count, failed, not_run, marked, total "
            "FROM (SELECT agent, platform, workload, input, "
            # a failed run is stored but measured nothing: counted apart (58 "runs", 4 failed)
            "SUM(CASE WHEN ok = 1 THEN 1 ELSE 0 END) AS count, "
            "SUM(CASE WHEN ok = 1 THEN 0 ELSE 1 END) AS failed, "
            # ...of them, those recorded without being run (a job cancelled: the job row's
            # 'N not run', which "N failed" alone contradicted)
            f"SUM(CASE WHEN {NOT_RUN_SQL} THEN 1 ELSE 0 END) AS not_run, "
            "SUM(CASE WHEN marked IS NULL THEN 0 ELSE 1 END) AS marked, COUNT(*) OVER () AS "
            f"total FROM runs{where} GROUP BY agent, platform, workload, input"
            + ("" if limit is None else " ORDER BY MAX(received) DESC LIMIT ?")
            + ") AS c ORDER BY 1, 2, 3, 4", args + ([] if limit is None else [limit]))
        total = int(rows[0]["total"]) if rows else 0
        for r in rows:
            del r["total"]
            r.update(count=int(r["count"]), failed=int(r["failed"]), not_run=int(r["not_run"]),
                     marked=int(r["marked"]))
        return rows, total

    def workload_outcomes(self, agent: str | None = None) -> list[dict[str, Any]]:
        where, args = _where(agent=agent)
        return [{"agent": a, "workload": w, "runs": int(n), "ok": int(ok or 0)}
                for a, w, n, ok in self.db.execute(
                    f"SELECT agent, workload, COUNT(*), SUM(ok) FROM runs{where} "
                    "GROUP BY agent, workload ORDER BY 1, 2", args)]

    def groups(self) -> list[Group]:
        return [Group(*r) for r in self.db.execute(
            "SELECT DISTINCT platform, workload, input, variant FROM runs ORDER BY 1, 2, 3, 4")]

    def run_points(self) -> dict[Group, list[tuple[int, float | None, float, float | None, bool,
                                                  bool]]]:
        out: dict[Group, list[tuple[int, float | None, float, float | None, bool, bool]]] = {}
        for r in self.db.execute(
                "SELECT platform, workload, input, variant, cores, freq_mhz, time_s, energy_j, "
                "virtual, marked IS NOT NULL FROM runs WHERE ok=1 AND time_s IS NOT NULL "
                "ORDER BY 1, 2, 3, 4, 5, 6"):
            out.setdefault(Group(*r[:4]), []).append((r[4], r[5], r[6], r[7], bool(r[8]),
                                                       bool(r[9])))
        return out

    # A board under a load the user accepts (``accept_load``, daemon key or --accept-load):
    # its marked runs are fitted too. The daemon sets this from its configuration.
    accept_load = False

    # the runs a fit may use: successful, not throttled, not a verification judged off (and
    # received since the group's last drift event: _fit_where, report_runs)
    _FIT_OK = ("ok=1 AND throttled=0 AND time_s IS NOT NULL AND (job_id IS NULL OR job_id NOT "
               "IN (SELECT id FROM recommendations WHERE state='off'))")

    def _fit_where(self, group: Group) -> str:
        """The runs of one group (4 arguments) a fit may use (:attr:`_FIT_OK`), received
        since the 5th argument (its last drift event of every agent) and its agent's own."""
        return ("platform=? AND workload=? AND input=? AND variant=? AND received >= ? AND "
                + self._FIT_OK + self._agent_drifted(group))

    def _agent_drifted(self, group: Group | None = None) -> str:
        """:data:`_NOT_AGENT_DRIFTED` where a drift of one agent only ends runs of ``group``
        (None: of any group), else nothing."""
        if group is None:
            row = self.db.execute("SELECT 1 FROM drift WHERE agent_only = 1 LIMIT 1").fetchone()
        else:
            row = self.db.execute("SELECT 1 FROM drift d WHERE agent_only = 1 AND platform=? "
                                  "AND workload=? AND input=? AND " + drift_ends_sql("d", "?")
                                  + " LIMIT 1", (*group, group.variant)).fetchone()
        return _NOT_AGENT_DRIFTED if row else ""

    def profile_runs(self, marked: bool | None) -> Iterator[tuple]:
        which = ("" if marked is None else " AND marked IS NOT NULL" if marked
                 else " AND marked IS NULL")
        # sweep jobs' runs only: a recommendation's verification runs are no profile
        return iter(self.db.execute(
            "SELECT platform, workload, input, cores, freq_mhz, time_s, record, record_msgpack, "
            "variant FROM runs WHERE ok=1 AND throttled=0 AND time_s > 0 AND "
            "(variant='' OR variant LIKE 'cluster%') AND "
            f"{_SINCE_DRIFT}{self._agent_drifted()} AND job_id IN (SELECT job_id FROM jobs)"
            + which))

    def _fit_rows(self, group: Group, columns: str, accept_load: bool | None = None
                  ) -> list[tuple]:
        """The group's runs a fit may use (:meth:`_fit_where`), marked runs only where the
        load is accepted: a point with marked runs only leaves the fit until re-measured
        (daemon/remeasure.py)."""
        accept = self.accept_load if accept_load is None else accept_load
        return [tuple(r) for r in self.db.execute(
            f"SELECT {columns} FROM runs WHERE {self._fit_where(group)}"
            + ("" if accept else " AND marked IS NULL") + f" ORDER BY {self._fit_order}",
            (*group, self.drift_since(group) or 0.0))]

    _fit_order = "cores, freq_mhz"

    def group_runs(self, group: Group, accept_load: bool | None = None
                   ) -> list[tuple[int, float | None, float]]:
        return self._fit_rows(group, "cores, freq_mhz, time_s", accept_load)

    def report_runs(self, accept_load: bool | None = None
                    ) -> dict[Group, tuple[list[tuple[int, float | None, float, float | None,
                                                      bool, bool, str | None]],
                                           list[tuple[int, float | None, float]]]]:
        accept = self.accept_load if accept_load is None else accept_load
        out: dict[Group, tuple[list[Any], list[Any]]] = {}
        # each group's last drift that ends its runs (drift_since of every group at once;
        # the groups from the runs_group index)
        since = ("SELECT g.platform, g.workload, g.input, g.variant, MAX(d.since) AS since "
                 "FROM (SELECT DISTINCT platform, workload, input, variant FROM runs) AS g "
                 "JOIN drift d ON d.platform = g.platform AND d.workload = g.workload AND "
                 "d.input = g.input AND d.agent_only = 0 AND " + drift_ends_sql("d", "g.variant")
                 + " GROUP BY g.platform, g.workload, g.input, g.variant")
        # why the fit leaves a run out (LEFT_OUT; NULL: it uses it), the rule of _fit_rows
        # one condition at a time: the page draws what the fit uses and counts the rest
        # (a drift of the run's own agent only, too: _agent_drifted)
        why = ("CASE WHEN NOT (received >= COALESCE(s.since, 0)" + self._agent_drifted()
               + ") THEN 'drift' "
               "WHEN throttled <> 0 THEN 'throttled' "
               "WHEN job_id IS NOT NULL AND job_id IN (SELECT id FROM recommendations WHERE "
               "state='off') THEN 'off' "
               + ("" if accept else "WHEN marked IS NOT NULL THEN 'marked' ") + "END")
        rows = self.db.execute(
            "SELECT platform, workload, input, variant, cores, freq_mhz, time_s, energy_j, "
            f"virtual, marked IS NOT NULL, {why} "
            f"FROM runs LEFT JOIN ({since}) AS s USING (platform, workload, input, variant) "
            "WHERE ok=1 AND time_s IS NOT NULL "
            f"ORDER BY platform, workload, input, variant, {self._fit_order}")
        for key, group_rows in groupby(rows, key=lambda r: r[:4]):
            points: list[Any] = []
            fit: list[Any] = []
            for r in group_rows:
                points.append((r[4], r[5], r[6], r[7], bool(r[8]), bool(r[9]), r[10]))
                if r[10] is None:
                    fit.append((r[4], r[5], r[6]))
            out[Group(*key)] = (points, fit)
        return out

    def point_marks(self, group: Group) -> list[dict[str, Any]]:
        """Per point (cores, freq_mhz) of the group's fit-eligible runs: clean and marked
        counts and the latest mark's reason (what a recommendation rests on)."""
        out = []
        for cores, freq, clean, marked, reason in self.db.execute(
                "SELECT cores, freq_mhz, SUM(CASE WHEN marked IS NULL THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN marked IS NULL THEN 0 ELSE 1 END), "
                "(SELECT r2.marked FROM runs r2 WHERE r2.platform=runs.platform AND "
                "r2.workload=runs.workload AND r2.input=runs.input AND "
                "r2.variant=runs.variant AND r2.cores=runs.cores AND "
                "r2.freq_mhz IS NOT DISTINCT FROM runs.freq_mhz AND r2.marked IS NOT NULL "
                "ORDER BY r2.received DESC LIMIT 1) "
                f"FROM runs WHERE {self._fit_where(group)} GROUP BY platform, workload, input, "
                f"variant, cores, freq_mhz ORDER BY {self._fit_order}",
                (*group, self.drift_since(group) or 0.0)):
            out.append({"cores": int(cores), "freq_mhz": freq, "clean": int(clean or 0),
                        "marked": int(marked or 0), "reason": reason})
        return out

    # -- drift ----------------------------------------------------------------------------------
    def save_drift(self, agent: str, group: Group, reason: str, job_ids: list[str],
                   error: str | None, now: float, agent_only: bool = False) -> int:
        with self._tx() as db:
            cur = db.execute("INSERT INTO drift(agent, platform, workload, input, variant, "
                             "reason, job_ids, error, since, agent_only) "
                             "VALUES (?,?,?,?,?,?,?,?,?,?)",
                             (agent, *group, reason, _dumps(job_ids), error, now,
                              int(agent_only)))
            return int(cur.lastrowid)

    def drift_since(self, group: Group, agent: str | None = None) -> float | None:
        row = self.db.execute("SELECT MAX(since) FROM drift d WHERE platform=? AND workload=? "
                              "AND input=? AND " + drift_ends_sql("d", "?")
                              + " AND (agent_only = 0 OR agent = ?)",
                              (*group, group.variant, agent)).fetchone()
        return row[0] if row else None

    def drift_events(self) -> list[dict[str, Any]]:
        rows = self._rows("SELECT * FROM drift ORDER BY id")
        for r in rows:
            r["job_ids"] = json.loads(r["job_ids"])
            r["agent_only"] = bool(r["agent_only"])
        return rows

    def swept_clocks_khz(self, group: Group) -> list[int]:
        # a verification's runs carry its recommendation's id as their job_id
        rows = self.db.execute(
            "SELECT DISTINCT freq_mhz FROM runs WHERE platform=? AND workload=? AND input=? "
            "AND variant=? AND ok=1 AND freq_mhz IS NOT NULL AND (job_id IS NULL OR job_id "
            "NOT IN (SELECT id FROM recommendations))", tuple(group))
        return sorted({int(round(float(f) * 1000)) for (f,) in rows if f == f})

    def group_energy_runs(self, group: Group, accept_load: bool | None = None
                          ) -> list[tuple[int, float | None, float, float | None, str | None]]:
        out = []
        for c, f, t, e, text, packed in self._fit_rows(
                group, "cores, freq_mhz, time_s, energy_j, record, record_msgpack",
                accept_load):
            source = None
            if e is not None:  # the source is not a column: read it from the stored record
                source = _stored_record(text, packed).get("energy_source")
            out.append((c, f, t, e, source))
        return out

    # -- fits and recommendations ---------------------------------------------------------------
    def save_fit(self, group: Group, model: str, params: dict[str, Any],
                 quality: dict[str, Any], runners_up: list[Any], now: float) -> int:
        with self._tx() as db:
            cur = db.execute("INSERT INTO fits(platform, workload, input, variant, model, params, "
                             "quality, runners_up, created) VALUES (?,?,?,?,?,?,?,?,?)",
                             (*group, model, _json_safe(params), _json_safe(quality),
                              _json_safe(runners_up), now))
            return int(cur.lastrowid)

    def fits(self) -> list[dict[str, Any]]:
        return self.fits_page()[0]

    def fits_page(self, platform: str | None = None, limit: int | None = None,
                  groups: Sequence[Group] | None = None) -> tuple[list[dict[str, Any]], int]:
        where, args = _where(platform=platform)
        if groups is not None:
            where += (" AND " if where else " WHERE ") + "(" + (" OR ".join(
                ["(platform=? AND workload=? AND input=? AND variant=?)"] * len(groups))
                or "0=1") + ")"
            args += [v for g in groups for v in g]
        latest = ("SELECT * FROM fits f WHERE id = (SELECT MAX(id) FROM fits g WHERE "
                  "g.platform=f.platform AND g.workload=f.workload AND g.input=f.input AND "
                  "g.variant=f.variant)" + where.replace(" WHERE ", " AND "))
        if limit is not None:
            latest += " ORDER BY id DESC LIMIT ?"
        rows = self._rows(f"SELECT * FROM ({latest}) AS f ORDER BY platform, workload, input, "
                          "variant", args + ([] if limit is None else [limit]))
        for r in rows:  # decoded for the rows given only: most of a status's time at 771 fits
            for k in ("params", "quality", "runners_up"):
                r[k] = json.loads(r[k])
        return rows, self._total(rows, limit, "SELECT COUNT(*) FROM (SELECT DISTINCT platform, "
                                              f"workload, input, variant FROM fits{where}) AS g",
                                 args)

    def save_recommendation(self, rec: dict[str, Any], now: float) -> None:
        cols = ("agent", "platform", "workload", "input", "variant", "cores", "cpus", "threads",
                "freq_khz", "predicted_time_s", "predicted_lower_s", "predicted_upper_s",
                "model", "state", "verified_time_s", "error", "created", "updated", "keep",
                "goal", "verified_energy_j")
        keep, goal = rec.get("keep"), rec.get("goal")
        with self._tx() as db:
            db.execute(
                f"INSERT INTO recommendations (id, {', '.join(cols)}) VALUES "
                f"({', '.join('?' * (len(cols) + 1))}) ON CONFLICT(id) DO UPDATE SET "
                + ", ".join(f"{c}=excluded.{c}" for c in cols),
                (rec["config_id"], rec["agent"], rec["platform"], rec["workload"], rec["input"],
                 rec["variant"], rec["cores"], _dumps(list(rec["cpus"])), rec["threads"],
                 rec.get("freq_khz"), rec.get("predicted_time_s"), rec.get("predicted_lower_s"),
                 rec.get("predicted_upper_s"), rec.get("model"), rec.get("state", "pushed"),
                 rec.get("verified_time_s"), rec.get("error"), now, now,
                 None if keep is None else int(bool(keep)),
                 None if goal is None else _dumps(goal), rec.get("verified_energy_j")))

    def update_recommendation(self, config_id: str, state: str, now: float,
                              verified_time_s: float | None = None,
                              error: str | None = None,
                              verified_energy_j: float | None = None) -> bool:
        with self._tx() as db:
            cur = db.execute("UPDATE recommendations SET state=?, verified_time_s=?, error=?, "
                             "updated=?, verified_energy_j=? WHERE id=?",
                             (state, verified_time_s, error, now, verified_energy_j,
                              config_id))
            return cur.rowcount > 0

    def set_replaced(self, config_id: str, by: str | None, at: float | None) -> bool:
        with self._tx() as db:
            return db.execute("UPDATE recommendations SET replaced_by=?, replaced_at=? "
                              "WHERE id=?", (by, at, config_id)).rowcount > 0

    def _rec_row(self, r: dict[str, Any]) -> dict[str, Any]:
        r["config_id"] = r.pop("id")
        r["cpus"] = json.loads(r["cpus"])
        r["keep"] = None if r.get("keep") is None else bool(r["keep"])
        r["goal"] = None if r.get("goal") is None else json.loads(r["goal"])
        return r

    def recommendation(self, config_id: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM recommendations WHERE id=?", (config_id,))
        return self._rec_row(rows[0]) if rows else None

    def recommendations(self) -> list[dict[str, Any]]:
        return self.recommendations_page()[0]

    def recommendations_page(self, agent: str | None = None, limit: int | None = None
                             ) -> tuple[list[dict[str, Any]], int]:
        where, args = _where(agent=agent)
        picked = f"SELECT * FROM recommendations{where}"
        if limit is not None:
            picked += " ORDER BY created DESC LIMIT ?"
        rows = [self._rec_row(r) for r in self._rows(
            f"SELECT * FROM ({picked}) AS r ORDER BY created",
            args + ([] if limit is None else [limit]))]
        return rows, self._total(rows, limit, f"SELECT COUNT(*) FROM recommendations{where}",
                                 args)

    def take_unsent(self, agent: str, now: float) -> list[dict[str, Any]]:
        # the usual hello: nothing unsent, seen in the partial index recommendations_unsent
        # (schema 23) without taking the write lock
        if self.db.execute("SELECT 1 FROM recommendations WHERE agent=? AND state='unsent' "
                           "AND error IS NULL LIMIT 1", (agent,)).fetchone() is None:
            return []
        taken = []
        with self._tx() as db:
            cur = db.execute("SELECT * FROM recommendations WHERE agent=? ORDER BY created",
                             (agent,))
            names = [d[0] for d in cur.description]
            newest: dict[tuple[str, str, str, str], dict[str, Any]] = {}
            unsent = []
            for row in cur.fetchall():
                r = dict(zip(names, row))
                newest[(r["platform"], r["workload"], r["input"], r["variant"])] = r
                # an error says why it must not be sent later (a running process's target)
                if r["state"] == "unsent" and r["error"] is None:
                    unsent.append(r)
            for r in unsent:
                latest = newest[(r["platform"], r["workload"], r["input"], r["variant"])]
                if latest is r:
                    state, error = "pushed", None
                else:
                    state, error = "superseded", ("a newer recommendation of its group was "
                                                  "made before the agent came back")
                moved = db.execute("UPDATE recommendations SET state=?, error=?, updated=? "
                                   "WHERE id=? AND state='unsent'",
                                   (state, error, now, r["id"])).rowcount
                if moved and state == "pushed":
                    r["state"] = state
                    taken.append(self._rec_row(r))
        return taken

    # -- fitting claims -------------------------------------------------------------------------
    def claim_fit(self, group: Group, owner: str, now: float, lease_s: float) -> bool:
        with self._tx() as db:  # BEGIN IMMEDIATE: one writer claims at a time
            db.execute("INSERT INTO fit_claims VALUES (?, ?, ?, ?, NULL, 0) "
                       "ON CONFLICT DO NOTHING", tuple(group))
            holder, claimed = db.execute(
                "SELECT owner, claimed FROM fit_claims WHERE platform=? AND workload=? AND "
                "input=? AND variant=?", tuple(group)).fetchone()
            if holder not in (None, owner) and claimed + lease_s > now:
                return False
            db.execute("UPDATE fit_claims SET owner=?, claimed=? WHERE platform=? AND "
                       "workload=? AND input=? AND variant=?", (owner, now, *group))
            return True

    def release_fit(self, group: Group, owner: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE fit_claims SET owner=NULL WHERE platform=? AND workload=? AND "
                       "input=? AND variant=? AND owner=?", (*group, owner))

    # -- tune sessions ----------------------------------------------------------------------------
    def save_tune_session(self, session: dict[str, Any], expect: float | None = None) -> bool:
        with self._tx() as db:
            if expect is not None:
                return db.execute("UPDATE tune_sessions SET agent=?, state=?, body=?, updated=? "
                                  "WHERE tune_id=? AND updated=?",
                                  (session["agent"], session["state"], _json_safe(session),
                                   session["updated"], session["tune_id"], expect)).rowcount > 0
            db.execute("INSERT INTO tune_sessions VALUES (?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT(tune_id) DO UPDATE SET agent=excluded.agent, "
                       "state=excluded.state, body=excluded.body, updated=excluded.updated",
                       (session["tune_id"], session["agent"], session["state"],
                        _json_safe(session), session["started"], session["updated"]))
            return True

    def tune_session(self, tune_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT body FROM tune_sessions WHERE tune_id=?",
                              (tune_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def open_tune_sessions(self) -> list[dict[str, Any]]:
        out = []
        # the open states named: NOT IN the final ones was a scan of every session kept, the
        # index tune_sessions_state serves this
        open_ = ", ".join("?" * len(TUNE_OPEN_STATES))
        for tune_id, agent, state, body, started, updated in self.db.execute(
                "SELECT tune_id, agent, state, body, started, updated FROM tune_sessions "
                f"WHERE state IN ({open_}) ORDER BY started, tune_id",
                TUNE_OPEN_STATES).fetchall():
            try:
                r = json.loads(body)
            except ValueError as exc:
                r = {"unreadable": f"its stored body is not JSON ({exc})"}
            if not isinstance(r, dict):
                r = {"unreadable": "its stored body is not a JSON object"}
            # the columns stand in for what a damaged body lacks: closing it needs them
            for key, value in (("tune_id", tune_id), ("agent", agent), ("state", state),
                               ("started", started), ("updated", updated)):
                r.setdefault(key, value)
            out.append(r)
        return out

    def fail_tune_session(self, tune_id: str, expect: float, reason: str, now: float) -> bool:
        with self._tx() as db:
            row = db.execute("SELECT body FROM tune_sessions WHERE tune_id=? AND updated=?",
                             (tune_id, expect)).fetchone()
            if row is None:
                return False
            try:
                r = json.loads(row[0])
            except ValueError:
                r = None
            # an unreadable body is kept as it is: what was stored is not lost
            body = _json_safe({**r, "state": "failed", "reason": reason, "updated": now}) \
                if isinstance(r, dict) else row[0]
            return db.execute("UPDATE tune_sessions SET state=?, body=?, updated=? "
                              "WHERE tune_id=? AND updated=?",
                              ("failed", body, now, tune_id, expect)).rowcount > 0

    def save_remeasure(self, item_id: str, agent: str, state: str, body: dict[str, Any],
                       now: float) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO remeasure VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
                       "SET agent=excluded.agent, state=excluded.state, body=excluded.body, "
                       "updated=excluded.updated", (item_id, agent, state, _json_safe(body), now))

    def move_remeasure(self, item_id: str, expect: str, state: str, body: dict[str, Any],
                       now: float) -> bool:
        with self._tx() as db:
            return db.execute("UPDATE remeasure SET state=?, body=?, updated=? WHERE id=? AND "
                              "state=?", (state, _json_safe(body), now, item_id, expect)
                              ).rowcount > 0

    def delete_remeasure(self, item_id: str, expect: str | None = None) -> bool:
        with self._tx() as db:
            if expect is None:
                return db.execute("DELETE FROM remeasure WHERE id=?", (item_id,)).rowcount > 0
            return db.execute("DELETE FROM remeasure WHERE id=? AND state=?",
                              (item_id, expect)).rowcount > 0

    def remeasure_items(self, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        out = []
        where, args = _where(state=None if states is None else list(states))
        for r in self._rows(f"SELECT * FROM remeasure{where} ORDER BY updated, id", args):
            try:
                r["body"] = json.loads(r["body"])
            except ValueError as exc:  # one unreadable row must not keep the others back
                log.error("re-measure item %s: stored body is not JSON (%s); left out",
                          r["id"], exc)
                continue
            out.append(r)
        return out

    def state_counts(self) -> dict[str, dict[str, int]]:
        return {table: dict(self.db.execute(
            f"SELECT state, COUNT(*) FROM {table} GROUP BY state").fetchall())
            for table in ("jobs", "recommendations")}

    def gone(self) -> str | None:
        """What became of the database file, when the file at its path is no longer the one
        this store writes (deleted, or replaced: a restore moved another file there), or
        when another program wrote it (an older backup copied over the open file: smaller);
        None while it is this store's. One stat: the daemon asks once a second and before
        each batch's acks."""
        opened = self._files.get("")
        if opened is None:
            return None
        with self._size_lock:  # the stat and the size seen: one at a time (_shrunk)
            try:
                st = os.stat(self.path)
            except OSError:
                return "was deleted"
            if (st.st_dev, st.st_ino) != opened:
                return "was replaced by another file"
            if self._overwritten or self._shrunk(st.st_size):
                self._overwritten = True
                return OVERWRITTEN
        return None

    def _shrunk(self, size: int | None = None) -> bool:
        """Whether the database file (``size``: its size now, read under ``_size_lock``;
        else read here under it) is smaller than it was seen: no checkpoint makes it so, a
        copy of an older backup over it does. A size read before another thread's larger
        one must not be compared after it: hence the lock."""
        if size is None:
            with self._size_lock:
                try:
                    size = os.stat(self.path).st_size
                except OSError:
                    return False
                return self._shrunk(size)
        if size < self._size:
            return True
        self._size = size
        return False

    def abandon(self) -> None:
        """Close a store whose file is gone (``gone``), and remove its journal files (-wal,
        -shm) where they are still this store's: SQLite leaves them when its file has moved,
        and the next open of the file now at the path would replay the old log into it (a
        restored backup silently rewritten with the pages of the file it replaced). Journal
        files that are not this store's (a restore's own) are left alone."""
        if self._overwritten:
            self._close_apart()
        else:
            self.close()
        for suffix, now in _identities(self.path, ("-wal", "-shm")).items():
            if now is not None and now == self._files.get(suffix):
                try:
                    os.unlink(self.path + suffix)
                except OSError as exc:
                    log.warning("removing %s%s: %s", self.path, suffix, exc)

    def _close_apart(self) -> None:
        """Close without a checkpoint into the file at the path, which another program wrote
        (a backup copied over it, same inode): SQLite leaves out the last connection's
        checkpoint only for a file no longer at its path, so the file is moved aside for
        the close and back (were the daemon killed between, the file stays at
        ``path.restore``, which the log names)."""
        aside = self.path + ".restore"
        log.info("keeping %s as it was written: moved to %s while this store closes, then "
                 "back", self.path, aside)
        try:
            os.rename(self.path, aside)
        except OSError as exc:
            log.error("moving %s aside: %s; closing without it: the file may take this "
                      "store's last pages, restore it again", self.path, exc)
            self.close()
            return
        try:
            self.close()
        finally:
            try:
                os.rename(aside, self.path)
            except OSError as exc:
                log.error("moving %s back to %s: %s; move it by hand", aside, self.path, exc)

    def close(self) -> None:
        if self._ckpt is not None:
            self._ckpt_stop.set()
            self._ckpt.join(10)
            self._ckpt = None
        try:
            self.db.close()
        except sqlite3.Error as exc:  # closing must never fail a shutdown
            log.warning("closing %s: %s", self.path, exc)


# what ``gone`` says of a database file another program wrote while the daemon ran
OVERWRITTEN = ("was written by another program, smaller than the daemon saw it (an older "
               "backup copied over it? a restore must be moved into place, not copied)")


def _identities(path: str, suffixes: Sequence[str] = ("", "-wal", "-shm")
                ) -> dict[str, tuple[int, int] | None]:
    """(st_dev, st_ino) of the database file and its journal files (None: no such file)."""
    out: dict[str, tuple[int, int] | None] = {}
    for suffix in suffixes:
        try:
            st = os.stat(path + suffix)
            out[suffix] = (st.st_dev, st.st_ino)
        except OSError:
            out[suffix] = None
    return out


def _held(state: str, stopped: Any) -> bool:
    """Whether a job in ``state`` with this ``stopped`` is a cancel whose agent's end is
    awaited (daemon/jobs.py): what ``jobs.held`` marks."""
    return state == "cancelled" and isinstance(stopped, dict) and stopped.get("held") is True


_CPUS_TEXT: dict[tuple[int, ...], str] = {}

def _cpus_text(cpus: list[int]) -> str:
    """JSON of a cpu list, without the general encoder (this runs once per stored result).

    A board has few cpu sets: their texts are kept (0.06 us a lookup against 0.4 to format),
    at most 4,096 of them."""
    key = tuple(cpus)
    text = _CPUS_TEXT.get(key)
    if text is None:
        if len(_CPUS_TEXT) >= 4096:
            _CPUS_TEXT.clear()
        text = _CPUS_TEXT[key] = "[" + ",".join(map(str, cpus)) + "]"
    return text


def migrated_text(path: str, before: int) -> str:
    """One log line for a store brought from schema version ``before`` to this daemon's (a
    line per version step told a new user of a fresh store ten times over)."""
    return (f"store {path} created (schema version {SCHEMA_VERSION})" if before == 0 else
            f"store {path} migrated from schema version {before} to {SCHEMA_VERSION}")


def _json_safe(value: Any) -> str:
    """JSON text where NaN and infinities (a failed fit's quality) become null."""
    return json.dumps(_clean(value), separators=(",", ":"), default=str)


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        try:
            return _clean(v.item())
        except (TypeError, ValueError):
            return str(v)
    return v


def _where(**equal: Any) -> tuple[str, list[Any]]:
    """`` WHERE a=? AND b IN (?, ?)`` and its arguments for the filters that are not None (a
    sequence: one of its values)."""
    parts, args = [], []
    for column, value in equal.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            parts.append(f"{column} IN ({', '.join('?' * len(value))})" if value else "0=1")
            args += list(value)
        else:
            parts.append(f"{column}=?")
            args.append(value)
    return (" WHERE " + " AND ".join(parts) if parts else ""), args
