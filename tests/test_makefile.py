"""`make` reinstalls the project only when what the install builds from has changed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ["pyproject.toml", "setup.py", "MANIFEST.in", "src/opptune/__init__.py",
          "bench_suite/runtime.c",
          "bench_suite/kernels/triad.c", "bench_suite/kernels/kernels.h",
          "daemon/models/_memwall_eq15.c"]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


@pytest.fixture
def tree(tmp_path):
    """The Makefile beside stand-ins for its inputs, and a venv installed after all of them."""
    shutil.copy(ROOT / "Makefile", tmp_path)
    for i, name in enumerate(INPUTS):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (1_000_000 + i, 1_000_000 + i))
    py = tmp_path / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("")
    os.utime(py, (1_000_000, 1_000_000))
    stamp = tmp_path / ".venv" / ".opptune-installed"
    stamp.write_text("")
    os.utime(stamp, (2_000_000, 2_000_000))
    return tmp_path


def touch_later(path: Path):
    """Newer than the install, whatever the clock's granularity."""
    path.write_text("changed")
    os.utime(path, (3_000_000, 3_000_000))


def dry_run(tree: Path) -> str:
    out = subprocess.run(["make", "-n", "test"], cwd=tree, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_nothing_changed_runs_only_the_tests(tree):
    out = dry_run(tree)
    assert "pip install" not in out
    assert "pytest" in out


@pytest.mark.parametrize("name", INPUTS)
def test_a_changed_build_input_reinstalls(tree, name):
    touch_later(tree / name)
    assert "pip install -q -e '.[test]'" in dry_run(tree)


def test_a_python_edit_needs_no_reinstall(tree):
    touch_later(tree / "daemon" / "cli.py")
    assert "pip install" not in dry_run(tree)


def test_fresh_checkout_creates_venv_and_installs(tree):
    shutil.rmtree(tree / ".venv")
    out = dry_run(tree)
    assert "-m venv .venv" in out and "pip install -q -e '.[test]'" in out


def test_quiet_tests_run_alone_after_the_workers(tree):
    """The tests marked quiet judge the machine itself and skip under load: make test runs
    them after the parallel workers, in one process, and a selection without any (PYTEST_ARGS
    naming other files: pytest's exit 5) is no failure."""
    lines = [ln for ln in dry_run(tree).splitlines()
             if "-m pytest" in ln and "--collect-only" not in ln]
    assert len(lines) == 2, lines
    assert "-n 4" in lines[0] and '-m "not quiet"' in lines[0]
    assert "-n" not in lines[1].split() and "-m quiet" in lines[1]
    assert lines[1].endswith("|| [ $? -eq 5 ]")


def fake_python(tree: Path) -> Path:
    """The venv's python as a script that logs, per call, what Python would make of
    PYTHONDONTWRITEBYTECODE (set to a non-empty string: no bytecode written) and its
    arguments; the log's path."""
    log = tree / "calls.log"
    py = tree / ".venv" / "bin" / "python"
    py.write_text('#!/bin/sh\nif [ -n "$PYTHONDONTWRITEBYTECODE" ]; then w=no; else w=yes; fi\n'
                  f'echo "writes-bytecode=$w $*" >> {log}\n')
    py.chmod(0o755)
    os.utime(py, (1_000_000, 1_000_000))  # still older than the install's stamp
    return log


@pytest.mark.parametrize("workers", ["4", "2"])
def test_the_test_run_caches_bytecode_and_collects_once_before_the_workers(tree, workers):
    """An environment with PYTHONDONTWRITEBYTECODE (this project's machines) made every
    process of the suite compile the sources again and every worker rewrite the test
    modules: make test writes bytecode, and one collection caches the rewritten modules
    before the workers start."""
    log = fake_python(tree)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(["make", "test", f"TEST_WORKERS={workers}"], cwd=tree, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["writes-bytecode=yes"] * 3, calls
    assert "--collect-only" in calls[0] and "-n" not in calls[0].split()
    assert f"-n {workers}" in calls[1] and "--collect-only" not in calls[1]
    assert "-m quiet" in calls[2]


def test_a_single_process_run_collects_once(tree):
    """With TEST_WORKERS=0 the one process collects for itself: no collection before it."""
    log = fake_python(tree)
    out = subprocess.run(["make", "test", "TEST_WORKERS=0"], cwd=tree, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and not any("--collect-only" in c for c in calls), calls
