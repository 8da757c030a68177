"""SIGTERM or SIGHUP to ``opptune demo`` stops the daemon and the agent it started.

The children lead their own sessions, so only the demo can stop them: after the signal no
process of the demo's tree may be left, and the demo still writes what it measured.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from opptune.daemon.client import DaemonUnreachable, QueryFailed, query

pytestmark = pytest.mark.integration


def _status(run_dir: Path) -> dict | None:
    try:
        endpoint = tomllib.loads((run_dir / "daemon.toml").read_text())["bind"]
        return query(endpoint, "status", timeout_s=1.0)
    except (OSError, KeyError, tomllib.TOMLDecodeError, DaemonUnreachable, QueryFailed):
        return None


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[psutil.Process]) -> list[str]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {' '.join(p.cmdline())}")
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_stops_the_demo_and_its_children(tmp_path, signum):
    run_dir = tmp_path / "demo"
    # size "default" runs about a second per run: the sweep is still going when the signal comes
    argv = [sys.executable, "-m", "opptune.daemon.cli", "demo", "--dir", str(run_dir),
            "--size", "default", "--reps", "3", "--warmup", "1", "--max-cores", "2",
            "--workload", "pi_integrate", "--no-progress", "--json", "--timeout", "300"]
    seen: dict[int, psutil.Process] = {}
    demo = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert demo.poll() is None, demo.communicate()
            assert time.monotonic() < deadline, "the demo's sweep never started"
            for p in _tree(demo.pid):
                seen.setdefault(p.pid, p)
            st = _status(run_dir)
            if st and sum(int(j.get("received") or 0) for j in st.get("jobs") or []) >= 1:
                break
            time.sleep(0.1)  # polling interval; the deadline above bounds the wait
        for p in _tree(demo.pid):
            seen.setdefault(p.pid, p)
        names = " ".join(_alive(list(seen.values())))
        assert "opptune.daemon.service" in names and "opptune.agent" in names, names
        t0 = time.monotonic()
        demo.send_signal(signum)
        out, err = demo.communicate(timeout=40)
        took = time.monotonic() - t0
        left = _alive(list(seen.values()))
        # nothing started for this run is left anywhere (e.g. re-parented to init)
        left += _alive([p for p in psutil.process_iter(["cmdline"])
                        if str(run_dir) in " ".join(p.info["cmdline"] or [])])
    finally:
        # whatever the outcome, leave nothing behind for the next test
        for p in [*_tree(demo.pid), *seen.values()]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 128 + signum, err
    assert took < 30, took
    assert left == []
    said = " ".join(err.split())
    assert f"{signal.Signals(signum).name} received" in said
    table = json.loads(out)
    assert json.loads((run_dir / "result.json").read_text()) == table
    (w,) = table
    assert w["workload"] == "pi_integrate" and w["points"]
