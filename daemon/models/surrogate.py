"""Physically shaped surrogate ensemble of time and power over cores x frequency (pure), from
which the sampler (daemon/sampling.py, daemon/acquisition.py) judges unmeasured configurations.

Time and power are each fitted by a few small physical families (idea (a) of issue 17):

time (p cores, x = f / f_max of the grid)
  * ``amdahl-pow``: t = A * (s + (1-s)/p) * x^-a          (Amdahl, frequency power law)
  * ``amdahl-mem``: t = (s + (1-s)/p) * (B/x + C)          (compute scales with 1/f, memory not)
  * ``usl-pow``:    t = A * (s + (1-s)/p + k*(p-1)) * x^-a (USL contention)
power
  * ``pow``:    P = Ps + p*c*x^b                  (static + dynamic, V^2 f folded into x^b)
  * ``cubic``:  P = Ps + p*(c1*x + c3*x^3)        (V linear in f: P_dyn ~ f + f^3)
  * ``uncore``: P = Ps + (p + u)*c*x^b            (cluster power that does not scale with p)

Without a frequency axis the x terms drop out (and ``amdahl-mem`` / ``cubic`` with them; a
``pow-p`` family P = Ps + c*p^g takes their place). Each family is fitted by bounded least
squares on log values (relative errors) wherever it has no more parameters than points.

The ensemble is every (time family, power family) pair, weighted by the Gaussian likelihood
ratio of its log residuals. Each member predicts log t and log P; the uncertainty of a
configuration is the spread of the members plus a noise term that grows with the distance to
the nearest measured configuration (model error is largest far from the data). Measured
configurations carry their measured values with no uncertainty.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize

# Prior model error (relative, 1 sigma) and its weight in pseudo degrees of freedom: a family
# that fits its points exactly tells nothing about its error, so the prior dominates until
# residual degrees of freedom accumulate. The error grows with the distance (in the grid
# scaled to [0, 1]) to the nearest measured point.
MODEL_ERROR = 0.05
PRIOR_DOF = 2.0
DISTANCE_GROWTH = 2.0


@dataclass
class Family:
    name: str
    k: int  # number of parameters
    needs_freq: bool
    x0: tuple
    lo: tuple
    hi: tuple

    def __call__(self, th, p, x):
        return _FORMS[self.name](th, p, x)


def _amdahl(s, p):
    return s + (1.0 - s) / p


_FORMS = {
    "amdahl-pow": lambda th, p, x: np.exp(th[0]) * _amdahl(th[1], p) * x ** -th[2],
    "amdahl": lambda th, p, x: np.exp(th[0]) * _amdahl(th[1], p),
    "amdahl-mem": lambda th, p, x: _amdahl(th[0], p) * (th[1] / x + th[2]),
    "usl-pow": lambda th, p, x: (np.exp(th[0]) * (_amdahl(th[1], p) + th[3] * (p - 1))
                                 * x ** -th[2]),
    "usl": lambda th, p, x: np.exp(th[0]) * (_amdahl(th[1], p) + th[2] * (p - 1)),
    "pow": lambda th, p, x: th[0] + p * th[1] * x ** th[2],
    "cubic": lambda th, p, x: th[0] + p * (th[1] * x + th[2] * x ** 3),
    "uncore": lambda th, p, x: th[0] + (p + th[3]) * th[1] * x ** th[2],
    "linear": lambda th, p, x: th[0] + p * th[1],
    "pow-p": lambda th, p, x: th[0] + th[1] * p ** th[2],
}

TIME_FAMILIES = (
    Family("amdahl-pow", 3, True, (0.0, 0.1, 0.8), (-50, 0, 0), (50, 1, 2)),
    Family("amdahl-mem", 3, True, (0.1, 1.0, 0.1), (0, 0, 0), (1, np.inf, np.inf)),
    Family("usl-pow", 4, True, (0.0, 0.1, 0.8, 0.001), (-50, 0, 0, 0), (50, 1, 2, 0.5)),
    Family("amdahl", 2, False, (0.0, 0.1), (-50, 0), (50, 1)),
    Family("usl", 3, False, (0.0, 0.1, 0.001), (-50, 0, 0), (50, 1, 0.5)),
)
POWER_FAMILIES = (
    Family("pow", 3, True, (0.5, 0.5, 2.0), (0, 0, 0), (np.inf, np.inf, 4)),
    Family("cubic", 3, True, (0.5, 0.3, 0.3), (0, 0, 0), (np.inf, np.inf, np.inf)),
    Family("uncore", 4, True, (0.5, 0.5, 2.0, 0.5), (0, 0, 0, 0), (np.inf, np.inf, 4, 64)),
    Family("linear", 2, False, (0.5, 0.5), (0, 0), (np.inf, np.inf)),
    Family("pow-p", 3, False, (0.5, 0.5, 1.0), (0, 0, 0.3), (np.inf, np.inf, 1.5)),
)


@dataclass
class Fit:
    family: Family
    theta: np.ndarray
    rmse: float  # of the log residuals


def fit_families(families, p, x, y, has_freq: bool) -> list[Fit]:
    """Every applicable family fitted to ``y`` (> 0) by bounded least squares in log space."""
    ly = np.log(y)
    scale = float(np.exp(np.median(ly)))
    out = []
    for fam in families:
        if fam.needs_freq != has_freq or fam.k > y.size:
            continue
        x0 = np.clip(_start(fam, scale), fam.lo, [h if np.isfinite(h) else 1e30 for h in fam.hi])

        def res(th, fam=fam):
            v = fam(th, p, x)
            return np.log(np.maximum(v, 1e-300)) - ly
        try:
            r = optimize.least_squares(res, x0, bounds=(fam.lo, fam.hi), method="trf",
                                       max_nfev=200 * fam.k)
        except (ValueError, FloatingPointError):
            continue
        if np.all(np.isfinite(r.fun)):
            out.append(Fit(fam, r.x, float(np.sqrt(np.mean(r.fun ** 2)))))
    return out


def _start(fam: Family, scale: float) -> np.ndarray:
    th = np.array(fam.x0, float)
    if fam.name in ("amdahl-pow", "amdahl", "usl-pow", "usl"):
        th[0] = np.log(scale)
    elif fam.name == "amdahl-mem":
        th[1], th[2] = 0.8 * scale, 0.2 * scale
    else:  # power families: half static, half dynamic at the median point
        th[0], th[1] = 0.3 * scale, 0.3 * scale
    return th


def model_error(fits: list[Fit], n: int) -> float:
    """Posterior relative error of the best family: residual variance pooled with the prior
    (scaled inverse chi-square, PRIOR_DOF pseudo degrees of freedom at MODEL_ERROR)."""
    best = min(fits, key=lambda f: f.rmse)
    dof = max(n - best.family.k, 0)
    ss = n * best.rmse ** 2  # sum of squared log residuals
    return float(np.sqrt((ss + PRIOR_DOF * MODEL_ERROR ** 2) / (dof + PRIOR_DOF)))


def _weights(fits: list[Fit], n: int) -> np.ndarray:
    """Likelihood ratio of each family against the best, with a common noise level."""
    r = np.array([f.rmse for f in fits])
    s0 = max(r.min(), MODEL_ERROR)
    w = np.exp(-0.5 * n * (r ** 2 - r.min() ** 2) / s0 ** 2)
    return w / w.sum()


@dataclass
class Ensemble:
    """Member log predictions (members x grid), weights and per-point noise (1 sigma)."""
    log_t: np.ndarray
    log_p: np.ndarray | None
    weight: np.ndarray
    sigma_t: np.ndarray
    sigma_p: np.ndarray | None
    time_names: list[str]
    power_names: list[str]


def build_ensemble(cores, x, idx, time_s, power_w, has_freq: bool, unit: np.ndarray
                   ) -> Ensemble:
    """Fit the families to the measured points ``idx`` and predict every grid point.

    ValueError when no time family (or, with power given, no power family) can be fitted."""
    p_m, x_m = cores[idx], x[idx]
    tf = fit_families(TIME_FAMILIES, p_m, x_m, time_s, has_freq)
    if not tf:
        raise ValueError(f"no time family fits {idx.size} measurement(s)")
    pf = []
    if power_w is not None:
        pf = fit_families(POWER_FAMILIES, p_m, x_m, power_w, has_freq)
        if not pf:
            raise ValueError(f"no power family fits {idx.size} measurement(s)")
    d = np.min(np.linalg.norm(unit[:, None, :] - unit[None, idx, :], axis=2), axis=1)
    grow = 1.0 + DISTANCE_GROWTH * d

    def members(fits):
        lv = np.log(np.maximum(np.array([f.family(f.theta, cores, x) for f in fits]), 1e-300))
        sig = model_error(fits, idx.size) * grow
        return lv, _weights(fits, idx.size), sig

    lt, wt, st = members(tf)
    lt[:, idx] = np.log(time_s)
    st[idx] = 0.0
    if not pf:
        return Ensemble(lt, None, wt, st, None, [f.family.name for f in tf], [])
    lp, wp, sp = members(pf)
    lp[:, idx] = np.log(power_w)
    sp[idx] = 0.0
    # every (time, power) pair is a member
    lt2 = np.repeat(lt, len(pf), axis=0)
    lp2 = np.tile(lp, (len(tf), 1))
    w = np.outer(wt, wp).ravel()
    return Ensemble(lt2, lp2, w, st, sp, [f.family.name for f in tf],
                    [f.family.name for f in pf])
