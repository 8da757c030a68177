"""The agent's state directory and files are closed to other users whatever the umask: an
agent started from a shell with umask 000 left its state directory and its outbox, saved
originals, applied configuration and lock writable by anyone (the unit's UMask=0077 hid it)."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from opptune.agent.knobs.state import STATE_FILENAME
from opptune.agent.standing import FILENAME as STANDING
from opptune.agent.virtual_board import make_tree
from procs import RUN_AS_OPTION, free_endpoint, wait_until
from test_idle_clock import config, job, pinned_at, work, worker_on

PY = sys.executable


def modes(state: Path) -> dict[str, int]:
    """Every entry under ``state`` (itself as '.') -> its permission bits; a symbolic link's
    (always 0777, never checked) left out."""
    out = {".": stat.S_IMODE(state.stat().st_mode)}
    for p in state.rglob("*"):
        if not p.is_symlink():
            out[str(p.relative_to(state))] = stat.S_IMODE(p.lstat().st_mode)
    return out


def open_to_others(state: Path) -> dict[str, str]:
    """What under ``state`` other users may read or write (or, a directory, list)."""
    return {name: f"{mode:04o}" for name, mode in modes(state).items() if mode & 0o066}


def start_agent_under_umask_000(state: Path, log: Path, *extra: str) -> subprocess.Popen:
    """An agent of a virtual rpi4 on ``state``, its output in ``log``, started (its start line
    said) under umask 000."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [PY, "-m", "opptune.agent", "--daemon", free_endpoint(), "--agent-id", "a1",
             "--state-dir", str(state), "--virtual-board", "rpi4", "--heartbeat", "0.5",
             *extra, *RUN_AS_OPTION], stdout=fh, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, umask=0)
    try:
        wait_until(lambda: "agent a1 on platform" in log.read_text()
                   or proc.poll() is not None, "the agent's start", 60, log.read_text)
        assert proc.poll() is None, log.read_text()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def test_an_agent_started_under_umask_000_keeps_its_state_to_itself(tmp_path):
    root = make_tree("rpi4", str(tmp_path / "board"))
    state = tmp_path / "new" / "state"  # made by the agent
    log = tmp_path / "agent.log"
    proc = start_agent_under_umask_000(state, log, "--sysfs-root", root)
    try:
        found = modes(state)
        assert {"agent.lock", "outbox.db", "program-ids.json"} <= set(found), found
        assert found["."] == 0o700, found
        assert open_to_others(state) == {}, found
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()


def test_the_files_of_jobs_and_applied_configurations_are_the_agents_alone(tmp_path):
    old = os.umask(0)
    try:
        with worker_on(tmp_path, "rpi4") as (ex, w, knob, root, sent):
            state = tmp_path / "state"
            work(w, job("j1", [([0], 1_000_000)]))
            work(w, config("c1", 1_000_000))
            assert pinned_at(root, 1_000_000)
            found = modes(state)
            assert {STANDING, STATE_FILENAME, "applied.json", "outbox.db"} <= set(found), found
            assert open_to_others(state) == {}, found
    finally:
        os.umask(old)


def test_files_left_open_by_an_earlier_umask_are_narrowed_when_written_again(tmp_path):
    from opptune.agent.private import open_private
    p = tmp_path / "applied.json.tmp"
    p.write_text("old")
    p.chmod(0o666)
    with open_private(str(p)) as fh:
        fh.write("new")
    assert stat.S_IMODE(p.stat().st_mode) == 0o600 and p.read_text() == "new"


def test_an_existing_state_directory_open_to_others_is_narrowed_at_start(tmp_path):
    """A state directory made before (by hand, under another umask: 0777) kept its mode: its
    outbox's directory was open to anyone's listing and writing. The agent narrows it to 0700
    and says so in an INFO line; the virtual board's tree it makes there, under umask 000 too,
    is 0700/0600 like the rest (before: 0777 directories, 0644 files)."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    log = tmp_path / "agent.log"
    proc = start_agent_under_umask_000(state, log)
    try:
        found = modes(state)
        assert found["."] == 0o700, found
        tree = [n for n in found if n.startswith("virtual-board-rpi4")]
        assert len(tree) > 20 and "virtual-board-rpi4/sys" in tree, found
        assert open_to_others(state) == {}, found
        assert all(found[n] == (0o700 if (state / n).is_dir() else 0o600) for n in tree), \
            {n: f"{found[n]:04o}" for n in tree}
        assert (f"state directory {state} narrowed from mode 0777 to 0700: its outbox, saved "
                "settings and lock are the agent's alone") in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()


def test_a_shared_search_only_or_foreign_state_directory_keeps_its_mode(tmp_path, caplog):
    from opptune.agent.private import make_dir
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: others' files are there too
    search = tmp_path / "search"
    search.mkdir()
    search.chmod(0o711)  # opened for the workloads' user (agent/workdir.py)
    other = tmp_path / "lib"  # /var/lib given by mistake: others' directories in it
    (other / "postgresql").mkdir(parents=True)
    other.chmod(0o755)
    for d, mode in ((shared, 0o1777), (search, 0o711), (other, 0o755)):
        make_dir(str(d))
        assert stat.S_IMODE(d.stat().st_mode) == mode
    assert caplog.text.count("open to others") == 1
    assert (f"state directory {other} is open to others (mode 0755) and holds files that are "
            "not an agent's: left as it is") in caplog.text
    (other / "agent.lock").write_text("")  # an agent's state directory: narrowed
    make_dir(str(other))
    assert stat.S_IMODE(other.stat().st_mode) == 0o700


def test_a_state_directory_holding_others_files_keeps_its_mode_at_a_real_start(tmp_path):
    """Walking a board: a state directory given by mistake (a home, /var/lib: mode 0755, other
    files in it) was said to be 'left as it is', and the next line narrowed it to 0700 all
    the same, shutting its other users out: the agent's own lock, made between the two looks,
    marked it as an agent's. It keeps its mode now, said once; a state directory of an agent
    older than the lock (its outbox there, no lock) is an agent's and narrowed, not warned of."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    home.chmod(0o755)
    older = tmp_path / "older"
    older.mkdir()
    older.chmod(0o755)
    sqlite3.connect(older / "outbox.db").close()
    for state, mode in ((home, 0o755), (older, 0o700)):
        log = tmp_path / f"{state.name}.log"
        proc = start_agent_under_umask_000(state, log)
        try:
            assert stat.S_IMODE(state.stat().st_mode) == mode
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text()
        said = [line.split(": ", 1)[1] for line in log.read_text().splitlines()
                if f"state directory {state} " in line]
        assert said == ([f"state directory {home} is open to others (mode 0755) and holds files "
                         "that are not an agent's: left as it is; give the agent a directory "
                         "of its own (the agent makes it 0700)"] if state == home else
                        [f"state directory {older} narrowed from mode 0755 to 0700: its "
                         "outbox, saved settings and lock are the agent's alone"]), said
