"""tools/cpu_probe.py: one line per cpu set, the runs real (bench_suite's native kernels)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "cpu_probe.py"


def test_probe_runs_each_cpu_alone_then_pairs(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "fib_tasks", "--size", "small", "--reps",
                        "2", "--cpus", "0-1", "--json"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    runs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["cpus"] for x in runs] == [[0], [0], [1], [1], [0, 1], [0, 1]]
    assert all(x["kernel"] == "fib_tasks" and x["time_s"] > 0 and x["cpu_s"] > 0
               and x["steal_ticks"] >= 0 for x in runs)


def test_probe_names_a_failing_run(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "fib_tasks", "--size", "small",
                        "--cpus", "4096"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == 1
    assert "cpu_probe: fib_tasks on cpus [4096] failed:" in r.stderr
    assert "Traceback" not in r.stderr
