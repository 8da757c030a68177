"""Thermal zones recorded around runs; throttled runs flagged, stored, and kept out of fits."""

from __future__ import annotations

import sqlite3
import sys

from opptune.agent.meters.thermal import ThermalMeter
from opptune.agent.runner import Runner, RunSpec
from opptune.agent.sysfs import SysFS
from opptune.agent.virtual_board import load_spec, update_spec
from opptune.agent.workloads import Workloads
from opptune.daemon.store import Group, ResultIn, open_store
from opptune.daemon.store.schema import MIGRATIONS, SCHEMA_VERSION
from opptune.shared.config import AgentConfig
from opptune.shared.records import RecordError, RunRecord

from fake_trees import fake_tree

import pytest


def virtual_runner(root, board):
    cfg = AgentConfig(agent_id="a", bench_kernels=["pi_integrate"], sysfs_root=root, virtual_board=board,
                      state_dir=root)
    from opptune.agent.knobs.cpufreq import CpuFreq, CpuFreqKnob
    wl = Workloads(cfg)
    knobs = [CpuFreqKnob(CpuFreq(root, install_handlers=False))]
    return Runner(wl, "p", virtual=True, knobs=knobs, meters=[ThermalMeter(root)])


def run(runner, cpus, khz):
    # compute-bound, so a throttled frequency shows in its time (bandwidth-bound triad
    # barely slows on a virtual board, as on a real one)
    spec = RunSpec("pi_integrate", "small", cpus, len(cpus), khz)
    (rec,) = runner.run_point(spec, 1)
    assert rec.ok, rec.error
    return rec


def test_zones_are_recorded_and_an_injected_throttle_flags_the_run(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    runner = virtual_runner(root, "odroid-xu4")
    cool = run(runner, [4, 5], 1800000)
    assert cool.throttled is False and cool.thermal["reasons"] == []
    z = cool.thermal["zones"]
    assert len(z) == 4 and z[0]["type"] == "cpu0-thermal"
    assert z[0]["before_c"] == z[0]["after_c"] == 48.0 and z[0]["passive_c"] == 85.0
    # throttle the big cluster to 1 GHz: hot zones, and the run is slower
    update_spec(root, throttle={"cpus": [4, 5, 6, 7], "max_khz": 1000000})
    hot = run(runner, [4, 5], 1800000)
    assert hot.throttled is True
    assert any("reached 90 C (passive trip 85 C)" in r for r in hot.thermal["reasons"])
    assert hot.time_s > 1.5 * cool.time_s
    # the throttle lifted: cool again, and the frequency shown is the one set
    update_spec(root, throttle=None)
    again = run(runner, [4, 5], 1800000)
    assert again.throttled is False
    assert SysFS(root).read_int("/sys/devices/system/cpu/cpufreq/policy4/scaling_cur_freq") \
        == 1800000


def test_x86_throttle_counters_count(tmp_path):
    root = fake_tree(tmp_path, "x86-2numa")
    runner = virtual_runner(root, "x86-2numa")
    update_spec(root, throttle={"cpus": [0], "max_khz": 1200000})
    rec = run(runner, [0, 1], 2400000)
    assert rec.throttled
    assert rec.thermal["throttle_events"] == {"cpu0/core_throttle_count": 1}
    assert "thermal_throttle counters increased on 1 cpu(s)" in rec.thermal["reasons"]


def test_a_frequency_not_held_is_throttling(tmp_path):
    """The frequency check alone: a zone-less board whose policy runs below the set value."""
    root = fake_tree(tmp_path, "rpi4", thermal_zones=[])
    fs = SysFS(root)
    meter = ThermalMeter(root)
    rec = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1,
                    rep=0, time_s=1.0, freq_mhz=1500.0)
    meter.start(RunSpec("w", "s", [0], 1, 1500000))
    with open(fs.path("/sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq"), "w") as fh:
        fh.write("600000\n")
    meter.stop(rec, {})
    assert rec.throttled and rec.thermal["reasons"] == ["cpu0 ran at 600 MHz, below the set "
                                                        "1500 MHz"]
    assert rec.invalid["thermal"].startswith("no thermal zones under")


def test_no_thermal_tree_is_unavailable_not_a_crash(tmp_path):
    meter = ThermalMeter(str(tmp_path))
    rec = RunRecord(platform="p", workload="w", input="s", cores=1, cpus=[0], threads=1,
                    rep=0, time_s=1.0)
    meter.start(RunSpec("w", "s", [0], 1))
    meter.stop(rec, {})
    assert rec.throttled is False and rec.thermal["zones"] == []
    assert "no thermal zones" in rec.invalid["thermal"]


def test_records_stay_compatible():
    old = {"platform": "p", "workload": "w", "input": "s", "cores": 1, "cpus": [0],
           "threads": 1, "rep": 0, "time_s": 1.0}
    rec = RunRecord.from_dict(old)
    assert rec.throttled is False and rec.thermal is None
    assert "throttled" not in rec.to_dict() and "thermal" not in rec.to_dict()
    with pytest.raises(RecordError, match="'throttled' must be true or false"):
        RunRecord.from_dict({**old, "throttled": 1})
    with pytest.raises(RecordError, match="'thermal' must be a map"):
        RunRecord.from_dict({**old, "thermal": [1]})


def test_update_spec_refuses_unknown_keys(tmp_path):
    root = fake_tree(tmp_path, "rpi4")
    with pytest.raises(ValueError, match="unknown virtual board spec keys: nope"):
        update_spec(root, nope=1)
    assert load_spec(root)["throttle"] is None


def result(msg_id, cores, time_s, throttled):
    rec = RunRecord(platform="p", workload="w", input="s", cores=cores,
                    cpus=list(range(cores)), threads=cores, rep=0, time_s=time_s,
                    throttled=throttled)
    return ResultIn(msg_id, "a1", "job-1", int(msg_id[1:]), rec, rec.to_dict())


def test_throttled_runs_are_stored_but_left_out_of_the_fit_rows(tmp_path):
    st = open_store(str(tmp_path / "s.db"))
    st.insert_results([result("m0", 1, 2.0, False), result("m1", 2, 1.1, False),
                       result("m2", 2, 1.9, True)], now=1.0)
    assert st.group_runs(Group("p", "w", "s", "")) == [(1, None, 2.0), (2, None, 1.1)]
    assert st.job_received("job-1") == 3
    assert [r.throttled for _, r in st.run_records("job-1")] == [False, False, True]
    st.close()


def test_a_version_3_store_gains_the_throttled_column(tmp_path):
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied REAL NOT NULL)")
    for v in (1, 2, 3):
        for stmt in MIGRATIONS[v]:
            db.execute(stmt)
        db.execute("INSERT INTO schema_version VALUES (?, 0)", (v,))
    db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
               ("old", "a1", "job-1", 0, "p", "w", "s", "", 1, "[0]", 1, None, 0, 0.5, None,
                None, None, None, 1, 0, 1.0, '{"platform":"p","workload":"w","input":"s",'
                '"cores":1,"cpus":[0],"threads":1,"rep":0,"time_s":0.5}', None))
    db.commit()
    db.close()
    st = open_store(str(path))
    assert st.schema_version() == SCHEMA_VERSION  # every migration above 3 applied
    st.insert_results([result("m1", 2, 0.3, True)], now=2.0)
    assert st.group_runs(Group("p", "w", "s", "")) == [(1, None, 0.5)]
    st.close()
