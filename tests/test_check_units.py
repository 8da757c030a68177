"""tools/check_units.py's pure parts, and the README lines it runs: no containers here."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "check_units.py"
_spec = importlib.util.spec_from_file_location("check_units", SCRIPT)
check_units = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_units)


def test_readme_units_section_splits_into_board_and_daemon_host():
    parts = check_units.units_commands((ROOT / "README.md").read_text())
    for part, unit in (("board", "opptune-agent"), ("daemon", "opptune-daemon")):
        install, start = check_units.split_start(parts[part])
        assert any(f"cp systemd/{unit}.service /etc/systemd/system/" in ln for ln in install)
        assert start == [f"systemctl daemon-reload && systemctl enable --now {unit}"]
    assert any("--system-site-packages" in ln for ln in parts["board"])
    assert any("'.[daemon]'" in ln for ln in parts["daemon"])


def test_units_section_errors_are_named():
    with pytest.raises(ValueError, match="no '#### Installing the units' section"):
        check_units.units_commands("# x\n")
    with pytest.raises(ValueError, match="board part starts no unit"):
        check_units.units_commands("# x\n#### Installing the units\n\n```\nls\n# the daemon\n"
                                   "systemctl enable --now d\n```\n")


def test_toml_keys_are_replaced_or_added_before_the_first_table():
    text = 'daemon = "tcp://x:1"   # where\nrun_as = ""\n[sweep]\nreps = 3\n'
    out = check_units.set_toml_keys(text, {"run_as": "opptune", "agent_id": "a",
                                           "bench_kernels": ["pi_integrate"]})
    data = tomllib.loads(out)
    assert data["run_as"] == "opptune" and data["agent_id"] == "a"
    assert data["bench_kernels"] == ["pi_integrate"] and data["sweep"] == {"reps": 3}
    assert data["daemon"] == "tcp://x:1"
    # the example configurations take them as they are shipped
    for name, keys in (("agent.toml", {"agent_id": "x", "run_as": "opptune"}),
                       ("daemon.toml", {"bind": "tcp://127.0.0.1:1", "accept_load": True})):
        data = tomllib.loads(check_units.set_toml_keys((ROOT / "etc" / name).read_text(), keys))
        assert {k: data[k] for k in keys} == keys


def test_probe_unit_keeps_the_sandbox_and_runs_the_probe():
    unit = (ROOT / "systemd" / "opptune-agent.service").read_text()
    probe = check_units.probe_unit(unit, "/usr/bin/python3 /p.py '{}'")
    keys = [ln.split("=", 1)[0] for ln in probe.splitlines() if "=" in ln
            and not ln.startswith("#")]
    assert "ExecStopPost" not in keys and "Restart" not in keys and "WantedBy" not in keys
    assert keys.count("ExecStart") == 1 and "Type=oneshot" in probe
    assert "ExecStart=/usr/bin/python3 /p.py '{}'" in probe
    for line in unit.splitlines():  # every sandbox line is still there
        if line.startswith(("Protect", "ReadWritePaths", "CapabilityBoundingSet",
                            "SystemCallFilter", "StateDirectory", "PrivateTmp")):
            assert line in probe.splitlines()


def test_probe_verdict_names_what_the_sandbox_got_wrong():
    expected = {"write": {"/var/lib/x": True, "/etc": False, "/absent": False},
                "read": {"/proc/stat": False}}
    ok, text = check_units.probe_verdict(
        expected, {"write": {"/var/lib/x": "ok", "/etc": "EROFS"}, "read": {"/proc/stat":
                                                                           "ENOENT"}})
    assert ok and text.startswith("ok: writes 1 allowed / 1 refused, reads 0 / 1")
    ok, text = check_units.probe_verdict(
        expected, {"write": {"/var/lib/x": "EROFS", "/etc": "ok"}, "read": {}})
    assert not ok
    assert "write /var/lib/x: EROFS, expected ok" in text
    assert "write /etc: ok, expected refused" in text


def test_probe_script_reports_each_path(tmp_path):
    """Absent paths are left out; the file a write probe makes is removed again."""
    spec = {"write": [str(tmp_path), str(tmp_path / "absent")], "read": ["/proc/self/status",
                                                                         "/nonexistent"]}
    r = subprocess.run([sys.executable, "-c", check_units.PROBE_SCRIPT, json.dumps(spec)],
                       capture_output=True, text=True, timeout=60)
    got = json.loads(r.stdout.split("CHECK-UNITS-PROBE ", 1)[1])
    assert got == {"write": {str(tmp_path): "ok"},
                   "read": {"/proc/self/status": "ok", "/nonexistent": "ENOENT"}}
    assert list(tmp_path.iterdir()) == []


def test_cpufreq_tree_is_one_policy_the_agent_reads(tmp_path):
    from opptune.agent.knobs.cpufreq import CpuFreq
    from opptune.agent.sysfs import SysFS
    root = tmp_path / "sys" / "devices" / "system" / "cpu" / "cpufreq"
    check_units.write_cpufreq_tree(root, 2)
    with CpuFreq(SysFS(str(tmp_path)), state_dir=str(tmp_path / "st"),
                 install_handlers=False) as cf:
        (p,) = cf.policies()
        assert p["name"] == "policy0" and p["cpus"] == [0, 1]
        assert p["frequencies_khz"] == list(check_units.FREQS_KHZ)
        assert set(check_units.SWEPT_KHZ) <= set(p["frequencies_khz"])
        cf.set({"policy0": check_units.SWEPT_KHZ[0]}, verify=False)
        assert (root / "policy0" / "scaling_setspeed").read_text().strip() == \
            str(check_units.SWEPT_KHZ[0])
    # closing restored the governor the check expects back
    assert (root / "policy0" / "scaling_governor").read_text().strip() == \
        check_units.FIRST_GOVERNOR


def test_missing_tools_say_what_to_install():
    none = lambda _name: None  # noqa: E731
    problems = check_units.missing_requirements(0, which=none, filesystems="nodev\toverlay\n")
    assert problems == ["missing systemd-container, mmdebstrap, util-linux: apt-get install "
                        "systemd-container mmdebstrap util-linux"]
    every = lambda n: "/usr/bin/" + n  # noqa: E731
    assert check_units.missing_requirements(0, which=every,
                                            filesystems="nodev\toverlay\n") == []
    assert "overlayfs" in check_units.missing_requirements(0, which=every,
                                                           filesystems="ext4\n")[0]
    not_root = check_units.missing_requirements(1000, which=every, filesystems="nodev\toverlay")
    assert len(not_root) == 1 and "run as root" in not_root[0]


def test_without_tools_the_script_exits_2_and_reports_no_pass(tmp_path):
    """PATH stripped: nothing of the check can run; it says so and never prints a table."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--cache-dir", str(tmp_path)],
                       env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "apt-get install systemd-container mmdebstrap" in r.stderr
    assert "nothing was checked" in r.stderr
    assert "PASSED" not in r.stdout + r.stderr and r.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_table_marks_steps_that_did_not_run():
    out = check_units.table({"userland": "cached (0 s)", "boot": "FAIL 3 s: x",
                             "ok": False}).splitlines()
    assert out[0] == "units: FAILED"
    assert [ln.split()[0] for ln in out[1:]] == [s.split()[0] for s in check_units.STEPS]
    assert "FAIL 3 s: x" in out[2]
    assert sum("not run" in ln for ln in out) == len(check_units.STEPS) - 2


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_target_runs_the_preflight_then_the_check():
    r = subprocess.run(["make", "-n", "check-units"], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "MAKEFLAGS": ""}, timeout=60)
    assert r.returncode == 0, r.stderr
    runs = [ln for ln in r.stdout.splitlines() if "tools/check_units.py" in ln]
    assert runs[0].endswith("tools/check_units.py --preflight")
    assert runs[-1].split("tools/check_units.py")[1].split() == []
