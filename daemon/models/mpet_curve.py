"""MPET scalability curves and the feature vector sc (seed 000, eq. 3-9).

Pure: numbers in, numbers out. Invalid elements (a breakpoint the platform does not have, a
parameter or counter the platform cannot give, a segment without measurements) are NaN.

A profile is a plain mapping::

    {"t": {n: seconds}, "params": {n: {"R": .., "l": .., ...}}, "counters": {n: {name: value}}}

where "params" and "counters" may be empty or hold NaN/None (the runtime could not record
them, e.g. an external OpenMP binary).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

# Scaling parameters of seed 000 Table 1, in the order of eq. 9.
PARAMS = ("R", "l", "w", "c", "d", "s", "j")
# The 6 elements of s_p, eq. 8.
ELEMENTS = ("m_base", "b_base", "m_nu", "b_nu", "m_ht", "b_ht")
# A relative measure every profile can give (seed: pc holds "relative values" too):
# n t(n) / t(1), the available CPU time over t(1). By eq. 3 it equals R(n) / U(n), so it carries
# the whole scaling trend where the runtime parameters are invalid (external workloads).
CPU_TIME_RATIO = "cpu_time_ratio"


def gauss(p: str) -> bool:
    """Whether parameter ``p`` uses g(n) = n(n+1)/2 (task distribution d, section 3.1)."""
    return p == "d"


def g(n, gaussian: bool = False):
    """Gradient function of eq. 5: g(n) = n, or the Gaussian sum n(n+1)/2 for d(n)."""
    n = np.asarray(n, dtype=float)
    return n * (n + 1) / 2 if gaussian else n


def _usable_break(nb: int | None, nmax: int | None = None) -> bool:
    return nb is not None and nb >= 1 and (nmax is None or nb < nmax)


def fit_curve(ns, values, n_nu: int | None, n_ht: int | None,
              gaussian: bool = False) -> np.ndarray:
    """Least-squares fit of eq. 5-7; returns s_p of eq. 8 (6 elements, NaN = invalid).

    p(n) = m_base g(n) + b_base + nu(n) + ht(n), nu(n) = m_nu g(n - n_nu) + b_nu for n > n_nu,
    ht(n) = m_ht g(n - n_ht) + b_ht for n > n_ht. A breakpoint the platform lacks (None), or one
    with no measurement beyond it, leaves its two elements invalid; with one measurement beyond
    it only the offset b is identifiable, its gradient m is then 0. A single point gives b_base
    only (m_base invalid).
    """
    ns = np.asarray(list(ns), dtype=float)
    ys = np.asarray(list(values), dtype=float)
    ok = np.isfinite(ns) & np.isfinite(ys)
    ns, ys = ns[ok], ys[ok]
    out = np.full(6, np.nan)
    if ns.size == 0:
        return out
    cols, where = [], []
    first_break = min([b for b in (n_nu, n_ht) if _usable_break(b)], default=math.inf)
    if np.unique(ns[ns <= first_break]).size >= 2:
        cols.append(g(ns, gaussian)); where.append(0)
    cols.append(np.ones_like(ns)); where.append(1)
    for nb, (im, ib) in ((n_nu, (2, 3)), (n_ht, (4, 5))):
        if not _usable_break(nb):
            continue
        beyond = ns > nb
        k = np.unique(ns[beyond]).size
        if k == 0:
            continue
        if k >= 2:
            cols.append(np.where(beyond, g(ns - nb, gaussian), 0.0)); where.append(im)
        else:
            out[im] = 0.0
        cols.append(beyond.astype(float)); where.append(ib)
    a = np.column_stack(cols)
    coef, *_ = np.linalg.lstsq(a, ys, rcond=None)
    for idx, c in zip(where, coef):
        out[idx] = c
    return out


def eval_curve(s_p, n, n_nu: int | None, n_ht: int | None, gaussian: bool = False):
    """p(n) of eq. 5-7 from s_p (eq. 8). Invalid elements contribute nothing (0)."""
    s = np.nan_to_num(np.asarray(s_p, dtype=float), nan=0.0)
    n = np.asarray(n, dtype=float)
    p = s[0] * g(n, gaussian) + s[1]
    if _usable_break(n_nu):
        p = p + np.where(n > n_nu, s[2] * g(n - n_nu, gaussian) + s[3], 0.0)
    if _usable_break(n_ht):
        p = p + np.where(n > n_ht, s[4] * g(n - n_ht, gaussian) + s[5], 0.0)
    return p


def _series(per_n: Mapping, key: str) -> tuple[list[float], list[float]]:
    ns, vs = [], []
    for n in sorted(per_n, key=float):
        v = (per_n[n] or {}).get(key)
        if v is not None and math.isfinite(float(v)):
            ns.append(float(n)); vs.append(float(v))
    return ns, vs


def cpu_time_ratio(t: Mapping) -> dict[float, float]:
    """n t(n) / t(1) per n (= R(n) / U(n) by eq. 3); empty without t(1)."""
    t1 = t.get(1, t.get(1.0))
    if t1 is None or not t1 > 0:
        return {}
    return {float(n): float(n) * float(v) / float(t1) for n, v in t.items()
            if v is not None and math.isfinite(float(v))}


def feature_names(counters: list[str]) -> list[str]:
    """Names of the elements of sc (eq. 9): s_R .. s_j, then the cpu-time ratio and counters."""
    names = [f"{p}.{e}" for p in PARAMS for e in ELEMENTS]
    for c in [CPU_TIME_RATIO, *counters]:
        names += [f"{c}.{e}" for e in ELEMENTS]
    return names


def feature_vector(profile: Mapping, n_nu: int | None, n_ht: int | None,
                   counters: list[str]) -> np.ndarray:
    """sc of eq. 9: [s_R, s_l, s_w, s_c, s_d, s_s, s_j, pc], each s fitted by eq. 5-8.

    ``counters`` fixes the order of the counter part across the database; a counter the profile
    lacks is invalid (NaN). The counter part starts with the cpu-time ratio n t(n)/t(1).
    """
    params = profile.get("params") or {}
    ctrs = profile.get("counters") or {}
    parts = []
    for p in PARAMS:
        ns, vs = _series(params, p)
        parts.append(fit_curve(ns, vs, n_nu, n_ht, gauss(p)))
    ratio = cpu_time_ratio(profile.get("t") or {})
    parts.append(fit_curve(list(ratio), list(ratio.values()), n_nu, n_ht))
    for c in counters:
        ns, vs = _series(ctrs, c)
        parts.append(fit_curve(ns, vs, n_nu, n_ht))
    return np.concatenate(parts)


def runtime_params_valid(sc: np.ndarray) -> bool:
    """Whether sc holds the base elements of every runtime parameter (R .. j)."""
    base = np.asarray(sc[: 6 * len(PARAMS)]).reshape(len(PARAMS), 6)[:, :2]
    return bool(np.isfinite(base).all())


def time_curve(t1: float, sc: np.ndarray, ns, n_nu: int | None, n_ht: int | None) -> np.ndarray:
    """t(n) from t(1) and sc.

    With the runtime parameters valid: eq. 3-4, t(n) = t(1) R(n) / (n U(n)),
    U(n) = 1 - (l + w + c + d + s + j)(n). Otherwise from the cpu-time ratio curve q(n) (which
    eq. 3 makes equal to R/U): t(n) = t(1) q(n) / n.
    """
    ns = np.asarray(list(ns), dtype=float)
    sc = np.asarray(sc, dtype=float)
    if runtime_params_valid(sc):
        curves = {p: eval_curve(sc[6 * i: 6 * i + 6], ns, n_nu, n_ht, gauss(p))
                  for i, p in enumerate(PARAMS)}
        u = 1.0 - sum(curves[p] for p in PARAMS[1:])
        return t1 * curves["R"] / (ns * u)
    off = 6 * len(PARAMS)
    q = eval_curve(sc[off: off + 6], ns, n_nu, n_ht)
    return t1 * q / ns
