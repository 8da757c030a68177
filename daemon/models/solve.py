"""The best fit of one variant of a speedup model (T1 mode, bounds, starts): the starts scored in
one vectorised pass, the most promising chosen (the best few and the best of each regime),
optionally advanced together by a few batched LM steps, then polished (polish.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .lsq import least_squares_box_many
from .polish import SAME_VALLEY, polish_lm, polish_scipy
from .residuals import residuals

if TYPE_CHECKING:
    from .fit_data import FitData
    from .shape import SpeedupShape

N_POLISH = 3         # candidate starts polished (plus the best start of each regime)
N_BATCH = 48         # best-scored starts that take their first LM_BATCH_ITERS trial steps
LM_BATCH_ITERS = 10  # together (lsq.least_squares_box_many) before the polish


@dataclass
class Solution:
    """One fitted variant: T1 mode, parameters (theta, then c0, c1 in hyper mode), cost,
    free parameter count, whether it is a nested restriction, its residual function."""
    mode: str
    x: np.ndarray
    cost: float
    n_par: int
    restricted: bool
    fun: Any = None
    aicc: float = float("nan")


def n_params(data: "FitData", mode: str, lo: np.ndarray, hi: np.ndarray) -> int:
    """Free parameters of a variant: theta not fixed by its bounds plus the T1 ones."""
    return int(np.sum(lo < hi)) + (2 if mode == "hyper" else data.ufreq.size)


def _regime_bests(labels: np.ndarray, score: np.ndarray) -> list[int]:
    """The index of the best-scored start of each regime label."""
    return [int(np.flatnonzero(labels == lab)[np.argmin(score[labels == lab])])
            for lab in np.unique(labels)]


def _pick(family: "SpeedupShape", data: "FitData", xs: np.ndarray, sc: np.ndarray,
          n_free: int, dedupe: bool = False) -> list[int]:
    """The N_POLISH best starts and the best start of every regime; with one free parameter
    the best point of the scored grid brackets the minimum: one start. ``dedupe`` (after the
    batched steps): a start within SAME_VALLEY of a better one is in the same valley (as in
    ``polish_lm``'s rounds) and is not polished again."""
    order: list[int] = []
    for i in np.argsort(sc)[:N_POLISH if n_free > 1 else 1]:
        if not (dedupe and order and sc[i] <= sc[order[-1]] * (1 + SAME_VALLEY)):
            order.append(int(i))
    m = len(family.param_names)
    for best_of in _regime_bests(family.regimes(xs[:, :m], data.p, data.freq), sc):
        if (best_of not in order and np.isfinite(sc[best_of]) and not (
                dedupe and any(sc[best_of] <= sc[j] * (1 + SAME_VALLEY) for j in order))):
            order.append(best_of)
    return order


def solve(family: "SpeedupShape", data: "FitData", mode: str, lo: np.ndarray, hi: np.ndarray,
          cand: np.ndarray, hopeless: float = np.inf) -> Solution | None:
    """Best fit of one variant (T1 mode, bounds, starts). All starts are scored in one
    vectorised pass. With the "lm" solver the N_BATCH best (and the best of each regime)
    take their first LM_BATCH_ITERS trial steps together; the N_POLISH best of where they
    lead and the best of each regime are polished (``polish_lm``). With "scipy" the
    N_POLISH best starts and the best of each regime are polished (``polish_scipy``).
    ``hopeless``: a cost that cannot win the model selection (``polish_lm``)."""
    p, freq = data.p, data.freq
    restricted = bool(np.any(lo >= hi))
    n_free = int(np.sum(lo < hi))
    cand = np.clip(cand, lo, hi)
    has_grad = family.log_rel_time_grad(cand[0], p, freq) is not None
    res = residuals(family, data, mode, lo, hi, has_grad)

    with np.errstate(all="ignore"):
        score = np.nansum(res.resid_many(cand) ** 2, axis=1)
    score[~np.isfinite(score)] = np.inf
    lm = family.solver == "lm" or restricted

    lam0 = None
    if lm and n_free > 2 and family.has_batched_grad():
        # the best starts and the best of each regime take their first LM steps together
        # (one vectorised pass per trial step, the same path as a single run); the best of
        # where they lead are polished on from there
        top = list(np.argsort(score)[:N_BATCH])
        for best_of in _regime_bests(family.regimes(cand, p, freq), score):
            if best_of not in top:
                top.append(best_of)
        top = np.array([i for i in top if np.isfinite(score[i])], dtype=int)
        xs, sc, lams = least_squares_box_many(res.resid_many, res.jac_many,
                                              res.with_t1_many(cand[top]), res.lo, res.hi,
                                              trials=LM_BATCH_ITERS)
        idx = _pick(family, data, xs, sc, n_free, dedupe=True)
        starts = [xs[i] for i in idx]
        lam0 = [float(lams[i]) for i in idx]
    else:
        starts = [res.with_t1(cand[i]) for i in _pick(family, data, cand, score, n_free)]
    exact = 1e-20 * p.size
    with np.errstate(all="ignore"):
        if lm:
            # compass search only where the model has kinks (memwall's max() and min();
            # with m1 = m2 = 0 neither is active)
            kinks = family.piecewise and not restricted
            found = polish_lm(res.fun, res.jac, starts, res.lo, res.hi, exact,
                              res.resid_many if kinks else None, lam0, hopeless)
        else:
            found = polish_scipy(res.fun, res.jac, starts, res.lo, res.hi, exact)
    if not found:
        return None
    x, cost = min(found, key=lambda r: r[1])
    sol = Solution(mode, x, float(np.sum(res.fun(x) ** 2)), n_params(data, mode, lo, hi),
                   restricted)
    sol.fun = res.fun
    return sol
