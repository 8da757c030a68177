"""Sweep planning: which points an agent measures for one workload.

A sweep takes cores 1..N in the platform's sweep order (the agent's topology puts distinct
physical cores and NUMA nodes first), one thread per core, and, when frequencies are
configured, every core count at every frequency.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..shared.config import SweepDefaults


def sweep_order(platform: dict[str, Any]) -> list[int]:
    """The cpus in the order a sweep adds them: ``sweep_order``, else ``cpus_online``, else
    0..n_cpus-1."""
    for key in ("sweep_order", "cpus_online"):
        order = platform.get(key)
        if isinstance(order, list) and order and all(isinstance(c, int) for c in order):
            return list(dict.fromkeys(order))
    n = platform.get("n_cpus")
    return list(range(n)) if isinstance(n, int) and n > 0 else [0]


def new_job_id() -> str:
    return "job-" + uuid.uuid4().hex[:20]


def plan_sweep(platform: dict[str, Any], workload: str, defaults: SweepDefaults,
               size: str | None = None, reps: int | None = None, warmup: int | None = None,
               max_cores: int | None = None, frequencies: list[int] | None = None
               ) -> dict[str, Any]:
    """A ``job`` body for ``workload`` on ``platform``; arguments left None take the defaults."""
    order = sweep_order(platform)
    limit = defaults.max_cores if max_cores is None else max_cores
    n = min(limit, len(order)) if limit and limit > 0 else len(order)
    freqs = list(defaults.frequencies if frequencies is None else frequencies)
    points = []
    for cores in range(1, n + 1):
        for f in (freqs or [None]):
            points.append({"cpus": order[:cores], "threads": cores, "freq_khz": f})
    return {
        "job_id": new_job_id(),
        "workload": workload,
        "size": defaults.size if size is None else size,
        "points": points,
        "reps": defaults.reps if reps is None else reps,
        "warmup": defaults.warmup if warmup is None else warmup,
    }
