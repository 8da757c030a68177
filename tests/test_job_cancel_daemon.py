"""The daemon's side of ``cancel`` against a test DEALER agent (the daemon loop in a thread,
real sockets): an older agent that refuses the message runs the job to its end, which the
job's reason says, and is not asked again; the request is remembered as a change request
(asked again, it is answered as before, never carried out twice)."""

from __future__ import annotations

from opptune.shared import protocol as P
from test_goal_service import METER, Agent, daemon, record  # noqa: F401 (a fixture)


def test_an_older_agent_refuses_the_cancel_and_runs_the_job_to_its_end(daemon):
    a = Agent(daemon.endpoint, METER)
    try:
        job_id = a.issued_job()
        a.send("query", {"what": "cancel", "args": {"job_id": job_id}})
        # the cancel goes to the agent before the reply to the operator
        got = {m["type"]: m for m in (a.expect(("cancel", "reply")) for _ in range(2))}
        (j,) = got["reply"]["body"]["data"]["jobs"]
        assert (j["was"], j["state"], j["cancelled"], j["told"]) == \
            ("sent", "cancelled", True, True)
        cancel = got["cancel"]
        assert cancel["body"] == {"job_id": job_id}
        # what an agent without the type answers (agent/link.py: the decoder's refusal)
        a.send("error", {"code": "unknown_type", "message": "unknown message type 'cancel'",
                         "ref": cancel["id"]})
        job = a.query("status", {})["body"]["data"]["jobs"][0]
        assert job["state"] == "cancelled"
        assert job["reason"].endswith("; agent q1 cannot cancel a job (an older agent): the job "
                                      "runs to its end there, its runs are stored"), job
        assert job["stopped"]["held"] is False and job["stopped"]["refused"] == "unknown_type"
        # it runs to its end: every run is stored, the job stays cancelled
        for seq, cores in enumerate((1, 2, 3, 4)):
            a.send("result", {"job_id": job_id, "seq": seq, "of": 4,
                              "record": record(METER, cores)})
            a.expect("ack")
        job = a.query("status", {})["body"]["data"]["jobs"][0]
        assert (job["state"], job["received"]) == ("cancelled", 4)
        assert daemon.store.job(job_id)["reason"] == job["reason"]
    finally:
        a.close()


def test_a_cancel_asked_again_is_answered_as_before(daemon):
    a = Agent(daemon.endpoint, METER)
    try:
        job_id = a.issued_job()
        first = a.send("query", {"what": "cancel", "args": {"job_id": job_id}})
        answer = a.expect("reply", ref=first)["body"]["data"]
        assert answer["jobs"][0]["cancelled"] is True
        again = a.query("again", {"request": first})["body"]["data"]
        assert again == answer  # not carried out a second time: it would say 'had ended'
        assert daemon.stats["requests_asked_again"] == 1
        for args, why in (({}, "cancel needs args.job_id or args.agent"),
                          ({"job_id": ""}, "cancel args.job_id must be non-empty text"),
                          ({"agent": "nobody"}, "no agent 'nobody'")):
            err = a.query("cancel", args)
            assert err["type"] == "error", err
            assert err["body"]["message"].startswith(why), err
        assert P.decode(P.encode(P.make("cancel", "daemon", {"job_id": job_id})))["body"] == \
            {"job_id": job_id}
    finally:
        a.close()


def test_a_job_sent_while_another_daemon_cancels_it_as_queued_is_cancelled_at_the_agent(
        tmp_path):
    """Two daemons of a fleet on one store: daemon 1 stores a job 'queued', sends it, then
    marks it 'sent'; daemon 2's cancel between the send and the mark found it queued (so
    nobody was to tell the agent) while the agent held it and ran it to its end. The sender
    now sees its mark refused and tells the agent."""
    import time

    from opptune.daemon.jobs import JobTracker
    from opptune.daemon.registry import Registry
    from opptune.daemon.store import open_store
    from opptune.shared.config import DaemonConfig

    db = str(tmp_path / "d.db")
    stores = [open_store(db), open_store(db)]
    job = {"job_id": "job-1", "workload": "wl", "size": "small", "reps": 1, "warmup": 0,
           "points": [{"cpus": [0], "threads": 1, "freq_khz": None}]}
    sent, answers = [], []

    class Wire:  # daemon 1's socket: the other daemon's cancel comes as the job goes out
        def send(self, identity, msg):
            sent.append(msg["type"])
            if msg["type"] == "job":
                answers.append(daemon2.cancel("job-1", "cancelled by the user"))
            return True

    try:
        holder = Registry(10.0)
        holder.hello("a1", b"a1", "plat", {}, ["wl"], time.time())
        daemon1 = JobTracker(DaemonConfig(), stores[0], holder, Wire(), "daemon", time.time(),
                             lambda *a: None)
        daemon2 = JobTracker(DaemonConfig(), stores[1], Registry(10.0), None, "daemon",
                             time.time(), lambda *a: None)
        daemon1.send("a1", job)
        (answer,) = answers
        assert (answer["was"], answer["told"]) == ("queued", None)  # as daemon 2 saw it
        # the reply does not say nothing of it ran: the sender now stops it on the board
        from opptune.daemon.cancel_cli import job_line
        line = job_line(answer)
        assert "nothing of it ran" not in line and line.endswith(
            "it was queued, not sent, when cancelled: it is never sent (a daemon of the fleet "
            "that sent it at that instant tells the agent to stop it)"), line
        assert sent == ["job", "cancel"]
        row = stores[0].job("job-1")
        assert row["state"] == "cancelled" and row["stopped"]["held"] is True
    finally:
        for s in stores:
            s.close()


def test_a_job_sent_between_the_cancels_read_and_its_mark_is_answered_as_sent(tmp_path):
    """The other order: daemon 2 read the job 'queued', daemon 1 marked it 'sent', then
    daemon 2 cancelled it. The cancel was answered 'queued' (nothing of it ran, no stop held
    for the agent's end) though the agent held it; it is set only from the state it read, so
    it reads the job again and answers 'sent', held for the agent's end."""
    import time

    from opptune.daemon.cancel_cli import job_line
    from opptune.daemon.jobs import JobTracker
    from opptune.daemon.registry import Registry
    from opptune.daemon.store import open_store
    from opptune.shared.config import DaemonConfig

    db = str(tmp_path / "d.db")
    sender, canceller = open_store(db), open_store(db)
    job = {"job_id": "job-1", "workload": "wl", "size": "small", "reps": 1, "warmup": 0,
           "points": [{"cpus": [0], "threads": 1, "freq_khz": None}]}
    reads = []

    class Racing:  # daemon 2's store: daemon 1 marks the job sent just after its first read
        def __getattr__(self, name):
            return getattr(canceller, name)

        def job(self, job_id):
            row = canceller.job(job_id)
            reads.append(row["state"])
            if len(reads) == 1:
                assert sender.set_job_state(job_id, "sent", only_from=("queued",))
            return row

    try:
        sender.save_job("a1", job, time.time(), state="queued")
        daemon2 = JobTracker(DaemonConfig(), Racing(), Registry(10.0), None, "daemon",
                             time.time(), lambda *a: None)
        answer = daemon2.cancel("job-1", "cancelled by the user")
        assert reads == ["queued", "sent"]
        assert (answer["was"], answer["cancelled"]) == ("sent", True)
        row = sender.job("job-1")
        assert row["state"] == "cancelled" and row["stopped"]["held"] is True
        assert "queued" not in job_line(answer) and "is not connected to this daemon" in \
            job_line(answer)
    finally:
        sender.close()
        canceller.close()
