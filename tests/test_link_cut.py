"""The link cut and restored, for real: the agent runs in a network namespace joined to the
daemon's by a veth pair that the test makes and removes; the daemon's end goes down while the
sweep runs (packets dropped, no reset), so results pile up in the agent's outbox, heartbeats
stop and the daemon marks the agent offline. Once the link is back the agent is online again
and every result is stored exactly once. benchmarks/chaos.py --cut-seconds 180 cuts for
minutes."""

from __future__ import annotations

import pytest

from opptune.agent.virtual_board import make_tree
from procs import (Cluster, VethLink, assert_delivery, free_endpoint, netns_usable,
                   produced_results, wait_all_delivered, wait_until)

pytestmark = pytest.mark.integration

KERNELS = ("pi_integrate", "triad")
REPS = 6


@pytest.fixture
def veth():
    why = netns_usable()
    if why:
        pytest.skip(why)
    link = VethLink()
    yield link
    link.close()  # also when the test failed: no namespace or interface is left behind


def cut_cluster(tmp_path, link: VethLink) -> Cluster:
    endpoint = free_endpoint()
    port = endpoint.rpartition(":")[2]
    # the daemon listens on every address: the agent reaches it over the veth pair, the
    # test's status queries over loopback (plain TCP: the fault here is the cut, not keys)
    return Cluster(tmp_path, kernels=KERNELS, reps=REPS, max_cores=4, endpoint=endpoint,
                   agent_prefix=link.prefix,
                   extra_agent={"agent_id": "pi", "virtual_board": "rpi4", "curve": "off",
                                "daemon": f"tcp://{link.host_ip}:{port}",
                                "sysfs_root": make_tree("rpi4", str(tmp_path / "rpi4"))},
                   extra_daemon={"auto_recommend": False, "curve": "off",
                                 "bind": f"tcp://*:{port}"})


def agent_alive(st) -> bool:
    return any(a["alive"] for a in st["agents"])


def test_link_cut_then_restored_delivers_everything_once_and_agent_back_online(tmp_path, veth):
    c = cut_cluster(tmp_path, veth)
    state = tmp_path / "agent-state"
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: agent_alive(s) and s.get("jobs"), timeout=60,
                   what="the agent online over the veth pair")
        wait_until(lambda: produced_results(state) >= 3, "a few results", 60, c.logs)
        veth.cut()
        before = assert_delivery(state, c.db, context=c.logs())
        # the cut lasts until the daemon has marked the agent offline (agent_timeout_s, 3 s
        # in procs.Cluster) and results wait in the outbox: seconds, past TCP's first
        # retransmissions
        c.wait_for(lambda s: not agent_alive(s), timeout=30, what="the agent marked offline")
        # results keep being measured and wait in the outbox; nothing reaches the store
        cut_end = wait_until(lambda: (d := assert_delivery(state, c.db, context=c.logs()))
                             ["pending"] >= 3 and d, "results piling up in the outbox", 60,
                             c.logs)
        assert cut_end["stored"] <= before["produced"], (before, cut_end)
        veth.restore()
        c.wait_for(agent_alive, timeout=60, what="the agent back online")
        final = wait_all_delivered(c, len(KERNELS), timeout=180)
        assert final["stored"] == len(KERNELS) * 4 * REPS, final
    finally:
        c.stop()
