"""A command workload of the agent's configuration on a virtual board runs on this machine:
the board's clocks never reach it, so it is swept over its cores at no set clock (walk28)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rich.console import Console

from opptune.daemon.goal_cli import measuring_text, print_verdict
from opptune.shared.records import RunRecord
from procs import Cluster

WHY = ("a command runs on the agent's own machine, not on board rpi4 (virtual), whose clocks "
       "never reach it")


def opptune(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opptune.daemon.cli", *argv],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def board(tmp_path):
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False, max_cores=1, reps=1,
                extra_agent={"virtual_board": "rpi4"})
    with open(c.agent_toml, "a") as fh:
        fh.write(f'[[workloads]]\nname = "mine"\ncommand = ["{sys.executable}", "-c", '
                 '"print(1)"]\n')
    with open(c.daemon_toml, "a") as fh:  # the file ends in its [sweep] table
        fh.write('frequency_grid = "2"\n')
    c.start_daemon()
    c.start_agent()
    try:  # stopped even when they never came up
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30,
                   what="the agent")
        yield c
    finally:
        c.stop()


@pytest.mark.integration
def test_a_command_on_a_virtual_board_is_swept_at_no_set_clock(board):
    """The walk: a C OpenMP loop as [[workloads]] on a virtual rpi4 ran on this machine while
    the agent set the board's fake clocks, and its runs were stored at 600 and 1500 MHz,
    clocks that never applied to it (a recommended 1200 MHz meant nothing)."""
    ep = board.endpoint
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--workload", "mine",
                "--workload", "pi_integrate", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["frequencies_not_swept"] == (
        f"frequencies not swept for mine: {WHY}; its cores are swept at no set clock")
    assert {j["workload"]: j["n_points"] for j in data["jobs"]} == {"mine": 1,
                                                                    "pi_integrate": 2}
    board.wait_for(lambda s: len(s["jobs"]) == 2 and all(j["state"] == "done"
                                                         for j in s["jobs"]),
                   timeout=60, what="both jobs done")
    stored = {}
    for workload, freq, text, packed in board.rows(
            "SELECT workload, freq_mhz, record, record_msgpack FROM runs"):
        import msgpack
        rec = RunRecord.from_dict(json.loads(text) if packed is None
                                  else msgpack.unpackb(packed))
        stored.setdefault(workload, []).append((freq, rec))
    (freq, rec), = stored["mine"]
    assert freq is None and rec.ok and rec.freq_observed_mhz is None
    assert rec.invalid["freq_observed_mhz"] == (
        "workload 'mine' is a command: it runs on this machine, not on virtual board rpi4; "
        "its clock is not observed")
    # the modelled kernel runs at the board's clocks as before
    assert sorted(f for f, _ in stored["pi_integrate"]) == [600.0, 1500.0]
    assert all(r.freq_observed_mhz for _, r in stored["pi_integrate"])

    # a clock asked for by name is refused at once, nothing sent
    p = opptune("sweep", "--daemon", ep, "--agent", "test-agent", "--workload", "mine",
                "--freq", "1.5GHz")
    assert p.returncode == 2
    assert p.stderr.strip() == (
        f"opptune sweep: daemon refused the query: cannot sweep mine at set frequencies: "
        f"{WHY}; sweep it without --freq (over its cores at no set clock)")

    # characterize counts the sweep at no set clock as the command's measurement, says why,
    # and queues the kernel's min/mid/max only
    p = opptune("characterize", "--daemon", ep, "--agent", "test-agent", "--reps", "1",
                "--max-cores", "1", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["commands_at_no_clock"] == {"workloads": ["mine"], "why": WHY}
    assert data["skipped"] == ["mine"]
    assert [j["workload"] for j in data["queued"]] == ["pi_integrate"]
    assert f"mine: measured over the cores at no set clock ({WHY})" in p.stderr


@pytest.mark.integration
def test_a_command_on_a_virtual_board_is_tuned_at_no_set_clock(board):
    """tune planned the board's cores x clocks for the command, as sweep did before walk28:
    its jobs set fake clocks that never applied to it, and the recommendation named one."""
    p = opptune("tune", "--daemon", board.endpoint, "--agent", "test-agent", "--workload",
                "mine", "--budget", "2", "--json", "--no-progress")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)  # stdout holds only JSON
    why = f"frequencies not tuned for mine: {WHY}; its cores are tuned at no set clock"
    assert s["frequencies_not_tuned"] == why and p.stderr.count(why) == 1, p.stderr
    assert s["state"] == "done" and s["grid"] == 4 and s["measured"] == 2, s
    assert [x["freq_khz"] for x in s["steps"]] == [None, None]
    assert s["recommendation"]["freq_khz"] is None
    # no policy of the board sets its clock: the result said "policy0 governor's choice"
    own = "no set frequency (the board's own clock)"
    assert [x["clock"] for x in s["steps"]] == [own, own]
    assert (s["recommendation"]["clock"], s["recommendation"]["freq_per_policy"]) == (own, {})
    con = Console(record=True, width=300)
    print_verdict(s, con)
    out = con.export_text()
    assert any(line.startswith("│ configuration") and f") at {own}" in line
               for line in out.splitlines()), out
    assert "governor" not in out and "frequency per policy" not in out, out
    assert measuring_text(s["steps"][0]).startswith(f"measuring 1 core at {own} (")
    # the stored recommendation said "governor's" in the status and "the governor's
    # frequency" in the report (walk): they say what recommend says
    from opptune.daemon.report.build import _rec_text
    p = opptune("status", "--daemon", board.endpoint, "--agent", "test-agent", "--json")
    row, = [r for r in json.loads(p.stdout)["recommendations"]
            if r["group"]["workload"] == "mine"]
    assert row["freq_khz"] is None and row["clock"] == own
    assert f"at {own}, predicted" in _rec_text(row) and "governor" not in _rec_text(row)
    import os
    p = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "status", "--daemon",
                        board.endpoint, "--agent", "test-agent"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "COLUMNS": "300"})
    table = p.stdout[p.stdout.index("recommendations"):]
    assert "governor" not in table and "no set frequency" in table, p.stdout
    # its runs and the verification's, at no clock
    clocks = [f for w, f in board.rows("SELECT workload, freq_mhz FROM runs") if w == "mine"]
    assert len(clocks) >= len(s["steps"]) and set(clocks) == {None}, clocks
    # a modelled kernel is tuned over the board's clocks, with nothing said
    p = opptune("tune", "--daemon", board.endpoint, "--agent", "test-agent", "--workload",
                "pi_integrate", "--budget", "3", "--json", "--no-progress")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["frequencies_not_tuned"] is None and "not tuned" not in p.stderr
    assert s["grid"] > 4 and all(x["freq_khz"] for x in s["steps"]), s
    assert s["recommendation"]["clock"] is None and "clock" not in s["steps"][0]
