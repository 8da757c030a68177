"""Cores as compute capacity where a board has SMT siblings (or is oversubscribed): the
physical core count from the group's hardware descriptor, the yield of a thread beyond it,
and the cheap Amdahl score that picks that yield for the families with many parameters."""

from __future__ import annotations

import numpy as np

from .base import Observations

SMT_YIELDS = (0.0, 0.25, 0.5, 1.0)  # compute added by a thread beyond the physical cores
SMT_PRIOR = 0.25    # yield assumed when no training row lies beyond the physical cores: the
                    # median yield fitted on the full xplat + loghin SMT groups (46)


def phys_cores(obs: Observations) -> float | None:
    """The physical core count from the hardware descriptor column ``hw_phys_cores`` (tidy.py
    passes it as a counter) when it is one positive value for the whole group, else None."""
    col = obs.counters.get("hw_phys_cores")
    if col is None:
        return None
    v = np.unique(col[np.isfinite(col)])
    return float(v[0]) if v.size == 1 and v[0] >= 1 else None


def effective_cores(p: np.ndarray, phys: float | None, smt_yield: float) -> np.ndarray:
    """Cores as compute capacity: threads beyond the physical cores (SMT siblings, or
    oversubscription) add ``smt_yield`` of a core each: min(p, P) + y max(p - P, 0)."""
    if phys is None:
        return p
    return np.minimum(p, phys) + smt_yield * np.maximum(p - phys, 0.0)


def amdahl_grid_cost(p: np.ndarray, freq: np.ndarray | None, logt: np.ndarray) -> float:
    """Least squared log residual of Amdahl (eq. 5) over a grid of parallel fractions, with
    the optimal log T1 level per frequency (variable projection)."""
    keys = (np.zeros(p.size, dtype=int) if freq is None
            else np.unique(freq, return_inverse=True)[1])
    f = np.linspace(0.0, 1.0, 201)[:, None]
    r = logt[None, :] - np.log((1.0 - f) + f / p[None, :])
    for k in np.unique(keys):
        sel = keys == k
        r[:, sel] -= r[:, sel].mean(axis=1, keepdims=True)
    return float(np.min(np.sum(r ** 2, axis=1)))

