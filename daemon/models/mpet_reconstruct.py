"""MPET reconstruction by transformation factors (seed 000, eq. 21-23). Pure.

A candidate (P, B) transfers an element of workload A from reference P to target T by the
factor f = sc(P, A) / sc(P, B): sc(T, A) ~ sc(T, B) f (eq. 21); the candidates' transfers are
averaged with the penalty r(w) of eq. 22 as weights (eq. 23).
"""

from __future__ import annotations

import math

import numpy as np


def penalty(w: np.ndarray, k: int) -> np.ndarray:
    """Eq. 22: r(w) = ((w - w_min) / (w_max - w_min))^k; all 1 when every w is equal."""
    w = np.asarray(w, dtype=float)
    lo, hi = float(np.min(w)), float(np.max(w))
    if hi - lo <= 1e-12:
        return np.ones_like(w)
    return ((w - lo) / (hi - lo)) ** k


def reconstruct(target_vals: np.ndarray, ref_a: np.ndarray, ref_b: np.ndarray,
                r: np.ndarray, max_factor: float | None = None,
                mean: str = "arithmetic") -> np.ndarray:
    """Eq. 21 and 23 per element: sum_C[sc(T,B) f(C) r] / sum_C r, f = sc(P,A) / sc(P,B).

    Rows are candidates, columns elements. A candidate without a usable factor for an element
    (invalid value, zero denominator; with ``mean="geometric"`` also a value <= 0) is left out
    of that element's sum; an element no candidate can give stays invalid. Where the penalty
    zeroes every usable candidate (k > 0 leaves only the farthest), they are averaged
    unweighted. ``mean="geometric"``: exp of the same weighted mean of the logarithms.
    """
    tv, ra, rb = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (target_vals, ref_a, ref_b))
    with np.errstate(all="ignore"):
        f = ra / rb
        val = tv * f
        if max_factor is not None:
            val = np.where((f > 0) & (np.abs(np.log(f)) <= math.log(max_factor)), val, np.nan)
        if mean == "geometric":
            val = np.where(val > 0, np.log(val), np.nan)
    ok = np.isfinite(val)
    rr = np.broadcast_to(np.asarray(r, dtype=float)[:, None], val.shape)
    wsum = np.where(ok, rr, 0.0).sum(axis=0)
    num = np.where(ok, np.where(ok, val, 0.0) * rr, 0.0).sum(axis=0)
    cnt = ok.sum(axis=0)
    plain = np.where(ok, val, 0.0).sum(axis=0)
    with np.errstate(all="ignore"):
        out = np.where(wsum > 0, num / np.where(wsum > 0, wsum, 1.0),
                       plain / np.where(cnt > 0, cnt, 1))
    out[cnt == 0] = np.nan
    return np.exp(out) if mean == "geometric" else out
