"""MPET normalisation and distances (seed 000, eq. 10-20). Pure; NaN marks an invalid element."""

from __future__ import annotations

import math
from typing import Hashable, Mapping

import numpy as np

Key = tuple[Hashable, Hashable]  # (workload, platform)


def normalise(vectors: Mapping[Key, np.ndarray]) -> dict[Key, np.ndarray]:
    """Eq. 10-12: each dimension m scaled to [0, 1] by its min and max over all given vectors.

    The caller passes the database and the query together (eq. 10-11 take both). Invalid
    elements stay NaN and do not count towards min/max; a dimension with one value (max = min)
    maps to 0, since it cannot separate anything.
    """
    keys = list(vectors)
    if not keys:
        return {}
    mat = np.vstack([np.asarray(vectors[k], dtype=float) for k in keys])
    valid = np.isfinite(mat)
    with np.errstate(all="ignore"):
        lo = np.where(valid.any(axis=0), np.nanmin(np.where(valid, mat, np.inf), axis=0), 0.0)
        hi = np.where(valid.any(axis=0), np.nanmax(np.where(valid, mat, -np.inf), axis=0), 0.0)
        span = hi - lo
        norm = np.where(span > 0, (mat - lo) / np.where(span > 0, span, 1.0), 0.0)
    norm[~valid] = np.nan
    return {k: norm[i] for i, k in enumerate(keys)}


def distance(a: np.ndarray, b: np.ndarray) -> float:
    """Eq. 13: L2 distance over the dimensions valid in both, divided by sqrt(their count).

    In [0, 1] for normalised vectors; NaN when no dimension is valid in both. The readable
    definition (the squares summed in index order); ``distance_rows`` computes the same floats
    for many pairs at once.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    both = np.isfinite(a) & np.isfinite(b)
    dim = int(both.sum())
    if dim == 0:
        return math.nan
    total = 0.0
    for d in (a[both] - b[both]).tolist():
        total += d * d
    return math.sqrt(total) / math.sqrt(dim)


def distance_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eq. 13 along the last axis, broadcast: rows of ``a`` with the rows of ``b`` facing them
    (``a[:, None]`` and ``b[None]``: the whole matrix). Invalid (non-finite) elements are
    masked, each sum is divided by its own count of dimensions valid in both; NaN where there
    are none. The squares are added one after the other in index order (a masked one adds
    0.0, which changes no sum), so each value is ``distance``'s float exactly."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    both = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore"):
        diff = np.where(both, a - b, 0.0)
    shape = np.broadcast_shapes(a.shape, b.shape)
    if shape[-1] == 0:
        return np.full(shape[:-1], np.nan)
    total = np.add.accumulate(diff * diff, axis=-1)[..., -1]
    dim = both.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(dim > 0, np.sqrt(total) / np.sqrt(dim), np.nan)


def tuple_distance(d_p: float, d_a: float) -> float:
    """Eq. 20: D_t = 1 - (1 - D_p)(1 - D_a); an unknown (NaN) distance counts as 1 (the farthest)."""
    d_p = 1.0 if not math.isfinite(d_p) else d_p
    d_a = 1.0 if not math.isfinite(d_a) else d_a
    return 1.0 - (1.0 - d_p) * (1.0 - d_a)


def tuple_distances(d_p, d_a) -> list[float]:
    """``tuple_distance`` of each (D_p, D_a) pair facing each other, at once: the same floats."""
    p = np.asarray(d_p, dtype=float)
    a = np.asarray(d_a, dtype=float)
    p = np.where(np.isfinite(p), p, 1.0)
    a = np.where(np.isfinite(a), a, 1.0)
    return (1.0 - (1.0 - p) * (1.0 - a)).tolist()


class Distances:
    """D_a, D_p and their means (eq. 16-19) over normalised vectors keyed (workload, platform)."""

    def __init__(self, normalised, keys=None):
        """``normalised``: {key: vector}, or a function that makes it, called at the first
        distance (with ``keys``, the keys it will have): who is profiled where is known
        without normalising, and the ratio-based selections rarely need sc's distances."""
        self._sc = None if callable(normalised) else dict(normalised)
        self._make = normalised if callable(normalised) else None
        self.workloads_on: dict[Hashable, set] = {}
        self.platforms_of: dict[Hashable, set] = {}
        for w, p in (self._sc if keys is None else keys):
            self.workloads_on.setdefault(p, set()).add(w)
            self.platforms_of.setdefault(w, set()).add(p)
        self._rows = None

    @property
    def sc(self) -> dict:
        if self._sc is None:
            self._sc = dict(self._make())
        return self._sc

    def _matrix(self) -> tuple[dict, np.ndarray]:
        """({key: row}, the vectors as rows, then a row all invalid for a key without one)."""
        if self._rows is None:
            sc = self.sc
            width = len(next(iter(sc.values()))) if sc else 0
            mat = np.full((len(sc) + 1, width), np.nan)
            for i, v in enumerate(sc.values()):
                mat[i] = v
            self._rows = ({k: i for i, k in enumerate(sc)}, mat)
        return self._rows

    def between(self, k1s, k2s) -> list[float]:
        """Eq. 13 of each key of ``k1s`` with the one facing it in ``k2s``, all at once; NaN
        where either has no vector."""
        index, mat = self._matrix()
        none = len(mat) - 1
        i1 = [index.get(k, none) for k in k1s]
        i2 = [index.get(k, none) for k in k2s]
        if not i1:
            return []
        return distance_rows(mat[i1], mat[i2]).tolist()

    def d_a(self, platform, a, b) -> float:
        """Eq. 16: D_a(P, A, B) = D(sc(P, A), sc(P, B))."""
        return self.between([(a, platform)], [(b, platform)])[0]

    def d_p(self, workload, p, t) -> float:
        """Eq. 17: D_p(A, P, T) = D(sc(P, A), sc(T, A))."""
        return self.between([(workload, p)], [(workload, t)])[0]

    def d_a_many(self, platforms, a, bs) -> list[float]:
        """Eq. 16 of A against each B of ``bs`` on the P facing it in ``platforms``."""
        return self.between([(a, p) for p in platforms], [(b, p) for b, p in zip(bs, platforms)])

    def d_p_many(self, workloads, ps, t) -> list[float]:
        """Eq. 17 of each workload B of ``workloads`` between the P facing it in ``ps`` and T."""
        return self.between([(b, p) for b, p in zip(workloads, ps)], [(b, t) for b in workloads])

    def d_a_mean(self, a, b) -> float:
        """Eq. 18: mean of D_a(T_j, A, B) over the platforms T_j where both are profiled."""
        # in a fixed order: a set's follows the process's string hashes, and the sum's last
        # bit with it (a tie of candidates decided by that bit differed between processes)
        common = sorted(self.platforms_of.get(a, set()) & self.platforms_of.get(b, set()),
                        key=str)
        vals = [v for v in self.d_a_many(common, a, [b] * len(common)) if math.isfinite(v)]
        return float(np.mean(vals)) if vals else math.nan

    def d_p_mean(self, p, t) -> float:
        """Eq. 19: mean of D_p(B_i, P, T) over the workloads B_i profiled on both platforms."""
        common = sorted(self.workloads_on.get(p, set()) & self.workloads_on.get(t, set()),
                        key=str)
        vals = [v for v in self.d_p_many(common, [p] * len(common), t) if math.isfinite(v)]
        return float(np.mean(vals)) if vals else math.nan


def ratio_distance(x: Mapping, y: Mapping, group=None, weight=None) -> float:
    """How far two series are from proportional: 1 - exp(-s), s = the sample standard deviation
    of log(x[k] / y[k]) over the keys both have with values > 0; NaN below two such keys.

    0 when y[k] = c x[k] for every k, whatever c: then eq. 21's factor x/y taken at any one key
    transfers exactly to the others. Over platforms (x, y = the t(1) of workloads A and B on
    each), it rates B as a proxy for A's sequential speed; over workloads (x, y = the t(1) of
    the suite on platforms P and T), it rates P as a proxy for T. In [0, 1) like eq. 13's D,
    so eq. 20 combines the two; scale-free, so nothing to fit.

    ``group(key)``: the ratio need only be constant within a group (keys (platform, n) grouped
    by n: q(n)'s factor of eq. 21 is taken per n); s is then the pooled within-group deviation.
    ``weight(key)`` >= 0: a weighted deviation (reliability weights: the denominator is
    sum w - sum w^2 / sum w, which is n - 1 for equal weights); NaN where that is 0.
    """
    groups: dict = {}  # group -> [sum w, sum w v, sum w v^2, sum w^2] of the log ratios v
    for k, a in x.items():
        b = y.get(k)
        if a is None or b is None or not (a > 0 and b > 0) or not (math.isfinite(a)
                                                                     and math.isfinite(b)):
            continue
        w = 1.0 if weight is None else float(weight(k))
        if not w > 0:
            continue
        v = math.log(a / b)
        acc = groups.setdefault(group(k) if group else None, [0.0, 0.0, 0.0, 0.0])
        acc[0] += w; acc[1] += w * v; acc[2] += w * v * v; acc[3] += w * w
    ss = dof = 0.0
    for sw, swv, swv2, sw2 in groups.values():
        ss += max(swv2 - swv * swv / sw, 0.0)
        dof += sw - sw2 / sw
    if dof < 1e-9 or (weight is None and dof < 1 - 1e-9):
        return math.nan
    return 1.0 - math.exp(-math.sqrt(ss / dof))


def ratio_distance_rows(v: np.ndarray, ok: np.ndarray, pos: np.ndarray,
                        weight: np.ndarray | None = None) -> list[float]:
    """``ratio_distance`` over precomputed log ratios, K at once: the same floats it returns.

    ``v[i, r, g]`` = log(x[k] / y[k]) of series pair i's entry k in row r and group g (one
    column: no groups); ``ok`` where both are valid; ``pos`` = k's place in x's iteration
    order, with each row's entries consecutive in x (rows in x's order); ``weight[i, r]`` per
    row (None: unweighted). Sums run over rows in order, then over groups in order of first
    appearance, as ratio_distance's scalar loop adds them (no pairwise summation), so the two
    agree to the last bit: a vectorised prediction is the same prediction.
    """
    k, rows, groups = v.shape
    if rows == 0:
        return [math.nan] * k
    with np.errstate(all="ignore"):
        w = np.ones((k, rows)) if weight is None else np.asarray(weight, dtype=float)
        ok = ok & (w > 0)[:, :, None]
        wc = np.broadcast_to(w[:, :, None], v.shape)
        wv = np.where(ok, wc * v, 0.0)
        sw, swv, swv2, sw2 = (np.add.accumulate(c, axis=1)[:, -1, :] for c in
                              (np.where(ok, wc, 0.0), wv, np.where(ok, wv * v, 0.0),
                               np.where(ok, wc * wc, 0.0)))
        has = ok.any(axis=1)
        ss = np.where(has, np.maximum(swv2 - swv * swv / sw, 0.0), 0.0)
        dof = np.where(has, sw - sw2 / sw, 0.0)
    order = np.argsort(np.where(ok, pos, np.iinfo(np.int64).max).min(axis=1), axis=1,
                       kind="stable")  # groups without a value last (they add 0.0)
    ss = np.add.accumulate(np.take_along_axis(ss, order, axis=1), axis=1)[:, -1].tolist()
    dof = np.add.accumulate(np.take_along_axis(dof, order, axis=1), axis=1)[:, -1].tolist()
    return [math.nan if d < 1e-9 or (weight is None and d < 1 - 1e-9)
            else 1.0 - math.exp(-math.sqrt(s / d)) for s, d in zip(ss, dof)]
