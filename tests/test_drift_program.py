"""A workload's program changed (drift.Drift.redefined): the runs of the old program that
reach the daemon after the hello that says so (they waited in the agent's outbox) count with
the old program's, not the new one's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from opptune.daemon.drift import REDEFINED
from opptune.daemon.service import Daemon
from opptune.daemon.store import Group, open_store
from opptune.daemon.characterize import characterize
from opptune.daemon.planner import plan_sweep
from opptune.daemon.store import ResultIn
from opptune.shared.config import DaemonConfig
from opptune.shared.records import RunRecord
from procs import Cluster, db_rows, produced_results, wait_until, write_toml


BENCH = """\
#!{python}
import json, os, time
# every run after the first waits for the test's gate: the daemon is down by then, so the
# runs after the first go to the outbox whatever the machine's load
here = os.path.dirname(os.path.abspath(__file__))
if os.path.exists(os.path.join(here, "first-run")):
    while not os.path.exists(os.path.join(here, "gate")):
        time.sleep(0.02)
open(os.path.join(here, "first-run"), "a").close()
print(json.dumps({{"time_s": 0.4, "version": {version}}}))
"""


def opptune(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                          capture_output=True, text=True, timeout=120)


def script_cluster(tmp_path, script) -> Cluster:
    """A daemon and an agent (a virtual rpi4) whose one workload ``w`` runs ``script`` as its
    own executable, 4 repetitions on 1 and 2 cores."""
    c = Cluster(tmp_path, kernels=(), auto_sweep=False, reps=4, max_cores=2,
                extra_daemon={"auto_recommend": False},
                extra_agent={"virtual_board": "rpi4"})
    c.agent_toml.write_text(c.agent_toml.read_text() + (
        f'[[workloads]]\nname = "w"\ncommand = {json.dumps([str(script)])}\n'
        'sizes = ["small"]\n'))
    return c


def test_a_size_with_a_job_out_and_no_run_yet_gets_its_drift_too(tmp_path):
    """The hello that says a program changed records its drift for each size with runs, and
    now for each size the agent was sent a job of: that job's runs of the old program may
    all still be in the agent's outbox, with nothing stored to date the change against."""
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    try:
        d.store.save_job("a", {"job_id": "j", "workload": "w", "size": "large", "reps": 1,
                               "warmup": 0, "points": [{"cpus": [0], "threads": 1}]}, 1.0)
        before = [{"name": "w", "kind": "command", "sizes": ["large"], "program": "p1"}]
        after = [{**before[0], "program": "p2"}]
        assert d.drift.redefined("a", "p", before, after, 5.0) == ["w"]
        assert [(e["workload"], e["input"], e["since"]) for e in d.store.drift_events()] == [
            ("w", "large", 5.0)]
    finally:
        d.close()


def test_the_jobs_whose_old_program_runs_were_logged_are_remembered_in_bounded_memory(
        tmp_path, caplog):
    """Each job whose runs measured a program from before its change is logged once; the
    daemon kept every such job id for its life (one more per job, never trimmed). Now only
    the newest STALE_JOBS_KEPT: a job among them is still logged once."""
    from opptune.daemon.service import STALE_JOBS_KEPT
    from opptune.shared.records import columns_of
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    try:
        group = Group("p", "w", "small", "")
        d.store.save_drift("a", group, "program changed", [], None, 9.0)
        cols = columns_of(RunRecord(platform="p", workload="w", input="small", cores=1,
                                    cpus=[0], threads=1, rep=0, time_s=1.0))
        caplog.set_level("INFO", logger="opptune.daemon")
        n = STALE_JOBS_KEPT + 50
        for i in range(n):
            for _ in range(2):  # a job's second run is not logged again
                assert d._before_redefinition("a", f"job-{i}", cols, 10.0) < 9.0
        told = [r for r in caplog.records if "from before its change" in r.getMessage()]
        assert len(told) == n
        assert len(d._stale_jobs_told) == STALE_JOBS_KEPT
        d._before_redefinition("a", f"job-{n - 1}", cols, 10.0)
        assert len([r for r in caplog.records
                    if "from before its change" in r.getMessage()]) == n
    finally:
        d.close()


FOUR_CPUS = {"sweep_order": [0, 1, 2, 3], "n_cpus": 4}


def test_a_changed_program_on_one_agent_of_a_fleet_ends_that_agents_runs_only(tmp_path):
    """Two identical boards (agents a and b) on one platform, both measured pi_integrate.
    a's hello says its program changed: a's runs from before leave the fits, report and
    profiles, b's stay in (before, b's went too, and b's new runs after its own change would
    have ended a's new ones); characterize measures it again on a, not on b; a drift of the
    group's behaviour still ends every agent's runs."""
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    try:
        d.store.save_platform("p", FOUR_CPUS, 1.0)
        before = [{"name": "pi_integrate", "kind": "kernel", "sizes": ["small"],
                   "program": "k1"}]
        for agent in ("a", "b"):
            d.registry.hello(agent, agent.encode(), "p", FOUR_CPUS, before, now=1.0)
            job = plan_sweep(FOUR_CPUS, "pi_integrate", d.config.sweep, size="small",
                             frequency_grid="none")
            d.store.save_job(agent, job, 2.0, state="done")
            t = 1.0 if agent == "a" else 2.0
            d.store.insert_results([ResultIn(
                f"{agent}{i}", agent, job["job_id"], i,
                RunRecord(platform="p", workload="pi_integrate", input="small", cores=1,
                          cpus=[0], threads=1, rep=i, time_s=t),
                RunRecord(platform="p", workload="pi_integrate", input="small", cores=1,
                          cpus=[0], threads=1, rep=i, time_s=t).to_dict()) for i in range(2)],
                3.0)
        group = Group("p", "pi_integrate", "small", "")
        assert sorted(d.store.group_runs(group)) == [(1, None, 1.0)] * 2 + [(1, None, 2.0)] * 2

        after = [{**before[0], "program": "k2"}]
        assert d.drift.redefined("a", "p", before, after, 5.0) == ["pi_integrate"]
        (event,) = d.store.drift_events()
        assert event["agent"] == "a" and event["agent_only"] and event["reason"] == REDEFINED
        assert "the runs of the platform's other agents stay in" in REDEFINED
        assert d.store.group_runs(group) == [(1, None, 2.0)] * 2
        assert d.store.report_runs()[group][1] == [(1, None, 2.0)] * 2
        assert [r[5] for r in d.store.profile_runs(None)] == [2.0, 2.0]
        assert d.store.drift_since(group) is None and d.store.drift_since(group, "a") == 5.0
        assert d.store.drift_since(group, "b") is None
        out_a = characterize(d, {"agent": "a", "size": "small"})
        out_b = characterize(d, {"agent": "b", "size": "small"})
        assert out_a["redefined"] == ["pi_integrate"] and out_b["redefined"] == []
        assert out_b["skipped"] == ["pi_integrate"]
        # a's new runs count beside b's; b's own change then ends b's old ones, not a's new
        new = RunRecord(platform="p", workload="pi_integrate", input="small", cores=1,
                        cpus=[0], threads=1, rep=0, time_s=1.5)
        d.store.insert_results([ResultIn("a-new", "a", out_a["queued"][0]["job_id"], 0, new,
                                         new.to_dict())], 6.0)
        assert sorted(d.store.group_runs(group)) == [(1, None, 1.5)] + [(1, None, 2.0)] * 2
        d.drift.redefined("b", "p", before, after, 7.0)
        assert d.store.group_runs(group) == [(1, None, 1.5)]
        # a drift of the group's behaviour (verdicts off) ends every agent's runs
        d.store.save_drift("b", group, "off twice", [], None, 9.0)
        assert d.store.drift_since(group) == 9.0
    finally:
        d.close()


@pytest.mark.integration
def test_old_program_runs_replayed_from_the_outbox_stay_before_the_drift(tmp_path):
    """Real daemon and agent: a sweep of a command workload; the daemon is killed after its
    first runs are stored, the agent measures the rest into its outbox and stops. Its script
    is edited (a new program: agent/program_id.py), daemon and agent start again: the hello
    records the drift, then the outbox's runs of the old script arrive. They are stored (none
    lost) but before the drift: no run of the old script counts for the group. Before, they
    counted as the new script's, received after its drift."""
    script = tmp_path / "bench.py"
    script.write_text(BENCH.format(python=sys.executable, version=1))
    script.chmod(0o755)
    c = script_cluster(tmp_path, script)
    state = tmp_path / "agent-state"
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="hello")
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "w", "--json")
        assert p.returncode == 0, p.stdout + p.stderr + c.logs()
        (job_id,) = [j["job_id"] for j in json.loads(p.stdout)["jobs"]]
        n = 2 * 4  # 2 core counts (max_cores), 4 repetitions
        wait_until(lambda: c.rows("SELECT COUNT(*) FROM runs")[0][0] >= 1, "a stored run",
                   timeout=60)
        c.kill("daemon")
        (tmp_path / "gate").touch()
        wait_until(lambda: produced_results(state) == n, "the agent's runs", timeout=60)
        c.agent.terminate()
        c.agent.wait(20)
        c.agent = None
        pending = db_rows(state / "outbox.db", "SELECT COUNT(*) FROM outbox")[0][0]
        stored_before = c.rows("SELECT COUNT(*) FROM runs")[0][0]
        assert pending >= 1 and stored_before < n, (pending, stored_before)

        script.write_text(BENCH.format(python=sys.executable, version=2))
        c.start_daemon()
        # the agent's hello answered before its outbox goes (as after any restart of the
        # agent alone): its results come in batches after the hello's
        c.wait_for(lambda s: True, timeout=30, what="the daemon")
        c.start_agent()
        c.wait_for(lambda s: any(j["job_id"] == job_id and j["received"] == n
                                 for j in s["jobs"]), timeout=60, what="the replay")
        platform = c.rows("SELECT platform FROM agents WHERE id='test-agent'")[0][0]
        store = open_store(str(c.db))
        try:
            events = [e for e in store.drift_events() if e["workload"] == "w"]
            assert [(e["input"], e["reason"]) for e in events] == [("small", REDEFINED)]
            since = events[0]["since"]
            received = [r for (r,) in c.rows("SELECT received FROM runs WHERE job_id=?",
                                             job_id)]
            assert len(received) == n  # every run stored, none twice
            assert all(r < since for r in received), (received, since)
            assert store.group_runs(Group(platform, "w", "small", "")) == []
        finally:
            store.close()
        assert "measured the program of w from before its change" in \
            (tmp_path / "daemon.log").read_text()
    finally:
        c.stop()


# prints its VERSION as its time; version 2 replaces itself by version 3 at its third run, so
# that the change falls between two runs of one job (no race with the test)
def self_replacing(version: int, replaces: int, at_run: int, time_s: str) -> str:
    """A script of ``version`` that prints ``time_s`` (an expression of VERSION) and counts its
    runs per version; version ``replaces`` replaces itself by the next one at its run
    ``at_run`` (written aside and renamed, as a build does)."""
    return f"""#!{sys.executable}
import json, os
VERSION = {version}
here = os.path.abspath(__file__)
count = os.path.join(os.path.dirname(here), f"runs-of-{{VERSION}}")
n = (int(open(count).read()) if os.path.exists(count) else 0) + 1
open(count, "w").write(str(n))
print(json.dumps({{"time_s": {time_s}}}))
if VERSION == {replaces} and n == {at_run}:
    with open(here + ".new", "w") as f:
        f.write(open(here).read().replace("VERSION = {replaces}", "VERSION = {replaces + 1}"))
    os.chmod(here + ".new", 0o755)
    os.replace(here + ".new", here)
"""


@pytest.mark.integration
def test_a_program_replaced_while_the_agent_runs_is_told_before_its_first_run(tmp_path):
    """Real daemon and agent, never restarted. Sweep 1 of script version 1 (the command is the
    script, run by its #! line); the test replaces it by version 2 and sweeps again; at its
    third run version 2 replaces itself by version 3 (mid-job: the executable is never taken
    for the runs' output, as a file among the arguments written during a run is). The agent checks the program before each run and says hello again when it
    changed: two drifts, dated between the runs of the programs they separate; each run
    carries the digest of the script it ran; the group's runs are version 3's alone. Before,
    the agent noticed neither change until restarted: all 16 runs counted together."""
    script = tmp_path / "bench.py"

    def version(v: str) -> None:
        new = tmp_path / "bench.py.v"
        new.write_text(self_replacing(int(v), 2, 3, "float(VERSION)"))
        new.chmod(0o755)
        os.replace(new, script)

    version("1")
    c = script_cluster(tmp_path, script)
    c.start_daemon()
    c.start_agent()

    def sweep() -> str:
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "w", "--json")
        assert p.returncode == 0, p.stdout + p.stderr + c.logs()
        (job_id,) = [j["job_id"] for j in json.loads(p.stdout)["jobs"]]
        c.wait_for(lambda s: any(j["job_id"] == job_id and j["state"] == "done"
                                 for j in s["jobs"]), timeout=90, what=f"job {job_id}")
        return job_id

    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="hello")
        first = sweep()
        version("2")
        second = sweep()
        received = dict(c.rows("SELECT msg_id, received FROM runs"))
        assert len(received) == 16, received
        store = open_store(str(c.db))
        try:
            by_version: dict[float, list[tuple[str, float, str]]] = {}
            for job in (first, second):
                for msg_id, rec in store.run_records(job):
                    by_version.setdefault(rec.time_s, []).append(
                        (job, received[msg_id], rec.extra["program"]))
            assert sorted((v, len(r)) for v, r in by_version.items()) == [
                (1.0, 8), (2.0, 3), (3.0, 5)], by_version
            assert {j for j, _, _ in by_version[1.0]} == {first}
            assert {j for v in (2.0, 3.0) for j, _, _ in by_version[v]} == {second}
            # each run carries the digest of the script it ran: one per version
            programs = {v: {p for _, _, p in r} for v, r in by_version.items()}
            assert all(len(p) == 1 for p in programs.values()), programs
            assert len(set().union(*programs.values())) == 3
            events = sorted((e for e in store.drift_events() if e["workload"] == "w"),
                            key=lambda e: e["since"])
            assert [(e["input"], e["reason"]) for e in events] == [("small", REDEFINED)] * 2
            since = [e["since"] for e in events]
            got = {v: [r for _, r, _ in rs] for v, rs in by_version.items()}
            assert max(got[1.0]) < since[0] < min(got[2.0])
            assert max(got[2.0]) < since[1] < min(got[3.0])
            platform = c.rows("SELECT platform FROM agents WHERE id='test-agent'")[0][0]
            assert sorted(t for _, _, t in store.group_runs(Group(platform, "w", "small",
                                                                  ""))) == [3.0] * 5
        finally:
            store.close()
        assert (tmp_path / "agent.log").read_text().count(
            "workload w: its program changed") == 2
    finally:
        c.stop()




@pytest.mark.integration
def test_an_adaptive_point_counts_only_the_runs_of_the_program_it_measures_now(tmp_path):
    """Real daemon and agent, an adaptive sweep (min_reps 3, +-2 %) of a script that replaces
    itself at its second run, at the first point. Its runs' times are within 0.1 % of each
    other, so 3 runs of one program close a point. The first point must close on 3 runs of
    version 2 (5 in all), the second on 3 of version 2. Before, the stop rule counted the two
    runs of version 1 with the first of version 2 and closed the point there: the program the
    daemon fits from then on had one run at that point."""
    script = tmp_path / "bench.py"
    script.write_text(self_replacing(1, 1, 2, "1.0 if VERSION == 1 else 1.001"))
    script.chmod(0o755)
    c = script_cluster(tmp_path, script)
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": False, "auto_recommend": False, "accept_load": True,
    }, {"sweep": {"size": "small", "warmup": 0, "max_cores": 2, "frequency_grid": "none",
                  "adaptive": True, "target_ci": 0.02, "max_reps": 8, "min_reps": 3}})
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="hello")
        p = opptune("sweep", "--daemon", c.endpoint, "--agent", "test-agent", "--workload",
                    "w", "--json")
        assert p.returncode == 0, p.stdout + p.stderr + c.logs()
        (job_id,) = [j["job_id"] for j in json.loads(p.stdout)["jobs"]]
        c.wait_for(lambda s: any(j["job_id"] == job_id and j["state"] == "done"
                                 for j in s["jobs"]), timeout=90, what=f"job {job_id}")
        points: dict[int, list[tuple[float, str]]] = {}
        closing: dict[int, dict] = {}
        store = open_store(str(c.db))
        try:
            for _, rec in sorted(store.run_records(job_id), key=lambda r: r[1].started_at):
                points.setdefault(rec.cores, []).append((rec.time_s, rec.extra["program"]))
                if "point" in rec.extra:
                    closing[rec.cores] = rec.extra["point"]
        finally:
            store.close()
    finally:
        c.stop()
    assert [t for t, _ in points[1]] == [1.0, 1.0, 1.001, 1.001, 1.001], points
    assert [t for t, _ in points[2]] == [1.001] * 3, points
    assert len({p for _, p in points[1][:2]}) == 1 and points[1][1][1] != points[1][2][1]
    assert {p for _, p in points[1][2:] + points[2]} == {points[1][2][1]}
    assert (closing[1]["runs"], closing[1]["stop"]) == (5, "ci")
    assert (closing[2]["runs"], closing[2]["stop"]) == (3, "ci")
