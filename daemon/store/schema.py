"""The store's schema as migrations keyed by version.

Each entry of :data:`MIGRATIONS` moves the schema from ``version - 1`` to ``version``; a back end
applies the ones above the version recorded in ``schema_version``, each in its own transaction.
The SQL is plain enough for SQLite and PostgreSQL alike (TEXT, INTEGER, REAL, BLOB; JSON as
TEXT).

Version 2 stores each run's full record as msgpack (``record_msgpack``) instead of JSON text
(``record``): encoding the record as JSON was the largest single cost of ingest (28 us of a
record with every meter's fields, msgpack 5 us). Rows stored before keep their JSON; exactly one
of the two columns is set (CHECK). The columns the daemon queries stay columns.

Version 3 gives jobs a lifecycle (queued, sent, running, done, failed, expired): a ``reason``
for failed and expired jobs and the time of the last change (``updated``); the state a version
2 database called ``complete`` is ``done``.

Version 4 marks thermally throttled runs (``throttled``, from the record's flag): they stay
stored, and the rows a fit uses leave them out. Rows stored before count as not throttled. It
also keeps drift events (``drift``): a group whose verifications left the prediction interval
repeatedly is re-characterised; its fits use only runs received from ``since`` on.

Version 5 adds ``fit_claims``: which daemon is fitting a group (``owner``, NULL when none) and
since when, so that daemons sharing one database never fit the same group at once.

Version 6 makes a job's result sequence number unique (``runs_job_seq``): a result an agent
sends again under a new message id (a board reinstalled with its outbox lost, re-running a
resent job) is the same measurement and is no longer stored twice. Copies stored before move
to ``runs_resent`` (same columns; the first one received stays in ``runs``), so nothing stored
is lost.

Version 7 keeps ``opptune tune`` sessions (``tune_sessions``): the whole session as JSON text
(``body``), its agent and state as columns, saved at each of its state changes, so that a
daemon restarted mid-tune (even after kill -9) resumes the sessions not yet done or failed.

Version 8 keeps why a run is marked (``marked``, from the record: another process used its cpu
set beyond the agent's share, or it was throttled; NULL when clean): marked runs stay stored and
exported, and the rows a fit uses leave them out. Rows stored before count as clean. The copies
in ``runs_resent`` gain the column too, so both tables keep the same columns.

Version 9 keeps what a restarted daemon would otherwise forget: each agent's last doctor report
(``agents.doctor``, JSON, and when it came, ``doctor_at``: ``opptune status`` shows the verdict
before the agent's next hello), and the re-measurement of marked points (``remeasure``: one row
per point set waiting for its backoff, per re-measure job out, and per workload with points
never measured clean; the item as JSON in ``body``), so retries, backoff and never-clean
reports survive a restart (daemon/remeasure.py).

Version 10 drops the index ``runs_job`` (job_id, seq): since version 6 the unique
``runs_job_seq`` on the same columns serves every query by job, and each insert kept both up to
date (measured: 24.2-24.3 against 26.5-28.3 us of daemon CPU per stored result,
benchmarks/ingest.py).

Version 11 records which daemon of a fleet holds each agent's connection: ``daemons`` (each
running daemon's ``instance``, the ``endpoint`` agents and operators reach it at, when it
started and its last heartbeat, ``last_seen``, written each second; a daemon stopping deletes
its row) and ``agents.daemon`` (the instance that last heard the agent; NULL for rows stored
before). A daemon asked about an agent another daemon holds says where it is online.

Version 13 notes a recommendation in force on its board that a newer one applied there replaced
(``recommendations.replaced_by``, its config id, and ``replaced_at``, when; NULL: not replaced,
or stored before): its state keeps the verdict of its verification.
Version 14 keeps the stop of a job the agent stopped for its timeouts (``jobs.stopped``: JSON,
``{"after_timeouts": n, "points_not_run": k, "points": m, "definition": d}`` as the agent's
records of the runs it did not run say it; NULL for any other job). A row stored before
reads its stop from its reason, as the agent's text gave it (shared/records.job_stop).

Version 15 records each daemon's opptune version (``daemon_versions``: ``instance``,
``version``), written with its heartbeat, so that a fleet's status says which daemons run older
code. It is a table of its own and not a column of ``daemons``: a daemon of an earlier version
still running on the migrated store inserts its ``daemons`` row without naming the columns,
which one more column would make fail. A daemon with no row here predates this version.

Version 16 keeps the goal of a recommendation pushed for one other than time
(``recommendations.goal``: JSON, ``{"objective": o, "energy_j": {"value", "lower", "upper"}}``,
the goal answer's predicted energy and interval; NULL for time goals, the daemon's own pushes
and rows stored before) and the energy its verification runs measured (``verified_energy_j``,
their median; NULL without a meter), so an energy goal is judged on energy as well as time.

Version 17 scopes a drift event to its agent (``drift.agent_only``, 1): a workload's program
is each agent's (its configuration, its files), so its change on one agent of a platform ends
that agent's runs from before it, not those of the platform's other agents. Drift events of a
group's behaviour, and every row stored before, end the runs of every agent (0).

Version 18 indexes the jobs by state (``jobs_state``): the loop's once-a-second read of the
jobs that may expire and of the cancels another daemon took scanned every job, 68 ms a second
on SQLite and 109 ms on PostgreSQL with 100,000 jobs (benchmarks/job_queries.py). It also
indexes the runs recorded without running (``runs_not_run``: failed with no wall time, a
partial index of those rows only), which the jobs' ``not_run`` counts in the query that lists
them.

Version 19 keeps what the last hello of each agent said stands on its board, as the daemon
then held it (``agent_standings``: ``agent``, ``standings`` and ``dropped``, the JSON lists
of shared/standing.py, and ``said_at``, when they were said), so that a restarted daemon
shows them "as of" then until the agent's next hello confirms them. A table of its own, as
``daemon_versions`` is: a daemon of an earlier version inserts its ``agents`` rows without
naming the columns.

Version 21 marks the cancelled jobs whose agent's end is still awaited (``jobs.held``: 1, the
``held`` of the job's ``stopped``; NULL for every other job) and indexes those rows only
(``jobs_held``, a partial index in created order): every daemon of a fleet reads them each
second (daemon/jobs.py tell_held_cancels), and found them by reading the ``stopped`` text of
every cancelled job ever kept: with 50,000 of 100,000 jobs cancelled, 16 ms of CPU a second
on SQLite and 13 ms of the server's on PostgreSQL, growing with the history; now 0.01-0.02
and 0.04-0.14 ms, what the few held rows cost (benchmarks/job_queries.py). The store sets
the column wherever it writes ``stopped``; the migration sets it for the rows stored before
that the query it replaces matched. A daemon of an earlier version left running on the
migrated store (README, "Upgrading", stops every daemon first) writes ``stopped`` without
it: a cancel it takes reaches an agent another daemon holds at the agent's next hello, not
within a second.

Version 22 keeps the clashes a daemon of a fleet refuses for an agent id another daemon holds
(``agent_clashes``: ``agent``, the refusing daemon's ``instance``, the refused connection's
``claim`` as JSON (board, platform, agent instance, hashed machine and boot ids), ``since``
and ``last_seen``, written each second while both boards speak), so that the holder's own
daemon shows the clash too: it never hears the other board. A table of its own, which older
daemons neither read nor write.

Version 23 indexes the recommendations still unsent (``recommendations_unsent``, a partial
index of those rows only, by agent): each hello asks whether its agent has any, and found
none by reading every recommendation kept, under the write lock (20,000 kept: 2.4 ms of CPU
a hello on SQLite; now none to speak of, benchmarks/job_queries.py).
"""

from __future__ import annotations

SCHEMA_VERSION = 24

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE platforms (
               id TEXT PRIMARY KEY,
               description TEXT NOT NULL,
               first_seen REAL NOT NULL,
               last_seen REAL NOT NULL)""",
        """CREATE TABLE agents (
               id TEXT PRIMARY KEY,
               platform TEXT NOT NULL REFERENCES platforms(id),
               workloads TEXT NOT NULL DEFAULT '[]',
               agent_version TEXT,
               first_seen REAL NOT NULL,
               last_seen REAL NOT NULL)""",
        """CREATE TABLE workloads (
               name TEXT PRIMARY KEY,
               description TEXT NOT NULL DEFAULT '{}',
               first_seen REAL NOT NULL)""",
        """CREATE TABLE jobs (
               job_id TEXT PRIMARY KEY,
               agent TEXT NOT NULL,
               workload TEXT NOT NULL,
               size TEXT NOT NULL,
               points TEXT NOT NULL,
               n_points INTEGER NOT NULL,
               reps INTEGER NOT NULL,
               warmup INTEGER NOT NULL,
               expected INTEGER NOT NULL,
               created REAL NOT NULL,
               state TEXT NOT NULL)""",
        "CREATE INDEX jobs_agent_workload ON jobs(agent, workload)",
        """CREATE TABLE runs (
               msg_id TEXT PRIMARY KEY,
               agent TEXT NOT NULL,
               job_id TEXT,
               seq INTEGER,
               platform TEXT NOT NULL,
               workload TEXT NOT NULL,
               input TEXT NOT NULL,
               variant TEXT NOT NULL,
               cores INTEGER NOT NULL,
               cpus TEXT NOT NULL,
               threads INTEGER NOT NULL,
               freq_mhz REAL,
               rep INTEGER NOT NULL,
               time_s REAL,
               wall_s REAL,
               user_s REAL,
               sys_s REAL,
               energy_j REAL,
               ok INTEGER NOT NULL,
               virtual INTEGER NOT NULL,
               received REAL NOT NULL,
               record TEXT NOT NULL)""",
        "CREATE INDEX runs_job ON runs(job_id, seq)",
        "CREATE INDEX runs_group ON runs(platform, workload, input, variant)",
        """CREATE TABLE fits (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               platform TEXT NOT NULL,
               workload TEXT NOT NULL,
               input TEXT NOT NULL,
               variant TEXT NOT NULL,
               model TEXT NOT NULL,
               params TEXT NOT NULL,
               quality TEXT NOT NULL,
               runners_up TEXT NOT NULL,
               created REAL NOT NULL)""",
        "CREATE INDEX fits_group ON fits(platform, workload, input, variant)",
        """CREATE TABLE recommendations (
               id TEXT PRIMARY KEY,
               agent TEXT NOT NULL,
               platform TEXT NOT NULL,
               workload TEXT NOT NULL,
               input TEXT NOT NULL,
               variant TEXT NOT NULL,
               cores INTEGER NOT NULL,
               cpus TEXT NOT NULL,
               threads INTEGER NOT NULL,
               freq_khz INTEGER,
               predicted_time_s REAL,
               predicted_lower_s REAL,
               predicted_upper_s REAL,
               model TEXT,
               state TEXT NOT NULL,
               verified_time_s REAL,
               error TEXT,
               created REAL NOT NULL,
               updated REAL NOT NULL)""",
    ],
    2: [
        # SQLite cannot relax NOT NULL in place: the table is rebuilt, rows copied as they are.
        """CREATE TABLE runs_v2 (
               msg_id TEXT PRIMARY KEY,
               agent TEXT NOT NULL,
               job_id TEXT,
               seq INTEGER,
               platform TEXT NOT NULL,
               workload TEXT NOT NULL,
               input TEXT NOT NULL,
               variant TEXT NOT NULL,
               cores INTEGER NOT NULL,
               cpus TEXT NOT NULL,
               threads INTEGER NOT NULL,
               freq_mhz REAL,
               rep INTEGER NOT NULL,
               time_s REAL,
               wall_s REAL,
               user_s REAL,
               sys_s REAL,
               energy_j REAL,
               ok INTEGER NOT NULL,
               virtual INTEGER NOT NULL,
               received REAL NOT NULL,
               record TEXT,
               record_msgpack BLOB,
               CHECK ((record IS NULL) <> (record_msgpack IS NULL)))""",
        "INSERT INTO runs_v2 SELECT *, NULL FROM runs",
        "DROP TABLE runs",
        "ALTER TABLE runs_v2 RENAME TO runs",
        "CREATE INDEX runs_job ON runs(job_id, seq)",
        "CREATE INDEX runs_group ON runs(platform, workload, input, variant)",
    ],
    3: [
        "ALTER TABLE jobs ADD COLUMN reason TEXT",
        "ALTER TABLE jobs ADD COLUMN updated REAL",
        "UPDATE jobs SET updated = created",
        "UPDATE jobs SET state = 'done' WHERE state = 'complete'",
    ],
    4: [
        "ALTER TABLE runs ADD COLUMN throttled INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE drift (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               agent TEXT NOT NULL,
               platform TEXT NOT NULL,
               workload TEXT NOT NULL,
               input TEXT NOT NULL,
               variant TEXT NOT NULL,
               reason TEXT NOT NULL,
               job_ids TEXT NOT NULL,
               error TEXT,
               since REAL NOT NULL)""",
        "CREATE INDEX drift_group ON drift(platform, workload, input, variant)",
    ],
    5: [
        """CREATE TABLE fit_claims (
               platform TEXT NOT NULL,
               workload TEXT NOT NULL,
               input TEXT NOT NULL,
               variant TEXT NOT NULL,
               owner TEXT,
               claimed REAL NOT NULL,
               PRIMARY KEY (platform, workload, input, variant))""",
    ],
    6: [
        "CREATE TABLE runs_resent AS SELECT * FROM runs WHERE 1 = 0",
        """INSERT INTO runs_resent SELECT * FROM runs r WHERE r.job_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM runs o WHERE o.job_id = r.job_id AND o.seq = r.seq AND
               (o.received < r.received OR (o.received = r.received AND o.msg_id < r.msg_id)))""",
        "DELETE FROM runs WHERE msg_id IN (SELECT msg_id FROM runs_resent)",
        "CREATE UNIQUE INDEX runs_job_seq ON runs(job_id, seq)",
    ],
    7: [
        """CREATE TABLE tune_sessions (
               tune_id TEXT PRIMARY KEY,
               agent TEXT NOT NULL,
               state TEXT NOT NULL,
               body TEXT NOT NULL,
               started REAL NOT NULL,
               updated REAL NOT NULL)""",
        "CREATE INDEX tune_sessions_state ON tune_sessions(state)",
    ],
    8: [
        "ALTER TABLE runs ADD COLUMN marked TEXT",
        "ALTER TABLE runs_resent ADD COLUMN marked TEXT",
    ],
    9: [
        "ALTER TABLE agents ADD COLUMN doctor TEXT",
        "ALTER TABLE agents ADD COLUMN doctor_at REAL",
        """CREATE TABLE remeasure (
               id TEXT PRIMARY KEY,
               agent TEXT NOT NULL,
               state TEXT NOT NULL,
               body TEXT NOT NULL,
               updated REAL NOT NULL)""",
    ],
    10: [
        "DROP INDEX runs_job",
    ],
    11: [
        "ALTER TABLE agents ADD COLUMN daemon TEXT",
        """CREATE TABLE daemons (
               instance TEXT PRIMARY KEY,
               endpoint TEXT NOT NULL,
               started REAL NOT NULL,
               last_seen REAL NOT NULL)""",
    ],
    12: [
        # whether a recommendation stays in force on the board after its verification (NULL
        # before: it stayed), kept for one sent when its agent returns
        "ALTER TABLE recommendations ADD COLUMN keep INTEGER",
    ],
    13: [
        "ALTER TABLE recommendations ADD COLUMN replaced_by TEXT",
        "ALTER TABLE recommendations ADD COLUMN replaced_at REAL",
    ],
    14: [
        "ALTER TABLE jobs ADD COLUMN stopped TEXT",
    ],
    15: [
        """CREATE TABLE daemon_versions (
               instance TEXT PRIMARY KEY,
               version TEXT NOT NULL)""",
    ],
    16: [
        "ALTER TABLE recommendations ADD COLUMN goal TEXT",
        "ALTER TABLE recommendations ADD COLUMN verified_energy_j REAL",
    ],
    17: [
        # a drift that ends the runs of its agent only (a changed program); 0: of the platform
        "ALTER TABLE drift ADD COLUMN agent_only INTEGER NOT NULL DEFAULT 0",
    ],
    18: [
        "CREATE INDEX jobs_state ON jobs(state, created)",
        # the predicate as the queries write it (sqlite.NOT_RUN_SQL): both planners then use it
        "CREATE INDEX runs_not_run ON runs(job_id) WHERE ok = 0 AND wall_s IS NULL",
    ],
    19: [
        """CREATE TABLE agent_standings (
               agent TEXT PRIMARY KEY,
               standings TEXT NOT NULL,
               dropped TEXT NOT NULL,
               said_at REAL NOT NULL)""",
    ],
    20: [
        # the hashed machine id and boot id of the board that holds the agent id, as its last
        # hello said them (NULL: not said): a daemon of the fleet tells a hello of another
        # board of the id from the holder's failing over to it (registry.claim_elsewhere)
        "ALTER TABLE agents ADD COLUMN machine TEXT",
        "ALTER TABLE agents ADD COLUMN boot TEXT",
    ],
    21: [
        "ALTER TABLE jobs ADD COLUMN held INTEGER",
        # the rows held_cancels matched before: ``stopped`` as every version writes it
        # (compact JSON); the read decides on the JSON of these few
        "UPDATE jobs SET held = 1 WHERE state = 'cancelled' AND stopped LIKE '%\"held\":true%'",
        # the predicate as held_cancels writes it (the literal 1): both planners then use it
        "CREATE INDEX jobs_held ON jobs(created) WHERE held = 1",
    ],
    22: [
        """CREATE TABLE agent_clashes (
               agent TEXT NOT NULL,
               instance TEXT NOT NULL,
               claim TEXT NOT NULL,
               since REAL NOT NULL,
               last_seen REAL NOT NULL,
               PRIMARY KEY (agent, instance))""",
    ],
    23: [
        # the predicate as take_unsent writes it (the literal 'unsent'): both planners then
        # use it
        "CREATE INDEX recommendations_unsent ON recommendations(agent) WHERE state = 'unsent'",
    ],
    24: [
        # `opptune recover`'s openings, in the store rather than one daemon's memory: a
        # restarted daemon keeps them, and every daemon of a fleet asks the agents connected
        # to it (codes: a JSON list of the refusal codes asked for again)
        """CREATE TABLE recovery (
               agent TEXT PRIMARY KEY,
               open_until REAL NOT NULL,
               codes TEXT NOT NULL,
               opened REAL NOT NULL)""",
    ],
}
