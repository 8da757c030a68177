"""Two boards with one agent id (the default id is the host name: two fresh images both
"raspberrypi", two VMs named "vm"), with a real daemon and two real agents on their own state
directories and virtual boards."""

from __future__ import annotations

import pytest

from opptune.daemon.client import query
from procs import Cluster, write_toml


def _clash(st):
    return next((a["id_clash"] for a in st["agents"] if a.get("id_clash")), None)


@pytest.mark.integration
def test_two_boards_of_one_agent_id_are_named_and_both_keep_their_runs(tmp_path):
    """The daemon's socket dropped the second board's connection unread: the daemon logged
    nothing, the status showed one board, the second was idle and only its own log guessed
    why. Now the daemon logs the clash and the status flags it naming both platforms and the
    key to set; the first board keeps the id and its runs, and once it stops the second takes
    the id and its sweep is stored beside the first's."""
    c = Cluster(tmp_path, kernels=("pi_integrate",), reps=1, max_cores=2,
                extra_agent={"agent_id": "vm", "virtual_board": "rpi4"})
    second = write_toml(tmp_path / "agent2.toml", {
        "agent_id": "vm", "daemon": c.endpoint, "state_dir": str(tmp_path / "agent2-state"),
        "heartbeat_s": 0.5, "bench_kernels": ["pi_integrate"],
        "virtual_board": "odroid-xu4"})
    c.start_daemon()
    c.start_agent()
    other = None
    try:
        st = c.wait_for(lambda s: s["jobs"] and all(j["state"] == "done" for j in s["jobs"]),
                        timeout=120, what="the first board's sweep")
        first_platform = st["agents"][0]["platform"]
        other = c._spawn("opptune.agent", second, "agent2.log")
        st = c.wait_for(lambda s: _clash(s) is not None, what="the clash in the status")
        clash = _clash(st)
        (held, unheld) = clash["boards"]
        assert (held["board"], held["platform"], held["holds"]) == (
            "rpi4 (virtual)", first_platform, True)
        assert unheld["board"] == "odroid-xu4 (virtual)" and unheld["holds"] is False
        assert unheld["platform"] != first_platform and clash["key"] == "agent_id"
        # the first board keeps the id: its row, its platform
        assert [(a["id"], a["platform"]) for a in st["agents"]] == [("vm", first_platform)]
        log = (tmp_path / "daemon.log").read_text()
        (line,) = [ln for ln in log.splitlines() if "is used by two agents at once" in ln]
        assert "WARNING" in line and "board rpi4 (virtual)" in line
        assert "board odroid-xu4 (virtual)" in line and "set agent_id" in line
        # the second board's own log says it too (its hello was refused): the refusal reaches
        # it after the daemon noted the clash, so its line may come after the status shows it
        c.wait_for(lambda s: "agent_id_in_use" in (tmp_path / "agent2.log").read_text(),
                   what="the refusal in the second board's log")
        log2 = (tmp_path / "agent2.log").read_text()
        assert "board rpi4 (virtual)" in log2, log2
        # the first board stops: the second says hello again, holds the id, and its sweep is
        # stored beside the first's runs
        c.agent.terminate()
        c.agent.wait(30)
        c.agent = other  # wait_for watches it from now on
        st = c.wait_for(lambda s: s["agents"][0]["platform"] == unheld["platform"]
                        and _clash(s) is None and s["agents"][0]["alive"],
                        what="the second board holding the id")
        query(c.endpoint, "sweep", {"agent": "vm"}, timeout_s=5)
        c.wait_for(lambda s: len(s["jobs"]) == 2
                   and all(j["state"] == "done" for j in s["jobs"]),
                   timeout=120, what="the second board's sweep")
        platforms = dict(c.rows("SELECT platform, COUNT(*) FROM runs WHERE agent = 'vm' "
                                "GROUP BY platform"))
        assert set(platforms) == {first_platform, unheld["platform"]}, platforms
    finally:
        c.stop()
        if other is not None and other.poll() is None:
            other.terminate()
            other.wait(30)
