"""Virtual boards: the workload follows the known truth and the set frequency."""

import json
import subprocess
import sys

import pytest

from opptune.agent.knobs.cpufreq import CpuFreq
from opptune.agent.virtual_board import BOARDS, load_spec, model_time_s, speedup
from opptune.agent.virtual_workload import run

from fake_trees import fake_tree


def test_speedup_is_eq_15_16():
    # p = 1 gives 1; the memory wall caps the speedup below Amdahl's.
    assert speedup(1, 2.0, 0.95, 0.8, 0.05, 0.25) == pytest.approx(1.0)
    amdahl = 1 / ((1 - 0.95) + 0.95 / 64)
    assert speedup(64, 2.0, 0.95, 0.8, 0.05, 0.25) < amdahl
    assert speedup(4, 1.0, 1.0, 0.0, 0.0, 0.0) == pytest.approx(4.0)


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_truth_stored_with_tree(tmp_path, board):
    spec = load_spec(fake_tree(tmp_path, board))
    assert spec["truth"] == BOARDS[board]["truth"]
    assert {"f", "k", "m1", "m2", "f_mem_ghz"} <= set(spec["truth"])


def test_cli_prints_one_json_line(tmp_path):
    root = fake_tree(tmp_path, "rpi4")
    out = subprocess.run([sys.executable, "-m", "opptune.agent.virtual_workload", "--board",
                          "rpi4", "--root", root, "--threads", "2", "--cpus", "0,1", "--size",
                          "small", "--seed", "7"], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["virtual"] is True and rec["p"] == 2 and rec["time_s"] >= rec["noisy_time_s"]
    bad = subprocess.run([sys.executable, "-m", "opptune.agent.virtual_workload", "--board",
                          "odroid-xu4", "--root", root], capture_output=True, text=True)
    assert bad.returncode == 2 and "rpi4" in bad.stderr


def test_time_follows_set_frequency_and_truth(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    truth = BOARDS["odroid-xu4"]["truth"]
    with CpuFreq(root, install_handlers=False) as cf:
        times = {}
        for khz in (1000000, 2000000):
            cf.set({"policy4": khz})
            for p in (1, 4):
                r = run(root, [4, 5, 6, 7], p, seed=p)
                assert r["freq_khz"]["4"] == khz
                assert r["model_time_s"] == pytest.approx(
                    model_time_s(truth, p, khz / 1e6, "small", speed=1.0))
                times[khz, p] = r["time_s"]
    # Measured speedup matches the true eq. 15 within noise and sleep jitter.
    for khz in (1000000, 2000000):
        phi = khz / 1e6 / truth["f_mem_ghz"]
        true_s = speedup(4, phi, truth["f"], truth["k"], truth["m1"], truth["m2"])
        assert times[khz, 1] / times[khz, 4] == pytest.approx(true_s, rel=0.1)
    assert times[2000000, 1] < times[1000000, 1]


def test_little_cluster_is_slower(tmp_path):
    root = fake_tree(tmp_path, "odroid-xu4")
    little = run(root, [0], 1, sleep=False, seed=1)
    big = run(root, [4], 1, sleep=False, seed=1)
    assert little["model_time_s"] > 2 * big["model_time_s"]
    assert little["power_w"] < big["power_w"]
