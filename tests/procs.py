"""Start the real daemon and agent as separate processes for integration tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from opptune.daemon.client import DaemonUnreachable, QueryFailed, query


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def write_toml(path: Path, values: dict[str, Any], tables: dict[str, dict[str, Any]] | None = None):
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    for name, table in (tables or {}).items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class Cluster:
    """One daemon and one agent in ``tmp`` with configs written for a small sweep."""

    def __init__(self, tmp: Path, *, kernels=("pi_integrate", "triad", "locked_update"),
                 size="small", reps=2,
                 warmup=0, max_cores=2, auto_sweep=True, extra_agent: dict | None = None,
                 database: str | None = None, extra_daemon: dict | None = None):
        """``database``: a postgresql:// URL (default: an SQLite file in ``tmp``)."""
        self.tmp = tmp
        self.endpoint = free_endpoint()
        self.db = database or tmp / "opptune.db"
        self.daemon_toml = write_toml(tmp / "daemon.toml", {
            "bind": self.endpoint, "database": str(self.db), "heartbeat_s": 0.5,
            "agent_timeout_s": 3.0, "auto_sweep": auto_sweep, "auto_recommend": True,
            "verify_reps": 2, **(extra_daemon or {}),
        }, {"sweep": {"size": size, "reps": reps, "warmup": warmup, "max_cores": max_cores}})
        agent = {"agent_id": "test-agent", "daemon": self.endpoint,
                 "state_dir": str(tmp / "agent-state"), "heartbeat_s": 0.5,
                 "bench_kernels": list(kernels)}
        agent.update(extra_agent or {})
        self.agent_toml = write_toml(tmp / "agent.toml", agent)
        self.daemon: subprocess.Popen | None = None
        self.agent: subprocess.Popen | None = None

    def _spawn(self, module: str, config: Path, log: str) -> subprocess.Popen:
        fh = open(self.tmp / log, "ab")
        try:
            return subprocess.Popen([sys.executable, "-m", module, "--config", str(config)],
                                    stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        finally:
            fh.close()

    def start_daemon(self) -> None:
        self.daemon = self._spawn("opptune.daemon.service", self.daemon_toml, "daemon.log")

    def start_agent(self) -> None:
        self.agent = self._spawn("opptune.agent", self.agent_toml, "agent.log")

    def kill(self, which: str) -> None:
        proc = getattr(self, which)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> dict[str, int | None]:
        codes = {}
        for name in ("agent", "daemon"):
            proc = getattr(self, name)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            codes[name] = proc.returncode
        return codes

    def status(self) -> dict[str, Any] | None:
        try:
            return query(self.endpoint, "status", timeout_s=1.0)
        except (DaemonUnreachable, QueryFailed):
            return None

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0,
                 what: str = "condition") -> dict[str, Any]:
        """Poll the daemon's status until ``predicate`` holds; fail with the logs otherwise."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for name in ("daemon", "agent"):
                proc = getattr(self, name)
                if proc is not None and proc.poll() is not None:
                    raise AssertionError(f"{name} died ({proc.returncode}):\n{self.logs()}")
            st = self.status()  # blocks up to 1 s waiting for the reply
            if st is not None:
                last = st
                if predicate(st):
                    return st
            else:
                time.sleep(0.05)  # daemon not up yet; its start is what we wait for
        raise AssertionError(f"timed out waiting for {what}; last status: "
                             f"{json.dumps(last, default=str)[:2000]}\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for log in ("daemon.log", "agent.log"):
            p = self.tmp / log
            if p.exists():
                out.append(f"--- {log}\n" + "\n".join(p.read_text(errors="replace")
                                                      .splitlines()[-40:]))
        return "\n".join(out)

    def rows(self, sql: str, *params) -> list[tuple]:
        return db_rows(self.db, sql, *params)


def db_rows(db: str | Path, sql: str, *params) -> list[tuple]:
    """Rows of ``sql`` (``?`` placeholders) from an SQLite file or a PostgreSQL URL."""
    if str(db).startswith("postgresql://"):
        import psycopg
        with psycopg.connect(str(db)) as con:
            return [tuple(r) for r in con.execute(sql.replace("?", "%s"), params).fetchall()]
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def received(st: dict[str, Any]) -> int:
    return sum(int(j.get("received") or 0) for j in st.get("jobs") or [])


def expected(st: dict[str, Any]) -> int:
    return sum(int(j.get("expected") or 0) for j in st.get("jobs") or [])


def all_jobs_complete(st: dict[str, Any], n_jobs: int) -> bool:
    jobs = st.get("jobs") or []
    return len(jobs) == n_jobs and all(int(j.get("received") or 0) >= int(j.get("expected") or 1)
                                       for j in jobs)


def recommendations_final(st: dict[str, Any], n: int) -> bool:
    recs = st.get("recommendations") or []
    return len([r for r in recs if r.get("state") in ("verified", "off", "refused", "failed")]) >= n


def check_verdict(rec: dict[str, Any]) -> None:
    """A measured recommendation is "verified" exactly when its time lies within the stored
    prediction interval, else "off" with "off by X %" (times on a shared or modelled board
    may leave a narrow interval)."""
    inside = rec["predicted_lower_s"] <= rec["verified_time_s"] <= rec["predicted_upper_s"]
    assert rec["state"] == ("verified" if inside else "off"), rec
    assert inside or rec["error"].startswith("off by "), rec
