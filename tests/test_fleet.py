"""Fleets on PostgreSQL, with real processes over real sockets: a daemon storing a real agent's
sweep in PostgreSQL; two daemons sharing one database with an agent that fails over when one
is killed with SIGKILL (every result stored, none twice); and fitting claimed once across
daemons."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import msgpack
import pytest

from opptune.daemon.service import Daemon
from opptune.daemon.store import Group, ResultIn
from opptune.shared.config import DaemonConfig
from opptune.shared.records import RunRecord
from opptune.daemon.client import QueryFailed, query
from procs import Cluster, all_jobs_complete, db_rows, expected, free_endpoint, received, \
    recommendations_final, write_toml
from test_sweep_cli import opptune

KERNELS = ("pi_integrate", "triad")
CORES = min(2, os.cpu_count() or 1)


def _exactly_once(db, n_expected: int) -> None:
    rows = db_rows(db, "SELECT job_id, seq, COUNT(*) FROM runs WHERE job_id IN "
                       "(SELECT job_id FROM jobs) GROUP BY job_id, seq")
    assert len(rows) == n_expected, f"{len(rows)} distinct results, expected {n_expected}"
    assert not [r for r in rows if r[2] != 1], "results stored more than once"


@pytest.mark.integration
def test_a_sweep_is_stored_fitted_and_recommended_on_postgresql(tmp_path, pg_url):
    c = Cluster(tmp_path, kernels=KERNELS, reps=2, max_cores=CORES, database=pg_url)
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: recommendations_final(s, len(KERNELS)), timeout=120,
                        what="verified recommendations for every kernel")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    n_runs = len(KERNELS) * CORES * 2
    assert expected(st) == n_runs and received(st) == n_runs
    _exactly_once(pg_url, n_runs)
    for workload, cores, packed in db_rows(pg_url, "SELECT workload, cores, record_msgpack "
                                                   "FROM runs WHERE job_id IN "
                                                   "(SELECT job_id FROM jobs)"):
        rec = RunRecord.from_dict(msgpack.unpackb(packed))
        assert rec.workload == workload in KERNELS and rec.cores == cores and rec.ok
    assert {f["group"]["workload"] for f in st["fits"]} == set(KERNELS)
    assert len(db_rows(pg_url, "SELECT id FROM recommendations")) == len(KERNELS)
    # the status names the database without a password
    assert st["daemon"]["database"] == pg_url


class Fleet(Cluster):
    """Two daemons on one database (PostgreSQL's URL, or an SQLite file's path); the agent
    lists both. ``options`` replace the defaults of :class:`Cluster`."""

    def __init__(self, tmp, url, **options):
        super().__init__(tmp, **{"kernels": KERNELS, "reps": 6, "max_cores": CORES, **options},
                         database=url)
        self.endpoints = [self.endpoint, free_endpoint()]
        self.tomls = [self.daemon_toml, tmp / "daemon2.toml"]
        text = self.daemon_toml.read_text().replace(self.endpoints[0], self.endpoints[1])
        self.tomls[1].write_text(text)
        self.agent_toml.write_text(self.agent_toml.read_text() +
                                   f'failover_daemons = ["{self.endpoints[1]}"]\n')
        self.daemons: list[subprocess.Popen | None] = [None, None]

    def start_daemons(self) -> None:
        """Start both and wait until each answers: an agent started sooner fails over from
        the one still starting (under load, 1.6 s), and the test's daemon 0 never has it."""
        try:
            for i in (0, 1):
                self.daemons[i] = self._spawn("opptune.daemon.service", self.tomls[i],
                                              f"daemon{i}.log")
            for i in (0, 1):
                self.use(i)
                self.wait_for(lambda s: True, 60, f"daemon {i} to answer")
        except BaseException:
            # the tests call this before their try: a daemon that fails to start (its port
            # taken meanwhile) must not leave the other one running
            self.stop()
            raise
        self.use(0)

    def use(self, i: int) -> None:
        """Query (and stop) daemon ``i`` from now on."""
        self.endpoint, self.daemon = self.endpoints[i], self.daemons[i]

    def stop(self):
        codes = super().stop()
        for proc in self.daemons:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
        return codes

    def logs(self) -> str:
        out = [super().logs()]
        for i in (0, 1):
            p = self.tmp / f"daemon{i}.log"
            if p.exists():
                out.append(f"--- daemon{i}.log\n" + "\n".join(p.read_text().splitlines()[-30:]))
        return "\n".join(out)


@pytest.mark.integration
def test_the_agent_fails_over_to_the_second_daemon_and_loses_nothing(tmp_path, pg_url):
    """SIGKILL the daemon the agent talks to mid-sweep: the agent moves to the other daemon
    on the same database; every result arrives, none is stored twice."""
    f = Fleet(tmp_path, pg_url)
    f.start_daemons()
    f.use(0)
    f.start_agent()
    try:
        st = f.wait_for(lambda s: 2 <= received(s) < expected(s) - 4, timeout=60,
                        what="the sweep under way on daemon 0")
        n_expected = expected(st)
        f.kill("daemon")
        killed_at = time.time()
        f.use(1)
        st = f.wait_for(lambda s: all_jobs_complete(s, len(KERNELS)), timeout=120,
                        what="every result through daemon 1")
        agent_log = (tmp_path / "agent.log").read_text()
        assert f"failing over to {f.endpoints[1]}" in agent_log
        assert received(st) == n_expected
    finally:
        f.stop()
    _exactly_once(pg_url, n_expected)
    # results came through both daemons: some before the kill, the rest after
    assert 0 < len(db_rows(pg_url, "SELECT msg_id FROM runs WHERE received < ?",
                           killed_at)) < n_expected


def _agent(st, agent="test-agent"):
    return next((a for a in st["agents"] if a["id"] == agent), None)


@pytest.mark.integration
def test_each_daemon_says_through_which_daemon_an_agent_is_online(tmp_path, pg_url):
    """Two daemons on one database, the agent connected to daemon 0 (its hello after daemon 1
    started): daemon 1's status says the agent is online through daemon 0, and a sweep or
    characterize through daemon 1 says to send it there; once the agent moves to daemon 1
    (daemon 0 stopped) daemon 1 has it connected."""
    # a loaded machine may hold a daemon's store writes back for seconds: not what this tests
    f = Fleet(tmp_path, pg_url, auto_sweep=False, extra_daemon={"agent_timeout_s": 10.0})
    f.start_daemons()
    f.use(1)
    f.wait_for(lambda s: True, timeout=30, what="daemon 1 up")
    f.use(0)
    f.start_agent()
    try:
        st = f.wait_for(lambda s: (_agent(s) or {}).get("alive"), timeout=60,
                        what="the agent connected to daemon 0")
        assert _agent(st)["via"] is None
        f.use(1)
        st = f.wait_for(lambda s: _agent(s) is not None and _agent(s)["via"], timeout=30,
                        what="daemon 1 seeing the agent online through daemon 0")
        a = _agent(st)
        assert a["alive"] is False and a["via"] == f.endpoints[0]
        assert a["last_seen_s"] is not None and a["last_seen_s"] <= 10.0
        assert a["board"] == _agent(query(f.endpoints[0], "status"))["board"]
        out = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "status", "--daemon",
                              f.endpoints[1]], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "300"})  # a row on one line
        assert out.returncode == 0, out.stderr
        row = next(ln for ln in out.stdout.splitlines() if "test-agent" in ln and "│" in ln)
        assert f"no; online through {f.endpoints[0]}" in row, out.stdout
        said = (f"agent 'test-agent' is connected to the daemon at {f.endpoints[0]}, not to "
                f"this one: send the request there (opptune ... --daemon {f.endpoints[0]})")
        out = opptune("sweep", "--daemon", f.endpoints[1], "--agent", "test-agent",
                      "--workload", "pi_integrate")
        assert out.returncode == 1
        assert out.stderr.strip().splitlines() == [
            f"opptune sweep: daemon refused the query: {said}"]
        with pytest.raises(QueryFailed) as refused:
            query(f.endpoints[1], "characterize", {"agent": "test-agent"})
        assert said in str(refused.value)
        assert db_rows(pg_url, "SELECT job_id FROM jobs") == []  # nothing was sent
        # daemon 0 stops (its row goes with it); the agent fails over to daemon 1
        f.use(0)
        f.daemon.send_signal(signal.SIGTERM)
        assert f.daemon.wait(20) == 0
        f.use(1)
        st = f.wait_for(lambda s: (_agent(s) or {}).get("alive"), timeout=60,
                        what="the agent connected to daemon 1")
        assert _agent(st)["via"] is None
        assert db_rows(pg_url, "SELECT endpoint FROM daemons") == [(f.endpoints[1],)]
    finally:
        codes = f.stop()
    assert codes == {"agent": 0, "daemon": 0}, f.logs()


def test_requests_for_an_agent_another_daemon_holds_name_that_daemon(pg_url):
    """Every request that needs the agent connected (sweep, tune, recommend --apply, and one
    naming an agent this daemon never knew) names the daemon that holds it; once that daemon
    stopped, the usual refusals."""
    from opptune.daemon.errors import HandlerError
    from opptune.daemon.goal_query import apply
    d1, d2 = _daemon(pg_url), _daemon(pg_url)
    try:
        now = time.time()
        d1._beat(now)
        d2._beat(now)
        d1.store.save_platform("p1", {"n_cpus": 2}, now)
        d1.store.save_agent("a1", "p1", ["w"], "t", now, daemon=d1.instance)
        said = f"agent 'a1' is connected to the daemon at {d1.endpoint}, not to this one"
        # d2 started before a1's hello: it learns of it from the store
        with pytest.raises(HandlerError) as refused:
            d2.start_sweep("a1", ["w"])
        assert refused.value.code == "unknown_agent" and said in str(refused.value)
        assert d2.registry.get("a1") is not None  # now known, not connected here
        for request in (lambda: d2.start_sweep("a1", ["w"]),
                        lambda: d2.tuning.start({"agent": "a1", "workload": "w"}),
                        lambda: apply(d2, {"agent": "a1"})):
            with pytest.raises(HandlerError) as refused:
                request()
            assert refused.value.code == "agent_offline" and said in str(refused.value)
        assert "; nothing was pushed: send the request there" in str(refused.value)
        assert [(a["id"], a["via"]) for a in d2.status()["agents"]] == [("a1", d1.endpoint)]
        d1.close()  # its row goes: a1 is online through no daemon that answers
        with pytest.raises(HandlerError) as refused:
            d2.start_sweep("a1", ["w"])
        assert " or through one that stopped since: send the request to the daemon the " \
               "agent's configuration names" in str(refused.value)
        assert [a["via"] for a in d2.status()["agents"]] == [None]
    finally:
        d1.close()
        d2.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_daemon_without_a_heartbeat_is_shown_not_answering(tmp_path, request, backend):
    """A daemon killed (no clean stop) kept its row in ``daemons`` and nothing said it was
    gone: the status lists the fleet, a daemon whose heartbeat is older than
    agent_timeout_s as not answering, its row kept; its next heartbeat makes it answer."""
    url = (str(tmp_path / "fleet.db") if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    d1, d2 = _daemon(url), _daemon(url)
    try:
        now = time.time()
        d1._beat(now - 30)  # its last heartbeat: killed 30 s ago (agent_timeout_s 10)
        d2._beat(now)
        fleet = {f["instance"]: f for f in d2.status()["daemon"]["fleet"]}
        assert set(fleet) == {d1.instance, d2.instance}
        assert fleet[d1.instance]["endpoint"] == d1.endpoint
        assert fleet[d1.instance]["answering"] is False
        assert fleet[d1.instance]["last_seen_s"] >= 30
        assert fleet[d2.instance]["answering"] is True
        d1._beat(time.time())
        assert all(f["answering"] for f in d2.status()["daemon"]["fleet"])
    finally:
        d1.close()
        d2.close()


@pytest.mark.parametrize("forget_s", [3600.0, 0.0])
def test_a_daemon_silent_past_fleet_forget_s_is_dropped_and_logged(tmp_path, caplog,
                                                                    forget_s):
    """A daemon stopped for good at an endpoint never used again was listed, not answering,
    in every status forever. A daemon's heartbeat now drops the rows silent for longer than
    fleet_forget_s, with a log line naming it; 0 keeps them (until a daemon starts at the
    endpoint); one silent for less stays either way."""
    import logging

    url = str(tmp_path / "fleet.db")
    config = DaemonConfig(bind="tcp://127.0.0.1:0", database=url, auto_recommend=False,
                          fleet_forget_s=forget_s)
    d1, d2, d3 = _daemon(url), _daemon(url), Daemon(config)
    try:
        now = time.time()
        d1._beat(now - 7200)  # gone for 2 h
        d2._beat(now - 60)  # silent for a minute
        with caplog.at_level(logging.INFO, logger="opptune.daemon"):
            d3._beat(now)
        fleet = d3.status()["daemon"]["fleet"]
        kept = {d2.instance, d3.instance} | ({d1.instance} if forget_s == 0 else set())
        assert {f["instance"] for f in fleet} == kept
        assert d3.status()["daemon"]["fleet_forget_s"] == forget_s
        forgot = [r.getMessage() for r in caplog.records if "forgot daemon" in r.getMessage()]
        if forget_s:
            assert len(forgot) == 1 and forgot[0].startswith(
                f"forgot daemon {d1.instance} at {d1.endpoint} of the fleet: no heartbeat "
                "since ")
            assert forgot[0].endswith("(over fleet_forget_s = 3600 s)")
        else:
            assert forgot == []
    finally:
        for d in (d1, d2, d3):
            d.close()


def test_a_wildcard_bind_is_recorded_with_the_hosts_name():
    """What other daemons name to the operator must reach this one from another host."""
    from opptune.daemon.service import reachable_endpoint
    host = socket.gethostname()
    assert reachable_endpoint("tcp://0.0.0.0:5555") == f"tcp://{host}:5555"
    assert reachable_endpoint("tcp://[::]:5556") == f"tcp://{host}:5556"
    assert reachable_endpoint("tcp://10.1.2.3:5555") == "tcp://10.1.2.3:5555"
    assert reachable_endpoint("ipc:///run/opptune.sock") == "ipc:///run/opptune.sock"


def test_a_bad_failover_endpoint_is_refused_naming_the_key(tmp_path):
    cfg = write_toml(tmp_path / "agent.toml", {"daemon": "tcp://127.0.0.1:5555",
                                               "failover_daemons": ["localhost:5556"]})
    out = subprocess.run([sys.executable, "-m", "opptune.agent", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "failover_daemons" in out.stderr and "localhost:5556" in out.stderr
    assert "Traceback" not in out.stderr


def _daemon(url: str) -> Daemon:
    return Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=url, auto_recommend=False))


def test_two_daemons_never_fit_the_same_group_at_once(pg_url):
    """Each daemon asks to fit the same groups; each group is fitted by one daemon at a time,
    the other fits it after (its rows may have grown), and different groups fit on both."""
    d1, d2 = _daemon(pg_url), _daemon(pg_url)
    try:
        groups = [Group("p", w, "s", "") for w in ("w1", "w2")]
        items = []
        for g in groups:
            for c in (1, 2, 3, 4):
                rec = RunRecord(platform="p", workload=g.workload, input="s", cores=c,
                                cpus=list(range(c)), threads=c, rep=0, time_s=1 + 4 / c)
                items.append(ResultIn(f"{g.workload}-{c}", "a1", None, c, rec, rec.to_dict()))
        d1.store.insert_results(items, time.time())
        g1, g2 = groups
        d1.recommender.request_fit(g1)
        d2.recommender.request_fit(g1)  # d1 holds g1: d2's request waits
        d2.recommender.request_fit(g2)  # g2 is free: d2 fits it beside d1
        assert g1 in d2.recommender._waiting and g2 not in d2.recommender._waiting
        out1 = d1.fitter.wait_outcome(60)
        out2 = d2.fitter.wait_outcome(60)
        assert out1.request.group == g1 and out2.request.group == g2
        assert d2.fitter.wait_outcome(0.2) is None  # g1 was not submitted on d2
        d2.recommender.on_fit(out2)
        assert g1 in d2.recommender._waiting  # still d1's
        d1.recommender.on_fit(out1)  # saved and released
        d2.recommender.retry_waiting()
        out = d2.fitter.wait_outcome(60)
        assert out is not None and out.request.group == g1
        d2.recommender.on_fit(out)
        assert not d2.recommender._waiting
        assert {f["workload"] for f in d1.store.fits()} == {"w1", "w2"}
        assert len(db_rows(pg_url, "SELECT id FROM fits WHERE workload='w1'")) == 2
        assert db_rows(pg_url, "SELECT owner FROM fit_claims ORDER BY workload") == \
            [(None,), (None,)]
    finally:
        d1.close()
        d2.close()


@pytest.mark.parametrize("url, says", [
    ("postgresql://ops:hunter2@db.example:notaport/opptune", "not a valid URL"),
    ("postgresql://ops:hunter2@db.example", "names no database"),
    ("mysql://ops:hunter2@db.example/opptune", "mysql:// is not a database"),
])
def test_a_bad_database_url_is_refused_in_one_line_without_its_password(tmp_path, url, says):
    cfg = write_toml(tmp_path / "daemon.toml", {"bind": free_endpoint(), "database": url})
    out = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "'database'" in lines[0]
    assert "hunter2" not in out.stderr


def test_an_unreachable_database_says_so_and_leaves_nothing(tmp_path):
    url = f"postgresql://ops:hunter2@127.0.0.1:{free_endpoint().rsplit(':', 1)[1]}/opptune"
    cfg = write_toml(tmp_path / "daemon.toml", {"bind": free_endpoint(), "database": url})
    out = subprocess.run([sys.executable, "-m", "opptune.daemon.service", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 1
    assert "cannot connect to the database" in out.stderr and "hunter2" not in out.stderr
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.toml"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_hello_of_another_board_held_through_another_daemon_is_told_apart(tmp_path, request,
                                                                             backend):
    """The store keeps the holder's hashed machine and boot ids (schema 20): a daemon of the
    fleet that did not hear the holder takes the holder's own hello failing over to it (the
    same board), and refuses another board's while the holder's daemon heard it within
    agent_timeout_s, naming that daemon; once that has passed the other board's is taken."""
    url = (str(tmp_path / "fleet.db") if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    d1, d2 = _daemon(url), _daemon(url)
    try:
        now = time.time()
        d1._beat(now)
        d2._beat(now)
        d1.store.save_platform("p1", {"hostname": "rpi", "n_cpus": 4}, now)
        d1.store.save_agent("vm", "p1", ["w"], "t", now, daemon=d1.instance, machine="m1",
                            boot="b1")
        d1.store.save_agent("pi", "p1", ["w"], "t", now, daemon=d1.instance, machine="m9",
                            boot="b9")  # another id held there: not this one's record
        row = d2.store.agent("vm")
        assert (row["machine"], row["boot"], row["daemon"]) == ("m1", "b1", d1.instance)
        claim = d2.registry.claim_elsewhere
        assert claim("vm", b"x", "p1", {}, None, now + 1, "m1", "b1") is None  # fail-over
        assert claim("vm", b"x", "p1", {}, None, now + 1) is None  # says no ids: as before
        for other in ({"machine": "m2", "boot": "b2"}, {"machine": "m1", "boot": "b2"}):
            held, via = claim("vm", b"y", "p1", {}, None, now + 1, **other)
            assert via == d1.endpoint and (held.board, held.machine) == ("rpi", "m1")
        assert claim("vm", b"z", "p2", {}, None, now + 1) is not None  # another platform
        # the refused board is heard, without raising the record's last_seen (the holder's)
        assert d2.registry.seen("vm", b"z", now + 2) is not None
        assert d2.registry.take_dirty() == {}
        timeout = d2.registry.timeout_s
        d1._beat(now + timeout + 2)  # its daemon answers; the holder was not heard since
        assert d2.registry.seen("vm", b"z", now + timeout + 2) is None  # says hello again
        assert claim("vm", b"y", "p1", {}, None, now + timeout + 2, "m2", "b2") is None
    finally:
        d1.close()
        d2.close()


@pytest.mark.integration
def test_a_second_board_of_one_id_is_refused_by_another_daemon_of_the_fleet(tmp_path):
    """Two boards of one platform and agent id, each saying hello to another daemon of a
    fleet on one store: the second daemon, which knew only its own connections, took the
    second board's hello and the record of the id (its last_seen, its holder) went back and
    forth between them. Now it refuses it (agent_id_in_use, naming the daemon the holder is
    connected to, in the second board's log and in its status), the store's record stays the
    first board's, and once the first board stops the second takes the id."""
    from opptune.agent.machine_id import app_specific
    from opptune.agent.virtual_board import make_tree
    from opptune.daemon.status_view import clash_text
    from procs import AGENT_RUN_AS
    from test_agent_id_clash import _clash, _ids
    import uuid

    machines = [uuid.uuid4(), uuid.uuid4()]
    roots = [make_tree("rpi4", str(tmp_path / f"board{i}")) for i in (1, 2)]
    for root, machine in zip(roots, machines):
        _ids(root, machine, uuid.uuid4())
    # a loaded machine may hold a daemon's store writes back for seconds: not what this tests
    f = Fleet(tmp_path, str(tmp_path / "fleet.db"), auto_sweep=False,
              extra_daemon={"agent_timeout_s": 10.0},
              extra_agent={"agent_id": "vm", "virtual_board": "rpi4", "sysfs_root": roots[0]})
    second = write_toml(tmp_path / "agent2.toml", {
        "agent_id": "vm", "daemon": f.endpoints[1], "state_dir": str(tmp_path / "agent2-state"),
        "heartbeat_s": 0.5, "bench_kernels": ["pi_integrate"], "virtual_board": "rpi4",
        "sysfs_root": roots[1], **AGENT_RUN_AS})
    agent2_log = tmp_path / "agent2.log"
    f.start_daemons()
    f.use(0)
    f.start_agent()
    other = None
    try:
        st = f.wait_for(lambda s: (_agent(s, "vm") or {}).get("alive"), timeout=60,
                        what="the first board connected to daemon 0")
        platform = _agent(st, "vm")["platform"]
        f.use(1)
        f.wait_for(lambda s: (_agent(s, "vm") or {}).get("via") == f.endpoints[0], timeout=30,
                   what="daemon 1 seeing the first board through daemon 0")
        other = f._spawn("opptune.agent", second, "agent2.log")
        st = f.wait_for(lambda s: _clash(s) is not None, timeout=60,
                        what="the clash in daemon 1's status")
        held, unheld = _clash(st)["boards"]
        assert (held["holds"], held["daemon"], held["machine"]) == (
            True, f.endpoints[0], app_specific(machines[0]))
        assert (unheld["holds"], unheld["daemon"], unheld["machine"]) == (
            False, None, app_specific(machines[1]))
        assert held["platform"] == unheld["platform"] == platform
        text = clash_text(_agent(st, "vm"))
        assert f"machine {held['machine'][:8]}) holds it through the daemon at " \
               f"{f.endpoints[0]} and gets the jobs" in text, text
        out = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "status", "--daemon",
                              f.endpoints[1]], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "300"})
        assert out.returncode == 0 and text in out.stdout, out.stdout + out.stderr
        f.wait_for(lambda s: "agent_id_in_use" in agent2_log.read_text(), timeout=30,
                   what="the refusal in the second board's log")
        log2 = agent2_log.read_text()
        assert "is held by another agent connected to the daemon at " \
               f"{f.endpoints[0]}, board rpi4 (virtual) (platform {platform}, machine " \
               f"{held['machine'][:8]}" in log2, log2
        (line,) = [ln for ln in (tmp_path / "daemon1.log").read_text().splitlines()
                   if "is used by two agents at once" in ln]
        assert f"holds it through the daemon at {f.endpoints[0]}" in line, line
        # a while on, with both heard all along: the record is still the first board's,
        # held through daemon 0, which still has it connected
        f.wait_for(lambda s: (_clash(s) or {}).get("since_s", 0) >= 3.0, timeout=30,
                   what="three seconds of the clash")
        st0 = query(f.endpoints[0], "status")
        assert (_agent(st0, "vm") or {}).get("alive")
        # the holder's daemon never hears the second board: it shows the clash as daemon 1
        # keeps it in the store, naming daemon 1
        f.use(0)
        st0 = f.wait_for(lambda s: _clash(s) is not None, timeout=30,
                         what="the clash in daemon 0's status")
        f.use(1)
        held0, unheld0 = _clash(st0)["boards"]
        assert (held0["holds"], held0["daemon"], held0["machine"]) == (
            True, None, app_specific(machines[0]))
        assert (unheld0["holds"], unheld0["daemon"], unheld0["machine"]) == (
            False, f.endpoints[1], app_specific(machines[1]))
        assert unheld0["instance"] == unheld["instance"] and unheld0["board"] == unheld["board"]
        text0 = clash_text(_agent(st0, "vm"))
        assert f"machine {unheld['machine'][:8]}, agent instance {unheld['instance']}) is " \
               f"connected too through the daemon at {f.endpoints[1]} (its results" in text0, \
            text0
        (line,) = [ln for ln in (tmp_path / "daemon0.log").read_text().splitlines()
                   if "is used by two agents at once" in ln]
        assert f"agent instance {unheld['instance']}) connected to the daemon at " \
               f"{f.endpoints[1]}, which refuses it" in line, line
        assert db_rows(f.db, "SELECT machine, daemon FROM agents WHERE id = 'vm'") == [
            (app_specific(machines[0]), st0["daemon"]["instance"])]
        # the first board stops: past agent_timeout_s the second says hello again, takes it
        f.agent.terminate()
        assert f.agent.wait(30) == 0
        f.agent = other  # wait_for watches it from now on
        f.wait_for(lambda s: db_rows(f.db, "SELECT machine, daemon FROM agents") == [
            (app_specific(machines[1]), s["daemon"]["instance"])], timeout=60,
            what="the second board's hello taken by daemon 1")
        st = f.wait_for(lambda s: _clash(s) is None and (_agent(s, "vm") or {}).get("alive"),
                        timeout=30, what="the second board holding the id on daemon 1")
        assert _agent(st, "vm")["via"] is None
        # and daemon 1 clears the refusal it kept (at its next heartbeat)
        f.wait_for(lambda s: db_rows(f.db, "SELECT * FROM agent_clashes") == [], timeout=30,
                   what="the kept refusal cleared")
        assert "Traceback" not in (tmp_path / "daemon1.log").read_text()
    finally:
        f.stop()
        if other is not None and other.poll() is None:
            other.terminate()
            other.wait(30)


def test_a_daemon_that_does_not_hold_the_agent_shows_what_the_holder_keeps_standing(tmp_path):
    """Before, daemon 2's status said only that the agent said hello to daemon 1, and what
    it read of the store at its first look at the agent aged there. Now each status reads
    the store, which daemon 1 keeps at each hello: the holder's standings, as of when."""
    url = str(tmp_path / "fleet.db")
    d1, d2 = _daemon(url), _daemon(url)
    try:
        now = time.time()
        d1._beat(now)
        d2._beat(now)
        d1.store.save_platform("p1", {"n_cpus": 2}, now)
        d1.store.save_agent("a1", "p1", ["w"], "t", now, daemon=d1.instance)
        one = {"config_id": "cfg-1", "workload": "w", "size": "s", "cpus": [0], "freq_khz": None}
        d1.store.save_standings("a1", [one], [], now - 60)
        (a,) = d2.status()["agents"]
        assert a["via"] == d1.endpoint and a["standing_known"] is False
        assert [s["config_id"] for s in a["standings"]] == ["cfg-1"]
        assert a["standings_as_of"] == now - 60
        # the agent's next hello to daemon 1: a unit's configuration too, one dropped
        two = {**one, "config_id": "cfg-2", "target": {"kind": "unit", "unit": "web.service"}}
        d1.store.save_standings("a1", [one, two], ["cfg-0: process 7 is gone"], now)
        (a,) = d2.status()["agents"]
        assert [s["config_id"] for s in a["standings"]] == ["cfg-1", "cfg-2"]
        assert a["standings_as_of"] == now
        assert a["standings_dropped"] == ["cfg-0: process 7 is gone"]
    finally:
        d1.close()
        d2.close()
