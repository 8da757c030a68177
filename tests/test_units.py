"""The systemd units: exposure scores, syntax, and that their sandbox fits what the agent does.

The scores come from ``systemd-analyze security --offline=yes`` on the unit files as shipped
(skipped where systemd-analyze is missing or too old for --offline). The sandbox checks need no
systemd: they compare the unit's writable paths with every sysfs write the cpufreq knob makes on
the fake trees, and its state directory with the example configuration.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from opptune.agent.knobs.cpufreq import CpuFreq
from opptune.agent.sysfs import SysFS

from fake_trees import BOARD_NAMES, fake_tree

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "systemd"
MAX_SCORE = {"opptune-daemon.service": 3.0, "opptune-agent.service": 5.0}
FREQ_MANAGERS = ("tuned.service", "power-profiles-daemon.service", "cpupower.service")


def unit_keys(path: Path) -> dict[str, list[str]]:
    """``Key`` -> every value it is given in the unit (repeated keys accumulate)."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;[":
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def words(keys: dict[str, list[str]], key: str) -> list[str]:
    return " ".join(keys.get(key, [])).split()


def _analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed")
    res = subprocess.run([exe, "security", "--help"], capture_output=True, text=True)
    if "--offline" not in res.stdout:
        pytest.skip("this systemd-analyze has no --offline (systemd < 250)")
    return exe


@pytest.mark.parametrize("name", sorted(MAX_SCORE))
def test_security_score(name, tmp_path):
    exe = _analyze()
    res = subprocess.run([exe, "security", "--offline=yes", "--no-pager", str(UNITS / name)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", res.stdout)
    assert m, res.stdout[-2000:] + res.stderr
    assert float(m.group(1)) <= MAX_SCORE[name], res.stdout


@pytest.mark.parametrize("name", sorted(MAX_SCORE))
def test_unit_verifies(name, tmp_path):
    """No unknown key or bad value (ExecStart points at /bin/true: the program is not installed
    here, and verify refuses a unit whose program is missing)."""
    exe = _analyze()
    text = re.sub(r"/usr/local/bin/opptune-(agent|daemon)", "/bin/true",
                  (UNITS / name).read_text())
    unit = tmp_path / name
    unit.write_text(text)
    res = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr


def test_agent_unit_keeps_what_the_agent_needs():
    k = unit_keys(UNITS / "opptune-agent.service")
    caps = set(words(k, "CapabilityBoundingSet"))
    # run_as (setuid/setgid), stopping workloads of another user, pid targets' affinity
    assert {"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_NICE"} <= caps
    assert "CAP_SYS_ADMIN" not in caps and "CAP_DAC_OVERRIDE" not in caps
    # uid 0 with SYS_PTRACE writes any process's /proc/PID/mem; counters need no attach
    # (test_perf_counters_follow_a_workload_dropped_to_run_as_without_ptrace)
    assert "CAP_SYS_PTRACE" not in caps
    assert "perf_event_open" in words(k, "SystemCallFilter")
    assert k["ProtectSystem"] == ["strict"] and k["ProtectKernelTunables"] == ["yes"]
    assert set(FREQ_MANAGERS) <= set(words(k, "Conflicts"))
    assert any("--restore" in v for v in k["ExecStopPost"])
    state_dir = tomllib.loads((ROOT / "etc" / "agent.toml").read_text())["state_dir"]
    assert state_dir == "/var/lib/" + k["StateDirectory"][0]


@pytest.mark.parametrize("board", BOARD_NAMES)
def test_agent_unit_opens_every_path_the_knob_writes(tmp_path, board):
    """ProtectKernelTunables makes /sys read-only: every cpufreq write (set, then restore) must
    fall under one of the unit's ReadWritePaths."""
    k = unit_keys(UNITS / "opptune-agent.service")
    writable = [p.lstrip("-") for p in words(k, "ReadWritePaths")]
    assert all(p.startswith("/sys/") for p in writable), writable  # nothing else re-opened
    log: list = []
    fs = SysFS(fake_tree(tmp_path, board), write_log=log)
    with CpuFreq(fs, state_dir=str(tmp_path / "st"), install_handlers=False) as cf:
        for p in cf.policies():
            offer = p["frequencies_khz"] or [p["cpuinfo_min_khz"]]
            cf.set({p["name"]: min(offer)})
    assert log
    paths = {rel for rel, _ in log}
    outside = sorted(p for p in paths if not any(p.startswith(w + "/") for w in writable))
    assert outside == []


def test_daemon_unit_is_unprivileged():
    k = unit_keys(UNITS / "opptune-daemon.service")
    assert k["User"] != ["root"] and k["CapabilityBoundingSet"] == [""]
    assert k["ProtectSystem"] == ["strict"]


@pytest.mark.parametrize("name,module", [("opptune-agent.service", "opptune.agent"),
                                         ("opptune-daemon.service", "opptune.daemon.service")])
def test_a_configuration_error_is_not_restarted_forever(name, module, tmp_path):
    """Restart=on-failure restarted a unit whose configuration had a typo every 2 s: 5 starts
    in the 10 s start limit are never reached at that pace, so it repeated its one error line
    for good. The exit status of a configuration error is the one the unit does not restart."""
    k = unit_keys(UNITS / name)
    assert k["Restart"] == ["on-failure"]
    bad = tmp_path / "bad.toml"
    bad.write_text("run_timeout = 5\n")  # a typo'd key, refused by both programs
    res = subprocess.run([sys.executable, "-m", module, "--config", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert "unknown key 'run_timeout'" in res.stderr
    assert str(res.returncode) in words(k, "RestartPreventExitStatus")


def test_the_readme_installs_each_program_where_its_unit_runs_it():
    """The README's install lines ran 'pip install .' (refused as root on Debian 12:
    externally-managed-environment) and left the programs where they fell, while each unit
    runs /usr/local/bin/opptune-* with /etc/opptune/*.toml; a venv in a home directory cannot
    be run by either unit (ProtectHome=yes; the agent lacks CAP_DAC_READ_SEARCH for a 0700
    home). Each unit's program and configuration are put where its ExecStart names them, from a
    venv outside /home and /root."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("#### Installing the units", 1)[1].split("```")[1]
    lines = [ln.split("#", 1)[0].strip() for ln in block.splitlines()]
    for name in MAX_SCORE:
        program, _, config = unit_keys(UNITS / name)["ExecStart"][0].partition(" --config ")
        link = next((ln.split() for ln in lines if ln.startswith("ln -s ")
                     and any(w.endswith("/bin/" + Path(program).name) for w in ln.split())),
                    None)
        assert link, f"no 'ln -s' puts {program} in place: {lines}"
        assert link[-1].rstrip("/") == str(Path(program).parent), link
        venv = next(w for w in link if w.endswith("/bin/" + Path(program).name)).split("/bin/")[0]
        assert not venv.startswith(("/home", "/root", "~")), venv
        assert any(f"{venv}/bin/pip install" in ln and "python3 -m venv" in ln
                   for ln in lines), lines
        assert any(ln.startswith("install ") and ln.endswith(" " + config.split()[0])
                   for ln in lines), (config, lines)
        assert any(f"cp systemd/{name} /etc/systemd/system/" in ln for ln in lines)



# socket(2)'s first argument as strace prints it -> the name RestrictAddressFamilies= takes
_FAMILY = re.compile(r"socket\((?:AF|PF)_([A-Z0-9]+)")
# what each program does with its ZeroMQ socket: the daemon binds a ROUTER, the agent connects
_ZMQ = {"opptune-daemon.service":
        "s = c.socket(zmq.ROUTER); s.bind_to_random_port('tcp://127.0.0.1')",
        "opptune-agent.service":
        "s = c.socket(zmq.DEALER); s.connect('tcp://127.0.0.1:9'); s.send(b'x')"}


@pytest.mark.parametrize("name", sorted(_ZMQ))
def test_the_unit_allows_every_address_family_its_zmq_socket_opens(name, tmp_path):
    """Under a real systemd the daemon died at its start with SIGABRT ('Address family not
    supported by protocol (src/ip_resolver.cpp:542)') and was restarted every 2 s for good:
    libzmq's bind lists the interfaces (getifaddrs: a netlink socket), and the unit's
    RestrictAddressFamilies= had no AF_NETLINK. Every family the socket opens (strace) must be
    one the unit allows."""
    exe = shutil.which("strace")
    if exe is None:
        pytest.skip("strace is not installed")
    code = (f"import time, zmq; c = zmq.Context(); {_ZMQ[name]}; time.sleep(0.5); "
            "s.close(linger=0); c.term()")
    trace = tmp_path / "trace"
    res = subprocess.run([exe, "-f", "-qq", "-e", "trace=socket", "-o", str(trace),
                          sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    opened = {"AF_" + f for f in _FAMILY.findall(trace.read_text())}
    assert "AF_INET" in opened, opened  # the trace saw the tcp socket
    allowed = set(words(unit_keys(UNITS / name), "RestrictAddressFamilies"))
    assert opened <= allowed, f"{name} refuses {sorted(opened - allowed)}"


def _proc_files(trace: str, pids: set[int]) -> set[str]:
    """The /proc paths a trace names, a traced process's own pid written as ``self``."""
    out = set()
    for path in re.findall(r'"(/proc/[^"]*)"', trace):
        m = re.match(r"/proc/(\d+)(/.*)?$", path)
        if m and int(m.group(1)) in pids:
            path = "/proc/self" + (m.group(2) or "")
        out.add(re.sub(r"^/proc/(self|thread-self)/task/\d+", r"/proc/\1", path))
    return out


def test_the_daemon_reads_nothing_of_proc_the_unit_hides(tmp_path):
    """The daemon's unit has ProtectProc=invisible and ProcSubset=pid: /proc shows it its own
    processes only, without /proc/stat, /proc/cpuinfo, /proc/sys and the like. Traced through
    a whole sweep, fit, recommendation, verification and its stop, every /proc file the daemon
    opens is its own, but two whose absence is provided for: /proc/stat, which psutil (imported
    by pyperf) reads at its import, and glibc's overcommit_memory (the daemon ran so under
    systemd 252, its import, that loop and its stop included)."""
    exe = shutil.which("strace")
    if exe is None:
        pytest.skip("strace is not installed")
    from procs import Cluster
    trace = tmp_path / "trace"
    c = Cluster(tmp_path, kernels=("pi_integrate",), extra_agent={"virtual_board": "rpi4"},
                daemon_prefix=[exe, "-f", "-qq", "-e", "trace=%file,%process",
                               "-e", "signal=none", "-o", str(trace)])
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda st: any(r.get("state") in ("verified", "off")
                                  for r in st.get("recommendations") or []),
                   timeout=180, what="a verified recommendation")
    finally:
        # the daemon is strace's child: strace signalled alone detaches and leaves it running
        tracer = c.daemon.pid
        for pid in Path(f"/proc/{tracer}/task/{tracer}/children").read_text().split():
            os.kill(int(pid), signal.SIGTERM)
        c.stop()
    text = trace.read_text(errors="replace")
    pids = {int(p) for p in re.findall(r"^(\d+) ", text, re.M)}
    read = _proc_files(text, pids)
    hidden = sorted(p for p in read if not p.startswith("/proc/self"))
    # glibc's malloc reads overcommit_memory once, if it shrinks a thread's arena (at the
    # daemon's stop, in some runs), and shrinks the usual way without it
    assert "/proc/stat" in hidden
    assert set(hidden) <= {"/proc/stat", "/proc/sys/vm/overcommit_memory"}, hidden
    k = unit_keys(UNITS / "opptune-daemon.service")
    assert k["ProtectProc"] == ["invisible"] and k["ProcSubset"] == ["pid"]


@pytest.mark.parametrize("name", sorted(MAX_SCORE))
def test_the_unit_cannot_write_its_configuration(name):
    """A probe with the agent's sandbox under systemd 252 (make check-units) opened
    /etc/opptune for writing: ConfigurationDirectory= re-opens its directory under
    ProtectSystem=strict, so the root agent could rewrite its own agent.toml (run_as, daemon).
    The units write only their state directory (and the agent the cpufreq files)."""
    k = unit_keys(UNITS / name)
    assert k["ProtectSystem"] == ["strict"]
    reopened = {key: k[key] for key in ("ConfigurationDirectory", "ReadWritePaths")
                if any("/etc" in v or key == "ConfigurationDirectory" for v in k.get(key, []))}
    assert reopened == {}
