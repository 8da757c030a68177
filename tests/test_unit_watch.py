"""The heartbeat's look at confined targets: under systemd it never holds up the agent's link;
a process that moves into a confined unit is noticed at it.

A unit whose cgroup is empty or gone (stopped, or restarting) is asked of systemd
(``systemctl show``); a slow or hung systemd held the link's thread for up to 5 s per unit per
heartbeat: no heartbeats, results or daemon commands meanwhile. The agent's real link (its own
thread, a ZeroMQ DEALER) against a stand-in daemon (a ROUTER on loopback), its real worker and
executor; the unit's cgroup on a fake tree, systemd a fake ``systemctl`` reached by
configuration. A process moving into a unit: the real agent as a process against the
stand-in daemon, the unit's cgroup and the process's /proc/PID/cgroup on its sysfs tree.
Every wait is on an observable event, with a deadline."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import time

import pytest

from opptune.agent import target_watch
from opptune.agent.apply import Executor, Worker
from opptune.agent.outbox import Outbox
from opptune.agent.platform import discover
from opptune.agent.runner import Runner
from opptune.agent.sysfs import SysFS
from opptune.agent.targets import Targets
from opptune.agent.workloads import Workloads
from opptune.shared import protocol as P
from opptune.shared.config import AgentConfig, CommandWorkload
from opptune.shared.records import RunRecord
from fake_trees import cgroup_tree
from test_agent_link import LinkThread, ctx, router, start_agent  # noqa: F401 (fixtures)
from test_idle_clock import job


def fake_systemctl(tmp_path):
    """(its path, the file its looks at units go to, the file that makes them hang): a
    systemctl of a cgroup v2 host that confines web.service as asked; its look at a unit's
    LoadState and ActiveState says it runs, or, while ``hang`` exists, writes its pid to
    ``looks`` and answers only once ``hang`` is gone; so does its LoadState check of a
    unit."""
    looks, hang, allowed = tmp_path / "looks", tmp_path / "hang", tmp_path / "allowed"
    allowed.write_text("0-1")
    fake = tmp_path / "systemctl"
    wait = f"echo $$ >> {looks}; while [ -e {hang} ]; do sleep 0.05; done"
    fake.write_text("#!/bin/sh\n"
                    "case \"$*\" in\n"
                    f"  *EffectiveCPUs*) echo \"EffectiveCPUs=$(cat {allowed})\"; "
                    "echo ActiveState=active;;\n"
                    f"  *LoadState\\ -p\\ ActiveState*) [ -e {hang} ] && {{ {wait}; }}; "
                    "echo LoadState=loaded; echo ActiveState=active;;\n"
                    f"  *LoadState*) [ -e {hang} ] && {{ {wait}; }}; echo loaded;;\n"
                    f"  *AllowedCPUs\\ --value*) cat {allowed};;\n"
                    f"  set-property*) echo \"${{4#AllowedCPUs=}}\" > {allowed};;\n"
                    "esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake, looks, hang


def wait_for(pred, timeout: float, what: str):
    """``pred()``'s first true value within ``timeout`` s (checked every 10 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.01)  # polling interval of a file the fake writes, not synchronisation
    raise AssertionError(f"no {what} within {timeout} s")


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie too: not reaped)."""
    return os.path.exists(f"/proc/{pid}")


@contextlib.contextmanager
def linked_agent(ctx, router, tmp_path):
    """(executor, unit web's cgroup directory, the fake's looks file, its hang file): the
    agent's link (its thread), worker and executor against ``router``, under systemd (the
    fake systemctl), web.service running on a fake cgroup v2 tree; workload w says it took
    0.01 s. The hello is received."""
    fake, looks, hang = fake_systemctl(tmp_path)
    d = cgroup_tree(tmp_path / "root", cpus="0-1")
    (d / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    state = str(tmp_path / "state")
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=state, workloads=[
        CommandWorkload("w", ["/bin/echo", '{"time_s": 0.01}'])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    targets = Targets(SysFS(str(tmp_path / "root")), systemctl=str(fake), systemd=True)
    outbox = Outbox(state)
    holder = {}
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"]), outbox,
                  send=lambda m: holder["link"].send(m),
                  notify=lambda: holder["link"].notify_outbox(), state_dir=state,
                  targets=targets)
    w = Worker(ex)
    w.start()
    lt = LinkThread(ctx, router.endpoint, outbox, on_message=w.submit, on_heartbeat=w.watch)
    holder["link"] = lt.link
    try:
        router.expect(lambda m: m["type"] == "hello", what="hello")
        yield ex, d, looks, hang
    finally:
        hang.unlink(missing_ok=True)  # a check under way on the worker ends
        lt.close()
        w.stop(abort=True)
        w.join(timeout=30)
        ex.close()
        ex.runner.close()
        targets.restore()
        outbox.close()


def unit_config(cid: str) -> dict:
    return P.make("config", "daemon", {
        "config_id": cid, "workload": "w", "size": "default", "cpus": [1], "threads": 1,
        "freq_khz": None, "reps": 1, "target": {"kind": "unit", "unit": "web",
                                                "window_s": 0.05}})


def heartbeats(router, seen: list, n: int) -> None:
    """Receive until ``n`` heartbeats in all, counting those in ``seen``; each within 2 s."""
    beats = sum(m["type"] == "heartbeat" for m in seen)
    while beats < n:
        router.expect(lambda m: m["type"] == "heartbeat", timeout=2.0, what="heartbeat")
        beats += 1


def test_a_hung_systemctl_holds_up_no_heartbeat_nor_result(ctx, router, tmp_path):  # noqa: F811
    """Before, the heartbeat that found the confined unit's cgroup empty ran systemctl on the
    link's thread and waited for it (5 s): the daemon heard nothing, and a job it sent was
    neither received nor answered meanwhile. Now systemd is asked on a thread of its own:
    heartbeats go on, a job sent while systemctl hangs is run and its result arrives, and one
    systemctl at a time is started however many heartbeats pass; the agent's stop kills it."""
    with linked_agent(ctx, router, tmp_path) as (ex, d, looks, hang):
        router.send(unit_config("c1"))
        (applied,) = [m for m in router.expect(lambda m: m["type"] == "applied",
                                               timeout=30, what="applied")
                      if m["type"] == "applied"]
        assert applied["body"]["ok"], applied["body"]
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1"]
        # the unit restarts: its cgroup empty, and systemd does not answer
        hang.touch()
        (d / "cgroup.events").write_text("populated 0\nfrozen 0\n")
        pid = int(wait_for(lambda: looks.exists() and looks.read_text().split(), 10,
                           "look at the unit")[0])
        router.send(job("j1", [([0], None)]))
        seen = router.expect(lambda m: m["type"] == "result", timeout=4.0,
                             what="result while systemctl hangs")
        rec = RunRecord.from_dict(seen[-1]["body"]["record"])
        assert rec.ok and rec.time_s == 0.01, rec
        heartbeats(router, seen, 10)  # ten of them with the look under way
        assert looks.read_text().split() == [str(pid)] and alive(pid)  # one, still hanging
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1"]  # nothing told yet
    assert not alive(pid)  # killed by the agent's stop, and reaped


def test_a_config_for_a_unit_is_checked_with_systemd_off_the_link(ctx, router,  # noqa: F811
                                                                  tmp_path):
    """Before, a configuration for a unit that arrived was checked on the link's thread with
    `systemctl show -p LoadState` (10 s timeout): a hung systemd held up heartbeats and
    everything else meanwhile. The link checks the name; the worker asks systemd as it
    applies. Once systemd answers, the configuration is applied."""
    with linked_agent(ctx, router, tmp_path) as (ex, d, looks, hang):
        hang.touch()
        router.send(unit_config("c1"))
        wait_for(lambda: looks.exists() and looks.read_text().split(), 10, "check of the unit")
        heartbeats(router, [], 10)
        hang.unlink()
        (applied,) = [m for m in router.expect(lambda m: m["type"] == "applied",
                                               timeout=30, what="applied")
                      if m["type"] == "applied"]
        assert applied["body"]["ok"], applied["body"]
        assert [c["config_id"] for c in ex.standings_wire()] == ["c1"]


def test_a_look_that_takes_too_long_is_killed_and_tells_nothing(tmp_path, monkeypatch):
    """A systemctl that does not answer within the look's bound is killed (and reaped), and
    the look says nothing of the unit (as a failing systemctl): the next look is another
    process, one at a time."""
    from opptune.agent.target_watch import SystemdLook
    monkeypatch.setattr(target_watch, "SYSTEMD_LOOK_S", 0.5)
    fake, looks, hang = fake_systemctl(tmp_path)
    hang.touch()
    look = SystemdLook(Targets(SysFS(str(tmp_path / "root")), systemctl=str(fake),
                               systemd=True))
    try:
        assert look.answer("web.service") == (False, None)  # asked: no answer yet
        first = int(wait_for(lambda: looks.exists() and looks.read_text().split(), 10,
                             "first look")[0])
        assert look.answer("web.service") == (False, None)  # under way: not asked twice
        wait_for(lambda: not alive(first), 10, "the first look killed")
        told = wait_for(lambda: look.answer("web.service")[0], 10, "the look's answer")
        assert told
        second = wait_for(lambda: len(looks.read_text().split()) == 2 and
                          int(looks.read_text().split()[1]), 10, "second look")
        assert second != first and alive(second)
        hang.unlink()
    finally:
        look.close()
    assert not alive(second)
    assert looks.read_text().split() == [str(first), str(second)]


@pytest.mark.parametrize("active, why", [("inactive", "ActiveState=inactive"),
                                         ("activating", None)])
def test_systemd_s_answer_is_taken_at_a_later_heartbeat(tmp_path, active, why):
    """Where the unit's cgroup does not say it runs, the heartbeat asks systemd and goes on;
    a later heartbeat takes the answer: a stop, or a restart (activating: it runs)."""
    from opptune.agent.target_watch import SystemdLook
    fake = tmp_path / "systemctl"
    fake.write_text(f"#!/bin/sh\necho LoadState=loaded; echo ActiveState={active}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    look = SystemdLook(Targets(SysFS(str(tmp_path / "root")), systemctl=str(fake),
                               systemd=True))
    try:
        assert look.answer("web.service") == (False, None)
        assert wait_for(lambda: (lambda a: a if a[0] else None)(look.answer("web.service")),
                        10, "the answer") == (True, why)
    finally:
        look.close()


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs cpus 0 and 1")
def test_the_agent_notices_a_confined_process_moved_into_a_confined_unit(ctx, router,  # noqa: F811
                                                                          tmp_path):
    """Before, the agent saw that a process it confines had moved into a unit another
    configuration confines only when a configuration was applied or it restarted: the process
    ran on the unit's cpus (the kernel's cpuset gives them to a process moved into the
    cgroup) and the daemon was not told. Now, at the next heartbeat, the process gets its own
    cpus back and a hello says it runs in the unit (the daemon's status shows the narrower
    target from it)."""
    root = tmp_path / "root"
    d = cgroup_tree(root, cpus="0-1")
    (d / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    cpu = root / "sys/devices/system/cpu"  # cpus 0-1 (this machine's), no cpufreq
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-1\n")
    target = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE)
    where = root / "proc" / str(target.pid)
    where.mkdir(parents=True)
    (where / "cgroup").write_text("0::/user.slice/session-1.scope\n")
    agent = start_agent(tmp_path, router.endpoint, keys=f'sysfs_root = "{root}"\n')
    try:
        router.expect(lambda m: m["type"] == "hello", timeout=30, what="hello")
        for cid, tgt, cpus in (("c1", {"kind": "pid", "pid": target.pid}, [1]),
                               ("c2", {"kind": "unit", "unit": "web"}, [0, 1])):
            router.send(P.make("config", "daemon", {
                "config_id": cid, "workload": "spin", "size": "20000", "cpus": cpus,
                "threads": 1, "freq_khz": None, "reps": 1,
                "target": {**tgt, "window_s": 0.05}}))
            applied = router.expect(lambda m: m["type"] == "applied", timeout=30,
                                    what=f"applied {cid}")[-1]
            assert applied["body"]["ok"], applied["body"]
            router.send(P.make("ack", "daemon", {"ids": [applied["id"]]}))
        assert os.sched_getaffinity(target.pid) == {1}
        # it moves into the unit, and the kernel gives it the unit's cpus
        (where / "cgroup").write_text("0::/system.slice/web.service\n")
        os.sched_setaffinity(target.pid, {0, 1})
        def pids(m):
            return [e["target"] for e in m["body"]["standings"]
                    if e.get("target", {}).get("kind") == "pid"] if m["type"] == "hello" else []

        hello = router.expect(lambda m: any("in_unit" in t for t in pids(m)), timeout=15,
                              what="a hello naming the unit")[-1]
        assert pids(hello) == [{"kind": "pid", "pid": target.pid, "in_unit": "web.service"}]
        assert os.sched_getaffinity(target.pid) == {1}
        assert f"process {target.pid} moved into unit web.service, which a configuration in " \
               "force confines" in (tmp_path / "agent.log").read_text()
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(30)
        target.kill()
        target.wait()
