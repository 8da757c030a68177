"""Energy meter: RAPL wrap-around, hwmon power integration, EM estimate, absent sensors."""

import time

import pytest

from opptune.agent.meters.energy import EnergyMeter, counter_delta, trapezoid
from opptune.agent.sysfs import SysFS
from opptune.agent.virtual_workload import run

from fake_trees import fake_tree

Z0 = "/sys/class/powercap/intel-rapl:0"


def _raw(fs, rel, value):
    with open(fs.path(rel), "w") as fh:
        fh.write(f"{value}\n")


def test_counter_delta_and_trapezoid():
    assert counter_delta(100, 250, 1000) == 150
    assert counter_delta(900, 50, 999) == 150  # wrapped once at 999 -> 0
    assert trapezoid([(0.0, 1.0), (1.0, 3.0), (3.0, 3.0)]) == pytest.approx(2.0 + 6.0)


def test_rapl_wraparound(tmp_path):
    root = fake_tree(tmp_path, "x86-2numa")
    fs = SysFS(root)
    m = EnergyMeter.discover(root)
    assert m.source == "rapl:package-0+dram+package-1+dram"
    maxr = fs.read_int(f"{Z0}/max_energy_range_uj")
    _raw(fs, f"{Z0}/energy_uj", maxr - 1_000_000)  # 1 J before the wrap
    m.start()
    _raw(fs, f"{Z0}/energy_uj", 2_000_000 - 1)  # 2 J after it
    e, src, reason = m.stop()
    assert reason is None and src.startswith("rapl")
    assert e == pytest.approx(3.0, abs=1e-5)


def test_rapl_follows_virtual_workload(tmp_path):
    root = fake_tree(tmp_path, "x86-2numa")
    m = EnergyMeter.discover(root).start()
    out = run(root, list(range(8)), 8, seed=1)
    e, _, _ = m.stop()
    # Both packages draw static power (0.8 W each; the model's power_w counts one), both dram
    # zones 3 W; the busy package adds 8 cores of V^2 f.
    expected = out["energy_j"] + (0.8 + 2 * 3.0) * out["time_s"]
    assert e == pytest.approx(expected, rel=1e-3)


def test_hwmon_power_constant_integrates(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    fs = SysFS(root)
    for i in range(4):
        _raw(fs, f"/sys/class/hwmon/hwmon{i}/power1_input", 500_000)  # 4 x 0.5 W
    m = EnergyMeter.discover(root, sample_interval_s=0.005)
    assert m.source.startswith("hwmon-power:")
    t0 = time.monotonic()
    m.start()
    deadline = t0 + 0.15
    while time.monotonic() < deadline:  # the duration, not a synchronisation
        pass
    e, _, _ = m.stop()
    dt = time.monotonic() - t0
    assert len(m.backend.samples) >= 3
    assert e == pytest.approx(2.0 * dt, rel=0.05)


def test_hwmon_power_follows_virtual_run(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    m = EnergyMeter.discover(root, sample_interval_s=0.002).start()
    out = run(root, [4, 5, 6, 7], 4, size="large", seed=2)
    e, _, _ = m.stop()
    # The rails: both clusters (the model's power_w) plus constant mem and gpu (0.17 W), for
    # as long as the sensors showed them: the host's sleep (``elapsed_s``; a busy host wakes it
    # late, the board's ``time_s`` does not stretch). The sampler's edges add a few percent,
    # and on a busy host (its thread woken late) up to half a gap's step at each edge: the
    # trapezoid over a gap spanning a step of dP is off by at most dP x gap / 2.
    watts = out["power_w"] + 0.17
    times = [t for t, _ in m.backend.samples]
    gap = max(b - a for a, b in zip(times, times[1:]))
    assert abs(e - watts * out["elapsed_s"]) <= 0.1 * watts * out["elapsed_s"] + watts * gap


def test_energy_model_estimate(tmp_path):
    root = fake_tree(tmp_path, "rpi4")
    m = EnergyMeter.discover(root)
    assert m.source.startswith("energy-model-estimate")
    m.start()
    out = run(root, [0, 1], 2, size="large", seed=3)
    e, src, reason = m.stop()
    assert reason is None and "estimate" in src
    # 2 busy cpus at 1.5 GHz; EM power is per cpu in mW (jiffy resolution: 10 ms).
    per_cpu_w = (out["power_w"] - 0.05) / 2
    assert e == pytest.approx(2 * per_cpu_w * out["time_s"], rel=0.1, abs=0.02)


def test_no_sensor_is_invalid_not_zero(tmp_path):
    m = EnergyMeter.discover(str(tmp_path))
    e, src, reason = m.start().stop()
    assert e is None and src is None and "no energy sensor" in reason
    e, src, reason = EnergyMeter.discover("/").start().stop()  # this machine: no sensors
    assert (e is None) == (reason is not None)


def test_a_run_the_meter_did_not_see_is_invalid_not_zero(tmp_path):
    """Walking a virtual rpi4 with a real command (a C OpenMP loop): its runs moved none of the
    board's /proc/stat, and every run was stored with energy_j 0.0 as if measured; the report
    then said 'the board has no meter'. A reading of 0 J is now no reading, with the reason."""
    from opptune.agent.meters.energy import EnergyRunMeter
    from opptune.shared.records import RunRecord
    root = fake_tree(tmp_path, "rpi4")
    e, src, reason = EnergyMeter.discover(root).start().stop()  # nothing ran on the board
    assert e is None and src.startswith("energy-model-estimate")
    assert "counted 0 J over the run" in reason and "virtual board" in reason
    meter = EnergyRunMeter(root)
    rec = RunRecord(platform="p", workload="w", input="default", cores=1, cpus=[0],
                    threads=1, rep=0, time_s=0.1)
    meter.start(None)
    meter.stop(rec, {})
    assert rec.energy_j is None and "counted 0 J" in rec.invalid["energy_j"]
