"""kill -9 loops with real processes: a sweep on a virtual board while the daemon, then the
agent, is killed with SIGKILL at moments drawn from a seeded RNG (so many results stored or
measured since the last restart) and started again, several times. After every kill the
agent's outbox is compared with the daemon's store (every acknowledged result stored exactly
once, every other one still pending); after the last restart the sweep completes with every
result stored once. benchmarks/chaos.py runs the same rounds many more times."""

from __future__ import annotations

import random

import pytest

from opptune.agent.virtual_board import make_tree
from procs import Cluster, kill_at_random_moment, wait_all_delivered

pytestmark = pytest.mark.integration

KERNELS = ("pi_integrate", "triad", "stencil")
KILLS = 5
REPS = 6  # 3 kernels x 4 core counts x 6 reps: 72 results, enough for the kills
POINTS = 4  # rpi4: 1..4 cores (no frequency grid)


def chaos_cluster(tmp_path, reps: int = REPS) -> Cluster:
    return Cluster(tmp_path, kernels=KERNELS, reps=reps, max_cores=4,
                   extra_daemon={"auto_recommend": False},
                   extra_agent={"agent_id": "pi", "virtual_board": "rpi4",
                                "sysfs_root": make_tree("rpi4", str(tmp_path / "rpi4"))})


@pytest.mark.parametrize("victim,seed", [("daemon", 20), ("agent", 21)])
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(tmp_path, victim, seed):
    rng = random.Random(seed)
    c = chaos_cluster(tmp_path)
    c.start_daemon()
    c.start_agent()
    try:
        rounds = []
        for _ in range(KILLS):
            r = kill_at_random_moment(c, victim, rng, n_jobs=len(KERNELS))
            assert r is not None, f"the sweep ended after {len(rounds)} kills: {rounds}"
            rounds.append(r)
        # the kills hit a sweep in progress, not one that had not started
        assert rounds[-1]["produced"] > 0, rounds
        final = wait_all_delivered(c, len(KERNELS))
        assert final["stored"] == final["produced"] == len(KERNELS) * POINTS * REPS, final
    finally:
        c.stop()
