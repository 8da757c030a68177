"""The agent's real sysfs path knows nothing of the virtual board; configuration selects it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from opptune.agent.knobs.cpufreq import CpuFreq
from opptune.agent.sysfs import SysFS, register_driver
from opptune.agent.virtual_board import attach, make_tree

P4 = "/sys/devices/system/cpu/cpufreq/policy4"
REAL_PATH = ("opptune.agent.sysfs", "opptune.agent.cli", "opptune.agent.link",
             "opptune.agent.apply", "opptune.agent.platform", "opptune.agent.workloads",
             "opptune.agent.outbox", "opptune.agent.topology", "opptune.agent.runner",
             "opptune.agent.knobs.cpufreq", "opptune.agent.knobs.state",
             "opptune.agent.meters.perf", "opptune.agent.meters.energy",
             "opptune.agent.meters.rusage")


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_real_path_modules_do_not_import_the_virtual_board():
    out = run(f"import importlib, sys\nfor m in {REAL_PATH!r}: importlib.import_module(m)\n"
              "print(sorted(m for m in sys.modules if 'virtual' in m))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_opening_and_writing_a_virtual_tree_without_configuration_stays_raw(tmp_path):
    # even on a tree the virtual board wrote, the real path only reads and writes files
    root = make_tree("odroid-xu4", str(tmp_path / "t"))
    code = ("import sys\n"
            "from opptune.agent.sysfs import SysFS\n"
            "from opptune.agent.topology import read_topology\n"
            f"fs = SysFS({root!r}); read_topology(fs)\n"
            f"fs.write('{P4}/scaling_max_freq', 1000000)\n"
            f"print(fs.read_int('{P4}/scaling_cur_freq'))\n"
            "print(sorted(m for m in sys.modules if 'virtual' in m))")
    out = run(code)
    assert out.returncode == 0, out.stderr
    cur, mods = out.stdout.splitlines()
    assert mods == "[]"
    assert int(cur) != 1000000  # no kernel emulation: nothing followed the write


def test_attached_tree_emulates_the_kernel(tmp_path):
    root = make_tree("odroid-xu4", str(tmp_path / "t"))  # attaches in this process
    fs = SysFS(root)
    fs.write(f"{P4}/scaling_max_freq", 1000000)
    assert fs.read_int(f"{P4}/scaling_cur_freq") <= 1000000
    with CpuFreq(fs, install_handlers=False) as cf:
        assert cf.set({"policy4": 800000})["policy4"]["observed_khz"] == 800000


def test_attach_refuses_what_is_not_a_virtual_tree(tmp_path):
    with pytest.raises(ValueError, match="not a virtual board tree"):
        attach(str(tmp_path))
    with pytest.raises(ValueError, match="no write driver"):
        register_driver("/", lambda fs: None)


def test_agent_configured_with_virtual_board_needs_its_tree(tmp_path):
    out = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", "/dev/null",
                          "--state-dir", str(tmp_path / "s"), "--virtual-board", "rpi4",
                          "--sysfs-root", str(tmp_path), "--restore"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "virtual_board" in out.stderr and "not a virtual board tree" in out.stderr


def test_agent_restore_on_configured_virtual_board_uses_its_kernel(tmp_path):
    root = make_tree("odroid-xu4", str(tmp_path / "t"))
    before = SysFS(root).read_int(f"{P4}/scaling_cur_freq")
    state = str(tmp_path / "s")
    crash = run("import os\n"
                "from opptune.agent.knobs.cpufreq import CpuFreq\n"
                "from opptune.agent.virtual_board import attach\n"
                f"attach({root!r})\n"
                f"CpuFreq({root!r}, state_dir={state!r}).set({{'policy4': 800000}})\n"
                "os._exit(3)  # died with the knob changed")
    assert crash.returncode == 3, crash.stderr
    assert SysFS(root).read_int(f"{P4}/scaling_cur_freq") == 800000
    out = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", "/dev/null",
                          "--state-dir", state, "--virtual-board", "odroid-xu4",
                          "--sysfs-root", root, "--restore"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "restored policy4" in out.stderr
    # cur_freq followed the restored limits: the virtual kernel served the restore's writes
    assert SysFS(root).read_int(f"{P4}/scaling_cur_freq") == before
