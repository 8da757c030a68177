"""``opptune characterize`` interrupted half-way and resumed, with real processes: the CLI is
stopped with SIGINT while it waits, the daemon is killed with SIGKILL while the agent is
mid-sweep; after the daemon restarts on its database, running characterize again queues nothing
twice and the store ends with every point of every kernel exactly once. On a board without
cpufreq every run of characterize (again without a restart, after a restart of both, after
the agent's alone) says the board's own frequency and plans no frequency."""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from opptune.agent.virtual_board import make_tree
from fake_trees import fake_tree
from procs import Cluster, received

pytestmark = pytest.mark.integration

KERNELS = ("pi_integrate", "stencil", "triad")
POINTS = 4 * 3  # rpi4: 1..4 cores x min/mid/max frequency


def characterize(ep: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "opptune.daemon.cli", "characterize", "--daemon", ep,
            "--agent", "pi", "--size", "small", "--reps", "2", "--max-cores", "4", "--timeout",
            "10", *extra]


def test_interrupted_characterize_resumes_with_every_point_once(tmp_path):
    c = Cluster(tmp_path, kernels=KERNELS, auto_sweep=False, extra_agent={
        "agent_id": "pi", "virtual_board": "rpi4",
        "sysfs_root": make_tree("rpi4", str(tmp_path / "rpi4"))})
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="agent")
        cli = subprocess.Popen(characterize(c.endpoint, "--wait", "--json"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        total = len(KERNELS) * POINTS * 2
        c.wait_for(lambda s: 3 <= received(s) < total // 2, timeout=60,
                   what="a few results in")
        cli.send_signal(signal.SIGINT)  # Ctrl-C: stops waiting, not the jobs
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 130 and "Traceback" not in err, err
        assert err.count("sent: job ") == len(KERNELS)
        # with --json the answer still reaches stdout: the queued jobs' ids (it was empty)
        assert sorted(j["workload"] for j in json.loads(out)["queued"]) == sorted(KERNELS)

        c.wait_for(lambda s: received(s) < total, timeout=5, what="the sweep still going")
        c.kill("daemon")  # kill -9 with the agent mid-sweep
        c.start_daemon()

        p = subprocess.run(characterize(c.endpoint, "--wait"), capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr + c.logs()
        assert "sent: job " not in p.stdout  # nothing sent twice
        assert p.stdout.count("under way: job ") + p.stdout.count("skipped") >= 1, p.stdout

        p = subprocess.run(characterize(c.endpoint), capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[-1] == "nothing to queue: every workload is already measured"

        jobs = c.rows("SELECT workload, state, n_points, reps FROM jobs")
        assert sorted(jobs) == [(k, "done", POINTS, 2) for k in KERNELS]
        runs = c.rows("SELECT workload, cores, freq_mhz, rep FROM runs "
                      "WHERE job_id IN (SELECT job_id FROM jobs)")
        counts = collections.Counter(runs)
        assert all(v == 1 for v in counts.values()), [k for k, v in counts.items() if v > 1]
        per_kernel = collections.Counter(w for w, *_ in counts)
        assert per_kernel == {k: POINTS * 2 for k in KERNELS}
    finally:
        c.stop()


def no_cpufreq_tree(tmp_path) -> str:
    """The rpi4's tree without cpufreq, as on a KVM guest: the real agent reads its topology
    there and runs the real kernels on cpus 0-1 of this machine."""
    root = fake_tree(tmp_path, "rpi4")
    shutil.rmtree(os.path.join(root, "sys/devices/system/cpu/cpufreq"))
    for link in glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu*/cpufreq")):
        os.remove(link)
    return root


def test_a_board_without_cpufreq_is_characterised_at_its_own_frequency_after_restarts(
        tmp_path):
    # no recommendation: the tree's 4 cpus are more than this machine may have to verify on
    c = Cluster(tmp_path, kernels=("pi_integrate", "triad"), auto_sweep=False, extra_agent={
        "agent_id": "dev", "sysfs_root": no_cpufreq_tree(tmp_path)},
        extra_daemon={"auto_recommend": False})

    def run(size: str = "small", *extra: str) -> list[str]:
        p = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "characterize",
                            "--daemon", c.endpoint, "--agent", "dev", "--size", size,
                            "--reps", "2", "--max-cores", "2", "--timeout", "30", *extra],
                           capture_output=True, text=True, timeout=300)
        # --wait draws its progress on stderr for a job still running when it asks (CI 61:
        # triad was); every line there is that job's bar or its "done", nothing else
        said = [ln for ln in p.stderr.splitlines() if ln.strip()]
        progress = all(re.search(r" on vm .* runs done|^job job-\S+ \(\S+ on vm\) done: ",
                                 ln) for ln in said)
        assert p.returncode == 0 and (not said or ("--wait" in extra and progress)), \
            p.stdout + p.stderr + c.logs()
        lines = p.stdout.splitlines()
        assert lines[0] == f"characterize dev: 2 kernels at size {size}, frequencies: " \
                           "board's own", lines
        return lines

    def alive(s):
        return any(a["alive"] for a in s["agents"])

    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(alive, timeout=30, what="agent")
        # a sweep of triad on 1 core, held in the daemon while the board is away: it is no
        # characterisation of triad, so characterize queues triad, not "under way: job ..."
        c.kill("agent")
        c.agent = None
        p = subprocess.run([sys.executable, "-m", "opptune.daemon.cli", "sweep", "--daemon",
                            c.endpoint, "--agent", "dev", "--workload", "triad", "--size",
                            "small", "--reps", "2", "--max-cores", "1"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        first = run()
        # the agent away: the jobs wait in the daemon, and their lines say so
        assert [ln.split(maxsplit=3)[3].split(";")[0] for ln in first
                if ln.startswith("queued: job ")] == \
            ["pi_integrate (2 points x 2 reps)", "triad (2 points x 2 reps)"], first
        assert all("agent dev is not connected now" in ln for ln in first
                   if ln.startswith("queued: job ")), first
        assert not any(ln.startswith("under way") for ln in first), first
        c.start_agent()
        # at once again: nothing queued, every kernel under way or done
        again = run()
        assert not any(re.match(r"(sent|queued|held): job ", ln) for ln in again), again
        assert all(k in "\n".join(again[1:]) for k in ("pi_integrate", "triad")), again

        c.stop()  # SIGTERM both, as timeout does, mid-sweep or not
        c.agent = None  # stopped: wait_for checks the processes it has
        c.start_daemon()  # returns once it listens: the CLI below is refused before
        c.start_agent()
        # at once after the restart (the board as the store kept it until the agent says hello)
        assert not any(re.match(r"(sent|queued|held): job ", ln) for ln in run())
        c.wait_for(alive, timeout=30, what="the agent back")
        run("small", "--wait")
        assert run()[1:] == ["skipped (already measured): pi_integrate, triad",
                             "nothing to queue: every workload is already measured"]

        c.kill("agent")
        c.agent = None
        c.wait_for(lambda s: not alive(s), timeout=30, what="the daemon to miss the agent")
        c.start_agent()
        c.wait_for(alive, timeout=30, what="the agent's hello")
        # new jobs planned after the restarts: cores only, no frequency the board cannot set
        queued = [ln for ln in run("default") if ln.startswith("sent: job ")]
        assert len(queued) == 2 and all("(2 points x 2 reps)" in ln for ln in queued), queued
        points = [p for (text,) in c.rows("SELECT points FROM jobs") for p in json.loads(text)]
        assert len(points) == 1 + 8 and {p["freq_khz"] for p in points} == {None}
        assert c.rows("SELECT DISTINCT freq_mhz FROM runs") == [(None,)]
    finally:
        c.stop()
