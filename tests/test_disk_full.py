"""Full disks, for real: a small tmpfs as the agent's state directory or the daemon's database
directory, filled with a file until ENOSPC; and the outbox's bound from the configuration.

Each test ends by checking the store against the outbox: every result an agent measured
(its job's progress) is stored by the daemon or still in the outbox, none stored twice.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from opptune.agent import outbox as outbox_mod
from opptune.agent.outbox import Outbox, OutboxFull
from opptune.shared import protocol as P
from opptune.shared.config import ConfigError, load_agent_config
from procs import (RUN_AS_OPTION, Cluster, assert_delivery, received, wait_all_delivered,
                   wait_until)

REPS = 400  # x 2 points: 800 runs of a no-op command (about 100 a second here)


# -- helpers --------------------------------------------------------------------------------
@pytest.fixture
def small_fs():
    """``mount(dir, size)``: a tmpfs of ``size`` at ``dir``, unmounted afterwards."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
        if res.returncode:
            pytest.skip(f"cannot mount a tmpfs at {path}: {res.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory: Path, leave: int = 0) -> Path:
    """Write a file in ``directory`` until at most ``leave`` bytes are free; returns it."""
    filler = directory / "filler"
    # unbuffered: a buffered write that met ENOSPC (the daemon's log took the room between
    # statvfs and the write) kept its bytes and raised again at close, failing the test
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (1 << 16, 1 << 12, 1 << 9):
            while True:
                st = os.statvfs(directory)
                if st.f_bavail * st.f_frsize - chunk < leave:
                    break
                try:
                    fh.write(bytes(chunk))
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    return filler


def result(seq: int, job: str = "j") -> dict:
    rec = {"platform": "p", "workload": "w", "input": "default", "cores": 1, "cpus": [0],
           "threads": 1, "rep": seq, "time_s": 1.0, "extra": {"pad": "x" * 1500}}
    return P.make("result", "a", {"job_id": job, "seq": seq, "of": 1 << 20, "record": rec})


def noop_cluster(tmp: Path, extra_agent: dict | None = None, database: str | None = None,
                 reps: int = REPS) -> Cluster:
    """A daemon and an agent sweeping a no-op command (fast runs, about 3 KB a result)."""
    c = Cluster(tmp, kernels=(), reps=reps, max_cores=2, extra_agent=extra_agent,
                database=database)
    with open(c.agent_toml, "a") as fh:
        fh.write('[[workloads]]\nname = "noop"\ncommand = ["true"]\n')
    return c


def nothing_lost(c: Cluster, state_dir: Path, complete: bool = False) -> dict:
    """The outbox against the store (procs.assert_delivery): every measured result stored
    once or still pending; with ``complete``, all stored and the outbox empty."""
    return assert_delivery(state_dir, c.db, complete=complete, context=c.logs())


def log_lines(path: Path, text: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if text in line]


def agent_full(st: dict) -> str | None:
    return next((a.get("outbox_full") for a in st.get("agents") or [] if a.get("outbox_full")),
                None)


# -- configuration --------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, -1, 2_000_000, "\"big\""])
def test_a_bad_outbox_bound_names_file_key_and_form(tmp_path, value):
    path = tmp_path / "agent.toml"
    path.write_text(f"outbox_max_mb = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_agent_config(path)
    assert str(path) in str(err.value) and "outbox_max_mb" in str(err.value)
    assert "MiB" in str(err.value) or "float" in str(err.value)


def test_the_outbox_bound_defaults_to_256_mib(tmp_path):
    (tmp_path / "agent.toml").write_text("")
    assert load_agent_config(tmp_path / "agent.toml").outbox_max_mb == 256.0


# -- the outbox on a real full disk ---------------------------------------------------------
def test_outbox_on_a_full_disk_stores_the_finished_run_and_resumes_after_acks(
        tmp_path, small_fs, monkeypatch):
    monkeypatch.setattr(outbox_mod, "FULL_RETRY_S", 0.0)
    state = small_fs(tmp_path / "state", "6m")
    ob = Outbox(str(state))
    assert ob.full_reason() is None and (state / "outbox.db.reserve").stat().st_size == 1 << 20
    ob.save_job("j", {"job_id": "j"})
    filler = fill(state, leave=3 << 19)  # the outbox grows into the last 1.5 MiB
    ids = []
    while ob.full_reason() is None:  # what the executor does: a run only while there is room
        ids.append(ob.add_result("j", len(ids), result(len(ids))))
    reason = ob.full_reason()
    assert "is full" in reason and "reserve" in reason
    assert not (state / "outbox.db.reserve").exists()  # given up: the last write got through
    assert ob.job("j")["next_seq"] == len(ids) and [i for i, _ in ob.pending()] == ids
    assert ob._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # the daemon acks what it stored: the pages go back to the disk, the reserve fits again
    assert ob.ack(ids) == len(ids)
    assert ob.full_reason() is None, "room again once the acked results are gone"
    assert (state / "outbox.db.reserve").stat().st_size == 1 << 20
    assert filler.exists()
    ob.add_result("j", 10_000, result(10_000))
    ob.close()
    ob = Outbox(str(state))
    assert ob._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert ob.count() == 1
    ob.close()


def test_outbox_on_a_full_disk_waits_for_room(tmp_path, small_fs, monkeypatch):
    """The disk filled by something else: acks alone cannot make room; freeing it does."""
    monkeypatch.setattr(outbox_mod, "FULL_RETRY_S", 0.0)
    state = small_fs(tmp_path / "state", "4m")
    ob = Outbox(str(state))
    ob.save_job("j", {"job_id": "j"})
    first = ob.add_result("j", 0, result(0))
    filler = fill(state)
    second = ob.add_result("j", 1, result(1))  # on the reserve
    assert ob.full_reason() is not None
    assert ob.ack([first, second]) == 2
    assert ob.full_reason() is not None  # the filler still holds the disk
    ids = []
    with pytest.raises(OutboxFull):  # writes past the reserve: refused, rolled back
        while True:
            ids.append(ob.add_result("j", 2 + len(ids), result(2 + len(ids))))
    assert [i for i, _ in ob.pending()] == ids and ob.job("j")["next_seq"] == 2 + len(ids)
    assert ob._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    filler.unlink()
    assert ob.full_reason() is None
    assert ob.ack(ids) == len(ids) and ob.count() == 0
    ob.close()
    ob = Outbox(str(state))
    assert ob._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert ob.count() == 0 and ob.job("j")["next_seq"] == 2 + len(ids)
    ob.close()


def test_a_disk_short_of_the_reserve_from_the_start_says_the_room_it_lacks(
        tmp_path, small_fs, monkeypatch):
    """An agent started on a disk with 1.5 MiB free (under the 2 MiB its reserve needs) said
    "the disk ... is full (no room for the outbox's reserve ...); its reserve of 1048576 bytes
    is in use": the disk was not full, no reserve had been made, and the room wanted was not
    said. The reason gives what is free and what is needed."""
    monkeypatch.setattr(outbox_mod, "FULL_RETRY_S", 0.0)
    state = small_fs(tmp_path / "state", "4m")
    filler = fill(state, leave=3 << 19)
    ob = Outbox(str(state))
    reason = ob.full_reason()
    assert reason is not None and "is full" not in reason and "in use" not in reason, reason
    free = re.search(r"has (\d+\.\d) MiB free, under the 2\.0 MiB the outbox needs", reason)
    assert free and 1.0 <= float(free.group(1)) < 2.0, reason
    assert str(state / "outbox.db") in reason
    filler.unlink()
    assert ob.full_reason() is None
    ob.close()


@pytest.mark.parametrize("virtual", [False, True])
def test_an_agent_started_on_a_disk_with_no_room_at_all_says_to_free_it(
        tmp_path, small_fs, virtual):
    """Walking a board: an agent started on a disk with nothing free said 'configuration
    error: --state-dir (...) is not usable: No space left on device; give a directory the
    agent may create and write' (the directory was right: the disk was full), or with a
    virtual board '... [Errno 28] No space left on device; choose a writable --state-dir'.
    The line now says the disk is full and to free space there."""
    disk = small_fs(tmp_path / "disk", "1m")
    fill(disk)
    state = disk / "state"
    p = subprocess.run([sys.executable, "-m", "opptune.agent", "--daemon", "tcp://127.0.0.1:9",
                        "--state-dir", str(state), "--agent-id", "a1", *RUN_AS_OPTION,
                        *(["--virtual-board", "rpi4"] if virtual else [])],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("opptune-agent:")]
    assert "Traceback" not in p.stderr and "Errno" not in line
    if virtual:
        assert line == (f"opptune-agent: configuration error: cannot make the virtual board's "
                        f"tree in {state}/virtual-board-rpi4: No space left on device; its "
                        "disk is full: free space there, or choose a --state-dir on another")
    else:
        assert line == (f"opptune-agent: the state directory {state} (--state-dir) cannot be "
                        "written: No space left on device: the disk holding it is full; free "
                        "space there (the outbox needs 2.0 MiB before a run) or give state_dir "
                        "a larger disk, then start the agent again")


def test_each_full_line_in_the_log_is_followed_by_a_room_line(tmp_path, monkeypatch, caplog):
    """A second full spell within a minute of the first room line (found by filling a tmpfs
    twice): its room line was held back by a limit of one a minute of its own, and the log
    ended on 'outbox full ... no new run starts' while the agent measured. Each full line
    logged is followed by a room line; a spell with no full line logged gets none."""
    clock = [1000.0]
    monkeypatch.setattr(outbox_mod, "time", SimpleNamespace(monotonic=lambda: clock[0],
                                                            time=time.time))
    monkeypatch.setattr(outbox_mod, "FULL_RETRY_S", 0.0)
    ob = Outbox(str(tmp_path))
    room = [False]
    monkeypatch.setattr(ob, "_make_reserve", lambda: room[0])
    caplog.set_level("WARNING", logger="opptune.agent.outbox")

    def spell(full_at: float, room_at: float) -> None:
        clock[0], room[0] = full_at, False
        ob._full_why = "database or disk is full"
        ob._give_up_reserve()  # what a write that met the full disk does
        assert ob.full_reason() is not None
        clock[0], room[0] = room_at, True
        assert ob.full_reason() is None

    def said() -> list[str]:
        return [r.getMessage().split(":")[0] for r in caplog.records]

    spell(1000, 1041)
    spell(1070, 1080)  # its full line is logged (70 s after the first): so is its room line
    assert said() == ["outbox full", "outbox has room again after 41 s",
                      "outbox full", "outbox has room again after 10 s"]
    spell(1085, 1086)  # within a minute of the last full line: neither is logged
    assert len(said()) == 4
    ob.close()


def test_outbox_past_its_reserve_keeps_room_for_the_acks(tmp_path, small_fs, monkeypatch):
    """The reserve spent, writes that add keep trying (a finished run's result waits in
    memory and is retried): they stop short of the room deletes need, the WAL is left empty
    after each write, so one ack of everything still gets through."""
    monkeypatch.setattr(outbox_mod, "FULL_RETRY_S", 0.0)
    state = small_fs(tmp_path / "state", "6m")
    ob = Outbox(str(state))
    ob.save_job("j", {"job_id": "j"})
    fill(state, leave=3 << 19)
    ids, refused = [], 0
    while refused < 50:  # far past the reserve: each refusal rolled back, the next one tried
        try:
            ids.append(ob.add_result("j", len(ids), result(len(ids))))
        except OutboxFull:
            refused += 1
    assert ob.full_reason() is not None and not (state / "outbox.db.reserve").exists()
    assert os.statvfs(state).f_bavail * os.statvfs(state).f_frsize >= \
        outbox_mod.KEEP_FOR_ACKS - (64 << 10)
    assert os.path.getsize(state / "outbox.db-wal") == 0
    assert ob.ack(ids) == len(ids) and ob.count() == 0
    assert ob.full_reason() is None and ob.job("j")["next_seq"] == len(ids)
    ob.close()


# -- real processes -------------------------------------------------------------------------
@contextmanager
def sweep_under_way(tmp: Path, **kw) -> Iterator[Cluster]:
    """A daemon and an agent (:func:`noop_cluster`) with the sweep under way; stopped after."""
    c = noop_cluster(tmp, **kw)
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: received(s) >= 20, timeout=60, what="the sweep under way")
        yield c
    finally:
        c.stop()


def assert_all_stored(c: Cluster, runs: int, timeout: float = 120) -> None:
    """The sweep (one job) finishes: every one of its ``runs`` results stored exactly once,
    the outbox empty; both stop cleanly."""
    assert wait_all_delivered(c, 1, timeout)["produced"] == runs
    assert c.stop() == {"agent": 0, "daemon": 0}, c.logs()
    assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == runs


def warned(tmp: Path) -> list[str]:
    """The agent's full-outbox warnings."""
    return log_lines(tmp / "agent.log", "outbox full")


@pytest.mark.integration
def test_agent_disk_full_pauses_shows_in_status_and_resumes_when_freed(tmp_path, small_fs):
    state = small_fs(tmp_path / "agent-state", "8m")
    with sweep_under_way(tmp_path) as c:
        filler = fill(state)
        st = c.wait_for(lambda s: agent_full(s) is not None, timeout=30,
                        what="the agent reporting its full disk")
        assert "is full" in agent_full(st)
        paused_at = nothing_lost(c, state)["produced"]
        assert paused_at < 2 * REPS
        # paused, not slowed: everything it measured reaches the store, and it measures no more
        c.wait_for(lambda s: received(s) >= paused_at and agent_full(s) is not None,
                   timeout=30, what="the measured results stored, the agent still paused")
        assert nothing_lost(c, state)["produced"] == paused_at
        assert c.agent.poll() is None
        filler.unlink()
        c.wait_for(lambda s: agent_full(s) is None, timeout=30, what="the flag cleared")
        assert_all_stored(c, 2 * REPS, timeout=90)
    assert len(warned(tmp_path)) == 1, warned(tmp_path)


@pytest.mark.integration
def test_agent_outbox_fills_the_disk_while_the_daemon_is_down(tmp_path, small_fs):
    """The daemon is gone, the outbox grows until the disk is full: the agent pauses; the
    daemon back, its acks make room and the sweep finishes without anyone freeing the disk."""
    state = small_fs(tmp_path / "agent-state", "8m")
    with sweep_under_way(tmp_path, reps=2 * REPS) as c:
        c.kill("daemon")
        filler = fill(state, leave=2 << 20)
        wait_until(lambda: warned(tmp_path), "the agent's warning", 60, c.logs)
        assert nothing_lost(c, state)["produced"] < 4 * REPS and c.agent.poll() is None
        c.start_daemon()
        assert_all_stored(c, 4 * REPS)
        assert filler.exists()


@pytest.mark.integration
def test_daemon_disk_full_acks_only_what_it_stored(tmp_path, small_fs):
    """The daemon's database on a full disk: batches fail to commit and are not acked, so the
    agent's outbox grows to its bound and the agent pauses (status shows why); the daemon logs
    the failures once, keeps serving, and stores everything once there is room."""
    dbdir = small_fs(tmp_path / "db", "16m")
    state = tmp_path / "agent-state"
    with sweep_under_way(tmp_path, database=str(dbdir / "opptune.db"),
                         extra_agent={"outbox_max_mb": 0.25}) as c:
        filler = fill(dbdir)
        st = c.wait_for(lambda s: agent_full(s) is not None, timeout=60,
                        what="the agent's outbox at its bound")
        assert "outbox_max_mb" in agent_full(st)
        assert nothing_lost(c, state)["pending"], "unstored results stay in the agent's outbox"
        assert c.daemon.poll() is None
        filler.unlink()
        assert_all_stored(c, 2 * REPS)
    failed = log_lines(tmp_path / "daemon.log", "failed batches so far")
    assert 1 <= len(failed) <= 2, failed  # once a minute, however many batches failed
    assert len(log_lines(tmp_path / "daemon.log", "Traceback")) <= 2
    assert log_lines(tmp_path / "daemon.log", "storing results works again")


@pytest.mark.integration
def test_outbox_bound_from_the_configuration(tmp_path):
    """No tmpfs: the daemon gone, the agent measures until its outbox holds outbox_max_mb,
    then waits (one warning); the daemon back, the sweep finishes, each result stored once."""
    state = tmp_path / "agent-state"
    with sweep_under_way(tmp_path, extra_agent={"outbox_max_mb": 0.25}) as c:
        c.kill("daemon")
        wait_until(lambda: warned(tmp_path), "the agent's warning", 60, c.logs)
        size = sum(len(d) for (d,) in sqlite3.connect(state / "outbox.db").execute(
            "SELECT data FROM outbox"))
        assert 0.25 * (1 << 20) <= size < 0.25 * (1 << 20) + 8192, size
        assert nothing_lost(c, state)["produced"] < 2 * REPS and c.agent.poll() is None
        c.start_daemon()
        assert_all_stored(c, 2 * REPS)
    assert len(warned(tmp_path)) == 1


def executor_on_a_full_disk(tmp_path: Path, small_fs):
    """The agent's executor for a no-op workload, its outbox (no reserve) on a full 2 MB disk;
    what it sends goes to the list returned with it."""
    from opptune.agent.apply import Executor
    from opptune.agent.platform import discover
    from opptune.agent.runner import Runner
    from opptune.agent.workloads import Workloads
    from opptune.shared.config import AgentConfig, CommandWorkload
    state = small_fs(tmp_path / "state", "2m")
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(state),
                      workloads=[CommandWorkload("noop", ["true"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    ob = Outbox(str(state), reserve_bytes=0)
    sent: list[dict] = []
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"]), ob, send=sent.append)
    fill(state)
    return ex, ob, sent


def test_a_job_the_full_disk_cannot_keep_is_refused_with_outbox_full(tmp_path, small_fs):
    """Nothing of it runs; the daemon gets the reason (it records it with the job)."""
    from opptune.agent.apply import Worker
    ex, ob, sent = executor_on_a_full_disk(tmp_path, small_fs)
    platform = ex.platform
    job = P.make("job", "daemon", {"job_id": "job-1", "workload": "noop", "size": "default",
                                   "points": [{"cpus": platform["cpus_online"][:1],
                                               "threads": 1}], "reps": 1, "warmup": 0})
    Worker(ex).submit(job)
    (err,) = sent
    assert err["type"] == "error" and err["body"]["code"] == "outbox_full"
    assert err["body"]["ref"] == job["id"] and "full" in err["body"]["message"]
    assert ob.job("job-1") is None and ob.count() == 0
    ob.close()


def test_status_shows_why_an_agent_outbox_is_full():
    """The reason is a sentence with a path (330 columns in the outbox cell, folded into 12
    lines at 120): the cell says FULL and points under the table, where the reason is whole."""
    from rich.console import Console

    from opptune.daemon.console import UNBOUNDED_WIDTH
    from opptune.daemon.status_view import print_status
    reason = ("the disk holding /var/lib/opptune-agent/outbox.db is full (database or disk is "
              "full); its reserve of 1048576 bytes is in use")
    data = {"agents": [{"id": "board-1", "alive": True, "outbox": 812, "outbox_full": reason},
                       {"id": "board-2", "alive": True, "outbox": 0}]}
    for width in (UNBOUNDED_WIDTH, 120):
        console = Console(record=True, width=width)
        print_status(data, console)
        lines = console.export_text().splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "agents")
        end = next(i for i, ln in enumerate(lines) if ln.startswith("\u2514"))
        table = lines[start:end + 1]
        assert max(map(len, table)) <= 120 and len(table) == 7, table  # no row folded
        assert "812, FULL, see below" in table[4] and "FULL" not in table[5]
        assert lines[end + 1] == "agent board-1 starts no new run: " + reason


def test_a_config_refusal_the_full_disk_cannot_keep_is_still_sent(tmp_path, small_fs):
    ex, ob, sent = executor_on_a_full_disk(tmp_path, small_fs)
    ex.refuse_config({"config_id": "c1"}, "cpus [9] are not online")
    (msg,) = sent
    assert msg["type"] == "applied" and msg["body"]["ok"] is False
    assert msg["body"]["error"] == "cpus [9] are not online"
    ob.close()


# -- the daemon's store on a small disk -----------------------------------------------------
def test_the_store_log_does_not_fill_a_small_disk(tmp_path, small_fs):
    """Batches committed back to back: passive checkpoints never catch up, and a log left to
    grow to WAL_RESTART_BYTES fills a 16 MB disk, after which no checkpoint can copy it into
    the database (that needs room to grow) and nothing is stored again. Near a full disk the
    log starts over early, so 11 MB of results fit."""
    from opptune.daemon.store import ResultIn
    from opptune.daemon.store.sqlite import SQLiteStore
    from opptune.shared.records import RunRecord
    dbdir = small_fs(tmp_path / "db", "16m")
    store = SQLiteStore(str(dbdir / "opptune.db"))
    rec = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1, rep=0,
                    time_s=1.0)
    raw = {**rec.to_dict(), "extra": {"pad": "x" * 3000}}
    n = 0
    try:
        while n < 3500:
            store.insert_results([ResultIn(f"m{n + i}", "a1", "j", n + i, rec, raw)
                                  for i in range(100)], now=1.0)
            n += 100
        assert store.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == n
    finally:
        store.close()
    assert sqlite3.connect(dbdir / "opptune.db").execute(
        "PRAGMA integrity_check").fetchone() == ("ok",)


def test_the_full_line_says_what_frees_the_outbox(tmp_path, monkeypatch, caplog):
    """The full line said 'acks free it' whatever the reason: an empty outbox on a full disk
    waits for no ack, and only space freed on the disk brings the room back."""
    monkeypatch.setattr(outbox_mod, "FULL_RETRY_S", 0.0)
    caplog.set_level("WARNING", logger="opptune.agent.outbox")

    def full_line(ob: Outbox) -> str:
        caplog.clear()
        ob._full_logged = -outbox_mod.FULL_LOG_EVERY_S  # each case logs its own line
        ob._full_why = "database or disk is full"
        ob._give_up_reserve()  # what a write that met the full disk does
        assert ob.full_reason() is not None
        (line,) = [r.getMessage() for r in caplog.records if "outbox full" in r.getMessage()]
        return line

    empty = Outbox(str(tmp_path / "empty"))
    monkeypatch.setattr(empty, "_make_reserve", lambda: False)
    line = full_line(empty)
    assert "acks free it" not in line and "nothing waits for an ack" in line, line
    assert "space freed on that disk" in line, line
    empty.close()

    waiting = Outbox(str(tmp_path / "waiting"))
    waiting.put(result(0))
    monkeypatch.setattr(waiting, "_make_reserve", lambda: False)
    line = full_line(waiting)
    assert "acks free it, or space freed on that disk" in line, line
    waiting.close()

    bound = Outbox(str(tmp_path / "bound"), max_bytes=1)
    bound.put(result(0))
    caplog.clear()
    assert "outbox_max_mb" in bound.full_reason()
    (line,) = [r.getMessage() for r in caplog.records if "outbox full" in r.getMessage()]
    assert "(acks free it; nothing is dropped)" in line, line
    bound.close()
