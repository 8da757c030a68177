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


# --------------------------------------------------------------------------- kernel natures

from opptune.agent.virtual_board import board_spec, run_model  # noqa: E402
from opptune.agent.virtual_workload import KERNEL_TRAITS, kernel_model  # noqa: E402
from opptune.bench_suite.accounting import (IDENTITY_RTOL, identity_time,  # noqa: E402
                                            run_parameters)
from opptune.bench_suite.catalogue import KERNELS  # noqa: E402


def _freqs(spec, pick=max):
    return {c: pick(cl["freqs_khz"]) for cl in spec["clusters"] for c in cl["cpus"]}


def _speedups(board, kernel, cpus, pick=max):
    spec = board_spec(board)
    t = [kernel_model(spec, kernel, cpus[:n], n, _freqs(spec, pick))["time_s"]
         for n in range(1, len(cpus) + 1)]
    return [t[0] / x for x in t], t[0]


def test_every_catalogue_kernel_has_a_nature():
    assert set(KERNEL_TRAITS) == set(KERNELS)
    for name, tr in KERNEL_TRAITS.items():
        shares = sum(tr.get(k, 0.0) for k in ("c", "b", "a", "L", "A"))
        assert shares == pytest.approx(1.0), name


def test_pi_integrate_is_the_boards_truth():
    for board in ("rpi4", "odroid-xu4"):
        spec = board_spec(board)
        for cpus in ([0], [0, 1], [4, 5, 0]):
            if max(cpus) >= len(_freqs(spec)):
                continue
            assert kernel_model(spec, "pi_integrate", cpus, len(cpus), _freqs(spec))[
                "time_s"] == pytest.approx(run_model(spec, cpus, len(cpus), _freqs(spec))["time_s"])


def test_kernels_scale_as_their_nature_on_one_board():
    cpus = [0, 1, 2, 3]
    s = {k: _speedups("rpi4", k, cpus)[0] for k in KERNEL_TRAITS}
    # triad saturates the Pi's memory bandwidth by 2 cores; pi_integrate keeps scaling
    assert s["triad"][3] / s["triad"][1] < 1.05 and s["pi_integrate"][3] > 1.5 * s["triad"][3]
    assert s["stencil"][3] < s["matmul"][3]
    # the triangular loop's static split leaves threads idle; fib's stealing does not
    assert s["triangle"][1] < 1.5 < s["fib_tasks"][1]
    # one contended lock: adding the 4th thread makes it slower
    assert s["locked_update"][3] < s["locked_update"][2]
    # atomics degrade but still gain; a lock-free compute kernel gains more
    assert s["histogram"][3] < s["matmul"][3]
    # the wavefront's ramp-up and ramp-down diagonals cost against an even static split
    assert s["wavefront"][3] < s["matmul"][3]


def test_latency_bound_kernel_ignores_frequency_and_memory_ceiling_moves_with_it():
    _, chase_hi = _speedups("rpi4", "pointer_chase", [0])
    _, chase_lo = _speedups("rpi4", "pointer_chase", [0], pick=min)
    _, pi_hi = _speedups("rpi4", "pi_integrate", [0])
    _, pi_lo = _speedups("rpi4", "pi_integrate", [0], pick=min)
    assert chase_lo / chase_hi < 1.1 and pi_lo / pi_hi > 2.0  # 600 vs 1500 MHz
    # at 600 MHz the cores demand less bandwidth: triad saturates later
    hi, _ = _speedups("rpi4", "triad", [0, 1, 2, 3])
    lo, _ = _speedups("rpi4", "triad", [0, 1, 2, 3], pick=min)
    assert lo[3] > hi[3] * 1.2


def test_big_little_clusters_differ_and_static_splits_wait_for_little():
    spec = board_spec("odroid-xu4")
    f = _freqs(spec)
    big = kernel_model(spec, "matmul", [4], 1, f)["time_s"]
    little = kernel_model(spec, "matmul", [0], 1, f)["time_s"]
    assert little > 2 * big
    # same cores: LITTLE and big memory latency differ far less than their compute
    assert kernel_model(spec, "pointer_chase", [0], 1, f)["time_s"] < \
        1.5 * kernel_model(spec, "pointer_chase", [4], 1, f)["time_s"]
    order = [4, 5, 6, 7, 0, 1, 2, 3]
    stat, _ = _speedups("odroid-xu4", "matmul", order)
    dyn, _ = _speedups("odroid-xu4", "fib_tasks", order)
    # a LITTLE core paces the static blocks; stealing gives it less work instead
    assert stat[4] < stat[3] and stat[7] < 0.6 * stat[3]
    assert dyn[7] > 0.9 * dyn[3] and dyn[7] > 2 * stat[7]


@pytest.mark.parametrize("board", ["rpi4", "odroid-xu4", "x86-2numa"])
@pytest.mark.parametrize("kernel", sorted(KERNEL_TRAITS))
def test_accounting_closes_and_eq3_holds(board, kernel):
    spec = board_spec(board)
    cpus = sorted(c for cl in spec["clusters"] for c in cl["cpus"])[:8]
    freqs = {c: (max(cl["freqs_khz"]) if cl.get("freqs_khz") else cl["max_khz"])
             for cl in spec["clusters"] for c in cl["cpus"]}
    t1 = kernel_model(spec, kernel, cpus[:1], 1, freqs)["time_s"]
    for n in range(1, len(cpus) + 1):
        m = kernel_model(spec, kernel, cpus[:n], n, freqs)
        assert len(m["thread_stats"]) == n
        for t in m["thread_stats"]:
            assert all(t[k] >= 0 for k in t if k.endswith("_s"))
        p = run_parameters(m["time_s"], m["thread_stats"])
        assert p["closure"] == pytest.approx(1.0, rel=IDENTITY_RTOL)
        R = p["exec_s"] / t1
        assert identity_time(t1, R, p["U"], n) == pytest.approx(m["time_s"], rel=IDENTITY_RTOL)


def test_workload_reports_mpet_parameters_with_noise(tmp_path):
    root = fake_tree(tmp_path, "rpi4")
    one = run(root, [0], 1, sleep=False, seed=3, kernel="locked_update")
    four = run(root, [0, 1, 2, 3], 4, sleep=False, seed=4, kernel="locked_update")
    assert one["kernel"] == "locked_update" and one["mpet"]["R"] == pytest.approx(
        one["mpet"]["U"])
    assert four["mpet"]["l"] > 0.2 and one["mpet"]["l"] == 0
    R = four["mpet"]["exec_s"] / one["time_s"]
    assert identity_time(one["time_s"], R, four["mpet"]["U"], 4) == pytest.approx(
        four["time_s"], rel=IDENTITY_RTOL)
    bad = subprocess.run([sys.executable, "-m", "opptune.agent.virtual_workload", "--board",
                          "rpi4", "--root", root, "--kernel", "fft"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "invalid choice: 'fft'" in bad.stderr
