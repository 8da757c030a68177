"""Two boards with one agent id (the default id is the host name: two fresh images both
"raspberrypi", two VMs named "vm"), with a real daemon and two real agents on their own state
directories, on virtual boards (or this machine, where a process is to be confined)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from opptune.agent.machine_id import app_specific
from opptune.agent.outbox import Outbox
from opptune.agent.virtual_board import make_tree
from opptune.daemon.client import query
from opptune.daemon.status_view import clash_text
from opptune.shared import protocol as P
from procs import AGENT_RUN_AS, Cluster, write_toml

OPPTUNE = str(Path(sys.executable).parent / "opptune")


def _clash(st):
    return next((a["id_clash"] for a in st["agents"] if a.get("id_clash")), None)


@pytest.mark.integration
def test_two_boards_of_one_agent_id_are_named_and_both_keep_their_runs(tmp_path):
    """The daemon's socket dropped the second board's connection unread: the daemon logged
    nothing, the status showed one board, the second was idle and only its own log guessed
    why. Now the daemon logs the clash and the status flags it naming both platforms and the
    key to set; the first board keeps the id and its runs, and once it stops the second takes
    the id and its sweep is stored beside the first's."""
    c = Cluster(tmp_path, kernels=("pi_integrate",), reps=1, max_cores=2,
                extra_agent={"agent_id": "vm", "virtual_board": "rpi4"})
    second = write_toml(tmp_path / "agent2.toml", {
        "agent_id": "vm", "daemon": c.endpoint, "state_dir": str(tmp_path / "agent2-state"),
        "heartbeat_s": 0.5, "bench_kernels": ["pi_integrate"],
        "virtual_board": "odroid-xu4", **AGENT_RUN_AS})
    c.start_daemon()
    c.start_agent()
    other = None
    try:
        st = c.wait_for(lambda s: s["jobs"] and all(j["state"] == "done" for j in s["jobs"]),
                        timeout=120, what="the first board's sweep")
        first_platform = st["agents"][0]["platform"]
        other = c._spawn("opptune.agent", second, "agent2.log")
        st = c.wait_for(lambda s: _clash(s) is not None, what="the clash in the status")
        clash = _clash(st)
        (held, unheld) = clash["boards"]
        assert (held["board"], held["platform"], held["holds"]) == (
            "rpi4 (virtual)", first_platform, True)
        assert unheld["board"] == "odroid-xu4 (virtual)" and unheld["holds"] is False
        assert unheld["platform"] != first_platform and clash["key"] == "agent_id"
        # the first board keeps the id: its row, its platform
        assert [(a["id"], a["platform"]) for a in st["agents"]] == [("vm", first_platform)]
        log = (tmp_path / "daemon.log").read_text()
        (line,) = [ln for ln in log.splitlines() if "is used by two agents at once" in ln]
        assert "WARNING" in line and "board rpi4 (virtual)" in line
        assert "board odroid-xu4 (virtual)" in line and "set agent_id" in line
        # the second board's own log says it too (its hello was refused): the refusal reaches
        # it after the daemon noted the clash, so its line may come after the status shows it
        c.wait_for(lambda s: "agent_id_in_use" in (tmp_path / "agent2.log").read_text(),
                   what="the refusal in the second board's log")
        log2 = (tmp_path / "agent2.log").read_text()
        assert "board rpi4 (virtual)" in log2, log2
        # the first board stops: the second says hello again, holds the id, and its sweep is
        # stored beside the first's runs
        c.agent.terminate()
        c.agent.wait(30)
        c.agent = other  # wait_for watches it from now on
        st = c.wait_for(lambda s: s["agents"][0]["platform"] == unheld["platform"]
                        and _clash(s) is None and s["agents"][0]["alive"],
                        what="the second board holding the id")
        query(c.endpoint, "sweep", {"agent": "vm"}, timeout_s=5)
        c.wait_for(lambda s: len(s["jobs"]) == 2
                   and all(j["state"] == "done" for j in s["jobs"]),
                   timeout=120, what="the second board's sweep")
        platforms = dict(c.rows("SELECT platform, COUNT(*) FROM runs WHERE agent = 'vm' "
                                "GROUP BY platform"))
        assert set(platforms) == {first_platform, unheld["platform"]}, platforms
    finally:
        c.stop()
        if other is not None and other.poll() is None:
            other.terminate()
            other.wait(30)


@pytest.mark.integration
def test_a_verification_from_the_board_that_does_not_hold_the_id_is_refused(tmp_path):
    """The second board of the id had a configuration of the id in its outbox (pushed when it
    held the id, say): its ``applied`` marked the holder's configuration applied and made it
    the one in force there. It is refused now (agent_id_in_use, naming the holder), nothing
    of it stored, and the daemon goes on."""
    c = Cluster(tmp_path, kernels=("pi_integrate",), reps=1, max_cores=2,
                extra_agent={"agent_id": "vm", "virtual_board": "rpi4"})
    state2 = tmp_path / "agent2-state"
    second = write_toml(tmp_path / "agent2.toml", {
        "agent_id": "vm", "daemon": c.endpoint, "state_dir": str(state2),
        "heartbeat_s": 0.5, "bench_kernels": ["pi_integrate"],
        **AGENT_RUN_AS})  # this machine: pids work
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    c.start_daemon()
    c.start_agent()
    other = None
    try:
        c.wait_for(lambda s: s["jobs"] and all(j["state"] == "done" for j in s["jobs"]),
                   timeout=120, what="the first board's sweep")
        # a configuration for a process, pushed to the holder: a virtual board refuses it
        res = subprocess.run([OPPTUNE, "recommend", "--agent", "vm", "--workload",
                              "pi_integrate", "--pid", str(sleeper.pid), "--daemon",
                              c.endpoint], capture_output=True, text=True, timeout=60)
        assert res.returncode == 1 and "needs a real board" in res.stdout + res.stderr, res
        (cid, before), = c.rows("SELECT id, state FROM recommendations WHERE state = "
                                "'refused'")
        # the second board kept it from before; it applies it as it starts
        ob = Outbox(str(state2))
        ob.save_config(cid, P.make("config", "daemon", {
            "config_id": cid, "workload": "pi_integrate", "size": "small", "cpus": [0],
            "threads": 1, "freq_khz": None, "reps": 1,
            "target": {"kind": "pid", "pid": sleeper.pid, "window_s": 0.1}}))
        ob.close()
        other = c._spawn("opptune.agent", second, "agent2.log")
        c.wait_for(lambda s: f"config {cid} applied" in (tmp_path / "agent2.log").read_text(),
                   what="the second board applying it")

        def rec_of(s):
            return next(r for r in s["recommendations"] if r["config_id"] == cid)

        # refused each time it is sent (the hello's refusal first, then at least two)
        st = c.wait_for(lambda s: s["daemon"]["refusals"]["by_code"].get("agent_id_in_use", 0) >= 3
                        or rec_of(s)["state"] != before,
                        what="the second board's verification refused")
        rec = rec_of(st)
        assert (rec["config_id"], rec["state"], rec["replaced"]) == (cid, before, None), rec
        (agent,) = st["agents"]
        assert agent["standing"] is None, agent
        assert c.rows("SELECT COUNT(*) FROM runs WHERE job_id = ?", cid) == [(0,)]
        # the daemon's line names the holder (its refusals are logged at most every 10 s a
        # board, and the hello's came first)
        log = tmp_path / "daemon.log"
        c.wait_for(lambda s: f"its verification of configuration '{cid}' is not stored"
                   in log.read_text(), timeout=30, what="the refusal in the daemon's log")
        (line,) = [ln for ln in log.read_text().splitlines()
                   if f"its verification of configuration '{cid}'" in ln]
        assert "agent_id_in_use" in line and "board rpi4 (virtual)" in line, line
        assert "Traceback" not in log.read_text()
        assert other.poll() is None and c.daemon.poll() is None
    finally:
        c.stop()
        if other is not None and other.poll() is None:
            other.terminate()
            other.wait(30)
        sleeper.kill()
        sleeper.wait()


def _ids(root: str, machine: uuid.UUID, boot: uuid.UUID) -> None:
    """Give the board of tree ``root`` a machine id and a boot id, where the agent reads them
    (under its sysfs_root)."""
    for rel, value in (("etc/machine-id", machine.hex), ("proc/sys/kernel/random/boot_id",
                                                         str(boot))):
        path = Path(root, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")


@pytest.mark.integration
@pytest.mark.parametrize("cloned", [False, True], ids=["another-machine", "cloned-image"])
def test_a_second_board_of_one_platform_and_id_does_not_replace_the_first(tmp_path, cloned):
    """Two boards of one platform and agent id (two stock rpi4 named alike): the second's
    hello was taken for the first's restart and replaced its record, the configuration in
    force there included (its standing: null), and jobs went to whichever spoke last. Their
    machine ids tell them apart now, and for two boards of one cloned SD-card image (the same
    machine id) their boot ids: the first keeps the id and its record, the clash is logged
    and shown naming both machines, the second is told; once the first stops the second
    takes the id."""
    from test_standing import applied_before_restart
    root1, _, state1 = applied_before_restart(tmp_path)  # c1 stands on the first board
    for path in state1.glob("outbox.db*"):
        path.unlink()  # the helper's verification of c1, as agent 'a1': no second hello
    machine1 = uuid.uuid4()
    machine2 = machine1 if cloned else uuid.uuid4()
    _ids(root1, machine1, uuid.uuid4())
    root2 = make_tree("rpi4", str(tmp_path / "board2"))
    _ids(root2, machine2, uuid.uuid4())
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False, extra_agent={
        "agent_id": "vm", "virtual_board": "rpi4", "sysfs_root": root1,
        "state_dir": str(state1)})
    second = write_toml(tmp_path / "agent2.toml", {
        "agent_id": "vm", "daemon": c.endpoint, "state_dir": str(tmp_path / "agent2-state"),
        "heartbeat_s": 0.5, "bench_kernels": ["pi_integrate"], "virtual_board": "rpi4",
        "sysfs_root": root2, **AGENT_RUN_AS})
    daemon_log, agent2_log = tmp_path / "daemon.log", tmp_path / "agent2.log"
    c.start_daemon()
    c.start_agent()
    other = None
    try:
        st = c.wait_for(lambda s: s["agents"] and s["agents"][0]["alive"]
                        and (s["agents"][0]["standing"] or {}).get("config_id") == "c1",
                        what="the first board's hello with c1 in force")
        platform = st["agents"][0]["platform"]
        other = c._spawn("opptune.agent", second, "agent2.log")

        def hellos() -> int:
            return daemon_log.read_text().count("hello from agent vm")

        # its hello answered: taken (the daemon's line) or refused (the clash in the status)
        st = c.wait_for(lambda s: _clash(s) is not None or hellos() > 1,
                        what="the second board's hello answered")
        (agent,) = st["agents"]
        assert (agent["id"], agent["platform"]) == ("vm", platform)
        assert (agent["standing"] or {}).get("config_id") == "c1", agent
        assert hellos() == 1
        # the clash lasts: the second board's heartbeats do not take the id over either
        st = c.wait_for(lambda s: (_clash(s) or {}).get("since_s", 0) >= 2.0,
                        what="two seconds of the clash")
        (agent,) = st["agents"]
        assert (agent["standing"] or {}).get("config_id") == "c1", agent
        held, unheld = _clash(st)["boards"]
        assert held["holds"] and not unheld["holds"]
        assert held["platform"] == unheld["platform"] == platform
        assert held["machine"] == app_specific(machine1)
        assert unheld["machine"] == app_specific(machine2)
        assert held["boot"] != unheld["boot"]
        part = "boot" if cloned else "machine"
        text = clash_text(agent)
        assert f"{part} {held[part][:8]}, agent instance {held['instance']}) holds it" in text
        assert f"{part} {unheld[part][:8]}, agent instance {unheld['instance']}) is " \
               "connected" in text
        # the daemon's line, once, names both boards by machine and boot
        (line,) = [ln for ln in daemon_log.read_text().splitlines()
                   if "is used by two agents at once" in ln]
        assert f"machine {held['machine'][:8]}, boot {held['boot'][:8]}" in line, line
        assert f"machine {unheld['machine'][:8]}, boot {unheld['boot'][:8]}" in line, line
        assert "set agent_id" in line
        # the second board's log says it (its start line shows its machine's hashed ids)
        c.wait_for(lambda s: "agent_id_in_use" in agent2_log.read_text(),
                   what="the refusal in the second board's log")
        log2 = agent2_log.read_text()
        assert f"machine {unheld['machine'][:8]}, boot {unheld['boot'][:8]})" in log2, log2
        assert "is held by another agent" in log2 and "set agent_id" in log2, log2
        # the first board stops: the second says hello again and holds the id, with nothing
        # in force on it
        c.agent.terminate()
        assert c.agent.wait(30) == 0
        c.agent = other  # wait_for watches it from now on
        st = c.wait_for(lambda s: hellos() == 2 and _clash(s) is None
                        and s["agents"][0]["alive"], what="the second board holding the id")
        assert st["agents"][0]["standing"] is None, st["agents"]
        assert "Traceback" not in daemon_log.read_text()
    finally:
        c.stop()
        if other is not None and other.poll() is None:
            other.terminate()
            other.wait(30)
