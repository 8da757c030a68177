"""opptune doctor: the board's state for measuring, from fake trees, this machine, and an agent's
hello through a real daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fake_trees import fake_tree
from procs import Cluster

from opptune.agent.doctor import collect
from opptune.daemon.status_view import print_status


def _put(root: str, rel: str, text) -> None:
    path = os.path.join(root, rel.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(f"{text}\n")


def quiet_board(tmp_path, name="x86-2numa") -> str:
    """A board tree set up for measuring: every check of the report is ok."""
    root = fake_tree(tmp_path, name)
    _put(root, "/proc/sys/kernel/randomize_va_space", 2)
    _put(root, "/sys/devices/system/cpu/isolated", "")
    _put(root, "/sys/devices/system/cpu/nohz_full", "")
    _put(root, "/sys/devices/system/cpu/intel_pstate/no_turbo", 1)
    _put(root, "/proc/sys/kernel/perf_event_max_sample_rate", 1)
    _put(root, "/proc/sys/kernel/perf_event_paranoid", 1)
    _put(root, "/proc/loadavg", "0.02 0.10 0.20 1/300 4711")
    _put(root, "/sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc")
    _put(root, "/proc/irq/default_smp_affinity", "1")
    for irq in (1, 2):
        _put(root, f"/proc/irq/{irq}/smp_affinity_list", "0")
        os.makedirs(os.path.join(root, f"proc/irq/{irq}/eth0"), exist_ok=True)
    for i in range(32):
        _put(root, f"/sys/devices/system/cpu/cpufreq/policy{i}/scaling_governor",
             "performance")
    return root, list(range(1, 32))  # the sweep uses every cpu but cpu 0, which keeps irqs


def by_name(report):
    return {c["name"]: c for c in report["checks"]}


def facts(sweep):
    return {"sweep_order": sweep, "cpufreq": {"available": True},
            "energy": {"available": True, "source": "rapl"}, "perf": {"available": True}}


def test_a_quiet_board_is_ready(tmp_path):
    root, sweep = quiet_board(tmp_path)
    report = collect(root, facts(sweep), euid=1000)
    checks = by_name(report)
    assert {c["verdict"] for c in report["checks"]} == {"ok"}, report
    assert report["warnings"] == 0 and report["summary"] == "ready for measuring"
    assert checks["aslr"]["value"] == "2 (full randomization)"
    assert checks["boost"]["value"] == "off"
    assert checks["governor"]["value"] == "performance (cpus 0-31)"
    assert checks["irq_affinity"]["value"].startswith("0 of 2 irqs")
    assert checks["clocksource"]["value"] == "tsc"


def test_the_usual_faults_warn_with_advice(tmp_path):
    root, sweep = quiet_board(tmp_path)
    _put(root, "/proc/sys/kernel/randomize_va_space", 0)
    _put(root, "/sys/devices/system/cpu/intel_pstate/no_turbo", 0)
    for i in range(32):
        _put(root, f"/sys/devices/system/cpu/cpufreq/policy{i}/scaling_governor",
             "ondemand" if i < 4 else "performance")
    _put(root, "/proc/irq/2/smp_affinity_list", "0-3")  # irq 2 may hit sweep cpus 1-3
    _put(root, "/proc/loadavg", "1.50 0.90 0.40 3/300 4711")
    _put(root, "/sys/devices/system/clocksource/clocksource0/current_clocksource", "hpet")
    _put(root, "/sys/devices/system/cpu/isolated", "2-5")  # part of the sweep only
    _put(root, "/proc/sys/kernel/perf_event_paranoid", 3)
    report = collect(root, facts(sweep), euid=1000)
    checks = by_name(report)
    warned = {n for n, c in checks.items() if c["verdict"] == "warn"}
    assert warned == {"aslr", "boost", "governor", "irq_affinity", "load", "clocksource",
                      "isolated_cpus", "perf_event"}
    assert "echo 2 > /proc/sys/kernel/randomize_va_space" in checks["aslr"]["advice"]
    assert "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo" in checks["boost"]["advice"]
    assert checks["governor"]["value"] == "ondemand (cpus 0-3); performance (cpus 4-31)"
    assert ("set the governor to performance" in checks["governor"]["advice"]
            and "let opptune pin frequencies" in checks["governor"]["advice"])
    assert checks["irq_affinity"]["value"].startswith("1 of 2 irqs")
    assert "write 0 to /proc/irq/*/smp_affinity_list" in checks["irq_affinity"]["advice"]
    assert "perf_event_paranoid=2" in checks["perf_event"]["advice"]
    assert report["warnings"] == 8
    assert report["summary"].startswith("8 warnings (ASLR no randomization; ")
    assert "governor ondemand; boost on" in report["summary"]
    assert "irqs on sweep cpus; load 1.50" in report["summary"]


def test_governor_advice_without_a_writable_cpufreq(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")  # starts under ondemand
    report = collect(root, {"cpufreq": {"available": False, "reason": "read-only"}})
    gov = by_name(report)["governor"]
    assert gov["verdict"] == "warn" and "cannot pin frequencies" in gov["advice"]
    assert "frequency" in by_name(report)["knobs"]["advice"]
    assert report["summary"] == "1 warning (governor ondemand)"


def test_knobs_without_cpufreq_name_no_governor(tmp_path):
    """A VM without cpufreq: the governor check said 'no cpufreq: the frequency is the
    firmware's' and the knobs line below it 'sweeps measure cores only, at the governor's
    frequency', of a governor that is not there."""
    import shutil
    root, sweep = quiet_board(tmp_path)
    shutil.rmtree(os.path.join(root, "sys/devices/system/cpu/cpufreq"))
    os.makedirs(os.path.join(root, "sys/devices/system/cpu/cpufreq"))
    report = collect(root, {**facts(sweep), "cpufreq": {"available": False,
                                                        "reason": "no cpufreq policies"}})
    assert by_name(report)["knobs"]["advice"] == (
        "opptune cannot set frequencies (no cpufreq policies): sweeps measure cores only, at "
        "the board's own frequency (no governor: the firmware's)")
    # cpufreq there but not writable: its governor does choose
    root = fake_tree(tmp_path / "ro", "odroid-xu4")
    report = collect(root, {"cpufreq": {"available": False, "reason": "read-only"}})
    assert by_name(report)["knobs"]["advice"].endswith(
        "sweeps measure cores only, at the governor's frequency")


def test_hot_zone_warns(tmp_path):
    root = fake_tree(tmp_path, "rpi4")  # passive trip 80 C
    _put(root, "/sys/class/thermal/thermal_zone0/temp", 76000)
    t = by_name(collect(root, facts([0, 1, 2, 3])))["temperature"]
    assert t["verdict"] == "warn" and t["value"] == "cpu-thermal 76 C (passive 80 C)"


def test_missing_and_odd_files_are_unavailable_not_a_crash(tmp_path):
    root = str(tmp_path / "empty")
    os.makedirs(root)
    _put(root, "/proc/sys/kernel/randomize_va_space", "banana")
    _put(root, "/proc/loadavg", "x y z")
    report = collect(root, euid=1000)
    assert [c["name"] for c in report["checks"]] == [
        "aslr", "isolated_cpus", "governor", "boost", "perf_event", "irq_affinity", "load",
        "temperature", "clocksource", "knobs", "meters"]
    checks = by_name(report)
    for name in ("aslr", "isolated_cpus", "governor", "boost", "perf_event", "irq_affinity",
                 "load", "temperature", "clocksource"):
        assert checks[name]["verdict"] == "unavailable" and checks[name]["reason"], name
    assert "banana" in checks["aslr"]["reason"]
    assert "/proc/irq" in checks["irq_affinity"]["reason"]
    assert report["warnings"] == 0
    json.dumps(report)  # plain types: it travels in the hello


def test_every_check_has_the_same_keys(tmp_path):
    """'short' came only with a warning and 'reason' only with an unavailable check, while
    docs/json-output.md promises every object of a kind the same keys (walk33)."""
    root, _ = quiet_board(tmp_path)
    _put(root, "/proc/sys/kernel/randomize_va_space", 0)  # a warning
    os.remove(os.path.join(root, "proc/loadavg"))  # an unavailable check
    report = collect(root, euid=1000)
    verdicts = {c["verdict"] for c in report["checks"]}
    assert {"ok", "warn", "unavailable"} <= verdicts
    keys = {"name", "value", "verdict", "advice", "short", "reason"}
    assert all(set(c) == keys for c in report["checks"]), report["checks"]
    checks = by_name(report)
    assert checks["aslr"]["short"] and checks["aslr"]["reason"] is None
    assert checks["load"]["reason"] and checks["load"]["short"] is None


def _opptune(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def test_this_machine_json_and_exit_code():
    proc = _opptune("doctor", "--json")
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)  # stdout holds JSON only
    assert len(report["checks"]) == 11
    assert proc.returncode == (2 if report["warnings"] else 0), proc.stderr


def test_cli_on_a_tree_text_and_exit(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    proc = _opptune("doctor", "--sysfs-root", root)
    assert proc.returncode == 2, proc.stderr
    assert "warn        governor: ondemand (cpus 0-7)" in proc.stdout
    assert "advice: set the governor to performance" in proc.stdout
    assert proc.stdout.rstrip().endswith("verdict: 1 warning (governor ondemand)")


def test_cli_on_a_tree_that_is_not_there_exits_1(tmp_path):
    """A mistyped --sysfs-root had every check 'unavailable', then 'verdict: ready for
    measuring' and exit 0 under 'this machine:': one line naming it now, exit 1 (no report
    could be made); a real tree is titled with its path, not as this machine."""
    (tmp_path / "a-file").write_text("")
    (tmp_path / "empty").mkdir()
    for root, why in ((tmp_path / "nowhere", "no such directory"),
                      (tmp_path / "a-file", "no such directory"),
                      (tmp_path / "empty", "holds no sys/ or proc/")):
        proc = _opptune("doctor", "--sysfs-root", str(root))
        assert proc.returncode == 1 and proc.stdout == "", proc.stdout
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"opptune doctor: --sysfs-root {root}: {why}"), line
    tree = fake_tree(tmp_path, "rpi4")
    proc = _opptune("doctor", "--sysfs-root", tree)
    assert proc.stdout.splitlines()[0] == f"the tree at {tree}:"


def test_cli_agent_errors_exit_1_without_traceback(tmp_path):
    proc = _opptune("doctor", "--agent", "nobody", "--daemon", "tcp://127.0.0.1:9",
                    "--timeout", "0.3")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("opptune doctor: ") and proc.stdout == ""


def test_status_line_renders_the_verdict():
    from io import StringIO
    from rich.console import Console
    out = StringIO()
    print_status({"agents": [{"id": "a1", "board": "rpi4 (virtual)", "platform": "p",
                              "alive": True, "doctor": "1 warning (governor ondemand)"},
                             {"id": "a2", "board": "old", "platform": "q", "doctor": None}]},
                 Console(file=out, width=200))
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("board ")]
    assert lines == ["board rpi4 (virtual) (agent a1): 1 warning (governor ondemand)"]


def test_e2e_hello_carries_the_report(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    _put(root, "/proc/sys/kernel/randomize_va_space", 1)
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False,
                extra_agent={"virtual_board": "odroid-xu4", "sysfs_root": root})
    try:
        c.start_daemon()
        c.start_agent()
        c.wait_for(lambda st: any(a.get("doctor") for a in st.get("agents", [])), 60,
                   "the agent's hello with its doctor report")
        want = "2 warnings (ASLR conservative randomization; governor ondemand)"
        proc = _opptune("status", "--daemon", c.endpoint, "--config", str(c.daemon_toml))
        assert proc.returncode == 0, proc.stderr
        assert f"board odroid-xu4 (virtual) (agent test-agent): {want}" in \
            proc.stdout.splitlines(), proc.stdout
        proc = _opptune("doctor", "--agent", "test-agent", "--json", "--daemon", c.endpoint,
                        "--config", str(c.daemon_toml))
        assert proc.returncode == 2, proc.stderr
        data = json.loads(proc.stdout)
        assert data["agent"] == "test-agent" and data["alive"] is True
        assert data["report"]["summary"] == want
        gov = by_name(data["report"])["governor"]
        assert gov["value"] == "ondemand (cpus 0-7)" and gov["verdict"] == "warn"
        proc = _opptune("doctor", "--agent", "ghost", "--daemon", c.endpoint,
                        "--config", str(c.daemon_toml))
        assert proc.returncode == 1 and "no agent 'ghost'" in proc.stderr
        assert "Traceback" not in proc.stderr
        # the report is stored: a restarted daemon shows it before the agent's next hello
        assert c.stop() == {"agent": 0, "daemon": 0}, c.logs()
        c.agent = None
        c.start_daemon()
        st = c.wait_for(lambda st: bool(st.get("agents")), 30, "the restarted daemon")
        (a,) = st["agents"]
        assert a["alive"] is False and a["doctor"] == want and a["doctor_age_s"] >= 0
        proc = _opptune("status", "--daemon", c.endpoint, "--config", str(c.daemon_toml))
        assert proc.returncode == 0, proc.stderr
        assert any(ln.startswith(f"board odroid-xu4 (virtual) (agent test-agent): {want} (as "
                                 "of its last hello, ") for ln in proc.stdout.splitlines()), \
            proc.stdout
        proc = _opptune("doctor", "--agent", "test-agent", "--json", "--daemon", c.endpoint,
                        "--config", str(c.daemon_toml))
        data = json.loads(proc.stdout)
        assert data["alive"] is False and data["report"]["summary"] == want
    finally:
        c.stop()
