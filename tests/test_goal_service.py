"""The daemon's ``recommend`` and ``tune`` queries against a test DEALER agent (the daemon loop
in a thread, real sockets): a tune session sends one-point jobs until the Sampler stops, then
pushes the recommendation and follows its verification; goals needing power on a board
without a meter are refused with the reason."""

import time

import pytest
import zmq
from rich.console import Console

from opptune.daemon.goal_cli import print_verdict
from opptune.daemon.registry import board_name
from opptune.daemon.service import Daemon
from opptune.daemon.store import open_store
from opptune.shared import protocol as P
from opptune.shared.config import DaemonConfig, SweepDefaults
from opptune.shared.records import RunRecord
from procs import wait_until

NO_METER = {"id": "plat-q", "sweep_order": [0, 1, 2, 3], "cpus_online": [0, 1, 2, 3],
            "energy": {"available": False, "reason": "no RAPL, hwmon or energy model"}}
METER = {**NO_METER, "id": "plat-m",
         "energy": {"available": True, "reason": None, "source": "rapl:package-0"}}


@pytest.fixture
def daemon(tmp_path):
    cfg = DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                       auto_sweep=False, agent_timeout_s=30,
                       sweep=SweepDefaults(size="small", reps=1, warmup=0))
    d = Daemon(cfg)
    d.start_thread()
    yield d
    d.stop()


class Agent:
    def __init__(self, endpoint, platform):
        self.platform = platform
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, b"q1")
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.send("hello", {"platform": platform, "workloads": ["wl"], "agent_version": "t"})

    def send(self, msg_type, body):
        msg = P.make(msg_type, "q1", body)
        self.sock.send(P.encode(msg))
        return msg["id"]

    def expect(self, msg_type, timeout_s=20.0, ref=None):
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                raise AssertionError(f"no {msg_type} message within {timeout_s} s")
            msg = P.decode(self.sock.recv())
            types = (msg_type,) if isinstance(msg_type, str) else msg_type
            if msg["type"] in (*types, "error") and (ref is None or
                                                      msg["body"].get("ref") == ref):
                return msg

    def query(self, what, args):
        return self.expect("reply", ref=self.send("query", {"what": what, "args": args}))

    def issued_job(self):
        """A job the daemon issued to this agent (only those take results)."""
        reply = self.query("sweep", {"agent": "q1", "workloads": ["wl"]})
        return reply["body"]["data"]["jobs"][0]["job_id"]

    def close(self):
        self.sock.close(0)


def record(platform, cores, freq_khz=None, energy=True, size="small"):
    t = 8.0 * (0.2 + 0.8 / cores)
    power = 2.0 + 1.0 * cores  # watts: static + per core
    return RunRecord(platform=platform["id"], workload="wl", input=size, cores=cores,
                     cpus=list(range(cores)), threads=cores, rep=0, time_s=t,
                     energy_j=power * t if energy else None,
                     energy_source="rapl:package-0" if energy else None).to_dict()


def test_goals_needing_power_are_refused_without_a_meter(daemon):
    a = Agent(daemon.endpoint, NO_METER)
    try:
        err = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
        assert err["type"] == "error" and err["body"]["code"] == "no_power"
        assert "has no energy meter (no RAPL, hwmon or energy model)" in err["body"]["message"]
        err = a.query("recommend", {"agent": "q1", "workload": "wl"})
        assert err["body"]["code"] == "no_measurements"
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3, 4)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(NO_METER, cores, energy=False)})
            a.expect("ack")
        rec = a.query("recommend", {"agent": "q1", "workload": "wl"})["body"]["data"]
        assert rec["cores"] == 4 and rec["energy"] == "none"
        assert rec["energy_j"] == {"value": None, "lower": None, "upper": None}
        err = a.query("recommend", {"agent": "q1", "workload": "wl", "objective": "edp"})
        assert err["body"]["code"] == "no_power"
        assert "no run of this workload has any" in err["body"]["message"]
        err = a.query("recommend", {"agent": "q1", "workload": "wl", "deadline": "soon"})
        assert err["body"]["code"] == "bad_args" and "'soon'" in err["body"]["message"]
    finally:
        a.close()


def test_goals_needing_power_are_refused_when_the_meter_saw_no_run(daemon):
    """Walking a virtual rpi4 (a meter: the kernel's energy model) with a real command: none
    of its runs carried energy. tune --objective energy measured 8 configurations, then failed
    for want of power, and recommend said 'the board has no energy meter'."""
    a = Agent(daemon.endpoint, METER)
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3, 4)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(METER, cores, energy=False)})
            a.expect("ack")
        err = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
        assert err["type"] == "error" and err["body"]["code"] == "no_power", err
        assert ("none of the 4 runs of wl (small) on board plat-m has any: the board's meter "
                "(rapl:package-0) counted none of them (a real command on a virtual board, or "
                "runs shorter than its resolution); use --objective time"
                in err["body"]["message"])
        err = a.query("recommend", {"agent": "q1", "workload": "wl", "objective": "edp"})
        assert err["body"]["code"] == "no_power"
        assert "the board has no energy meter" not in err["body"]["message"]
        assert "the board's meter (rapl:package-0) counted none of them" in \
            err["body"]["message"]
    finally:
        a.close()


def test_recommend_without_enough_clean_runs_says_which_were_marked_and_what_to_do(daemon):
    """Walking this 2-cpu machine at load 10: 15 of 18 runs marked for interference, the clean
    ones all at 1 core. 'opptune recommend' said only 'no model to recommend from: board: no
    time family fits 1 measurement(s)' (exit 1), where the status names the marked runs and
    tune says what to do (walk31)."""
    why = "interference: 89 % of cpus 0-1; pid 8306 (python) used 35 % of cpu 0"
    a = Agent(daemon.endpoint, NO_METER)
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 2, 2)):
            r = record(NO_METER, cores, energy=False)
            if cores == 2:
                r["marked"] = why
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4, "record": r})
            a.expect("ack")
        err = a.query("recommend", {"agent": "q1", "workload": "wl"})
        assert err["body"]["code"] == "no_model", err
        assert err["body"]["message"].endswith(
            f"; 3 runs marked for interference left out ({why}): the daemon measures those "
            "points again when the board is quiet ('opptune status' follows them); or "
            "--accept-load for a recommendation that holds for the board under that load"), err
        rec = a.query("recommend", {"agent": "q1", "workload": "wl", "accept_load": True})
        assert rec["body"]["data"]["cores"] == 2, rec
        assert rec["body"]["data"]["scaling"] is None  # it scales: nothing to say
    finally:
        a.close()


def test_recommend_for_a_workload_whose_runs_all_failed_says_why(daemon):
    """Walking this machine with a program that failed: 'opptune recommend' said only 'no
    successful runs to recommend from', not that every run failed nor why (walk32)."""
    a = Agent(daemon.endpoint, NO_METER)
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 2)):
            r = record(NO_METER, cores, energy=False)
            r.update(ok=False, time_s=None, error="workload failed with exit status 3: oops")
            a.send("result", {"job_id": job_id, "seq": seq, "of": 3, "record": r})
            a.expect("ack")
        err = a.query("recommend", {"agent": "q1", "workload": "wl"})
        assert err["body"]["code"] == "no_model", err
        assert err["body"]["message"].endswith(
            "no run that a fit may use to recommend from; its 3 runs on 'q1' all failed (workload "
            "failed with exit status 3: oops): 'opptune status --agent q1' gives each job's "
            "reason"), err
    finally:
        a.close()


def test_recommend_says_when_a_program_does_not_use_the_cores_it_is_given(daemon):
    """Walking this machine with a program that ignores OMP_NUM_THREADS (user time 0.9 s at 1
    and 2 cores): recommend chose 1 core and never said the program does not scale, which
    for a command is most often a thread count it does not read (walk32)."""
    a = Agent(daemon.endpoint, NO_METER)
    try:
        job_id = a.issued_job()
        for seq, (cores, t) in enumerate(((1, 2.0), (1, 2.02), (2, 1.97), (2, 2.01),
                                          (4, 1.99), (4, 2.0))):
            r = record(NO_METER, cores, energy=False)
            r["time_s"] = t
            a.send("result", {"job_id": job_id, "seq": seq, "of": 6, "record": r})
            a.expect("ack")
        rec = a.query("recommend", {"agent": "q1", "workload": "wl"})["body"]["data"]
        assert rec["scaling"] == (
            "its runs at 4 cores were only x1.01 as fast as at 1: the program does not run "
            "faster with more cores; a command gets its thread count as {threads} in its "
            "arguments or in its threads_env variable (OMP_NUM_THREADS by default): check "
            "that it reads one")
        from opptune.daemon.goal_cli import recommendation_notes
        assert [t.plain for t in recommendation_notes(rec)][-1] == f"scaling: {rec['scaling']}"
    finally:
        a.close()


def test_flat_scaling_takes_the_widest_span_that_does_not_scale():
    from opptune.daemon.goal_recommend import flat_scaling
    scales = [(1, None, 4.0), (2, None, 2.1), (4, None, 1.1)]
    assert flat_scaling({"": scales}) is None
    # 3 cores is not twice 2: no span; a clock of its own is a span of its own
    assert flat_scaling({"": [(2, 1000.0, 1.0), (3, 1000.0, 1.0)]}) is None
    flat = [(1, 800.0, 3.0), (2, 800.0, 2.9), (4, 800.0, 2.95)]
    assert flat_scaling({"": scales + flat}) == (1, 4, pytest.approx(3.0 / 2.95))


def test_tune_measures_one_configuration_per_job_then_pushes_and_verifies(daemon):
    a = Agent(daemon.endpoint, METER)
    try:
        start = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
        s = start["body"]["data"]
        assert s["state"] == "measuring" and s["grid"] == 4 and s["budget"] is None
        seen = []
        while True:
            msg = a.expect(("job", "config"))  # another one-point job, or the result
            if msg["type"] == "config":
                break
            job = msg["body"]
            (point,) = job["points"]
            assert job["reps"] == 1 and point["freq_khz"] is None
            seen.append(len(point["cpus"]))
            a.send("result", {"job_id": job["job_id"], "seq": 0, "of": 1,
                              "record": record(METER, len(point["cpus"]))})
        cfg = msg["body"]
        # energy = (2 + k) * 8 * (0.2 + 0.8 / k): 24, 19.2, 18.7, 19.2 J: lowest at 3 cores
        assert cfg["cpus"] == [0, 1, 2] and len(seen) == len(set(seen)) <= 4
        st = a.query("tune_status", {"tune_id": s["tune_id"]})["body"]["data"]
        assert st["state"] == "verifying" and st["config_id"] == cfg["config_id"]
        assert st["recommendation"]["energy"] == "measured"
        assert [x["cores"] for x in st["steps"]] == seen
        a.send("applied", {"config_id": cfg["config_id"], "ok": True,
                           "records": [record(METER, 3)]})
        deadline = time.monotonic() + 10
        while st["state"] == "verifying" and time.monotonic() < deadline:
            st = a.query("tune_status", {"tune_id": s["tune_id"]})["body"]["data"]
        assert st["state"] == "done"
        assert st["verification"]["state"] in ("verified", "unconfirmed", "off")
        assert st["reason"].startswith("applied and ")
        # finished: out of the daemon's memory, its view read back from the store
        assert s["tune_id"] not in daemon.tuning.sessions
        err = a.query("tune_status", {"tune_id": "tune-nothing"})
        assert err["body"]["code"] == "bad_args"
    finally:
        a.close()


def test_a_tune_verified_within_a_too_wide_interval_ends_unconfirmed(daemon):
    """A tune's push verified within an interval past twice its prediction ended "done:
    applied and verified": it now says unconfirmed, and why, in the session and its verdict
    lines. (The interval is widened in the store, as a push beyond the measured cores
    carries it: this fit of four exact points gives a narrow one.)"""
    a = Agent(daemon.endpoint, METER)
    try:
        s = a.query("tune", {"agent": "q1", "workload": "wl"})["body"]["data"]
        while True:
            msg = a.expect(("job", "config"))
            if msg["type"] == "config":
                break
            (point,) = msg["body"]["points"]
            a.send("result", {"job_id": msg["body"]["job_id"], "seq": 0, "of": 1,
                              "record": record(METER, len(point["cpus"]))})
        cfg = msg["body"]
        # the daemon's thread stores the recommendation right after sending it
        rec = wait_until(lambda: daemon.store.recommendation(cfg["config_id"]),
                         "the pushed recommendation stored", 10)
        p = rec["predicted_time_s"]
        # through a connection of its own: one SQLite connection takes one transaction at a
        # time, and the daemon's thread writes on its own meanwhile (its heartbeat row)
        st = open_store(daemon.config.database)
        try:
            st.save_recommendation({**rec, "predicted_lower_s": 0.9 * p,
                                    "predicted_upper_s": 9.6 * p}, time.time())
        finally:
            st.close()
        r = record(METER, len(cfg["cpus"]))
        r["time_s"] = 3 * p
        a.send("applied", {"config_id": cfg["config_id"], "ok": True, "records": [r]})
        deadline = time.monotonic() + 10
        st = s
        while st["state"] in ("measuring", "verifying") and time.monotonic() < deadline:
            st = a.query("tune_status", {"tune_id": s["tune_id"]})["body"]["data"]
        v = st["verification"]
        assert (st["state"], v["state"]) == ("done", "unconfirmed"), st
        assert v["error"] == ("+200.0 % of the prediction, within its interval -10..+860 %, "
                              "too wide to confirm the prediction (it reaches past twice or "
                              "half of it): measure the core counts around this "
                              "configuration to narrow it")
        assert st["reason"] == f"applied and unconfirmed ({v['error']})"
        con = Console(record=True, width=400)
        print_verdict(st, con)
        lines = con.export_text().splitlines()
        assert lines[-2].startswith("verification: unconfirmed, measured ") and \
            lines[-2].endswith(f"({v['error']})"), lines
        assert lines[-1] == "done: applied and unconfirmed"
    finally:
        a.close()


def test_tune_without_a_size_goes_on_from_the_one_measured(daemon):
    """tune without --size started a group of the daemon's [sweep] size ("small") beside the
    one the workload was measured at ("large", what recommend takes), measuring again what
    was there; it now takes the one measured size, and the stored runs count."""
    a = Agent(daemon.endpoint, METER)
    try:
        reply = a.query("sweep", {"agent": "q1", "workloads": ["wl"], "size": "large"})
        job_id = reply["body"]["data"]["jobs"][0]["job_id"]
        for seq, cores in enumerate((1, 2, 3, 4)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(METER, cores, size="large")})
            a.expect("ack")
        s = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
        s = s["body"]["data"]
        assert s["size"] == "large", s
        # every configuration of the grid is measured already: recommended without a job.
        # Read from the session, not the socket: the daemon's own push after the sweep's fit
        # (4 cores, time) reaches this agent too, before or after the tune's config
        deadline = time.monotonic() + 20
        st = s
        while not st.get("config_id"):
            assert time.monotonic() < deadline, st
            st = a.query("tune_status", {"tune_id": s["tune_id"]})["body"]["data"]
        assert st["steps"] == [] and st["size"] == "large", st
        assert st["recommendation"]["cpus"] == [0, 1, 2], st["recommendation"]
        # the verdict said "measured 0 of 4 configurations ... (every configuration is
        # measured)": the stop reason counted the sweep's runs, the count did not
        (seg,) = st["segments"]
        assert (st["measured"], st["measured_before"], seg["measured_before"]) == (0, 4, 4)
        assert seg["stop_reason"] == "every configuration is measured"
        con = Console(record=True, width=300)
        print_verdict(st, con)
        head = con.export_text().splitlines()[0]
        assert ": measured 0 of 4 configurations (4 more measured before this session) in " \
            in head and head.endswith("(board: 0 measured + 4 before of 4 (every configuration "
                                      "is measured))"), head
    finally:
        a.close()


def test_recommend_applied_to_a_running_process_sends_the_target(daemon):
    a = Agent(daemon.endpoint, METER)
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3, 4)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(METER, cores)})
            a.expect("ack")
        target = {"kind": "pid", "pid": 4711}
        ref = a.send("query", {"what": "recommend", "args": {
            "agent": "q1", "workload": "wl", "objective": "energy", "apply": True,
            "target": target}})
        # The job's own recommendation and the applied one are both configs; they and the
        # reply may come in any order, so every config is kept, not only the first.
        configs, reply = [], None
        while reply is None or not any(
                c["config_id"] == reply["data"]["applied"]["config_id"] for c in configs):
            msg = a.expect(("config", "reply"))
            if msg["type"] == "config":
                configs.append(msg["body"])
            elif msg["body"].get("ref") == ref:
                reply = msg["body"]
        data = reply["data"]
        configs = [c for c in configs if c["config_id"] == data["applied"]["config_id"]]
        assert configs[-1]["target"] == target and configs[-1]["cpus"] == data["cpus"]
        err = a.query("recommend", {"agent": "q1", "workload": "wl", "apply": True,
                                    "target": "pid 4711"})
        assert err["body"]["code"] == "bad_args" and "target" in err["body"]["message"]
    finally:
        a.close()


@pytest.fixture
def held_fit(monkeypatch):
    """(fitting, release): a recommendation's fit sets ``fitting`` and waits for ``release``."""
    import threading

    from opptune.daemon import goal_query

    fitting, release = threading.Event(), threading.Event()
    real = goal_query.recommend_goal

    def held(*args, **kw):
        fitting.set()
        assert release.wait(30), "the test never released the fit"
        return real(*args, **kw)

    monkeypatch.setattr(goal_query, "recommend_goal", held)
    yield fitting, release
    release.set()


def test_a_recommendation_being_fitted_holds_up_no_acks(daemon, held_fit):
    """The fit of a ``recommend`` runs off the loop: while it is held, results are still
    stored and acked; the reply comes when it is done."""
    fitting, release = held_fit
    a = Agent(daemon.endpoint, NO_METER)
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(NO_METER, cores, energy=False)})
            a.expect("ack")
        ref = a.send("query", {"what": "recommend", "args": {"agent": "q1", "workload": "wl"}})
        assert fitting.wait(20)
        a.send("result", {"job_id": job_id, "seq": 3, "of": 4,
                          "record": record(NO_METER, 4, energy=False)})
        ack = a.expect("ack")  # while the fit is still held
        assert ack["type"] == "ack" and not release.is_set()
        release.set()
        reply = a.expect("reply", ref=ref)
        assert reply["type"] == "reply" and reply["body"]["data"]["workload"] == "wl"
        assert reply["body"]["data"]["cores"] in (1, 2, 3, 4)
        err = a.query("recommend", {"agent": "q1", "workload": "nothing"})
        assert err["type"] == "error" and err["body"]["code"] in ("unknown_workload",
                                                                  "no_measurements")
    finally:
        release.set()
        a.close()


def test_a_tune_sessions_recommendation_is_fitted_off_the_loop(daemon, held_fit):
    """The session's final fit ran inside the daemon's loop (3.7 s on PostgreSQL at load 14:
    long enough for an agent to take the daemon for gone and fail over). While it is held,
    the daemon answers a heartbeat and tune_status; released, the configuration is pushed and
    the session ends."""
    fitting, release = held_fit
    a = Agent(daemon.endpoint, METER)
    try:
        tune_id = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy",
                                   "budget": 2})["body"]["data"]["tune_id"]
        for _ in range(2):  # the budget: then the recommendation is fitted
            job = a.expect("job")["body"]
            (point,) = job["points"]
            a.send("result", {"job_id": job["job_id"], "seq": 0, "of": 1,
                              "record": record(METER, len(point["cpus"]))})
        assert fitting.wait(20), "the recommendation was never fitted"
        a.send("heartbeat", {})
        assert a.expect("heartbeat")["type"] == "heartbeat"
        st = a.query("tune_status", {"tune_id": tune_id})
        assert st["type"] == "reply" and not release.is_set()
        st = st["body"]["data"]
        assert st["state"] == "measuring" and st["measured"] == 2 and st["config_id"] is None
        assert all(g["stop_reason"] for g in st["segments"]), st["segments"]
        release.set()
        cfg = a.expect("config")
        assert cfg["type"] == "config", cfg
        a.send("applied", {"config_id": cfg["body"]["config_id"], "ok": True,
                           "records": [record(METER, len(cfg["body"]["cpus"]))]})
        deadline = time.monotonic() + 10
        while st["state"] in ("measuring", "verifying") and time.monotonic() < deadline:
            st = a.query("tune_status", {"tune_id": tune_id})["body"]["data"]
        assert st["state"] == "done", st
        assert st["config_id"] == cfg["body"]["config_id"]
        assert st["recommendation"]["cpus"] == cfg["body"]["cpus"]
    finally:
        release.set()
        a.close()


def _tune_marked(daemon, a, args):
    """Run a tune session whose every run is marked (a neighbour on the board) to its end,
    answering its jobs and its configuration's verification; its last view."""
    why = "interference: 48 % of cpus 0-1; pid 4711 (sh) used 96 % of cpu 1"
    tune_id = a.query("tune", {"agent": "q1", "workload": "wl", "budget": 2, **args}
                      )["body"]["data"]["tune_id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s = daemon.tuning.sessions.get(tune_id)
        if s is None or s.state in ("done", "failed"):
            break
        if not a.sock.poll(100):
            continue
        msg = P.decode(a.sock.recv())
        if msg["type"] == "job":
            (point,) = msg["body"]["points"]
            r = record(NO_METER, len(point["cpus"]), energy=False)
            r["marked"] = why
            a.send("result", {"job_id": msg["body"]["job_id"], "seq": 0, "of": 1, "record": r})
        elif msg["type"] == "config":
            r = record(NO_METER, len(msg["body"]["cpus"]), energy=False)
            r["marked"] = why
            a.send("applied", {"config_id": msg["body"]["config_id"], "ok": True,
                               "records": [r]})
    return a.query("tune_status", {"tune_id": tune_id})["body"]["data"]


def test_tune_leaves_marked_runs_out_unless_the_load_is_accepted(daemon):
    """``opptune tune --accept-load`` (args.accept_load): the marked runs count and the result
    says it holds under that load; by default a session whose runs were all marked
    recommends nothing and says why."""
    from rich.console import Console

    from opptune.daemon.cli import build_parser
    from opptune.daemon.goal_cli import goal_args, print_verdict
    a = Agent(daemon.endpoint, NO_METER)
    try:
        err = a.query("tune", {"agent": "q1", "workload": "wl", "accept_load": "yes"})
        assert err["body"]["code"] == "bad_args" and "accept_load" in err["body"]["message"]
        under = _tune_marked(daemon, a, {"accept_load": True})
        assert under["state"] == "done" and under["accept_load"] is True, under
        basis = under["recommendation"]["rests_on"]
        assert basis["marked_used"] and basis["marked_runs"] == under["measured"] == 2
        # its verification ran under the load too: judged against the prediction, and said so
        v = under["verification"]
        assert v["state"] in ("verified", "unconfirmed", "off")
        assert "under the accepted load (not verified: " \
            "1 of 1 verification runs marked (interference: 48 %" in v["error"], v
        assert under["reason"].startswith(f"applied and {v['state']}")
        assert basis["text"].startswith("holds for the board under its load: 0 clean and 2 "
                                        "marked runs used (interference: 48 %")
        con = Console(record=True, width=200)
        print_verdict(under, con)
        out = con.export_text()
        assert "--accept-load: runs marked for interference count" in out
        assert "holds for the board under its load" in out
        # accepted but nothing was marked: no line about a load the result does not rest on
        quiet = {**under, "recommendation": {**under["recommendation"], "rests_on": {
            **basis, "marked_used": False, "marked_runs": 0}}}
        con = Console(record=True, width=200)
        print_verdict(quiet, con)
        assert "--accept-load" not in con.export_text()
        clean = _tune_marked(daemon, a, {})  # the same board, the daemon's default: clean runs only
        assert clean["state"] == "failed" and clean["recommendation"] is None, clean
        assert "marked for interference" in clean["reason"], clean["reason"]
    finally:
        a.close()
    args = build_parser().parse_args(["tune", "--agent", "q1", "--workload", "wl",
                                      "--accept-load"])
    assert goal_args("tune", args)["accept_load"] is True
    args = build_parser().parse_args(["tune", "--agent", "q1", "--workload", "wl"])
    assert "accept_load" not in goal_args("tune", args)


def test_finished_tune_sessions_leave_memory_and_unsaved_ones_are_bounded():
    """A finished session is dropped from the Tuner once saved (tune_status reads the store);
    one the store refused stays answerable from memory, at most UNSAVED_FINISHED_MAX of them."""
    from opptune.daemon.objectives import Goal
    from opptune.daemon.tuning import UNSAVED_FINISHED_MAX, Session, Tuner

    class Store:
        def __init__(self):
            self.saved, self.fail = {}, False

        def open_tune_sessions(self):
            return []

        def save_tune_session(self, r, expect=None):
            if self.fail:
                raise OSError("disk full")
            self.saved[r["tune_id"]] = r
            return True

        def tune_session(self, tune_id):
            return self.saved.get(tune_id)

    class Registry:
        def get(self, _):
            return None

    class D:
        store, registry = Store(), Registry()

    tuner = Tuner(D())
    try:
        def end(i):
            s = Session(f"tune-{i}", "a", "w", "small", Goal("time"), [], 1, 0, None, None,
                        float(i))
            tuner.sessions[s.tune_id] = s
            tuner._end(s, "done", f"finished {i}")

        end(0)
        assert tuner.sessions == {} and tuner._unsaved == {}
        assert tuner.status({"tune_id": "tune-0"})["reason"] == "finished 0"  # from the store
        D.store.fail = True
        n = UNSAVED_FINISHED_MAX + 8
        for i in range(1, n + 1):
            end(i)
        assert tuner.sessions == {} and len(tuner._unsaved) == UNSAVED_FINISHED_MAX
        assert tuner.status({"tune_id": f"tune-{n}"})["reason"] == f"finished {n}"
        with pytest.raises(Exception, match="no tune session 'tune-1'"):
            tuner.status({"tune_id": "tune-1"})  # the oldest unsaved one went
    finally:
        tuner.close()


def test_a_save_another_daemon_of_the_fleet_beat_sends_no_job():
    """Two daemons of a fleet that both think they hold the agent (it moved to the other
    within agent_timeout_s): the one whose save finds the stored row moved on since sends no
    job for the session; where the agent is connected to it, it reads the session again as
    stored, else it lets the session go."""
    import copy
    from types import SimpleNamespace

    from opptune.agent.virtual_board import board_spec
    from opptune.daemon.objectives import Goal
    from opptune.daemon.sampling import Proposal
    from opptune.daemon.tuning import Segment, Session, Tuner, segment_grid
    from test_goal_recommend import platform_of

    platform = platform_of(board_spec("odroid-xu4"))
    order = platform["clusters"][1]

    class Store:
        rows: dict = {}

        def open_tune_sessions(self):
            return []

        def save_tune_session(self, r, expect=None):
            row = self.rows.get(r["tune_id"])
            if expect is not None and (row is None or row["updated"] != expect):
                return False
            self.rows[r["tune_id"]] = copy.deepcopy(r)
            return True

        def tune_session(self, tune_id):
            return copy.deepcopy(self.rows.get(tune_id))

    info = SimpleNamespace(platform=platform, connected=True)
    info.alive = lambda timeout_s, now=None: info.connected
    sent = []
    d = SimpleNamespace(store=Store(), config=SimpleNamespace(agent_timeout_s=3.0),
                        registry=SimpleNamespace(get=lambda _: info),
                        jobs=SimpleNamespace(send=lambda agent, job: sent.append(job)))
    tuner = Tuner(d)
    try:
        s = Session("tune-a", "q1", "wl", "small", Goal("time"),
                    [Segment("cluster1", order, segment_grid(platform, order, None), 4)], 1, 0,
                    1, None, 1.0, updated=1.0)
        tuner.sessions[s.tune_id] = s
        assert tuner._save(s) and s.stored == 1.0
        # the other daemon took the session up at the agent's hello and sent job-b
        moved = {**d.store.rows["tune-a"], "job_id": "job-b", "updated": 2.0}
        d.store.rows["tune-a"] = moved
        tuner._proposed(s, Proposal(0, "first"))
        assert sent == [] and d.store.rows["tune-a"] == moved
        back = tuner.sessions["tune-a"]
        assert back is not s and back.resumed and (back.job_id, back.stored) == ("job-b", 2.0)
        assert tuner.owns("job-b") and not tuner.owns(s.job_id)
        # moved on again, the agent no longer connected here: let go
        info.connected = False
        d.store.rows["tune-a"] = {**moved, "job_id": None, "updated": 3.0}
        back.job_id = None
        tuner._proposed(back, Proposal(1, "second"))
        assert sent == [] and tuner.sessions == {} and d.store.rows["tune-a"]["updated"] == 3.0
    finally:
        tuner.close()


def test_a_budget_too_small_to_fit_each_cluster_is_refused_at_once(daemon):
    """``opptune tune --budget 4`` on a big.LITTLE board with cpufreq: 2 configurations per
    cluster, where a model needs 3 (cores x frequency): refused before anything is measured,
    saying the least budget that can work, rather than failing after the measurements."""
    freq = {**METER, "id": "plat-bl", "clusters": [[0, 1], [2, 3]],
            "policies": [{"name": "policy0", "related_cpus": [0, 1]},
                         {"name": "policy2", "related_cpus": [2, 3]}],
            "cpufreq": {"available": True,
                        "frequencies_khz": {"policy0": [500000, 1000000, 1500000],
                                            "policy2": [500000, 1000000, 1500000]}}}
    a = Agent(daemon.endpoint, freq)
    try:
        err = a.query("tune", {"agent": "q1", "workload": "wl", "budget": 4})
        assert err["type"] == "error" and err["body"]["code"] == "bad_args"
        assert err["body"]["message"] == (
            "a budget of 4 leaves 2 configurations for cluster0, where a model needs 3 more "
            "(cores x frequency): give --budget 6 or more, or tune one cluster (--cluster)")
        assert daemon.tuning.sessions == {}
        ok = a.query("tune", {"agent": "q1", "workload": "wl", "budget": 6})
        assert ok["type"] == "reply", ok
    finally:
        a.close()


@pytest.mark.parametrize("what", ["tune", "recommend"])
def test_more_cores_than_the_cluster_asked_for_are_refused_as_sweep_words_it(daemon, what):
    """``opptune tune --cluster 0 --max-cores 6`` on an ODROID-XU4 (4 cpus a cluster) was
    checked against the board's 8 cpus only, and tuned 4 cores at most without a word."""
    bl = {**METER, "id": "plat-bl2", "clusters": [[0, 1], [2, 3]]}
    a = Agent(daemon.endpoint, bl)
    try:
        err = a.query(what, {"agent": "q1", "workload": "wl", "cluster": 1, "max_cores": 3})
        assert err["type"] == "error" and err["body"]["code"] == "bad_args", err
        board = daemon.registry.get("q1")
        assert err["body"]["message"] == (
            f"max_cores 3 is more than the 2 cpus of cluster 1 of board "
            f"{board_name(board.platform, board.platform_id)}; use 1..2 (0 = all)")
        # the board's own bound stays as it was without --cluster
        err = a.query(what, {"agent": "q1", "workload": "wl", "max_cores": 5})
        assert err["body"]["message"].startswith("max_cores 5 is more than the 4 cpus of "
                                                 "board "), err
        if what == "tune":
            assert daemon.tuning.sessions == {}
            ok = a.query("tune", {"agent": "q1", "workload": "wl", "cluster": 1,
                                  "max_cores": 2})
            assert ok["type"] == "reply", ok
    finally:
        a.close()


def test_an_unknown_cpu_count_refuses_only_what_it_cannot_measure(daemon):
    """A hello whose platform names no cpus counted as 1 cpu: ``opptune recommend
    --max-cores 2`` was refused with "max_cores 2 is more than the 1 cpus". Now recommend
    answers as without the cap; tune and sweep, whose plan then holds cpu 0 alone, say the
    cpu count is unknown."""
    bare = {"id": "plat-e"}
    a = Agent(daemon.endpoint, {**NO_METER, "id": "plat-e"})
    try:
        job_id = a.issued_job()
        for seq, cores in enumerate((1, 2, 3, 4)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(bare, cores, energy=False)})
            a.expect("ack")
        # the same board says hello again, now without a description (an agent that cannot
        # read its topology); one socket's messages are handled in order
        a.send("hello", {"platform": bare, "workloads": ["wl"], "agent_version": "t"})
        # recommend answers as it does without --max-cores (its fit is recommend's business)
        plain = a.query("recommend", {"agent": "q1", "workload": "wl"})
        capped = a.query("recommend", {"agent": "q1", "workload": "wl", "max_cores": 2})
        assert capped["type"] == plain["type"]
        assert capped["body"].get("code") == plain["body"].get("code") != "bad_args", capped
        for what in ("tune", "sweep"):
            err = a.query(what, {"agent": "q1", "workload": "wl", "workloads": ["wl"],
                                 "max_cores": 2})
            assert err["type"] == "error" and err["body"]["code"] == "bad_args", err
            assert err["body"]["message"].startswith("max_cores 2: the cpu count of board "), err
            assert "is unknown" in err["body"]["message"]
        # without --max-cores the sweep measures cpu 0 alone, and now says so
        ok = a.query("sweep", {"agent": "q1", "workloads": ["wl"]})
        assert ok["type"] == "reply", ok
        assert [j["n_points"] for j in ok["body"]["data"]["jobs"]] == [1], ok
        why = ok["body"]["data"]["cores_not_swept"]
        assert why.startswith("cores not swept on board ") and "names no cpus, so only 1 core " \
            "is measured; start an opptune-agent that describes the board" in why, why
        assert daemon.tuning.sessions == {}
    finally:
        a.close()


def test_a_stopped_sessions_job_is_cancelled_and_stays_so_after_a_restart(tmp_path):
    """tune --stop with the session's job out: the job is cancelled, and the agent told. Where
    the daemon that stopped it was restarted meanwhile, the job is not sent again: the cancel
    is (the agent may have been away), and runs the agent sends anyway (an older agent runs
    the job to its end) are stored with nothing fitted or pushed (before cancels, its end
    was taken for a sweep's after such a restart: fitted and a configuration pushed)."""
    cfg = DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                       auto_sweep=False, auto_recommend=True, agent_timeout_s=30,
                       sweep=SweepDefaults(size="small", reps=1, warmup=0))
    d = Daemon(cfg)
    d.start_thread()
    a = Agent(d.endpoint, METER)
    try:
        s = a.query("tune", {"agent": "q1", "workload": "wl", "objective": "energy"})
        tune_id = s["body"]["data"]["tune_id"]
        job = a.expect("job")["body"]
        a.send("query", {"what": "tune_stop", "args": {"tune_id": tune_id}})
        # the cancel goes to the agent before the reply to the operator
        got = {m["type"]: m for m in (a.expect(("cancel", "reply")) for _ in range(2))}
        assert got["reply"]["body"]["data"]["job_cancelled"] == {
            "job_id": job["job_id"], "state": "sent", "told": True, "via": None}, got
        assert got["cancel"]["body"] == {"job_id": job["job_id"]}
    finally:
        a.close()
        d.stop()
    d = Daemon(cfg)  # the same store
    fits = []
    d._fit_job = lambda *args: fits.append(args)  # a sweep's end: fit, then push
    d.start_thread()
    a = Agent(d.endpoint, METER)
    try:
        # not ended by the agent: the cancel again at the hello, not the job
        assert a.expect(("cancel", "job"))["body"] == {"job_id": job["job_id"]}
        (point,) = job["points"]
        a.send("result", {"job_id": job["job_id"], "seq": 0, "of": 1,
                          "record": record(METER, len(point["cpus"]))})
        a.expect("ack")
        st = a.query("status", {})["body"]["data"]  # answered after the batch was handled
        (row,) = [j for j in st["jobs"] if j["job_id"] == job["job_id"]]
        assert (row["state"], row["received"]) == ("cancelled", 1), row
        assert row["stopped"]["held"] is False  # its end seen: not told again
        assert fits == [] and st["recommendations"] == []
        assert a.query("tune_status", {"tune_id": tune_id})["body"]["data"]["state"] == \
            "stopped"
    finally:
        a.close()
        d.stop()
