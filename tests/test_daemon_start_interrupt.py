"""Ctrl-C while opptune-daemon starts (its imports: 0.3 s at load 8) printed a
KeyboardInterrupt traceback; it now says in one line what was interrupted and that nothing was
served, exit 130. A real daemon process, held at a known point of its start by a FIFO as its
configuration file. (The agent's start: tests/test_agent_start_signals.py.)"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _writer_when_read(fifo: str, proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """A write end of ``fifo`` once ``proc`` opened it to read (ENXIO until then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the process never opened the FIFO"
        time.sleep(0.02)


def test_ctrl_c_while_the_daemon_starts_is_one_line_not_a_traceback(tmp_path):
    """The same for opptune-daemon (its imports take 0.3 s at load 8): held in its start by a
    FIFO as its configuration file."""
    fifo = str(tmp_path / "daemon.toml")
    os.mkfifo(fifo)
    daemon = subprocess.Popen([str(Path(sys.executable).parent / "opptune-daemon"), "--config",
                               fifo], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writer = None
    try:
        writer = _writer_when_read(fifo, daemon)  # it reads its configuration
        daemon.send_signal(signal.SIGINT)
        out, err = daemon.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert daemon.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines() == [
        "opptune-daemon: interrupted while starting, before it served: no agent or command was "
        "answered; start it again"], err
    assert out == "" and not list(tmp_path.glob("*.db*"))
