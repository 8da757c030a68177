"""opptune export --format pyperf / opptune import: a real daemon and agent, pyperf's own CLI
reading the export, a real pyperf script's output imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyperf
import pytest

from opptune.daemon.export_cli import build_suite
from procs import Cluster

pytestmark = pytest.mark.integration

# a pyperf script whose every value is known: bench_time_func reports loops * 12.5 ms
FIXED_SCRIPT = textwrap.dedent("""\
    import pyperf
    runner = pyperf.Runner()
    runner.bench_time_func("fixed", lambda loops: loops * 0.0125)
    """)


def opptune(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                          capture_output=True, text=True, timeout=timeout)


def pyperf_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyperf", *argv], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("pyperf"), kernels=("pi_integrate",), auto_sweep=False,
                max_cores=2, reps=3, extra_daemon={"auto_recommend": False})
    c.start_daemon()
    c.start_agent()
    c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="the agent")
    p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                "pi_integrate", "--size", "small", "--reps", "3", "--warmup", "0", "--wait",
                "--json")
    assert p.returncode == 0, p.stderr + c.logs()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def pyperf_file(tmp_path_factory):
    """A real pyperf script's output: 2 worker processes x 3 values (after 1 warmup each)."""
    d = tmp_path_factory.mktemp("script")
    (d / "bench.py").write_text(FIXED_SCRIPT)
    out = d / "fixed.json"
    subprocess.run([sys.executable, str(d / "bench.py"), "--processes", "2", "--values", "3",
                    "--warmups", "1", "--loops", "4", "--quiet", "-o", str(out)], check=True,
                   capture_output=True, timeout=120)
    return out


def test_export_is_read_by_pyperf_stats_hist_and_compare_to(cluster, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    p = opptune("export", "--daemon", cluster.endpoint, "--format", "pyperf", "--workload",
                "pi_integrate", "-o", str(a), "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    names = ["pi_integrate/small/1cores", "pi_integrate/small/2cores"]
    assert summary["names"] == names and summary["values"] == 6

    # the values are the stored runs' time_s, per configuration
    stored = {}
    for cores, t in cluster.rows("SELECT cores, time_s FROM runs WHERE ok=1 AND "
                                 "workload='pi_integrate'"):
        stored.setdefault(cores, []).append(t)
    got = {}
    for bench in pyperf.BenchmarkSuite.load(str(a)).get_benchmarks():
        meta = bench.get_metadata()
        got[meta["opptune_cores"]] = list(bench.get_values())
        assert meta["opptune_agent"] == "test-agent"
        assert meta["opptune_workload"] == "pi_integrate"
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in stored.items()}

    stats = pyperf_cli("stats", str(a))
    assert stats.returncode == 0, stats.stderr
    for name in names:
        assert name in stats.stdout
    assert stats.stdout.count("Total number of values: 3") == 2, stats.stdout
    for bench in pyperf.BenchmarkSuite.load(str(a)).get_benchmarks():  # the stored extremes
        cores = bench.get_metadata()["opptune_cores"]
        for label, value in (("Minimum:", min(stored[cores])), ("Maximum:", max(stored[cores]))):
            assert f"{label}         {bench.format_value(value)}" in stats.stdout

    hist = pyperf_cli("hist", str(a))
    assert hist.returncode == 0, hist.stderr
    assert all(name in hist.stdout for name in names)

    # compare_to: the same runs again, and a second export with more benchmarks in it
    p = opptune("export", "--daemon", cluster.endpoint, "-o", str(b))
    assert p.returncode == 0, p.stderr
    assert "benchmarks" in p.stdout and str(b) in p.stdout
    cmp = pyperf_cli("compare_to", str(a), str(b), "--table")
    assert cmp.returncode == 0, cmp.stderr
    for name in names:
        assert name in cmp.stdout


def test_import_stores_each_value_as_a_run_of_the_agents_board(cluster, pyperf_file, tmp_path):
    (platform,) = {a["platform"] for a in cluster.status()["agents"]}
    for cores, freq in ((1, "1400000"), (2, "1.4GHz")):  # kHz, or with a unit: one clock
        p = opptune("import", str(pyperf_file), "--daemon", cluster.endpoint, "--agent",
                    "test-agent", "--cores", str(cores), "--freq", freq, "--json")
        assert p.returncode == 0, p.stderr
        (done,) = json.loads(p.stdout)
        assert done["runs"] == 6 and done["cpus"] == [0, 1][:cores]
        assert done["group"] == {"platform": platform, "workload": "fixed", "input": "default",
                                 "variant": ""}
        rows = cluster.rows("SELECT platform, cores, freq_mhz, time_s, seq FROM runs "
                            "WHERE job_id=? ORDER BY seq", done["job_id"])
        assert [r[4] for r in rows] == list(range(6))  # a fresh job, one seq per value
        assert {r[:3] for r in rows} == {(platform, cores, 1400.0)}
        assert [r[3] for r in rows] == pytest.approx([0.0125] * 6)  # no warmup among them
    st = cluster.status()
    imported = [j for j in st["jobs"] if j["workload"] == "fixed"]
    assert [(j["state"], j["received"]) for j in imported] == [("done", 6), ("done", 6)]
    assert all(str(pyperf_file) in j["reason"] for j in imported)

    # the fits take them: the group is fitted from the two imported core counts
    cluster.wait_for(lambda s: any(f["group"] == done["group"] for f in s["fits"]),
                     timeout=60, what="a fit of the imported group")

    # and the export gives them back under their configuration's name
    out = tmp_path / "fixed.json"
    p = opptune("export", "--daemon", cluster.endpoint, "--workload", "fixed", "-o", str(out),
                "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["names"] == ["fixed/default/1cores@1400MHz",
                                             "fixed/default/2cores@1400MHz"]
    stats = pyperf_cli("stats", str(out))
    assert stats.returncode == 0 and "Mean +- std dev: 12.5 ms +- 0.0 ms" in stats.stdout, \
        stats.stdout + stats.stderr


def test_import_of_the_same_runs_again_stores_only_the_new_ones(cluster, tmp_path):
    """The walk: importing one file twice stored its runs twice. A run is identified by the
    configuration it is stored at and its pyperf run (metadata, with the run's date, and
    values): a repeat is skipped and said, and a file grown by pyperf's --append adds only
    its new runs."""
    (tmp_path / "bench.py").write_text(FIXED_SCRIPT)
    out = tmp_path / "grown.json"

    def measure(how):
        subprocess.run([sys.executable, str(tmp_path / "bench.py"), "--processes", "2",
                        "--values", "3", "--warmups", "1", "--loops", "4", "--quiet", how,
                        str(out)], check=True, capture_output=True, timeout=120)

    def stored():
        return cluster.rows("SELECT msg_id, job_id, seq, cores, time_s FROM runs WHERE "
                            "workload='grown' ORDER BY job_id, seq")

    def imported(*extra):
        p = opptune("import", str(out), "--daemon", cluster.endpoint, "--agent", "test-agent",
                    "--cores", "1", "--workload", "grown", *extra)
        assert p.returncode == 0, p.stderr
        return p

    measure("-o")
    (first,) = json.loads(imported("--json").stdout)
    assert (first["runs"], first["already_stored"]) == (6, 0)
    before = stored()
    assert len(before) == 6
    jobs = [j["job_id"] for j in cluster.status()["jobs"]]

    p = imported("--json")
    (again,) = json.loads(p.stdout)
    assert (again["job_id"], again["runs"], again["already_stored"]) == (None, 0, 6)
    p = imported()
    assert p.stdout.strip().splitlines() == [
        "imported 0 new values of fixed as workload grown on agent test-agent: all 6 were "
        "already stored (skipped)"]
    assert stored() == before  # nothing stored twice, nothing changed
    assert [j["job_id"] for j in cluster.status()["jobs"]] == jobs  # no empty job either

    measure("--append")  # 2 more worker processes: 6 more values in the same file
    p = imported()
    (line,) = p.stdout.strip().splitlines()
    assert line.startswith("imported 6 new values of fixed as workload grown on agent "
                           "test-agent (cpus 0, the board's own frequency): job import-"), line
    assert line.endswith("; 6 already stored (skipped)"), line
    after = stored()
    assert len(after) == 12 and set(before) <= set(after)

    # the same runs stated at another configuration are another claim, stored as asked
    (two,) = json.loads(imported("--cores", "2", "--json").stdout)  # (replaces --cores 1)
    assert (two["runs"], two["already_stored"]) == (12, 0)


def test_import_of_one_value_says_one_value(cluster, tmp_path):
    """Importing a benchmark with one value printed 'imported 1 new values of ...'."""
    (tmp_path / "bench.py").write_text(FIXED_SCRIPT)
    out = tmp_path / "one.json"
    subprocess.run([sys.executable, str(tmp_path / "bench.py"), "--processes", "1",
                    "--values", "1", "--warmups", "1", "--loops", "4", "--quiet", "-o",
                    str(out)], check=True, capture_output=True, timeout=120)
    p = opptune("import", str(out), "--daemon", cluster.endpoint, "--agent", "test-agent",
                "--cores", "1", "--workload", "single")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("imported 1 new value of fixed as workload single on agent "
                               "test-agent (cpus 0, "), p.stdout


def test_import_refuses_a_bad_file_or_agent_with_one_line(cluster, pyperf_file, tmp_path):
    before = cluster.rows("SELECT COUNT(*) FROM runs")
    bad = tmp_path / "bad.json"
    cases = {"no such file": tmp_path / "missing.json"}
    bad.write_text('{"benchmarks": [}')
    cases["not JSON"] = bad
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"version": "1.0", "results": []}))
    cases["not a pyperf result file"] = other
    for what, path in cases.items():
        p = opptune("import", str(path), "--daemon", cluster.endpoint, "--agent", "test-agent",
                    "--cores", "1")
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"opptune import: {path}: {what}"), p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and p.stdout == ""
    p = opptune("import", str(pyperf_file), "--daemon", cluster.endpoint, "--agent", "nobody",
                "--cores", "1")
    assert p.returncode == 2 and "unknown agent 'nobody'" in p.stderr, p.stderr
    p = opptune("import", str(pyperf_file), "--daemon", cluster.endpoint, "--agent",
                "test-agent", "--cores", "64")
    assert p.returncode == 2 and "cores must be 1..2" in p.stderr, p.stderr
    p = opptune("import", str(pyperf_file), "--daemon", cluster.endpoint, "--agent",
                "test-agent", "--cores", "1", "--cpus", "7")
    assert p.returncode == 2 and p.stderr.strip().endswith(
        "cpus must name 1 cpu of agent 'test-agent' (0-1), as many as cores and none "
        "twice; got 7"), p.stderr
    assert cluster.rows("SELECT COUNT(*) FROM runs") == before


def test_marked_runs_stay_in_the_export_with_their_mark(tmp_path):
    """A marked run (a neighbour on its cpus, or throttled) is a value like any other, its mark
    in the run's metadata; a clean run's interference record does not mark it; the suite is
    still one pyperf reads."""
    base = {"platform": "p1", "workload": "w", "input": "small", "cores": 2, "cpus": [0, 1],
            "threads": 2, "freq_mhz": 1400.0, "freq_observed_mhz": {"policy0": 1400.0}}
    quiet = {"share": 0.01, "others_s": 0.001, "loadavg": [0.1, 0.1, 0.1]}
    rows = [{"agent": "a", "job_id": "job-1", "source": "sweep",
             "record": {**base, "rep": i, "time_s": 1.0 + i / 10, "interference": quiet}}
            for i in range(2)]
    rows.append({"agent": "a", "job_id": "job-1", "source": "sweep",
                 "record": {**base, "rep": 2, "time_s": 2.5, "throttled": True,
                            "thermal": {"reasons": ["cpu-thermal reached 85 C\n(passive)"]},
                            "interference": {**quiet, "share": 0.48},
                            "marked": "interference: 48 % of cpu 1 used by pid 4711 (sh)"}})
    suite, summary = build_suite(rows, {"p1": "board-x"})
    assert summary["names"] == ["w/small/2cores@1400MHz"] and summary["marked_runs"] == 1
    path = tmp_path / "m.json"
    suite.dump(str(path))
    (bench,) = pyperf.BenchmarkSuite.load(str(path)).get_benchmarks()
    assert sorted(bench.get_values()) == [1.0, 1.1, 2.5]
    runs = bench.get_runs()
    marked = [r.get_metadata() for r in runs if "opptune_throttled" in r.get_metadata()]
    assert [(m["opptune_throttled"], m["opptune_marked"]) for m in marked] == [
        ("cpu-thermal reached 85 C (passive)",
         "interference: 48 % of cpu 1 used by pid 4711 (sh)")]
    meta = bench.get_metadata()
    assert (meta["opptune_board"], meta["opptune_cpus"], meta["opptune_freq_mhz"],
            meta["opptune_freq_observed_policy0_mhz"]) == ("board-x", "0,1", 1400.0, 1400.0)
    dump = pyperf_cli("dump", "--verbose", str(path))  # pyperf shows a run's own metadata
    assert dump.returncode == 0, dump.stderr
    assert dump.stdout.count("opptune_throttled: cpu-thermal reached 85 C (passive)") == 1


def test_each_runs_energy_is_in_its_metadata(tmp_path):
    """The export carried each run's time only: a board's energy, from which 'opptune
    recommend --objective energy' chose, was nowhere in the file (walk31, virtual rpi4)."""
    base = {"platform": "p1", "workload": "w", "input": "small", "cores": 2, "cpus": [0, 1],
            "threads": 2, "freq_mhz": 600.0}
    rows = [{"agent": "a", "job_id": "job-1", "source": "sweep",
             "record": {**base, "rep": 0, "time_s": 0.05, "energy_j": 0.0169,
                        "energy_source": "rapl:package-0"}},
            {"agent": "a", "job_id": "job-1", "source": "sweep",
             "record": {**base, "rep": 1, "time_s": 0.051, "energy_j": None}}]
    suite, _ = build_suite(rows, {"p1": "board-x"})
    path = tmp_path / "e.json"
    suite.dump(str(path))
    (bench,) = pyperf.BenchmarkSuite.load(str(path)).get_benchmarks()
    metas = [r.get_metadata() for r in bench.get_runs()]
    assert [(m.get("opptune_energy_j"), m.get("opptune_energy_source")) for m in metas] == [
        (0.0169, "rapl:package-0"), (None, None)]
    dump = pyperf_cli("dump", "--verbose", str(path))
    assert dump.returncode == 0, dump.stderr
    assert dump.stdout.count("opptune_energy_j: 0.0169") == 1


def test_a_suite_imports_each_benchmark_as_its_workload(cluster, tmp_path):
    """A pyperformance-like file: several benchmarks, each its own workload; a calibration
    run (warmups only) adds nothing."""
    def bench(name, values):
        meta = {"name": name, "unit": "second", "loops": 2}
        return pyperf.Benchmark([
            pyperf.Run([], warmups=[(2, 0.5)], metadata={**meta, "calibrate_loops": 2},
                       collect_metadata=False),
            pyperf.Run(values, warmups=[(2, 0.5)], metadata=meta, collect_metadata=False)])
    path = tmp_path / "suite.json"
    pyperf.BenchmarkSuite([bench("nbody", [0.2, 0.21]), bench("float", [0.3])]).dump(str(path))
    p = opptune("import", str(path), "--daemon", cluster.endpoint, "--agent", "test-agent",
                "--cores", "1", "--workload", "mine")
    assert p.returncode == 2 and "holds 2 benchmarks" in p.stderr, p.stderr
    p = opptune("import", str(path), "--daemon", cluster.endpoint, "--agent", "test-agent",
                "--cores", "1", "--json")
    assert p.returncode == 0, p.stderr
    done = json.loads(p.stdout)
    assert [(d["group"]["workload"], d["runs"]) for d in done] == [("nbody", 2), ("float", 1)]
    rows = cluster.rows("SELECT workload, time_s FROM runs WHERE job_id IN (?, ?) ORDER BY "
                        "workload, seq", done[0]["job_id"], done[1]["job_id"])
    assert rows == [("float", 0.3), ("nbody", 0.2), ("nbody", 0.21)]


def test_export_of_an_unknown_agent_or_workload_lists_the_known_ones(cluster, tmp_path):
    """It said 'no successful runs to export' (exit 1) and named nothing that exists, where
    'opptune report' with the same names answers with the known ones and exit 2."""
    out = tmp_path / "none.json"
    p = opptune("export", "--daemon", cluster.endpoint, "--workload", "nothing", "-o", str(out))
    assert p.returncode == 2 and not out.exists()
    assert p.stderr.startswith("opptune export: --workload nothing: no runs of it; measured: ")
    assert "pi_integrate" in p.stderr and p.stderr.count("\n") == 1
    p = opptune("export", "--daemon", cluster.endpoint, "--agent", "nope", "-o", str(out))
    assert p.returncode == 2 and not out.exists()
    assert p.stderr == ("opptune export: --agent nope: the daemon knows no such agent; known: "
                        "test-agent ('opptune status' lists them)\n")
    p = opptune("export", "--daemon", cluster.endpoint, "--agent", "test-agent", "--workload",
                "nope", "-o", str(out))
    assert p.returncode == 2 and not out.exists()
    assert p.stderr.startswith("opptune export: --workload nope: no runs of it by agent "
                               "test-agent; measured: ")


def test_export_of_nothing_says_so():
    with pytest.raises(ValueError, match="the daemon has no successful runs to export"):
        build_suite([], {})


def test_import_refuses_a_frequency_the_boards_cpufreq_does_not_offer(tmp_path):
    """As 'opptune sweep --freq' does: runs at 123 kHz on a board offering 500-1500 MHz were
    never measured. (A board without cpufreq takes a stated frequency: see above.)"""
    from opptune.daemon.service import Daemon
    from opptune.shared.config import DaemonConfig
    from test_goal_service import NO_METER, Agent
    board = {**NO_METER, "id": "plat-f", "policies": [{"name": "policy0",
                                                        "related_cpus": [0, 1, 2, 3]}],
             "cpufreq": {"available": True,
                         "frequencies_khz": {"policy0": [500000, 1000000, 1500000]}}}
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                            auto_sweep=False))
    d.start_thread()
    a = Agent(d.endpoint, board)
    try:
        args = {"agent": "q1", "workload": "fixed", "cores": 2,
                "runs": [{"values": [0.0125, 0.0126], "metadata": {}}]}
        err = a.query("import", {**args, "freq_khz": 123})
        assert err["type"] == "error" and err["body"]["code"] == "bad_args"
        assert err["body"]["message"].endswith(
            "cannot run at 123 kHz: it offers 500000, 1000000, 1500000 kHz (frequencies here "
            "are in kHz: 123 MHz is 123000)")
        ok = a.query("import", {**args, "freq_khz": 1000000})
        assert ok["type"] == "reply" and ok["body"]["data"]["runs"] == 2
    finally:
        a.close()
        d.stop()


def test_benchmarks_are_listed_in_the_order_of_their_numbers():
    """A board of 10 or more cores listed 10cores before 2cores (names sorted as text); core
    counts and clocks are in numeric order now."""
    rows = [{"agent": "a", "job_id": "job-1", "source": "sweep",
             "record": {"platform": "p1", "workload": "w", "input": "small", "cores": n,
                        "cpus": list(range(n)), "threads": n, "freq_mhz": f, "rep": 0,
                        "time_s": 1.0 / n}}
            for n in (10, 2, 1, 12) for f in (800.0, 1400.0)]
    _, summary = build_suite(rows, {"p1": "board-x"})
    assert summary["names"] == [f"w/small/{n}cores@{f}MHz" for n in (1, 2, 10, 12)
                                for f in (800, 1400)]


def test_import_cpus_take_ranges_as_status_writes_them():
    """Status and recommend write cpu sets as ranges ('0-3,8'): import --cpus takes them back,
    in the order given and with a repeat kept for the daemon's check; a part that is no
    number or range is refused."""
    from opptune.daemon.export_cli import cpus_arg
    assert cpus_arg("0-3,8") == [0, 1, 2, 3, 8]
    assert cpus_arg("7, 2") == [7, 2] and cpus_arg("1,1") == [1, 1]
    for bad in ("a", "3-1", "0-", "1,,2", ""):
        with pytest.raises(ValueError):
            cpus_arg(bad)


def test_import_names_the_boards_cpus_as_a_set_and_what_was_given_as_given(tmp_path):
    """The refusal of --cpus listed the board's cpus one by one (32 numbers on the virtual
    x86-2numa): they are a set, written as ranges; what was given stays an order with its
    repeat, which is what is wrong with it."""
    from types import SimpleNamespace

    from opptune.agent.platform import discover
    from opptune.agent.virtual_board import make_tree
    from opptune.daemon.errors import HandlerError
    from opptune.daemon.pyperf_query import import_runs
    from opptune.shared.config import AgentConfig
    root = make_tree("x86-2numa", str(tmp_path / "x86"))
    plat = discover(AgentConfig(agent_id="x86", bench_kernels=[], state_dir=str(tmp_path),
                                sysfs_root=root, virtual_board="x86-2numa"))
    info = SimpleNamespace(platform=plat, platform_id="p-x86")
    daemon = SimpleNamespace(registry=SimpleNamespace(get={"x86": info}.get))
    with pytest.raises(HandlerError) as exc:
        import_runs(daemon, {"agent": "x86", "workload": "w", "cores": 2, "cpus": [17, 17]})
    assert str(exc.value).endswith("cpus must name 2 cpus of agent 'x86' (0-31), as many as "
                                   "cores and none twice; got 17,17")


def test_exports_of_two_boards_compare_by_configuration(tmp_path):
    """A one-board export named 'w/...' and a fleet export 'board:w/...', so compare_to of
    the two said "no benchmark in common". Names carry no board (two boards' exports compare
    configuration by configuration); several boards in one file only with board_in_name,
    which prefixes every name, one board's too."""
    from opptune.daemon.export_cli import SeveralBoards

    def rows(platform, times):
        return [{"agent": platform, "job_id": "job-" + platform, "source": "sweep",
                 "record": {"platform": platform, "workload": "w", "input": "small",
                            "cores": 2, "cpus": [0, 1], "threads": 2, "freq_mhz": 1400.0,
                            "rep": i, "time_s": t}} for i, t in enumerate(times)]
    boards = {"pa": "rpi4", "pb": "rpi5"}
    files = {}
    for platform, times in (("pa", [2.0, 2.1, 2.05]), ("pb", [1.0, 1.05, 1.02])):
        suite, summary = build_suite(rows(platform, times), boards)
        assert summary["names"] == ["w/small/2cores@1400MHz"]
        files[platform] = tmp_path / f"{platform}.json"
        suite.dump(str(files[platform]))
    p = pyperf_cli("compare_to", str(files["pa"]), str(files["pb"]))
    assert p.returncode == 0, p.stderr
    assert "Mean +- std dev: [pa] 2.05 sec +- 0.05 sec -> [pb] 1.02 sec" in p.stdout

    both = rows("pa", [2.0]) + rows("pb", [1.0])
    with pytest.raises(SeveralBoards, match=r"of 2 boards \(rpi4, rpi5\): export each with "
                                            r"--agent ID .* or give --board-in-name"):
        build_suite(both, boards)
    _, summary = build_suite(both, boards, board_in_name=True)
    assert summary["names"] == ["rpi4:w/small/2cores@1400MHz", "rpi5:w/small/2cores@1400MHz"]
    _, summary = build_suite(rows("pa", [2.0]), boards, board_in_name=True)
    assert summary["names"] == ["rpi4:w/small/2cores@1400MHz"]


def test_export_board_in_name_prefixes_the_board(cluster, tmp_path):
    out = tmp_path / "b.json"
    p = opptune("export", "--daemon", cluster.endpoint, "--workload", "pi_integrate",
                "--board-in-name", "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr
    names = json.loads(p.stdout)["names"]
    board = pyperf.BenchmarkSuite.load(str(out)).get_benchmarks()[0].get_metadata()[
        "opptune_board"]
    assert names == [f"{board}:pi_integrate/small/1cores", f"{board}:pi_integrate/small/2cores"]


def test_export_of_a_workload_whose_runs_all_failed_says_why(tmp_path):
    """The export took its 'measured' workloads from the jobs sent: a workload whose every
    run failed passed the name check, then got 'no successful runs to export' (exit 1) with
    no word of the failure. Measured now means a successful run stored; a workload whose
    runs all failed is said so, with its jobs' failure and where to read each job's reason."""
    from opptune.daemon.service import Daemon
    from opptune.daemon.store import ResultIn
    from opptune.shared.config import DaemonConfig
    from opptune.shared.records import RunRecord

    db = tmp_path / "opptune.db"
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(db), auto_sweep=False))
    try:
        d.store.save_platform("p", {"n_cpus": 1, "sweep_order": [0]}, 1.0)
        d.store.save_agent("a1", "p", ["good", "broken"], "test", 1.0)
        for job, workload, ok in (("j-good", "good", True), ("j-bad", "broken", False)):
            d.store.save_job("a1", {"job_id": job, "workload": workload, "size": "small",
                                    "points": [{"cpus": [0], "threads": 1}], "reps": 3,
                                    "warmup": 0}, 1.0)
            recs = [RunRecord(platform="p", workload=workload, input="small", cores=1,
                              cpus=[0], threads=1, rep=i, time_s=0.5 if ok else None, ok=ok,
                              error=None if ok else "exit status 127: nosuch: not found")
                    for i in range(3)]
            d.store.insert_results([ResultIn(f"{job}-{i}", "a1", job, i, r, r.to_dict())
                                    for i, r in enumerate(recs)], 2.0)
        d.store.set_job_state("j-bad", "failed", "every run of the job failed: exit status "
                                                 "127: nosuch: not found", 3.0)
    finally:
        d.close()
    c = Cluster(tmp_path, database=str(db), auto_sweep=False)
    c.start_daemon()
    try:
        c.wait_for(lambda s: True, timeout=30, what="the daemon")
        out = tmp_path / "x.json"
        said = {}
        for argv in ([], ["--agent", "a1"]):
            p = opptune("export", "--daemon", c.endpoint, "--workload", "broken", *argv,
                        "-o", str(out))
            said[bool(argv)] = (p.returncode, p.stderr)
        nope = opptune("export", "--daemon", c.endpoint, "--workload", "nope", "-o", str(out))
        good = opptune("export", "--daemon", c.endpoint, "--workload", "good", "-o", str(out))
        status = opptune("status", "--daemon", c.endpoint, "--agent", "a1")
    finally:
        codes = c.stop()
    assert said[False] == (1, "opptune export: --workload broken: its 3 runs all failed (exit "
                              "status 127: nosuch: not found): nothing to export of it; "
                              "'opptune status' gives each job's reason (the jobs that "
                              "failed under the table)\n")
    assert said[True] == (1, "opptune export: --workload broken: its 3 runs by agent a1 all "
                             "failed (exit status 127: nosuch: not found): nothing to export "
                             "of it; 'opptune status --agent a1' gives each job's reason (the "
                             "jobs that failed under the table)\n")
    # 'measured' lists what has a successful run
    assert nope.returncode == 2 and nope.stderr == (
        "opptune export: --workload nope: no runs of it; measured: good\n")
    assert good.returncode == 0, good.stderr
    # where the message sends the user: the job's reason is there
    assert status.returncode == 0, status.stderr
    assert "job j-bad failed: every run of the job failed: exit status 127: nosuch: not " \
           "found" in status.stdout
    assert codes["daemon"] == 0, c.logs()


def test_at_best_exports_of_boards_with_different_clocks_compare_by_core_count(tmp_path):
    """Names carry the frequency, so 'compare_to a.json b.json' of an rpi4 (600..1500 MHz)
    and an rpi5 (1000..2400 MHz) paired only the 1000 MHz configurations, and none where the
    boards share no clock. With --at-best each core count is exported at its fastest
    configuration, named without the frequency: the boards compare core count by core count,
    the clock each ran at in the metadata. A marked run does not choose the clock."""
    def rows(platform, clocks):
        out = []
        for cores in (1, 2):
            for mhz, base in clocks.items():
                for i, k in enumerate((1.0, 1.02, 0.98)):
                    out.append({"agent": platform, "job_id": "job-" + platform,
                                "source": "sweep",
                                "record": {"platform": platform, "workload": "w",
                                           "input": "small", "cores": cores,
                                           "cpus": list(range(cores)), "threads": cores,
                                           "freq_mhz": mhz, "rep": i,
                                           "time_s": base / cores * k}})
        return out
    boards = {"pa": "rpi4", "pb": "rpi5"}
    a = rows("pa", {600.0: 5.0, 1000.0: 3.0, 1500.0: 2.0})
    b = rows("pb", {2400.0: 1.0, 1800.0: 1.4})
    # a marked run at 600 MHz, 1 core, faster than any: a neighbour's idle time, not the clock
    a.append({**a[0], "record": {**a[0]["record"], "time_s": 0.1, "rep": 9,
                                 "marked": "interference: load 3.5"}})
    files = {}
    for platform, runs in (("pa", a), ("pb", b)):
        _, summary = build_suite(runs, boards)
        assert all("MHz" in n for n in summary["names"])  # the default stays as it was
        suite, summary = build_suite(runs, boards, at_best=True)
        assert summary["names"] == ["w/small/1cores", "w/small/2cores"]
        assert summary["configurations"] == {"pa": 6, "pb": 4}[platform]
        files[platform] = tmp_path / f"{platform}.json"
        suite.dump(str(files[platform]))
        for bench in suite.get_benchmarks():
            meta = bench.get_metadata()
            assert meta["opptune_freq_mhz"] == {"pa": 1500.0, "pb": 2400.0}[platform]
            assert meta["opptune_at_best"].startswith(
                f"the fastest of {3 if platform == 'pa' else 2} configurations measured at ")
    p = pyperf_cli("compare_to", str(files["pa"]), str(files["pb"]))
    assert p.returncode == 0, p.stderr
    # both core counts paired: rpi4 at 1500 MHz against rpi5 at 2400 MHz
    assert "w/small/1cores: Mean +- std dev: [pa] 2.00 sec +- 0.04 sec -> [pb] 1.00 sec" \
        in p.stdout, p.stdout
    assert "w/small/2cores: Mean +- std dev: [pa] 1.00 sec +- 0.02 sec -> [pb] 500 ms" \
        in p.stdout, p.stdout


def test_export_at_best_through_the_command(cluster, tmp_path):
    out = tmp_path / "best.json"
    p = opptune("export", "--daemon", cluster.endpoint, "--workload", "pi_integrate",
                "--at-best", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"wrote {out}: 2 benchmarks (each core count's fastest of the "
                               "2 configurations measured), 6 values")
    names = [b.get_name() for b in pyperf.BenchmarkSuite.load(str(out)).get_benchmarks()]
    assert names == ["pi_integrate/small/1cores", "pi_integrate/small/2cores"]


def test_import_refuses_an_opptune_export_that_would_store_every_value_at_one_core_count(
        cluster, tmp_path):
    """An export imported (to move runs to another daemon, or by mistake) stored every value
    of every configuration at the one --cores given, each configuration a new workload named
    'pi_integrate/small/1cores'. It is refused in one line saying why (exit 2), nothing
    stored."""
    out = tmp_path / "export.json"
    p = opptune("export", "--daemon", cluster.endpoint, "--format", "pyperf", "--workload",
                "pi_integrate", "-o", str(out))
    assert p.returncode == 0, p.stderr
    before = cluster.rows("SELECT COUNT(*) FROM runs")
    p = opptune("import", str(out), "--daemon", cluster.endpoint, "--agent", "test-agent",
                "--cores", "2")
    assert p.returncode == 2 and p.stdout == "", p.stdout
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"opptune import: {out} is an opptune export: its 2 benchmarks "
                           "carry the configuration each ran at ('pi_integrate/small/1cores': "
                           "1 core(s) on "), line
    assert line.endswith("import stores every value at the one --cores (and --freq) given, "
                         "here 2, under the benchmark's name as a workload. Give it pyperf's "
                         "own results (a pyperf script's -o FILE.json, pyperformance run -o "
                         "FILE.json)"), line
    assert cluster.rows("SELECT COUNT(*) FROM runs") == before
