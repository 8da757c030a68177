"""The regular (non-editable) install: clean build, and nothing in the repository shadows it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.machinery import PathFinder
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# what a build needs; the copy keeps the build's by-products (build/, egg-info) out of the tree
_SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                               "run", "opptune-demo-*", "*.so")


def _source_version() -> str:
    """The version as written in src/opptune/__init__.py (read, not imported)."""
    text = (ROOT / "src" / "opptune" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M).group(1)


def test_version_has_one_place():
    """pyproject.toml takes the version from __version__ (no second copy to forget), and the
    installed metadata agrees with the package (make venv reinstalls when it changes)."""
    import importlib.metadata

    import opptune
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "opptune.__version__"}
    assert importlib.metadata.version("opptune") == opptune.__version__ == _source_version()


def test_repository_root_holds_no_importable_opptune():
    # Python puts the script's folder or the cwd first on sys.path: an opptune there would win
    assert PathFinder.find_spec("opptune", [str(ROOT)]) is None
    assert PathFinder.find_spec("opptune", [str(ROOT / "benchmarks")]) is None


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory):
    """``pip install --target`` of a copy of the tree: the build log and the install folder."""
    tmp = tmp_path_factory.mktemp("plain")
    src, target = tmp / "src", tmp / "site"
    shutil.copytree(ROOT, src, ignore=_SKIP)
    # the environment's "no bytecode" setting makes distutils warn; a user's shell has none
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-v", "--no-deps",
                          "--no-cache-dir", "--target", str(target), str(src)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + out.stderr, target


def test_build_prints_no_setuptools_warning(plain_install):
    log, _ = plain_install
    # pip's own notes about this machine's package index are not the build's
    warnings = [line for line in log.splitlines()
                if re.search(r"warn", line, re.I) and "Location 'file:" not in line]
    assert warnings == []


def test_wheel_ships_no_c_sources(plain_install):
    _, target = plain_install
    assert not [p for p in (target / "opptune").rglob("*") if p.suffix in (".c", ".h")]
    assert list((target / "opptune" / "bench_suite").glob("_kernels*.so"))


def test_script_from_repository_root_imports_the_installed_package(plain_install):
    _, target = plain_install
    code = ("import opptune, opptune.daemon, opptune.agent.cli\n"
            "import importlib.metadata\n"
            "print(opptune.__file__); print(opptune.daemon.__file__); print(opptune.__version__)\n"
            "print(importlib.metadata.version('opptune'))")
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    first, daemon, version, metadata = out.stdout.split()
    assert Path(first).is_relative_to(target) and Path(daemon).is_relative_to(target)
    # one source of the version: the built metadata is read from the package's __version__
    assert metadata == version == _source_version()
    bench = subprocess.run([sys.executable, "benchmarks/agent_overhead.py", "--help"], cwd=ROOT,
                           env=env, capture_output=True, text=True)
    assert bench.returncode == 0 and "usage" in bench.stdout, bench.stderr


def test_installed_copy_carries_eval_mpets_default_datasets(plain_install):
    """`opptune eval-mpet` without --data reads these beside the installed package."""
    from opptune.daemon.mpet_cli import DEFAULT_DATA

    _, target = plain_install
    for path in DEFAULT_DATA:
        shipped = target / "opptune" / Path(path).parent
        assert (shipped / "data.csv").stat().st_size > 0 and (shipped / "SOURCE.md").exists()


def test_installed_copy_runs_the_docs_eval_mpet_commands_from_any_directory(plain_install,
                                                                           tmp_path):
    """docs/virtual-board.md's `opptune eval-mpet --combine --data data/bench_suite_*/data.csv`
    from a directory that is not a clone: the installed copy ships the bench_suite sets and
    --data finds them by folder name (as data/NAME/data.csv, data/NAME or NAME)."""
    import json
    _, target = plain_install
    for name in ("bench_suite_local", "bench_suite_rpi4", "bench_suite_odroid_xu4",
                 "bench_suite_xeon16", "armpm_xu3_parsec"):
        shipped = target / "opptune" / "data" / name
        assert (shipped / "data.csv").stat().st_size > 0 and (shipped / "SOURCE.md").exists()
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run(
        [sys.executable, "-m", "opptune.daemon.cli", "eval-mpet", "--combine", "--json",
         "--data", "data/bench_suite_local/data.csv", "--data", "data/bench_suite_rpi4",
         "--data", "bench_suite_odroid_xu4"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)["results"][0]
    assert r["platforms"] == 3 and r["predictions"] > 0
    assert r["data"] == " + ".join(str(target / "opptune" / "data" / n / "data.csv") for n in
                                   ("bench_suite_local", "bench_suite_rpi4",
                                    "bench_suite_odroid_xu4"))
