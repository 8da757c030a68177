"""Native benchmark suite: kernels run, check themselves and report per-thread stats."""
import json
import os
import subprocess
import sys

import pytest

from opptune.bench_suite import KERNELS, Kernel, run_kernel
from opptune.bench_suite import _kernels

CPUS = sorted(os.sched_getaffinity(0))
TWO = CPUS[:2]
SLACK_S = 0.005  # clock reads at region edges are not simultaneous across threads


def test_catalogue_matches_compiled_kernels():
    assert set(KERNELS) == set(_kernels.names())
    assert {k.kind for k in KERNELS.values()} == {"compute", "memory", "lock"}
    for k in KERNELS.values():
        assert isinstance(k, Kernel)
        assert k.sizes["small"] < k.sizes["default"]
        assert k.size_unit and k.description
        with pytest.raises(Exception):
            k.name = "x"  # frozen


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("threads", [1, 2])
def test_small_run_checks_and_reports_stats(name, threads):
    r = run_kernel(name, threads, TWO, "small")
    assert r["kernel"] == name and r["threads"] == threads and r["cpus"] == TWO
    assert r["size"] == KERNELS[name].sizes["small"] and r["size_class"] == "small"
    assert r["checked"] is True
    assert 0 < r["time_s"] < 5
    stats = r["thread_stats"]
    assert len(stats) == threads
    assert [s["cpu"] for s in stats] == [TWO[i % len(TWO)] for i in range(threads)]
    for s in stats:
        assert set(s) >= {"cpu", "busy_s", "cpu_s", "lock_wait_s", "barrier_wait_s", "tasks"}
        assert 0 < s["busy_s"] <= r["time_s"] + SLACK_S
        assert s["busy_s"] + s["lock_wait_s"] + s["barrier_wait_s"] == pytest.approx(s["wall_s"])
        assert s["wall_s"] <= r["time_s"]
        assert s["cpu_s"] > 0 and s["lock_wait_s"] >= 0 and s["barrier_wait_s"] >= 0
        # a pool thread that never got a cpu while tasks were queued may run none
        assert s["tasks"] > 0 or "tasks" in KERNELS[name].tags
    assert sum(s["tasks"] for s in stats) > 0


def test_check_values():
    assert run_kernel("pi_integrate", 2, TWO, "small")["check_value"] == pytest.approx(
        3.141592653589793, abs=1e-9)
    n = 500
    # b = i mod 1024 and c = (i mod 512)/4, so a = b + 3c sums to this for n < 512:
    assert run_kernel("triad", 2, TWO, n)["check_value"] == sum(i + 0.75 * i for i in range(n))
    assert run_kernel("locked_update", 2, TWO, 12345)["check_value"] == 12345.0


def test_work_is_split_statically():
    r = run_kernel("locked_update", 3, TWO, 3001)
    assert sorted(s["tasks"] for s in r["thread_stats"]) == [1000, 1000, 1001]
    assert all(s["lock_acquires"] == s["tasks"] for s in r["thread_stats"])
    r = run_kernel("triad", 2, TWO, "small")
    assert [s["tasks"] for s in r["thread_stats"]] == [40, 40]  # one per pass


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two cpus")
def test_lock_kernel_contends_with_two_threads():
    one = run_kernel("locked_update", 1, TWO[:1], "small")["thread_stats"][0]
    assert one["lock_wait_s"] == 0 and one["lock_contended"] == 0
    # the two threads meet at the lock only while both run: on a shared VM the host may run
    # them one after the other for a whole small run (seen once at load 2), so up to 5 runs
    for _ in range(5):
        stats = run_kernel("locked_update", 2, TWO, "small")["thread_stats"]
        if sum(s["lock_contended"] for s in stats) > 0:
            break
    assert sum(s["lock_wait_s"] for s in stats) > 0
    assert sum(s["lock_contended"] for s in stats) > 0


def test_more_threads_than_cpus_round_robin():
    r = run_kernel("triad", 5, TWO[:1], 5000)
    assert [s["cpu"] for s in r["thread_stats"]] == [TWO[0]] * 5


@pytest.mark.parametrize("args, match", [
    (("nope", 1, [0], "small"), "unknown kernel 'nope'"),
    (("triad", 0, [0], "small"), "threads must be"),
    (("triad", True, [0], "small"), "threads must be"),
    (("triad", 1, [], "small"), "cpus must be a non-empty"),
    (("triad", 1, [-1], "small"), "non-negative"),
    (("triad", 1, [0], "huge"), "unknown size class 'huge'"),
    (("triad", 1, [0], 0), "size must be >= 1"),
    (("triad", 1, [0], 1 << 40), "triad size must be"),
    (("triad", 1, [0], 2.5), "size must be"),
    (("triad", 1, [4096], "small"), "cpu 4096 is not available"),
])
def test_invalid_inputs_raise_value_error(args, match):
    with pytest.raises(ValueError, match=match):
        run_kernel(*args)


def test_unavailable_cpu_is_value_error_in_native_module():
    with pytest.raises(ValueError, match="not available"):
        _kernels.run("triad", 1, [max(CPUS) + 1], 100)
    assert issubclass(_kernels.CheckError, RuntimeError)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "opptune.bench_suite", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_run_prints_one_json_line():
    p = _cli("run", "pi_integrate", "--threads", "2", "--cpus", ",".join(map(str, TWO)),
             "--size", "small")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert r["kernel"] == "pi_integrate" and r["checked"] is True
    assert len(r["thread_stats"]) == 2


def test_cli_errors_exit_2():
    p = _cli("run", "nope", "--threads", "1", "--cpus", "0")
    assert p.returncode == 2 and "unknown kernel" in p.stderr and p.stdout == ""
    p = _cli("run", "triad", "--threads", "1", "--cpus", "x")
    assert p.returncode == 2


def test_cli_list_json_and_light_import():
    p = _cli("list", "--json")
    assert p.returncode == 0
    assert {k["name"] for k in json.loads(p.stdout)} == set(KERNELS)
    code = ("import sys, opptune.bench_suite; "
            "print(any(m.split('.')[0] in ('numpy', 'scipy') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# Loop and data-parallel kernels (issue 19).
LOOP_KERNELS = ("pointer_chase", "matmul", "stencil", "histogram", "shared_queue", "triangle",
                "wavefront", "bfs")


def test_loop_kernels_are_catalogued_with_three_size_classes():
    p = _cli("list", "--json")
    assert p.returncode == 0, p.stderr
    listed = {k["name"]: k for k in json.loads(p.stdout)}
    for name in LOOP_KERNELS:
        sizes = listed[name]["sizes"]
        assert sizes["small"] < sizes["default"] < sizes["large"], name
        assert listed[name]["check"] and listed[name]["size_unit"]
        assert KERNELS[name].tags


def _needleman_wunsch(n):
    """The kernel's sequences and scoring (match +1, mismatch and gap -1), row by row."""
    x, mask, a, b = 0x3c6ef372fe94f82b, (1 << 64) - 1, [], []
    for _ in range(n):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        a.append(x & 3)
        b.append((x >> 16) & 3 if (x >> 8) % 8 == 0 else x & 3)
    row = [-j for j in range(n + 1)]
    for i in range(1, n + 1):
        diag, row[0] = row[0], -i
        for j in range(1, n + 1):
            up = row[j]
            row[j] = max(diag + (1 if a[i - 1] == b[j - 1] else -1), up - 1, row[j - 1] - 1)
            diag = up
    return row[n]


def test_loop_kernel_check_values_match_independent_computations():
    # sizes off the block and chunk multiples, three threads on two cpus
    n = 1000
    assert run_kernel("pointer_chase", 3, TWO, n)["check_value"] == n * (n - 1) / 2
    n = 70  # sum of C = (1'A)(B1); A and B as the kernel builds them
    a = [[((i * 3 + k * 5) % 17 - 8) / 8 for k in range(n)] for i in range(n)]
    b = [[((k * 7 + j * 2) % 13 - 6) / 4 for j in range(n)] for k in range(n)]
    want = sum(sum(a[i][k] for i in range(n)) * sum(b[k]) for k in range(n))
    assert run_kernel("matmul", 3, TWO, n)["check_value"] == want
    assert run_kernel("stencil", 3, TWO, 37)["check_value"] == pytest.approx(37 * 37, rel=1e-12)
    assert run_kernel("histogram", 3, TWO, 100_003)["check_value"] == 100_003
    assert run_kernel("shared_queue", 3, TWO, 10_007)["check_value"] == 10_007
    n = 301
    want = sum(i * n + j for i in range(n) for j in range(i)) % (1 << 64)
    assert run_kernel("triangle", 3, TWO, n)["check_value"] == float(want)
    n = 300
    assert run_kernel("wavefront", 3, TWO, n)["check_value"] == _needleman_wunsch(n)
    assert run_kernel("bfs", 3, TWO, 5000)["check_value"] >= 2  # depth of the BFS tree


@pytest.mark.parametrize("name", LOOP_KERNELS)
def test_loop_kernels_at_edge_sizes(name):
    lowest = {"pointer_chase": 2, "stencil": 4, "bfs": 2}.get(name, 1)
    for size in (lowest, lowest + 1, 257):
        for threads in (1, 3):
            assert run_kernel(name, threads, TWO, size)["checked"] is True
    with pytest.raises(ValueError, match=f"{name} size must be"):
        run_kernel(name, 1, TWO, lowest - 1) if lowest > 1 else _kernels.run(name, 1, TWO, 0)


def test_loop_kernels_parallelisation_styles():
    # triangle: contiguous row blocks, so the second thread does about 3x the first's work
    stats = run_kernel("triangle", 2, TWO, 6000)["thread_stats"]
    assert [s["tasks"] for s in stats] == [3000, 3000]
    assert stats[1]["cpu_s"] > 2 * stats[0]["cpu_s"]
    # wavefront: every 256 x 256 block once, a barrier per anti-diagonal
    stats = run_kernel("wavefront", 2, TWO, 1000)["thread_stats"]
    assert sum(s["tasks"] for s in stats) == 4 * 4
    # stencil: one task per sweep per thread; shared queue: each item produced and consumed
    assert [s["tasks"] for s in run_kernel("stencil", 2, TWO, 64)["thread_stats"]] == [64, 64]
    stats = run_kernel("shared_queue", 2, TWO, 5000)["thread_stats"]
    assert sum(s["tasks"] for s in stats) == 2 * 5000
    assert all(s["lock_acquires"] > 0 for s in stats)
    assert run_kernel("shared_queue", 1, TWO, 5000)["thread_stats"][0]["lock_contended"] == 0
