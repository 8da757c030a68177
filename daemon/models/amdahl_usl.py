"""Amdahl and USL speedup models over cores, with a per-frequency single-core time T1(F).

Both are instances of one structure shared with the memory-wall model (memwall.py):

    t(p, F) = T1(F) * g(p, F; theta),   g = 1 / S_p  (relative time, g(1, F) = 1)

Fitting minimises squared log-time residuals within bounds: many starts scored at once, the
best few polished by a small projected Levenberg-Marquardt solver (lsq.py) with analytic
Jacobians (scipy's ``least_squares``, the previous solver, stays selectable: ``solver="scipy"``).

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
* A family with nested sub-models (``restrictions``, memwall) fits both parameterisations
  (with > 2 frequencies) for the full model and each restriction and keeps the lowest AICc
  (``_select_aicc``).

Notation: seed 003 and the peers write Amdahl with the *parallel* fraction f,
t = T1 ((1 - f) + f / p); we report ``parallel_fraction`` f, ``serial_fraction`` 1 - f and the
speedup limit 1 / (1 - f).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

from .base import FittedModel, Modeler, NotEnoughData, Observations, Prediction, fit_quality
from .lsq import compass_search, least_squares_box, least_squares_box_many

LEVEL = 0.9          # interval coverage
SIGMA_FLOOR = 0.005  # 0.5 % in log time: an exact fit does not mean zero uncertainty
N_POLISH = 3         # candidate starts polished (plus the best start of each regime)
N_BATCH = 48         # best-scored starts that take their first LM_BATCH_ITERS trial steps
LM_BATCH_ITERS = 10  # together (lsq.least_squares_box_many) before the polish
LM_FTOL = 1e-10      # lsq.least_squares_box: relative cost change that ends a polish,
LM_STAGE = 8         # its first budget of iterations per start (successive halving, _polish_lm)
LM_MAX_ITER = 60     # and its total per start (an iteration costs ~0.1 ms)
LM_SOLVE_BUDGET = 60  # iterations of all starts of one polish together: no new halving round
                      # beyond it (bounds the slow tail; the compass + LM rounds still follow)
SAME_VALLEY = 1e-3   # runs within this relative cost of a better one: only the better goes on
HOPELESS = 2.0       # an AICc variant whose cost after the first polish stage is this many times
                     # the cost it needs to win stops there (further rounds gain a few %)
KINK_ROUNDS = 3      # compass search + LM rounds on the best result (kinks of eq. 15, 16)
# solver="scipy" (the previous solver, kept for benchmarks/memwall_fit.py's comparison):
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


def _polish_lm(fun: Any, jac: Any, starts: list[np.ndarray], lo: np.ndarray, hi: np.ndarray,
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


def _polish_scipy(fun: Any, jac: Any, starts: list[np.ndarray], lo: np.ndarray, hi: np.ndarray,
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


@dataclass
class _Data:
    """Training data of one fit: effective cores, frequency (None without an axis), time,
    log time, the frequency index of each point, the distinct frequencies and the (n, nlev)
    matrix whose product with residuals gives their per-frequency means."""
    p: np.ndarray
    freq: np.ndarray | None
    t: np.ndarray
    y: np.ndarray
    keys: np.ndarray
    ufreq: np.ndarray
    avg: np.ndarray


@dataclass
class _Solution:
    """One fitted variant: T1 mode, parameters (theta, then c0, c1 in hyper mode), cost,
    free parameter count, whether it is a nested restriction, its residual function."""
    mode: str
    x: np.ndarray
    cost: float
    n_par: int
    restricted: bool
    fun: Any = None
    aicc: float = float("nan")


class SpeedupFamily(Modeler):
    """A speedup model S(p, F; theta) times a fitted T1(F); subclasses define ``rel_time``.

    ``solver``: "lm" (``lsq.least_squares_box``, the default) or "scipy" (bounded
    ``scipy.optimize.least_squares``, trf then dogbox: the previous solver, kept for
    comparison; nested restrictions are always solved with "lm")."""
    param_names: tuple[str, ...] = ()
    lower: tuple[float, ...] = ()
    upper: tuple[float, ...] = ()
    piecewise = False    # g has kinks (a max() or min() of smooth pieces): compass search

    def __init__(self, t1_mode: str = "auto", anchor: bool = False, solver: str = "lm") -> None:
        if t1_mode not in ("auto", "per_freq", "hyper"):
            raise ValueError(f"t1_mode must be auto, per_freq or hyper, not {t1_mode!r}")
        if solver not in ("lm", "scipy"):
            raise ValueError(f"solver must be lm or scipy, not {solver!r}")
        self.t1_mode = t1_mode
        self.anchor = anchor
        self.solver = solver

    # -- to be defined by a family ------------------------------------------------------
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
        if freq is None:
            keys = np.zeros(p.size, dtype=int)
            ufreq = np.array([np.nan])
        else:
            ufreq, keys = np.unique(freq, return_inverse=True)
        counts = np.bincount(keys, minlength=ufreq.size).astype(float)
        avg = np.zeros((p.size, ufreq.size))
        avg[np.arange(p.size), keys] = 1.0 / counts[keys]
        data = _Data(p, freq, t, np.log(t), keys, ufreq, avg)
        variants = self._variants(data)
        if len(variants) == 1:
            best = self._solve(data, *variants[0])
        else:
            best = self._select_aicc(data, variants)
            if best is not None and best.restricted:
                best = self._as_standalone(data, best, variants)
        if best is None:
            raise NotEnoughData(f"{self.name}: no finite fit for these data")
        return self._build(data, best, p_cores, phys, smt_yield)

    def _auto_mode(self, data: "_Data", n_theta: int | None = None) -> str:
        """T1 parameterisation of a single fit with ``n_theta`` free shape parameters (default:
        all of them): ``t1_mode``, or for "auto" one level per frequency unless that leaves no
        residual (then c0 + c1/F, which saves parameters only with more than two
        frequencies)."""
        m = len(self.param_names) if n_theta is None else n_theta
        nlev = data.ufreq.size
        mode = self.t1_mode
        if mode == "auto":
            mode = ("hyper" if (data.freq is not None and nlev > 2 and data.p.size < nlev + m + 1)
                    else "per_freq")
        if mode == "hyper" and data.freq is None:
            mode = "per_freq"
        return mode

    def _variants(self, data: "_Data") -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
        """(T1 mode, lower, upper, starts) of each model to fit. Without nested sub-models:
        the full model with ``_auto_mode``. With them (``restrictions``): every T1
        parameterisation (levels; c0 + c1/F with > 2 frequencies) times {full, each
        restriction}, ranked by AICc in ``_select_aicc``."""
        lo, hi = np.array(self.lower, float), np.array(self.upper, float)
        full = (lo, hi, self.candidates(np.random.default_rng(0)))
        subs = self.restrictions()
        if not subs:
            return [(self._auto_mode(data), *full)]
        if self.t1_mode != "auto":
            modes = [self._auto_mode(data)]
        else:
            modes = ["per_freq"]
            if data.freq is not None and data.ufreq.size > 2:
                modes.append("hyper")
        return [(mode, *v) for mode in modes for v in (full, *subs)]

    def _as_standalone(self, data: "_Data", won: "_Solution", variants: list) -> "_Solution":
        """A restriction that won the AICc test, refitted with the T1 rule it has as a model
        of its own (``_auto_mode`` with its free parameter count): the test decides whether
        the extra parameters are supported, not how T1 is shaped; the restricted model
        (memwall: Amdahl) is then exactly the fit the simpler model gives on its own."""
        n_theta = won.n_par - (2 if won.mode == "hyper" else data.ufreq.size)
        mode = self._auto_mode(data, n_theta)
        if mode == won.mode:
            return won
        for v in variants:
            if v[0] == mode and np.any(v[1] >= v[2]):
                sol = self._solve(data, *v)
                if sol is not None:
                    sol.aicc = won.aicc
                    return sol
        return won

    def restrictions(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Nested sub-models (lower, upper with lower == upper for a fixed parameter, starts)
        that the full model must beat by AICc; none by default."""
        return []

    def _n_params(self, data: "_Data", mode: str, lo: np.ndarray, hi: np.ndarray) -> int:
        """Free parameters of a variant: theta not fixed by its bounds plus the T1 ones."""
        return int(np.sum(lo < hi)) + (2 if mode == "hyper" else data.ufreq.size)

    def _select_aicc(self, data: "_Data", variants: list) -> "_Solution | None":
        """The variant with the lowest AICc (Hurvich & Tsai 1989) of the log-time residuals,
        AICc = n ln(s2) + 2K + 2K(K+1)/(n-K-1), K = free theta + T1 parameters + 1 (the
        variance), s2 = RSS/n floored at SIGMA_FLOOR^2 (an exact fit is not evidence beyond
        the measurement noise). n <= K + 1 leaves AICc undefined: such a variant cannot win.
        Where no variant has an AICc the test does not apply and the full model is fitted with
        ``_auto_mode`` as without restrictions. Ties go to fewer parameters. A variant whose
        AICc could not win even with s2 at the floor is not fitted.

        Order: the restrictions (cheap), then the full variants from the most flexible one
        (the per-frequency levels win most often where they have an AICc): a full variant
        fitted later that cannot come close to the best AICc so far stops polishing early
        (``_polish_lm``'s ``hopeless``: its cost is HOPELESS times what it needs to win)."""
        n = data.p.size

        def penalty(k: int) -> float:
            return 2 * k + 2 * k * (k + 1) / (n - k - 1) if n - k - 1 > 0 else np.inf

        pens = [penalty(self._n_params(data, v[0], v[1], v[2]) + 1) for v in variants]
        if not any(np.isfinite(pens)):
            lo, hi = np.array(self.lower, float), np.array(self.upper, float)
            return self._solve(data, self._auto_mode(data), lo, hi,
                               self.candidates(np.random.default_rng(0)))
        restricted = [bool(np.any(v[1] >= v[2])) for v in variants]
        order = sorted(range(len(variants)),
                       key=lambda i: (not restricted[i], pens[i] if restricted[i] else -pens[i]))
        best, best_aicc, best_pen = None, np.inf, np.inf
        floor = n * np.log(SIGMA_FLOOR ** 2)
        for i in order:
            pen = pens[i]
            if not np.isfinite(pen) or floor + pen >= best_aicc:
                continue
            # the cost at which this variant would tie with the best so far
            need = n * np.exp((best_aicc - pen) / n) if np.isfinite(best_aicc) else np.inf
            sol = self._solve(data, *variants[i], hopeless=HOPELESS * need)
            if sol is None:
                continue
            aicc = n * np.log(max(sol.cost / n, SIGMA_FLOOR ** 2)) + pen
            if (aicc, pen) < (best_aicc, best_pen):
                best, best_aicc, best_pen = sol, aicc, pen
        if best is not None:
            best.aicc = best_aicc
        return best

    def _solve(self, data: "_Data", mode: str, lo: np.ndarray, hi: np.ndarray,
               cand: np.ndarray, hopeless: float = np.inf) -> "_Solution | None":
        """Best fit of one variant (T1 mode, bounds, starts). All starts are scored in one
        vectorised pass. With the "lm" solver the N_BATCH best (and the best of each regime)
        take their first LM_BATCH_ITERS trial steps together; the N_POLISH best of where they
        lead and the best of each regime are polished (``_polish_lm``). With "scipy" the
        N_POLISH best starts and the best of each regime are polished (``_polish_scipy``)."""
        p, freq, y, t, keys = data.p, data.freq, data.y, data.t, data.keys
        m = len(self.param_names)
        restricted = bool(np.any(lo >= hi))
        n_free = int(np.sum(lo < hi))
        cand = np.clip(cand, lo, hi)
        has_grad = self.log_rel_time_grad(cand[0], p, freq) is not None
        last: list[Any] = [None, None]   # point of the last residual evaluation, dlog g there

        def log_g(th: np.ndarray) -> np.ndarray:
            # log g at one theta; keeps how to get d log g / d theta at the same point
            lg, grad = self.log_rel_time_lazy(th[:m], p, freq)
            last[0], last[1] = th, grad
            return lg

        def dlog_g(th: np.ndarray) -> np.ndarray:
            if last[0] is not th:
                log_g(th)
            return last[1]()

        if mode == "per_freq":
            def resid_many(th: np.ndarray) -> np.ndarray:
                r = y - np.log(self.rel_time(th, p, freq))
                return r - (r @ data.avg)[:, keys]

            def fun(th: np.ndarray) -> np.ndarray:
                # variable projection: the optimal log T1 level per frequency is the mean of
                # log t - log g there
                r = y - log_g(th)
                return r - (r @ data.avg)[keys]
            x_lo, x_hi = lo, hi

            def jac_analytic(th: np.ndarray) -> np.ndarray:
                # r = (I - P)(y - log g), P = per-frequency mean: J = -(I - P) dlog g/dtheta
                d = dlog_g(th)
                return (data.avg.T @ d)[keys] - d

            def jac_many(th: np.ndarray) -> np.ndarray:
                with np.errstate(all="ignore"):
                    d = self.log_rel_time_and_grad(th, p, freq)[1]
                return (data.avg.T @ d)[:, keys, :] - d
        else:
            fscale, tscale = float(np.median(freq)), float(np.exp(np.mean(y)))
            finv = fscale / freq

            def t1(c: np.ndarray) -> np.ndarray:
                return tscale * (c[..., :1] + c[..., 1:2] * finv)

            def hyper_c(g: np.ndarray) -> np.ndarray:
                # c0, c1 >= 0 by linear least squares on the relative time error (for starts)
                a = np.column_stack([g, g * finv]) * tscale / t[:, None]
                c, _ = optimize.nnls(a, np.ones_like(t))
                return np.clip(c, 1e-9, 1e3)

            def hyper_c_many(th: np.ndarray, g: np.ndarray | None = None) -> np.ndarray:
                # c0, c1 for each start by linear least squares on the relative time error
                if g is None:
                    g = self.rel_time(th[:, :m], p, freq)
                a = np.stack([g, g * finv], axis=-1) * (tscale / t)[None, :, None]
                ata = a.transpose(0, 2, 1) @ a + 1e-12 * np.eye(2)
                c = np.linalg.solve(ata, a.sum(axis=1)[..., None])[..., 0]
                return np.clip(c, 1e-9, 1e3)

            def resid_many(th: np.ndarray) -> np.ndarray:
                if th.shape[1] == m:           # scoring starts: c0, c1 solved for each start
                    g = self.rel_time(th, p, freq)
                    return y - np.log(g * t1(hyper_c_many(th, g)))
                return y - np.log(self.rel_time(th[:, :m], p, freq) * t1(th[:, m:]))

            def jac_many(th: np.ndarray) -> np.ndarray:
                with np.errstate(all="ignore"):
                    d = self.log_rel_time_and_grad(th[:, :m], p, freq)[1]
                inv = tscale / t1(th[:, m:])
                return np.concatenate([-d, -inv[..., None], -(inv * finv)[..., None]], axis=-1)

            def fun(th: np.ndarray) -> np.ndarray:
                return y - log_g(th) - np.log(t1(th[m:]))
            x_lo, x_hi = np.r_[lo, 1e-9, 1e-9], np.r_[hi, 1e3, 1e3]

            def jac_analytic(th: np.ndarray) -> np.ndarray:
                # r = y - log g - log T1(c): dr/dc = -tscale (1, fscale/F) / T1
                inv = tscale / t1(th[m:])
                return np.column_stack([-dlog_g(th), -inv, -inv * finv])

        jac = jac_analytic if has_grad else _batched_jac(resid_many, x_lo, x_hi)

        with np.errstate(all="ignore"):
            score = np.nansum(resid_many(cand) ** 2, axis=1)
        score[~np.isfinite(score)] = np.inf
        lm = self.solver == "lm" or restricted

        def pick_idx(xs: np.ndarray, sc: np.ndarray, dedupe: bool = False) -> list[int]:
            # the N_POLISH best starts and the best start of every regime; with one free
            # parameter the best point of the scored grid brackets the minimum: one start.
            # dedupe (after the batched steps): a start within SAME_VALLEY of a better one is
            # in the same valley (as in _polish_lm's rounds) and is not polished again
            order: list[int] = []
            for i in np.argsort(sc)[:N_POLISH if n_free > 1 else 1]:
                if not (dedupe and order and sc[i] <= sc[order[-1]] * (1 + SAME_VALLEY)):
                    order.append(int(i))
            labels = self.regimes(xs[:, :m], p, freq)
            for lab in np.unique(labels):
                best_of = int(np.flatnonzero(labels == lab)[np.argmin(sc[labels == lab])])
                if (best_of not in order and np.isfinite(sc[best_of]) and not (
                        dedupe and any(sc[best_of] <= sc[j] * (1 + SAME_VALLEY) for j in order))):
                    order.append(best_of)
            return order

        def pick(xs: np.ndarray, sc: np.ndarray) -> list[np.ndarray]:
            out = []
            for i in pick_idx(xs, sc):
                x0 = xs[i]
                if mode != "per_freq" and x0.size == m:
                    with np.errstate(all="ignore"):
                        x0 = np.r_[x0, hyper_c(self.rel_time(x0[None, :], p, freq)[0])]
                out.append(x0)
            return out

        lam0 = None
        if (lm and n_free > 2 and type(self).log_rel_time_and_grad
                is not SpeedupFamily.log_rel_time_and_grad):
            # the best starts and the best of each regime take their first LM steps together
            # (one vectorised pass per trial step, the same path as a single run); the best of
            # where they lead are polished on from there
            top = list(np.argsort(score)[:N_BATCH])
            labels = self.regimes(cand, p, freq)
            for lab in np.unique(labels):
                best_of = int(np.flatnonzero(labels == lab)[np.argmin(score[labels == lab])])
                if best_of not in top:
                    top.append(best_of)
            top = np.array([i for i in top if np.isfinite(score[i])], dtype=int)
            x0 = cand[top]
            if mode != "per_freq":
                x0 = np.hstack([x0, hyper_c_many(x0)])
            xs, sc, lams = least_squares_box_many(resid_many, jac_many, x0, x_lo, x_hi,
                                                  trials=LM_BATCH_ITERS)
            idx = pick_idx(xs, sc, dedupe=True)
            starts = [xs[i] for i in idx]
            lam0 = [float(lams[i]) for i in idx]
        else:
            starts = pick(cand, score)
        exact = 1e-20 * p.size
        with np.errstate(all="ignore"):
            if lm:
                # compass search only where the model has kinks (memwall's max() and min();
                # with m1 = m2 = 0 neither is active)
                kinks = self.piecewise and not restricted
                found = _polish_lm(fun, jac, starts, x_lo, x_hi, exact,
                                   resid_many if kinks else None, lam0, hopeless)
            else:
                found = _polish_scipy(fun, jac, starts, x_lo, x_hi, exact)
        if not found:
            return None
        x, cost = min(found, key=lambda r: r[1])
        sol = _Solution(mode, x, float(np.sum(fun(x) ** 2)), self._n_params(data, mode, lo, hi),
                        restricted)
        sol.fun = fun
        return sol

    def _build(self, data: "_Data", sol: "_Solution", p_cores: np.ndarray,
               phys: float | None, smt_yield: float) -> "SpeedupFit":
        """The fitted model of a solution: T1 scale, residual sigma, quality."""
        p, freq, t, y = data.p, data.freq, data.t, data.y
        m = len(self.param_names)
        theta = sol.x[:m]
        r = sol.fun(sol.x)
        if sol.mode == "per_freq":
            lv = (y[None, :] - np.log(self.rel_time(theta[None, :], p, freq))) @ data.avg
            t1_levels = np.exp(lv[0])
            if freq is None:
                scale = {"mode": "single", "t1": float(t1_levels[0])}
            else:
                c0, c1 = _hyperbola(data.ufreq, t1_levels)
                scale = {"mode": "per_freq", "freqs": data.ufreq.tolist(),
                         "t1": t1_levels.tolist(), "c0": c0, "c1": c1}
        else:
            fscale, tscale = float(np.median(freq)), float(np.exp(np.mean(y)))
            c = sol.x[m:]
            scale = {"mode": "hyper", "c0": float(tscale * c[0]),
                     "c1": float(tscale * c[1] * fscale), "freqs": [], "t1": []}
        dof = p.size - sol.n_par
        sigma = max(float(np.sqrt(np.sum(r ** 2) / max(dof, 1))), SIGMA_FLOOR)
        if phys is not None:
            scale["phys_cores"], scale["smt_yield"] = float(phys), float(smt_yield)
        if self.restrictions():
            scale["nested"] = bool(sol.restricted)
        if getattr(self, "anchor", True):
            scale["anchors"] = end_anchors(p_cores, freq, r)
        fitted = SpeedupFit(self, theta, scale, sigma, max(dof, 1))
        fitted.cost = float(np.sum(r ** 2))
        fitted.aicc = sol.aicc
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
        self.aicc = float("nan")
        self.name = family.name
        self.params = family.derived(self.theta)
        self.params["log_sigma"] = sigma
        if "phys_cores" in scale:
            self.params["phys_cores"] = float(scale["phys_cores"])
            self.params["smt_yield"] = float(scale["smt_yield"])
        if "nested" in scale:
            # 1: the nested restriction (memwall: Amdahl) won the AICc test
            self.params["nested"] = float(scale["nested"])
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

    def log_rel_time_grad(self, theta, p, freq):
        return self.log_rel_time_and_grad(theta, p, freq)[1]

    def log_rel_time_and_grad(self, theta, p, freq):
        # log g of eq. 5 inverted and d log g / d f; theta (1,) or (K, 1)
        f = np.asarray(theta, float)[..., 0, None]
        g = (1.0 - f) + f / p
        return np.log(g), ((1.0 / p - 1.0) / g)[..., None]

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

    def log_rel_time_grad(self, theta, p, freq):
        return self.log_rel_time_and_grad(theta, p, freq)[1]

    def log_rel_time_and_grad(self, theta, p, freq):
        # log g and d log g / d (a, b), g = (1 + a (p - 1) + b p (p - 1)) / p; theta (2,) or (K, 2)
        theta = np.asarray(theta, float)
        a, b = theta[..., 0, None], theta[..., 1, None]
        den = 1.0 + a * (p - 1.0) + b * p * (p - 1.0)
        return np.log(den / p), np.stack([(p - 1.0) / den, p * (p - 1.0) / den], axis=-1)

    def candidates(self, rng):
        a = np.linspace(0.0, 1.0, 21)
        b = np.r_[0.0, np.geomspace(1e-6, 1.0, 13)]
        aa, bb = np.meshgrid(a, b)
        return np.column_stack([aa.ravel(), bb.ravel()])

    def derived(self, theta):
        a, b = map(float, theta)
        peak = float(np.sqrt((1 - a) / b)) if b > 0 else float("inf")
        return {"contention": a, "coherency": b, "peak_cores": peak}
