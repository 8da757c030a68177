"""benchmarks/run_all.py (make bench) answers --help instead of starting every benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUN_ALL = Path(__file__).resolve().parent.parent / "benchmarks" / "run_all.py"


def test_help_runs_no_benchmark():
    proc = subprocess.run([sys.executable, str(RUN_ALL), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage:")
    assert "== " not in proc.stdout  # no script was started


def test_an_unknown_option_is_refused_before_any_benchmark():
    proc = subprocess.run([sys.executable, str(RUN_ALL), "--quick"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "unrecognized arguments: --quick" in proc.stderr
    assert "== " not in proc.stdout


SCRIPTS = sorted(p for d in ("benchmarks", "tools") for p in (RUN_ALL.parent.parent / d).glob(
    "*.py"))


def test_every_benchmark_and_tool_answers_help_without_running():
    """`--help` prints the usage and exits 0 for each script (energy_fit.py ran its whole
    benchmark instead); a wrong option is refused, not run either."""
    assert len(SCRIPTS) > 20
    for script in SCRIPTS:
        proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.startswith("usage:"), (script, proc)
        proc = subprocess.run([sys.executable, str(script), "--no-such-option"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and ": error: " in proc.stderr and not proc.stdout, (
            script, proc)
