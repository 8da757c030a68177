"""Drift: verifications leaving the prediction interval repeatedly make the daemon measure the
workload again and recommend again, saying why."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from opptune.agent.virtual_board import BOARDS, make_tree, model_time_s, update_spec
from opptune.daemon.client import query
from opptune.daemon.drift import Drift, consecutive_off
from opptune.daemon.errors import HandlerError
from opptune.daemon.store import Group, ResultIn, open_store
from opptune.shared.config import ConfigError, DaemonConfig, load_daemon_config
from opptune.shared.records import RunRecord
from procs import Cluster, check_verdict, write_toml

G = Group("p", "w", "s", "")


def rec(cid, state, updated, agent="a1", group=G):
    return {"config_id": cid, "agent": agent, **group.as_dict(), "state": state,
            "updated": updated, "error": f"{cid} off by +50.0 %"}


def test_only_consecutive_off_verdicts_count():
    recs = [rec("c1", "off", 1), rec("c2", "verified", 2), rec("c3", "off", 3),
            rec("c4", "refused", 4), rec("c5", "off", 5), rec("x", "off", 6, agent="a2"),
            rec("y", "off", 7, group=Group("p", "w", "m", ""))]
    assert [r["config_id"] for r in consecutive_off(recs, "a1", G, None)] == ["c5", "c3"]
    assert [r["config_id"] for r in consecutive_off(recs, "a1", G, since=3)] == ["c5"]


def test_an_unconfirmed_verdict_breaks_a_run_of_off_ones():
    """"unconfirmed": the time lay within the interval, too wide to confirm the prediction.
    It left nothing, so it is no drift: it ends the run of off verdicts as "verified" did
    before the state was split from it."""
    recs = [rec("c1", "off", 1), rec("c2", "unconfirmed", 2), rec("c3", "off", 3)]
    assert [r["config_id"] for r in consecutive_off(recs, "a1", G, None)] == ["c3"]


class FakeSweeps:
    def __init__(self, error=None):
        self.calls, self.error = [], error

    def auto(self, agent, workload, size=None, frequencies=None, variant=None):
        self.calls.append((agent, [workload], size))
        self.frequencies, self.variant = frequencies, variant
        if self.error:
            raise HandlerError("agent_offline", self.error)
        return [{"job_id": f"job-{len(self.calls)}"}]


def store_with(tmp_path, states):
    st = open_store(str(tmp_path / "s.db"))
    for i, state in enumerate(states):
        st.save_recommendation({"config_id": f"c{i}", "agent": "a1", **G.as_dict(),
                                "cores": 1, "cpus": [0], "threads": 1}, now=i)
        st.update_recommendation(f"c{i}", state, now=i + 0.5, error="off by +40.0 % (...)")
    return st


def test_the_second_off_verdict_re_characterises_once(tmp_path):
    st = store_with(tmp_path, ["off"])
    sweeps = FakeSweeps()
    drift = Drift(DaemonConfig(drift_off_count=2), st, sweeps)
    assert drift.verdict("a1", G, "off", now=10) is False  # one off so far
    st.save_recommendation({"config_id": "c9", "agent": "a1", **G.as_dict(), "cores": 1,
                            "cpus": [0], "threads": 1}, now=11)
    st.update_recommendation("c9", "off", now=12, error="off by +41.0 % (...)")
    assert drift.verdict("a1", G, "off", now=13) is True
    assert sweeps.calls == [("a1", ["w"], "s")]
    (e,) = st.drift_events()
    assert e["reason"] == ("2 consecutive verifications outside the prediction interval "
                           "(last: off by +41.0 % (...))")
    assert e["job_ids"] == ["job-1"] and e["since"] == 13
    # the count starts again after the event: the next off verdict alone does nothing
    st.save_recommendation({"config_id": "c10", "agent": "a1", **G.as_dict(), "cores": 1,
                            "cpus": [0], "threads": 1}, now=14)
    st.update_recommendation("c10", "off", now=15, error="off")
    assert drift.verdict("a1", G, "off", now=16) is False
    st.close()


def test_the_re_characterisation_sweeps_the_clocks_the_group_was_measured_at(tmp_path):
    """A group swept at 600 and 1500 MHz (and once left to the governor) drifts: the new
    sweep measures it at those clocks again. Before, it took the daemon's [sweep] grid (by
    default none: the governor's clock), so the group recommended at set clocks came back
    recommended at 'the governor's frequency' and an energy goal lost its clock axis (the
    walk of 2026-11-26, pi_integrate on the virtual rpi4)."""
    st = store_with(tmp_path, ["off", "off"])
    items = []
    for i, khz in enumerate([600_000, 1_500_000, 600_000, None]):
        r = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1,
                      rep=i, time_s=0.05, freq_mhz=khz and khz / 1000)
        items.append(ResultIn(f"m{i}", "a1", "job-1", i, r, r.to_dict()))
    st.insert_results(items, now=0.1)
    sweeps = FakeSweeps()
    assert Drift(DaemonConfig(drift_off_count=2), st, sweeps).verdict("a1", G, "off", 5)
    assert sweeps.calls == [("a1", ["w"], "s")]
    assert sweeps.frequencies == [600_000, 1_500_000]
    # a group left to the governor only: the daemon's own grid, as before
    (tmp_path / "gov").mkdir()
    st2 = store_with(tmp_path / "gov", ["off", "off"])
    sweeps2 = FakeSweeps()
    assert Drift(DaemonConfig(drift_off_count=2), st2, sweeps2).verdict("a1", G, "off", 5)
    assert sweeps2.frequencies is None
    st.close()
    st2.close()


def test_the_re_characterisation_leaves_out_clocks_only_a_verification_measured(tmp_path):
    """A group swept at 600 and 1500 MHz was recommended at 1200 MHz (a clock of the board's
    table between them) and verified there; a clock whose runs were all marked belongs to
    the grid. The drift's sweep measures 600, 1000 and 1500 MHz: before, it took the clocks of
    the runs the fit used, so the verification added 1200 MHz (one more clock at every core
    count: 4 more points on a 4-core board, 6 with a 6-core one) and the marked 1000 MHz was
    dropped."""
    st = store_with(tmp_path, ["off", "off"])
    st.save_recommendation({"config_id": "ok", "agent": "a1", **G.as_dict(), "cores": 2,
                            "cpus": [0, 1], "threads": 2, "freq_khz": 1_200_000}, now=0.2)
    st.update_recommendation("ok", "verified", now=0.3)
    items = []
    runs = [("job-1", 600_000, None), ("job-1", 1_500_000, None),
            ("job-1", 1_000_000, "interference: cpu 1 busy"), ("ok", 1_200_000, None)]
    for i, (job, khz, marked) in enumerate(runs):
        r = RunRecord(platform="p", workload="w", input="s", cores=2, cpus=[0, 1], threads=2,
                      rep=i, time_s=0.05, freq_mhz=khz / 1000, marked=marked)
        items.append(ResultIn(f"m{i}", "a1", job, i, r, r.to_dict()))
    st.insert_results(items, now=0.1)
    assert {f for _, f, _ in st.group_runs(G)} == {600.0, 1200.0, 1500.0}  # what a fit uses
    sweeps = FakeSweeps()
    assert Drift(DaemonConfig(drift_off_count=2), st, sweeps).verdict("a1", G, "off", 5)
    assert sweeps.frequencies == [600_000, 1_000_000, 1_500_000]
    st.close()


def test_drift_off_when_configured_so_and_an_offline_agent_is_reported(tmp_path):
    st = store_with(tmp_path, ["off", "off", "off"])
    assert Drift(DaemonConfig(drift_off_count=0), st, FakeSweeps()).verdict(
        "a1", G, "off", 5) is False
    assert Drift(DaemonConfig(drift_off_count=2), st, FakeSweeps("agent 'a1' is gone")).verdict(
        "a1", G, "off", 5) is True
    (e,) = st.drift_events()
    assert e["error"] == "cannot re-characterise: agent 'a1' is gone" and e["job_ids"] == []
    st.close()


def test_a_negative_drift_count_is_a_config_error(tmp_path):
    p = tmp_path / "d.toml"
    p.write_text("drift_off_count = -1\n")
    with pytest.raises(ConfigError, match="key 'drift_off_count' must be >= 0"):
        load_daemon_config(p)


@pytest.mark.integration
def test_a_slower_workload_is_re_characterised_and_recommended_again(tmp_path: Path):
    """Real daemon and agent on a virtual rpi4 whose workload becomes twice as slow after the
    first recommendation (a new version of it): the daemon finds the drift, sweeps again, fits
    only the new runs and recommends for the new truth."""
    board = "rpi4"
    root = make_tree(board, str(tmp_path / "board"))
    c = Cluster(tmp_path, kernels=("pi_integrate",),
                extra_agent={"virtual_board": board, "sysfs_root": root})
    write_toml(c.daemon_toml, {
        "bind": c.endpoint, "database": str(c.db), "heartbeat_s": 0.5, "agent_timeout_s": 3.0,
        "auto_sweep": True, "auto_recommend": True, "verify_reps": 2, "drift_off_count": 2,
    }, {"sweep": {"size": "small", "reps": 2, "warmup": 0, "max_cores": 4,
                  "frequency_grid": "none"}})
    truth = dict(BOARDS[board]["truth"])
    c.start_daemon()
    c.start_agent()
    try:
        def final(n):
            return lambda s: len([r for r in s["recommendations"] if r["state"] in
                                  ("verified", "unconfirmed", "off")]) >= n or bool(s["drift"])
        c.wait_for(final(1), timeout=40, what="the first verification")
        update_spec(root, truth={**truth, "work_s": 2 * truth["work_s"]})
        st = None
        for n in (2, 3):  # each recommendation pushed again is verified at the new truth
            query(c.endpoint, "fit", {"workload": "pi_integrate", "recommend": True,
                                      "agent": "test-agent"})
            st = c.wait_for(final(n), timeout=30, what=f"verification {n}")
            if st["drift"]:
                break
        assert st and st["drift"], c.logs()
        st = c.wait_for(lambda s: s["drift"][0]["recommendation"] is not None and any(
            r["config_id"] == s["drift"][0]["recommendation"] and r["state"] in
            ("verified", "unconfirmed", "off") for r in s["recommendations"]),
            timeout=40,
            what="the recommendation after the new sweep")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    (d,) = st["drift"]
    assert d["reason"].startswith("2 consecutive verifications outside the prediction "
                                  "interval (last: off by +"), d
    assert d["job_states"] == ["done"] and d["error"] is None
    new = next(r for r in st["recommendations"] if r["config_id"] == d["recommendation"])
    check_verdict(new)
    slow = {**truth, "work_s": 2 * truth["work_s"]}
    ipc = BOARDS[board]["clusters"][0]["ipc"]
    true_t = model_time_s(slow, new["cores"], 1.5, "small", speed=ipc)  # governor: top freq
    assert new["predicted_time_s"] == pytest.approx(true_t, rel=0.1)
    # the first fit after the drift rests on the new sweep only (4 cores x 2 reps)
    (quality,) = c.rows("SELECT quality FROM fits WHERE created >= ? ORDER BY id LIMIT 1",
                        d["since"])[0]
    assert json.loads(quality)["n"] == 8
    assert "drift on " in (tmp_path / "daemon.log").read_text()


@pytest.mark.integration
def test_a_drifting_cluster_is_measured_again_there_and_recommended_again(tmp_path: Path):
    """Real daemon and agent on a virtual odroid-xu4, pi_integrate swept per cluster at 1 and
    2 GHz ([sweep] per_cluster left off: the sweep asked for it), then twice as slow: the big
    cluster's group drifts, is measured again on cpus 4-7 at its clocks as cluster1, and
    recommended again from those runs. Before, the whole board was swept without variant
    (2 GHz dropped), cluster1 got no new run and no recommendation came after the drift."""
    board = "odroid-xu4"
    root = make_tree(board, str(tmp_path / "board"))
    c = Cluster(tmp_path, kernels=("pi_integrate",), auto_sweep=False,
                extra_agent={"virtual_board": board, "sysfs_root": root},
                extra_daemon={"drift_off_count": 2})
    truth = dict(BOARDS[board]["truth"])
    c.start_daemon()
    c.start_agent()
    try:
        c.wait_for(lambda s: any(a["alive"] for a in s["agents"]), timeout=30, what="agent")
        query(c.endpoint, "sweep", {"agent": "test-agent", "workloads": ["pi_integrate"],
                                    "per_cluster": True,
                                    "frequencies": [1_000_000, 2_000_000]})

        def final(n):
            return lambda s: bool(s["drift"]) or len(
                [r for r in s["recommendations"] if r["group"]["variant"] == "cluster1"
                 and r["state"] in ("verified", "unconfirmed", "off")]) >= n
        c.wait_for(final(1), timeout=60, what="cluster1's first verification")
        update_spec(root, truth={**truth, "work_s": 2 * truth["work_s"]})
        st = None
        for n in (2, 3):
            query(c.endpoint, "fit", {"workload": "pi_integrate", "variant": "cluster1",
                                      "recommend": True, "agent": "test-agent"})
            st = c.wait_for(final(n), timeout=30, what=f"cluster1's verification {n}")
            if st["drift"]:
                break
        assert st and st["drift"], c.logs()
        st = c.wait_for(lambda s: s["drift"][0]["recommendation"] is not None and any(
            r["config_id"] == s["drift"][0]["recommendation"] and r["state"] in
            ("verified", "unconfirmed", "off") for r in s["recommendations"]),
            timeout=60,
            what="the recommendation after the new sweep")
    finally:
        codes = c.stop()
    assert codes == {"agent": 0, "daemon": 0}, c.logs()
    (d,) = st["drift"]
    assert d["group"]["variant"] == "cluster1" and d["job_states"] == ["done"], d
    (points,) = c.rows("SELECT points FROM jobs WHERE job_id = ?", d["job_ids"][0])[0]
    points = json.loads(points)
    # the clocks cluster1 was swept at, not those its recommendations were verified at (1.9
    # GHz in a run of 2026-11-27: 2 more points)
    assert {(tuple(p["cpus"]), p["freq_khz"], p["variant"]) for p in points} == {
        (cpus, f, "cluster1") for cpus in ((4,), (4, 5)) for f in (1_000_000, 2_000_000)}
    new = next(r for r in st["recommendations"] if r["config_id"] == d["recommendation"])
    assert new["group"]["variant"] == "cluster1" and set(new["cpus"]) <= {4, 5, 6, 7}, new
    # the first fit of cluster1 after the drift rests on the new sweep only (2 reps a point)
    (quality,) = c.rows("SELECT quality FROM fits WHERE variant = 'cluster1' AND created >= ? "
                        "ORDER BY id LIMIT 1", d["since"])[0]
    assert json.loads(quality)["n"] == 2 * len(points)


def test_a_target_window_is_recorded_as_applied_and_off_verifications_stay_out_of_fits(
        tmp_path):
    from opptune.daemon.recommender import Recommender
    from opptune.daemon.registry import Registry
    from opptune.shared import protocol as P

    class Fitter:
        requests = []

        def submit(self, req):
            self.requests.append(req)

    st = open_store(str(tmp_path / "s.db"))
    fitter = Fitter()
    r = Recommender(DaemonConfig(), st, Registry(10.0), fitter, lambda *a: True,
                    {"fits": 0, "configs_pushed": 0})
    r.drift = Drift(DaemonConfig(), st, FakeSweeps())
    for cid in ("c1", "c2"):
        st.save_recommendation({"config_id": cid, "agent": "a1", **G.as_dict(), "cores": 1,
                                "cpus": [0], "threads": 1, "predicted_time_s": 1.0,
                                "predicted_lower_s": 0.9, "predicted_upper_s": 1.1}, now=1)
    measured = {"target": {"kind": "pid", "pid": 42, "tids": [42]}, "window_s": 2.0045,
                "cpu_s": 1.9, "cpus_busy": 0.95, "freq_mhz": {"policy0": 1500.0},
                "energy_j": None}
    msg = P.make("applied", "a1", {"config_id": "c1", "ok": True, "records": [],
                                   "time_s": None, "measured": measured})
    r.applied("a1", msg, st.recommendation("c1"), now=2)
    got = st.recommendation("c1")
    assert got["state"] == "applied"
    # the agent's window has 4 decimals; said as the CLI says times, not "2.0045 s"
    assert got["error"] == ("applied to pid 42; 0.95 cpus busy over 2 s; at policy0 "
                            "1500 MHz")
    # a verification off the interval is stored, but the fit does not see it
    raw = {"platform": "p", "workload": "w", "input": "s", "cores": 1, "cpus": [0],
           "threads": 1, "rep": 0, "time_s": 2.0}
    msg = P.make("applied", "a1", {"config_id": "c2", "ok": True, "records": [raw],
                                   "time_s": 2.0})
    r.applied("a1", msg, st.recommendation("c2"), now=3)
    assert st.recommendation("c2")["state"] == "off"
    assert st.group_runs(G) == []
    assert fitter.requests[-1].rows == []
    st.close()


def xu4_daemon(tmp_path, per_cluster: bool = False):
    """An in-process daemon (real sweeps and planner) that an odroid-xu4's agent said hello to,
    with the board's description as that agent makes it; the store kept on disk."""
    from opptune.agent.platform import discover
    from opptune.daemon.service import Daemon
    from opptune.shared.config import AgentConfig, SweepDefaults

    root = make_tree("odroid-xu4", str(tmp_path / "xu4"))
    platform = discover(AgentConfig(agent_id="xu4", bench_kernels=[], state_dir=str(tmp_path),
                                    sysfs_root=root, virtual_board="odroid-xu4"))
    d = Daemon(DaemonConfig(bind="tcp://127.0.0.1:0", database=str(tmp_path / "d.db"),
                            drift_off_count=2,
                            sweep=SweepDefaults(per_cluster=per_cluster)))
    d.store.save_platform(platform["id"], platform, 1.0)
    d.registry.hello("xu4", b"xu4", platform["id"], platform,
                     [{"name": "pi_integrate", "kind": "kernel", "sizes": ["small"]}],
                     now=time.time())
    return d, platform["id"]


def measured_and_off(d, group: Group, khz: list[int], cpus: list[int]) -> None:
    """Runs of ``group`` on ``cpus`` at ``khz``, then two of its recommendations judged off."""
    items = []
    for i, (n, f) in enumerate((n, f) for n in range(1, len(cpus) + 1) for f in khz):
        r = RunRecord(platform=group.platform, workload=group.workload, input=group.input,
                      variant=group.variant, cores=n, cpus=cpus[:n], threads=n, rep=0,
                      time_s=1.0 / n, freq_mhz=f / 1000)
        items.append(ResultIn(f"m-{group.variant}-{i}", "xu4", "job-0", i, r, r.to_dict()))
    d.store.insert_results(items, now=2.0)
    for i in range(2):
        cid = f"c-{group.variant}-{i}"
        d.store.save_recommendation({"config_id": cid, "agent": "xu4", **group.as_dict(),
                                     "cores": 1, "cpus": cpus[:1], "threads": 1}, now=3 + i)
        d.store.update_recommendation(cid, "off", now=3.5 + i, error="off by +60.0 % (...)")


@pytest.mark.parametrize("per_cluster", [False, True])
def test_a_cluster_group_that_drifts_is_measured_again_on_its_cluster_only(tmp_path,
                                                                          per_cluster):
    """A group swept on the big cluster of a big.LITTLE board (variant cluster1, cpus 4-7 at
    1 and 2 GHz) drifts: the new sweep measures that cluster's cpus at those clocks, as
    cluster1, whatever [sweep] per_cluster says. Before, it swept the whole board (cpus
    0-7, variant "", 2 GHz dropped: the LITTLE cores lack it), so the drifted group got no
    new run and never settled; with per_cluster on, it swept the LITTLE cluster too."""
    d, plat = xu4_daemon(tmp_path, per_cluster)
    try:
        group = Group(plat, "pi_integrate", "small", "cluster1")
        measured_and_off(d, group, [1_000_000, 2_000_000], [4, 5])
        assert d.recommender.drift.verdict("xu4", group, "off", time.time()) is True
        (event,) = d.store.drift_events()
        assert event["error"] is None, event
        (job_id,) = event["job_ids"]
        points = d.store.job(job_id)["points"]
        assert {p.get("variant") for p in points} == {"cluster1"}
        assert set().union(*(p["cpus"] for p in points)) <= {4, 5, 6, 7}
        assert {p["freq_khz"] for p in points} == {1_000_000, 2_000_000}
    finally:
        d.close()


def test_a_whole_board_group_that_drifts_is_not_measured_per_cluster(tmp_path):
    """The converse: a group measured over the whole board (no variant) with [sweep]
    per_cluster on is measured again over the whole board, not as cluster0 and cluster1
    groups it would never see the runs of."""
    d, plat = xu4_daemon(tmp_path, per_cluster=True)
    try:
        group = Group(plat, "pi_integrate", "small", "")
        measured_and_off(d, group, [1_000_000], [0, 1, 2, 3, 4, 5, 6, 7])
        assert d.recommender.drift.verdict("xu4", group, "off", time.time()) is True
        (job_id,) = d.store.drift_events()[0]["job_ids"]
        points = d.store.job(job_id)["points"]
        assert {p.get("variant", "") for p in points} == {""}
        assert max(len(p["cpus"]) for p in points) == 8
    finally:
        d.close()
