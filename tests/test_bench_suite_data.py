"""The bench_suite measurements kept in data/bench_suite_* (one board per file) are evaluated
together by ``opptune eval-mpet --combine``; alone, each file has one platform and nothing to
evaluate (exit 2, one line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOARDS = ("local", "rpi4", "odroid_xu4")
FILES = [str(REPO / f"data/bench_suite_{b}/data.csv") for b in BOARDS]


def eval_mpet(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "eval-mpet", *argv],
                          capture_output=True, text=True, timeout=300, cwd="/")


def test_each_board_has_its_source_and_the_13_kernels():
    for b, f in zip(BOARDS, FILES):
        assert (REPO / f"data/bench_suite_{b}/SOURCE.md").read_text().startswith(
            f"# bench_suite_{b}")
        text = Path(f).read_text().splitlines()
        assert len({ln.split(",")[1] for ln in text[1:]}) == 13


def test_combined_evaluation():
    p = eval_mpet("--combine", *[x for f in FILES for x in ("--data", f)], "--json")
    assert p.returncode == 0, p.stderr
    (res,) = json.loads(p.stdout)["results"]
    assert res["platforms"] == 3 and res["workloads"] == 13
    assert res["predictions"] == 39  # every kernel on every board, from the other two
    assert res["data"] == " + ".join(FILES)
    for kind in ("t1", "scaling", "full"):
        assert res["summary"]["mpet"][kind]["count"] == 39
    # scenario (b) on the combined files: every kernel on every board from its 1-core runs
    p = eval_mpet("--combine", *[x for f in FILES for x in ("--data", f)], "--scenario", "b",
                  "--json")
    assert p.returncode == 0, p.stderr
    (res,) = json.loads(p.stdout)["results"]
    assert res["scenario"] == "b" and res["predictions"] == 39
    assert res["summary"]["mpet"]["scaling"]["count"] == 39
    assert res["summary"]["mpet"]["t1"]["count"] == 0  # its own t(1): no error of it


@pytest.mark.parametrize("argv, msg", [
    (("--data", FILES[0]), "no workload is measured on two platforms that share another "
                           "workload (it holds 1 platform); nothing to evaluate: add another "
                           "platform's measurements (--combine evaluates several --data files "
                           "and the store as one database)"),
    (("--combine",), "--combine needs --data FILE.csv"),
    (("--save-csv", "x.csv"), "--save-csv goes with --daemon ENDPOINT or --config (without "
                              "either no daemon is asked): give one, or leave it out"),
    # the wait for a daemon's answer means nothing without one (it was accepted and ignored)
    (("--timeout", "5"), "--timeout goes with --daemon ENDPOINT or --config"),
    (("--combine", "--data", FILES[0], "--data", FILES[1], "--size", "small", "--timeout", "5"),
     "--size and --timeout go with --daemon ENDPOINT or --config (without either no daemon "
     "is asked): give one, or leave them out"),
    (("--combine", "--data", FILES[0], "--data", "/nonexistent.csv"),
     "cannot read /nonexistent.csv"),
])
def test_bad_sources_are_one_line(argv, msg):
    p = eval_mpet(*argv)
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("opptune eval-mpet: ") and msg in line, line


def _rows(board: str) -> list[dict]:
    import csv
    with open(REPO / f"data/bench_suite_{board}/data.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("board", ["rpi4", "odroid_xu4"])
def test_virtual_boards_tell_kernels_apart_and_close_eq3(board):
    rows = _rows(board)
    t = {(r["workload"], int(r["cores"])): float(r["time_s"]) for r in rows}
    speedup = {(k, n): t[k, 1] / t[k, n] for k, n in t}
    # the board's first 4 cores: bandwidth saturates, a lock contends, compute scales
    assert speedup["triad", 4] < speedup["pi_integrate", 4]
    assert speedup["locked_update", 4] < speedup["matmul", 4]
    assert speedup["triangle", 2] < 0.8 * speedup["pi_integrate", 2]
    for r in rows:
        n = int(r["cores"])
        U = 1 - sum(float(r[k]) for k in "lwcdsj")
        # eq. 3 within the CSV's 6 significant digits
        assert t[r["workload"], 1] * float(r["R"]) / (n * U) == pytest.approx(
            float(r["time_s"]), rel=1e-4), r
    assert max(float(r["l"]) for r in rows if r["workload"] == "locked_update") > 0.2
    assert all(float(r["l"]) == 0 for r in rows if r["workload"] == "pi_integrate")


@pytest.mark.parametrize("folder,agents", [("xeon16", {"dev16", "dev16b"}),
                                           ("xeon16/2026-11-28", {"h200a", "h200b"})])
def test_the_16_core_set_is_whole_and_its_medians_are_its_runs(folder, agents):
    """data/bench_suite_xeon16 (2026-11-27) and its 2026-11-28/: every kernel at 1..16 cores,
    each point's time the median of its runs in runs.csv (two sessions, one run each)."""
    import csv
    import statistics
    rows = _rows(folder)
    assert {(r["workload"], int(r["cores"])) for r in rows} == {
        (k, n) for k in {r["workload"] for r in rows} for n in range(1, 17)}
    assert len({r["workload"] for r in rows}) == 13
    with open(REPO / f"data/bench_suite_{folder}/runs.csv") as fh:
        runs = list(csv.DictReader(fh))
    by_point: dict = {}
    for r in runs:
        if r["marked"] == "":
            by_point.setdefault((r["workload"], int(r["cores"])), []).append(float(r["time_s"]))
    assert {len(v) for v in by_point.values()} == {2}
    assert {r["agent"] for r in runs} == agents
    assert {r["platform"] for r in rows} == {"xeon16"}
    for r in rows:
        assert float(r["time_s"]) == pytest.approx(
            statistics.median(by_point[r["workload"], int(r["cores"])]), rel=1e-5)


def test_export_pools_the_stores_of_several_sessions(tmp_path):
    """``benchmarks/bench_suite_data.py --from-db A --from-db B --name N``: one platform
    measured in two sessions (two agents, one platform id) exported as one set: each point's
    median over both sessions' runs, runs.csv with every run, the platform named N."""
    import csv
    from opptune.daemon.store import ResultIn, open_store
    from opptune.shared.records import RunRecord
    topo = {"hostname": "vm", "n_cpus": 2, "smt_siblings": [[0], [1]], "numa_nodes": [[0, 1]],
            "n_nu": None, "n_ht": None}
    stores = []
    for agent, times in (("s1", {1: 1.0, 2: 0.6}), ("s2", {1: 3.0, 2: 0.8})):
        path = tmp_path / f"{agent}.db"
        st = open_store(str(path))
        try:
            st.save_platform("pid", topo, 1.0)
            st.save_agent(agent, "pid", [], "test", 1.0)
            st.save_job(agent, {"job_id": f"job-{agent}", "workload": "w", "size": "default",
                                "points": [], "reps": 1, "warmup": 0}, 1.0, state="done")
            runs = [RunRecord(platform="pid", workload="w", input="default", cores=n,
                              cpus=list(range(n)), threads=n, rep=0, time_s=t)
                    for n, t in times.items()]
            st.insert_results([ResultIn(f"{agent}-{i}", agent, f"job-{agent}", i, r,
                                        r.to_dict()) for i, r in enumerate(runs)], 2.0)
        finally:
            st.close()
        stores += ["--from-db", str(path)]
    p = subprocess.run([sys.executable, str(REPO / "benchmarks/bench_suite_data.py"), *stores,
                        "--name", "box", "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "out/bench_suite_box/data.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["platform"], r["cores"], float(r["time_s"])) for r in rows] == [
        ("box", "1", 2.0), ("box", "2", 0.7)]
    with open(tmp_path / "out/bench_suite_box/runs.csv") as fh:
        runs = list(csv.DictReader(fh))
    assert sorted((r["agent"], r["cores"], float(r["time_s"])) for r in runs) == [
        ("s1", "1", 1.0), ("s1", "2", 0.6), ("s2", "1", 3.0), ("s2", "2", 0.8)]


@pytest.mark.parametrize("argv, msg", [
    (["--from-db", "/nonexistent.db"], "--from-db /nonexistent.db: no such file"),
    (["--from-db", "NOTDB"], "not an opptune store"),
    (["--name", "x"], "--name goes with --from-db")])
def test_export_refuses_what_is_no_store(tmp_path, argv, msg):
    (tmp_path / "NOTDB").write_text("not a database\n")
    argv = [str(tmp_path / a) if a == "NOTDB" else a for a in argv]
    p = subprocess.run([sys.executable, str(REPO / "benchmarks/bench_suite_data.py"), *argv,
                        "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert msg in p.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_sigterm_stops_the_daemon_the_export_started(tmp_path):
    """`timeout` ends the script with SIGTERM (tools/suite_on_bare_machine.sh): the daemon it
    started was left running; it is stopped on the way out, exit 143."""
    import os
    import signal
    import time
    work = tmp_path / "w"
    p = subprocess.Popen([sys.executable, str(REPO / "benchmarks/bench_suite_data.py"),
                          "--local-size", "default", "--local-id", "x", "--workdir", str(work),
                          "--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=tmp_path)
    daemon_pid = None
    deadline = time.monotonic() + 60
    while daemon_pid is None and time.monotonic() < deadline:  # polls the process table
        for pid in os.listdir("/proc"):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if str(work / "daemon.toml").encode() in cmd:
                daemon_pid = int(pid)
        time.sleep(0.05)  # a polling interval
    assert daemon_pid is not None
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 143
    with pytest.raises(ProcessLookupError):  # its finally waited for the daemon to end
        os.kill(daemon_pid, 0)


def test_export_pools_a_store_of_an_older_version(tmp_path):
    """A session's store written by an older opptune (fewer columns: a migration adds them)
    pools with a current one: every run of both is exported, and the source is not changed."""
    import csv
    import hashlib
    from opptune.daemon.store import ResultIn, open_store
    from opptune.daemon.store.schema import SCHEMA_VERSION
    from opptune.shared.records import RunRecord
    from test_migrations import build
    old = tmp_path / "old.db"
    build(old, SCHEMA_VERSION - 3)
    before = hashlib.sha256(old.read_bytes()).hexdigest()
    new = tmp_path / "new.db"
    st = open_store(str(new))
    try:
        st.save_platform("p1", {"hostname": "vm", "n_cpus": 2, "smt_siblings": [[0], [1]],
                                "numa_nodes": [[0, 1]], "n_nu": None, "n_ht": None}, 1.0)
        st.save_agent("s1", "p1", [], "test", 1.0)
        st.save_job("s1", {"job_id": "job-s1", "workload": "w", "size": "s", "points": [],
                           "reps": 1, "warmup": 0}, 1.0, state="done")
        r = RunRecord(platform="p1", workload="w", input="s", cores=1, cpus=[0], threads=1,
                      rep=0, time_s=1.0)
        st.insert_results([ResultIn("s1-0", "s1", "job-s1", 0, r, r.to_dict())], 2.0)
    finally:
        st.close()
    p = subprocess.run([sys.executable, str(REPO / "benchmarks/bench_suite_data.py"),
                        "--from-db", str(new), "--from-db", str(old), "--name", "box",
                        "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "out/bench_suite_box/runs.csv") as fh:
        runs = sorted((r["agent"], r["cores"], float(r["time_s"])) for r in csv.DictReader(fh))
    assert runs == [("a1", "2", 0.5), ("a1", "2", 0.5), ("s1", "1", 1.0)]
    assert hashlib.sha256(old.read_bytes()).hexdigest() == before
