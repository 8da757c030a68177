"""cpufreq knob on fake trees of every driver style: read, set, verify, refuse, restore."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from opptune.agent.knobs.cpufreq import (STATE_FILENAME, CpuFreq, FrequencyUnavailable,
                                         read_policies, restore_from_state_file)
from opptune.agent.sysfs import SysFS
from opptune.agent.virtual_board import make_tree

from fake_trees import amd_pstate_spec, cppc_spec, fake_tree

P0 = "/sys/devices/system/cpu/cpufreq/policy0"
P4 = "/sys/devices/system/cpu/cpufreq/policy4"


def _state(fs, policy="policy0"):
    d = f"/sys/devices/system/cpu/cpufreq/{policy}"
    return (fs.read_text(f"{d}/scaling_governor"), fs.read_int(f"{d}/scaling_min_freq"),
            fs.read_int(f"{d}/scaling_max_freq"), fs.read_int(f"{d}/scaling_cur_freq"))


def test_read_table_driver(tmp_path):
    pols = read_policies(fake_tree(tmp_path, "odroid-xu4"))
    assert [p["name"] for p in pols] == ["policy0", "policy4"]
    little, big = pols
    assert little["driver"] == "cpufreq-dt" and little["method"] == "setspeed"
    assert little["frequencies_khz"][0] == 200000 and little["frequencies_khz"][-1] == 1400000
    assert big["cpuinfo_max_khz"] == 2000000 and big["related_cpus"] == [4, 5, 6, 7]
    assert big["transition_latency_ns"] == 100000 and "userspace" in big["governors"]


def test_read_tableless_drivers(tmp_path):
    pols = read_policies(fake_tree(tmp_path, "x86-2numa"))
    assert len(pols) == 32
    p = pols[0]
    assert p["driver"] == "intel_pstate" and p["frequencies_khz"] is None
    assert (p["cpuinfo_min_khz"], p["cpuinfo_max_khz"], p["base_khz"]) == (1200000, 3200000,
                                                                           2400000)
    assert p["method"] == "pin-limits" and p["governors"] == ["performance", "powersave"]
    amd = read_policies(make_tree(amd_pstate_spec(), str(tmp_path / "amd")))[0]
    assert amd["driver"] == "amd-pstate" and amd["method"] == "setspeed"


def test_no_cpufreq_is_unavailable_not_a_crash(tmp_path):
    cf = CpuFreq(str(tmp_path), install_handlers=False)
    assert not cf.available and "no cpufreq" in cf.unavailable_reason
    with pytest.raises(OSError, match="no cpufreq"):
        cf.set({"policy0": 1000000})
    assert read_policies("/") == read_policies(SysFS("/"))  # this machine: whatever it has


def test_setspeed_path_and_verify(tmp_path):
    log = []
    fs = SysFS(fake_tree(tmp_path, "odroid-xu4"), write_log=log)
    orig = _state(fs, "policy4")
    cf = CpuFreq(fs, state_dir=str(tmp_path / "state"), install_handlers=False)
    res = cf.set({"policy4": 1200000})["policy4"]
    assert res["observed_khz"] == 1200000 and res["verified"] and res["method"] == "setspeed"
    assert log == [(f"{P4}/scaling_governor", "userspace"), (f"{P4}/scaling_setspeed", "1200000")]
    assert _state(fs, "policy0")[0] == "ondemand"  # the other cluster untouched
    assert os.path.exists(tmp_path / "state" / STATE_FILENAME)
    assert cf.close() == []
    assert _state(fs, "policy4") == orig
    # as the kernel does, the tree reads back what was written with its newline ('cat' of
    # the virtual board's governor printed 'ondemand' run into the next line)
    with open(fs.path(f"{P4}/scaling_governor")) as fh:
        assert fh.read() == "ondemand\n"
    assert not os.path.exists(tmp_path / "state" / STATE_FILENAME)


@pytest.mark.parametrize("target,expect_first", [(3000000, "scaling_max_freq"),
                                                 (1500000, "scaling_min_freq")])
def test_pin_write_order(tmp_path, target, expect_first):
    log = []
    fs = SysFS(fake_tree(tmp_path, "x86-2numa"), write_log=log)
    cf = CpuFreq(fs, install_handlers=False)
    cf.set({"policy0": 2000000})
    del log[:]
    res = cf.set({"policy0": target})["policy0"]
    assert [os.path.basename(p) for p, _ in log] == [expect_first, ({"scaling_max_freq",
            "scaling_min_freq"} - {expect_first}).pop()]
    assert res["observed_khz"] == target and res["verified"]
    assert _state(fs)[1:] == (target, target, target)
    cf.close()
    assert _state(fs) == ("powersave", 1200000, 3200000, 1200000)


def test_strict_fake_refuses_crossing_limits(tmp_path):
    # The fake emulates the kernel refusing min > max: a wrong order would fail loudly.
    fs = SysFS(fake_tree(tmp_path, "x86-2numa"))
    fs.write(f"{P0}/scaling_max_freq", 1500000)
    with pytest.raises(OSError, match="above max"):
        fs.write(f"{P0}/scaling_min_freq", 2000000)


def test_refuses_frequencies_not_offered(tmp_path):
    fs = SysFS(fake_tree(tmp_path, "rpi4"))
    cf = CpuFreq(fs, install_handlers=False)
    with pytest.raises(FrequencyUnavailable, match="600000, 750000, 1000000, 1200000, 1500000"):
        cf.set({"policy0": 1100000})
    with pytest.raises(FrequencyUnavailable, match="outside"):
        CpuFreq(fake_tree(tmp_path, "x86-2numa"), install_handlers=False).set(
            {"policy0": 3500000})
    assert not cf.keeper.changed  # nothing was written
    assert _state(fs)[0] == "ondemand"


@pytest.mark.parametrize("spec_fn", [amd_pstate_spec, cppc_spec])
def test_tableless_userspace_drivers(tmp_path, spec_fn):
    fs = SysFS(make_tree(spec_fn(), str(tmp_path / "t")))
    orig = _state(fs)
    with CpuFreq(fs, install_handlers=False) as cf:
        res = cf.set_for_cpus([0], 1700000)
        (name, r), = res.items()
        assert name == "policy0" and r["observed_khz"] == 1700000 and r["verified"]
    assert _state(fs) == orig


def test_setspeed_widens_narrowed_limits(tmp_path):
    fs = SysFS(fake_tree(tmp_path, "odroid-xu4"))
    fs.write(f"{P4}/scaling_max_freq", 1000000)  # someone capped the big cluster
    with CpuFreq(fs, install_handlers=False) as cf:
        assert cf.set({"policy4": 1800000})["policy4"]["observed_khz"] == 1800000
    assert fs.read_int(f"{P4}/scaling_max_freq") == 1000000


CHILD = textwrap.dedent("""
    import sys, signal
    from opptune.agent.knobs.cpufreq import CpuFreq
    from opptune.agent.virtual_board import attach
    attach(sys.argv[1])  # this process writes the tree: the virtual kernel reacts
    cf = CpuFreq(sys.argv[1], state_dir=sys.argv[2])
    r = cf.set({"policy4": 800000, "policy0": 600000})
    print("ready", r["policy4"]["observed_khz"], flush=True)
    if sys.argv[3] == "crash":
        import os; os._exit(3)  # no atexit, no handlers: like a SIGKILL or a segfault
    signal.pause()
""")


def _start_child(root, state_dir, mode):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, root, state_dir, mode],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # synchronises on the child having set the frequency
    assert line.split() == ["ready", "800000"], line
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_restores(tmp_path, sig):
    root = fake_tree(tmp_path, "odroid-xu4")
    fs = SysFS(root)
    orig = (_state(fs, "policy0"), _state(fs, "policy4"))
    proc = _start_child(root, str(tmp_path / "st"), "wait")
    assert _state(fs, "policy4")[3] == 800000
    proc.send_signal(sig)
    rc = proc.wait(timeout=20)
    assert rc != 0
    assert (_state(fs, "policy0"), _state(fs, "policy4")) == orig
    assert not (tmp_path / "st" / STATE_FILENAME).exists()


def test_crash_then_restore_from_state_file(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    fs = SysFS(root)
    orig = (_state(fs, "policy0"), _state(fs, "policy4"))
    proc = _start_child(root, str(tmp_path / "st"), "crash")
    assert proc.wait(timeout=20) == 3
    path = tmp_path / "st" / STATE_FILENAME
    saved = json.loads(path.read_text())
    assert saved["policies"]["policy4"]["governor"] == "ondemand"
    assert _state(fs, "policy4")[:1] == ("userspace",)
    res = restore_from_state_file(str(path), root)
    assert res["restored"] == ["policy0", "policy4"] and res["problems"] == []
    assert (_state(fs, "policy0"), _state(fs, "policy4")) == orig
    assert not path.exists()
    assert restore_from_state_file(str(path), root)["restored"] == []


def test_stale_state_file_restored_before_new_save(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    fs = SysFS(root)
    proc = _start_child(root, str(tmp_path / "st"), "crash")
    proc.wait(timeout=20)
    # A new agent must not take the crashed run's pinned state for the original.
    with CpuFreq(root, state_dir=str(tmp_path / "st"), install_handlers=False) as cf:
        cf.set({"policy4": 1000000})
    assert _state(fs, "policy4")[0] == "ondemand"
