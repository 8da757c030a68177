"""The SQLite store's WAL stays bounded under a steady stream of commits: past
WAL_RESTART_BYTES the checkpoint thread restarts the log and the file is cut back, where
passive checkpoints alone let it grow for as long as commits keep coming."""

import time
from pathlib import Path

from opptune.daemon.store import ResultIn
from opptune.daemon.store import sqlite as sqlite_store
from opptune.shared.records import RunRecord


def test_the_wal_file_is_cut_back_while_commits_keep_coming(tmp_path, monkeypatch):
    limit = 256 << 10
    monkeypatch.setattr(sqlite_store, "WAL_RESTART_BYTES", limit)
    db = tmp_path / "s.db"
    store = sqlite_store.SQLiteStore(str(db), checkpoint_s=0.01)
    wal = Path(str(db) + "-wal")
    rec = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1, rep=0,
                    time_s=1.0)
    raw = rec.to_dict()
    n, largest, shrunk = 0, 0, False
    deadline = time.monotonic() + 120
    try:
        # commit batches back to back until the file is seen shrinking after it outgrew the
        # limit (a restart cut it back), or the deadline passes
        while not shrunk and time.monotonic() < deadline:
            store.insert_results([ResultIn(f"m{n + i}", "a1", "j", n + i, rec, raw)
                                  for i in range(200)], now=1.0)
            n += 200
            size = wal.stat().st_size
            shrunk = largest > limit and size < largest
            largest = max(largest, size)
        assert shrunk, f"WAL grew to {largest} bytes and was never cut back"
        count = store.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        assert count == n  # every committed row is still there
    finally:
        store.close()
