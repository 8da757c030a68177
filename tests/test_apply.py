"""Pushed configs and jobs: validated against the board, refused with a reason, else run."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from opptune.agent.apply import Executor, Refused, Worker, check_point
from opptune.agent.outbox import Outbox
from opptune.agent.platform import discover
from opptune.agent.runner import Runner
from opptune.agent.workloads import Workloads
from opptune.shared import protocol as P
from opptune.shared.config import AgentConfig, CommandWorkload
from opptune.shared.records import RunRecord

PY = sys.executable


class CountingRunner(Runner):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.runs = 0

    def run_once(self, spec, rep=0, knob_fields=None):
        self.runs += 1
        return super().run_once(spec, rep, knob_fields)


@pytest.fixture
def env(tmp_path):
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(tmp_path), workloads=[
        CommandWorkload("w", [PY, "-c", "import json;print(json.dumps({'time_s': {size}}))"],
                        sizes=["0.5", "0.25"]),
        CommandWorkload("bad", [PY, "-c", "raise SystemExit(1)"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    runner = CountingRunner(wl, platform["id"])
    ob = Outbox(str(tmp_path))
    sent = []
    ex = Executor("a1", platform, wl, runner, ob, send=sent.append, state_dir=str(tmp_path))
    yield ex, sent, runner, platform
    ob.close()


def config_msg(platform, **kw):
    body = {"config_id": "c1", "workload": "w", "size": "0.5",
            "cpus": platform["cpus_online"][:1], "threads": 1, "freq_khz": None, "reps": 3}
    body.update(kw)
    return P.make("config", "daemon", body)


def applied(ex):
    """The ``applied`` messages the executor handed to its outbox (durable, resent until
    acked), oldest first."""
    msgs = [P.decode(data) for _, data in ex.outbox.pending()]
    return [m for m in msgs if m["type"] == "applied"]


def run_worker(ex, msgs):
    w = Worker(ex)
    w.start()
    for m in msgs:
        w.submit(m)
    w.stop(abort=False)
    w.join(timeout=30)
    assert not w.is_alive()


def test_config_more_cores_than_online_refused_and_nothing_runs(env):
    ex, sent, runner, platform = env
    n = len(platform["cpus_online"])
    run_worker(ex, [config_msg(platform, cpus=list(range(n + 1)), threads=n + 1)])
    (reply,) = applied(ex)
    assert reply["type"] == "applied" and reply["body"]["ok"] is False
    assert "not online" in reply["body"]["error"] and reply["body"]["config_id"] == "c1"
    assert runner.runs == 0


def test_config_unknown_workload_and_bad_size_refused(env):
    ex, sent, runner, platform = env
    run_worker(ex, [config_msg(platform, workload="cryptominer"),
                    config_msg(platform, size="huge")])
    assert [m["body"]["ok"] for m in applied(ex)] == [False, False]
    assert "unknown workload 'cryptominer'" in applied(ex)[0]["body"]["error"]
    assert "no size 'huge'" in applied(ex)[1]["body"]["error"]
    assert runner.runs == 0


def test_config_with_frequency_refused_without_cpufreq(env):
    ex, sent, runner, platform = env
    if platform["cpufreq"]["available"]:
        pytest.skip("this machine has writable cpufreq")
    run_worker(ex, [config_msg(platform, freq_khz=1200000)])
    assert applied(ex)[0]["body"]["ok"] is False
    assert "1200000 kHz cannot be set" in applied(ex)[0]["body"]["error"]
    assert runner.runs == 0


def test_config_applied_and_verified(env, tmp_path):
    ex, sent, runner, platform = env
    run_worker(ex, [config_msg(platform, size="0.25", reps=3)])
    (reply,) = applied(ex)
    b = reply["body"]
    assert reply["type"] == "applied" and b["ok"] is True and b["error"] is None
    assert b["time_s"] == 0.25 and len(b["records"]) == 3
    for d in b["records"]:
        RunRecord.from_dict(d)  # valid records
    assert runner.runs == 4  # one warmup + reps
    assert P.decode(P.encode(reply))["body"]["ok"]
    assert (tmp_path / "applied.json").exists()


def test_config_whose_runs_all_fail_reports_not_ok(env):
    ex, sent, runner, platform = env
    run_worker(ex, [config_msg(platform, workload="bad", size="default", reps=2)])
    b = applied(ex)[0]["body"]
    assert b["ok"] is False and "exit status 1" in b["error"] and len(b["records"]) == 2


def job_msg(platform, workload="w", cpus=None, reps=2, job_id="j1", npoints=2):
    cpus = cpus or platform["cpus_online"][:1]
    return P.make("job", "daemon", {"job_id": job_id, "workload": workload, "size": "0.5",
                                    "points": [{"cpus": cpus, "threads": i + 1}
                                               for i in range(npoints)],
                                    "reps": reps, "warmup": 1})


def test_bad_jobs_refused_with_error_and_nothing_runs(env):
    ex, sent, runner, platform = env
    n = len(platform["cpus_online"])
    run_worker(ex, [job_msg(platform, workload="nope"),
                    job_msg(platform, cpus=[max(platform["cpus_online"]) + 1], job_id="j2")])
    assert [m["type"] for m in sent] == ["error", "error"]
    assert all(m["body"]["code"] == "bad_job" for m in sent)
    assert "unknown workload 'nope'" in sent[0]["body"]["message"]
    assert "not online" in sent[1]["body"]["message"]
    assert runner.runs == 0 and ex.outbox.count() == 0 and ex.outbox.open_jobs() == []
    assert n >= 1


def test_job_results_stored_in_order_and_duplicate_job_ignored(env):
    ex, sent, runner, platform = env
    j = job_msg(platform)
    run_worker(ex, [j, j])
    msgs = [P.decode(d) for _, d in ex.outbox.pending()]
    assert [m["body"]["seq"] for m in msgs] == [0, 1, 2, 3]
    recs = [RunRecord.from_dict(m["body"]["record"]) for m in msgs]
    assert all(m["body"]["of"] == 4 for m in msgs) and all(r.ok for r in recs)
    assert [r.threads for r in recs] == [1, 1, 2, 2]
    assert runner.runs == 6  # 2 points x (1 warmup + 2 reps), once
    assert ex.outbox.job("j1")["done"] and sent == []


def test_job_resumes_from_progress(env):
    ex, sent, runner, platform = env
    j = job_msg(platform, reps=3)
    ex.outbox.save_job("j1", j["body"])
    # a previous agent stored seq 0..3 (point 0 done, point 1 rep 0) before it was killed
    for seq in range(4):
        rec = RunRecord("p", "w", "0.5", 1, platform["cpus_online"][:1], 1, seq % 3,
                        time_s=0.5)
        ex.outbox.add_result("j1", seq, P.make("result", "a1", {
            "job_id": "j1", "seq": seq, "of": 6, "record": rec.to_dict()}))
    w = Worker(ex)
    w.start()
    assert w.resume() == 1
    w.stop(abort=False)
    w.join(timeout=30)
    seqs = [P.decode(d)["body"]["seq"] for _, d in ex.outbox.pending()]
    assert seqs == [0, 1, 2, 3, 4, 5]
    assert runner.runs == 1 + 2  # one warmup, then reps 1 and 2 of point 1 only
    assert ex.outbox.job("j1")["done"]


def test_check_point_frequency_against_offered(env):
    ex, sent, runner, platform = env
    fake = dict(platform, cpufreq={"available": True, "frequencies_khz": {
        "policy0": [600000, 1000000, 1400000]}},
        policies=[{"name": "policy0", "related_cpus": platform["cpus_online"]}])
    cpus = platform["cpus_online"]
    check_point(fake, ex.workloads, "w", "0.5", cpus, 2, 1000000)
    with pytest.raises(Refused, match="not offered"):
        check_point(fake, ex.workloads, "w", "0.5", cpus, 2, 1100000)
    with pytest.raises(Refused, match="threads"):
        check_point(fake, ex.workloads, "w", "0.5", cpus, 0, None)


def test_a_job_the_agent_cannot_run_is_reported_with_its_id(env, monkeypatch):
    ex, sent, runner, platform = env

    def broken(*a, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(runner, "run_point", broken)
    run_worker(ex, [job_msg(platform, job_id="job-x")])
    (err,) = sent
    assert err["type"] == "error" and err["body"]["code"] == "job_failed"
    assert err["body"]["ref"] == "job-x"
    assert err["body"]["message"] == "the agent could not run the job: OSError: disk full"


def test_a_job_that_failed_is_not_resumed_at_the_next_start(env, monkeypatch):
    """Walking a board: a job whose run raised was reported failed to the daemon but stayed
    unfinished in the outbox; the agent's next start ran the rest of it, and the daemon's
    status read 'failed' with 8 of 8 runs received."""
    ex, sent, runner, platform = env
    monkeypatch.setattr(runner, "run_point", lambda *a, **kw: (_ for _ in ()).throw(
        RuntimeError("a fault")))
    run_worker(ex, [job_msg(platform, job_id="job-x")])
    assert [m["body"]["code"] for m in sent] == ["job_failed"]
    assert ex.outbox.job("job-x")["done"]
    monkeypatch.undo()
    assert Worker(ex).resume() == 0  # the next start finds nothing of it to run


def test_config_is_saved_and_a_repeated_push_runs_once(env):
    ex, sent, runner, platform = env
    msg = config_msg(platform)
    run_worker(ex, [msg, msg])
    (reply,) = applied(ex)
    assert reply["body"]["ok"] is True
    assert runner.runs == 1 + 3  # warmup + reps, once
    assert ex.outbox.config_done("c1") is True and ex.outbox.open_configs() == []


def test_config_whose_run_raises_is_reported_not_left_pending(env, monkeypatch):
    ex, sent, runner, platform = env

    def broken(*a, **kw):
        raise RuntimeError("meter exploded")

    monkeypatch.setattr(runner, "run_point", broken)
    run_worker(ex, [config_msg(platform)])
    (reply,) = applied(ex)
    assert reply["body"]["ok"] is False and "applying failed: meter exploded" in \
        reply["body"]["error"]
    assert ex.outbox.config_done("c1") is True


def test_saved_config_resumes_after_restart(env):
    ex, sent, runner, platform = env
    msg = config_msg(platform)
    assert ex.outbox.save_config("c1", msg)  # received, then the agent died
    w = Worker(ex)
    assert w.resume() == 1
    w.start()
    w.stop(abort=False)
    w.join(timeout=30)
    (reply,) = applied(ex)
    assert reply["body"]["ok"] is True and runner.runs == 1 + 3


@pytest.mark.parametrize("stop_after", [2, 0])
def test_a_job_stops_after_points_in_a_row_timed_out(tmp_path, stop_after):
    """A program that hangs waited run_timeout_s at every point of the sweep (16 timeouts
    for a 16-point one). After stop_after_timeouts points in a row timed out, the job's
    other runs are recorded not run with the reason; 0 runs every point as before."""
    from opptune.agent.apply import JobLimits
    starts = tmp_path / "starts"
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(tmp_path),
                      stop_after_timeouts=stop_after, workloads=[CommandWorkload(
                          "hangs", ["sh", "-c", f"echo {{threads}} >> {starts}; test "
                                    "{threads} -lt 2 && echo '{\"time_s\": 0.01}' && exit 0; "
                                    "exec sleep 30"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    ob = Outbox(str(tmp_path))
    ex = Executor("a1", platform, wl, Runner(wl, platform["id"], timeout_s=1.0), ob,
                  send=[].append, state_dir=str(tmp_path), limits=JobLimits.of(cfg))
    cpus = platform["cpus_online"][:1]
    run_worker(ex, [P.make("job", "daemon", {
        "job_id": "j1", "workload": "hangs", "size": "default", "reps": 2, "warmup": 1,
        "points": [{"cpus": cpus, "threads": t} for t in range(1, 6)]})])
    recs = [RunRecord.from_dict(P.decode(d)["body"]["record"]) for _, d in ob.pending()]
    ob.close()
    assert [r.threads for r in recs] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert [r.ok for r in recs[:2]] == [True, True]
    timed_out = ["timed out after 1 s", "not run: warmup 0 of this point timed out after 1 s"]
    if stop_after:
        # point 0 ran (1 warmup + 2 reps), points 1 and 2 hung in their warmup
        assert starts.read_text().split() == ["1", "1", "1", "2", "3"]
        assert [r.error for r in recs[2:6]] == timed_out * 2
        assert [r.error for r in recs[6:]] == [
            "not run: the job stopped after 2 points in a row timed out (points 1, 2 of 5; "
            "stop_after_timeouts = 2 in the agent's configuration): 2 of 5 points not run"] * 4
        # the same for the daemon to keep, with the workload's definition as the hello said
        (hangs,) = wl.describe()
        assert [r.extra for r in recs[6:]] == [{"stopped": {
            "after_timeouts": 2, "points_not_run": 2, "points": 5,
            "definition": hangs["definition"]}, "program": hangs["program"]}] * 4
        assert all("stopped" not in r.extra for r in recs[:6])
    else:
        assert starts.read_text().split() == ["1", "1", "1", "2", "3", "4", "5"]
        assert [r.error for r in recs[2:]] == timed_out * 4


def test_a_workloads_definition_changes_with_what_runs_and_its_timeout():
    """The digest the hello gives each workload (and a stop carries) changes with its
    command, environment, sizes or the agent's run_timeout_s, not with the rest of the
    agent's configuration; a kernel's with the virtual board."""
    def definitions(**kw):
        cmd = kw.pop("command", ["prog", "{threads}"])
        env = kw.pop("env", {})
        cfg = AgentConfig(agent_id="a1", bench_kernels=["k"], workloads=[
            CommandWorkload("c", cmd, env=env)], **kw)
        return {w["name"]: w["definition"] for w in Workloads(cfg, catalogue={
            "k": type("K", (), {"sizes": {"small": 1}})()}).describe()}

    base = definitions()
    assert len(base["c"]) == 16 and base["c"] != base["k"]
    assert definitions(heartbeat_s=9.0, stop_after_timeouts=5) == base
    assert definitions(command=["prog", "--fixed", "{threads}"])["c"] != base["c"]
    assert definitions(env={"OMP_PROC_BIND": "true"})["c"] != base["c"]
    longer = definitions(run_timeout_s=1200.0)
    assert longer["c"] != base["c"] and longer["k"] != base["k"]
    assert definitions(command=["prog", "--fixed", "{threads}"])["k"] == base["k"]


def test_a_workloads_program_changes_with_what_runs_only():
    """The second digest of the hello, ``program``, says what a workload's runs measured: it
    changes with the command or environment (the daemon then leaves the runs from before out),
    not with run_timeout_s, the sizes or the agent's version, which change the definition
    only (a longer timeout does not make the runs already measured another program's)."""
    import opptune.agent.workloads as wl

    def programs(**kw):
        cmd = kw.pop("command", ["prog", "{threads}"])
        env = kw.pop("env", {})
        sizes = kw.pop("sizes", [])
        cfg = AgentConfig(agent_id="a1", bench_kernels=["k"], workloads=[
            CommandWorkload("c", cmd, env=env, sizes=sizes)], **kw)
        return {w["name"]: (w["program"], w["definition"]) for w in Workloads(
            cfg, catalogue={"k": type("K", (), {"sizes": {"small": 1}})()}).describe()}

    base = programs()
    assert len(base["c"][0]) == 16 and base["c"][0] not in (base["k"][0], base["c"][1])
    for same in (programs(run_timeout_s=1200.0), programs(sizes=["1", "2"])):
        assert same["c"][0] == base["c"][0] and same["c"][1] != base["c"][1]
    assert programs(command=["prog", "--fixed", "{threads}"])["c"][0] != base["c"][0]
    assert programs(env={"OMP_PROC_BIND": "true"})["c"][0] != base["c"][0]
    old = wl.__version__
    try:
        wl.__version__ = old + ".1"
        upgraded = programs()
    finally:
        wl.__version__ = old
    assert upgraded["k"][0] == base["k"][0] and upgraded["k"][1] != base["k"][1]


class _Killed(BaseException):
    """The agent killed (SIGKILL) where it is raised: nothing after it runs."""


def test_a_stop_survives_a_restart_while_its_not_run_lines_are_written(tmp_path):
    """The agent killed after the first of the 'not run' lines of a stopped job was stored
    started again without memory of the stop (its count of points timed out in a row began
    at 0) and ran the points left, each waiting run_timeout_s. The count is kept in the
    state directory: after the restart the stop's lines are written on from where they
    stopped, with the same text, each seq once, and nothing more is started."""
    from opptune.agent.apply import JobLimits
    starts = tmp_path / "starts"
    cfg = AgentConfig(agent_id="a1", bench_kernels=[], state_dir=str(tmp_path),
                      stop_after_timeouts=2, workloads=[CommandWorkload(
                          "hangs", ["sh", "-c", f"echo {{threads}} >> {starts}; test "
                                    "{threads} -lt 2 && echo '{\"time_s\": 0.01}' && exit 0; "
                                    "exec sleep 30"])])
    platform = discover(cfg)
    wl = Workloads(cfg, catalogue={})
    cpus = platform["cpus_online"][:1]
    body = {"job_id": "j1", "workload": "hangs", "size": "default", "reps": 2, "warmup": 1,
            "points": [{"cpus": cpus, "threads": t} for t in range(1, 6)]}

    def executor(ob):
        return Executor("a1", platform, wl, Runner(wl, platform["id"], timeout_s=1.0), ob,
                        send=[].append, state_dir=str(tmp_path), limits=JobLimits.of(cfg))

    ob = Outbox(str(tmp_path))
    assert ob.save_job("j1", body)
    stored = ob.add_result

    def dies_at_the_second_stop_line(job_id, seq, msg):
        if "the job stopped after" in str(msg["body"]["record"].get("error")) and seq == 7:
            raise _Killed
        return stored(job_id, seq, msg)
    ob.add_result = dies_at_the_second_stop_line
    with pytest.raises(_Killed):
        executor(ob).run_job("j1")
    ob.close()
    assert starts.read_text().split() == ["1", "1", "1", "2", "3"]

    ob = Outbox(str(tmp_path))  # the agent's next start
    assert ob.job("j1")["next_seq"] == 7
    executor(ob).run_job("j1")
    recs = [P.decode(d)["body"] for _, d in ob.pending()]
    assert ob.job("j1")["done"]
    ob.close()
    assert starts.read_text().split() == ["1", "1", "1", "2", "3"]  # nothing run again
    assert [r["seq"] for r in recs] == list(range(10))
    assert [r["record"]["error"] for r in recs[6:]] == [
        "not run: the job stopped after 2 points in a row timed out (points 1, 2 of 5; "
        "stop_after_timeouts = 2 in the agent's configuration): 2 of 5 points not run"] * 4
    assert not os.path.exists(tmp_path / "timed-out-points.json")


def test_a_cancelled_job_is_dropped_recorded_not_run_and_never_resumed(env):
    """A cancel for a job only queued here: the job runs nothing, each of its runs is
    recorded not run (marked cancelled), and a restart does not resume it; a cancel for a job
    the agent never had, or one that ended, does nothing."""
    ex, sent, runner, platform = env
    j = job_msg(platform, reps=2)
    ex.outbox.save_job("j1", j["body"])
    cancel = P.make("cancel", "daemon", {"job_id": "j1"})
    assert ex.cancel("nope") == "not held by this agent: nothing to stop"
    w = Worker(ex)
    w.submit(cancel)  # before the worker takes it up: it stays cancelled on disk
    assert ex.outbox.job("j1")["cancelled"] and not ex.outbox.job("j1")["done"]
    w.start()
    assert w.resume() == 1  # its end is still to be recorded
    w.stop(abort=False)
    w.join(timeout=30)
    assert runner.runs == 0
    msgs = [P.decode(d)["body"] for _, d in ex.outbox.pending()]
    assert [m["seq"] for m in msgs] == [0, 1, 2, 3]
    recs = [RunRecord.from_dict(m["record"]) for m in msgs]
    assert {r.error for r in recs} == {"not run: the job was cancelled by the daemon before "
                                       "run 1 of 4"}
    assert all(not r.ok and r.extra["stopped"] == {"cancelled": True, "runs_not_run": 4,
                                                   "points": 2, "points_not_run": 2}
               for r in recs)
    assert ex.outbox.job("j1")["done"] and ex.outbox.open_jobs() == []
    assert ex.cancel("j1") == "ended before" and sent == []
