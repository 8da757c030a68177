"""Jobs have a lifecycle: sweeps the agent cannot run are refused at once; queued, sent,
running, done, failed (with the reason) and expired are stored and shown; fit failures are in
the status; a recommendation is "verified" only within its prediction interval."""

import sqlite3
import time

import pytest

from opptune.daemon.service import Daemon, verdict
from opptune.daemon.store import Group, open_store
from opptune.shared.config import DaemonConfig, SweepDefaults
from test_daemon_service import PLATFORM, Agent, query, record

FREQ_PLATFORM = {
    **PLATFORM, "hostname": "odroid-7", "model_name": "Cortex-A15",
    "cpufreq": {"available": True, "frequencies_khz": {"policy0": [1000000, 1400000, 1800000]}},
    "policies": [{"name": "policy0", "related_cpus": [0, 1, 2, 3]}],
}
CATALOGUE = [{"name": "wl", "kind": "kernel", "sizes": ["small", "default"]}]


def make_daemon(tmp_path, **kw):
    cfg = DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                       auto_sweep=False, agent_timeout_s=30,
                       sweep=SweepDefaults(size="small", reps=1, warmup=0), **kw)
    d = Daemon(cfg)
    d.start_thread()
    return d


def save_recommendation(d: Daemon, rec: dict) -> None:
    """``rec`` stored through a connection of the test's own: the running daemon's loop has
    its store's (a transaction of this thread's on it could meet one of the loop's)."""
    st = open_store(d.config.database)
    try:
        st.save_recommendation(rec, time.time())
    finally:
        st.close()


@pytest.fixture
def daemon(tmp_path):
    d = make_daemon(tmp_path)
    yield d
    d.stop()


def hello(a, platform=FREQ_PLATFORM, workloads=CATALOGUE):
    a.send("hello", {"platform": platform, "workloads": workloads, "agent_version": "t"})
    a.expect("heartbeat")


def refused(op, args):
    mid = op.send("query", {"what": "sweep", "args": {"agent": "a1", **args}})
    return op.expect("error", ref=mid)["body"]


def job_state(op, job_id):
    return [j for j in query(op, "status")["jobs"] if j["job_id"] == job_id][0]


def wait_state(op, job_id, state, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        j = job_state(op, job_id)
        if j["state"] == state or time.monotonic() > deadline:
            return j


def test_a_sweep_the_agent_cannot_run_is_refused_at_once(daemon):
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a)
    err = refused(op, {"size": "huge"})
    assert err["code"] == "unknown_size"
    assert err["message"] == "agent 'a1' has no size 'huge' for wl; it offers small, default"
    err = refused(op, {"max_cores": 9})
    assert err["code"] == "bad_args"
    assert err["message"] == ("max_cores 9 is more than the 4 cpus of board odroid-7; use "
                              "1..4 (0 = all)")
    err = refused(op, {"frequencies": [1400000, 2000000]})
    assert err["message"] == ("board odroid-7 cannot run at 2000000 kHz: it offers 1000000, "
                              "1400000, 1800000 kHz")
    # MHz typed where kHz are asked (predict --freq takes MHz; the DVFS walk typed 700)
    err = refused(op, {"frequencies": [1400]})
    assert err["message"] == ("board odroid-7 cannot run at 1400 kHz: it offers 1000000, "
                              "1400000, 1800000 kHz (frequencies here are in kHz: 1400 MHz is "
                              "1400000)")
    no_cpufreq = {**PLATFORM, "cpufreq": {"available": False, "reason": "no cpufreq in sysfs"}}
    hello(a, platform=no_cpufreq)
    err = refused(op, {"frequencies": [1400000]})
    assert err["message"].endswith("cannot run at 1400000 kHz: no cpufreq in sysfs")
    # nothing was stored or sent; a sweep it can run goes out
    assert query(op, "status")["jobs"] == []
    data = query(op, "sweep", {"agent": "a1", "size": "default", "max_cores": 4})
    assert a.expect("job")["body"]["size"] == "default" and len(data["jobs"]) == 1


def test_agent_refusal_fails_the_job_with_its_reason(daemon):
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a)
    (sent,) = query(op, "sweep", {"agent": "a1", "max_cores": 2})["jobs"]
    msg = a.expect("job")
    assert job_state(op, sent["job_id"])["state"] == "sent"
    a.send("error", {"code": "bad_job", "message": "point 1: cpus [2] are not online",
                     "ref": msg["id"]})
    j = wait_state(op, sent["job_id"], "failed")
    assert j["state"] == "failed"
    assert j["reason"] == ("agent a1 refused the job: point 1: cpus [2] are not online "
                           "(bad_job)")
    # a failed job is not sent again when the agent says hello
    hello(a)
    a.send("heartbeat", {})
    a.expect("heartbeat")
    assert not a.sock.poll(300)


def test_a_job_whose_every_run_failed_is_failed_with_the_runs_errors(daemon):
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a)
    (sent,) = query(op, "sweep", {"agent": "a1", "max_cores": 2})["jobs"]
    job = a.expect("job")["body"]
    for seq, p in enumerate(job["points"]):
        rec = record(len(p["cpus"]), ok=False, error="exit status 3: no such input")
        rec["time_s"] = None
        a.send("result", {"job_id": job["job_id"], "seq": seq, "of": 2, "record": rec})
        a.expect("ack")
    j = wait_state(op, sent["job_id"], "failed")
    assert (j["state"], j["received"], j["expected"]) == ("failed", 2, 2)
    assert j["reason"] == "every run of the job failed: exit status 3: no such input"
    assert j["board"] == "odroid-7"


@pytest.mark.parametrize("errors,reason", [
    # the hanging program timed out in its warmup (unrecorded): each repetition says not run
    (["not run: warmup 0 of this point timed out after 5 s"] * 2,
     "timed out after 5 s (at warmup 0; the rest of the point was not run)"),
    (["timed out after 5 s", "not run: repetition 0 of this point timed out after 5 s"],
     "timed out after 5 s (at repetition 0; the rest of the point was not run)"),
    # an agent that stores the warmup that timed out: the cause, and where it happened
    (["timed out after 5 s", "not run: warmup 0 of this point timed out after 5 s",
      "not run: warmup 0 of this point timed out after 5 s"],
     "timed out after 5 s (at warmup 0; the rest of the point was not run)"),
    (["workload failed with exit status 3", "timed out after 5 s",
      "not run: repetition 1 of this point timed out after 5 s"],
     "workload failed with exit status 3; timed out after 5 s (at repetition 1; the rest of "
     "the point was not run)"),
])
def test_a_job_that_timed_out_fails_with_the_timeout_not_the_runs_skipped(daemon, errors,
                                                                          reason):
    """Walking a board with a program that hangs: the sweep failed with 'every run of the job
    failed: not run: warmup 0 of this point timed out after 5 s', the follow-on of the skipped
    runs rather than what happened (the timeout)."""
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a)
    (sent,) = query(op, "sweep", {"agent": "a1", "max_cores": 2, "reps": len(errors)})["jobs"]
    job = a.expect("job")["body"]
    of = len(job["points"]) * len(errors)
    for i, p in enumerate(job["points"]):
        for rep, error in enumerate(errors):
            rec = record(len(p["cpus"]), ok=False, error=error, rep=rep)
            rec["time_s"] = None
            a.send("result", {"job_id": job["job_id"], "seq": i * len(errors) + rep, "of": of,
                              "record": rec})
            a.expect("ack")
    j = wait_state(op, sent["job_id"], "failed")
    assert j["reason"] == f"every run of the job failed: {reason}"


STOPPED = ("not run: the job stopped after 2 points in a row timed out (points 1, 2 of 4; "
           "stop_after_timeouts = 2 in the agent's configuration): 1 of 4 points not run")


STOP = {"after_timeouts": 2, "points_not_run": 1, "points": 4, "definition": "0123abcd"}


@pytest.mark.parametrize("first_ok,state,reason", [
    # what was measured before the timeouts stays: done, and the reason says why runs lack
    (True, "done", "timed out after 5 s (at warmup 0; the rest of the point was not run); "
                   + STOPPED[len("not run: "):]),
    (False, "failed", "every run of the job failed: workload failed with exit status 3; "
                      "timed out after 5 s (at warmup 0; the rest of the point was not run); "
                      + STOPPED[len("not run: "):]),
])
# the agent's stop as it sends it in its records, and from an older agent: the text alone
@pytest.mark.parametrize("sent,stopped", [(STOP, STOP), (None, {"after_timeouts": 2})])
def test_a_job_the_agent_stopped_for_its_timeouts_says_so(daemon, first_ok, state, reason,
                                                          sent, stopped):
    """A job the agent stopped after points in a row timed out (stop_after_timeouts) ended
    'done' with no word of the points it never ran. The status says it in a field too,
    ``stopped``, as the agent sent it (or what an older agent's text says)."""
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a)
    (job_sent,) = query(op, "sweep", {"agent": "a1", "max_cores": 4, "reps": 2,
                                      "frequencies": [1800000]})["jobs"]
    job = a.expect("job")["body"]
    assert len(job["points"]) == 4
    errors = ([None if first_ok else "workload failed with exit status 3"] * 2
              + ["timed out after 5 s", "not run: warmup 0 of this point timed out after 5 s"] * 2
              + [STOPPED] * 2)
    for seq, error in enumerate(errors):
        p = job["points"][seq // 2]
        rec = record(len(p["cpus"]), rep=seq % 2, ok=error is None, error=error,
                     freq_mhz=1800.0)
        if error:
            rec["time_s"] = None
        if error == STOPPED and sent:
            rec["extra"] = {"stopped": sent}
        a.send("result", {"job_id": job["job_id"], "seq": seq, "of": 8, "record": rec})
        a.expect("ack")
    j = wait_state(op, job_sent["job_id"], state)
    assert (j["state"], j["reason"], j["stopped"]) == (state, reason, stopped)


def test_a_job_with_a_failed_run_is_done_saying_how_many_failed_and_why(daemon):
    """Walking a real machine with a program that fails one run in three: 'sweep --wait' said
    'done: 6/6 runs' and the status nothing more, the failures' stderr stored but shown
    nowhere. A job done with failed runs (not stopped) now says how many and why."""
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a)
    (sent,) = query(op, "sweep", {"agent": "a1", "max_cores": 1, "reps": 2,
                                  "frequencies": [1800000]})["jobs"]
    job = a.expect("job")["body"]
    for seq, error in enumerate([None, "workload failed with exit status 3"]):
        rec = record(1, rep=seq, ok=error is None, error=error, freq_mhz=1800.0)
        a.send("result", {"job_id": job["job_id"], "seq": seq, "of": 2, "record": rec})
        a.expect("ack")
    j = wait_state(op, sent["job_id"], "done")
    assert (j["state"], j["reason"], j["stopped"]) == (
        "done", "1 of 2 runs failed: workload failed with exit status 3", None)


def test_a_done_job_names_three_causes_of_its_failed_runs_at_most():
    from opptune.daemon.jobs import failed_runs_text
    assert failed_runs_text(0, 6, []) is None
    errors = [f"workload failed with exit status 3: bad input {i}" for i in range(5)]
    assert failed_runs_text(5, 9, errors) == (
        "5 of 9 runs failed: workload failed with exit status 3: bad input 0; workload failed "
        "with exit status 3: bad input 1; workload failed with exit status 3: bad input 2; "
        "and 2 other errors")


def test_fit_errors_name_the_group_and_the_reason(daemon):
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a)
    (sent,) = query(op, "sweep", {"agent": "a1", "max_cores": 1, "reps": 2})["jobs"]
    job = a.expect("job")["body"]
    for seq in range(2):
        a.send("result", {"job_id": job["job_id"], "seq": seq, "of": 2,
                          "record": record(1, rep=seq)})
        a.expect("ack")
    deadline = time.monotonic() + 20
    while True:
        st = query(op, "status")
        if st["fit_errors"] or time.monotonic() > deadline:
            break
    (fe,) = st["fit_errors"]
    assert fe["group"] == {"platform": "plat-test", "workload": "wl", "input": "small",
                           "variant": ""}
    assert fe["agent"] == "a1" and fe["job_id"] == job["job_id"]
    assert fe["error"].startswith("no model: ") and len(fe["error"]) > len("no model: ")
    assert job_state(op, sent["job_id"])["state"] == "done"
    assert st["recommendations"] == []


def test_a_job_of_an_agent_gone_expires_and_is_resent_when_it_returns(tmp_path):
    d = make_daemon(tmp_path, job_expiry_s=1.0)
    try:
        a, op = Agent(d.endpoint), Agent(d.endpoint, "operator-1")
        hello(a)
        (sent,) = query(op, "sweep", {"agent": "a1", "max_cores": 1})["jobs"]
        a.expect("job")
        # the agent says nothing more: after job_expiry_s the job expires
        j = wait_state(op, sent["job_id"], "expired")
        assert j["state"] == "expired"
        assert j["reason"].startswith("agent a1 not seen for ")
        assert "job_expiry_s = 1" in j["reason"]
        hello(a)  # back: the job goes out again
        assert a.expect("job")["body"]["job_id"] == sent["job_id"]
        j = job_state(op, sent["job_id"])
        assert (j["state"], j["reason"]) == ("sent", None)
    finally:
        d.stop()


def test_a_hello_reads_its_agents_jobs_not_every_job_kept(tmp_path):
    """At a hello the daemon resends the agent's unfinished jobs: it finds them among that
    agent's jobs, by index, not by reading every job of the store (100,000 jobs kept: 0.4 s
    of the loop's CPU a hello, each agent's after a daemon restart). The statements the
    daemon ran are explained on a connection of the test's own."""
    db = str(tmp_path / "d.db")
    st = open_store(db)
    job = {"workload": "wl", "size": "small", "reps": 1, "warmup": 0,
           "points": [{"cpus": [0], "threads": 1}]}
    for k in range(20):  # another agent's history
        st.save_job("b1", {**job, "job_id": f"job-b{k}"}, float(k), state="done")
    st.save_job("a1", {**job, "job_id": "job-a1"}, 30.0)  # sent; the agent was away since
    st.close()
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=db, auto_sweep=False,
                            agent_timeout_s=30))
    ran: list[str] = []
    d.store.db.set_trace_callback(ran.append)  # before the loop's thread uses it
    d.start_thread()
    try:
        a = Agent(d.endpoint)
        hello(a)
        assert a.expect("job")["body"]["job_id"] == "job-a1"
    finally:
        d.stop()
    explain = sqlite3.connect(db)
    try:
        read = {sql: [r[-1] for r in explain.execute("EXPLAIN QUERY PLAN " + sql)]
                for sql in ran if " FROM jobs" in sql and sql.lstrip().startswith("SELECT")}
    finally:
        explain.close()
    assert any("agent='a1'" in sql for sql in read), list(read)
    assert not [sql for sql, plan in read.items() if "SCAN jobs" in plan], read


def test_verdict_is_verified_only_within_the_interval():
    assert verdict(1.0, 1.0, 0.9, 1.1) == (
        "verified", "+0.0 % of the prediction, within its interval -10..+10 %")
    # up to twice and down to half the prediction an interval still confirms it
    assert verdict(1.9, 1.0, 0.5, 2.0) == (
        "verified", "+90.0 % of the prediction, within its interval -50..+100 %")
    state, note = verdict(1.25, 1.0, 0.9, 1.1)
    assert state == "off"
    assert note == "off by +25.0 % (measured 1.25 s, predicted 1 s, interval 0.9..1.1 s)"
    assert verdict(0.8, 1.0, None, None)[0] == "off"
    assert verdict(None, 1.0, 0.9, 1.1) == ("failed", "no verification run gave a time")


def test_a_time_within_an_interval_too_wide_to_confirm_anything_is_unconfirmed():
    """A push beyond the measured cores had the interval -11..+862 % and was "verified" at
    +266 %: the time was 3.7 times the prediction. An interval past twice or half the
    prediction holds the times of configurations a doubling of cores away: a time within it
    is "unconfirmed", saying why and what narrows it."""
    wide = ("+266.0 % of the prediction, within its interval -11..+862 %, too wide to "
            "confirm the prediction (it reaches past twice or half of it): measure the core "
            "counts around this configuration to narrow it")
    assert verdict(3.66, 1.0, 0.89, 9.62) == ("unconfirmed", wide)
    # wide on either side, and even where the time came out as predicted
    assert verdict(1.0, 1.0, 0.4, 1.5)[0] == "unconfirmed"
    assert verdict(1.0, 1.0, 0.9, 2.2)[0] == "unconfirmed"
    assert verdict(1.0, 1.0, -0.5, 1.5)[0] == "unconfirmed"
    # without a prediction, an interval wider than a factor 4 end to end
    assert verdict(2.0, None, 1.0, 4.0)[0] == "verified"
    assert verdict(2.0, None, 1.0, 4.5) == (
        "unconfirmed", "within its interval 1..4.5 s, too wide to confirm the prediction (it "
        "reaches past twice or half of it): measure the core counts around this "
        "configuration to narrow it")
    # outside it, however wide, a time is off
    assert verdict(12.0, 1.0, 0.89, 9.62)[0] == "off"


def test_a_time_within_a_too_wide_interval_is_stored_unconfirmed(daemon):
    """A configuration pushed by hand beyond the measured cores (recommend --apply
    --max-cores) came with the interval -11..+862 % and was stored "verified" at +266 %."""
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a, platform=PLATFORM, workloads=["wl"])
    rec = {"config_id": "cfg-w", "agent": "a1", "platform": "plat-test", "workload": "wl",
           "input": "small", "variant": "", "cores": 4, "cpus": [0, 1, 2, 3], "threads": 4,
           "freq_khz": None, "predicted_time_s": 1.0, "predicted_lower_s": 0.89,
           "predicted_upper_s": 9.62, "model": "amdahl", "state": "pushed"}
    save_recommendation(daemon, rec)
    a.send("applied", {"config_id": "cfg-w", "ok": True, "time_s": 3.66,
                       "records": [record(4, r, 3.66) for r in range(2)]})
    a.expect("ack")
    (r,) = query(op, "status")["recommendations"]
    assert (r["state"], r["verified_time_s"], r["off_pct"]) == ("unconfirmed", 3.66, None)
    assert r["error"].startswith("+266.0 % of the prediction, within its interval -11..+862 %, "
                                 "too wide to confirm the prediction"), r["error"]
    # its runs were within the interval: fitted, as a verified one's (an "off" one's are not)
    assert (4, None, 3.66) in daemon.store.group_runs(
        Group("plat-test", "wl", "small", ""))


def test_a_recommendation_within_its_interval_is_verified(daemon):
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a, platform=PLATFORM, workloads=["wl"])
    rec = {"config_id": "cfg-1", "agent": "a1", "platform": "plat-test", "workload": "wl",
           "input": "small", "variant": "", "cores": 2, "cpus": [0, 2], "threads": 2,
           "freq_khz": None, "predicted_time_s": 4.8, "predicted_lower_s": 4.6,
           "predicted_upper_s": 5.0, "model": "amdahl", "state": "pushed"}
    save_recommendation(daemon, rec)
    a.send("applied", {"config_id": "cfg-1", "ok": True, "time_s": 4.9,
                       "records": [record(2, r, 4.9) for r in range(2)]})
    a.expect("ack")
    (r,) = query(op, "status")["recommendations"]
    # within what it was verified, relative to the prediction
    assert (r["state"], r["verified_time_s"], r["off_pct"], r["error"]) == \
        ("verified", 4.9, None, "+2.1 % of the prediction, within its interval -4..+4 %")
    assert (r["predicted_lower_s"], r["predicted_upper_s"]) == (4.6, 5.0)
