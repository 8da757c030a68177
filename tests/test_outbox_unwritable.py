"""An outbox whose file cannot be written for a while: a board's SD card remounted read-only
after a disk error, a file made immutable. Walking a board: the run that finished then failed
its whole job ('the agent could not run the job: OperationalError: disk I/O error', a
traceback in the agent's log) and its result was lost. Now it waits in memory as on a full
disk, the agent says once what is wrong and what to do, and goes on once the file can be
written again: every result stored once.

The file is made unwritable with ``chattr +i`` (root, on a file system that has it), which
refuses writes to files already open, as a read-only remount does; a run of the workload
waits on a fifo, so the test knows which run finishes while the outbox cannot be written."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from procs import Cluster, wait_all_delivered, wait_until


def _chattr(flag: str, paths: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, text=True)


def _let_one_run_end(fifo: Path, c: Cluster) -> None:
    """Wait until a run of the gate workload reads the fifo, then let it end."""
    def opened():
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no run reads it yet
            assert c.agent.poll() is None, c.logs()
            return None
    fd = wait_until(opened, "a run of the gate workload", 60, c.logs)
    try:
        os.write(fd, b"go\n")
    finally:
        os.close(fd)


def _said(c: Cluster, text: str) -> bool:
    return text in (c.tmp / "agent.log").read_text(errors="replace")


@pytest.mark.integration
def test_a_result_waits_while_the_outbox_cannot_be_written(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root")
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    c = Cluster(tmp_path, kernels=(), reps=2, max_cores=1,
                extra_daemon={"auto_recommend": False})
    with open(c.agent_toml, "a") as fh:
        fh.write("[[workloads]]\nname = \"gate\"\ncommand = "
                 f"{json.dumps(['sh', '-c', f'read x < {fifo}'])}\n")
    state = tmp_path / "agent-state"
    frozen = [state / "outbox.db", state / "outbox.db-wal", state / "outbox.db-shm", state]
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(j.get("state") in ("sent", "running")
                                 for j in s.get("jobs") or []),
                   timeout=60, what="the sweep's job with the agent")
        try:
            done = _chattr("+i", frozen)
            if done.returncode:
                pytest.skip(f"chattr +i unavailable here: {done.stderr.strip()}")
            _let_one_run_end(fifo, c)
            wait_until(lambda: _said(c, "cannot be written"), "the agent saying so", 30,
                       c.logs)
            assert c.agent.poll() is None
        finally:
            _chattr("-i", frozen)
        wait_until(lambda: _said(c, "the outbox can be written again"),
                   "the agent storing the waiting result", 30, c.logs)
        _let_one_run_end(fifo, c)
        assert wait_all_delivered(c, 1, 60)["produced"] == 2
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == 2
        assert c.rows("SELECT state FROM jobs") == [("done",)]
    finally:
        stopped = c.stop()
    log = (tmp_path / "agent.log").read_text(errors="replace")
    assert stopped == {"agent": 0, "daemon": 0}, log
    assert "Traceback" not in log, log
    warning = [line for line in log.splitlines() if "cannot be written" in line]
    assert len(warning) == 1, warning
    assert (f"the outbox {state / 'outbox.db'} cannot be written (disk I/O error): its file "
            "system may have been remounted read-only after a disk error") in warning[0]
    assert "the finished run's result waits in memory and no new run starts" in warning[0]
