"""CURVE on the link, with real processes over real sockets: a new agent's key waits for the
operator, its results are stored only once accepted, a revoked key is refused again, key files
wider than 0600 are refused with the chmod that fixes them, plain clients get nothing."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from opptune.daemon.client import DaemonUnreachable, QueryFailed, query
from opptune.shared.curve import load_keypair, read_public_key

from procs import AGENT_RUN_AS, Cluster, write_toml


def opptune(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *args],
                          capture_output=True, text=True, timeout=timeout)


class CurveCluster(Cluster):
    def __init__(self, tmp):
        self.keys = tmp / "keys"
        super().__init__(tmp, kernels=("pi_integrate",), reps=1, max_cores=1, extra_agent={
            "curve": "on", "daemon_public_key": str(self.keys / "server.pub")})
        self.daemon_toml = write_toml(tmp / "daemon.toml", {
            "bind": self.endpoint, "database": str(self.db), "heartbeat_s": 0.5,
            "agent_timeout_s": 3.0, "auto_sweep": True, "verify_reps": 1,
            "curve": "on", "keys_dir": str(self.keys)},
            {"sweep": {"size": "small", "reps": 1, "warmup": 0, "max_cores": 1}})
        self.operator = None

    def status(self):
        if self.operator is None:
            return None
        try:
            return query(self.endpoint, "status", timeout_s=1.0, curve=self.operator)
        except (DaemonUnreachable, QueryFailed):
            return None

    def wait_keys(self):
        deadline = time.monotonic() + 30
        while not (self.keys / "operator.key").exists() or not (self.keys / "server.pub").exists():
            assert self.daemon.poll() is None and time.monotonic() < deadline, self.logs()
            time.sleep(0.05)
        self.operator = (read_public_key(str(self.keys / "server.pub"), "server"),
                         *load_keypair(self.keys / "operator.key"))

    def keys_cli(self, *args):
        return opptune("keys", *args, "--config", str(self.daemon_toml))

    def agent_log(self):
        p = self.tmp / "agent.log"
        return p.read_text() if p.exists() else ""


def json_out(proc):
    """The JSON of a command with --json: stdout holds it alone."""
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def documented_key_keys():
    """A key's keys in 'opptune keys --json', as docs/json-output.md lists them."""
    from json_doc import tables
    return set(tables("`opptune keys ... --json`")[0])


def wait_until(cond, what, c, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{c.logs()}"
        time.sleep(0.1)


def test_agent_key_waits_for_accept_then_results_stored_and_revoke_refuses(tmp_path):
    c = CurveCluster(tmp_path)
    try:
        c.start_daemon()
        c.wait_keys()
        for name in ("server.key", "operator.key"):
            assert stat.S_IMODE((c.keys / name).stat().st_mode) == 0o600
        # Without CURVE nothing gets through: no answer at all.
        with pytest.raises(DaemonUnreachable):
            query(c.endpoint, "status", timeout_s=1.0)
        c.start_agent()
        t0 = time.monotonic()
        wait_until(lambda: "keys accept" in c.agent_log(), "the agent's refusal", c)
        assert stat.S_IMODE((tmp_path / "agent-state" / "agent.key").stat().st_mode) == 0o600
        out = c.keys_cli("list")
        assert out.returncode == 0, out.stderr
        (line,) = out.stdout.splitlines()
        key_id, state, _, agent = line.split()[:4]
        assert state == "pending" and agent == "test-agent"
        listed = json_out(c.keys_cli("list", "--json"))
        assert set(listed) == {"keys"} and [(k["id"], k["state"]) for k in listed["keys"]] == [
            (key_id, "pending")]
        assert set(listed["keys"][0]) == documented_key_keys()
        server = json_out(c.keys_cli("server", "--json"))
        assert server == {"server_public_key": c.operator[0],
                          "file": str(c.keys / "server.pub")}
        from json_doc import tables
        assert set(server) == set(tables("`opptune keys ... --json`")[1])
        # Hello and heartbeats are refused while the key waits: the daemon does not know the
        # agent, sends it no job and stores nothing.
        st = c.wait_for(lambda st: st["daemon"]["stats"]["refused"] >= 3, what="refusals")
        assert st["agents"] == [] and st["jobs"] == []
        # 'opptune status' showed an empty agents table and nothing of the key that waits
        assert [(k["id"], k["agent"]) for k in st["daemon"]["keys_pending"]] == [
            (key_id, "test-agent")]
        out = opptune("status", "--config", str(c.daemon_toml))
        assert out.returncode == 0, out.stderr
        assert (f"key {key_id} of agent test-agent waits for approval: opptune keys accept "
                f"{key_id}") in " ".join(out.stdout.split())
        assert c.rows("SELECT COUNT(*) FROM runs") == [(0,)]
        # A sweep of it said "no agent 'test-agent' (known agents: none yet)": now the key
        with pytest.raises(QueryFailed, match=f"key {key_id} is pending.*"
                                              f"'opptune keys accept {key_id}' lets it in"):
            query(c.endpoint, "sweep", {"agent": "test-agent"}, timeout_s=5, curve=c.operator)
        # An agent's key may not ask for the status (only the operator's may).
        agent_keys = (c.operator[0], *load_keypair(tmp_path / "agent-state" / "agent.key"))
        with pytest.raises(QueryFailed, match="operator"):
            query(c.endpoint, "status", timeout_s=5.0, curve=agent_keys)
        out = c.keys_cli("accept", key_id)
        assert out.returncode == 0 and "accepted" in out.stdout, out.stderr
        c.wait_for(lambda st: st["jobs"] and all(j["state"] == "done" for j in st["jobs"]),
                   what="the sweep stored after accept")
        stored = c.rows("SELECT COUNT(*) FROM runs")[0][0]
        assert stored >= 1
        # The daemon refused every message while the key waited, but logged few lines.
        refused = c.status()["daemon"]["stats"]["refused"]
        # (the agent's routing id: its id and its process's instance)
        lines = (tmp_path / "daemon.log").read_text().count("refused a message from "
                                                            "b'test-agent/")
        assert refused >= 3 and 1 <= lines <= 1 + (time.monotonic() - t0) / 10 < refused
        log = c.agent_log()
        # logged once while pending, not per refused message
        assert log.count("daemon refuses this agent's messages") == 1, log
        # the command that accepts the key: once, with the refusal (its start line said it
        # too, and says it at every start of an agent whose key was accepted long ago)
        assert log.count(f"opptune keys accept {key_id}") == 1, log
        # the acceptance in one line, not a second "daemon accepted this agent's key: ..."
        assert log.count("accepts this agent's key now") == 1, log
        # news, not a problem: INFO (it was a WARNING)
        (accepted,) = [ln for ln in log.splitlines() if "accepts this agent's key now" in ln]
        assert " INFO " in accepted and " WARNING " not in accepted, accepted
        assert "accepted this agent's key" not in log, log
        assert c.status()["daemon"]["keys_pending"] == []
        out = c.keys_cli("revoke", key_id)
        assert out.returncode == 0 and "revoked" in out.stdout, out.stderr
        again = json_out(c.keys_cli("revoke", key_id, "--json"))  # running it again is safe
        assert set(again) == {"key"} and set(again["key"]) == documented_key_keys()
        assert (again["key"]["id"], again["key"]["state"]) == (key_id, "revoked")
        wait_until(lambda: "key_revoked" in c.agent_log(), "the revoked key refused", c)
        # A revoked agent is offline to the daemon: no new job is sent to it.
        # ... and the refusal says why, with the command that lets it in again
        with pytest.raises(QueryFailed, match=f"key {key_id} is revoked by the operator.*"
                                              f"'opptune keys accept {key_id}' lets it in"):
            query(c.endpoint, "sweep", {"agent": "test-agent"}, timeout_s=5, curve=c.operator)
        assert not [a for a in c.status()["agents"] if a["alive"]]
        # 'opptune status' showed the agent offline and said nothing of its key
        assert [(k["id"], k["agent"], k["state"]) for k in
                c.status()["daemon"]["keys_refused"]] == [(key_id, "test-agent", "revoked")]
        out = opptune("status", "--config", str(c.daemon_toml))
        assert out.returncode == 0, out.stderr
        assert (f"key {key_id} of agent test-agent was revoked by the operator: its messages "
                f"are refused and it gets no jobs; to let it in again: opptune keys accept "
                f"{key_id}") in " ".join(out.stdout.split()), out.stdout
        assert c.rows("SELECT COUNT(*) FROM runs")[0][0] == stored
        out = c.keys_cli("accept", "nope")
        assert out.returncode == 2 and "no key 'nope'" in out.stderr
    finally:
        c.stop()


def test_a_revoked_agent_is_offline_for_its_key_not_heard_through_another_daemon(tmp_path):
    """Until agent_timeout_s had passed since its last message, 'opptune status' showed a
    revoked agent as 'alive ?; see below' with 'heard ... through another daemon sharing the
    store that does not record which agents it holds (...): upgrade that daemon', where there
    was no other daemon: this one had stopped hearing it. Now at once: 'no; key revoked'."""
    c = CurveCluster(tmp_path)
    # a timeout longer than the test: the agent's last message is always within it
    c.daemon_toml = write_toml(tmp_path / "daemon.toml", {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5,
        "agent_timeout_s": 600.0, "curve": "on", "keys_dir": str(c.keys)})
    try:
        c.start_daemon()
        c.wait_keys()
        c.start_agent()
        wait_until(lambda: "keys accept" in c.agent_log(), "the agent's refusal", c)
        (key,) = json_out(c.keys_cli("list", "--json"))["keys"]
        assert c.keys_cli("accept", key["id"]).returncode == 0
        c.wait_for(lambda st: [a["alive"] for a in st["agents"]] == [True], what="hello")
        assert c.keys_cli("revoke", key["id"]).returncode == 0
        wait_until(lambda: "key_revoked" in c.agent_log(), "the revoked key refused", c)
        (row,) = json_out(opptune("status", "--config", str(c.daemon_toml), "--json"))["agents"]
        assert (row["alive"], row["via"], row["via_unrecorded"]) == (False, None, False), row
        assert row["last_seen_s"] < 600
        out = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "status", "--config",
                              str(c.daemon_toml)], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "250"})  # a row on one line
        assert out.returncode == 0, out.stderr
        (cells,) = [ln for ln in out.stdout.splitlines() if "test-agent" in ln and "│" in ln]
        assert "│ no; key revoked │" in cells and "another daemon" not in out.stdout, out.stdout
    finally:
        c.stop()


def test_key_files_wider_than_0600_are_refused_with_the_fix(tmp_path):
    c = CurveCluster(tmp_path)
    c.keys.mkdir(mode=0o700)
    from opptune.shared.curve import ensure_keypair
    ensure_keypair(c.keys / "server.key")
    os.chmod(c.keys / "server.key", 0o644)
    d = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--config",
                        str(c.daemon_toml)], capture_output=True, text=True, timeout=60)
    assert d.returncode == 2
    assert d.stderr.strip().endswith(f"chmod 600 {c.keys / 'server.key'}"), d.stderr
    assert "0644" in d.stderr and "Traceback" not in d.stderr
    assert not c.db.exists()
    key = tmp_path / "agent-state" / "agent.key"
    ensure_keypair(key)
    os.chmod(key, 0o640)
    os.chmod(c.keys / "server.key", 0o600)
    a = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(c.agent_toml)],
                       capture_output=True, text=True, timeout=60)
    assert a.returncode == 2, a.stderr
    assert f"0640" in a.stderr and f"chmod 600 {key}" in a.stderr and "Traceback" not in a.stderr
    # without the daemon's public key the agent says where to get it
    write_toml(c.agent_toml, {"agent_id": "x", "daemon": "tcp://10.1.2.3:5555",
                              "state_dir": str(tmp_path / "s2"), **AGENT_RUN_AS})
    a = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(c.agent_toml)],
                       capture_output=True, text=True, timeout=60)
    assert a.returncode == 2 and "daemon_public_key" in a.stderr
    assert "opptune keys server" in a.stderr
    write_toml(c.agent_toml, {"agent_id": "x", "daemon": "tcp://10.1.2.3:5555",
                              "state_dir": str(tmp_path / "s2"), "daemon_public_key": "garbage",
                              **AGENT_RUN_AS})
    a = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(c.agent_toml)],
                       capture_output=True, text=True, timeout=60)
    assert a.returncode == 2 and "key 'daemon_public_key'" in a.stderr
    assert "neither a Z85 public key" in a.stderr and "Traceback" not in a.stderr


def test_an_unreadable_key_ring_stops_the_daemon_naming_the_file_and_the_fix(tmp_path):
    c = CurveCluster(tmp_path)
    c.keys.mkdir(mode=0o700)
    ring = c.keys / "agents.json"
    ring.write_text('{"keys": [{"key": "abc"')  # cut short, as by a full disk
    d = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--config",
                        str(c.daemon_toml)], capture_output=True, text=True, timeout=60)
    assert d.returncode == 2, d.stderr
    assert str(ring) in d.stderr and "restore it from a backup, or move it away" in d.stderr
    assert "Traceback" not in d.stderr and not c.db.exists()
    assert ring.read_text() == '{"keys": [{"key": "abc"'  # left as it was


@pytest.mark.parametrize("endpoint, auto", [
    ("tcp://127.0.0.1:5555", False), ("tcp://localhost:5555", False), ("tcp://[::1]:5", False),
    ("ipc:///run/opptune.sock", False), ("tcp://0.0.0.0:5555", True), ("tcp://*:5555", True),
    ("tcp://10.0.0.7:5555", True), ("tcp://board-1.lan:5555", True)])
def test_curve_auto_is_on_for_every_endpoint_that_leaves_the_machine(endpoint, auto):
    from opptune.shared.curve import curve_enabled
    assert curve_enabled("auto", endpoint) is auto
    assert curve_enabled("on", endpoint) and not curve_enabled("off", endpoint)


def test_daemons_sharing_a_keys_dir_see_each_others_decisions(tmp_path):
    """README ("Fleets"): daemons share one keys_dir. An agent that speaks to daemon B waits
    there; the operator accepts it through daemon A; B lets it in without a restart, and the
    shared record keeps the decision (B's own writes do not undo it)."""
    from procs import free_endpoint
    c = CurveCluster(tmp_path)
    b_endpoint = free_endpoint()
    b_toml = write_toml(tmp_path / "daemon-b.toml", {
        "bind": b_endpoint, "database": str(tmp_path / "b.db"), "heartbeat_s": 0.5,
        "agent_timeout_s": 3.0, "auto_sweep": True, "verify_reps": 1, "curve": "on",
        "keys_dir": str(c.keys)}, {"sweep": {"size": "small", "reps": 1, "warmup": 0,
                                             "max_cores": 1}})
    agent = c.agent_toml.read_text().replace(c.endpoint, b_endpoint)
    c.agent_toml.write_text(agent)
    b = None
    try:
        c.start_daemon()
        c.wait_keys()
        b = c._spawn("opptune.daemon.service", b_toml, "daemon-b.log")
        c.start_agent()
        wait_until(lambda: "keys accept" in c.agent_log(), "the agent's key pending at B", c)
        out = c.keys_cli("accept", "test-agent")  # through daemon A
        assert out.returncode == 0 and "accepted" in out.stdout, out.stderr

        def b_done():
            try:
                st = query(b_endpoint, "status", timeout_s=1.0, curve=c.operator)
            except (DaemonUnreachable, QueryFailed):
                return False
            return bool(st["jobs"]) and all(j["state"] == "done" for j in st["jobs"])
        wait_until(b_done, "the agent's sweep stored by daemon B after the accept at A", c)
        import json
        ring = json.loads((c.keys / "agents.json").read_text())["keys"]
        assert [(e["agent"], e["state"]) for e in ring] == [("test-agent", "accepted")]
        # Revoked through A, B went on sending it jobs until agent_timeout_s ran out (the
        # agent ran them; its results were refused): B now stops at its first refusal.
        out = c.keys_cli("revoke", "test-agent")
        assert out.returncode == 0 and "revoked" in out.stdout, out.stderr
        wait_until(lambda: "key_revoked" in c.agent_log(), "the revoked key refused at B", c)
        with pytest.raises(QueryFailed, match="is revoked by the operator"):
            query(b_endpoint, "sweep", {"agent": "test-agent"}, timeout_s=5, curve=c.operator)
    finally:
        if b is not None:
            b.terminate()
            b.wait(20)
        c.stop()


def test_key_ring_writers_merge_instead_of_overwriting(tmp_path):
    """Two daemons' rings on one file: each change is merged into what the file holds, so a
    new pending key recorded by one does not undo the other's accept."""
    from opptune.daemon.keyring import KeyRing
    import zmq
    path = tmp_path / "agents.json"
    k1, k2 = (zmq.curve_keypair()[0].decode() for _ in range(2))
    a, b = KeyRing(path, "op"), KeyRing(path, "op")
    with pytest.raises(Exception, match="waits for approval"):
        a.check(k1, "board-1", "hello")
    assert b.decide("accept", "board-1")["state"] == "accepted"
    with pytest.raises(Exception, match="waits for approval"):
        a.check(k2, "board-2", "hello")  # a writes: board-1's accept must survive
    a.check(k1, "board-1", "hello")  # accepted at a too, without a restart
    import json
    states = {e["agent"]: e["state"] for e in json.loads(path.read_text())["keys"]}
    assert states == {"board-1": "accepted", "board-2": "pending"}
    assert KeyRing(path, "op").find("board-1")["state"] == "accepted"


def test_a_plain_agent_with_a_daemon_key_warns_that_a_curve_daemon_never_answers(tmp_path,
                                                                                  caplog):
    """Walking the fleet setup on one machine: daemon bound to 0.0.0.0 (CURVE on), the agent
    given daemon_public_key but the loopback endpoint, so "auto" made it plain; the daemon
    dropped it silently and the agent only said the daemon did not answer. Now it says why
    at start (and nothing when the key is not given, or curve is set explicitly)."""
    import logging
    from opptune.agent.cli import link_keys
    from opptune.shared.config import AgentConfig
    pub = tmp_path / "server.pub"
    from opptune.shared.curve import ensure_keypair
    ensure_keypair(tmp_path / "server.key")
    cfg = AgentConfig(daemon="tcp://127.0.0.1:5555", state_dir=str(tmp_path / "s"),
                      daemon_public_key=str(pub))
    with caplog.at_level(logging.WARNING, logger="opptune.agent"):
        assert link_keys(cfg, "agent.toml") is None
    (rec,) = [r for r in caplog.records if "CURVE off" in r.getMessage()]
    assert "set curve = \"on\"" in rec.getMessage() and "tcp://127.0.0.1:5555" in rec.getMessage()
    caplog.clear()
    for c in (AgentConfig(daemon="tcp://127.0.0.1:5555", state_dir=str(tmp_path / "s")),
              AgentConfig(daemon="tcp://127.0.0.1:5555", state_dir=str(tmp_path / "s"),
                          daemon_public_key=str(pub), curve="off")):
        with caplog.at_level(logging.WARNING, logger="opptune.agent"):
            assert link_keys(c, "agent.toml") is None
    assert not [r for r in caplog.records if "CURVE off" in r.getMessage()]
    on = AgentConfig(daemon="tcp://127.0.0.1:5555", state_dir=str(tmp_path / "s"),
                     daemon_public_key=str(pub), curve="on")
    assert link_keys(on, "agent.toml")[0] == read_public_key(str(pub), "k")


def test_a_refused_key_is_listed_while_it_is_its_agents_newest():
    """A board given a new key (reinstalled) whose old one was revoked is let in by the new
    one: status must not tell the operator to accept the old key."""
    from opptune.daemon.keyring import refused_keys

    def key(id_, agent, state, at):
        return {"id": id_, "agent": agent, "state": state, "first_seen": at, "updated": at}
    rows = [key("k1", "xu4", "revoked", 1.0), key("k2", "xu4", "accepted", 2.0),
            key("k3", "rpi", "accepted", 1.0), key("k4", "rpi", "rejected", 3.0),
            key("k5", "c2", "pending", 1.0)]
    assert [k["id"] for k in refused_keys(rows)] == ["k4"]
    rows.append(key("k6", "xu4", "revoked", 4.0))  # and its new key revoked too
    assert [k["id"] for k in refused_keys(rows)] == ["k4", "k6"]


@pytest.mark.parametrize("bind, curve, warned", [
    ("tcp://0.0.0.0:0", "off", True), ("tcp://0.0.0.0:0", "auto", False),
    ("tcp://127.0.0.1:0", "off", False), ("ipc://{tmp}/d.sock", "off", False)])
def test_curve_off_on_an_address_others_reach_warns_once_at_start(tmp_path, caplog, bind,
                                                                    curve, warned):
    """A daemon told curve = "off" on a public bind started without a word: agents'
    messages travel in clear and anyone reaching the port may speak as any agent. One
    warning names the risk and the setting; loopback, ipc:// and CURVE on say nothing."""
    import logging

    from opptune.daemon.service import Daemon
    from opptune.shared.config import DaemonConfig
    with caplog.at_level(logging.WARNING, logger="opptune.daemon"):
        d = Daemon(DaemonConfig(bind=bind.format(tmp=tmp_path), curve=curve,
                                database=str(tmp_path / "d.db"),
                                keys_dir=str(tmp_path / "keys")))
        d.close()
    said = [r.getMessage() for r in caplog.records if "CURVE is off" in r.getMessage()]
    assert len(said) == int(warned), said
    if warned:
        assert 'curve = "off"' in said[0] and "tcp://0.0.0.0:0" in said[0]
        assert 'set curve = "auto"' in said[0] and "unencrypted" in said[0]


def test_a_curve_daemon_that_cannot_bind_leaves_no_keys_behind(tmp_path):
    """The key pairs are made before the bind (the socket needs the secret key): a daemon
    whose address is taken exits 2 and leaves nothing it made (keys, their directories)."""
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        state = tmp_path / "state"
        toml = write_toml(tmp_path / "daemon.toml", {
            "bind": f"tcp://127.0.0.1:{port}", "curve": "on",
            "database": str(state / "db" / "opptune.db")})
        proc = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--config",
                               str(toml)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "address is in use" in proc.stderr
    assert not state.exists(), sorted(map(str, state.rglob("*")))


def test_a_relative_daemon_public_key_path_is_taken_from_the_files_directory(tmp_path):
    """Walking a board: 'daemon_public_key = "daemon.pub"' beside agent.toml was looked for
    where the agent was started (/ under systemd), unlike state_dir and the file's other
    paths, and the agent stopped: "'daemon.pub' is neither a Z85 public key (40 characters)
    nor a readable file (No such file or directory)". It is read from the file's directory."""
    from opptune.shared.curve import ensure_keypair
    from procs import wait_until
    etc = tmp_path / "etc"
    etc.mkdir()
    ensure_keypair(tmp_path / "server.key")
    (etc / "daemon.pub").write_text((tmp_path / "server.pub").read_text())
    config = write_toml(etc / "agent.toml", {
        "daemon": "tcp://127.0.0.1:9", "curve": "on", "daemon_public_key": "daemon.pub",
        "state_dir": "state", "virtual_board": "rpi4", "bench_kernels": ["pi_integrate"],
        **AGENT_RUN_AS})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    log = tmp_path / "agent.log"
    with open(log, "wb") as fh:
        agent = subprocess.Popen([sys.executable, "-m", "opptune.agent", "--config",
                                  str(config)], cwd=elsewhere, stdout=fh,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: "connecting to tcp://" in log.read_text() or agent.poll() is not None,
                   "the agent connecting", 60, log.read_text)
        assert agent.poll() is None, log.read_text()
    finally:
        agent.terminate()
        agent.wait(30)
    assert "CURVE on: this agent's key is " in log.read_text()
