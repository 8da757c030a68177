"""The status query in pages: a client that sends no arguments (an older opptune) gets every
row as before; ``limit`` cuts each list and ``page.total`` counts the rest; ``agent`` keeps
one board's rows; ``jobs`` and ``only`` give ``sweep --wait`` what it reads; ``opptune
status`` prints a page and says how to see the rest, ``--json`` every row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opptune.daemon.errors import HandlerError
from opptune.daemon.queries import answer
from opptune.daemon.service import Daemon
from opptune.daemon.store import Group, ResultIn, open_store
from opptune.daemon.sweep_wait import jobs_query
from opptune.shared.config import DaemonConfig
from opptune.shared.records import RunRecord

OPPTUNE = str(Path(sys.executable).parent / "opptune")
LISTS = ("agents", "platforms", "workloads", "runs", "jobs", "fits", "fit_errors",
         "recommendations", "drift", "remeasure", "tunes")


def fill(db: Path, agents: dict[str, int]) -> None:
    """Per agent (its own platform p-AGENT): that many groups, each with a job (the last one
    still running), runs at 1 and 2 cores, a fit whose quality counts i + 1 outliers and a
    recommendation."""
    st = open_store(str(db))
    t = 0.0
    for agent, groups in agents.items():
        plat = f"p-{agent}"
        st.save_platform(plat, {"id": plat, "hostname": f"board-{agent}"}, 1.0)
        st.save_agent(agent, plat, [f"w{i}" for i in range(groups)], "0.1", 1.0)
        for i in range(groups):
            t += 1.0
            g = Group(plat, f"w{i}", "s", "")
            job = f"job-{agent}-{i}"
            st.save_job(agent, {"job_id": job, "workload": g.workload, "size": "s", "reps": 2,
                                "warmup": 0, "points": [{"cpus": [0], "threads": 1,
                                                         "freq_khz": None}]}, t,
                        state="running" if i == groups - 1 else "done")
            recs = [RunRecord(platform=plat, workload=g.workload, input="s", cores=c,
                              cpus=list(range(c)), threads=c, rep=r, time_s=1.0 / c + r / 100)
                    for c in (1, 2) for r in (0, 1)]
            st.insert_results([ResultIn(f"{job}-{k}", agent, job, k, rec, rec.to_dict())
                               for k, rec in enumerate(recs)], t)
            st.save_fit(g, "amdahl", {"serial": 0.1}, {"outliers_left_out": i + 1}, [], t)
            st.save_recommendation({"config_id": f"cfg-{agent}-{i}", "agent": agent,
                                    **g.as_dict(), "cores": 2, "cpus": [0, 1], "threads": 2,
                                    "predicted_time_s": 0.5}, t)
    st.close()


@pytest.fixture
def daemon(tmp_path):
    fill(tmp_path / "d.db", {"a1": 4, "a2": 3})
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db")))
    try:
        yield d
    finally:
        d.close()


def test_a_client_that_sends_no_arguments_gets_every_row(daemon):
    """What an older opptune (and sweep --wait of its version) asks: every row, as before."""
    st = answer(daemon, "status", {})
    assert [len(st[k]) for k in ("agents", "platforms", "runs", "jobs", "fits",
                                 "recommendations")] == [2, 2, 7, 7, 7, 7]
    assert [j["job_id"] for j in st["jobs"]] == [j["job_id"] for j in daemon.store.jobs()]
    assert st["workloads"] == ["w0", "w1", "w2", "w3"]
    assert {r["config_id"]: r["rests_on"]["outliers_left_out"] for r in st["recommendations"]
            } == {f"cfg-a1-{i}": i + 1 for i in range(4)} | {f"cfg-a2-{i}": i + 1
                                                             for i in range(3)}
    assert st["page"] == {"limit": None, "agent": None,
                          "total": {k: len(st[k]) for k in LISTS}}


def test_open_tune_sessions_are_listed_by_agent_and_cut_by_the_limit(daemon):
    # 'opptune tune' interrupted said "'opptune status' follows it", and status had no word of
    # tune sessions
    from opptune.daemon.objectives import Goal
    from opptune.daemon.tuning import Segment, Session
    from opptune.daemon.sampling import Grid
    seg = Segment("", [0, 1], Grid([1, 2], None), 4, 3)
    for tid, agent, state, started in (("tune-1", "a1", "measuring", 10.0),
                                       ("tune-2", "a2", "verifying", 11.0),
                                       ("tune-3", "a1", "done", 12.0)):
        daemon.store.save_tune_session(Session(tid, agent, "w0", "small", Goal("edp"), [seg],
                                               2, 0, None, None, started, state=state,
                                               updated=started).record())
    st = answer(daemon, "status", {})
    assert st["tunes"] == [
        {"tune_id": "tune-1", "agent": "a1", "workload": "w0", "size": "small",
         "goal_text": Goal("edp").describe(), "state": "measuring", "measured": 3,
         "budget": 4, "started": 10.0, "updated": 10.0},
        {"tune_id": "tune-2", "agent": "a2", "workload": "w0", "size": "small",
         "goal_text": Goal("edp").describe(), "state": "verifying", "measured": 3,
         "budget": 4, "started": 11.0, "updated": 11.0}]
    assert [t["tune_id"] for t in answer(daemon, "status", {"agent": "a2"})["tunes"]] == \
        ["tune-2"]
    st = answer(daemon, "status", {"limit": 1})
    assert [t["tune_id"] for t in st["tunes"]] == ["tune-1"] and \
        st["page"]["total"]["tunes"] == 2
    assert answer(daemon, "status", {"only": ["jobs"]})["tunes"] == []


def test_a_page_cuts_every_list_and_counts_what_it_left_out(daemon):
    full = answer(daemon, "status", {})
    st = answer(daemon, "status", {"limit": 2})
    assert st["page"]["limit"] == 2
    assert st["page"]["total"] == full["page"]["total"]
    assert all(len(st[k]) <= 2 for k in LISTS)
    # the unfinished jobs first (one per board here), the newest recommendations and fits
    assert [j["job_id"] for j in st["jobs"]] == ["job-a1-3", "job-a2-2"]
    assert [r["config_id"] for r in st["recommendations"]] == ["cfg-a2-1", "cfg-a2-2"]
    assert [f["group"]["workload"] for f in st["fits"]] == ["w1", "w2"]
    # a listed recommendation rests on what it rests on in the whole reply (its group's fit
    # quality read although the fit is not on the page)
    whole = {r["config_id"]: r for r in full["recommendations"]}
    assert all(r == whole[r["config_id"]] for r in st["recommendations"])
    # w0 refitted last: the page's one fit is not the page's one recommendation's group
    daemon.store.save_fit(Group("p-a2", "w0", "s", ""), "usl", {}, {"outliers_left_out": 9},
                          [], 100.0)
    st = answer(daemon, "status", {"limit": 1})
    assert [(f["group"]["workload"], f["model"]) for f in st["fits"]] == [("w0", "usl")]
    assert [r["config_id"] for r in st["recommendations"]] == ["cfg-a2-2"]
    assert st["recommendations"][0]["rests_on"]["outliers_left_out"] == 3


def test_one_agents_page_holds_its_rows_only(daemon):
    st = answer(daemon, "status", {"agent": "a2"})
    assert [a["id"] for a in st["agents"]] == ["a2"] and list(st["platforms"]) == ["p-a2"]
    assert {j["agent"] for j in st["jobs"]} == {"a2"} and len(st["jobs"]) == 3
    assert {r["agent"] for r in st["runs"]} == {"a2"}
    assert {f["group"]["platform"] for f in st["fits"]} == {"p-a2"}
    assert [r["config_id"] for r in st["recommendations"]] == ["cfg-a2-0", "cfg-a2-1",
                                                              "cfg-a2-2"]
    assert st["workloads"] == ["w0", "w1", "w2"]
    assert st["page"]["agent"] == "a2" and st["page"]["total"]["jobs"] == 3
    st = answer(daemon, "status", {"agent": "a1", "limit": 1})
    assert [j["job_id"] for j in st["jobs"]] == ["job-a1-3"]
    assert st["page"]["total"]["jobs"] == 4


def test_a_page_of_agents_shows_the_offline_first_and_drift_keeps_to_its_agent(daemon):
    import time
    daemon.registry.hello("a1", b"a1", "p-a1", {}, [], now=time.time())  # connected: alive
    st = answer(daemon, "status", {"limit": 1})
    assert [(a["id"], a["alive"]) for a in st["agents"]] == [("a2", False)]
    assert st["page"]["total"]["agents"] == 2 and list(st["platforms"]) == ["p-a2"]
    daemon.store.save_drift("a2", Group("p-a2", "w0", "s", ""), "off twice", ["job-a2-0"],
                            None, 50.0)
    assert answer(daemon, "status", {"agent": "a1"})["drift"] == []
    (e,) = answer(daemon, "status", {"agent": "a2", "limit": 1})["drift"]
    assert e["job_states"] == ["done"]  # the job read although it is off the page
    assert e["reason"] == "off twice"


def test_following_jobs_reads_those_jobs_the_agents_and_re_measurements_only(daemon):
    st = answer(daemon, "status", jobs_query(["job-a1-0", "job-a2-2", "job-gone"]))
    assert [j["job_id"] for j in st["jobs"]] == ["job-a1-0", "job-a2-2"]
    assert [a["id"] for a in st["agents"]] == ["a1", "a2"]
    assert st["runs"] == st["fits"] == st["recommendations"] == [] and st["platforms"] == {}
    assert st["page"]["total"]["jobs"] == 2 and st["page"]["total"]["runs"] is None


@pytest.mark.parametrize("args, says", [
    ({"limit": 0}, "args.limit must be a whole number >= 1"),
    ({"limit": True}, "args.limit"), ({"limit": "5"}, "args.limit"),
    ({"agent": 7}, "args.agent must be an agent id"),
    ({"jobs": "job-1"}, "args.jobs must be a list"),
    ({"only": ["jobs", "everything"]}, "args.only must be a list of agents, platforms"),
    ({"only": [{"a": 1}]}, "args.only must be a list"),
    ({"jobs": [1, 2]}, "args.jobs must be a list of at most 4096 job ids"),
])
def test_wrong_page_arguments_are_refused_naming_the_argument(daemon, args, says):
    with pytest.raises(HandlerError, match=says) as exc:
        answer(daemon, "status", args)
    assert exc.value.code == "bad_args"


def test_a_limit_beyond_any_list_is_every_row(daemon):
    st = answer(daemon, "status", {"limit": 2**64 - 1})  # msgpack's largest integer
    assert len(st["jobs"]) == 7 and st["page"]["total"]["jobs"] == 7


def test_an_unknown_agent_is_refused_naming_the_known_ones(daemon):
    with pytest.raises(HandlerError, match=r"no agent 'a9' \(known agents: a1, a2\)") as exc:
        answer(daemon, "status", {"agent": "a9"})
    assert exc.value.code == "unknown_agent"


@pytest.mark.integration
def test_opptune_status_prints_a_page_and_json_every_row(tmp_path):
    from procs import Cluster
    c = Cluster(tmp_path, auto_sweep=False)
    fill(Path(c.db), {"a1": 25, "a2": 2})
    c.start_daemon()
    try:
        c.wait_for(lambda s: True, timeout=30, what="the daemon to answer")

        def status(*args):
            proc = subprocess.run([OPPTUNE, "status", "--daemon", c.endpoint, *args],
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            return proc.stdout
        text = status()
        assert "7 more of 27 jobs: opptune status --all for every row, --agent ID for one " \
               "board's" in text
        assert "job-a1-24" in text and "job-a2-1" in text  # the running ones
        assert "more" not in status("--all")
        assert "5 more of 25 jobs: opptune status --all for every row\n" in \
            status("--agent", "a1")
        st = json.loads(status("--json"))
        assert len(st["jobs"]) == 27 and st["page"]["limit"] is None
        st = json.loads(status("--json", "--limit", "3"))
        assert len(st["jobs"]) == 3 and st["page"]["total"]["jobs"] == 27
        for bad, says in ((["--limit", "0"], "opptune status: --limit must be >= 1, not 0"),
                          (["--agent", "a9"], "no agent 'a9' (known agents: a1, a2)")):
            proc = subprocess.run([OPPTUNE, "status", "--daemon", c.endpoint, *bad],
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 2 and says in proc.stderr and not proc.stdout
            assert "Traceback" not in proc.stderr
    finally:
        assert c.stop() == {"daemon": 0}, c.logs()


def test_the_benchmark_answers_each_query_on_a_built_store(tmp_path):
    """benchmarks/loop_queries.py: each client's query answered on benchmarks/report.py's
    store; a page is smaller than every row, and sweep --wait's poll smaller still."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "loop_queries.py"
    proc = subprocess.run([sys.executable, str(bench), "--groups", "45", "--rounds", "1",
                           "--json", "--keep", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    fig = json.loads(proc.stdout)
    assert fig["store"]["groups"] == 45
    q = {name: v["bytes"] for name, v in fig["queries"].items()}
    assert list(q) == ["status, every row", "status page", "status, one board",
                       "sweep --wait poll", "report"]
    assert q["sweep --wait poll"] < q["status, one board"] < q["status page"] \
        < q["status, every row"] < q["report"]
    assert all(v["ms"] > 0 for v in fig["queries"].values())
