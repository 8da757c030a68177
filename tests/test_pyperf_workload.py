"""``[[workloads]] pyperf = "bench.py"``: a pyperf benchmark script as a workload, its value
each run's time_s; through the real agent and daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from opptune.agent.runner import Runner, RunSpec
from opptune.agent.workloads import Workloads
from opptune.shared.config import ConfigError, load_agent_config
from procs import Cluster

CPUS = sorted(os.sched_getaffinity(0))

# Every value is known and says where pyperf's worker ran: 1 ms per cpu it may run on.
AFFINITY_SCRIPT = textwrap.dedent("""\
    import os
    import pyperf
    runner = pyperf.Runner()
    runner.bench_time_func("aff", lambda loops: loops * 0.001 * len(os.sched_getaffinity(0)))
    """)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "scripts" / "aff_bench.py"
    path.parent.mkdir()
    path.write_text(AFFINITY_SCRIPT)
    return path


def agent_toml(tmp_path, entry: str):
    path = tmp_path / "agent.toml"
    path.write_text(f'bench_kernels = []\n[[workloads]]\n{entry}\n')
    return path


def test_config_takes_a_script_relative_to_the_file_and_names_it(tmp_path, script):
    cfg = load_agent_config(agent_toml(tmp_path, 'pyperf = "scripts/aff_bench.py"\n'
                                                 'pyperf_args = ["--loops", "8"]'))
    (w,) = cfg.workloads
    assert (w.name, w.pyperf, w.pyperf_args, w.command) == (
        "aff_bench", str(script.resolve()), ["--loops", "8"], [])
    named = load_agent_config(agent_toml(tmp_path, f'name = "mine"\npyperf = "{script}"'))
    assert named.workloads[0].name == "mine"


@pytest.mark.parametrize("entry, message", [
    ('pyperf = "scripts/missing.py"', "pyperf script {tmp}/scripts/missing.py does not exist"),
    ('name = "x"\npyperf = "scripts/aff_bench.py"\ncommand = ["true"]',
     "has both 'command' and 'pyperf'"),
    ('name = "x"', "lacks 'command' (an argv array) or 'pyperf'"),
    ('pyperf = 3', "'pyperf' must be the path of a pyperf benchmark script"),
    ('pyperf = "scripts/aff_bench.py"\npyperf_args = "--fast"', "'pyperf_args' must be an array"),
])
def test_config_errors_name_the_entry_and_the_fix(tmp_path, script, entry, message):
    path = agent_toml(tmp_path, entry)
    with pytest.raises(ConfigError) as err:
        load_agent_config(path)
    assert str(err.value).startswith(f"{path}: [[workloads]] entry 1")
    assert message.format(tmp=tmp_path) in str(err.value)


def test_one_run_is_one_pyperf_value_on_the_runs_cpus(tmp_path, script):
    cfg = load_agent_config(agent_toml(tmp_path, f'pyperf = "{script}"\n'
                                                 'pyperf_args = ["--loops", "4"]'))
    runner = Runner(Workloads(cfg, catalogue={}), "pid0")
    rec = runner.run_once(RunSpec("aff_bench", "default", [CPUS[0]], 1), rep=0)
    assert rec.ok, rec.error
    assert rec.time_s == pytest.approx(0.001)  # pinned to one cpu, pyperf's worker too
    assert rec.extra["pyperf"] == {"benchmarks": {"aff": {"values": [rec.time_s], "loops": 4}}}
    assert rec.wall_s > rec.time_s
    assert "mpet" in rec.invalid  # an external program, like a command workload


def test_a_failing_script_is_a_failed_run_with_its_reason(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise SystemExit('no benchmark here')\n")
    cfg = load_agent_config(agent_toml(tmp_path, f'pyperf = "{bad}"'))
    rec = Runner(Workloads(cfg, catalogue={}), "pid0").run_once(
        RunSpec("bad", "default", [CPUS[0]], 1), rep=0)
    assert not rec.ok and rec.time_s is None
    assert "no benchmark here" in rec.error and f"pyperf script {bad} failed" in rec.error


def test_a_script_that_runs_no_benchmark_is_told_what_it_lacks(tmp_path):
    """Walking a board: a script that exits 0 without a pyperf.Runner failed each run with
    "wrote no usable result: [Errno 2] No such file or directory: '/tmp/opptune-pyperf-.../
    result.json'", a path the user never gave."""
    plain = tmp_path / "plain.py"
    plain.write_text("print('hello')\n")
    cfg = load_agent_config(agent_toml(tmp_path, f'pyperf = "{plain}"'))
    rec = Runner(Workloads(cfg, catalogue={}), "pid0").run_once(
        RunSpec("plain", "default", [CPUS[0]], 1), rep=0)
    assert not rec.ok and rec.time_s is None
    assert rec.error.endswith(
        f"pyperf script {plain} ran no pyperf benchmark (it exited without writing a result): "
        "it must run one through pyperf.Runner(), e.g. runner.bench_func(...) or "
        "runner.timeit(...), at its top level, with pyperf's options left to it"), rec.error
    assert "Errno" not in rec.error


@pytest.mark.integration
def test_sweep_of_a_pyperf_script_through_agent_and_daemon(tmp_path, script):
    if len(CPUS) < 2:
        pytest.skip("needs 2 cpus")
    c = Cluster(tmp_path, kernels=(), auto_sweep=False, max_cores=2,
                extra_daemon={"auto_recommend": False})
    with open(c.agent_toml, "a") as fh:
        fh.write(f'[[workloads]]\npyperf = "{script}"\npyperf_args = ["--loops", "4"]\n')
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30,
                        what="the agent")
        p = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "sweep", "--daemon",
                            c.endpoint, "--agent", "test-agent", "--workload", "aff_bench",
                            "--reps", "2", "--warmup", "0", "--size", "default", "--wait",
                            "--json"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr + c.logs()
        (job,) = json.loads(p.stdout)
        assert (job["state"], job["received"]) == ("done", 4)
        rows = c.rows("SELECT cores, cpus, time_s, ok FROM runs WHERE workload='aff_bench' "
                      "ORDER BY cores, seq")
        assert [(r[0], r[3]) for r in rows] == [(1, 1), (1, 1), (2, 1), (2, 1)]
        # each value is 1 ms per cpu the pyperf worker could run on: the point's cpus
        assert [r[2] for r in rows] == pytest.approx([0.001, 0.001, 0.002, 0.002])
        assert st["agents"][0]["alive"]
    finally:
        c.stop()
