"""The daemon tells systemd it is ready (Type=notify, sd_notify(3)) once it listens: before,
under Type=simple, `systemctl start opptune-daemon && opptune status` could find nothing
listening yet (the bind comes seconds after the start on a loaded board) and be refused."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from opptune.daemon.client import query
from opptune.shared.sd_notify import notify
from procs import free_endpoint, write_toml


def test_the_daemon_says_ready_once_it_listens(tmp_path):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as manager:
        manager.bind(path)
        manager.settimeout(120)
        endpoint = free_endpoint()
        cfg = write_toml(tmp_path / "daemon.toml", {"bind": endpoint,
                                                    "database": str(tmp_path / "d.db")})
        with open(tmp_path / "daemon.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "opptune.daemon.service",
                                     "--config", str(cfg)], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**os.environ, "NOTIFY_SOCKET": path})
        try:
            said = manager.recv(4096)
            assert said == b"READY=1"
            # at once, as a command run after `systemctl start` is: it listens
            assert query(endpoint, "status", timeout_s=30, first=True)["agents"] == []
        finally:
            proc.terminate()
            assert proc.wait(30) == 0, (tmp_path / "daemon.log").read_text()


def test_nothing_is_sent_without_a_manager_or_where_it_cannot_be_told(tmp_path, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "none"))  # no such socket
    assert notify("READY=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", "relative")  # neither a path nor abstract
    assert notify("READY=1") is False


def test_an_abstract_socket_is_told_too(monkeypatch):
    name = f"opptune-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as manager:
        manager.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("STATUS=x") is True
        assert manager.recv(100) == b"STATUS=x"
