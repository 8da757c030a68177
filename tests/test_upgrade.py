"""An upgrade as an operator does it, on state made by older code (tests/data/upgrade-8371ffa:
a schema 9 store and an agent outbox holding results measured while that daemon was down):
today's daemon on that store and today's agent on that state directory. Every run, job,
recommendation and tune session stays, the waiting results are stored once, and the operator's
commands read the migrated store."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from opptune.daemon.store.schema import SCHEMA_VERSION
from procs import Cluster, assert_delivery, db_rows, delivery

DATA = Path(__file__).parent / "data" / "upgrade-8371ffa"
STOPPED_JOB = "job-fad13fb4af8848b591d9"  # the sweep the old daemon never saw finish


def _unpack(name: str, to: Path) -> Path:
    to.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(DATA / f"{name}.gz", "rb") as src, open(to, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return to


def _rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def opptune(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    # wide enough for the status's job ids on one line each
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def test_a_store_and_an_outbox_of_8371ffa_upgrade_with_nothing_lost(tmp_path):
    c = Cluster(tmp_path, kernels=("pi_integrate", "triad", "locked_update"), auto_sweep=False,
                extra_agent={"agent_id": "rpi4", "virtual_board": "rpi4"},
                extra_daemon={"auto_recommend": False})
    _unpack("opptune.db", Path(c.db))
    _unpack("outbox.db", tmp_path / "agent-state" / "outbox.db")
    before = {t: _rows(c.db, f"SELECT * FROM {t}") for t in
              ("runs", "jobs", "recommendations", "fits", "tune_sessions")}
    assert _rows(c.db, "SELECT MAX(version) FROM schema_version") == [(9,)]
    pending = assert_delivery(tmp_path / "agent-state", c.db)["pending"]
    assert pending == 43
    c.start_daemon()
    c.start_agent()
    try:
        # done once stored; the agent's outbox empties as the acks reach it
        st = c.wait_for(lambda s: any(j["job_id"] == STOPPED_JOB and j["state"] == "done"
                                      for j in s["jobs"])
                        and delivery(tmp_path / "agent-state", c.db)["pending"] == 0, 120,
                        "the stopped job done and acknowledged")
        d = assert_delivery(tmp_path / "agent-state", c.db, complete=True, context=c.logs())
        assert d["stored"] == d["produced"] == 90  # the runs of the agent's 9 jobs
        assert db_rows(c.db, "SELECT COUNT(*) FROM runs") == [(len(before["runs"]) + pending,)]
        assert db_rows(c.db, "SELECT COUNT(*) FROM runs_resent") == [(0,)]
        assert [(j["received"], j["expected"]) for j in st["jobs"]
                if j["job_id"] == STOPPED_JOB] == [(48, 48)]
        assert {j["job_id"]: j["state"] for j in st["jobs"]} == {
            row[0]: "done" for row in before["jobs"]}
        # what the old daemon stored is all there, the schema's new columns beside it
        assert _rows(c.db, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)]
        for table in ("recommendations", "fits", "tune_sessions"):
            width = len(before[table][0])
            assert [r[:width] for r in _rows(c.db, f"SELECT * FROM {table}")] == \
                before[table], table
        assert {r[0] for r in before["runs"]} <= {r[0] for r in
                                                   _rows(c.db, "SELECT msg_id FROM runs")}
        assert {r["config_id"] for r in st["recommendations"]} == {
            r[0] for r in before["recommendations"]}
        # the agent of 8371ffa kept nothing in force: no old row says it stood or was replaced
        assert all(r["replaced"] is None for r in st["recommendations"])
        (agent,) = st["agents"]
        assert agent["standing"] is None
        # the operator's commands on the migrated store
        ep = ("--daemon", c.endpoint)
        out = opptune("status", *ep, cwd=tmp_path)
        assert out.returncode == 0 and STOPPED_JOB in out.stdout, out.stderr
        assert "in force" not in out.stdout
        out = opptune("recommend", "--agent", "rpi4", "--workload", "triad", "--objective",
                      "edp", "--json", *ep, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["cores"] in (1, 2, 3, 4)
        out = opptune("report", "--out", str(tmp_path / "report"), *ep, cwd=tmp_path)
        assert out.returncode == 0 and "3 workload groups" in out.stdout, out.stderr
    finally:
        c.stop()
