"""What a speedup family defines: the relative time g(p, F; theta) = T_p / T_1 over cores (and
frequency), its gradient, the bounds and starting points of theta, nested restrictions; the
parts of the fit (aicc.py, solve.py, residuals.py, speedup_fit.py) see a family through this."""

from __future__ import annotations

from typing import Any

import numpy as np


class SpeedupShape:
    """g(p, F; theta) of one family and the fit options the parts read (``t1_mode``,
    ``solver``, ``anchor``: set by ``speedup.SpeedupFamily``)."""
    name: str = ""
    param_names: tuple[str, ...] = ()
    lower: tuple[float, ...] = ()
    upper: tuple[float, ...] = ()
    piecewise = False    # g has kinks (a max() or min() of smooth pieces): compass search
    t1_mode: str
    solver: str
    anchor: bool

    def rel_time(self, theta: np.ndarray, p: np.ndarray, freq: np.ndarray | None) -> np.ndarray:
        """g = T_p / T_1 for each row of ``theta`` (K, m) and point (n,): shape (K, n)."""
        raise NotImplementedError

    def log_rel_time_grad(self, theta: np.ndarray, p: np.ndarray,
                          freq: np.ndarray | None) -> np.ndarray | None:
        """d log g / d theta at one theta (m,) for each point: (n, m); None = use finite
        differences."""
        return None

    def log_rel_time_and_grad(self, theta: np.ndarray, p: np.ndarray,
                              freq: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """log g (n,) and its gradient as in ``log_rel_time_grad`` at one theta (m,); a
        family overrides it to share the work between the two and to accept a batch of
        thetas (K, m) -> (K, n), (K, n, m), which enables the batched pre-polish."""
        return (np.log(self.rel_time(theta[None, :], p, freq)[0]),
                self.log_rel_time_grad(theta, p, freq))

    def log_rel_time_lazy(self, theta: np.ndarray, p: np.ndarray,
                          freq: np.ndarray | None) -> tuple[np.ndarray, Any]:
        """log g and a function returning its gradient, for a family that can save work by
        computing the gradient only when asked (the solver needs it at accepted steps only)."""
        lg, d = self.log_rel_time_and_grad(theta, p, freq)
        return lg, (lambda: d)

    def candidates(self, rng: np.random.Generator) -> np.ndarray:
        """Starting points (K, m) scored cheaply before polishing."""
        raise NotImplementedError

    def regimes(self, theta: np.ndarray, p: np.ndarray, freq: np.ndarray | None) -> np.ndarray:
        """A label per start (K,); the best start of each label is always polished."""
        return np.zeros(len(theta), dtype=int)

    def derived(self, theta: np.ndarray) -> dict[str, float]:
        """Named parameters and quantities derived from them."""
        return dict(zip(self.param_names, map(float, theta)))

    def restrictions(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Nested sub-models (lower, upper with lower == upper for a fixed parameter, starts)
        that the full model must beat by AICc; none by default."""
        return []

    def has_batched_grad(self) -> bool:
        """Whether ``log_rel_time_and_grad`` takes a batch of thetas (the family overrides it),
        which enables the batched first LM steps of ``solve``."""
        return type(self).log_rel_time_and_grad is not SpeedupShape.log_rel_time_and_grad

    def options(self) -> dict[str, Any]:
        """Constructor options, saved with a fit."""
        return {"t1_mode": self.t1_mode}
