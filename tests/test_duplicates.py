"""Duplicated and reordered results from a client speaking the protocol over CURVE with a real
agent identity (its own key pair, accepted by the operator with ``opptune keys accept``),
against the daemon as a process: the same results sent twice and out of order, with gaps in
the sequence filled later, are each acknowledged every time and stored exactly once; the job
completes only once every sequence number is in."""

from __future__ import annotations

import random
import time

import pytest
import zmq

from opptune.shared import protocol as P
from opptune.shared.curve import ensure_keypair
from procs import db_rows, wait_until, write_toml
from test_curve import CurveCluster
from test_daemon_service import PLATFORM, record

pytestmark = pytest.mark.integration


class Client:
    """A DEALER with its own CURVE key pair, as a board's agent has."""

    def __init__(self, endpoint: str, server_public: str, keyfile, agent_id: str = "dup"):
        self.id = agent_id
        self.public, secret = ensure_keypair(keyfile)
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, agent_id.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.curve_serverkey = server_public.encode()
        self.sock.curve_publickey = self.public.encode()
        self.sock.curve_secretkey = secret.encode()
        self.sock.connect(endpoint)

    def send(self, msg_type: str, body: dict, msg_id: str | None = None) -> str:
        msg = P.make(msg_type, self.id, body, msg_id=msg_id)
        self.sock.send(P.encode(msg))
        return msg["id"]

    def next(self, types: tuple[str, ...], timeout_s: float = 10.0) -> dict | None:
        """The next message of one of ``types`` (others skipped); None after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0 and self.sock.poll(int(left * 1000)):
            msg = P.decode(self.sock.recv())
            if msg["type"] in types:
                return msg
        return None

    def hello(self) -> None:
        self.send("hello", {"platform": PLATFORM, "workloads": ["wl"],
                            "agent_version": "test"})

    def acks(self, ids: list[str], timeout_s: float = 10.0) -> list[str]:
        """Ack ids received until every one of ``ids`` was acked as often as it was sent."""
        want = sorted(ids)
        got: list[str] = []
        deadline = time.monotonic() + timeout_s
        while sorted(got) != want:
            msg = self.next(("ack", "error"), max(0.0, deadline - time.monotonic()))
            assert msg is not None, f"acks missing: {sorted(set(want) - set(got))}"
            assert msg["type"] == "ack", msg
            got += msg["body"]["ids"]
            assert len(got) <= len(want), f"more acks than sends: {got}"
        return got


@pytest.fixture
def cluster(tmp_path):
    c = CurveCluster(tmp_path)
    # a job of 4 points x 3 reps (12 sequence numbers) for the client's 4-cpu platform
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5,
        "agent_timeout_s": 30.0, "auto_sweep": True, "auto_recommend": False,
        "curve": "on", "keys_dir": str(c.keys), "accept_load": True},  # no re-measure jobs
        {"sweep": {"size": "small", "reps": 3, "warmup": 0}})
    c.start_daemon()
    c.wait_keys()
    yield c
    c.stop()


def accepted_client(c: CurveCluster, tmp_path) -> Client:
    client = Client(c.endpoint, c.operator[0], tmp_path / "client.key")
    client.hello()
    refused = client.next(("error",))
    assert refused and refused["body"]["code"] == "key_pending", refused
    out = c.keys_cli("list")
    (line,) = out.stdout.splitlines()
    out = c.keys_cli("accept", line.split()[0])
    assert out.returncode == 0 and "accepted" in out.stdout, out.stderr
    client.hello()
    return client


def test_results_sent_twice_and_out_of_order_are_stored_once(cluster, tmp_path):
    c = cluster
    rng = random.Random(3)
    client = accepted_client(c, tmp_path)
    try:
        job = client.next(("job",))
        assert job is not None, c.logs()
        job = job["body"]
        points, reps = job["points"], job["reps"]
        of = len(points) * reps
        assert of == 12, job
        bodies = {}
        for i, p in enumerate(points):
            for rep in range(reps):
                seq = i * reps + rep
                bodies[seq] = {"job_id": job["job_id"], "seq": seq, "of": of,
                               "record": record(len(p["cpus"]), rep)}
        ids = {seq: P.new_id() for seq in bodies}
        gaps = {3, 7, 11}  # the last one too: a sequence that ends in a gap
        first = [s for s in bodies if s not in gaps]
        rng.shuffle(first)
        # every result twice: the copies interleaved, in another random order
        copies = first[:]
        rng.shuffle(copies)
        sends = [x for pair in zip(first, copies) for x in pair]
        sent_ids = []
        for seq in sends:
            ids[seq] = client.send("result", bodies[seq], msg_id=ids[seq])
            sent_ids.append(ids[seq])
        client.acks(sent_ids)

        def runs():
            return db_rows(c.db, "SELECT seq, msg_id FROM runs WHERE job_id = ?",
                           job["job_id"])
        stored = runs()
        assert sorted(s for s, _ in stored) == sorted(first)  # once each, gaps absent
        assert all(ids[s] == m for s, m in stored)
        state = db_rows(c.db, "SELECT state FROM jobs WHERE job_id = ?", job["job_id"])
        assert state in ([("sent",)], [("running",)])  # not done with sequence numbers missing
        # the gaps arrive last, out of order, one of them three times
        late = [11, 3, 7, 3, 3]
        for seq in late:
            ids[seq] = client.send("result", bodies[seq], msg_id=ids[seq])
        client.acks([ids[s] for s in late])
        stored = runs()
        assert sorted(s for s, _ in stored) == list(range(of))
        assert all(ids[s] == m for s, m in stored)
        wait_until(lambda: db_rows(c.db, "SELECT state FROM jobs WHERE job_id = ?",
                                   job["job_id"]) == [("done",)], "the job done", 30, c.logs)
        # after completion a resend of all of them is still acked and stored nowhere again
        again = [ids[s] for s in sorted(bodies)]
        for s in sorted(bodies):
            client.send("result", bodies[s], msg_id=ids[s])
        client.acks(again)
        assert len(runs()) == of
    finally:
        client.sock.close(0)


def test_a_sequence_number_resent_under_a_new_id_is_not_stored_twice(cluster, tmp_path):
    """An agent that lost its outbox (a reinstalled board) measures a job again under new
    message ids: each sequence number is still stored once."""
    c = cluster
    client = accepted_client(c, tmp_path)
    try:
        job = client.next(("job",))["body"]
        of = len(job["points"]) * job["reps"]
        body = {"job_id": job["job_id"], "seq": 0, "of": of, "record": record(1, 0)}
        first = client.send("result", body)
        client.acks([first])
        second = client.send("result", body)  # a fresh id, the same job and seq
        reply = client.next(("ack", "error"))
        assert reply is not None
        rows = db_rows(c.db, "SELECT msg_id FROM runs WHERE job_id = ? AND seq = 0",
                       job["job_id"])
        assert rows == [(first,)], (reply, rows)
        assert reply["type"] == "ack" and reply["body"]["ids"] == [second], reply
    finally:
        client.sock.close(0)
