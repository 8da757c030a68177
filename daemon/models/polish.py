"""Polishing the best starts of a bounded least-squares fit: the projected Levenberg-Marquardt
of lsq.py with successive halving and a compass search off the kinks of piecewise models
(``polish_lm``), or the previous scipy path kept for comparison (``polish_scipy``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import optimize

from .lsq import compass_search, least_squares_box

LM_FTOL = 1e-10      # lsq.least_squares_box: relative cost change that ends a polish,
LM_STAGE = 8         # its first budget of iterations per start (successive halving, polish_lm)
LM_MAX_ITER = 60     # and its total per start (an iteration costs ~0.1 ms)
LM_SOLVE_BUDGET = 60  # iterations of all starts of one polish together: no new halving round
                      # beyond it (bounds the slow tail; the compass + LM rounds still follow)
SAME_VALLEY = 1e-3   # runs within this relative cost of a better one: only the better goes on
KINK_ROUNDS = 3      # compass search + LM rounds on the best result (kinks of eq. 15, 16)
# solver="scipy" (the previous solver, kept for benchmarks/memwall_fit.py's comparison):
FTOL = 1e-5          # relative cost change that ends a polish (1e-6 crept for 100 steps
                     # along flat valleys for < 0.2 % less cost)
NFEV_PER_PARAM = 15  # evaluation budget per polish and parameter


def batched_jac(resid_many: Any, lo: np.ndarray, hi: np.ndarray) -> Any:
    """Forward-difference Jacobian with all perturbed points evaluated in one vectorised call
    (the per-call overhead, not the arithmetic, dominates on small data)."""
    def jac(x: np.ndarray, *_: Any) -> np.ndarray:
        h = 1e-7 * np.maximum(1.0, np.abs(x))
        h = np.where(x + h > hi, -h, h)             # step inward at an upper bound
        pts = np.vstack([x, x + np.diag(h)])
        with np.errstate(all="ignore"):
            r = resid_many(pts)
        return ((r[1:] - r[0]) / h[:, None]).T
    return jac


def _same(a: tuple[np.ndarray, float], b: tuple[np.ndarray, float]) -> bool:
    """Two polished starts that reached the same optimum (same cost and parameters)."""
    return (abs(a[1] - b[1]) <= 1e-9 + 1e-6 * max(a[1], b[1])
            and bool(np.allclose(a[0], b[0], rtol=1e-4, atol=1e-5)))


def polish_lm(fun: Any, jac: Any, starts: list[np.ndarray], lo: np.ndarray, hi: np.ndarray,
               exact: float, fun_many: Any = None, lam0: list[float] | None = None,
               hopeless: float = np.inf) -> list[tuple[np.ndarray, float]]:
    """Starts polished by ``lsq.least_squares_box`` with successive halving: every start gets
    LM_STAGE iterations, then the runs that have not converged, rank in the better half
    (converged runs included) and are the best or still fast enough to get below the best
    within their budget (a run within SAME_VALLEY of a better one left out) continue with a
    doubled budget, up to LM_MAX_ITER in all, while all runs together have used fewer than
    LM_SOLVE_BUDGET iterations: a start crawling along a flat valley above the best optimum
    stops early. Then, given ``fun_many`` (a model with kinks), compass search +
    LM rounds on the best result. ``lam0``: each start's damping (from the batched steps).
    ``hopeless``: a cost that cannot win (model selection): when the best run is above it
    after a stage, the polish ends there (no further rounds, no compass search)."""
    runs: list[list[Any]] = []              # [result, iterations used, cost one stage ago]
    for j, x0 in enumerate(starts):
        with np.errstate(all="ignore"):
            res = least_squares_box(fun, jac, x0, lo, hi, cost_floor=exact, ftol=LM_FTOL,
                                    max_iter=LM_STAGE, lam0=1e-3 if lam0 is None else lam0[j])
        runs.append([res, res.njev, np.inf])
        if res.status == "exact":
            return [(res.x, res.cost)]                # no start can do better
    budget = LM_STAGE
    while True:
        runs.sort(key=lambda rn: rn[0].cost)
        best = runs[0][0].cost
        if best > hopeless:
            break
        go, above = [], []
        for rank, rn in enumerate(runs[:(len(runs) + 1) // 2]):
            res, used, before = rn
            left = LM_MAX_ITER - used
            # a run goes on if it is the best one, or if at the rate of its last stage it can
            # still get below the best within its budget; a run within SAME_VALLEY of a better
            # one is crawling down the same valley: only the better one goes on
            rate = (before - res.cost) / max(res.njev, 1) if np.isfinite(before) else np.inf
            if (res.status == "max_iter" and left > 0
                    and (rank == 0 or res.cost - rate * left < best)
                    and not any(res.cost <= c * (1 + SAME_VALLEY) for c in above)):
                go.append(rn)
            above.append(res.cost)
        if not go:
            break
        budget *= 2
        if sum(rn[1] for rn in runs) >= LM_SOLVE_BUDGET:
            # starts crawling along flat valleys (c0, c1 against f in hyper mode) took up to
            # 130 iterations per variant, the slowest poet fits; with this cap no default
            # fit's cost rose on poet or the peer sets (benchmarks/memwall_fit.py --poet)
            break
        for rn in go:
            with np.errstate(all="ignore"):
                res = least_squares_box(fun, jac, rn[0].x, lo, hi, cost_floor=exact,
                                        ftol=LM_FTOL, max_iter=min(budget, LM_MAX_ITER - rn[1]),
                                        lam0=rn[0].lam)
            rn[0], rn[1], rn[2] = res, rn[1] + res.njev, rn[0].cost
            if res.status == "exact":
                return [(res.x, res.cost)]
    out = [(rn[0].x, rn[0].cost) for rn in runs if np.isfinite(rn[0].cost)]
    if fun_many is not None and out and min(c for _, c in out) <= hopeless:
        # the best result may sit on a kink of a piecewise model (eq. 15's max(), eq. 16's
        # min()): the active piece's gradient stops LM although a one-sided move descends;
        # compass search steps off it, LM goes on from there while that helps
        x, cost = min(out, key=lambda xc: xc[1])
        for _ in range(KINK_ROUNDS):
            xk, ck = compass_search(fun_many, x, cost, lo, hi)
            if not ck < cost * (1 - LM_FTOL):
                break
            with np.errstate(all="ignore"):
                res = least_squares_box(fun, jac, xk, lo, hi, cost_floor=exact, ftol=LM_FTOL,
                                        max_iter=LM_STAGE * 2)
            x, cost = (res.x, res.cost) if res.cost < ck else (xk, ck)
        out.append((x, cost))
    return out


def polish_scipy(fun: Any, jac: Any, starts: list[np.ndarray], lo: np.ndarray, hi: np.ndarray,
                  exact: float) -> list[tuple[np.ndarray, float]]:
    """The previous polish (solver="scipy"): trf from each start, dogbox from the best two."""
    def polish(x0: np.ndarray, method: str) -> tuple[np.ndarray, float] | None:
        try:
            with np.errstate(all="ignore"):
                sol = optimize.least_squares(fun, np.clip(x0, lo, hi), jac=jac, bounds=(lo, hi),
                                             method=method, x_scale=1.0, ftol=FTOL, xtol=1e-6,
                                             gtol=1e-8, max_nfev=NFEV_PER_PARAM * x0.size)
        except (ValueError, np.linalg.LinAlgError):
            return None
        cost = float(np.sum(sol.fun ** 2))
        return (sol.x, cost) if np.isfinite(cost) else None

    found: list[tuple[np.ndarray, float]] = []
    for x0 in starts:
        res = polish(x0, "trf")
        if res is not None and not any(_same(res, f) for f in found):
            found.append(res)
        if res is not None and res[1] <= exact:
            break                           # an exact fit: no start can do better
    # trf's scaling near a bound can stall a start (seen on memwall with m1 -> 0);
    # dogbox from the best (distinct) trf results finishes those
    found.sort(key=lambda r: r[1])
    for x, c in found[:2]:
        if c <= exact:
            break
        res = polish(x, "dogbox")
        if res is not None:
            found.append(res)
    return found
