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

from .objectives import Choice, Goal, choose, feasible, objective_values


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
    # each point's distance to the nearest chosen one, updated with each choice: O(grid) a
    # step (recomputing it against every chosen point took minutes for a whole 672-point grid)
    d = np.min(np.abs(pts[:, None, :] - pts[None, chosen, :]).sum(axis=2), axis=1)
    d[chosen] = -1
    while len(chosen) < min(k, len(grid)):
        i = int(np.argmax(d))
        chosen.append(i)
        d = np.minimum(d, np.abs(pts - pts[i]).sum(axis=1))
        d[chosen] = -1
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


_EXPONENT = {"time": None, "energy": 1, "edp": 2, "ed2p": 3}


def fit_minimum(grid: Grid) -> int:
    """Measurements the smallest time and power families need (their parameters): 3 on a
    cores x frequency grid, 2 on a cores-only one."""
    return 3 if grid.freq_mhz is not None else 2


class Sampler:
    """Adaptive sampling for a goal (issue 17, ideas (a)-(d)).

    1. Initial design (d): the first points of :func:`space_filling` (:meth:`initial_size`:
       3 corners, or the 2 ends of a cores-only grid, one more when the budget allows).
    2. Then (b) the unmeasured configuration with the highest expected improvement of the
       objective times the probability of meeting the limits, under the ensemble of
       physically shaped models of :mod:`.acquisition` (a); the improvement is counted over
       the best measured feasible configuration, or over the recommendation's predicted
       mean where that is only predicted but safe (under ``min_gain`` risk of breaking the
       limits).
    3. Stop (c) when that expected gain is below ``min_gain`` (relative, default 1 %), when
       the budget is spent or when everything is measured; before stopping (and with the
       last measurement of the budget) the recommendation is measured if it is not yet,
       unless, with the last one, the models give it less than ``min_gain`` risk of
       breaking the limits: then that measurement goes to the candidate with the highest
       expected gain over the recommendation, times P(feasible).

    The recommendation (:meth:`estimate`) is judged on measured values where the
    configuration was measured and on conservative bounds (upper time and power) where not,
    so a configuration measured as infeasible is never chosen and a power cap is checked on
    measured power first.
    """

    def __init__(self, goal: Goal, budget: int | None = None, initial: int | None = None,
                 tolerance: float = 0.0, min_gain: float = 0.01):
        self.goal, self.budget, self.tolerance = goal, budget, tolerance
        self.initial, self.min_gain = initial, min_gain

    def initial_size(self, grid: Grid) -> int:
        """Points of the initial design: explicit, else the parameters of the smallest time
        and power families (3 on a cores x frequency grid, 2 on a cores-only one), one more
        when the budget still leaves at least 2 adaptive measurements."""
        if self.initial is not None:
            k = self.initial
        else:
            k = fit_minimum(grid)
            if self.budget is None or self.budget >= k + 3:
                k += 1
        return max(1, min(k, len(grid), self.budget or len(grid)))

    def propose(self, grid: Grid, measured: Measured) -> Proposal:
        if self.budget is not None and len(measured) >= self.budget:
            return Proposal(None, f"the budget of {self.budget} measurements is spent")
        done = set(measured.index)
        if len(done) >= len(grid):
            return Proposal(None, "every configuration is measured")
        for i in space_filling(grid, self.initial_size(grid)):
            if i not in done:
                return Proposal(i, "initial design")
        try:
            ens, j, sj, pfeas, best = self._acquire(grid, measured)
        except ValueError as exc:
            rest = [i for i in space_filling(grid, len(grid)) if i not in done]
            return Proposal(rest[0], f"no model yet ({exc})")
        todo = np.ones(len(grid), bool)
        todo[list(done)] = False
        if best is None:  # nothing measured meets the limits: look where they are likeliest met
            mean_j = ens.weight @ j
            order = np.lexsort((mean_j, -np.round(pfeas, 3)))
            i = int(next(k for k in order if todo[k]))
            return Proposal(i, f"nothing measured meets the limits; P(feasible) "
                               f"{pfeas[i]:.2f} here")
        from .acquisition import expected_improvement
        chosen = self._estimate(grid, ens).choice.index  # the models just fitted, not refitted
        # a predicted recommendation the models give less than min_gain risk of breaking the
        # limits is already in hand: a measurement's gain is counted over it (its mean), not
        # over the best measured configuration
        safe = bool(todo[chosen] and 1.0 - pfeas[chosen] < self.min_gain)
        bar = min(best, float(np.exp(ens.weight @ j[:, chosen]))) if safe else best
        gain = expected_improvement(j, sj, ens.weight, bar) * pfeas
        gain[~todo] = -1.0
        i = int(np.argmax(gain))
        last = self.budget is not None and len(measured) == self.budget - 1
        if gain[i] < self.min_gain or last:
            # before stopping, measure the recommendation itself if it is only predicted,
            # but the budget's last measurement goes where it can still beat a safe one
            if safe and last and gain[i] >= self.min_gain:
                g2 = gain.copy()
                g2[chosen] = -1.0
                k = int(np.argmax(g2))
                if g2[k] >= self.min_gain:
                    return Proposal(k, f"last measurement: expected gain over the "
                                       f"recommendation {100 * g2[k]:.2g} %")
            if todo[chosen]:
                return Proposal(chosen, "verify the recommended configuration")
        if gain[i] < self.min_gain:
            return Proposal(None, f"the expected gain of one more measurement "
                                  f"({100 * max(gain[i], 0):.2g} %) is below "
                                  f"{100 * self.min_gain:g} %")
        return Proposal(i, f"expected gain {100 * gain[i]:.2g} %")

    def _ensemble(self, grid: Grid, measured: Measured):
        from .models.surrogate import build_ensemble
        if len(measured) == 0:
            raise ValueError("nothing measured yet")
        idx = np.asarray(measured.index, dtype=int)
        t = np.asarray(measured.time_s, float)
        pw = np.asarray(measured.power_w, float)
        ok = np.isfinite(t) & (t > 0)
        # power is modelled when the goal needs it, and shown whenever every run has it
        use_power = self.goal.needs_power or bool(ok.any() and np.all(
            np.isfinite(pw[ok]) & (pw[ok] > 0)))
        if self.goal.needs_power:
            ok &= np.isfinite(pw) & (pw > 0)
            if not ok.any():
                raise ValueError("no power model: too few runs with power")
        idx, t, pw = idx[ok], t[ok], pw[ok]
        idx, first = np.unique(idx, return_index=True)  # a repeated configuration: first run
        t, pw = t[first], pw[first]
        has_freq = grid.freq_mhz is not None
        x = grid.freq_mhz / grid.freq_mhz.max() if has_freq else np.ones(len(grid))
        unit = _unit(grid)
        try:
            ens = build_ensemble(grid.cores, x, idx, t, pw if use_power else None, has_freq,
                                 unit)
        except ValueError:
            if self.goal.needs_power or not use_power:
                raise
            ens = build_ensemble(grid.cores, x, idx, t, None, has_freq, unit)
        return ens, idx, t, pw

    def _acquire(self, grid: Grid, measured: Measured):
        """Ensemble, members' log objective and noise, P(feasible), best measured value."""
        from .acquisition import log_objective, prob_below
        ens, idx, t, pw = self._ensemble(grid, measured)
        j, sj = log_objective(ens, _EXPONENT[self.goal.objective])
        pfeas = np.ones(len(grid))
        if self.goal.deadline_s is not None:
            pfeas *= prob_below(ens.log_t, ens.sigma_t, ens.weight, self.goal.deadline_s)
        if self.goal.power_cap_w is not None:
            pfeas *= prob_below(ens.log_p, ens.sigma_p, ens.weight, self.goal.power_cap_w)
        mvals = objective_values(self.goal, t, pw if self.goal.needs_power else None)
        mok = feasible(self.goal, t, pw if self.goal.needs_power else None)
        best = float(mvals[mok].min()) if mok.any() else None
        return ens, j, sj, pfeas, best

    def estimate(self, grid: Grid, measured: Measured) -> Estimate:
        """Predicted time/power per grid point (measured values where measured) with 90 %
        bounds, and the choice: measured values where measured, the upper bounds elsewhere."""
        ens, _, _, _ = self._ensemble(grid, measured)  # ValueError: nothing to fit yet
        return self._estimate(grid, ens)

    def _estimate(self, grid: Grid, ens) -> Estimate:
        """:meth:`estimate` from the fitted ensemble ``ens``."""
        from .acquisition import lower, upper
        w = ens.weight
        t_mean = np.exp(w @ ens.log_t)
        # the bounds enclose the mean even where the spread is nil (a measured point)
        t_lo = np.minimum(lower(ens.log_t, ens.sigma_t, w), t_mean)
        t_up = np.maximum(upper(ens.log_t, ens.sigma_t, w), t_mean)
        p_mean = p_lo = p_up = None
        if ens.log_p is not None:
            p_mean = np.exp(w @ ens.log_p)
            p_lo = np.minimum(lower(ens.log_p, ens.sigma_p, w), p_mean)
            p_up = np.maximum(upper(ens.log_p, ens.sigma_p, w), p_mean)
        choice = choose(self.goal, t_up, p_up, grid.cores, grid.freq_khz, self.tolerance)
        model = "ensemble[" + ",".join(ens.time_names) + "]"
        pmodel = None if ens.log_p is None else "ensemble[" + ",".join(ens.power_names) + "]"
        return Estimate(t_mean, p_mean, t_lo, t_up, p_lo, p_up, choice, model, pmodel,
                        ens.log_p is not None)
