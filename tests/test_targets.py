"""Configs applied to a target: a running process and its threads, a systemd unit's cgroup."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys

import pytest

from opptune.agent.apply import Executor, Refused
from opptune.agent.outbox import Outbox
from opptune.agent.platform import discover
from opptune.agent.runner import Runner
from opptune.agent.sysfs import SysFS
from opptune.agent.targets import TargetError, Targets, find_unit_cgroup
from opptune.agent.workloads import Workloads
from opptune.shared import protocol as P
from opptune.shared.config import AgentConfig, CommandWorkload
from fake_trees import cgroup_tree

PY = sys.executable

BUSY = """
import sys, threading
def spin(say=False):
    if say:
        print(threading.get_native_id(), flush=True)
    while True:
        pass
for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:  # "spawn": one more thread, which prints its id
    threading.Thread(target=spin, args=(True,), daemon=True).start()
"""


def make_env(tmp_path, targets):
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(tmp_path), workloads=[
        CommandWorkload("w", [PY, "-c", "print('{\"time_s\": 0.1}')"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    runner = Runner(wl, platform["id"])
    ob = Outbox(str(tmp_path / "ob"))
    ex = Executor("a1", platform, wl, runner, ob, send=lambda m: None,
                  state_dir=str(tmp_path), targets=targets)
    return ex, ob


def config(target, cpus=(0,), cid="c1"):
    return P.make("config", "daemon", {"config_id": cid, "workload": "w", "size": "default",
                                       "cpus": list(cpus), "threads": 1, "freq_khz": None,
                                       "reps": 1, "target": target})


def applied(ex):
    msgs = [P.decode(data) for _, data in ex.outbox.pending()]
    return [m["body"] for m in msgs if m["type"] == "applied"]


@pytest.fixture
def busy():
    proc = subprocess.Popen([PY, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, bufsize=1)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def test_a_running_process_gets_every_thread_pinned_and_is_measured(tmp_path, busy):
    targets = Targets(SysFS("/"), systemd=False)
    ex, ob = make_env(tmp_path, targets)
    try:
        msg = config({"kind": "pid", "pid": busy.pid, "window_s": 0.3})
        ex.validate_config(msg["body"])
        ob.save_config("c1", msg)
        ex.apply_config(msg)
        (body,) = applied(ex)
        tids = sorted(int(t) for t in os.listdir(f"/proc/{busy.pid}/task"))
        assert len(tids) == 3  # main + 2 busy threads
        for tid in tids:
            assert os.sched_getaffinity(tid) == {0}
        assert body["ok"] is True and body["time_s"] is None
        m = body["measured"]
        assert m["target"]["tids"] == tids and m["target"]["method"] == "sched_setaffinity"
        # two spinning threads confined to one cpu: at most one cpu busy over the window (less
        # on a loaded machine)
        assert 0 < m["cpus_busy"] <= 1.1 and m["cpu_s"] > 0, m
        assert m["energy_j"] is None and m["energy_unavailable"]
        # a thread started afterwards inherits the cpu set from the thread that starts it
        busy.stdin.write("spawn\n")
        busy.stdin.flush()
        late = int(busy.stdout.readline())
        assert late not in tids and os.sched_getaffinity(late) == {0}
        # the agent stopping puts the original affinity back
        assert targets.restore() == []
        for tid in tids:
            assert os.sched_getaffinity(tid) == set(range(os.cpu_count()))
        assert os.sched_getaffinity(late) == {0}  # not ours to restore: it was born there
    finally:
        ob.close()


def test_a_unit_cgroup_gets_its_cpuset_written_and_restored(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="opptune.agent.apply")
    root = tmp_path / "root"
    d = cgroup_tree(root)
    targets = Targets(SysFS(str(root)), systemd=False)
    assert find_unit_cgroup(targets.fs, "web") == "/sys/fs/cgroup/system.slice/web.service"
    ex, ob = make_env(tmp_path, targets)
    try:
        msg = config({"kind": "unit", "unit": "web", "window_s": 0.05})
        ex.validate_config(msg["body"])
        ob.save_config("c1", msg)
        ex.apply_config(msg)
        (body,) = applied(ex)
        assert body["ok"], body
        assert (d / "cpuset.cpus").read_text() == "0"
        t = body["measured"]["target"]
        assert t == {"kind": "unit", "unit": "web.service", "method": "cgroup cpuset.cpus",
                     "cgroup": "/sys/fs/cgroup/system.slice/web.service", "allowed_cpus": "0"}
        assert body["measured"]["cpu_s"] == 0.0  # the fake counter does not move
        # the log says it in one line, not as the dicts sent ("applied to {'kind': 'unit', ...")
        (line,) = [r.getMessage() for r in caplog.records if "applied" in r.getMessage()]
        assert line.startswith("config c1 applied to web.service; 0.00 cpus busy over "), line
        assert "{" not in line and "ok=" not in line
        assert targets.restore() == []
        assert (d / "cpuset.cpus").read_text() == "0-1"
    finally:
        ob.close()


@pytest.mark.parametrize("asked, text", [([0, 1], "0-1"), ([3], "3")])
def test_a_unit_cgroup_whose_parent_allows_other_cpus_is_refused(tmp_path, asked, text):
    """Without systemd the unit's cpuset.cpus was written and the configuration measured as
    confined to the cpus asked, while the kernel confined the unit to those its slice allows
    (0-1 -> 0), or to all the slice's where it allows none (3 -> 0). Read back, it is undone
    and refused with the reason, as EffectiveCPUs is under systemd."""
    root = tmp_path / "root"
    d = cgroup_tree(root, parent_allows="0")
    rec = tmp_path / "cpuset-state.json"
    from opptune.agent.knobs.state import CpusetRecord
    targets = Targets(SysFS(str(root)), systemd=False,
                      record=CpusetRecord(str(rec), str(root)))
    with pytest.raises(TargetError) as err:
        targets.apply({"kind": "unit", "unit": "web"}, asked, owner="c1")
    assert str(err.value) == (
        f"cpuset.cpus={text} of web.service took effect as cpus 0 (its parent /sys/fs/cgroup/system.slice allows cpus 0 only) (cpuset.cpus "
        "put back to 0-1); choose cpus among 0, or widen /sys/fs/cgroup/system.slice/"
        "cpuset.cpus")
    assert (d / "cpuset.cpus").read_text() == "0-1"
    assert targets.owners() == set() and not rec.exists()


def test_a_unit_cgroup_without_an_effective_cpuset_is_refused(tmp_path):
    root = tmp_path / "root"
    d = cgroup_tree(root)
    (d / "cpuset.cpus.effective").unlink()
    targets = Targets(SysFS(str(root)), systemd=False)
    with pytest.raises(TargetError, match="^cpuset.cpus=0 of web.service cannot be checked: "
                                          "No such file or directory reading /sys/fs/cgroup/"
                                          "system.slice/web.service/cpuset.cpus.effective "
                                          r"\(cpuset.cpus put back to 0-1\); enable the cpuset"):
        targets.apply({"kind": "unit", "unit": "web"}, [0])
    assert (d / "cpuset.cpus").read_text() == "0-1" and targets.owners() == set()


def test_systemd_machines_use_systemctl_set_property(tmp_path):
    log = tmp_path / "calls"
    fake = tmp_path / "systemctl"
    fake.write_text("#!/bin/sh\n"
                    f"echo \"$*\" >> {log}\n"
                    "case \"$*\" in *LoadState*) echo loaded;; *AllowedCPUs\\ --value*) "
                    "echo 0-1;; *EffectiveCPUs*) echo EffectiveCPUs=1;; esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    targets = Targets(SysFS("/"), systemctl=str(fake), systemd=True)
    targets.check({"kind": "unit", "unit": "web"})
    done = targets.apply({"kind": "unit", "unit": "web"}, [1])
    assert done["method"] == "systemctl set-property --runtime"
    assert targets.restore() == []
    calls = log.read_text().splitlines()
    assert "set-property --runtime web.service AllowedCPUs=1" in calls
    assert calls[-1] == "set-property --runtime web.service AllowedCPUs=0-1"


@pytest.mark.parametrize("target, reason", [
    ({"kind": "pid", "pid": 2 ** 22 + 7}, "no process 4194311 on this machine"),
    ({"kind": "pid", "pid": os.getpid()}, "is the agent itself"),
    ({"kind": "pid", "pid": "12"}, "target pid must be a process id"),
    ({"kind": "unit", "unit": "nope"}, "no unit nope.service"),
    ({"kind": "vm"}, "target kind 'vm' is unknown"),
    ({"kind": "pid", "pid": 1, "window_s": 0}, "window_s must be"),
])
def test_bad_targets_are_refused_with_the_reason(tmp_path, target, reason):
    root = tmp_path / "root"
    cgroup_tree(root)
    ex, ob = make_env(tmp_path, Targets(SysFS(str(root)), systemd=False))
    try:
        msg = config(target)
        with pytest.raises(Refused, match=reason):
            ex.validate_config(msg["body"])
        ex.refuse_config(msg["body"], "x")  # the path Worker.submit takes
    finally:
        ob.close()


@pytest.mark.parametrize("target", [{"kind": "pid", "pid": 1}, {"kind": "unit", "unit": "web"}])
def test_a_virtual_board_refuses_process_and_unit_targets_alike(tmp_path, target):
    """Walking a virtual rpi4: a pid target was refused as needing a real board, a unit
    target with 'no unit nosuch.service: no cgroup named so under .../virtual-board-rpi4/sys/
    fs/cgroup (is it running? cgroup v2 mounted?)', the board's tree having no cgroups."""
    root = tmp_path / "root"
    cgroup_tree(root)  # even a tree with the unit: its cpus are the board's
    ex, ob = make_env(tmp_path, Targets(SysFS(str(root)), virtual=True, systemd=False))
    try:
        with pytest.raises(Refused, match=f"a {target['kind']} target needs a real board"):
            ex.validate_config(config(target)["body"])
    finally:
        ob.close()


def test_an_agent_without_targets_refuses_pid_targets(tmp_path):
    ex, ob = make_env(tmp_path, None)
    try:
        with pytest.raises(Refused, match="commands it launches only"):
            ex.validate_config(config({"kind": "pid", "pid": 1})["body"])
    finally:
        ob.close()


def _systemctl_of_a_unit_that_goes(tmp_path):
    """A systemctl whose unit web.service is gone once the file ``gone`` exists: then
    set-property fails as systemd's does and LoadState says not-found."""
    gone = tmp_path / "gone"
    fake = tmp_path / "bin" / "systemctl"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n"
                    f"if [ -e {gone} ]; then case \"$*\" in\n"
                    "  *LoadState*) echo not-found;;\n"
                    "  set-property*) echo 'Failed to set unit properties on web.service: "
                    "Unit web.service not found.' >&2; exit 1;;\n"
                    "esac; exit 0; fi\n"
                    "case \"$*\" in *LoadState*) echo loaded;; *AllowedCPUs\\ --value*) "
                    "echo 0-1;; *EffectiveCPUs*) echo EffectiveCPUs=1;; esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake, gone


def test_a_unit_gone_before_the_restore_needs_nothing(tmp_path, monkeypatch):
    """Under systemd 252 (make check-units) `recommend --unit` of a transient unit, stopped
    afterwards, made the agent's stop log an ERROR and its ExecStopPost --restore exit 1
    ('Unit check-units-target.service not found'), so `systemctl stop opptune-agent` left the
    agent's unit failed, and every later --restore failed again. A unit systemd no longer knows
    took its AllowedCPUs with it: as a thread that ended, nothing is left to put back."""
    from opptune.agent.knobs.state import (CPUSET_FILENAME, CpusetRecord,
                                           restore_cpusets_from_file)
    fake, gone = _systemctl_of_a_unit_that_goes(tmp_path)
    record = tmp_path / CPUSET_FILENAME
    targets = Targets(SysFS("/"), systemctl=str(fake), systemd=True,
                      record=CpusetRecord(str(record), "/"))
    targets.apply({"kind": "unit", "unit": "web"}, [1])
    assert record.exists()
    gone.touch()
    assert targets.restore() == []
    assert not record.exists()  # forgotten: the next start has nothing to put back
    # the same record left by an agent that was killed: --restore finds the unit gone too
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    CpusetRecord(str(record), "/").save({"kind": "systemctl", "unit": "web.service",
                                         "value": "", "owner": "cfg-1"})
    res = restore_cpusets_from_file(str(record))
    assert res["problems"] == [] and res["restored"] == [] and not record.exists()


def test_a_unit_still_known_that_refuses_the_restore_is_a_problem(tmp_path):
    fake = tmp_path / "systemctl"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *LoadState*) echo loaded;; "
                    "*AllowedCPUs\\ --value*) echo 0-1;; *EffectiveCPUs*) echo EffectiveCPUs=1;; "
                    "*=0-1) echo 'Access denied' >&2; exit 1;; esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    targets = Targets(SysFS("/"), systemctl=str(fake), systemd=True)
    targets.apply({"kind": "unit", "unit": "web"}, [1])
    (problem,) = targets.restore()
    assert "AllowedCPUs of web.service" in problem and "Access denied" in problem


def _systemctl_of_a_host(tmp_path, effective):
    """A systemctl whose set-property of web.service succeeds and keeps the value, and whose
    EffectiveCPUs is ``effective`` ("allowed": what AllowedCPUs says, as systemd on cgroup
    v2; "": nothing, as on a cgroup v1 or hybrid host; else that list); calls go to
    ``calls``."""
    log, allowed = tmp_path / "calls", tmp_path / "allowed"
    allowed.write_text("0-1")
    shown = f"$(cat {allowed})" if effective == "allowed" else effective
    fake = tmp_path / "systemctl"
    fake.write_text("#!/bin/sh\n"
                    f"echo \"$*\" >> {log}\n"
                    "case \"$*\" in\n"
                    "  *LoadState*) echo loaded;;\n"
                    f"  *AllowedCPUs\\ --value*) cat {allowed};;\n"
                    f"  *EffectiveCPUs*) echo \"EffectiveCPUs={shown}\"; "
                    "echo ActiveState=active;;\n"
                    f"  set-property*) echo \"${{4#AllowedCPUs=}}\" > {allowed};;\n"
                    "esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake, log, allowed


@pytest.mark.parametrize("hierarchy", ["v1", "hybrid"])
def test_a_unit_confinement_without_effect_is_refused_and_undone(tmp_path, hierarchy):
    """On a cgroup v1 or hybrid host `systemctl set-property --runtime UNIT AllowedCPUs=...`
    succeeds and confines nothing (the cpuset controller is not on the unified hierarchy):
    the agent reported 'applied' and measured the unit on every cpu as if on the ones
    recommended. It reads EffectiveCPUs back: empty, so the run point is refused with what
    to do, AllowedCPUs is put back and its record forgotten."""
    from opptune.agent.knobs.state import CPUSET_FILENAME, CpusetRecord
    root = tmp_path / "root"
    (root / "sys/fs/cgroup/cpuset").mkdir(parents=True)  # v1: one mount per controller
    if hierarchy == "hybrid":  # ... and cgroup2 beside them, without cpuset
        (root / "sys/fs/cgroup/unified").mkdir()
        (root / "sys/fs/cgroup/unified/cgroup.controllers").write_text("")
    fake, log, allowed = _systemctl_of_a_host(tmp_path, effective="")
    record = tmp_path / CPUSET_FILENAME
    targets = Targets(SysFS(str(root)), systemctl=str(fake), systemd=True,
                      record=CpusetRecord(str(record), str(root)))
    ex, ob = make_env(tmp_path, targets)
    try:
        msg = config({"kind": "unit", "unit": "web", "window_s": 0.05}, cpus=(1,))
        ex.validate_config(msg["body"])
        ob.save_config("c1", msg)
        ex.apply_config(msg)
        (body,) = applied(ex)
        assert body["ok"] is False and "measured" not in body, body
        assert body["error"] == (
            "cannot apply to the target: AllowedCPUs=1 of web.service took no effect: this "
            "host mounts cgroup v1 or the hybrid hierarchy, and AllowedCPUs needs the cpuset "
            "controller of the unified one (cgroup v2) (AllowedCPUs put back to 0-1); boot "
            "with systemd.unified_cgroup_hierarchy=1 on the kernel command line, or apply to "
            "the unit's main process with --pid")
        calls = log.read_text().splitlines()
        assert "set-property --runtime web.service AllowedCPUs=1" in calls
        assert calls[-1] == "set-property --runtime web.service AllowedCPUs=0-1"
        assert allowed.read_text().strip() == "0-1"
        assert targets.owners() == set() and not record.exists()
    finally:
        ob.close()


def test_a_units_cpu_time_under_systemd_is_read_from_its_cgroup_without_systemctl(tmp_path):
    """The verification window of a unit target measures its CPU time (cgroup cpu.stat): under
    systemd that read asked systemctl where the unit is, was answered no cgroup, and measured
    nothing (cpu_s null) for every unit of a systemd board, a systemctl call each time."""
    root = tmp_path / "root"
    d = cgroup_tree(root)
    fake, log, _allowed = _systemctl_of_a_host(tmp_path, effective="allowed")
    targets = Targets(SysFS(str(root)), systemctl=str(fake), systemd=True)
    assert targets.cpu_time({"kind": "unit", "unit": "web"}) == 1.5
    (d / "cpu.stat").write_text("usage_usec 2250000\n")
    assert targets.cpu_time({"kind": "unit", "unit": "web.service"}) == 2.25
    assert not log.exists()  # no systemctl
    assert targets.cpu_time({"kind": "unit", "unit": "gone"}) is None


def test_a_unit_confined_to_fewer_cpus_than_asked_is_refused(tmp_path):
    """cgroup v2 with the unit's slice allowing cpu 0 only: AllowedCPUs=0-1 leaves it on 0."""
    root = tmp_path / "root"
    cgroup_tree(root)
    fake, log, allowed = _systemctl_of_a_host(tmp_path, effective="0")
    targets = Targets(SysFS(str(root)), systemctl=str(fake), systemd=True)
    with pytest.raises(TargetError) as err:
        targets.apply({"kind": "unit", "unit": "web"}, [0, 1])
    assert str(err.value).startswith("AllowedCPUs=0-1 of web.service took effect as cpus 0 "
                                     "(its slice's AllowedCPUs"), err.value
    assert "--pid" in str(err.value)
    assert allowed.read_text().strip() == "0-1" and targets.owners() == set()


def test_a_unit_confined_on_cgroup_v2_is_applied(tmp_path):
    root = tmp_path / "root"
    cgroup_tree(root)
    fake, log, allowed = _systemctl_of_a_host(tmp_path, effective="allowed")
    targets = Targets(SysFS(str(root)), systemctl=str(fake), systemd=True)
    done = targets.apply({"kind": "unit", "unit": "web"}, [1])
    assert done["allowed_cpus"] == "1" and allowed.read_text().strip() == "1"
    assert "show -p EffectiveCPUs -p ActiveState web.service" in log.read_text()
    assert targets.restore() == [] and allowed.read_text().strip() == "0-1"


@pytest.mark.parametrize("load, active, why", [
    ("loaded", "active", None),
    ("loaded", "activating", None),  # Restart=always between two starts: it runs on
    ("loaded", "deactivating", None),
    ("loaded", "inactive", "ActiveState=inactive"),
    ("loaded", "failed", "ActiveState=failed"),
    ("not-found", "inactive", "systemd no longer knows it"),
    ("error", "", None),  # systemctl fails: nothing tells, it is not taken for stopped
])
def test_a_unit_is_stopped_where_systemd_says_it_is_inactive_or_failed(tmp_path, load, active,
                                                                        why):
    """What the heartbeat asks of a confined unit (agent/apply.py drops one stopped at two
    heartbeats in a row), under systemd: its LoadState and ActiveState."""
    fake = tmp_path / "systemctl"
    fake.write_text("#!/bin/sh\n" + (
        "exit 1\n" if load == "error" else
        f"case \"$*\" in *ActiveState*) echo LoadState={load}; echo ActiveState={active};; "
        "esac\n"))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    targets = Targets(SysFS("/"), systemctl=str(fake), systemd=True)
    assert targets.unit_stopped("web") == why
    assert targets.unconfined("web", [1]) is False  # systemd confines each cgroup of it


def test_a_unit_is_stopped_without_systemd_where_its_cgroup_is_gone_or_holds_no_process(
        tmp_path):
    root = tmp_path / "root"
    d = cgroup_tree(root, cpus="1")
    targets = Targets(SysFS(str(root)), systemd=False)
    assert targets.unit_stopped("web") is None  # nothing tells: no cgroup.procs
    (d / "cgroup.procs").write_text("")
    (d / "sub").mkdir()
    (d / "sub/cgroup.procs").write_text("4242\n")  # a process in a cgroup below it
    assert targets.unit_stopped("web") is None
    (d / "sub/cgroup.procs").write_text("")
    assert targets.unit_stopped("web") == "its cgroup holds no process"
    (d / "cgroup.events").write_text("populated 1\nfrozen 0\n")  # the kernel's word first
    assert targets.unit_stopped("web") is None
    assert targets.unconfined("web", [1]) is False and targets.unconfined("web", [0, 1])
    (d / "cpuset.cpus").write_text("")  # its cgroup made anew
    assert targets.unconfined("web", [1])
    shutil.rmtree(d)
    assert targets.unit_stopped("web") == "its cgroup is gone"
    assert targets.unconfined("web", [1]) is False


def test_a_running_units_cgroup_spares_the_heartbeat_a_call_to_systemctl(tmp_path):
    """Under systemd, a confined unit whose cgroup holds a process runs: no systemctl each
    heartbeat (a process and a call to systemd, beside the runs the agent measures). Its
    cgroup empty or gone, systemctl tells a stop from a restart."""
    calls = tmp_path / "calls"
    fake = tmp_path / "systemctl"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\n"
                    "echo LoadState=loaded; echo ActiveState=inactive\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    root = tmp_path / "root"
    d = cgroup_tree(root, cpus="1")
    (d / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    targets = Targets(SysFS(str(root)), systemctl=str(fake), systemd=True)
    assert [targets.unit_stopped("web") for _ in range(3)] == [None] * 3
    assert not calls.exists()
    (d / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    assert targets.unit_stopped("web") == "ActiveState=inactive"
    shutil.rmtree(d)
    assert targets.unit_stopped("web") == "ActiveState=inactive"
    assert len(calls.read_text().splitlines()) == 2
