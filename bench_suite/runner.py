"""run_kernel: validate arguments, run a native kernel, shape its result."""
from __future__ import annotations

from .accounting import run_parameters
from .catalogue import KERNELS


def _native():
    try:
        from . import _kernels
    except ImportError as exc:  # a source checkout that was never built
        raise RuntimeError("the native kernels are not built (opptune.bench_suite._kernels): "
                           "install the package with `pip install -e .`") from exc
    return _kernels


def run_kernel(name: str, threads: int, cpus: list[int], size: str | int = "default") -> dict:
    """Run kernel `name` once with `threads` threads pinned round-robin over `cpus`.

    Returns {"kernel", "threads", "cpus", "size" (int), "size_class" (str or None),
    "size_unit", "time_s" (wall of the timed region), "checked": True, "check_value",
    "thread_stats": one dict per thread with cpu, busy_s, cpu_s, wall_s, lock_wait_s,
    barrier_wait_s, tasks, lock_acquires, lock_contended, and MPET's accounting exec_s,
    idle_s, create_s, dist_s, switch_s, join_s, spawned, stolen}, "mpet": the run's
    parameters l, w, c, d, s, j, U and exec_s (accounting.run_parameters; R needs t(1) of
    another run, and is included as R = U for a one-thread run). wall_s is the thread's own span in
    the timed region (time_s - wall_s is its idle tail); busy_s is wall_s less lock and barrier
    waits; cpu_s below busy_s means the thread was preempted. Raises ValueError for bad arguments (including a cpu this process may
    not run on), MemoryError when the data does not fit, RuntimeError when the run fails or its
    self-check does not hold.
    """
    kernel = KERNELS.get(name) if isinstance(name, str) else None
    if kernel is None:
        raise ValueError(f"unknown kernel {name!r}; known: {', '.join(sorted(KERNELS))}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    cpus = list(cpus) if not isinstance(cpus, (str, bytes)) else cpus
    if not isinstance(cpus, list) or not cpus:
        raise ValueError(f"cpus must be a non-empty list of cpu numbers, got {cpus!r}")
    for c in cpus:
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"cpus must be non-negative integers, got {c!r} in {cpus!r}")
    n = kernel.resolve_size(size)
    res = _native().run(name, threads, cpus, n)
    return {
        "kernel": name,
        "threads": threads,
        "cpus": cpus,
        "size": n,
        "size_class": size if isinstance(size, str) else None,
        "size_unit": kernel.size_unit,
        "time_s": res["time_s"],
        "checked": True,
        "check_value": res["check_value"],
        "thread_stats": res["thread_stats"],
        "mpet": _mpet(res["time_s"], res["thread_stats"]),
    }


def _mpet(time_s: float, stats: list[dict]) -> dict:
    params = run_parameters(time_s, stats)
    if len(stats) == 1:  # this run is its own t(1)
        params["R"] = params["exec_s"] / time_s
    return params
