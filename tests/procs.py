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

from opptune.daemon.client import DaemonUnreachable, QueryFailed, _refused, query


# The tests' agents run their kernels with this interpreter, which other users may not be able
# to read (a home of mode 0700): running as root, they run their workloads as root on purpose.
AGENT_RUN_AS: dict[str, str] = {"run_as": "root"} if os.geteuid() == 0 else {}
RUN_AS_OPTION: list[str] = ["--run-as", "root"] if os.geteuid() == 0 else []


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
                 database: str | None = None, extra_daemon: dict | None = None,
                 agent_prefix: list[str] | None = None, endpoint: str | None = None,
                 daemon_prefix: list[str] | None = None):
        """``database``: a postgresql:// URL (default: an SQLite file in ``tmp``).
        ``extra_daemon``/``extra_agent``: configuration keys that replace or add to the
        defaults; ``agent_prefix``: a command the agent runs under (``ip netns exec NS``);
        ``endpoint``: where the daemon answers this test (default: a free loopback port);
        ``daemon_prefix``: the same for the daemon (``strace -f -o FILE``)."""
        self.tmp = tmp
        self.endpoint = endpoint or free_endpoint()
        self.db = database or tmp / "opptune.db"
        self.daemon_toml = write_toml(tmp / "daemon.toml", {
            "bind": self.endpoint, "database": str(self.db), "heartbeat_s": 0.5,
            "agent_timeout_s": 3.0, "auto_sweep": auto_sweep, "auto_recommend": True,
            # the machine is shared: its load marks runs, which these tests of the pipeline
            # accept (tests/test_remeasure.py checks that marked runs are measured again)
            "verify_reps": 2, "accept_load": True, **(extra_daemon or {}),
        }, {"sweep": {"size": size, "reps": reps, "warmup": warmup, "max_cores": max_cores}})
        agent = {"agent_id": "test-agent", "daemon": self.endpoint,
                 "state_dir": str(tmp / "agent-state"), "heartbeat_s": 0.5,
                 "bench_kernels": list(kernels), **AGENT_RUN_AS}
        agent.update(extra_agent or {})
        self.agent_toml = write_toml(tmp / "agent.toml", agent)
        self.agent_prefix = list(agent_prefix or [])
        self.daemon_prefix = list(daemon_prefix or [])
        self.daemon: subprocess.Popen | None = None
        self.agent: subprocess.Popen | None = None

    def _spawn(self, module: str, config: Path, log: str,
               prefix: list[str] | None = None) -> subprocess.Popen:
        fh = open(self.tmp / log, "ab")
        try:
            return subprocess.Popen([*(prefix or []), sys.executable, "-m", module, "--config",
                                     str(config)],
                                    stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        finally:
            fh.close()

    def start_daemon(self) -> None:
        """Start the daemon and return once its endpoint takes connections (or it exited): an
        operator command's first query is refused at once where nothing listens yet, and
        under load the daemon's bind comes seconds after its start."""
        self.daemon = proc = self._spawn("opptune.daemon.service", self.daemon_toml,
                                         "daemon.log", self.daemon_prefix)
        try:
            wait_until(lambda: proc.poll() is not None or not _refused(self.endpoint),
                       f"the daemon listening on {self.endpoint}", 60, self.logs)
        except BaseException:
            self.stop()  # the test's own stop comes after this call: none is left running
            raise

    def start_agent(self) -> None:
        self.agent = self._spawn("opptune.agent", self.agent_toml, "agent.log",
                                 self.agent_prefix)

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
                 what: str = "condition", poll_s: float = 0.05) -> dict[str, Any]:
        """Poll the daemon's status every ``poll_s`` until ``predicate`` holds; fail with the
        logs otherwise."""
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
            # a status costs the daemon a look at its store: asked back to back, they took
            # most of the CPU of the suite's cluster tests (the daemon's and this process's)
            time.sleep(poll_s)
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


# threads 1 answers at once; from 2 threads on the program hangs (until run_timeout_s)
HANGS_FROM_2 = ["sh", "-c", "test {threads} -lt 2 && echo '{\"time_s\": 0.01}' && exit 0; "
                "exec sleep 30"]


def hanging_board(tmp_path: Path, hangs: list[str]) -> Cluster:
    """A daemon and an agent on a virtual rpi4 (4 cores) with two command workloads: 'hangs'
    running ``hangs``, 'quick' that always answers; each run times out after 1 s and a job
    stops after 2 points in a row timed out. Not started."""
    c = Cluster(tmp_path, kernels=(), auto_sweep=False, max_cores=4, reps=1,
                extra_daemon={"auto_recommend": False},
                extra_agent={"virtual_board": "rpi4", "run_timeout_s": 1.0,
                             "stop_after_timeouts": 2})
    text = c.agent_toml.read_text()
    c.agent_toml.write_text(text + "".join(
        f"[[workloads]]\nname = \"{name}\"\ncommand = {json.dumps(cmd)}\n"
        for name, cmd in (("hangs", hangs), ("quick", ["true"]))))
    return c


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
    return len([r for r in recs if r.get("state") in (
        "verified", "unconfirmed", "off", "refused", "failed")]) >= n


def check_verdict(rec: dict[str, Any]) -> None:
    """A measured recommendation is "verified" exactly when its time lies within the stored
    prediction interval and that interval lies within twice and half the prediction,
    "unconfirmed" within a wider one, else "off" with "off by X %" (times on a shared or
    modelled board may leave a narrow interval)."""
    lo, hi, p = rec["predicted_lower_s"], rec["predicted_upper_s"], rec["predicted_time_s"]
    inside = lo <= rec["verified_time_s"] <= hi
    narrow = p / 2 <= lo and hi <= 2 * p
    assert rec["state"] == (("verified" if narrow else "unconfirmed") if inside else "off"), rec
    assert inside or rec["error"].startswith("off by "), rec


def delivery(state_dir: str | Path, db: str | Path) -> dict[str, Any]:
    """The agent's outbox against the daemon's store, for every result the agent produced
    (seq below its job's ``next_seq``): ``lost`` were neither pending in the outbox nor stored
    (acked but not stored), ``duplicates`` stored more than once, ``unexpected`` stored but never
    produced, ``renamed`` stored under another id than the outbox's. Read in this order (agent,
    then store) so that a result acked between the two reads is still seen as stored."""
    from opptune.shared import protocol as P
    jobs, outbox, rejected = _agent_snapshot(state_dir)
    pending = {}
    for mid, data in outbox:
        msg = P.decode(data)
        if msg["type"] == "result":
            pending[(msg["body"]["job_id"], msg["body"]["seq"])] = mid
    produced = {(j, s) for j, n in jobs.items() for s in range(n)}
    stored: dict[tuple[str, int], list[str]] = {}
    for mid, job_id, seq in db_rows(db, "SELECT msg_id, job_id, seq FROM runs WHERE job_id IN "
                                        "(SELECT job_id FROM jobs)"):
        stored.setdefault((job_id, seq), []).append(mid)
    # a live agent may have measured (and the daemon stored) more since the first read:
    # "unexpected" is judged against what the agent had measured after the store was read
    produced_after = {(j, s) for j, n in _agent_snapshot(state_dir)[0].items()
                      for s in range(n)}
    return {
        "produced": len(produced), "pending": len(pending), "stored": len(stored),
        "rejected": rejected,
        "lost": sorted(produced - set(pending) - set(stored)),
        "duplicates": sorted(k for k, ids in stored.items() if len(ids) > 1),
        "unexpected": sorted(set(stored) - produced_after),
        "renamed": sorted(k for k, ids in stored.items() if k in pending and
                          pending[k] not in ids),
    }


def _agent_snapshot(state_dir: str | Path) -> tuple[dict[str, int], list[tuple], int]:
    """(job id -> next seq, outbox rows, rejected count) in one read transaction."""
    con = sqlite3.connect(Path(state_dir) / "outbox.db", timeout=10)
    try:
        con.execute("BEGIN")
        jobs = dict(con.execute("SELECT job_id, next_seq FROM jobs"))
        outbox = con.execute("SELECT id, data FROM outbox").fetchall()
        rejected = con.execute("SELECT COUNT(*) FROM rejected").fetchone()[0]
        con.execute("COMMIT")
    finally:
        con.close()
    return jobs, outbox, rejected


def assert_delivery(state_dir: str | Path, db: str | Path, *, complete: bool = False,
                    context: str = "") -> dict[str, Any]:
    """Every acknowledged result stored exactly once, every other one still in the outbox;
    with ``complete``, the outbox is empty and everything produced is stored."""
    d = delivery(state_dir, db)
    bad = {k: d[k] for k in ("lost", "duplicates", "unexpected", "renamed") if d[k]}
    assert not bad and d["rejected"] == 0, f"{bad} rejected={d['rejected']} {d}\n{context}"
    if complete:
        assert d["pending"] == 0 and d["stored"] == d["produced"], f"{d}\n{context}"
    return d


def run_on_terminal_stderr(cmd: list[str], timeout: float = 120
                           ) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``cmd`` with stderr on a pseudo-terminal (what a person at a shell has), stdout
    captured: the process and what it wrote to the terminal."""
    import pty
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=slave, timeout=timeout)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other end is closed and read out
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    return proc, seen.decode()


def wait_until(cond: Callable[[], Any], what: str, timeout: float = 60.0,
               context: Callable[[], str] = lambda: "", poll_s: float = 0.05) -> Any:
    """Poll ``cond`` until it returns something true; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{context()}")
        time.sleep(poll_s)


class VethLink:
    """A network namespace holding one end of a veth pair (the board's side), the other end
    in this namespace (the daemon's side), so that a test can cut the link for real (the
    interface goes down: packets are dropped, no reset is sent) and restore it. Needs root
    and ``ip``; ``close`` removes both even after a failure."""

    def __init__(self, tag: str | None = None):
        tag = tag or f"{os.getpid() % 100000}"
        self.ns = f"opptune-{tag}"
        self.host_if, self.ns_if = f"opv{tag}a", f"opv{tag}b"
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True,
                              text=True).stdout
        net = next(n for n in [*range(1 + os.getpid() % 250, 251), *range(1, 251)]
                   if f" 10.213.{n}." not in used)  # a subnet no other test's link has
        self.host_ip, self.ns_ip = f"10.213.{net}.1", f"10.213.{net}.2"
        self.prefix = ["ip", "netns", "exec", self.ns]
        try:
            self._ip("netns", "add", self.ns)
            self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            self._ip("link", "set", self.ns_if, "netns", self.ns)
            self._ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            self._ip("link", "set", self.host_if, "up")
            for args in (("addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if),
                         ("link", "set", self.ns_if, "up"), ("link", "set", "lo", "up")):
                self._ip("-n", self.ns, *args)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _ip(*args: str, check: bool = True) -> None:
        p = subprocess.run(["ip", *args], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")

    def cut(self) -> None:
        self._ip("link", "set", self.host_if, "down")

    def restore(self) -> None:
        self._ip("link", "set", self.host_if, "up")

    def close(self) -> None:
        self._ip("link", "del", self.host_if, check=False)  # takes its peer with it
        self._ip("netns", "del", self.ns, check=False)


def netns_usable() -> str | None:
    """None when network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        VethLink(f"probe{os.getpid() % 100000}").close()
    except (RuntimeError, FileNotFoundError) as exc:
        return f"cannot make a network namespace: {exc}"
    return None


def stored_results(db: str | Path) -> int:
    """Result rows of issued jobs in the daemon's SQLite store (0 before it exists)."""
    if not Path(db).exists():  # connecting would create it under the daemon's feet
        return 0
    try:
        return db_rows(db, "SELECT COUNT(*) FROM runs WHERE job_id IN "
                           "(SELECT job_id FROM jobs)")[0][0]
    except sqlite3.OperationalError:  # schema not made yet
        return 0


def produced_results(state_dir: str | Path) -> int:
    """Results the agent has measured and put in its outbox (its jobs' sequence numbers)."""
    path = Path(state_dir) / "outbox.db"
    if not path.exists():
        return 0
    try:
        return db_rows(path, "SELECT COALESCE(SUM(next_seq), 0) FROM jobs")[0][0]
    except sqlite3.OperationalError:
        return 0


def jobs_done(db: str | Path) -> int:
    if not Path(db).exists():
        return 0
    try:
        return db_rows(db, "SELECT COUNT(*) FROM jobs WHERE state = 'done'")[0][0]
    except sqlite3.OperationalError:
        return 0


def kill_at_random_moment(c: Cluster, which: str, rng: Any, n_jobs: int, max_ahead: int = 6,
                          timeout: float = 120.0) -> dict[str, Any] | None:
    """One round of a kill -9 loop: wait until ``which`` ("daemon" or "agent") has made
    ``rng.randint(0, max_ahead)`` more progress (results stored by the daemon, results
    measured by the agent: a moment observed, not slept to), SIGKILL it, check the outbox
    against the store, start it again. None when the sweep finished first."""
    state = c.tmp / "agent-state"
    progress = (lambda: stored_results(c.db)) if which == "daemon" else \
        (lambda: produced_results(state))
    ahead = rng.randint(0, max_ahead)
    target = progress() + ahead
    moment = wait_until(lambda: "done" if jobs_done(c.db) >= n_jobs else
                        "target" if progress() >= target else None,
                        f"{which} progress to {target}", timeout, c.logs, poll_s=0.01)
    if moment == "done":
        return None
    c.kill(which)
    figures = assert_delivery(state, c.db, context=c.logs())
    getattr(c, f"start_{which}")()
    return {"killed": which, "ahead": ahead, "at": target, **{k: figures[k] for k in (
        "produced", "pending", "stored")}}


def wait_all_delivered(c: Cluster, n_jobs: int, timeout: float = 300.0) -> dict[str, Any]:
    """Wait for the sweep's ``n_jobs`` jobs to be done and the outbox to be empty; then every
    result is stored exactly once (asserted)."""
    state = c.tmp / "agent-state"

    def finished():
        for name in ("daemon", "agent"):
            proc = getattr(c, name)
            if proc.poll() is not None:
                raise AssertionError(f"{name} died ({proc.returncode}):\n{c.logs()}")
        if jobs_done(c.db) < n_jobs:
            return None
        d = delivery(state, c.db)
        return d if d["pending"] == 0 else None

    wait_until(finished, "every result delivered", timeout, c.logs, poll_s=0.1)
    return assert_delivery(state, c.db, complete=True, context=c.logs())
