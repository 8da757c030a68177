"""The MPET database (seed 000, section 3): profiles with their fitted sc (eq. 5-9), the
t(1) and q(n) tables, and the log ratios between their rows that the ratio distances and the
validated transfers read. Pure.

``profiles``: ``(workload, platform) -> {"t": {n: s}, "params": {n: {...}}, "counters": {n:
{...}}}`` (see mpet_curve); ``platforms``: ``platform -> {"n_nu", "n_ht", "nmax"}`` (breakpoints
from the topology; None = absent). What does not depend on a query is computed once and shared
with the ``without`` copies a leave-one-out makes.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from .mpet_curve import PARAMS, cpu_time_ratio, eval_curve, feature_names, feature_vector
from .mpet_distance import Distances, normalise, ratio_distance_rows


class MpetDatabase:
    """Profiles with their fitted sc (eq. 5-9), computed once; ``without`` hides one profile."""

    def __init__(self, profiles: Mapping, platforms: Mapping, _sc=None, _counters=None):
        self.profiles = dict(profiles)
        self.platforms = {p: dict(v) for p, v in platforms.items()}
        if _counters is None:
            names = set()
            for prof in self.profiles.values():
                for per_n in (prof.get("counters") or {}).values():
                    names.update((per_n or {}).keys())
            _counters = sorted(names)
        self.counters = _counters
        if _sc is None:
            _sc = {}
            for key, prof in self.profiles.items():
                topo = self.platforms.get(key[1], {})
                _sc[key] = feature_vector(prof, topo.get("n_nu"), topo.get("n_ht"), _counters)
        self.sc = _sc

    @property
    def names(self) -> list[str]:
        return feature_names(self.counters)

    def t1(self, key) -> float:
        t = self.profiles[key].get("t") or {}
        v = t.get(1, t.get(1.0))
        return float(v) if v is not None else math.nan

    def scales(self, key) -> bool:
        """Whether the profile was measured at more than one core count: only such a profile
        has a scaling (q(n), sc's curve) to lend another workload's prediction."""
        return len(self.profiles[key].get("t") or {}) > 1

    def q_values(self, key, ns) -> np.ndarray:
        """q(n) = n t(n)/t(1) of a profile at ``ns``: measured where it was, else its fitted
        curve (eq. 5-7 on its platform's breakpoints), which extrapolates beyond its cores,
        never below the least q the profile measured (a line through q(1) = 1 and a superlinear
        q(2) < 1 turns negative: merge_sort on the 2-core machine at 10 cores)."""
        return self._q_values(key, tuple(float(n) for n in ns))

    def _q_values(self, key, ns: tuple[float, ...]) -> np.ndarray:
        """``q_values`` at ``ns`` already a tuple of floats."""
        # a profile's values do not change: cached, and shared with the ``without`` copies
        cache = self.__dict__.setdefault("_q_cache", {})
        got = cache.get((key, ns))
        if got is None:
            meas = cpu_time_ratio(self.profiles[key].get("t") or {})
            if not meas:  # no t(1): q(n) is not known at any n (not 0, whose log is -inf)
                got = cache[(key, ns)] = np.full(len(ns), np.nan)
                got.setflags(write=False)
                return got
            topo = self.platforms.get(key[1], {})
            off = 6 * len(PARAMS)
            fitted = eval_curve(self.sc[key][off: off + 6], np.asarray(ns), topo.get("n_nu"),
                                topo.get("n_ht"))
            floor = min(meas.values())
            got = cache[(key, ns)] = np.array([meas.get(n, max(f, floor))
                                               for n, f in zip(ns, fitted)])
            got.setflags(write=False)
        return got

    def without(self, key) -> "MpetDatabase":
        profiles = {k: v for k, v in self.profiles.items() if k != key}
        out = MpetDatabase(profiles, self.platforms, {k: v for k, v in self.sc.items()
                                                      if k != key}, self.counters)
        out._q_cache = self.__dict__.setdefault("_q_cache", {})
        # the log ratios of the database this one was cut from, less what is hidden
        out._ratio_rows = self.ratio_rows()
        out._removed = self.removed | {key}
        out._root = self.__dict__.get("_root", self)  # the database ``removed`` is from
        # the t(1) and q(n) tables less that profile, instead of rebuilding them
        w, p = key
        for name, table in (("_t1_table", self.t1_table), ("_q_table", self.q_table)):
            got = table()  # built once on this database, then shared
            by_w = {a: ({k: v for k, v in d.items() if _plat(k) != p} if a == w else d)
                    for a, d in got[0].items()}
            by_p = {b: ({k: v for k, v in d.items() if _plat(k) != w} if b == p else d)
                    for b, d in got[1].items()}
            setattr(out, name, (by_w, by_p))
        got = self.__dict__.get("_log_t1")
        if got is not None:  # the log t(1) matrix less that entry
            rows, cols, mat = got
            if w in rows and p in cols:
                mat = mat.copy()
                mat[rows[w], cols[p]] = math.nan
            out._log_t1 = (rows, cols, mat)
        return out

    def only_workloads(self, keep) -> "MpetDatabase":
        """A database of the profiles of the workloads in ``keep``: their fitted sc and q(n)
        reused, the tables, log ratios and distances (eq. 10-12) over them alone."""
        keep = set(keep)
        out = MpetDatabase({k: v for k, v in self.profiles.items() if k[0] in keep},
                           self.platforms, {k: v for k, v in self.sc.items() if k[0] in keep},
                           self.counters)
        out._q_cache = self.__dict__.setdefault("_q_cache", {})
        return out

    def scaling_only(self, keep) -> "MpetDatabase":
        """This database less the profiles measured at one core count (but ``keep``'s): what
        a prediction's scaling side (sc, q(n), their candidates, validations and choice)
        sees, as ``only_workloads`` builds it; itself where there are none."""
        memo = self.__dict__.setdefault("_scaling_only", {})
        got = memo.get(keep)
        if got is None:
            drop = {k for k in self.profiles if k[0] != keep and not self.scales(k)}
            got = memo[keep] = self if not drop else MpetDatabase(
                {k: v for k, v in self.profiles.items() if k not in drop}, self.platforms,
                {k: v for k, v in self.sc.items() if k not in drop}, self.counters)
            if got is not self:
                got._q_cache = self.__dict__.setdefault("_q_cache", {})
        return got

    @property
    def removed(self) -> frozenset:
        """The profiles ``without`` hid since the database ``ratio_rows`` was built on."""
        return self.__dict__.get("_removed", frozenset())

    def ratio_rows(self) -> "RatioRows":
        """Log ratios between the rows of the t(1) and q(n) tables, built once and shared
        with the ``without`` copies (they only hide profiles)."""
        got = self.__dict__.get("_ratio_rows")
        if got is None:
            got = self._ratio_rows = RatioRows(self.t1_table(), self.q_table())
        return got

    def ratio(self, kind: str, axis: str, x, ys, keep, weight=None) -> list[float]:
        """``ratio_distance`` of table ``kind`` ("t1" or "q") between x's entries and each
        y's (axis "p": platforms x and y, rows = workloads; "w": workloads, rows = platforms),
        rows restricted to ``keep`` (a predicate) and to the profiles this database has;
        ``weight``: {row: weight} (None: unweighted)."""
        if not ys:
            return []
        rows, index, v, ok, pos = self.ratio_rows().block(kind, axis, x)
        known = [y for y in ys if y in index]  # a y not in the table shares nothing: NaN
        if len(known) < len(ys):
            got = dict(zip(known, self.ratio(kind, axis, x, known, keep, weight)))
            return [got.get(y, math.nan) for y in ys]
        pick = [index[y] for y in ys]
        v, ok, pos = v[pick], ok[pick], pos[pick]
        gone = self.removed
        mask = np.array([[keep(r) and ((r, x) if axis == "p" else (x, r)) not in gone
                          and ((r, y) if axis == "p" else (y, r)) not in gone for r in rows]
                         for y in ys], dtype=bool).reshape(len(ys), len(rows))
        w = None if weight is None else \
            np.broadcast_to(np.array([weight.get(r, 0.0) for r in rows]), mask.shape)
        return ratio_distance_rows(v, ok & mask[:, :, None], pos, w)

    def ratio_from(self, kind: str, xs, y, keep) -> list[float]:
        """``ratio`` on axis "p" (unweighted) of each platform of ``xs`` against ``y``, in one
        batch: each x's rows in its own order, padded at the end with invalid rows (they add
        0.0 after the others, so each sum is the one ratio_distance makes)."""
        blocks = [self.ratio_rows().block(kind, "p", x) for x in xs]
        if not blocks or y not in blocks[0][1]:  # y not in the table shares nothing: NaN
            return [math.nan] * len(xs)
        width = max(len(b[0]) for b in blocks)
        # an x without a row in the table (a platform measured at one core has no q(n)) has
        # an empty block of one group: the others' count is the table's
        groups = max(b[2].shape[2] for b in blocks)
        v = np.full((len(xs), width, groups), np.nan)
        ok = np.zeros(v.shape, dtype=bool)
        pos = np.zeros(v.shape, dtype=np.int64)
        gone = self.removed
        for i, (x, (rows, index, bv, bok, bpos)) in enumerate(zip(xs, blocks)):
            n = len(rows)
            v[i, :n], pos[i, :n] = bv[index[y]], bpos[index[y]]
            mask = np.array([keep(r) and (r, x) not in gone and (r, y) not in gone
                             for r in rows], dtype=bool).reshape(n)
            ok[i, :n] = bok[index[y]] & mask[:, None]
        return ratio_distance_rows(v, ok, pos)

    def distances(self) -> Distances:
        # eq. 10-12 over the database and the query (the query's profiles are in it); computed
        # once per database (the profiles do not change after construction)
        got = getattr(self, "_dist", None)
        if got is None:
            got = self._dist = Distances(lambda: normalise(self.sc), list(self.sc))
        return got

    def t1_table(self) -> tuple[dict, dict]:
        """t(1) by workload ({w: {platform: t1}}) and by platform ({p: {workload: t1}})."""
        got = getattr(self, "_t1_table", None)
        if got is None:
            by_w: dict = {}
            by_p: dict = {}
            for w, p in self.profiles:
                v = self.t1((w, p))
                if math.isfinite(v) and v > 0:
                    by_w.setdefault(w, {})[p] = v
                    by_p.setdefault(p, {})[w] = v
            got = self._t1_table = (by_w, by_p)
        return got

    def log_t1(self) -> tuple[dict, dict, np.ndarray]:
        """The t(1) table as a matrix of math.log t(1): ({workload: row}, {platform: column},
        values, NaN where there is no t(1)); built once, shared with the ``without`` copies."""
        got = self.__dict__.get("_log_t1")
        if got is None:
            by_w, by_p = self.t1_table()
            rows = {w: i for i, w in enumerate(by_w)}
            cols = {p: j for j, p in enumerate(by_p)}
            mat = np.full((len(rows), len(cols)), np.nan)
            for w, d in by_w.items():
                for p, v in d.items():
                    mat[rows[w], cols[p]] = math.log(v)
            got = self._log_t1 = (rows, cols, mat)
        return got

    def log_q_grid(self, ns: tuple[float, ...]) -> tuple[dict, dict, np.ndarray, np.ndarray]:
        """log q(n) at ``ns`` (a tuple of floats) of every profile, np.log of its ``_q_values``:
        ({workload: row}, {platform: column}, values [row, column, n], has [row, column]: the
        profile is there). One more row and column, NaN and absent, stand for a workload or
        platform without any. Built once per ``ns`` on the database ``removed`` is from and
        shared with its ``without`` copies, each with the profiles it hides absent."""
        mine = self.__dict__.setdefault("_log_q_grids", {})
        got = mine.get(ns)
        if got is not None:
            return got
        root = self.__dict__.get("_root", self)
        if root is not self:
            rows, cols, vals, has = root.log_q_grid(ns)
            gone = [(rows[w], cols[p]) for w, p in self.removed if w in rows and p in cols]
            if gone:
                vals, has = vals.copy(), has.copy()
                for i, j in gone:
                    vals[i, j] = np.nan
                    has[i, j] = False
        else:
            rows, cols = {}, {}
            for w, p in self.sc:
                rows.setdefault(w, len(rows))
                cols.setdefault(p, len(cols))
            vals = np.full((len(rows) + 1, len(cols) + 1, len(ns)), np.nan)
            has = np.zeros((len(rows) + 1, len(cols) + 1), dtype=bool)
            shared = self.__dict__.setdefault("_q_cache", {})  # a profile's log q is shared
            for key in self.sc:
                logs = shared.get(("log", key, ns))
                if logs is None:
                    logs = shared[("log", key, ns)] = np.log(self._q_values(key, ns))
                vals[rows[key[0]], cols[key[1]]] = logs
                has[rows[key[0]], cols[key[1]]] = True
        got = mine[ns] = (rows, cols, vals, has)
        return got

    def q_table(self) -> tuple[dict, dict]:
        """Measured q(n), n >= 2, by workload ({w: {(platform, n): q}}) and by platform
        ({p: {(workload, n): q}})."""
        got = getattr(self, "_q_table", None)
        if got is None:
            by_w: dict = {}
            by_p: dict = {}
            for w, p in self.profiles:
                for n, q in cpu_time_ratio(self.profiles[(w, p)].get("t") or {}).items():
                    if n >= 2 and math.isfinite(q) and q > 0:
                        by_w.setdefault(w, {})[(p, n)] = q
                        by_p.setdefault(p, {})[(w, n)] = q
            got = self._q_table = (by_w, by_p)
        return got


class RatioRows:
    """Log ratios log(x[k] / y[k]) between the rows of a database's t(1) or q(n) table (by
    workload or by platform), as arrays computed once per row x against every y, for
    ``ratio_distance_rows``; held by the database and shared with its ``without`` copies.

    Keys of a table row are a label (t(1)) or (label, n) (q(n), grouped per n); the arrays
    keep x's order (``pos``) so that the distance is ratio_distance's float exactly.
    """

    def __init__(self, t1_table: tuple[dict, dict], q_table: tuple[dict, dict]):
        self.tables = {"t1": t1_table, "q": q_table}
        self._pairs: dict = {}

    def log_q_on(self, platform) -> dict:
        """{workload: {n: log q(n)}} measured on ``platform`` (n >= 2), in table order."""
        got = self._pairs.get(("log q", platform))
        if got is None:
            got = {}
            for (b, n), v in self.tables["q"][1].get(platform, {}).items():
                got.setdefault(b, {})[n] = math.log(v)
            self._pairs[("log q", platform)] = got
        return got

    def _dense(self, kind: str):
        """Table ``kind`` as arrays: workload and platform labels (table order), group labels,
        values [w, p, g] (NaN: none) and each entry's place in by_w[w] and in by_p[p]."""
        got = self._pairs.get(("dense", kind))
        if got is None:
            by_w, by_p = self.tables[kind]
            ws = {w: i for i, w in enumerate(by_w)}
            ps = {p: i for i, p in enumerate(by_p)}
            gs: dict = {}
            for d in by_w.values():
                for k in d:
                    gs.setdefault(k[1] if isinstance(k, tuple) else None, len(gs))
            val = np.full((len(ws), len(ps), max(len(gs), 1)), np.nan)
            pos_w = np.zeros(val.shape, dtype=np.int64)
            pos_p = np.zeros(val.shape, dtype=np.int64)
            for pos, table in ((pos_w, by_w), (pos_p, by_p)):
                at = []
                for x, d in table.items():
                    for i, (k, v) in enumerate(d.items()):
                        r, g = k if isinstance(k, tuple) else (k, None)
                        w, p = (x, r) if table is by_w else (r, x)
                        at.append((ws[w], ps[p], gs[g], i, v))
                if at:
                    a = np.array(at, dtype=object)
                    idx = tuple(a[:, j].astype(np.int64) for j in range(3))
                    pos[idx] = a[:, 3].astype(np.int64)
                    val[idx] = a[:, 4].astype(float)
            got = self._pairs[("dense", kind)] = (list(ws), list(ps), val, pos_w, pos_p)
        return got

    def block(self, kind: str, axis: str, x):
        """(x's row labels in x's order, {y: index}, v, ok, pos), each [y, row, group] over
        every y of the table: v = log(x/y) (math.log on each quotient, as ratio_distance takes
        it), ok where both have the entry, pos = its place in x's iteration order."""
        ck = ("block", kind, axis, x)
        got = self._pairs.get(ck)
        if got is None:
            ws, ps, val, pos_w, pos_p = self._dense(kind)
            labels = ps if axis == "p" else ws
            if x not in labels:
                got = self._pairs[ck] = ([], {y: i for i, y in enumerate(labels)},
                                         np.zeros((len(labels), 0, 1)),
                                         np.zeros((len(labels), 0, 1), dtype=bool),
                                         np.zeros((len(labels), 0, 1), dtype=np.int64))
                return got
            xi = labels.index(x)
            # rows = the other axis: [rows, y, g] views of the values
            if axis == "p":
                mine, pos, other = val[:, xi, :], pos_p[:, xi, :], ws
                theirs = val.transpose(1, 0, 2)  # [y, rows, g]
            else:
                mine, pos, other = val[xi], pos_w[xi], ps
                theirs = val  # [y, rows, g]
            present = np.isfinite(mine)
            first = np.where(present, pos, np.iinfo(np.int64).max).min(axis=1)
            order = [r for r in np.argsort(first, kind="stable").tolist()
                     if present[r].any()]
            rows = [other[r] for r in order]
            mine, pos = mine[order], pos[order]
            with np.errstate(all="ignore"):
                q = mine[None, :, :] / theirs[:, order, :]
            ok = np.isfinite(q)
            v = np.full(q.shape, np.nan)
            v[ok] = list(map(math.log, q[ok].tolist()))
            got = self._pairs[ck] = (rows, {y: i for i, y in enumerate(labels)}, v, ok,
                                     np.ascontiguousarray(np.broadcast_to(pos, v.shape)))
        return got


def _plat(key):
    """The platform (or workload) of a t1_table/q_table key: itself or (it, n)."""
    return key[0] if isinstance(key, tuple) else key
