"""A throwaway PostgreSQL server for tests: initdb in a temporary directory, listening on a unix
socket and a free loopback port, stopped and removed at teardown.

The server (``postgres`` itself, not ``pg_ctl``, which detaches it) is a child of the test
process that gets SIGQUIT, PostgreSQL's immediate shutdown, when that process ends however it
ends: a test run killed by ``timeout`` (SIGKILL) left its servers running before
(shared/lifeline.py's parent-death signal; its temporary directory stays in /tmp).

initdb and postgres refuse to run as root: as root the server runs as the ``postgres`` user
(Debian's package creates it), in a directory that user owns. Tests using :func:`pg_url` skip,
saying why, where the binaries are absent.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest


def _bindir() -> Path | None:
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(Path(d) / "initdb", os.X_OK):
            return Path(d)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def unavailable() -> str | None:
    """Why no test server can be started here; None when one can."""
    bindir = _bindir()
    if bindir is None:
        return ("PostgreSQL binaries not found (initdb, postgres); install Debian's "
                "'postgresql' package (.ci/run does)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no 'postgres' user to run the server as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]')"
    return None


class PgServer:
    def __init__(self) -> None:
        bindir = _bindir()
        assert bindir is not None
        self.bindir = bindir
        self.tmp = Path(tempfile.mkdtemp(prefix="opptune-pg-"))
        self.data = self.tmp / "data"
        self.sock = self.tmp / "sock"
        self.sock.mkdir()
        self.as_user: list[str] = []
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chmod(self.tmp, 0o700)
            for p in (self.tmp, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
            self.user = "postgres"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user,
                  "--locale=C", "-E", "UTF8", "--no-sync")
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        """The server, started as this process's child that ends with it, once it accepts
        connections (as ``pg_ctl -w`` waits for it)."""
        from opptune.shared.lifeline import dies_with_this_process
        as_user = {}
        if self.as_user:  # runuser would fork it, and a fork drops the parent-death signal
            pw = pwd.getpwnam("postgres")
            as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        with open(self.tmp / "server.log", "ab") as log:
            # no fsync: a test server's data need not survive an OS crash, and fsyncs are
            # slow here
            proc = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data), "-k", str(self.sock),
                 "-p", str(self.port), "-h", "127.0.0.1", "-F", "-c", "max_connections=200"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                preexec_fn=dies_with_this_process(signal.SIGQUIT), **as_user)
        deadline = time.monotonic() + 60
        while not self._accepts():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError("postgres did not start: "
                                   f"{(self.tmp / 'server.log').read_text()[-2000:]}")
            time.sleep(0.05)  # polls the server's readiness, as pg_ctl -w does
        return proc

    def _accepts(self) -> bool:
        import psycopg
        try:
            psycopg.connect(self.url(), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def _run(self, tool: str, *args: str) -> None:
        out = subprocess.run([*self.as_user, str(self.bindir / tool), *args],
                             capture_output=True, text=True, timeout=120)
        if out.returncode:
            log = (self.tmp / "server.log")
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed: {out.stdout}{out.stderr}{tail}")

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh empty database's URL (each test gets its own)."""
        import psycopg
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self.proc.send_signal(signal.SIGQUIT)  # immediate shutdown, as pg_ctl -m immediate
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)



@pytest.fixture(scope="session")
def pg_server():
    why = unavailable()
    if why:
        pytest.skip(why)
    server = PgServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a fresh PostgreSQL database on the session's test server."""
    return pg_server.new_database()
