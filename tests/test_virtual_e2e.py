"""End to end on a virtual board: a cores x frequency sweep is stored with observed frequencies
and energies, fitted over both axes, recommended as (cores, frequency), applied and verified;
the fake tree's cpufreq state is back to the original after the agent stops.

Real daemon and agent processes over real sockets; only the board is virtual (a fake sysfs tree
plus a workload that runs for its modelled time, see agent/virtual_board.py)."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import numpy as np
import pytest

from opptune.agent.virtual_board import BOARDS, CPUFREQ, make_tree, model_time_s
from opptune.daemon.fitter import fit_group, observations
from opptune.daemon.models import registry
from opptune.daemon.models.base import Observations
from procs import Cluster, check_verdict, recommendations_final, write_toml

pytestmark = pytest.mark.integration

STATE_FILES = ("scaling_governor", "scaling_min_freq", "scaling_max_freq", "scaling_setspeed",
               "scaling_cur_freq")


def cpufreq_state(root: str) -> dict[str, str]:
    base = Path(root) / CPUFREQ.lstrip("/")
    out = {}
    for pol in sorted(base.glob("policy*")):
        for name in STATE_FILES:
            p = pol / name
            if p.exists():
                out[f"{pol.name}/{name}"] = p.read_text().strip()
    return out


def start(tmp: Path, board: str, sweep: dict, kernels=("pi_integrate",)) -> tuple[Cluster, str]:
    root = make_tree(board, str(tmp / "board"))
    c = Cluster(tmp, kernels=kernels, extra_agent={"virtual_board": board, "sysfs_root": root})
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": True, "auto_recommend": True, "verify_reps": 2,
    }, {"sweep": {"size": "small", "reps": 2, "warmup": 0, **sweep}})
    return c, root


def check_records(c: Cluster, board: str) -> list[dict]:
    """Every stored run (sweep and verification): frequency set and observed, energy, virtual."""
    records = [msgpack.unpackb(r) for (r,) in c.rows("SELECT record_msgpack FROM runs")]
    assert records
    tables = {}
    for cl in BOARDS[board]["clusters"]:
        for cpu in cl["cpus"]:
            tables[cpu] = cl["freqs_khz"]
    for rec in records:
        assert rec["virtual"] is True, rec
        assert rec["freq_mhz"], rec
        assert all(rec["freq_mhz"] * 1000 in tables[cpu] for cpu in rec["cpus"]), rec
        observed = rec["freq_observed_mhz"]
        assert observed and all(v == rec["freq_mhz"] for v in observed.values()), rec
        assert rec["energy_j"] > 0 and rec["energy_source"], rec
        assert rec["time_s"] > 0
    return records


def test_cores_by_frequency_sweep_on_rpi4(tmp_path):
    board = "rpi4"
    c, root = start(tmp_path, board, {"max_cores": 4, "frequency_grid": "3"})
    before = cpufreq_state(root)
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: recommendations_final(s, 1), timeout=50,
                        what="a verified recommendation")
    finally:
        codes = c.stop()  # SIGTERM: the agent restores the board's cpufreq state
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert cpufreq_state(root) == before

    records = check_records(c, board)
    sweep = c.rows("SELECT cores, freq_mhz, time_s, energy_j FROM runs "
                   "WHERE job_id IN (SELECT job_id FROM jobs)")
    # 3 evenly spread frequencies of the Pi's table (600, 750, 1000, 1200, 1500 MHz) x 4 cores
    assert sorted({(r[0], r[1]) for r in sweep}) == [
        (n, f) for n in range(1, 5) for f in (600.0, 1000.0, 1500.0)]
    assert len(sweep) == 4 * 3 * 2
    assert len(records) == len(sweep) + 2  # plus the two verification runs

    # the fit spans both axes: times fall with frequency at every core count
    (fit,) = st["fits"]
    assert fit["quality"]["n"] == len(sweep) and fit["model"] in ("amdahl", "usl", "memwall", "combo")
    rows = c.rows("SELECT cores, freq_mhz, time_s FROM runs WHERE ok=1 AND job_id IN "
                  "(SELECT job_id FROM jobs)")
    obs = observations(rows)
    assert obs.has_freq()
    truth = BOARDS[board]["truth"]
    ipc = BOARDS[board]["clusters"][0]["ipc"]
    offered = BOARDS[board]["clusters"][0]["freqs_khz"]
    q_c, q_f = np.meshgrid(np.arange(1, 5), np.asarray(offered) / 1000.0, indexing="ij")
    target = Observations.query(q_c.ravel(), q_f.ravel())
    model, _ = fit_group(obs, target)  # what the daemon did (seeded): same model
    assert model.name == fit["model"]
    true_t = np.array([model_time_s(truth, int(n), f / 1000.0, "small", speed=ipc)
                       for n, f in zip(q_c.ravel(), q_f.ravel())])
    pred = np.asarray(model.predict(target).value, dtype=float)
    # also at the two frequencies never measured (750, 1200 MHz): within 5 % of the truth
    assert np.max(np.abs(pred / true_t - 1)) < 0.05, (pred, true_t)
    # memwall over both axes recovers the parallel fraction (k, m1, m2 trade off on 4 cores)
    mw = registry.get("memwall").fit(obs)
    assert abs(mw.describe()["params"]["f"] - truth["f"]) < 0.08, mw.describe()

    (rec,) = st["recommendations"]
    check_verdict(rec)
    assert rec["freq_khz"] in offered and len(rec["cpus"]) == rec["cores"]
    # compute-bound enough that all 4 cores at the top frequency win on this board
    assert (rec["cores"], rec["freq_khz"]) == (4, 1_500_000)
    assert rec["verified_time_s"] == pytest.approx(rec["predicted_time_s"], rel=0.1)
    ver = [r for r in records if r["freq_mhz"] == 1500.0 and r["cores"] == 4]
    assert len(ver) >= 3  # 2 sweep reps + 2 verification runs at the recommended point
    assert all(r["energy_j"] > 0 for r in ver)


def test_per_cluster_sweep_on_big_little(tmp_path):
    """odroid-xu4: LITTLE (0-3, up to 1.4 GHz) and big (4-7, up to 2 GHz) are swept apart,
    each with frequencies from its own table, and each gets its own recommendation."""
    board = "odroid-xu4"
    c, root = start(tmp_path, board, {"max_cores": 2, "per_cluster": True,
                                      "frequency_grid": "list",
                                      "frequencies": [1_000_000, 1_400_000, 2_000_000]})
    before = cpufreq_state(root)
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: recommendations_final(s, 2), timeout=50,
                        what="a verified recommendation per cluster")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert cpufreq_state(root) == before

    check_records(c, board)
    rows = c.rows("SELECT variant, cpus, freq_mhz FROM runs WHERE job_id IN "
                  "(SELECT job_id FROM jobs)")
    grid = sorted({(v, tuple(json.loads(cpus)), f) for v, cpus, f in rows})
    # 2 GHz is offered by the big cluster only; every point lies in one frequency domain
    assert grid == sorted([("cluster0", (0,), 1000.0), ("cluster0", (0,), 1400.0),
                           ("cluster0", (0, 1), 1000.0), ("cluster0", (0, 1), 1400.0),
                           ("cluster1", (4,), 1000.0), ("cluster1", (4,), 1400.0),
                           ("cluster1", (4,), 2000.0), ("cluster1", (4, 5), 1000.0),
                           ("cluster1", (4, 5), 1400.0), ("cluster1", (4, 5), 2000.0)])
    recs = {r["group"]["variant"]: r for r in st["recommendations"]}
    assert set(recs) == {"cluster0", "cluster1"}
    for variant, cpus, table in (("cluster0", range(0, 4), BOARDS[board]["clusters"][0]),
                                 ("cluster1", range(4, 8), BOARDS[board]["clusters"][1])):
        r = recs[variant]
        check_verdict(r)
        assert set(r["cpus"]) <= set(cpus) and r["freq_khz"] in table["freqs_khz"]
    # big: from its own table, above anything LITTLE offers (the fewest cores, then the lowest
    # frequency within 5 % of the best may be a table entry that was never swept, e.g. 1.9 GHz)
    assert recs["cluster1"]["freq_khz"] > 1_400_000
    assert recs["cluster0"]["freq_khz"] <= 1_400_000
    # verification runs join their cluster's group
    assert not c.rows("SELECT 1 FROM runs WHERE variant = ''")


def test_auto_recommendation_stays_within_the_swept_cores(tmp_path):
    """x86-2numa has 32 cpus; a sweep capped at 2 cores once had 29 pushed (a 15x
    extrapolation, "verified" only because its interval was -2..+863 %). What the daemon pushes
    by itself stays within the cores measured, and its log says where the model's best lies."""
    board = "x86-2numa"
    c, _ = start(tmp_path, board, {"max_cores": 2, "frequency_grid": "2"})
    c.start_daemon()
    c.start_agent()
    try:
        st = c.wait_for(lambda s: recommendations_final(s, 1), timeout=50,
                        what="a verified recommendation")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    assert {n for (n,) in c.rows("SELECT cores FROM runs WHERE job_id IN "
                                 "(SELECT job_id FROM jobs)")} == {1, 2}
    (rec,) = st["recommendations"]
    check_verdict(rec)
    assert 1 <= rec["cores"] <= 2 and len(rec["cpus"]) == rec["cores"], rec
    # compute-bound: the model's best is many more cores than were swept; said, not pushed
    assert "lies beyond the 2 cores measured: not pushed" in (c.tmp / "daemon.log").read_text()
