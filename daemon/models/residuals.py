"""The log-time residuals of one variant of a speedup fit, for the solver: one function and
Jacobian at a point, and their batched forms over many points (scoring starts, the batched
first LM steps). T1 is either projected out (``per_freq``: the optimal log T1 level per training
frequency is the mean of log t - log g there) or fitted jointly as c0 + c1/F (``hyper``, two
parameters after theta, scaled to the data's median frequency and mean time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from scipy import optimize

from .polish import batched_jac

if TYPE_CHECKING:
    from .fit_data import FitData
    from .shape import SpeedupShape

Fn = Callable[[np.ndarray], np.ndarray]


def _unchanged(x: np.ndarray) -> np.ndarray:
    return x


@dataclass
class Residuals:
    """``fun``/``jac`` at one point x = theta (then c0, c1 in hyper mode); ``resid_many``,
    ``jac_many`` for rows of points (rows of theta alone: c0, c1 solved for each);
    ``lo``, ``hi`` the bounds of x; ``with_t1``/``with_t1_many`` complete theta start(s)
    with their least-squares c0, c1 in hyper mode (unchanged in per_freq mode)."""
    fun: Fn
    jac: Fn
    resid_many: Fn
    jac_many: Fn
    lo: np.ndarray
    hi: np.ndarray
    with_t1: Fn
    with_t1_many: Fn


def residuals(family: "SpeedupShape", data: "FitData", mode: str, lo: np.ndarray,
              hi: np.ndarray, has_grad: bool) -> Residuals:
    """The residuals of ``family`` on ``data`` with T1 ``mode`` and theta bounds ``lo``, ``hi``;
    the Jacobian is analytic where the family gives a gradient (``has_grad``), else by
    batched forward differences."""
    p, freq, y, t, keys = data.p, data.freq, data.y, data.t, data.keys
    m = len(family.param_names)
    last: list[Any] = [None, None]   # point of the last residual evaluation, dlog g there

    def log_g(th: np.ndarray) -> np.ndarray:
        # log g at one theta; keeps how to get d log g / d theta at the same point
        lg, grad = family.log_rel_time_lazy(th[:m], p, freq)
        last[0], last[1] = th, grad
        return lg

    def dlog_g(th: np.ndarray) -> np.ndarray:
        if last[0] is not th:
            log_g(th)
        return last[1]()

    if mode == "per_freq":
        def resid_many(th: np.ndarray) -> np.ndarray:
            r = y - np.log(family.rel_time(th, p, freq))
            return r - (r @ data.avg)[:, keys]

        def fun(th: np.ndarray) -> np.ndarray:
            # variable projection: the optimal log T1 level per frequency is the mean of
            # log t - log g there
            r = y - log_g(th)
            return r - (r @ data.avg)[keys]
        x_lo, x_hi = lo, hi
        with_t1 = with_t1_many = _unchanged

        def jac_analytic(th: np.ndarray) -> np.ndarray:
            # r = (I - P)(y - log g), P = per-frequency mean: J = -(I - P) dlog g/dtheta
            d = dlog_g(th)
            return (data.avg.T @ d)[keys] - d

        def jac_many(th: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                d = family.log_rel_time_and_grad(th, p, freq)[1]
            return (data.avg.T @ d)[:, keys, :] - d
    else:
        fscale, tscale = float(np.median(freq)), float(np.exp(np.mean(y)))
        finv = fscale / freq

        def t1(c: np.ndarray) -> np.ndarray:
            return tscale * (c[..., :1] + c[..., 1:2] * finv)

        def with_t1(x0: np.ndarray) -> np.ndarray:
            # c0, c1 >= 0 by linear least squares on the relative time error (for starts)
            if x0.size != m:
                return x0
            with np.errstate(all="ignore"):
                g = family.rel_time(x0[None, :], p, freq)[0]
            a = np.column_stack([g, g * finv]) * tscale / t[:, None]
            c, _ = optimize.nnls(a, np.ones_like(t))
            return np.r_[x0, np.clip(c, 1e-9, 1e3)]

        def hyper_c_many(th: np.ndarray, g: np.ndarray | None = None) -> np.ndarray:
            # c0, c1 for each start by linear least squares on the relative time error
            if g is None:
                g = family.rel_time(th[:, :m], p, freq)
            a = np.stack([g, g * finv], axis=-1) * (tscale / t)[None, :, None]
            ata = a.transpose(0, 2, 1) @ a + 1e-12 * np.eye(2)
            c = np.linalg.solve(ata, a.sum(axis=1)[..., None])[..., 0]
            return np.clip(c, 1e-9, 1e3)

        def with_t1_many(x0: np.ndarray) -> np.ndarray:
            return np.hstack([x0, hyper_c_many(x0)])

        def resid_many(th: np.ndarray) -> np.ndarray:
            if th.shape[1] == m:           # scoring starts: c0, c1 solved for each start
                g = family.rel_time(th, p, freq)
                return y - np.log(g * t1(hyper_c_many(th, g)))
            return y - np.log(family.rel_time(th[:, :m], p, freq) * t1(th[:, m:]))

        def jac_many(th: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                d = family.log_rel_time_and_grad(th[:, :m], p, freq)[1]
            inv = tscale / t1(th[:, m:])
            return np.concatenate([-d, -inv[..., None], -(inv * finv)[..., None]], axis=-1)

        def fun(th: np.ndarray) -> np.ndarray:
            return y - log_g(th) - np.log(t1(th[m:]))
        x_lo, x_hi = np.r_[lo, 1e-9, 1e-9], np.r_[hi, 1e3, 1e3]

        def jac_analytic(th: np.ndarray) -> np.ndarray:
            # r = y - log g - log T1(c): dr/dc = -tscale (1, fscale/F) / T1
            inv = tscale / t1(th[m:])
            return np.column_stack([-dlog_g(th), -inv, -inv * finv])

    jac = jac_analytic if has_grad else batched_jac(resid_many, x_lo, x_hi)
    return Residuals(fun, jac, resid_many, jac_many, x_lo, x_hi, with_t1, with_t1_many)
