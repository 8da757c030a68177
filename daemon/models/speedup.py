"""The shared structure of the speedup families over cores, with a single-core time T1(F).

The speedup families (amdahl.py, usl.py, memwall.py) share one structure:

    t(p, F) = T1(F) * g(p, F; theta),   g = 1 / S_p  (relative time, g(1, F) = 1)

Fitting minimises squared log-time residuals within bounds: many starts scored at once, the
best few polished by a small projected Levenberg-Marquardt solver (lsq.py) with analytic
Jacobians (scipy's ``least_squares``, the previous solver, stays selectable: ``solver="scipy"``).

T1(F) (choice documented in docs/models.md):
* ``per_freq`` (default): log T1 is a free level per distinct training frequency (or one level
  when there is no frequency axis). For fixed theta the optimal levels are the per-frequency
  means of ``log t - log g`` (variable projection), so the solver only sees theta. This uses
  every point at a frequency, not only p = 1, and needs no measurement at one core (relearn
  starts at 32 cores). At frequencies not in training, T1(F) = c0 + c1/F, fitted (non-negative)
  to the levels: seed 003 eq. 3 + 9 with t_c ~ 1/F give T_s = C t_c + M (t_c + k/F_mem),
  i.e. exactly that shape. With one training frequency T1 ~ 1/F (CPU-bound assumption 3).
* ``hyper``: when the data are too few for one level per frequency plus theta, T1(F) = c0 + c1/F
  is fitted jointly with theta (two parameters instead of one per frequency).
* A family with nested sub-models (``restrictions``, memwall) fits both parameterisations
  (with > 2 frequencies) for the full model and each restriction and keeps the lowest AICc
  (aicc.py).

This file: the course of a fit. What a family defines is in shape.py; the parts: the usable
rows and their layout (fit_data.py), cores as compute capacity with SMT (smt.py), which
variants are fitted and the AICc choice (aicc.py), one variant's fit (solve.py, its residuals
in residuals.py, the polish of its best starts in polish.py), the fitted model (speedup_fit.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .aicc import best_variant
from .base import Modeler, NotEnoughData, Observations
from .fit_data import FitData, clean
from .shape import SpeedupShape
from .smt import SMT_PRIOR, SMT_YIELDS, amdahl_grid_cost, effective_cores, phys_cores
from .speedup_fit import SpeedupFit, build_fit


class SpeedupFamily(SpeedupShape, Modeler):
    """A speedup model S(p, F; theta) times a fitted T1(F); a family defines its shape
    (``SpeedupShape``: at least ``rel_time``, ``candidates``).

    ``solver``: "lm" (``lsq.least_squares_box``, the default) or "scipy" (bounded
    ``scipy.optimize.least_squares``, trf then dogbox: the previous solver, kept for
    comparison; nested restrictions are always solved with "lm")."""

    def __init__(self, t1_mode: str = "auto", anchor: bool = False, solver: str = "lm") -> None:
        if t1_mode not in ("auto", "per_freq", "hyper"):
            raise ValueError(f"t1_mode must be auto, per_freq or hyper, not {t1_mode!r}")
        if solver not in ("lm", "scipy"):
            raise ValueError(f"solver must be lm or scipy, not {solver!r}")
        self.t1_mode = t1_mode
        self.anchor = anchor
        self.solver = solver

    def fit(self, obs: Observations) -> SpeedupFit:
        p, freq, t = clean(obs)
        phys = phys_cores(obs)
        if phys is None:
            return self._fit(p, freq, t, None, 1.0)
        if p.max() <= phys:
            # nothing measured beyond the physical cores: the prior yield
            return self._fit(p, freq, t, phys, SMT_PRIOR)
        # the yield y is chosen on a grid by the lowest training cost; families with more
        # than two parameters (memwall) take y from Amdahl's cost on a fine grid of f (one
        # vectorised pass per y instead of a fit per y)
        if len(self.param_names) <= 2:
            fits = [self._fit(p, freq, t, phys, yv) for yv in SMT_YIELDS]
            return min(fits, key=lambda f: f.cost)
        costs = [amdahl_grid_cost(effective_cores(p, phys, yv), freq, np.log(t))
                 for yv in SMT_YIELDS]
        return self._fit(p, freq, t, phys, SMT_YIELDS[int(np.argmin(costs))])

    def _fit(self, p_cores: np.ndarray, freq: np.ndarray | None, t: np.ndarray,
             phys: float | None, smt_yield: float) -> SpeedupFit:
        data = FitData.of(effective_cores(p_cores, phys, smt_yield), freq, t)
        best = best_variant(self, data)
        if best is None:
            raise NotEnoughData(f"{self.name}: no finite fit for these data")
        return build_fit(self, data, best, p_cores, phys, smt_yield)

    def from_state(self, state: dict[str, Any]) -> SpeedupFit:
        """A fitted model back from ``SpeedupFit.to_state()`` (for saved fits)."""
        fit = SpeedupFit(self, np.asarray(state["theta"], float), state["scale"],
                         float(state["sigma"]), int(state["dof"]))
        fit.quality = dict(state.get("quality", {}))
        return fit
