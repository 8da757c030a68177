"""Amdahl and USL speedup models over cores, with a per-frequency single-core time T1(F).

Both are instances of one structure shared with the memory-wall model (memwall.py):

    t(p, F) = T1(F) * g(p, F; theta),   g = 1 / S_p  (relative time, g(1, F) = 1)

Fitting minimises squared log-time residuals with scipy's bounded ``least_squares``.

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

Notation: seed 003 and the peers write Amdahl with the *parallel* fraction f,
t = T1 ((1 - f) + f / p); we report ``parallel_fraction`` f, ``serial_fraction`` 1 - f and the
speedup limit 1 / (1 - f).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import optimize, stats

from .base import FittedModel, Modeler, NotEnoughData, Observations, Prediction, fit_quality

LEVEL = 0.9          # interval coverage
SIGMA_FLOOR = 0.005  # 0.5 % in log time: an exact fit does not mean zero uncertainty
N_POLISH = 3         # candidate starts polished by least_squares
FTOL = 1e-5          # relative cost change that ends a polish (1e-6 crept for 100 steps
                     # along flat valleys for < 0.2 % less cost)
NFEV_PER_PARAM = 15  # evaluation budget per polish and parameter


def clean(obs: Observations) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(cores, freq or None, time) of the usable rows; NotEnoughData when nothing is usable.

    Rows with a non-finite or non-positive time or core count are dropped. Where only some rows
    have a frequency, the rows without one are dropped (they cannot be placed on the axis).
    """
    p = np.asarray(obs.cores, dtype=float)
    t = np.asarray(obs.time_s, dtype=float)
    ok = np.isfinite(p) & np.isfinite(t) & (p >= 1) & (t > 0)
    freq = None
    if obs.freq_mhz is not None:
        fq = np.asarray(obs.freq_mhz, dtype=float)
        has = np.isfinite(fq) & (fq > 0)
        if np.any(has & ok):
            ok &= has
            freq = fq[ok]
    p, t = p[ok], t[ok]
    if p.size < 2:
        raise NotEnoughData(f"need at least 2 valid measurements, got {p.size}")
    if np.unique(p).size < 2:
        raise NotEnoughData("need at least 2 distinct core counts to fit a speedup curve")
    return p, freq, t


SMT_YIELDS = (0.0, 0.25, 0.5, 1.0)  # compute added by a thread beyond the physical cores
SMT_PRIOR = 0.25    # yield assumed when no training row lies beyond the physical cores: the
                    # median yield fitted on the full xplat + loghin SMT groups (46)


def phys_cores(obs: Observations) -> float | None:
    """The physical core count from the hardware descriptor column ``hw_phys_cores`` (tidy.py
    passes it as a counter) when it is one positive value for the whole group, else None."""
    col = obs.counters.get("hw_phys_cores")
    if col is None:
        return None
    v = np.unique(col[np.isfinite(col)])
    return float(v[0]) if v.size == 1 and v[0] >= 1 else None


def effective_cores(p: np.ndarray, phys: float | None, smt_yield: float) -> np.ndarray:
    """Cores as compute capacity: threads beyond the physical cores (SMT siblings, or
    oversubscription) add ``smt_yield`` of a core each: min(p, P) + y max(p - P, 0)."""
    if phys is None:
        return p
    return np.minimum(p, phys) + smt_yield * np.maximum(p - phys, 0.0)


def _amdahl_grid_cost(p: np.ndarray, freq: np.ndarray | None, logt: np.ndarray) -> float:
    """Least squared log residual of Amdahl (eq. 5) over a grid of parallel fractions, with
    the optimal log T1 level per frequency (variable projection)."""
    keys = (np.zeros(p.size, dtype=int) if freq is None
            else np.unique(freq, return_inverse=True)[1])
    f = np.linspace(0.0, 1.0, 201)[:, None]
    r = logt[None, :] - np.log((1.0 - f) + f / p[None, :])
    for k in np.unique(keys):
        sel = keys == k
        r[:, sel] -= r[:, sel].mean(axis=1, keepdims=True)
    return float(np.min(np.sum(r ** 2, axis=1)))


def end_anchors(p: np.ndarray, freq: np.ndarray | None, r: np.ndarray) -> list[dict[str, float]]:
    """Per training frequency (one entry without a frequency axis): the mean log residual
    (measured / model) at the largest and the smallest core count, and the next core counts
    inwards, for ``anchor_correction``."""
    out = []
    keys = np.full(p.size, np.nan) if freq is None else freq
    for key in np.unique(keys) if freq is not None else [np.nan]:
        sel = np.ones(p.size, bool) if freq is None else keys == key
        u = np.unique(p[sel])
        if u.size < 2:
            continue
        out.append({"freq": float(key), "p_hi": float(u[-1]), "p_hi2": float(u[-2]),
                    "r_hi": float(np.mean(r[sel][p[sel] == u[-1]])),
                    "p_lo": float(u[0]), "p_lo2": float(u[1]),
                    "r_lo": float(np.mean(r[sel][p[sel] == u[0]]))})
    return out


def anchor_correction(anchors: list[dict[str, float]], p: np.ndarray,
                      freq: np.ndarray | None) -> np.ndarray:
    """Log correction that makes an extrapolation start from the measured end points:
    beyond the largest training core count the model's shape is kept and its level is the
    measured one there (intercept correction of forecasting); between the two largest
    counts the correction ramps in linearly in log p (no jump); the same at the smallest
    count. Frequencies not in training are not corrected."""
    out = np.zeros(p.size)
    lp = np.log(p)
    for a in anchors:
        if freq is None or not np.isfinite(a["freq"]):
            on = np.ones(p.size, bool)
        else:
            on = np.isclose(freq, a["freq"], rtol=1e-9, atol=1e-6)
        w_hi = np.clip((lp - np.log(a["p_hi2"])) / np.log(a["p_hi"] / a["p_hi2"]), 0.0, 1.0)
        w_lo = np.clip((np.log(a["p_lo2"]) - lp) / np.log(a["p_lo2"] / a["p_lo"]), 0.0, 1.0)
        out = np.where(on, w_hi * a["r_hi"] + w_lo * a["r_lo"], out)
    return out


def _hyperbola(freqs: np.ndarray, levels: np.ndarray) -> tuple[float, float]:
    """Non-negative c0, c1 with c0 + c1/F closest to T1 at ``freqs`` in relative error."""
    if freqs.size < 2:
        return 0.0, float(levels[0] * freqs[0])          # T1 ~ 1/F (assumption 3)
    a = np.column_stack([np.ones_like(freqs), 1.0 / freqs]) / levels[:, None]
    (c0, c1), _ = optimize.nnls(a, np.ones_like(freqs))
    if c0 + c1 <= 0:
        return float(np.mean(levels)), 0.0
    return float(c0), float(c1)


def _batched_jac(resid_many: Any, lo: np.ndarray, hi: np.ndarray) -> Any:
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


class SpeedupFamily(Modeler):
    """A speedup model S(p, F; theta) times a fitted T1(F); subclasses define ``rel_time``."""
    param_names: tuple[str, ...] = ()
    lower: tuple[float, ...] = ()
    upper: tuple[float, ...] = ()

    def __init__(self, t1_mode: str = "auto", anchor: bool = False) -> None:
        if t1_mode not in ("auto", "per_freq", "hyper"):
            raise ValueError(f"t1_mode must be auto, per_freq or hyper, not {t1_mode!r}")
        self.t1_mode = t1_mode
        self.anchor = anchor

    # -- to be defined by a family ------------------------------------------------------
    def rel_time(self, theta: np.ndarray, p: np.ndarray, freq: np.ndarray | None) -> np.ndarray:
        """g = T_p / T_1 for each row of ``theta`` (K, m) and point (n,): shape (K, n)."""
        raise NotImplementedError

    def log_rel_time_grad(self, theta: np.ndarray, p: np.ndarray,
                          freq: np.ndarray | None) -> np.ndarray | None:
        """d log g / d theta at one theta (m,) for each point: (n, m); None = use finite
        differences."""
        return None

    def candidates(self, rng: np.random.Generator) -> np.ndarray:
        """Starting points (K, m) scored cheaply before polishing."""
        raise NotImplementedError

    def regimes(self, theta: np.ndarray, p: np.ndarray, freq: np.ndarray | None) -> np.ndarray:
        """A label per start (K,); the best start of each label is always polished."""
        return np.zeros(len(theta), dtype=int)

    def derived(self, theta: np.ndarray) -> dict[str, float]:
        """Named parameters and quantities derived from them."""
        return dict(zip(self.param_names, map(float, theta)))

    # -- fitting --------------------------------------------------------------------------
    def fit(self, obs: Observations) -> "SpeedupFit":
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
        costs = [_amdahl_grid_cost(effective_cores(p, phys, yv), freq, np.log(t))
                 for yv in SMT_YIELDS]
        return self._fit(p, freq, t, phys, SMT_YIELDS[int(np.argmin(costs))])

    def _fit(self, p_cores: np.ndarray, freq: np.ndarray | None, t: np.ndarray,
             phys: float | None, smt_yield: float) -> "SpeedupFit":
        p = effective_cores(p_cores, phys, smt_yield)
        y = np.log(t)
        m = len(self.param_names)
        if freq is None:
            keys = np.zeros(p.size, dtype=int)
            ufreq = np.array([np.nan])
        else:
            ufreq, keys = np.unique(freq, return_inverse=True)
        nlev = ufreq.size
        mode = self.t1_mode
        if mode == "auto":
            # c0 + c1/F saves parameters only with more than two frequencies
            mode = "hyper" if (freq is not None and nlev > 2 and p.size < nlev + m + 1) else "per_freq"
        if mode == "hyper" and freq is None:
            mode = "per_freq"
        lo, hi = np.array(self.lower, float), np.array(self.upper, float)
        rng = np.random.default_rng(0)
        cand = np.clip(self.candidates(rng), lo, hi)
        counts = np.bincount(keys, minlength=nlev).astype(float)
        avg = np.zeros((p.size, nlev))
        avg[np.arange(p.size), keys] = 1.0 / counts[keys]

        def levels(r: np.ndarray) -> np.ndarray:
            # per-frequency mean of (log t - log g): the optimal log T1 levels (K, nlev)
            return r @ avg

        if mode == "per_freq":
            def resid_many(th: np.ndarray) -> np.ndarray:
                r = y - np.log(self.rel_time(th, p, freq))
                return r - levels(r)[:, keys]
            fun = lambda th: resid_many(th[None, :])[0]   # noqa: E731
            x_lo, x_hi = lo, hi
            n_par = m + nlev
        else:
            fscale, tscale = float(np.median(freq)), float(np.exp(np.mean(y)))

            def t1(c: np.ndarray) -> np.ndarray:
                return tscale * (c[..., :1] + c[..., 1:2] * fscale / freq)

            def hyper_c(g: np.ndarray) -> np.ndarray:
                # c0, c1 >= 0 by linear least squares on the relative time error (for starts)
                a = np.column_stack([g, g * fscale / freq]) * tscale / t[:, None]
                c, _ = optimize.nnls(a, np.ones_like(t))
                return np.clip(c, 1e-9, 1e3)

            def resid_many(th: np.ndarray) -> np.ndarray:
                g = self.rel_time(th[:, :m], p, freq)
                if th.shape[1] == m:           # scoring starts: c0, c1 solved for each start
                    a = np.stack([g, g * fscale / freq], axis=-1) * (tscale / t)[None, :, None]
                    ata = np.einsum("kni,knj->kij", a, a) + 1e-12 * np.eye(2)
                    c = np.linalg.solve(ata, a.sum(axis=1)[..., None])[..., 0]
                    return y - np.log(g * t1(np.clip(c, 1e-9, 1e3)))
                return y - np.log(g * t1(th[:, m:]))
            fun = lambda th: resid_many(th[None, :])[0]   # noqa: E731
            x_lo = np.r_[lo, 1e-9, 1e-9]
            x_hi = np.r_[hi, 1e3, 1e3]
            n_par = m + 2

        with np.errstate(all="ignore"):
            score = np.nansum(resid_many(cand) ** 2, axis=1)
        score[~np.isfinite(score)] = np.inf
        order = list(np.argsort(score)[:N_POLISH])
        labels = self.regimes(cand, p, freq)
        for lab in np.unique(labels):          # also the best start of every regime
            best_of = int(np.flatnonzero(labels == lab)[np.argmin(score[labels == lab])])
            if best_of not in order and np.isfinite(score[best_of]):
                order.append(best_of)
        jac: Any = _batched_jac(resid_many, x_lo, x_hi)
        if mode == "per_freq" and self.log_rel_time_grad(cand[0], p, freq) is not None:
            def jac(th: np.ndarray) -> np.ndarray:
                # r = (I - P)(y - log g), P = per-frequency mean: J = -(I - P) dlog g/dtheta
                with np.errstate(all="ignore"):
                    d = self.log_rel_time_grad(th, p, freq)
                d = np.nan_to_num(d, nan=0.0, posinf=0.0, neginf=0.0)
                return -(d - (avg.T @ d)[keys])

        def polish(x0: np.ndarray, method: str) -> tuple[np.ndarray, float] | None:
            try:
                with np.errstate(all="ignore"):
                    sol = optimize.least_squares(fun, np.clip(x0, x_lo, x_hi), jac=jac,
                                                 bounds=(x_lo, x_hi), method=method,
                                                 x_scale=1.0, ftol=FTOL, xtol=1e-6, gtol=1e-8,
                                                 max_nfev=NFEV_PER_PARAM * x0.size)
            except (ValueError, np.linalg.LinAlgError):
                return None
            cost = float(np.sum(sol.fun ** 2))
            return (sol.x, cost) if np.isfinite(cost) else None

        found: list[tuple[np.ndarray, float]] = []
        exact = 1e-20 * p.size
        for i in order:
            x0 = cand[i]
            if mode != "per_freq":
                with np.errstate(all="ignore"):
                    x0 = np.r_[x0, hyper_c(self.rel_time(x0[None, :], p, freq)[0])]
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
        best_x, best_cost = min(found, key=lambda r: r[1]) if found else (None, np.inf)
        if best_x is None:
            raise NotEnoughData(f"{self.name}: no finite fit for these data")
        theta = best_x[:m]
        r = fun(best_x)
        if mode == "per_freq":
            lv = levels(y[None, :] - np.log(self.rel_time(theta[None, :], p, freq)))[0]
            t1_levels = np.exp(lv)
            if freq is None:
                scale = {"mode": "single", "t1": float(t1_levels[0])}
            else:
                c0, c1 = _hyperbola(ufreq, t1_levels)
                scale = {"mode": "per_freq", "freqs": ufreq.tolist(),
                         "t1": t1_levels.tolist(), "c0": c0, "c1": c1}
        else:
            c = best_x[m:]
            scale = {"mode": "hyper", "c0": float(tscale * c[0]),
                     "c1": float(tscale * c[1] * fscale), "freqs": [], "t1": []}
        dof = p.size - n_par
        sigma = max(float(np.sqrt(np.sum(r ** 2) / max(dof, 1))), SIGMA_FLOOR)
        if phys is not None:
            scale["phys_cores"], scale["smt_yield"] = float(phys), float(smt_yield)
        if getattr(self, "anchor", True):
            scale["anchors"] = end_anchors(p_cores, freq, r)
        fitted = SpeedupFit(self, theta, scale, sigma, max(dof, 1))
        fitted.cost = float(np.sum(r ** 2))
        fitted.quality = fit_quality(t, fitted.predict_time(p_cores, freq))
        # how well the speedup curve itself fits (before the end-point anchoring)
        fitted.quality["shape_mape"] = float(100 * np.mean(np.abs(np.expm1(-r))))
        return fitted

    def options(self) -> dict[str, Any]:
        """Constructor options, saved with a fit."""
        return {"t1_mode": self.t1_mode}

    def from_state(self, state: dict[str, Any]) -> "SpeedupFit":
        """A fitted model back from ``SpeedupFit.to_state()`` (for saved fits)."""
        fit = SpeedupFit(self, np.asarray(state["theta"], float), state["scale"],
                         float(state["sigma"]), int(state["dof"]))
        fit.quality = dict(state.get("quality", {}))
        return fit


class SpeedupFit(FittedModel):
    """t = T1(F) * g(p, F; theta) with a log-normal residual interval."""

    def __init__(self, family: SpeedupFamily, theta: np.ndarray, scale: dict[str, Any],
                 sigma: float, dof: int) -> None:
        self.family, self.theta, self.scale = family, np.asarray(theta, float), scale
        self.sigma, self.dof = sigma, dof
        self.cost = float("nan")
        self.name = family.name
        self.params = family.derived(self.theta)
        self.params["log_sigma"] = sigma
        if "phys_cores" in scale:
            self.params["phys_cores"] = float(scale["phys_cores"])
            self.params["smt_yield"] = float(scale["smt_yield"])
        self.quality = {}

    def t1(self, freq: np.ndarray | None, n: int) -> np.ndarray:
        """Single-core time at each query frequency (see the module docstring)."""
        s = self.scale
        if s["mode"] == "single":
            return np.full(n, float(s["t1"]))
        freq = self._fill(freq, n)
        out = s["c0"] + s["c1"] / freq
        for fk, tk in zip(s.get("freqs", []), s.get("t1", [])):
            out = np.where(np.isclose(freq, fk, rtol=1e-9, atol=1e-6), tk, out)
        return np.maximum(out, 1e-300)

    def reference_freq(self) -> float:
        """Frequency assumed for a query row without one: the highest training frequency."""
        fr = self.scale.get("freqs") or []
        return float(max(fr)) if fr else 1000.0

    def _cores(self, p: Any) -> np.ndarray:
        p = np.maximum(np.atleast_1d(np.asarray(p, float)), 1.0)
        return effective_cores(p, self.scale.get("phys_cores"), self.scale.get("smt_yield", 1.0))

    def predict_time(self, p: np.ndarray, freq: np.ndarray | None) -> np.ndarray:
        p_query = p
        p = self._cores(p)
        fq = self._fill(freq, p.size)
        with np.errstate(all="ignore"):
            g = self.family.rel_time(self.theta[None, :], p, fq)[0]
        out = self.t1(fq, p.size) * g
        anchors = self.scale.get("anchors")
        if anchors:
            raw = np.maximum(np.atleast_1d(np.asarray(p_query, float)), 1.0)
            out = out * np.exp(anchor_correction(anchors, raw, fq))
        return out

    def _fill(self, freq: Any, n: int) -> np.ndarray | None:
        """Query frequencies with missing ones set to the reference; None without an axis."""
        if self.scale["mode"] == "single":
            return None
        freq = np.broadcast_to(np.asarray(np.nan if freq is None else freq, float), (n,))
        return np.where(np.isfinite(freq) & (freq > 0), freq, self.reference_freq())

    def predict(self, query: Observations) -> Prediction:
        value = self.predict_time(query.cores, query.freq_mhz)
        z = float(stats.t.ppf(0.5 + LEVEL / 2, self.dof))
        w = np.exp(z * self.sigma)
        return Prediction(value=value, lower=value / w, upper=value * w, level=LEVEL)

    def speedup(self, cores: Any, freq_mhz: Any = None) -> np.ndarray:
        """Model speedup S = T1(F) / T_p(F) (eq. 1) at the given points."""
        p = self._cores(cores)
        fq = self._fill(freq_mhz, p.size)
        return 1.0 / self.family.rel_time(self.theta[None, :], p, fq)[0]

    def to_state(self) -> dict[str, Any]:
        """JSON-ready state that ``Modeler.from_state`` turns back into this model."""
        return {"theta": self.theta.tolist(), "scale": self.scale, "sigma": self.sigma,
                "dof": self.dof, "quality": dict(self.quality),
                "options": self.family.options()}

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["t1"] = {k: v for k, v in self.scale.items()}
        return d


class AmdahlModeler(SpeedupFamily):
    """Amdahl's law, seed 003 eq. 5: S = 1 / ((1 - f) + f / p), f = parallel fraction."""
    name = "amdahl"
    param_names = ("parallel_fraction",)
    lower, upper = (0.0,), (1.0,)

    def rel_time(self, theta, p, freq):
        f = theta[:, :1]
        return (1.0 - f) + f / p[None, :]

    def candidates(self, rng):
        return np.linspace(0.0, 1.0, 41)[:, None]

    def derived(self, theta):
        f = float(theta[0])
        serial = 1.0 - f
        return {"parallel_fraction": f, "serial_fraction": serial,
                "speedup_limit": float(1.0 / serial) if serial > 0 else float("inf")}


class USLModeler(SpeedupFamily):
    """Universal Scalability Law: C(p) = p / (1 + a (p - 1) + b p (p - 1)), a, b in [0, 1].

    a = contention (a = Amdahl's serial fraction when b = 0), b = coherency (retrograde
    scaling); the peak is at p* = sqrt((1 - a) / b).
    """
    name = "usl"
    param_names = ("contention", "coherency")
    lower, upper = (0.0, 0.0), (1.0, 1.0)

    def rel_time(self, theta, p, freq):
        a, b = theta[:, :1], theta[:, 1:2]
        pp = p[None, :]
        return (1.0 + a * (pp - 1.0) + b * pp * (pp - 1.0)) / pp

    def candidates(self, rng):
        a = np.linspace(0.0, 1.0, 21)
        b = np.r_[0.0, np.geomspace(1e-6, 1.0, 13)]
        aa, bb = np.meshgrid(a, b)
        return np.column_stack([aa.ravel(), bb.ravel()])

    def derived(self, theta):
        a, b = map(float, theta)
        peak = float(np.sqrt((1 - a) / b)) if b > 0 else float("inf")
        return {"contention": a, "coherency": b, "peak_cores": peak}
