"""Status and control queries only from a local socket or the operator's key: a daemon bound to
every interface with CURVE off answers a loopback client and refuses one that reaches it over
plain TCP from another address, in one line the CLI prints.

Real daemon process; the "other address" is this machine's own non-loopback address (the
peer's address is what the daemon sees, so it stands for a remote client)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opptune.daemon.client import DaemonUnreachable, QueryFailed, query
from opptune.daemon.queries import is_loopback_address
from procs import Cluster, write_toml

pytestmark = pytest.mark.integration
OPPTUNE = str(Path(sys.executable).parent / "opptune")


def own_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # TEST-NET-3: any unicast route will do
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if is_loopback_address(addr) or addr == "0.0.0.0" else addr


def test_loopback_addresses():
    assert all(map(is_loopback_address, ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"]))
    assert not any(map(is_loopback_address, ["192.0.2.2", "::ffff:10.0.0.1", "fd00::2", "",
                                             None, "not-an-ip"]))


@pytest.fixture
def open_daemon(tmp_path):
    addr = own_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    c = Cluster(tmp_path, auto_sweep=False)
    port = c.endpoint.rsplit(":", 1)[1]
    write_toml(c.daemon_toml, {"bind": f"tcp://0.0.0.0:{port}", "database": str(c.db),
                               "curve": "off", "heartbeat_s": 0.5})
    c.endpoint = f"tcp://127.0.0.1:{port}"
    c.start_daemon()
    try:
        c.wait_for(lambda s: True, timeout=30, what="the daemon to answer on loopback")
        yield c, f"tcp://{addr}:{port}", addr
    finally:
        codes = c.stop()
        assert codes == {"daemon": 0}, c.logs()


def test_plain_queries_from_another_address_are_refused(open_daemon):
    c, remote, addr = open_daemon
    assert query(c.endpoint, "status", timeout_s=5)["daemon"]["database"] == str(c.db)
    for what, args in (("status", None), ("fit", {"workload": "w"}), ("report", None)):
        with pytest.raises(QueryFailed) as err:
            query(remote, what, args, timeout_s=5)
        assert err.value.code == "not_local", err.value
        assert f"plain TCP from {addr}" in str(err.value)
    # the loopback client is still served, and the refusals were counted
    st = query(c.endpoint, "status", timeout_s=5)
    assert st["daemon"]["stats"]["refused"] >= 3


def test_the_cli_prints_the_refusal_in_one_line(open_daemon, tmp_path):
    c, remote, addr = open_daemon
    res = subprocess.run([OPPTUNE, "status", "--daemon", remote], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 1 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opptune status: daemon refused the query: "
                                                   "status and control queries are answered "
                                                   "only on a local socket"), res.stderr
    ok = subprocess.run([OPPTUNE, "status", "--daemon", c.endpoint, "--json"],
                        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.lstrip().startswith("{"), ok.stderr


def test_a_daemon_bound_to_its_own_address_says_why_its_host_is_refused(tmp_path):
    """Walking a fleet: a daemon bound to the host's eth0 address with curve = "off" refused
    'opptune status --config' run on its own host, advising to run opptune on the daemon's
    host. The refusal now says the bind is the cause and what to bind instead."""
    addr = own_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    c = Cluster(tmp_path, auto_sweep=False)
    port = c.endpoint.rsplit(":", 1)[1]
    c.endpoint = f"tcp://{addr}:{port}"
    write_toml(c.daemon_toml, {"bind": c.endpoint, "database": str(c.db), "curve": "off",
                               "heartbeat_s": 0.5})
    c.start_daemon()
    try:
        with pytest.raises(QueryFailed) as err:
            deadline = time.monotonic() + 30
            while True:  # the daemon may not be listening yet
                try:
                    query(c.endpoint, "status", timeout_s=2)
                    break
                except QueryFailed:
                    raise
                except DaemonUnreachable:
                    if time.monotonic() > deadline:
                        raise
        assert err.value.code == "not_local", err.value
        text = str(err.value)
        assert "the address the daemon is bound to" in text and f"tcp://0.0.0.0:{port}" in text
        assert "run opptune on the daemon's host" not in text
    finally:
        assert c.stop() == {"daemon": 0}, c.logs()
