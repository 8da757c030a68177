"""MPET's scalability parameters of one run (seed 000, Table 1 and eq. 3-4).

The runtime charges every instant of each thread's timed region to exactly one category:
task execution, lock wait, idle, task creation, distribution, switch, join (runtime.h). With
n threads and the run's wall time t(n), the available CPU time is n·t(n), and

    l, w, c, d, s, j = (sum over threads of lock, idle, create, dist, switch, join) / (n·t(n))
    U(n) = 1 - (l + w + c + d + s + j)
    R(n) = (sum over threads of execution time) / t(1)

where t(1) is the wall time of the same kernel and size on one thread (so R(1) = U(1), which
is below 1 by the pool's own overheads). Then t(n) = t(1)·R(n) / (n·U(n)) (eq. 3): the
categories partition n·t(n), so the identity holds up to rounding; IDENTITY_RTOL states how far.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

# Parameter -> per-thread stats field it sums (U and R are derived).
PARAMETERS: Mapping[str, str] = {"l": "lock_wait_s", "w": "idle_s", "c": "create_s",
                                 "d": "dist_s", "s": "switch_s", "j": "join_s"}
EXEC = "exec_s"

# The categories are read from one monotonic clock and each clock read closes one interval
# and opens the next, so per thread they sum to t(n) exactly but for floating-point rounding
# (a few ulp of t(n) per interval, ~1e-12 relative for runs of up to millions of intervals).
# 1e-6 is far above rounding and far below anything real: one lost or double-counted
# interval of a microsecond in a one-second run breaks it.
IDENTITY_RTOL = 1e-6


def run_parameters(time_s: float, thread_stats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's parameters without R: {"n", "t_s", "exec_s" (sum over threads), "l", "w",
    "c", "d", "s", "j", "U", "closure"}. closure is the categories' sum over n·t(n) (1 when
    the accounting is complete). ValueError for a run without threads, time or accounting."""
    n = len(thread_stats)
    if n < 1 or not time_s or time_s <= 0:
        raise ValueError(f"a run needs threads and a positive time, got {n} threads, "
                         f"time {time_s!r}")
    missing = [f for f in (EXEC, *PARAMETERS.values()) if f not in thread_stats[0]]
    if missing:
        raise ValueError(f"thread stats lack the MPET accounting ({', '.join(missing)})")
    avail = n * time_s
    out: dict[str, Any] = {"n": n, "t_s": time_s,
                           "exec_s": sum(s[EXEC] for s in thread_stats)}
    for p, f in PARAMETERS.items():
        out[p] = sum(s[f] for s in thread_stats) / avail
    out["U"] = 1.0 - sum(out[p] for p in PARAMETERS)
    out["closure"] = (out["exec_s"] / avail) + sum(out[p] for p in PARAMETERS)
    return out


def with_redundancy(params: Mapping[str, Any], t1_s: float) -> dict[str, Any]:
    """params plus R = exec_s / t(1), t(1) being the one-thread wall time of the same work."""
    if not t1_s or t1_s <= 0:
        raise ValueError(f"t(1) must be a positive time, got {t1_s!r}")
    return {**params, "R": params["exec_s"] / t1_s}


def identity_time(t1_s: float, R: float, U: float, n: int) -> float:
    """t(n) from eq. 3: t(1)·R(n) / (n·U(n))."""
    return t1_s * R / (n * U)
