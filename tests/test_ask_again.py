"""A request that changes something and gets no answer in time: it reached the daemon, which
may still carry it out (a busy daemon answers late), so the command asks it once more about the
same request (the ``again`` query: the daemon answers it as it answered the first, never
carrying it out twice), and where that is unanswered too says it may have been carried out and
how to check, not 'is opptune-daemon running'."""

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
    (endpoint, a function returning the queries it received, each with its sender's
    identity as ``from``)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    def received() -> list[dict]:
        out = []
        while sock.poll(300):
            identity, frame = sock.recv_multipart()
            out.append({**P.decode(frame), "from": identity})
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
def test_a_change_that_reached_the_daemon_unanswered_is_asked_about_again_then_may_be_done(
        silent_daemon, pyperf_json, capsys, argv, prog, what, check):
    endpoint, received = silent_daemon
    argv = [a.format(file=pyperf_json) for a in argv]
    assert main([*argv, "--daemon", endpoint, "--timeout", "0.5"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"{prog}: no answer from the daemon at {endpoint} within 0.5 s; asking it once more "
        "about the same request, which it carries out once however often it is asked",
        f"{prog}: no answer from the daemon at {endpoint} within 0.5 s, but the request "
        f"reached it and may have been carried out (a busy daemon answers late): {check}"]
    first, again = received()  # the request once, then the question about it, nothing more
    assert (first["type"], first["body"]["what"]) == ("query", what)
    assert (again["type"], again["body"]) == ("query", {"what": "again",
                                                        "args": {"request": first["id"]}})
    assert again["from"] == first["from"]  # the daemon knows the request by its sender too


FORGOTTEN = ("this daemon does not remember request R (it keeps the answers of its last 1000 "
             "change requests, each for 600 s, since it started at 12:00:00): nothing was done "
             "now")


@pytest.mark.parametrize("code,message,tail", [
    ("unknown_query", "unknown query 'again'; known: status, sweep",
     "the daemon did not recognise it: it is older than this opptune and cannot tell a "
     "request sent again from a new one"),
    ("unknown_request", FORGOTTEN, f"the daemon did not know it: {FORGOTTEN}")],
    ids=["older daemon", "restarted daemon"])
def test_a_daemon_that_cannot_tell_is_not_asked_twice(capsys, code, message, tail):
    """An older daemon refuses 'again' (unknown query), a restarted one does not know the
    request; neither carries it out a second time, and the command says it could not tell
    and where to look."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    seen, stop = [], threading.Event()

    def daemon():  # silent to the sweep, refuses 'again' at once
        while not stop.is_set():
            if not sock.poll(50):
                continue
            identity, frame = sock.recv_multipart()
            msg = P.decode(frame)
            seen.append(msg["body"]["what"])
            if msg["body"]["what"] == "again":
                sock.send_multipart([identity, P.encode(P.error_reply(
                    "daemon", code, message, msg["id"]))])

    server = threading.Thread(target=daemon)
    server.start()
    try:
        endpoint = f"tcp://127.0.0.1:{port}"
        assert main(["sweep", "--agent", "a", "--daemon", endpoint, "--timeout", "0.5"]) == 1
    finally:
        stop.set()
        server.join()
        sock.close(0)
        ctx.term()
    assert seen == ["sweep", "again"]
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"opptune sweep: no answer from the daemon at {endpoint} within 0.5 s, but the request "
        "reached it and may have been carried out (a busy daemon answers late): 'opptune "
        "status --agent a' lists the jobs it queued; running this again would queue them a "
        f"second time (asked again, {tail})")


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


def test_a_sweep_a_busy_daemon_answers_too_late_is_queued_once_and_the_command_gets_it(
        tmp_path, monkeypatch, capsys):
    """The case seen under load: a real daemon whose loop is held past the client's
    --timeout. The client asks it again about the same request; the daemon carries the sweep
    out once, the client gets its answer (exit 0, the job's id), and the question sent again
    queues nothing more."""
    from opptune.daemon import client, queries
    from test_daemon_service import Agent
    from test_recent_requests import daemon_noting_again

    asked_again, again_handled = threading.Event(), threading.Event()
    answer, note = queries.answer, client.again_note

    def busy(d, what, args):
        if what == "sweep":  # the loop is held until the client has timed out and asks again
            asked_again.wait(30)
        return answer(d, what, args)

    def noting(*a):
        said = note(*a)

        def asking():
            said()
            asked_again.set()
        return asking

    monkeypatch.setattr(queries, "answer", busy)
    monkeypatch.setattr(client, "again_note", noting)
    d = daemon_noting_again(tmp_path, again_handled)
    agent = Agent(d.endpoint)
    try:
        agent.hello()
        agent.expect("heartbeat")  # the hello was taken: the agent is known
        rc = main(["sweep", "--agent", "a1", "--workload", "wl", "--daemon", d.endpoint,
                   "--timeout", "2"])
        out = capsys.readouterr()
        assert rc == 0
        assert "asking it once more about the same request" in out.err
        job = agent.expect("job")["body"]
        assert out.out.splitlines() == [f"job {job['job_id']} sent: wl"]
        assert again_handled.wait(30)  # the question about it was answered, not carried out
        assert d.stats["requests_asked_again"] == 1
        assert main(["status", "--json", "--daemon", d.endpoint]) == 0
        st = json.loads(capsys.readouterr().out)
        assert [j["job_id"] for j in st["jobs"]] == [job["job_id"]]
    finally:
        asked_again.set()
        agent.close()
        d.stop()
