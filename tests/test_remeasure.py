"""Marked points are measured again when the board is quiet, a point never measured clean is
reported, and recommendations and verifications say what they rest on (issue 22)."""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from opptune.agent.virtual_board import BOARDS, make_tree, model_time_s, update_spec
from opptune.daemon.recommender import rests_on
from opptune.daemon.remeasure import marked_points, never_clean_text
from opptune.daemon.store import Group, ResultIn, open_store
from opptune.shared.records import RunRecord

from procs import Cluster, wait_until, write_toml
from test_goal_service import NO_METER, Agent, record as goal_record
from test_tune_restart import daemon_on

NEIGHBOUR = {"share": 0.4, "name": "sh", "pid": 4711}
FINAL = ("verified", "unconfirmed", "off", "marked")


def cluster(tmp_path: Path, cpu: int, max_cores: int, backoff: list[float]
            ) -> tuple[Cluster, str]:
    """A daemon and an agent on a virtual rpi4 with a neighbour on ``cpu``."""
    root = make_tree("rpi4", str(tmp_path / "board"))
    update_spec(root, neighbour={"cpus": [cpu], **NEIGHBOUR})
    c = Cluster(tmp_path, kernels=("pi_integrate",),
                extra_agent={"virtual_board": "rpi4", "sysfs_root": root})
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": True, "auto_recommend": True, "verify_reps": 2,
        "remeasure_backoff_s": backoff,
    }, {"sweep": {"size": "large", "reps": 2, "warmup": 0, "max_cores": max_cores,
                  "frequency_grid": "none"}})
    return c, root


def final_rec(st):
    return any(r["state"] in FINAL for r in st["recommendations"])


@pytest.mark.integration
def test_marked_points_are_measured_again_once_the_neighbour_is_gone(tmp_path: Path):
    # the first wait is long enough for the test to see it before the job goes out
    c, root = cluster(tmp_path, cpu=1, max_cores=2, backoff=[5.0, 2.0, 2.0])
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: any(m["state"] == "waiting" for m in s["remeasure"]),
                        timeout=60, what="the first re-measure job")
        (m,) = st["remeasure"]
        assert m["retry"] == 1 and [p["cpus"] for p in m["points"]] == [[0, 1]]
        assert "pid 4711 (sh)" in m["points"][0]["reason"]
        assert st["recommendations"] == []  # nothing is recommended from the busy sweep
        update_spec(root, neighbour=None)
        st = c.wait_for(final_rec, timeout=60, what="the recommendation after re-measuring")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert st["remeasure"] == []
    jobs = sorted(st["jobs"], key=lambda j: j["created"])
    assert [(j["state"], j["expected"]) for j in jobs] == [("done", 4), ("done", 2)]
    (marked,) = c.rows("SELECT COUNT(*) FROM runs WHERE marked IS NOT NULL")
    assert marked == (2,)  # the sweep's 2-core runs only: the re-measure job's are clean
    (rec,) = st["recommendations"]
    basis = rec["rests_on"]
    assert basis["marked_runs"] == 2 and basis["unclean_points"] == []
    assert basis["clean_runs"] >= 4 and not basis["marked_used"]
    assert re.match(r"rests on \d+ clean runs; 2 marked runs left out \(interference: \d+ % "
                    r"of cpus 0-1; pid 4711 \(sh\) used \d+ % of cpu 1\)", basis["text"]), basis
    # the fit rests on the quiet runs: more cores than one (the busy 2-core runs were paced
    # by the shared cpu: no speedup), predicted at the quiet board's time
    truth = BOARDS["rpi4"]["truth"]
    ipc = BOARDS["rpi4"]["clusters"][0]["ipc"]
    assert rec["cores"] >= 2
    assert rec["predicted_time_s"] == pytest.approx(
        model_time_s(truth, rec["cores"], 1.5, "large", speed=ipc), rel=0.15)
    assert rec["state"] in ("verified", "unconfirmed", "off")


@pytest.mark.integration
def test_a_point_never_measured_clean_is_reported_with_the_offender(tmp_path: Path):
    c, _ = cluster(tmp_path, cpu=2, max_cores=3, backoff=[0.5, 0.5])
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: final_rec(s) and any(
            m["state"] == "never clean" for m in s["remeasure"]), timeout=90,
            what="the points reported never clean and the recommendation")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    (m,) = st["remeasure"]
    (p,) = m["points"]
    assert (p["cores"], p["cpus"], p["retries"]) == (3, [0, 1, 2], 2)
    assert re.match(r"no clean measurement at 3 cores: interference: \d+ % of cpus 0-2; pid "
                    r"4711 \(sh\) used \d+ % of cpu 2", never_clean_text(p)), p
    # the daemon's log says it once, each point's place once ("after 2 retries at no clean
    # measurement at 3 cores" before)
    log = (tmp_path / "daemon.log").read_text()
    assert re.search(r"pi_integrate of large on test-agent: no clean measurement after 2 retries: at 3 "
                     r"cores: interference: \d+ % of cpus 0-2", log), log[-3000:]
    assert "retries at no clean" not in log
    # the sweep and two retries: three jobs, the 3-core runs of each marked
    assert len(st["jobs"]) == 3
    (rec,) = st["recommendations"]
    text = rec["rests_on"]["text"]
    assert "no clean measurement at 3 cores: interference" in text and "pid 4711 (sh)" in text
    assert "the board was busy during every retry" in text and "--accept-load" in text
    shared = 2 in rec["cpus"]  # its verification shared cpu 2 with the neighbour
    assert rec["rests_on"]["marked_runs"] == 6 + 2 * shared
    if shared:
        assert rec["state"] == "marked" and rec["error"].startswith("not verified: 2 of 2 "
                                                                    "verification runs marked")
    else:
        assert rec["state"] in ("verified", "unconfirmed", "off")


def rec(cores, cpus, t, marked=None):
    r = RunRecord(platform="p", workload="w", input="s", cores=cores, cpus=cpus,
                  threads=cores, rep=0, time_s=t, wall_s=t, ok=True)
    r.marked = marked
    return r


def _store_with(path, recs):
    """A store at ``path`` holding ``recs`` as the runs of one job of agent "a"."""
    st = open_store(str(path))
    st.insert_results([ResultIn(f"m{i}", "a", "j", i, r, r.to_dict())
                       for i, r in enumerate(recs)], now=1.0)
    return st


def test_runs_are_matched_to_their_points_and_rests_on_counts_them(tmp_path):
    points = [{"cpus": [0], "threads": 1, "freq_khz": None},
              {"cpus": [0, 1], "threads": 2, "freq_khz": None}]
    why = "interference: 40 % of cpu 1 used by pid 4711 (sh)"
    recs = [rec(1, [0], 2.0), rec(1, [0], 2.1), rec(2, [0, 1], 1.9, why),
            rec(2, [0, 1], 1.8, why)]
    assert marked_points(points, recs) == {1: why}
    assert marked_points(points, recs[:2]) == {}
    st = _store_with(tmp_path / "s.db", recs)
    try:
        g = Group("p", "w", "s", "")
        b = rests_on(st, g, {"outliers_left_out": 1})
        assert (b["clean_runs"], b["marked_runs"], b["outliers_left_out"]) == (2, 2, 1)
        assert b["unclean_points"] == [{"cores": 2, "freq_mhz": None, "reason": why}]
        assert b["text"] == (f"rests on 2 clean runs; 2 marked runs left out ({why}); 1 outlier "
                             f"left out; no clean measurement at 2 cores: {why}")
        under = rests_on(st, g, accept_load=True)
        # no fit quality (a goal's fit of medians): no outlier count rather than a 0 that
        # would contradict the status's count for the same group
        assert under["outliers_left_out"] is None
        assert under["marked_used"] and under["text"] == (
            f"holds for the board under its load: 2 clean and 2 marked runs used ({why})")
        assert len(st.group_runs(g, accept_load=True)) == 4 and len(st.group_runs(g)) == 2
    finally:
        st.close()


def test_rests_on_leaves_out_the_runs_left_to_the_governor_as_the_fit_does(tmp_path):
    """The DVFS walk: pi_integrate swept at 600/1000/1500 MHz, then left to the governor;
    'opptune status' said 'rests on 54 clean runs' where the fit had 42: the 12 runs without a
    set frequency leave the fit (fitter.set_clock_rows) but were counted, marked ones too."""
    why = "interference: 40 % of cpu 1 used by pid 4711 (sh)"
    recs = [rec(1, [0], 2.0), rec(2, [0, 1], 1.1), rec(1, [0], 1.0), rec(2, [0, 1], 0.6),
            rec(2, [0, 1], 0.7, why)]
    for r, mhz in zip(recs, [600.0, 600.0, None, None, None]):
        r.freq_mhz = mhz
    st = _store_with(tmp_path / "s.db", recs)
    try:
        g = Group("p", "w", "s", "")
        b = rests_on(st, g, {"outliers_left_out": 0})
        assert (b["clean_runs"], b["marked_runs"], b["governor_runs_left_out"]) == (2, 0, 3)
        assert b["unclean_points"] == [] and b["offenders"] == []
        assert b["text"] == ("rests on 2 clean runs; 3 runs left to the governor left out "
                             "(their clock is unknown where other runs were at a set one)")
        # only runs left to the governor: they are the fit's, none left out
        st2 = _store_with(tmp_path / "s2.db", recs[2:])
        b2 = rests_on(st2, g)
        assert (b2["clean_runs"], b2["marked_runs"], b2["governor_runs_left_out"]) == (2, 1, 0)
        st2.close()
    finally:
        st.close()


def test_a_point_never_clean_at_a_clock_is_cleared_only_by_a_clean_run_at_that_clock(tmp_path):
    """A point never measured clean at 600 MHz stays reported after a clean sweep of the same
    cpus left to the governor (or at another clock): before, a clean job at the same cpus
    cleared it whatever its frequency, and the status stopped saying the 600 MHz point had
    no clean run (the fit still had none there)."""
    from opptune.daemon.remeasure import Remeasure
    from opptune.shared.config import DaemonConfig
    why = "interference: 48 % of cpu 1 used by pid 4711 (sh)"
    st = open_store(str(tmp_path / "s.db"))
    try:
        st.save_remeasure("never:a1/w/s", "a1", "never_clean", {
            "workload": "w", "size": "s", "points": [
                {"cores": 2, "cpus": [0, 1], "freq_khz": 600_000, "reason": why, "retries": 3}]},
            now=1.0)
        rm = Remeasure(DaemonConfig(remeasure_backoff_s=[0.1]), st, None, None)
        for i, khz in enumerate([None, 1_500_000, 600_000]):
            job = {"job_id": f"j{i}", "workload": "w", "size": "s", "reps": 1, "warmup": 0,
                   "points": [{"cpus": [0, 1], "threads": 2, "freq_khz": khz}]}
            st.save_job("a1", job, now=2.0 + i)
            r = rec(2, [0, 1], 1.0)
            r.freq_mhz = khz and khz / 1000
            st.insert_results([ResultIn(f"m{i}", "a1", f"j{i}", 0, r, r.to_dict())], now=2.0 + i)
            assert rm.job_done(f"j{i}", "a1", now=2.5 + i) is False
            never = rm.never_clean.get(("a1", "w", "s"), [])
            assert [p["freq_khz"] for p in never] == ([] if khz == 600_000 else [600_000]), khz
    finally:
        st.close()


@pytest.fixture
def daemon(tmp_path):
    d = daemon_on(tmp_path / "d.db", remeasure_backoff_s=[0.1])
    yield d
    d.stop()


def test_the_daemon_sends_the_marked_points_again_and_recommend_says_what_it_rests_on(daemon):
    why = "interference: 48 % of cpus 0-2; pid 4711 (sh) used 96 % of cpu 2"
    a = Agent(daemon.endpoint, NO_METER)
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3, 4)):
            r = goal_record(NO_METER, cores, energy=False)
            if cores >= 3:
                r["marked"], r["time_s"] = why, r["time_s"] * 2
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4, "record": r})
            a.expect("ack")
        again = a.expect("job")["body"]  # after the backoff: the marked points only
        assert [p["cpus"] for p in again["points"]] == [[0, 1, 2], [0, 1, 2, 3]]
        assert (again["workload"], again["size"], again["reps"]) == ("wl", "small", 1)
        # the load is not accepted: the marked points are out, and said so
        rec = a.query("recommend", {"agent": "q1", "workload": "wl"})["body"]["data"]
        basis = rec["rests_on"]
        assert (basis["clean_runs"], basis["marked_runs"]) == (2, 2)
        assert [p["cores"] for p in basis["unclean_points"]] == [3, 4]
        assert f"no clean measurement at 3 cores: {why}" in basis["text"]
        under = a.query("recommend", {"agent": "q1", "workload": "wl", "accept_load": True}
                        )["body"]["data"]
        assert under["rests_on"]["marked_used"] and under["n_measurements"] == 4
        assert under["rests_on"]["text"].startswith("holds for the board under its load")
        err = a.query("recommend", {"agent": "q1", "workload": "wl", "accept_load": "yes"})
        assert err["body"]["code"] == "bad_args" and "accept_load" in err["body"]["message"]
        assert daemon.status()["recommendations"] == []  # not from the busy runs
        # the report plots every run and refits only those the daemon's fit may use
        (pts,) = a.query("report", {})["body"]["data"]["points"]
        assert [r[0] for r in pts["runs"]] == [1, 2, 3, 4]
        assert [r[0] for r in pts["fit_runs"]] == [1, 2]
        # measured clean now: the fit recommends (a config is pushed) and nothing is pending
        for seq, cores in enumerate((3, 4)):
            a.send("result", {"job_id": again["job_id"], "seq": seq, "of": 2,
                              "record": goal_record(NO_METER, cores, energy=False)})
            a.expect("ack")
        cfg = a.expect("config")["body"]
        assert daemon.status()["remeasure"] == []
        # a verification whose runs were marked is not judged: neither verified nor off
        runs = [goal_record(NO_METER, len(cfg["cpus"]), energy=False) for _ in range(2)]
        runs[1]["marked"] = why
        a.send("applied", {"config_id": cfg["config_id"], "ok": True, "records": runs})
        a.expect("ack")
        (rec,) = daemon.status()["recommendations"]
        assert rec["state"] == "marked" and rec["error"].startswith(
            f"not verified: 1 of 2 verification runs marked ({why}); under that load its time "
            f"was ")
    finally:
        a.close()


def test_a_group_with_marked_runs_only_has_no_model_and_the_status_says_why(daemon):
    why = "interference: 60 % of cpu 0 used by pid 99 (make)"
    a = Agent(daemon.endpoint, NO_METER)
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3, 4)):
            r = goal_record(NO_METER, cores, energy=False)
            r["marked"] = why
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4, "record": r})
            a.expect("ack")
        again = a.expect("job")["body"]
        assert len(again["points"]) == 4  # every point, measured again
        st = daemon.status()
        deadline = time.monotonic() + 20
        while not st["fit_errors"] and time.monotonic() < deadline:
            a.query("status", {})  # the fit runs off the loop: wait on the status
            st = daemon.status()
        (e,) = st["fit_errors"]
        assert e["error"].startswith("no model: ")
        assert e["error"].endswith(f"; 4 runs marked for interference were left out ({why}): "
                                   "they are measured again when the board is quiet, or fitted "
                                   "under that load with accept_load = true (opptune "
                                   "recommend/demo --accept-load)")
        (run,) = st["runs"]
        assert (run["count"], run["marked"]) == (4, 4)
    finally:
        a.close()


def test_status_shows_marked_counts_what_a_recommendation_rests_on_and_never_clean_points():
    from rich.console import Console

    from opptune.daemon.status_view import print_status
    why = "interference: 48 % of cpu 1 used by pid 4711 (sh)"
    group = {"platform": "p1", "workload": "triad", "input": "small", "variant": ""}
    text = f"rests on 6 clean runs; 2 marked runs left out ({why})"
    data = {
        "daemon": {"instance": "i1", "endpoint": "tcp://127.0.0.1:5555", "uptime_s": 3.0,
                   "database": "d.db"},
        "agents": [], "fits": [], "jobs": [], "fit_errors": [],
        "runs": [{"agent": "a1", "platform": "p1", "workload": "triad", "input": "small",
                  "count": 8, "failed": 1, "marked": 2}],
        "recommendations": [{"config_id": "cfg-1", "agent": "a1", "group": group, "cores": 2,
                             "cpus": [0, 1], "freq_khz": None, "predicted_time_s": 1.0,
                             "predicted_lower_s": 0.9, "predicted_upper_s": 1.1,
                             "state": "marked", "verified_time_s": 1.6, "off_pct": None,
                             "error": f"not verified: 2 of 2 verification runs marked ({why})",
                             "rests_on": {"marked_runs": 2, "text": text}}],
        "remeasure": [{"agent": "a1", "workload": "triad", "size": "small",
                       "state": "never clean", "retry": 3, "due_in_s": None, "job_id": None,
                       "points": [{"cores": 2, "cpus": [0, 1], "freq_khz": None,
                                   "reason": why, "retries": 3}]}],
    }
    console = Console(record=True, width=250)
    print_status(data, console)
    out = console.export_text()
    assert re.search(r"a1\s+│\s+triad\s+│\s+small\s+│\s+8\s+│\s+1\s+│\s+2", out), out
    assert f"cfg-1 (p1/triad/small): {text}" in out
    assert f"triad (small) on a1: no clean measurement at 2 cores: {why}" in out
    assert "marked (not verified: 2 of 2 verification runs marked" in out


@pytest.mark.integration
def test_a_waiting_re_measure_survives_a_daemon_restart(tmp_path: Path):
    """kill -9 of the daemon while marked points wait for their backoff: the restarted
    daemon (same store) has them waiting still, sends them once the neighbour is gone, and
    recommends from the quiet runs; nothing is measured twice."""
    c, root = cluster(tmp_path, cpu=1, max_cores=2, backoff=[15.0, 2.0, 2.0])
    c.start_daemon()
    c.start_agent()
    try:
        # killed once the sweep's fit is over: a daemon killed mid-fit holds the group's fit
        # claim for FIT_LEASE_S, which is not what this test is about. And killed seconds
        # before the job is due: a fit that ends late under load left the kill after the
        # job went out, measured with the neighbour still there (retry 2 after the restart)
        st = c.wait_for(lambda s: any(m["state"] == "waiting" and m["due_in_s"] >= 4.0
                                      for m in s["remeasure"]) and
                        bool(s["fits"] or s["fit_errors"]), timeout=60,
                        what="the first re-measure job, 4 s or more before it is due, and the "
                             "sweep's fit")
        (before,) = st["remeasure"]
        c.kill("daemon")
        update_spec(root, neighbour=None)
        c.start_daemon()
        st = c.wait_for(lambda s: bool(s["remeasure"]), timeout=30,
                        what="the restarted daemon's re-measure state")
        (m,) = st["remeasure"]
        # taken up as it was: the same points, retry and reason; its due time kept
        assert (m["retry"], m["points"]) == (before["retry"], before["points"]) == \
            (1, before["points"])
        assert [p["cpus"] for p in m["points"]] == [[0, 1]]
        assert m["state"] == "measuring" or m["due_in_s"] <= before["due_in_s"]
        st = c.wait_for(final_rec, timeout=60, what="the recommendation after re-measuring")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert st["remeasure"] == []
    jobs = sorted(st["jobs"], key=lambda j: j["created"])
    assert [(j["state"], j["expected"]) for j in jobs] == [("done", 4), ("done", 2)]
    assert c.rows("SELECT COUNT(*) FROM remeasure") == [(0,)]
    (rec,) = st["recommendations"]
    assert rec["cores"] >= 2 and rec["rests_on"]["unclean_points"] == []


@contextmanager
def _daemon_with_agent(db):
    """A daemon on the store ``db`` (re-measure backoffs 0.1 s, 0.1 s) and an agent connected
    to it; both stopped on leaving, as a restart test needs between its daemons."""
    d = daemon_on(db, remeasure_backoff_s=[0.1, 0.1])
    try:
        a = Agent(d.endpoint, NO_METER)
        try:
            yield d, a
        finally:
            a.close()
    finally:
        d.stop()


def _stop_loop(d) -> None:
    """Stop the daemon's loop, its store left open: what the test does to the store and the
    re-measure state from here is this thread's alone (the loop's tick writes the store each
    second, on the same connection: a transaction of this thread's met one of its)."""
    d.stop_event.set()
    d._thread.join(10)
    assert not d._thread.is_alive()


def test_a_re_measure_job_done_just_now_is_judged_where_its_results_were_stored(tmp_path):
    """Two daemons of a fleet, the agent moved from A to B within A's agent_timeout_s: B
    stores the last result of the re-measure job and judges it; A, which still counts the
    agent as its own, judged it too in its tick (a job done 'while no daemon followed it'),
    and whichever lost the claim on the item took the job for a first sweep (retry 1 again,
    the other's retry 2 overwritten; the fleet test saw the item vanish). A leaves a job done
    just now to the daemon that stored it, and judges one done before that."""
    from opptune.daemon.remeasure import JUDGED_WHERE_STORED_S
    with _daemon_with_agent(tmp_path / "d.db") as (d, a):
        _answer(a, {"job_id": a.issued_job(), "points": [{"cpus": list(range(k))}
                                                         for k in (1, 2, 3, 4)]}, 3)
        first = a.expect("job")["body"]  # retry 1, out: its item 'sent'
        _stop_loop(d)
        (sent,) = d.store.remeasure_items()
        assert sent["state"] == "sent" and sent["body"]["job_id"] == first["job_id"]
        now = time.time()
        # another daemon of the fleet stored its last result (clean: nothing stored here)
        # and marked it done just now; it judges it
        d.store.set_job_state(first["job_id"], "done", now=now)
        d.remeasure.tick(now + 1.0)
        assert d.store.remeasure_items() == [sent]
        # done longer ago and still not judged: no daemon followed it, this one judges it
        # (every point clean: nothing left to measure again)
        d.remeasure.tick(now + JUDGED_WHERE_STORED_S + 0.5)
        assert d.store.remeasure_items() == []


def test_a_re_measure_job_another_daemon_judged_is_no_first_sweep_here(tmp_path):
    """Two daemons of a fleet judge one re-measure job (the one that stored its last result
    late, the other in its tick): the claim on its item decides. The daemon that finds the
    item gone does not take the job for a first sweep (retry 1 again, a second item for the
    same points, the retries begun again) and fits nothing (the judge fitted it)."""
    with _daemon_with_agent(tmp_path / "d.db") as (d, a):
        _answer(a, {"job_id": a.issued_job(), "points": [{"cpus": list(range(k))}
                                                         for k in (1, 2, 3, 4)]}, 3)
        first = a.expect("job")["body"]  # retry 1, out: its item 'sent'
        (sent,) = d.store.remeasure_items()
        d.jobs.on_done = lambda job_id, agent: None  # judged below, by hand
        _answer(a, first, 3)  # still marked
        wait_until(lambda: d.store.job(first["job_id"])["state"] == "done",
                   "the re-measure job stored done", 20)
        _stop_loop(d)
        # the other daemon's judgement: its claim on the item, then its retry 2
        assert d.store.delete_remeasure(sent["id"], "sent")
        d.store.save_remeasure("rm-other", "q1", "waiting",
                               {**sent["body"], "attempt": 2, "job_id": None}, time.time())
        fits = []
        d.remeasure.fit = lambda *args: fits.append(args)
        assert d.remeasure.job_done(first["job_id"], "q1") is None
        d.remeasure._judge(first["job_id"], "q1", time.time())
        assert [(m["id"], m["body"]["attempt"]) for m in d.store.remeasure_items()] == [
            ("rm-other", 2)]
        assert fits == []


def test_retries_and_never_clean_points_survive_daemon_restarts(tmp_path):
    """A re-measure job out across a restart keeps its retry number (the agent's hello
    brings it back; the retries end after the configured count, not more), and the points
    never measured clean are still reported by the next daemon on the store."""
    why = "interference: 48 % of cpus 0-2; pid 4711 (sh) used 96 % of cpu 2"
    db = tmp_path / "d.db"
    with _daemon_with_agent(db) as (d, a):
        job_id = a.issued_job()
        _answer(a, {"job_id": job_id, "points": [{"cpus": list(range(k))}
                                                 for k in (1, 2, 3, 4)]}, 3, why)
        first = a.expect("job")["body"]  # retry 1, out when the daemon stops
    with _daemon_with_agent(db) as (d, a):
        again = a.expect("job")["body"]  # the hello: the job out is sent again
        assert again["job_id"] == first["job_id"]
        _answer(a, again, 3, why)
        second = a.expect("job")["body"]  # retry 2, the last
        assert [p["cpus"] for p in second["points"]] == [[0, 1, 2], [0, 1, 2, 3]]
        _answer(a, second, 3, why)
        st = wait_until(lambda: (lambda s: s if any(m["state"] == "never clean" for m in
                                                     s["remeasure"]) else None)(d.status()),
                        "the points reported never clean", 20)
        # no third retry: decided with the never-clean report, nothing left waiting
        assert len(st["jobs"]) == 3 and [m["state"] for m in st["remeasure"]] == ["never clean"]
    d = daemon_on(db, remeasure_backoff_s=[0.1, 0.1])
    try:
        assert d.status()["remeasure"] == st["remeasure"]
        (m,) = st["remeasure"]
        assert [(p["cores"], p["retries"], p["reason"]) for p in m["points"]] == [
            (3, 2, why), (4, 2, why)]
        # and what a recommendation rests on still says so
        basis = rests_on(d.store, Group("plat-q", "wl", "small", ""),
                         never_clean=d.remeasure.never_clean.get(("q1", "wl", "small")))
        assert "the board was busy during every retry" in basis["text"]
    finally:
        d.stop()


def _answer(a, job, marked_from=None, why="interference: 48 % of cpus 0-2; pid 4711 (sh) "
            "used 96 % of cpu 2"):
    """The agent's results for ``job``: points of ``marked_from`` cores or more marked."""
    for seq, p in enumerate(job["points"]):
        r = goal_record(NO_METER, len(p["cpus"]), energy=False)
        if marked_from is not None and len(p["cpus"]) >= marked_from:
            r["marked"], r["time_s"] = why, r["time_s"] * 2
        a.send("result", {"job_id": job["job_id"], "seq": seq, "of": len(job["points"]),
                          "record": r})
        a.expect("ack")


def test_a_re_measure_job_finished_while_no_daemon_judged_it_gets_its_fit(tmp_path):
    """The daemon stops between storing a re-measure job's last result and judging it: the
    next daemon on the store judges it once the agent is back and recommends from the clean
    runs (the configuration is pushed to the agent), as a live completion does."""
    db = tmp_path / "d.db"
    with _daemon_with_agent(db) as (d, a):
        _answer(a, {"job_id": a.issued_job(), "points": [{"cpus": list(range(k))}
                                                        for k in (1, 2, 3, 4)]}, 3)
        again = a.expect("job")["body"]
        d.jobs.on_done = lambda job_id, agent: None  # stopped before judging it
        _answer(a, again)
        wait_until(lambda: d.store.job(again["job_id"])["state"] == "done",
                   "the re-measure job stored done", 20)
        assert d.status()["recommendations"] == []
    with _daemon_with_agent(db) as (d, a):
        cfg = a.expect("config")["body"]  # judged and fitted: recommended to the agent
        # the daemon's loop stores it just after sending it; this thread reads the store
        wait_until(lambda: d.status()["recommendations"], "the recommendation stored", 20)
        (rec,) = d.status()["recommendations"]
        assert rec["config_id"] == cfg["config_id"] and rec["state"] == "pushed"
        assert rec["rests_on"]["unclean_points"] == []
        assert d.status()["remeasure"] == []
        assert len(d.status()["jobs"]) == 2  # nothing measured again


def test_two_daemons_on_one_store_share_one_re_measure_state(tmp_path, pg_url):
    """Daemon B starts while A's marked points wait; A sends them, the agent fails over to B
    and answers there, still marked: B judges the job as retry 1 (not a first sweep), sends
    no stale copy, and both daemons show the one state the store holds."""
    da = daemon_on(pg_url, remeasure_backoff_s=[3.0, 60.0])
    db = None
    a = Agent(da.endpoint, NO_METER)
    try:
        _answer(a, {"job_id": a.issued_job(), "points": [{"cpus": list(range(k))}
                                                        for k in (1, 2, 3, 4)]}, 3)
        db = daemon_on(pg_url, remeasure_backoff_s=[3.0, 60.0])
        first = a.expect("job")["body"]  # retry 1, from A
        a.close()
        a = Agent(db.endpoint, NO_METER)  # the agent fails over to B
        again = a.expect("job")["body"]  # its hello: the job out is resent
        assert again["job_id"] == first["job_id"]
        _answer(a, again, 3)
        st = wait_until(lambda: (lambda s: s if any(m["state"] == "waiting" and m["retry"] == 2
                                                     for m in s["remeasure"]) else None)(
            db.status()), "retry 2 waiting", 20)
        (m,) = st["remeasure"]
        assert [p["cpus"] for p in m["points"]] == [[0, 1, 2], [0, 1, 2, 3]]
        # the one stored state; due_in_s counts down from each daemon's own reading of the
        # clock (58.8 and 60.3 s at load 14), so it is compared to within far less than the
        # 57 s between the two backoff steps
        (o,) = da.status()["remeasure"]
        assert {k: v for k, v in o.items() if k != "due_in_s"} == \
            {k: v for k, v in m.items() if k != "due_in_s"}
        assert abs(o["due_in_s"] - m["due_in_s"]) < 5, (o, m)
        assert len(st["jobs"]) == 2
    finally:
        a.close()
        da.stop()
        if db is not None:
            db.stop()


@pytest.mark.integration
def test_sweep_wait_says_which_points_were_marked_and_when_they_are_measured_again(
        tmp_path: Path):
    # 'opptune sweep --wait' said "done: 4/4 runs" and nothing of the 2-core point whose runs
    # the neighbour marked, which the daemon measures again after its backoff
    import subprocess
    import sys
    c, root = cluster(tmp_path, cpu=1, max_cores=2, backoff=[60.0])
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": False, "remeasure_backoff_s": [60.0],
    }, {"sweep": {"size": "large", "reps": 2, "warmup": 0, "max_cores": 2,
                  "frequency_grid": "none"}})
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: s["agents"], timeout=30, what="the agent's hello")
        p = subprocess.run([str(Path(sys.executable).parent / "opptune"), "sweep", "--daemon",
                            c.endpoint, "--agent", "test-agent", "--wait"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stderr.split())
    assert re.search(r"done: 4/4 runs; 1 point marked \(at 2 cores: interference: \d+ % of "
                     r"cpus 0-1; pid 4711 \(sh\) used \d+ % of cpu 1\): measured again in "
                     r"\d+ s \(retry 1\); 'opptune status' follows it", text), p.stderr
