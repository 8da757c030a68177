"""benchmarks/ingest.py, short: many simulated agents (several per client process, each its own
DEALER identity and hello) stream to a real daemon process; nothing is lost and every ack comes
after its results are in the store. The rate and latency targets are the benchmark's, not
asserted here."""

import json
import subprocess
import sys
from pathlib import Path

import pgserver
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = [sys.executable, str(ROOT / "benchmarks" / "ingest.py")]


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*BENCH, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_fifty_agents_for_seconds_lose_nothing_and_ack_only_stored_results(tmp_path):
    out = _run("--agents", "50", "--procs", "2", "--duration", "3", "--window", "8",
               "--check-acks", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    (r,) = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert r["agents"] == 50 and r["client_procs"] == 2 and r["store"] == "sqlite"
    assert r["sent"] > 0
    assert r["sent"] == r["acked"] == r["stored"]  # zero loss, nothing stored twice
    assert r["unacked"] == 0 and r["acked_not_stored"] == 0
    # the loop's thread is part of the daemon (clock ticks of 10 ms: equal is possible)
    assert 0 < r["daemon_main_thread_cpu_us_per_result"] <= r["daemon_cpu_us_per_result"]
    assert r["acked_before_stored"] == 0  # each acked id was already readable in the store
    assert r["errors"] == {}
    assert 0 < r["ack_latency_p50_ms"] <= r["ack_latency_p99_ms"]
    assert r["daemon_rss_warm_mib"] is not None and r["daemon_rss_end_mib"] > 0


def test_per_frame_one_sends_single_results_and_frames_lose_nothing(tmp_path):
    outs = {}
    for n in ("1", "16"):
        out = _run("--agents", "8", "--procs", "1", "--results", "400", "--window", "40",
                   "--per-frame", n, "--check-acks", "--json", cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        (outs[n],) = [json.loads(ln) for ln in out.stdout.splitlines()]
    for r in outs.values():
        assert r["sent"] == r["acked"] == r["stored"] == 3200 and r["errors"] == {}
        assert r["acked_before_stored"] == 0
    assert outs["1"]["per_frame"] == 1 and outs["1"]["frames"] == 0
    # 40 in flight per agent: results go in frames of 2..16 (alone when one has room)
    assert outs["16"]["per_frame"] == 16 and 0 < outs["16"]["frames"] <= 3200 / 2


def test_per_frame_out_of_range_is_refused():
    out = _run("--per-frame", "0")
    assert out.returncode == 2 and "--per-frame must be 1..64" in out.stderr


def test_fixed_count_per_agent_still_works():
    out = _run("--agents", "2", "--results", "300", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    (r,) = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert r["sent"] == r["acked"] == r["stored"] == 600


def test_two_daemons_sharing_postgresql_lose_nothing_and_ack_only_stored_results(tmp_path):
    why = pgserver.unavailable()
    if why:
        pytest.skip(why)
    out = _run("--agents", "20", "--procs", "2", "--duration", "2", "--window", "8",
               "--postgres", "--daemons", "2", "--check-acks", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    (r,) = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert r["store"] == "postgresql" and r["daemons"] == 2
    assert len(r["endpoint"].split()) == 2  # two daemon processes, agents split between them
    assert r["sent"] > 0 and r["sent"] == r["acked"] == r["stored"]
    assert r["acked_before_stored"] == 0 and r["errors"] == {}
    assert r["db_server_cpu_s"] > 0  # the server's processes were found and measured


def test_bad_arguments_name_the_option_and_exit_2():
    for args, word in ((("--agents", "0"), "--agents"), (("--duration", "-1"), "--duration"),
                       (("--daemons", "2"), "--postgres"),
                       (("--database", "x.db"), "postgresql://")):
        out = _run(*args)
        assert out.returncode == 2
        assert word in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_the_garbage_collector_is_paused_per_batch_and_always_resumed(tmp_path, monkeypatch):
    import gc

    from opptune.daemon.service import Daemon
    from opptune.shared.config import DaemonConfig

    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    seen = []

    def handle(batch):
        seen.append(gc.isenabled())
        raise RuntimeError("a failing batch")

    monkeypatch.setattr(d, "handle_batch", handle)
    try:
        assert gc.isenabled()
        try:
            d._ingest()
        except RuntimeError:
            pass
        assert seen == [False] and gc.isenabled()
        gc.disable()  # paused by someone else: left as it was
        try:
            d._ingest()
        except RuntimeError:
            pass
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
        d.close()
