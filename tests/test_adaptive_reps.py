"""Adaptive repetition: a point runs until the 95 % interval of its median is within the
target, or at most max_reps runs; the job completes exactly when every point is closed, also
across a kill -9 of the agent in the middle of a point.

The stop rule and the interval are unit-tested; the rest runs a real daemon and agent on a
virtual board whose run-to-run noise (the board's log-normal ``truth.noise``) is set per test.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgpack
import pytest

from opptune.agent.virtual_board import board_spec, make_tree
from opptune.daemon.jobs import closing_point
from opptune.daemon.planner import plan_sweep
from opptune.shared import protocol as P
from opptune.shared.config import ConfigError, SweepDefaults, load_daemon_config
from opptune.shared.point_stats import (StopRule, median_ci, point_stats, relative_ci,
                                        stop_reason)
from procs import Cluster, jobs_done, wait_until, write_toml

MAX_REPS = 12


# -- the statistics ---------------------------------------------------------------------------
def test_interval_needs_three_values():
    assert median_ci([1.0, 1.1]) is None
    lo, hi = median_ci([1.0, 1.1, 0.9])
    assert lo < 0.9 and hi > 1.1  # 3 values: t(2) = 4.3, the interval is wider than the range
    # coverage is checked by simulation in tests/test_point_stats.py


def test_stop_reasons():
    rule = StopRule(max_reps=10, target_ci=0.02, budget_s=5.0)
    tight = [1.0, 1.001, 0.999]
    assert stop_reason(rule, tight[:2], 2, 1.0)[0] is None  # no interval with 2 values
    reason, rel = stop_reason(rule, tight, 3, 1.0)
    # t(2, 97.5 %) 4.303 x sqrt(pi/2) x stdev 0.001 / sqrt(3)
    assert reason == "ci" and rel == pytest.approx(0.003113, rel=1e-3)
    assert stop_reason(StopRule(max_reps=10, min_reps=6), tight, 3, 1.0)[0] is None
    wide = [1.0, 1.3, 0.7, 1.2, 0.8, 1.1]
    assert stop_reason(rule, wide, 6, 1.0)[0] is None
    assert stop_reason(rule, wide, 6, 5.0)[0] == "budget"
    assert stop_reason(rule, wide * 2, 10, 1.0)[0] == "max_reps"
    assert stop_reason(rule, [], 10, 0.0)[0] == "max_reps"  # every run failed


def test_point_stats_are_pyperf_s():
    st = point_stats([1.0, 1.02, 0.98, 1.01, 0.99, 3.0])
    assert st.n == 6 and st.median == pytest.approx(1.005) and st.mad == pytest.approx(0.015)
    assert any("maximum" in w for w in st.warnings)  # pyperf's "may be unstable" rule
    assert relative_ci([1.0] * 6) == 0.0


def test_planner_config_and_protocol():
    d = SweepDefaults(adaptive=True, target_ci=0.03, max_reps=15, point_budget_s=9.0)
    job = plan_sweep({"cpus_online": [0, 1]}, "w", d)
    assert job["reps"] == 15
    assert all(p["until"] == {"ci": 0.03, "min_reps": 3, "budget_s": 9.0}
               for p in job["points"])
    P.validate(P.make("job", "d", job))
    job["points"][0]["until"]["ci"] = 2.0
    with pytest.raises(P.ProtocolError, match="until.ci"):
        P.validate(P.make("job", "d", job))
    assert "until" not in plan_sweep({"cpus_online": [0, 1]}, "w", SweepDefaults())["points"][0]


def test_config_keys_are_checked(tmp_path):
    path = write_toml(tmp_path / "d.toml", {}, {"sweep": {"adaptive": True, "max_reps": 2}})
    with pytest.raises(ConfigError, match=r"'sweep.max_reps' must be a whole number >= 3"):
        load_daemon_config(path)
    path = write_toml(tmp_path / "d.toml", {}, {"sweep": {"target_ci": 0}})
    with pytest.raises(ConfigError, match=r"sweep.target_ci"):
        load_daemon_config(path)


# -- real daemon and agent ----------------------------------------------------------------------
def _cluster(tmp: Path, noise: float, target_ci: float = 0.02, min_reps: int = 3) -> Cluster:
    spec = board_spec("rpi4")
    spec["truth"]["noise"] = noise
    root = make_tree(spec, str(tmp / "board"))
    c = Cluster(tmp, kernels=("pi_integrate",),
                extra_agent={"virtual_board": "rpi4", "sysfs_root": root})
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": True, "auto_recommend": False,
    }, {"sweep": {"size": "small", "warmup": 0, "max_cores": 2, "frequency_grid": "none",
                  "adaptive": True, "target_ci": target_ci, "max_reps": MAX_REPS,
                  "min_reps": min_reps}})
    return c


def _points(c: Cluster) -> dict[int, list[dict]]:
    """Stored runs per point index (seq // reps), in seq order, each with its seq."""
    out: dict[int, list[dict]] = {}
    for seq, packed in c.rows("SELECT seq, record_msgpack FROM runs WHERE job_id IS NOT NULL "
                              "ORDER BY seq"):
        rec = msgpack.unpackb(packed)
        rec["seq"] = seq
        out.setdefault(seq // MAX_REPS, []).append(rec)
    return out


def _check_closed(points: dict[int, list[dict]], n_points: int) -> None:
    """Each point: reps 0..k-1 once each, its last record (only) closing it with k runs."""
    assert sorted(points) == list(range(n_points))
    for idx, recs in points.items():
        assert [r["rep"] for r in recs] == list(range(len(recs))), idx
        closing = [r for r in recs if "point" in r.get("extra", {})]
        assert closing == [recs[-1]], idx
        assert closing[0]["extra"]["point"]["runs"] == len(recs)
        assert closing[0]["extra"]["point"]["index"] == idx


def _run(c: Cluster) -> dict[int, list[dict]]:
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda st: jobs_done(c.db) == 1, timeout=120, what="the adaptive job done")
    finally:
        c.stop()
    return _points(c)


@pytest.mark.integration
def test_quiet_points_stop_early_by_ci(tmp_path):
    points = _run(_cluster(tmp_path, noise=0.001))
    _check_closed(points, 2)
    for recs in points.values():
        # +-0.1 % noise: the first possible interval (3 values, about +-0.3 %) is within 2 %
        assert len(recs) == 3
        assert recs[-1]["extra"]["point"]["stop"] == "ci"
        assert recs[-1]["extra"]["point"]["ci_rel"] <= 0.02
    assert c_state(tmp_path) == ("done", 6, 2 * MAX_REPS)


@pytest.mark.integration
def test_noisy_points_run_to_max_reps(tmp_path):
    points = _run(_cluster(tmp_path, noise=0.15))
    _check_closed(points, 2)
    for recs in points.values():
        assert len(recs) == MAX_REPS
        assert recs[-1]["extra"]["point"]["stop"] == "max_reps"


def _stored(c: Cluster) -> int:
    try:
        return c.rows("SELECT COUNT(*) FROM runs")[0][0]
    except sqlite3.OperationalError:  # the daemon has not made its store yet
        return 0


def c_state(tmp: Path) -> tuple[str, int, int]:
    """(state, stored runs, expected) of the one job in the test's store."""
    from procs import db_rows
    (state, expected), = db_rows(tmp / "opptune.db", "SELECT state, expected FROM jobs")
    (n,), = db_rows(tmp / "opptune.db", "SELECT COUNT(*) FROM runs")
    return state, n, expected


@pytest.mark.integration
def test_agent_killed_mid_point_resumes_with_its_values(tmp_path):
    c = _cluster(tmp_path, noise=0.002, min_reps=6)  # 6 runs a point: room to kill mid-point
    c.start_daemon()
    c.start_agent()
    try:
        wait_until(lambda: _stored(c) % 6 >= 2, "a point under way", timeout=60)
        c.kill("agent")
        killed_at = _stored(c)
        c.start_agent()
        c.wait_for(lambda st: jobs_done(c.db) == 1, timeout=120, what="the job done")
    finally:
        c.stop()
    points = _points(c)
    _check_closed(points, 2)
    # the resumed point kept its earlier values: it still closes at the first interval (6
    # runs), not 6 runs after the restart
    assert [len(r) for r in points.values()] == [6, 6], killed_at
    assert c_state(tmp_path)[:2] == ("done", 12)


@pytest.mark.integration
def test_sweep_reps_auto_from_the_command_line(tmp_path):
    import json
    import subprocess
    import sys

    def opptune(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                              capture_output=True, text=True, timeout=180)

    p = opptune("sweep", "--agent", "a", "--reps", "some")
    assert p.returncode == 2 and "'some' is neither a whole number nor auto" in p.stderr
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False, max_cores=1)
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="agent")
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "pi_integrate", "--size", "small", "--reps", "auto", "--max-cores", "1",
                    "--wait", "--json")
    finally:
        c.stop()
    assert p.returncode == 0, p.stderr
    (job,) = json.loads(p.stdout)
    assert job["state"] == "done" and job["expected"] == 20  # max_reps of the one point
    recs = [msgpack.unpackb(r) for (r,) in c.rows("SELECT record_msgpack FROM runs ORDER BY seq")]
    assert len(recs) == job["received"] <= 20
    assert recs[-1]["extra"]["point"]["stop"] in ("ci", "max_reps")
    assert recs[-1]["extra"]["point"]["runs"] == len(recs)


@pytest.mark.integration
def test_daemon_killed_mid_job_completes_it_exactly(tmp_path):
    c = _cluster(tmp_path, noise=0.002, min_reps=6)
    c.start_daemon()
    c.start_agent()
    try:
        wait_until(lambda: _stored(c) >= 3, "runs stored", timeout=60)
        c.kill("daemon")
        c.start_daemon()
        c.wait_for(lambda st: jobs_done(c.db) == 1, timeout=120, what="the job done")
    finally:
        c.stop()
    points = _points(c)
    _check_closed(points, 2)
    assert [len(r) for r in points.values()] == [6, 6]
    assert c_state(tmp_path) == ("done", 12, 2 * MAX_REPS)


# -- the daemon's completion check -------------------------------------------------------------
def test_completion_reads_the_jobs_records_once_however_many_batches(tmp_path, monkeypatch):
    """Each batch's closing records update the closed points; the job's stored records are
    read once (the first time it could be complete), not per batch, and the job is done
    exactly when its last point closes."""
    from opptune.daemon.store import ResultIn
    from opptune.shared.records import RunRecord
    from test_job_send_order import tracker

    n_points, reps = 40, 10
    job = {"job_id": "j1", "workload": "pi_integrate", "size": "small", "reps": reps,
           "warmup": 0, "points": [{"cpus": [0], "threads": 1, "freq_khz": None,
                                    "until": {"ci": 0.02, "min_reps": 3, "budget_s": 0.0}}
                                   for _ in range(n_points)]}
    jobs, store, _ = tracker(tmp_path)
    done: list[str] = []
    jobs.on_done = lambda job_id, agent: done.append(job_id)
    jobs.send("a1", job)
    reads = []
    real_read = store.run_records
    monkeypatch.setattr(store, "run_records", lambda j: reads.append(j) or real_read(j))

    def batch(idx: int, runs: int) -> None:  # one point's runs, the last one closing it
        items = []
        for rep in range(runs):
            extra = {"point": {"index": idx, "runs": runs, "done": True, "stop": "ci"}} \
                if rep == runs - 1 else {}
            rec = RunRecord(platform="p1", workload="pi_integrate", input="small", cores=1,
                            cpus=[0], threads=1, rep=rep, time_s=1.0, extra=extra)
            items.append(ResultIn(f"m{idx}-{rep}", "a1", "j1", idx * reps + rep, rec,
                                  rec.to_dict()))
        store.insert_results(items, 0.0)
        closed = [i for i in (closing_point(it.record) for it in items) if i is not None]
        jobs.results_stored({"j1": [n_points * reps, "a1", runs, closed]}, 0.0)

    for idx in range(n_points - 1):
        batch(idx, 3 + idx % 4)
        assert done == [], idx
    batch(n_points - 1, 3)
    assert done == ["j1"] and store.job("j1")["state"] == "done"
    assert len(reads) <= 1, reads

    # a new daemon (restart) with the job's runs stored: one read completes it
    jobs2, _, _ = tracker(tmp_path)
    jobs2.on_done = lambda job_id, agent: done.append(job_id)
    store.set_job_state("j1", "running")
    jobs2.store = store
    jobs2.check("j1", n_points * reps, "a1", 0)
    assert done == ["j1", "j1"] and len(reads) <= 2


def test_benchmark_scores_both_with_one_estimator_and_counts_the_points_as_good():
    import importlib.util
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "adaptive_reps.py"
    spec = importlib.util.spec_from_file_location("adaptive_reps_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def row(fixed, adaptive, runs, stop):
        return {"fixed_ci": fixed, "adaptive_ci": adaptive, "adaptive_runs": runs, "stop": stop}
    rows = [row(0.005, 0.018, 3, "ci"),  # within the target: as good
            row(0.030, 0.025, 10, "max_reps"),  # tighter than fixed 10: as good
            row(0.030, 0.040, 10, "max_reps"),  # neither
            row(0.010, None, 4, "budget")]  # no interval: not as good
    s = bench.summarise(rows, 0.02)
    assert (s["fixed_runs"], s["adaptive_runs"]) == (40, 27)
    assert s["runs_saved"] == pytest.approx(0.325) and not s["met"]
    assert s["points_as_good"] == 2 and s["stops"] == {"ci": 1, "max_reps": 2, "budget": 1}
    s = bench.summarise(rows[:1] * 3 + rows[1:2], 0.02)
    assert s["runs_saved"] == pytest.approx(0.525) and s["met"]
    # the fixed points are scored by the interval the stop rule uses
    assert bench.relative_ci is relative_ci
