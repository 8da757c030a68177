"""Recommendation from a fitted time model (pure: no I/O).

Objective for now: minimum time, economically. Among the configurations the platform has,
pick the one with the fewest cores (then the lowest frequency) whose predicted time is within
``tolerance`` of the best predicted time: cores that buy less than the tolerance are better
left to other work.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence, TypeVar

import numpy as np

from .fitter import fit_rows, set_clocks_khz
from .models.base import FittedModel, Observations
from .objectives import fewest_within
from .planner import (cluster_order, offered_frequencies, offered_range, physical_cores,
                      sweep_order)


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


def candidate_grid(platform: dict[str, Any], frequencies_khz: Sequence[int] | None = None,
                   max_cores: int | None = None, order: Sequence[int] | None = None
                   ) -> tuple[list[int], np.ndarray, np.ndarray | None]:
    """The configurations a recommendation chooses from: (cpu order, cores, freq_khz or None).

    Cores run 1..len(order) (the board's sweep order unless ``order`` is given, e.g. one
    cluster's), capped by ``max_cores``. With ``frequencies_khz`` (the frequencies the model was
    fitted on) each core count is paired with every frequency the policies of its cpus offer
    (the platform's cpufreq tables; a range's 100 MHz steps, planner.range_steps), plus the
    fitted ones the agent would accept; when the
    platform describes no cpufreq, with the fitted ones only. Without them, cores only."""
    order = list(order) if order else sweep_order(platform)
    n = len(order) if not max_cores else min(max_cores, len(order))
    fitted = sorted({int(f) for f in frequencies_khz or [] if f})
    if not fitted:
        return order, np.arange(1, n + 1, dtype=float), None
    cc: list[float] = []
    ff: list[float] = []
    for k in range(1, n + 1):
        table = offered_frequencies(platform, order[:k])
        if table:
            # a range (no table) takes the fitted clocks within it too, off its steps
            rng = offered_range(platform, order[:k])
            freqs = sorted(set(table) | {f for f in fitted
                                         if rng and rng[0] <= f <= rng[1]})
        else:
            freqs = fitted
        cc += [float(k)] * len(freqs)
        ff += [float(f) for f in freqs]
    return order, np.asarray(cc), np.asarray(ff)


Row = tuple[int, "float | None", float]  # a run as (cores, freq_mhz or None, time_s)


@dataclass(frozen=True)
class FitSetting:
    """What a group's fit and recommendation work over, decided once for the daemon and the
    report alike."""
    rows: list[Row]  # the runs the fit uses
    order: list[int]  # the cpus in sweep order (the group's cluster, or the board)
    freqs_khz: list[int] | None  # the measured frequencies, when the runs carry them
    phys_cores: int | None  # physical cores of ``order`` before SMT siblings (planner)
    outliers_left_out: int = 0  # runs dropped by the MAD rule (fitter.without_outliers)

    @property
    def measured_cores(self) -> int | None:
        """The most cores of the runs (None: no runs): the daemon's own push stays within
        them, so its model choice is validated for those (Recommender._submit)."""
        return max((int(r[0]) for r in self.rows), default=0) or None

    @property
    def axis(self) -> list[int] | None:
        """The frequency axis of the model and its candidate grid: two or more frequencies."""
        return self.freqs_khz if self.freqs_khz and len(self.freqs_khz) >= 2 else None


def fit_setting(platform: dict[str, Any], variant: str, rows: Sequence[Row]) -> FitSetting:
    """The fit setting of a group's runs on ``platform``.

    The runs are ``fitter.fit_rows``'s: without those lacking a frequency where any has one
    (the board had no cpufreq then, or the governor chose), without each configuration's
    outliers (MAD rule; the store keeps them); the one place both the daemon's fits and the
    report's refits take their runs from. With no sweep order in the description, cpus
    0..n-1 up to the most cores run."""
    kept, left_out = fit_rows(rows)
    # the MAD rule never empties a configuration (its median stays), so the configurations
    # of ``kept`` are those of every run fit_rows considered
    order = cluster_order(platform, variant) if platform else []
    if not order and kept:
        order = list(range(max(int(r[0]) for r in kept)))
    freqs = set_clocks_khz(kept) or None
    return FitSetting(kept, order, freqs, physical_cores(platform, order) if platform else None,
                      left_out)


T = TypeVar("T")


def platform_others(group: Sequence[str], groups: Iterable[tuple[Sequence[str], T]]
                    ) -> list[T]:
    """The other groups of ``group``'s platform: the values of ``groups`` ((platform,
    workload, input, variant) key, value) whose key names the same platform and is not
    ``group``, in the given order. Their replays size the group's interval
    (``fitter.fit_group(others=)``); the daemon's fits, the report's refits and ``opptune
    fit`` all gather them here, so all three show one interval for the same runs. (Every
    platform's groups where the platform has too few: measured, not taken, docs/models.md.)"""
    key = tuple(group)
    return [v for k, v in groups if tuple(k) != key and k[0] == key[0]]


def target_observations(platform: dict[str, Any], frequencies_khz: Sequence[int] | None = None,
                        max_cores: int | None = None, order: Sequence[int] | None = None
                        ) -> Observations:
    """The candidate grid as query Observations (freq in MHz): what model choice must predict."""
    _, cc, ff = candidate_grid(platform, frequencies_khz, max_cores, order)
    return Observations.query(cc) if ff is None else Observations.query(cc, ff / 1000.0)


def recommend(model: FittedModel, platform: dict[str, Any], tolerance: float = 0.05,
              frequencies_khz: Sequence[int] | None = None,
              max_cores: int | None = None, order: Sequence[int] | None = None
              ) -> Recommendation:
    """Recommend cores (and a frequency, when ``frequencies_khz`` is given: the model has a
    frequency axis) over :func:`candidate_grid`."""
    order, cc, ff = candidate_grid(platform, frequencies_khz, max_cores, order)
    if ff is not None:
        pred = model.predict(Observations.query(cc, ff / 1000.0))
    else:
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
