"""Which configuration to measure next when looking for the best one for a goal (pure).

The daemon does not measure the whole cores x frequency grid: it measures a small
space-filling design, then proposes one configuration at a time until the expected gain of
another measurement is too small, and recommends from what it measured and modelled.

Interface (used by ``opptune tune`` and by ``benchmarks/recommend.py``):

* :class:`Grid`: the candidate configurations (cores and, where the board has cpufreq, the
  frequency) as parallel arrays; a configuration is its index.
* :class:`Measured`: what was measured so far: grid index, time and power (NaN if unknown).
* :meth:`Sampler.propose` gives the next index to measure, or None with the reason to stop;
  :meth:`Sampler.estimate` gives the predicted time/power per grid point and the choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .objectives import Choice, Goal, choose


@dataclass
class Grid:
    cores: np.ndarray
    freq_mhz: np.ndarray | None = None  # None: the board has no frequency axis

    def __post_init__(self) -> None:
        self.cores = np.asarray(self.cores, dtype=float)
        if self.freq_mhz is not None:
            self.freq_mhz = np.asarray(self.freq_mhz, dtype=float)

    def __len__(self) -> int:
        return int(self.cores.size)

    @property
    def freq_khz(self) -> np.ndarray | None:
        return None if self.freq_mhz is None else self.freq_mhz * 1000.0


@dataclass
class Measured:
    index: list[int] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)  # NaN where the board has no meter

    def add(self, index: int, time_s: float, power_w: float = float("nan")) -> None:
        self.index.append(int(index))
        self.time_s.append(float(time_s))
        self.power_w.append(float(power_w))

    def __len__(self) -> int:
        return len(self.index)


@dataclass
class Proposal:
    index: int | None  # None: stop measuring
    reason: str


@dataclass
class Estimate:
    """Per grid point predictions (NaN where nothing could be predicted) and the choice."""
    time_s: np.ndarray
    power_w: np.ndarray | None
    time_lower: np.ndarray
    time_upper: np.ndarray
    power_lower: np.ndarray | None
    power_upper: np.ndarray | None
    choice: Choice
    model: str
    power_model: str | None
    power_measured: bool  # False: power comes from a model without any measured power


def space_filling(grid: Grid, k: int) -> list[int]:
    """``k`` grid indices spread over the grid: its corners (fewest/most cores at the lowest
    and highest frequency), then greedily the point farthest from those chosen (maximin on
    the axes scaled to [0, 1])."""
    pts = _unit(grid)
    chosen: list[int] = []
    for corner in ((0, 0), (1, 1), (1, 0), (0, 1)):
        d = np.abs(pts - np.asarray(corner, float)).sum(axis=1)
        i = int(np.argmin(d))
        if i not in chosen:
            chosen.append(i)
    while len(chosen) < min(k, len(grid)):
        d = np.min(np.abs(pts[:, None, :] - pts[None, chosen, :]).sum(axis=2), axis=1)
        d[chosen] = -1
        chosen.append(int(np.argmax(d)))
    return chosen[:k]


def _unit(grid: Grid) -> np.ndarray:
    cols = [grid.cores] + ([] if grid.freq_mhz is None else [grid.freq_mhz])
    out = []
    for c in cols:
        span = np.ptp(c)
        out.append((c - c.min()) / span if span > 0 else np.zeros_like(c))
    if len(out) == 1:
        out.append(np.zeros_like(out[0]))
    return np.column_stack(out)


class Sampler:
    """Corners first, then the predicted optimum of the fitted models until it is measured."""

    def __init__(self, goal: Goal, budget: int | None = None, initial: int = 4,
                 tolerance: float = 0.0):
        self.goal, self.budget, self.initial, self.tolerance = goal, budget, initial, tolerance

    def propose(self, grid: Grid, measured: Measured) -> Proposal:
        if self.budget is not None and len(measured) >= self.budget:
            return Proposal(None, f"the budget of {self.budget} measurements is spent")
        done = set(measured.index)
        for i in space_filling(grid, self.initial):
            if i not in done:
                return Proposal(i, "initial design")
        try:
            est = self.estimate(grid, measured)
        except ValueError as exc:
            rest = [i for i in space_filling(grid, len(grid)) if i not in done]
            if not rest:
                return Proposal(None, f"every configuration is measured ({exc})")
            return Proposal(rest[0], f"no model yet ({exc})")
        if est.choice.index in done:
            return Proposal(None, "the predicted optimum is measured")
        return Proposal(est.choice.index, "predicted optimum")

    def estimate(self, grid: Grid, measured: Measured) -> Estimate:
        """Fit time (and power where the goal needs it) to ``measured`` and choose."""
        from .fitter import fit_group
        from .models.base import Observations
        from .models.energy import PowerModeler

        idx = np.asarray(measured.index, dtype=int)
        freq = None if grid.freq_mhz is None else grid.freq_mhz[idx]
        power = np.asarray(measured.power_w, dtype=float)
        obs = Observations(cores=grid.cores[idx], time_s=np.asarray(measured.time_s, float),
                           freq_mhz=freq, power_w=power if np.isfinite(power).any() else None)
        query = Observations.query(grid.cores, grid.freq_mhz)
        try:
            model, _ = fit_group(obs, target=query)
        except Exception as exc:
            raise ValueError(f"no time model: {exc}") from exc
        t = model.predict(query)
        p = pm = None
        if obs.power_w is not None:
            try:
                pm = PowerModeler().fit(obs)
                p = pm.predict(query)
            except Exception:
                p = pm = None
        if self.goal.needs_power and p is None:
            raise ValueError("no power model: too few runs with power")
        choice = choose(self.goal, t.value, None if p is None else p.value, grid.cores,
                        grid.freq_khz, self.tolerance)
        return Estimate(np.asarray(t.value, float), None if p is None else p.value,
                        np.asarray(t.lower, float), np.asarray(t.upper, float),
                        None if p is None else p.lower, None if p is None else p.upper,
                        choice, model.name, None if pm is None else pm.name, p is not None)
