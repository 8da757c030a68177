"""A request that changes something and gets no answer in time: it reached the daemon, which
may still carry it out (a busy daemon answers late), so the command says so and how to check,
not 'is opptune-daemon running'; and it is sent once, never again behind the user's back (the
daemon does not recognise a query sent twice)."""

from __future__ import annotations

import json
import threading

import pytest
import zmq

from opptune.daemon.cli import main
from opptune.shared import protocol as P


@pytest.fixture
def silent_daemon():
    """A ROUTER that takes the queries (the handshake is made) and never answers; yields
    (endpoint, a function returning the queries it received)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    def received() -> list[dict]:
        out = []
        while sock.poll(300):
            _identity, frame = sock.recv_multipart()
            out.append(P.decode(frame))
        return out

    yield f"tcp://127.0.0.1:{port}", received
    sock.close(0)
    ctx.term()


@pytest.fixture
def pyperf_json(tmp_path):
    import pyperf
    run = pyperf.Run([0.5, 0.6], metadata={"name": "bench", "loops": 1}, collect_metadata=False)
    path = tmp_path / "bench.json"
    pyperf.Benchmark([run]).dump(str(path))
    return path


MUTATING = [
    (["sweep", "--agent", "a"], "opptune sweep", "sweep",
     "'opptune status --agent a' lists the jobs it queued; running this again would queue "
     "them a second time"),
    (["characterize", "--agent", "a"], "opptune characterize", "characterize",
     "'opptune status --agent a' lists the jobs it queued; running this again is safe (it "
     "skips what is measured or under way)"),
    (["recommend", "--agent", "a", "--workload", "w", "--apply"], "opptune recommend",
     "recommend", "'opptune status --agent a' lists the configurations pushed to it; running "
     "this again would push another"),
    (["recommend", "--agent", "a", "--workload", "w", "--pid", "1"], "opptune recommend",
     "recommend", "'opptune status --agent a' lists the configurations pushed to it; running "
     "this again would push another"),
    (["tune", "--agent", "a", "--workload", "w", "--no-progress"], "opptune tune", "tune",
     "'opptune status --agent a' lists the jobs of a session; running this again would start "
     "a second one"),
    (["keys", "accept", "k1"], "opptune keys accept", "keys",
     "'opptune keys list' shows the key's state; running this again is safe"),
    (["import", "{file}", "--agent", "a", "--cores", "1"], "opptune import", "import",
     "'opptune status --agent a' lists the import's job; running this again is safe (values "
     "already stored are skipped)"),
]


@pytest.mark.parametrize("argv,prog,what,check", MUTATING,
                         ids=["sweep", "characterize", "recommend --apply", "recommend --pid",
                              "tune", "keys accept", "import"])
def test_a_change_that_reached_the_daemon_unanswered_says_it_may_be_done_and_is_sent_once(
        silent_daemon, pyperf_json, capsys, argv, prog, what, check):
    endpoint, received = silent_daemon
    argv = [a.format(file=pyperf_json) for a in argv]
    assert main([*argv, "--daemon", endpoint, "--timeout", "0.5"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"{prog}: no answer from the daemon at {endpoint} within 0.5 s, but the request "
        f"reached it and may have been carried out (a busy daemon answers late): {check}"]
    queries = received()
    assert [(q["type"], q["body"]["what"]) for q in queries] == [("query", what)]


@pytest.mark.parametrize("argv,prog", [
    (["status"], "opptune status"), (["keys", "list"], "opptune keys list"),
    (["recommend", "--agent", "a", "--workload", "w"], "opptune recommend")])
def test_a_question_unanswered_keeps_asking_whether_the_daemon_runs(silent_daemon, capsys,
                                                                    argv, prog):
    """A read-only query changes nothing: its timeout line stays what it was."""
    endpoint, received = silent_daemon
    assert main([*argv, "--daemon", endpoint, "--timeout", "0.5"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{prog}: no answer from the daemon at {endpoint} within 0.5 s; is opptune-daemon "
        "running and is the endpoint right? (with CURVE on it answers only its operator key: "
        "give its --config)"]
    assert len(received()) == 1


def test_a_change_that_never_reached_a_daemon_keeps_asking_whether_it_runs(capsys):
    """Something listens but makes no handshake (no daemon there): nothing was sent, so the
    line is the one of a daemon that is not there."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        assert main(["sweep", "--agent", "a", "--daemon", endpoint, "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err
    assert "is opptune-daemon running" in err and "may have been carried out" not in err


def test_a_sweep_a_busy_daemon_answers_too_late_is_queued_and_the_line_says_where_to_look(
        tmp_path, monkeypatch, capsys):
    """The case seen under load: a real daemon, busy past the client's --timeout, carries the
    sweep out after the client gave up; the line told the user to look, not that it was down."""
    from opptune.daemon import queries
    from opptune.daemon.service import Daemon
    from opptune.shared.config import DaemonConfig, SweepDefaults
    from test_daemon_service import Agent

    client_gave_up = threading.Event()
    answer = queries.answer

    def busy(d, what, args):
        if what == "sweep":  # the loop is held until the client has timed out
            client_gave_up.wait(30)
        return answer(d, what, args)

    monkeypatch.setattr(queries, "answer", busy)
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                            sweep=SweepDefaults(size="small", reps=1, warmup=0)))
    d.start_thread()
    agent = Agent(d.endpoint)
    try:
        agent.hello()
        agent.expect("heartbeat")  # the hello was taken: the agent is known
        rc = main(["sweep", "--agent", "a1", "--workload", "wl", "--daemon", d.endpoint,
                   "--timeout", "0.5"])
        client_gave_up.set()
        assert rc == 1
        assert "but the request reached it and may have been carried out" in \
            capsys.readouterr().err
        job = agent.expect("job")["body"]  # carried out all the same
        assert job["workload"] == "wl"
        assert main(["status", "--json", "--daemon", d.endpoint]) == 0
        st = json.loads(capsys.readouterr().out)
        assert [j["job_id"] for j in st["jobs"]] == [job["job_id"]]
    finally:
        client_gave_up.set()
        agent.close()
        d.stop()
