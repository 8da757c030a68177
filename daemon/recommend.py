"""Recommendation from a fitted time model (pure: no I/O).

Objective for now: minimum time, economically. Among the configurations the platform has,
pick the one with the fewest cores (then the lowest frequency) whose predicted time is within
``tolerance`` of the best predicted time: cores that buy less than the tolerance are better
left to other work.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from .models.base import FittedModel, Observations
from .planner import sweep_order


@dataclass
class Recommendation:
    cores: int
    cpus: list[int]
    threads: int
    freq_khz: int | None
    predicted_time_s: float
    lower_s: float
    upper_s: float
    best_cores: int  # where the predicted time is lowest
    best_freq_khz: int | None
    best_time_s: float
    tolerance: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fewest_within(cores: Sequence[float], times: Sequence[float], tolerance: float,
                  freqs: Sequence[float] | None = None) -> int:
    """Index of the point with the fewest cores (then lowest frequency) whose time is within
    ``tolerance`` (relative) of the minimum; ValueError when no time is finite."""
    c = np.asarray(cores, dtype=float)
    t = np.asarray(times, dtype=float)
    f = np.zeros_like(c) if freqs is None else np.nan_to_num(np.asarray(freqs, dtype=float))
    ok = np.isfinite(t) & (t > 0)
    if not ok.any():
        raise ValueError("no finite positive predicted time to recommend from")
    best = t[ok].min()
    within = np.flatnonzero(ok & (t <= best * (1.0 + tolerance)))
    return int(within[np.lexsort((f[within], c[within]))[0]])


def recommend(model: FittedModel, platform: dict[str, Any], tolerance: float = 0.05,
              frequencies_khz: Sequence[int] | None = None,
              max_cores: int | None = None) -> Recommendation:
    """Recommend cores (and frequency, when ``frequencies_khz`` is given) over 1..n_cpus."""
    order = sweep_order(platform)
    n = len(order) if not max_cores else min(max_cores, len(order))
    cores = np.arange(1, n + 1, dtype=float)
    freqs = list(frequencies_khz or [])
    if freqs:
        cc, ff = np.meshgrid(cores, np.asarray(freqs, dtype=float), indexing="ij")
        cc, ff = cc.ravel(), ff.ravel()
        pred = model.predict(Observations.query(cc, ff / 1000.0))
    else:
        cc, ff = cores, None
        pred = model.predict(Observations.query(cc))
    value = np.asarray(pred.value, dtype=float)
    i = fewest_within(cc, value, tolerance, ff)
    finite = np.where(np.isfinite(value), value, np.inf)
    b = int(np.argmin(finite))
    k = int(cc[i])
    return Recommendation(
        cores=k, cpus=order[:k], threads=k,
        freq_khz=None if ff is None else int(ff[i]),
        predicted_time_s=float(value[i]),
        lower_s=float(np.asarray(pred.lower, dtype=float)[i]),
        upper_s=float(np.asarray(pred.upper, dtype=float)[i]),
        best_cores=int(cc[b]), best_freq_khz=None if ff is None else int(ff[b]),
        best_time_s=float(value[b]), tolerance=tolerance)
