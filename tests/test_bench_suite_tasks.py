"""Task pool, task-parallel kernels and MPET accounting of the instrumented runtime."""
import json
import os
import subprocess
import sys

import pytest

from opptune.agent.run_output import merge_json
from opptune.bench_suite import KERNELS, run_kernel
from opptune.bench_suite.accounting import (IDENTITY_RTOL, PARAMETERS, identity_time,
                                            run_parameters, with_redundancy)
from opptune.shared.records import RunRecord

CPUS = sorted(os.sched_getaffinity(0))
TWO = CPUS[:2]
FIB_CUTOFF = 20     # fib_tasks.c: serial at or below
SORT_CUTOFF = 8192  # merge_sort.c: serial at or below
M64 = (1 << 64) - 1


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def fib_spawns(n):
    """Tasks fib_tasks spawns for fib(n): one per call above the cut-off."""
    memo = {}

    def s(k):
        if k <= FIB_CUTOFF:
            return 0
        if k not in memo:
            memo[k] = 1 + s(k - 1) + s(k - 2)
        return memo[k]
    return s(n)


def sort_spawns(n):
    if n <= SORT_CUTOFF:
        return 0
    mid = n // 2
    return 1 + sort_spawns(mid) + sort_spawns(n - mid)


def mix64(x):
    """merge_sort.c's key generator (splitmix64's finaliser)."""
    x = (x + 0x9e3779b97f4a7c15) & M64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2, FIB_CUTOFF, FIB_CUTOFF + 1, 30])
def test_fib_value_and_every_spawned_task_runs_once(n, threads):
    r = run_kernel("fib_tasks", threads, TWO, n)
    assert r["check_value"] == float(fib(n))
    stats = r["thread_stats"]
    assert sum(s["spawned"] for s in stats) == fib_spawns(n)
    assert sum(s["tasks"] for s in stats) == fib_spawns(n)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1, 2, 33, SORT_CUTOFF + 1, 50_000])
def test_merge_sort_sorts_and_spawns(n, threads):
    r = run_kernel("merge_sort", threads, TWO, n)
    # check_value is the smallest key; sortedness and the permutation are checked natively.
    assert r["check_value"] == float(min(mix64(i) for i in range(n)))
    stats = r["thread_stats"]
    assert sum(s["spawned"] for s in stats) == sort_spawns(n)
    assert sum(s["tasks"] for s in stats) == sort_spawns(n)


def test_oversubscribed_pool_finishes():
    # More threads than cpus: sleeping, stealing and waking must not lose a wake-up.
    r = run_kernel("fib_tasks", 5, TWO[:1], 30)
    assert r["check_value"] == float(fib(30))
    r = run_kernel("merge_sort", 4, TWO[:1], 100_000)
    assert sum(s["tasks"] for s in r["thread_stats"]) == sort_spawns(100_000)


@pytest.mark.parametrize("args, match", [
    (("fib_tasks", 1, [0], 61), "fib_tasks size must be in 1..60"),
    (("fib_tasks", 1, [0], 0), "size must be >= 1"),
    (("merge_sort", 1, [0], 1 << 40), "merge_sort size must be in 1.."),
    (("merge_sort", 1, [0], "huge"), "unknown size class 'huge'"),
])
def test_task_kernels_reject_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        run_kernel(*args)


def test_task_kernels_in_catalogue_with_three_size_classes():
    for name in ("fib_tasks", "merge_sort"):
        k = KERNELS[name]
        assert k.sizes["small"] < k.sizes["default"] < k.sizes["large"]
        assert "tasks" in k.tags


def _check_params(r):
    """The accounting of one run: non-negative, closed, per thread and as parameters."""
    t, n = r["time_s"], r["threads"]
    for s in r["thread_stats"]:
        parts = [s["exec_s"], *(s[f] for f in PARAMETERS.values())]
        assert min(parts) >= 0
        assert sum(parts) == pytest.approx(t, rel=IDENTITY_RTOL)
    p = r["mpet"]
    assert p == pytest.approx(run_parameters(t, r["thread_stats"]) | p)
    assert p["n"] == n and p["closure"] == pytest.approx(1.0, rel=IDENTITY_RTOL)
    assert all(0 <= p[k] <= 1 for k in PARAMETERS)
    assert 0 < p["U"] <= 1 + IDENTITY_RTOL
    return p


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_identity_holds_at_one_and_two_threads(name):
    one = run_kernel(name, 1, TWO[:1], "small")
    p1 = _check_params(one)
    assert p1["R"] == pytest.approx(p1["U"], rel=IDENTITY_RTOL)  # R(1) = U(1)
    assert p1["l"] == 0 and p1["w"] == pytest.approx(0, abs=1e-9)  # nobody to wait for
    t1 = one["time_s"]
    for threads in (1, 2):
        r = one if threads == 1 else run_kernel(name, threads, TWO, "small")
        p = with_redundancy(_check_params(r), t1)
        assert identity_time(t1, p["R"], p["U"], threads) == pytest.approx(
            r["time_s"], rel=IDENTITY_RTOL)


def _undisturbed(r):
    """No thread lost more than a tenth of its span to other processes."""
    return all(s["cpu_s"] >= 0.9 * s["wall_s"] for s in r["thread_stats"])


@pytest.mark.quiet  # run alone by make test: the parallel workers' load would skip it
@pytest.mark.skipif(len(CPUS) < 2, reason="needs two cpus")
def test_lock_free_compute_kernel_has_no_lock_wait_and_little_redundancy():
    # R compares wall times of two runs, so it is only meaningful for runs no other process
    # preempted (this machine is shared): look for such a pair, check l, c, s on every one.
    size = 10_000_000  # ~10 ms a run: a longer one is rarely undisturbed on a busy machine
    seen = []  # (cpu-time ratio 2 threads / 1, R) of the undisturbed pairs
    shared = 0  # of them, pairs the control found the host running both cpus on one
    for _ in range(60):
        one = run_kernel("pi_integrate", 1, TWO[:1], size)
        r = run_kernel("pi_integrate", 2, TWO, size)
        p = with_redundancy(r["mpet"], one["time_s"])
        assert p["l"] == 0 and p["c"] == 0 and p["s"] == 0  # no locks, no spawned tasks
        if not (_undisturbed(one) and _undisturbed(r)):
            continue
        ratio = sum(s["cpu_s"] for s in r["thread_stats"]) / one["thread_stats"][0]["cpu_s"]
        seen.append((ratio, p["R"]))
        # the same work in cpu time, and R near 1: redundant work would show in every pair
        if 0.8 < ratio < 1.25 and 0.85 < p["R"] < 1.2:
            return
        if _cpus_shared_by_the_host(size, one["time_s"]):
            shared += 1  # no evidence either way: two independent runs slow each other too
        if len(seen) >= 5:
            break
    if not seen:
        pytest.skip("the machine is too loaded: no run pair without preemption in 60 tries")
    if shared == len(seen):
        # a VM's host may run the two vcpus on one cpu, which no guest figure shows (CI 49:
        # five undisturbed pairs at 1.86-1.99x the cpu time) and which looks like redundant
        # work; the control above tells them apart
        pytest.skip(f"the host runs both cpus on one: two independent 1-thread runs at once "
                    f"slow each other as much as the pairs show (cpu ratio, R): {seen}")
    pytest.fail(f"every undisturbed pair shows redundant work (cpu ratio, R): {seen}")


def _cpus_shared_by_the_host(size: int, alone_s: float) -> bool:
    """Control: one single-thread run on each of the two cpus at the same time (the kernel
    releases the GIL). Where the cpus are the guest's own, each takes about what one alone
    does; where the host runs both on one cpu, each takes about twice as long."""
    import threading
    times: list[float] = []

    def one_on(cpu: int) -> None:
        times.append(run_kernel("pi_integrate", 1, [cpu], size)["time_s"])
    threads = [threading.Thread(target=one_on, args=(cpu,)) for cpu in TWO]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return min(times) > 1.5 * alone_s


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two cpus")
def test_parameters_tell_kernels_apart():
    # up to 5 runs: a host may run the two threads one after the other (test_bench_suite.py)
    for _ in range(5):
        lock = run_kernel("locked_update", 2, TWO, "small")["mpet"]
        if lock["l"] > 0:
            break
    assert lock["l"] > 0
    tasks = run_kernel("fib_tasks", 2, TWO, "small")
    p = tasks["mpet"]
    assert p["c"] > 0 and p["d"] > 0 and p["s"] > 0 and p["l"] == 0
    assert sum(s["spawned"] for s in tasks["thread_stats"]) == fib_spawns(KERNELS["fib_tasks"].sizes["small"])
    triad = run_kernel("triad", 2, TWO, "small")["mpet"]
    assert triad["c"] == 0 and triad["w"] + triad["j"] > 0  # 40 barriers


def test_parameters_reject_runs_without_accounting():
    with pytest.raises(ValueError, match="lack the MPET accounting"):
        run_parameters(1.0, [{"busy_s": 1.0}])
    with pytest.raises(ValueError, match="positive time"):
        run_parameters(0.0, [{"exec_s": 1.0}])
    with pytest.raises(ValueError, match="t\\(1\\) must be"):
        with_redundancy({"exec_s": 1.0}, 0)


def test_agent_keeps_a_kernels_parameters_in_the_record():
    r = run_kernel("fib_tasks", 2, TWO, 25)
    rec = RunRecord(platform="p", workload="fib_tasks", input="25", cores=2, cpus=TWO,
                    threads=2, rep=0)
    merge_json(rec, r)
    assert rec.extra["mpet"] == r["mpet"]
    rec.validate()
    assert RunRecord.from_dict(rec.to_dict()).extra["mpet"]["U"] == r["mpet"]["U"]


def test_cli_json_line_carries_the_parameters():
    p = subprocess.run([sys.executable, "-m", "opptune.bench_suite", "run", "merge_sort",
                        "--threads", "2", "--cpus", ",".join(map(str, TWO)), "--size", "small"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["mpet"]["n"] == 2 and set(PARAMETERS) | {"U", "exec_s"} <= set(r["mpet"])
    assert all(set(s) >= {"exec_s", "idle_s", "create_s", "dist_s", "switch_s", "join_s",
                          "spawned", "stolen"} for s in r["thread_stats"])
