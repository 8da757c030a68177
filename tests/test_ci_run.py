""".ci/run runs the tests and check-arm's userland build at once, then check-arm: a part that
fails fails the run with its output shown, and an interrupt or a failure leaves nothing
running. The parts are stand-ins: a ``make`` first on PATH (the real ones take minutes)."""

from __future__ import annotations

import glob
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The stand-in for make: each part says it started (its pid) on the `started` fifo, the tests
# and the build meet at the `meet` fifo (neither goes on until both run: a .ci/run that ran them
# one after the other would hang there), then each does what FAKE_TESTS / FAKE_BUILD say.
FAKE_MAKE = r"""#!/usr/bin/env bash
d=$FAKE_DIR
for a in "$@"; do case $a in test|check-arm|check-arm-userland) part=$a;; esac; done
echo "$part" >> "$d/order"
case $part in
test)
    echo "tests $$" > "$d/started"
    read -r _ < "$d/meet"
    case $FAKE_TESTS in
    pass) echo "tests: 9 passed"; exit 0 ;;
    fail) echo "tests: 1 failed"; exit 2 ;;
    fail_after_build) read -r _ < "$d/ended"; echo "tests: 1 failed"; exit 2 ;;
    hang) exec sleep 600 ;;
    esac ;;
check-arm-userland)
    echo "build $$" > "$d/started"
    echo met > "$d/meet"
    case $FAKE_BUILD in
    pass) echo "userland built (stand-in)"; touch "$d/built"; exit 0 ;;
    pass_tell) echo "userland built (stand-in)"; echo ended > "$d/ended"; exit 0 ;;
    fail) echo "E: stand-in mmdebstrap: cannot reach the mirror" >&2; exit 1 ;;
    hang) echo "building the userland (stand-in)"; exec sleep 600 ;;
    esac ;;
check-arm)
    echo "check-arm found the userland: $([ -e "$d/built" ] && echo yes || echo no)" ;;
esac
"""

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="no bash"),
    # .ci/run installs PostgreSQL where it is missing (as root) or stops: never from a test
    pytest.mark.skipif(not glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                       reason="Debian's postgresql is not installed"),
]


class CiRun:
    """.ci/run with the stand-in make (and empty chromium, strace, mmdebstrap and
    qemu-arm-static, so it installs nothing) first on PATH."""

    def __init__(self, tmp_path: Path, tests: str, build: str, sigint_ignored: bool = False):
        self.dir = tmp_path
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, text in [("make", FAKE_MAKE), *((n, "#!/bin/sh\n") for n in
                           ("chromium", "strace", "mmdebstrap", "qemu-arm-static"))]:
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        for fifo in ("started", "meet", "ended"):
            os.mkfifo(tmp_path / fifo)
        # held open for reading and writing: a part's announcement never blocks nor ends it
        self.started = os.open(tmp_path / "started", os.O_RDWR | os.O_NONBLOCK)
        self.said = b""
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path),
               "FAKE_TESTS": tests, "FAKE_BUILD": build, "TMPDIR": str(self.tmp)}
        self.proc = subprocess.Popen([str(ROOT / ".ci" / "run")], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, preexec_fn=(
                                         (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
                                         if sigint_ignored else None))
        self.pids: dict[str, int] = {}

    def read_started(self, timeout: float = 0) -> None:
        """The parts that said they started; waits up to ``timeout`` for another to say so."""
        if select.select([self.started], [], [], timeout)[0]:
            self.said += os.read(self.started, 4096)
        *lines, self.said = self.said.split(b"\n")
        for line in lines:
            part, pid = line.decode().split()
            self.pids[part] = int(pid)

    def wait_started(self, *parts: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not set(parts) <= set(self.pids):
            left = deadline - time.monotonic()
            assert left > 0, f"only {sorted(self.pids)} of {parts} started"
            self.read_started(left)

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        self.read_started()
        return self.proc.returncode, out, err

    def order(self) -> list[str]:
        path = self.dir / "order"
        return path.read_text().split() if path.exists() else []

    def close(self) -> None:
        """A .ci/run that hung (the old, one part after the other) is stopped with its parts."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
        self.read_started()
        for pid in self.pids.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.close(self.started)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def ci(tmp_path):
    runs = []

    def start(tests: str, build: str, sigint_ignored: bool = False) -> CiRun:
        runs.append(CiRun(tmp_path, tests, build, sigint_ignored))
        return runs[-1]

    yield start
    for r in runs:
        r.close()


def test_both_parts_run_at_once_then_check_arm_on_the_built_userland(ci):
    run = ci("pass", "pass")
    rc, out, err = run.finish()
    assert rc == 0, out + err
    assert "tests: 9 passed" in out and "userland built (stand-in)" in out
    assert "check-arm found the userland: yes" in out
    assert run.order()[-1] == "check-arm"
    assert list(run.tmp.iterdir()) == []  # the build's log is not left behind


def test_a_failed_build_fails_the_run_with_its_output(ci):
    run = ci("pass", "fail")
    rc, out, err = run.finish()
    assert rc == 1, out + err
    assert "E: stand-in mmdebstrap: cannot reach the mirror" in out + err
    assert ".ci/run: building the armhf userland failed (exit 1)" in err
    assert "check-arm" not in run.order()
    assert list(run.tmp.iterdir()) == []


@pytest.mark.parametrize("sigint_ignored", [False, True])
def test_failed_tests_stop_the_build(ci, sigint_ignored):
    """Also where .ci/run was started with SIGINT ignored (`.ci/run &` from a script), which
    its parts inherit: the build is stopped all the same."""
    run = ci("fail", "hang", sigint_ignored)
    rc, out, err = run.finish()
    assert rc == 2, out + err  # the tests' status
    assert "tests: 1 failed" in out
    assert gone(run.pids["build"])
    assert ".ci/run: stopped the armhf userland's build; it said:" in err
    assert "building the userland (stand-in)" in err
    assert "check-arm" not in run.order()


def test_failed_tests_show_what_the_build_said_when_it_had_ended(ci):
    run = ci("fail_after_build", "pass_tell")
    rc, out, err = run.finish()
    assert rc == 2, out + err
    assert "tests: 1 failed" in out and "userland built (stand-in)" in err
    assert "check-arm" not in run.order()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_stops_both_parts(ci, sig, code):
    run = ci("hang", "hang")
    run.wait_started("tests", "build")
    os.kill(run.proc.pid, sig)
    rc, out, err = run.finish()
    assert rc == code, out + err
    assert gone(run.pids["tests"]) and gone(run.pids["build"])
    assert ".ci/run: stopped the armhf userland's build" in err
    assert "check-arm" not in run.order()
