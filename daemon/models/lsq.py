"""Bounded nonlinear least squares for tiny problems (a handful of parameters, tens of points).

``least_squares_box`` minimises ``||r(x)||^2`` subject to ``lo <= x <= hi`` with a projected
Levenberg-Marquardt iteration (Marquardt 1963; Nielsen's damping update, Madsen, Nielsen &
Tingleff, "Methods for non-linear least squares problems", 2004, sec. 3.2; bounds by an active
set plus projection onto the box, as in projected Gauss-Newton methods, Kelley, "Iterative
Methods for Optimization", 1999, ch. 5.5). Why not scipy's ``least_squares``: on problems this
small its per-iteration bookkeeping (~1 ms) dominates; here one iteration is a few small numpy
calls and one m x m solve.

One iteration at x, with r = r(x), J = dr/dx, g = J^T r:

1. Active set: a coordinate is held when it sits on a bound and -g points out of the box
   there, or when lo == hi (a fixed parameter). The others are free.
2. Step: (J_F^T J_F + lam D) s = -g_F on the free coordinates F, D = diag(J_F^T J_F) floored
   at 1e-12 max(D) (Marquardt's scaling: the step does not depend on the parameters' units).
   Solved through one eigendecomposition of D^-1/2 J_F^T J_F D^-1/2 per Jacobian, so a
   rejected step costs a few vector operations, not a new factorisation.
3. Trial point x' = clip(x + s, lo, hi). Accepted when it lowers the cost; the gain ratio
   (actual / linear-model decrease of the *projected* step) updates lam by Nielsen's rule;
   a rejected step multiplies lam by nu (nu doubles on each rejection in a row).

Stopping rules (``status``):

* ``"exact"``: cost <= ``cost_floor`` (no point can do better);
* ``"gtol"``: the projected gradient vanishes, max |g_F| <= gtol (first-order optimal);
* ``"ftol"``: an accepted step lowered the cost by less than ftol * cost;
* ``"xtol"``: an accepted step was shorter than xtol * (xtol + ||x||);
* ``"stalled"``: lam grew beyond 1e16 D without an accepted step (no descent left at the
  resolution of float64, e.g. at a kink of a piecewise-smooth model);
* ``"max_iter"``: ``max_iter`` Jacobian evaluations.

The result is never worse than the (projected) start. ``lam0`` (e.g. a previous result's
``lam``) continues a run where it stopped. Pure: no I/O, no global state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

ResidualFn = Callable[[np.ndarray], np.ndarray]


@dataclass
class LsqResult:
    """Solution x, its cost sum(r^2), residuals r, counts, the stopping rule that fired and
    the damping reached (to continue the run)."""
    x: np.ndarray
    cost: float
    fun: np.ndarray
    nfev: int
    njev: int
    status: str
    lam: float = 1e-3


def least_squares_box(fun: ResidualFn, jac: Callable[[np.ndarray], np.ndarray], x0: np.ndarray,
                      lo: np.ndarray, hi: np.ndarray, *, ftol: float = 1e-10,
                      xtol: float = 1e-10, gtol: float = 1e-14, max_iter: int = 100,
                      cost_floor: float = 0.0, lam0: float = 1e-3) -> LsqResult:
    """Minimise sum(fun(x)^2) over lo <= x <= hi from x0 (see the module docstring).

    ``fun`` returns the residuals (n,), ``jac`` their Jacobian (n, m). Non-finite residuals
    count as an infinite cost (the step is rejected).
    """
    lo = np.asarray(lo, float)
    hi = np.asarray(hi, float)
    x = np.clip(np.asarray(x0, float), lo, hi)
    fixed = lo >= hi
    r = fun(x)
    cost = float(r @ r)
    nfev, njev = 1, 0
    if not np.isfinite(cost):
        return LsqResult(x, np.inf, r, nfev, njev, "stalled", lam0)
    lam = lam0                      # relative to D (Nielsen: tau = 1e-3)
    nu = 2.0
    status = "max_iter"
    while njev < max_iter:
        if cost <= cost_floor:
            status = "exact"
            break
        jm = jac(x)
        njev += 1
        g = jm.T @ r
        free = ~(fixed | ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)))
        # the common case, no coordinate held, skips the fancy indexing (same arithmetic)
        all_free = bool(free.all())
        gf = g if all_free else g[free]
        if not gf.size or np.max(np.abs(gf)) <= gtol:
            status = "gtol"
            break
        jf = jm if all_free else jm[:, free]
        a = jf.T @ jf
        d = a.diagonal().copy()
        sd = np.sqrt(np.maximum(d, 1e-12 * max(float(d.max()), 1e-300)))
        try:
            w, v = np.linalg.eigh(a / sd[:, None] / sd[None, :])
        except np.linalg.LinAlgError:
            status = "stalled"
            break
        w = np.maximum(w, 0.0)
        gs = v.T @ (gf / sd)
        accepted = False
        while True:
            s = -(v @ (gs / (w + lam))) / sd
            if np.isfinite(s.sum()):
                if all_free:
                    trial = x + s
                else:
                    trial = x.copy()
                    trial[free] += s
                np.minimum(np.maximum(trial, lo, out=trial), hi, out=trial)
                dx = trial - x
                r_new = fun(trial)
                nfev += 1
                c_new = float(r_new @ r_new)
                if np.isfinite(c_new) and c_new < cost:
                    lin = r + jm @ dx
                    pred = cost - float(lin @ lin)
                    rho = (cost - c_new) / pred if pred > 0 else 1.0
                    lam *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                    nu = 2.0
                    small_f = cost - c_new <= ftol * cost
                    small_x = float(np.sqrt(dx @ dx)) <= xtol * (xtol + float(np.sqrt(x @ x)))
                    x, r, cost = trial, r_new, c_new
                    accepted = True
                    if small_f:
                        status = "ftol"
                    elif small_x:
                        status = "xtol"
                    break
            lam *= nu
            nu *= 2.0
            if lam > 1e16:
                status = "stalled"
                break
        if not accepted or status in ("ftol", "xtol"):
            break
    if cost <= cost_floor:
        status = "exact"
    return LsqResult(x, cost, r, nfev, njev, status, lam)


def least_squares_box_many(fun_many: Callable[[np.ndarray], np.ndarray],
                           jac_many: Callable[[np.ndarray], np.ndarray], x0: np.ndarray,
                           lo: np.ndarray, hi: np.ndarray, *, trials: int = 6,
                           lam0: float = 1e-3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first ``trials`` trial steps of ``least_squares_box`` on K starts at once
    (x0: (K, m)), one vectorised pass per trial, to rank starts by where they lead rather
    than where they begin.

    Same active set, step, acceptance and damping rules as ``least_squares_box``, so each
    start follows the path that ``least_squares_box`` would take (up to rounding), and a run
    continued from the returned x and lam picks it up there. ``fun_many`` maps (K, m) to
    residuals (K, n), ``jac_many`` to Jacobians (K, n, m). No stopping rule. Returns
    (x (K, m), cost (K,), lam (K,)); a start with non-finite residuals keeps cost inf."""
    lo = np.asarray(lo, float)
    hi = np.asarray(hi, float)
    x = np.clip(np.asarray(x0, float), lo, hi)
    kk, m = x.shape
    r = fun_many(x)
    cost = np.einsum("kn,kn->k", r, r)
    ok = np.isfinite(cost)
    cost[~ok] = np.inf
    lam = np.full(kk, float(lam0))
    nu = np.full(kk, 2.0)
    eye = np.eye(m)
    fixed = lo >= hi
    jm = np.zeros(r.shape + (m,))
    if ok.any():
        jm[ok] = jac_many(x[ok])
    for _ in range(trials):
        ok &= lam <= 1e16                # a stalled start (no descent left) stays where it is
        if not ok.any():
            break
        jt = jm.transpose(0, 2, 1)
        g = (jt @ np.where(ok[:, None], r, 0.0)[:, :, None])[:, :, 0]
        held = fixed | ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)) | ~ok[:, None]
        a = jt @ jm
        d = np.where(held, 0.0, np.diagonal(a, axis1=1, axis2=2))
        d = np.maximum(d, 1e-12 * np.maximum(d.max(axis=1, keepdims=True), 1e-300))
        # held coordinates: identity rows and columns, zero gradient -> zero step
        hm = held[:, :, None] | held[:, None, :]
        a = np.where(hm, 0.0, a) + eye * np.where(held, 1.0, lam[:, None] * d)[:, :, None]
        g = np.where(held, 0.0, g)
        with np.errstate(all="ignore"):
            try:
                s = -np.linalg.solve(a, g[..., None])[..., 0]
            except np.linalg.LinAlgError:
                break
            s = np.where(np.isfinite(s), s, 0.0)
            trial = np.minimum(np.maximum(x + s, lo), hi)
            dx = trial - x
            r_new = fun_many(trial)
            c_new = np.einsum("kn,kn->k", r_new, r_new)
            lin = r + (jm @ dx[:, :, None])[:, :, 0]
            pred = cost - np.einsum("kn,kn->k", lin, lin)
            rho = np.where(pred > 0, (cost - c_new) / pred, 1.0)
        acc = ok & np.isfinite(c_new) & (c_new < cost)
        lam = np.where(acc, lam * np.maximum(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3),
                       np.where(ok, lam * nu, lam))
        nu = np.where(acc, 2.0, np.where(ok, nu * 2.0, nu))
        if acc.any():
            x[acc], r[acc], cost[acc] = trial[acc], r_new[acc], c_new[acc]
            jm[acc] = jac_many(x[acc])
    return x, cost, lam


def compass_search(fun_many: Callable[[np.ndarray], np.ndarray], x: np.ndarray, cost: float,
                   lo: np.ndarray, hi: np.ndarray, *,
                   steps: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-5),
                   max_moves: int = 20) -> tuple[np.ndarray, float]:
    """Compass (coordinate pattern) search from x (Kolda, Lewis & Torczon, SIAM Review 45,
    2003): poll x +- h s_i e_i for every coordinate (all 2m points in one vectorised call),
    move to the best poll point while it lowers the cost, else shrink h through ``steps``.
    s_i = min(hi_i - lo_i, max(|x_i|, 1)). For a kink of a piecewise-smooth model, where the
    active piece's gradient says "stop" but a one-sided move still descends. Returns
    (x, cost); never worse than the input."""
    lo = np.asarray(lo, float)
    hi = np.asarray(hi, float)
    x = np.asarray(x, float).copy()
    free = lo < hi
    moves = 0
    for h in steps:
        while moves < max_moves:
            sc = np.minimum(hi - lo, np.maximum(np.abs(x), 1.0)) * h * free
            polls = np.clip(np.vstack([x + np.diag(sc), x - np.diag(sc)]), lo, hi)
            with np.errstate(all="ignore"):
                r = fun_many(polls)
                c = np.einsum("kn,kn->k", r, r)
            c[~np.isfinite(c)] = np.inf
            i = int(np.argmin(c))
            if not c[i] < cost:
                break
            x, cost = polls[i], float(c[i])
            moves += 1
    return x, cost
