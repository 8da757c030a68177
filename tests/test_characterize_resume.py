"""``opptune characterize`` interrupted half-way and resumed, with real processes: the CLI is
stopped with SIGINT while it waits, the daemon is killed with SIGKILL while the agent is
mid-sweep; after the daemon restarts on its database, running characterize again queues nothing
twice and the store ends with every point of every kernel exactly once."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys

import pytest

from opptune.agent.virtual_board import make_tree
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
        cli = subprocess.Popen(characterize(c.endpoint, "--wait"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        total = len(KERNELS) * POINTS * 2
        c.wait_for(lambda s: 3 <= received(s) < total // 2, timeout=60,
                   what="a few results in")
        cli.send_signal(signal.SIGINT)  # Ctrl-C: stops waiting, not the jobs
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 130 and "Traceback" not in err, err
        assert out.count("queued: job ") == len(KERNELS)

        c.wait_for(lambda s: received(s) < total, timeout=5, what="the sweep still going")
        c.kill("daemon")  # kill -9 with the agent mid-sweep
        c.start_daemon()

        p = subprocess.run(characterize(c.endpoint, "--wait"), capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr + c.logs()
        assert "queued: job " not in p.stdout  # nothing sent twice
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
