"""The whole loop with real processes over real sockets: sweep, store, fit, recommend, apply,
verify; and no result lost or duplicated when either side is killed with SIGKILL."""

from __future__ import annotations

import os

import msgpack
import pytest

from opptune.shared.records import RunRecord
from procs import Cluster, all_jobs_complete, check_verdict, expected, received, recommendations_final

pytestmark = pytest.mark.integration

KERNELS = ("pi_integrate", "triad", "locked_update")
CORES = min(2, os.cpu_count() or 1)


def _check_runs_exactly_once(c: Cluster, n_expected: int) -> None:
    rows = c.rows("SELECT job_id, seq, COUNT(*) FROM runs WHERE job_id IN "
                  "(SELECT job_id FROM jobs) GROUP BY job_id, seq")
    assert len(rows) == n_expected, f"{len(rows)} distinct results, expected {n_expected}"
    dupes = [r for r in rows if r[2] != 1]
    assert not dupes, f"results stored more than once: {dupes}"


def test_sweep_fit_recommend_apply_verify(tmp_path):
    c = Cluster(tmp_path, kernels=KERNELS, reps=2, max_cores=CORES)
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
    _check_runs_exactly_once(c, n_runs)
    stored = c.rows("SELECT workload, cores, threads, time_s, ok, record_msgpack FROM runs "
                    "WHERE job_id IN (SELECT job_id FROM jobs)")
    assert {r[0] for r in stored} == set(KERNELS)
    assert {r[1] for r in stored} == set(range(1, CORES + 1))
    for workload, cores, threads, time_s, ok, record in stored:
        rec = RunRecord.from_dict(msgpack.unpackb(record))
        assert ok == 1 and time_s > 0 and threads == cores
        assert len(rec.cpus) == cores and rec.user_s is not None
        assert len(rec.thread_stats) == threads

    fits = {(f["group"]["workload"] if isinstance(f["group"], dict) else f["group"][1]): f
            for f in st["fits"]}
    assert set(fits) == set(KERNELS)
    for f in fits.values():
        assert f["model"] and f["quality"]["n"] >= CORES
        assert f["quality"]["mape"] >= 0

    for rec in st["recommendations"]:
        # a shared machine's times may leave the prediction interval: then "off", saying so
        check_verdict(rec)
        assert 1 <= rec["cores"] <= CORES and len(rec["cpus"]) == rec["cores"]
        assert rec["verified_time_s"] > 0 and rec["predicted_time_s"] > 0
    verified = c.rows("SELECT state, verified_time_s FROM recommendations")
    assert len(verified) == len(KERNELS) and all(s in ("verified", "unconfirmed", "off") and t > 0
                                                 for s, t in verified)


@pytest.mark.parametrize("victim", ["daemon", "agent"])
def test_sigkill_mid_sweep_loses_and_duplicates_nothing(tmp_path, victim):
    """SIGKILL the daemon (the agent's outbox resends) or the agent (it resumes its job from
    its outbox) in the middle of a sweep, restart it: every result is stored exactly once."""
    c = Cluster(tmp_path, kernels=KERNELS, reps=4, max_cores=CORES)
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: 2 <= received(s) < expected(s) - 4, timeout=60,
                        what="the sweep under way")
        n_expected = expected(st)
        c.kill(victim)
        getattr(c, f"start_{victim}")()
        c.wait_for(lambda s: all_jobs_complete(s, len(KERNELS)), timeout=120,
                   what=f"all results after the {victim} restart")
    finally:
        c.stop()
    _check_runs_exactly_once(c, n_expected)
