"""Which variants of a speedup model are fitted, and the choice among them by AICc.

A variant is a T1 parameterisation (one level per training frequency, or c0 + c1/F) of the
full model or of one of its nested restrictions (``SpeedupShape.restrictions``, e.g. Amdahl
inside memwall). Without restrictions one variant is fitted, its T1 mode by ``auto_mode``;
with them every T1 parameterisation of the full model and of each restriction competes by
AICc (``select_aicc``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .solve import Solution, n_params, solve
from .speedup_fit import SIGMA_FLOOR

if TYPE_CHECKING:
    from .fit_data import FitData
    from .shape import SpeedupShape

HOPELESS = 2.0       # an AICc variant whose cost after the first polish stage is this many times
                     # the cost it needs to win stops there (further rounds gain a few %)

Variant = tuple[str, np.ndarray, np.ndarray, np.ndarray]   # T1 mode, lower, upper, starts


def auto_mode(family: "SpeedupShape", data: "FitData", n_theta: int | None = None) -> str:
    """T1 parameterisation of a single fit with ``n_theta`` free shape parameters (default:
    all of them): ``t1_mode``, or for "auto" one level per frequency unless that leaves no
    residual (then c0 + c1/F, which saves parameters only with more than two frequencies)."""
    m = len(family.param_names) if n_theta is None else n_theta
    nlev = data.ufreq.size
    mode = family.t1_mode
    if mode == "auto":
        mode = ("hyper" if (data.freq is not None and nlev > 2 and data.p.size < nlev + m + 1)
                else "per_freq")
    if mode == "hyper" and data.freq is None:
        mode = "per_freq"
    return mode


def full_variant(family: "SpeedupShape", data: "FitData") -> Variant:
    """The full model with the T1 mode of ``auto_mode``."""
    lo, hi = np.array(family.lower, float), np.array(family.upper, float)
    return (auto_mode(family, data), lo, hi, family.candidates(np.random.default_rng(0)))


def variants(family: "SpeedupShape", data: "FitData") -> list[Variant]:
    """(T1 mode, lower, upper, starts) of each model to fit. Without nested sub-models:
    ``full_variant``. With them (``restrictions``): every T1 parameterisation (levels;
    c0 + c1/F with > 2 frequencies) times {full, each restriction}, ranked by AICc in
    ``select_aicc``."""
    subs = family.restrictions()
    if not subs:
        return [full_variant(family, data)]
    full = full_variant(family, data)[1:]
    if family.t1_mode != "auto":
        modes = [auto_mode(family, data)]
    else:
        modes = ["per_freq"]
        if data.freq is not None and data.ufreq.size > 2:
            modes.append("hyper")
    return [(mode, *v) for mode in modes for v in (full, *subs)]


def as_standalone(family: "SpeedupShape", data: "FitData", won: Solution,
                  vs: list[Variant]) -> Solution:
    """A restriction that won the AICc test, refitted with the T1 rule it has as a model
    of its own (``auto_mode`` with its free parameter count): the test decides whether
    the extra parameters are supported, not how T1 is shaped; the restricted model
    (memwall: Amdahl) is then exactly the fit the simpler model gives on its own."""
    n_theta = won.n_par - (2 if won.mode == "hyper" else data.ufreq.size)
    mode = auto_mode(family, data, n_theta)
    if mode == won.mode:
        return won
    for v in vs:
        if v[0] == mode and np.any(v[1] >= v[2]):
            sol = solve(family, data, *v)
            if sol is not None:
                sol.aicc = won.aicc
                return sol
    return won


def select_aicc(family: "SpeedupShape", data: "FitData",
                vs: list[Variant]) -> Solution | None:
    """The variant with the lowest AICc (Hurvich & Tsai 1989) of the log-time residuals,
    AICc = n ln(s2) + 2K + 2K(K+1)/(n-K-1), K = free theta + T1 parameters + 1 (the
    variance), s2 = RSS/n floored at SIGMA_FLOOR^2 (an exact fit is not evidence beyond
    the measurement noise). n <= K + 1 leaves AICc undefined: such a variant cannot win.
    Where no variant has an AICc the test does not apply and the full model is fitted with
    ``auto_mode`` as without restrictions. Ties go to fewer parameters. A variant whose
    AICc could not win even with s2 at the floor is not fitted.

    Order: the restrictions (cheap), then the full variants from the most flexible one
    (the per-frequency levels win most often where they have an AICc): a full variant
    fitted later that cannot come close to the best AICc so far stops polishing early
    (``polish_lm``'s ``hopeless``: its cost is HOPELESS times what it needs to win)."""
    n = data.p.size

    def penalty(k: int) -> float:
        return 2 * k + 2 * k * (k + 1) / (n - k - 1) if n - k - 1 > 0 else np.inf

    pens = [penalty(n_params(data, v[0], v[1], v[2]) + 1) for v in vs]
    if not any(np.isfinite(pens)):
        return solve(family, data, *full_variant(family, data))
    restricted = [bool(np.any(v[1] >= v[2])) for v in vs]
    order = sorted(range(len(vs)),
                   key=lambda i: (not restricted[i], pens[i] if restricted[i] else -pens[i]))
    best, best_aicc, best_pen = None, np.inf, np.inf
    floor = n * np.log(SIGMA_FLOOR ** 2)
    for i in order:
        pen = pens[i]
        if not np.isfinite(pen) or floor + pen >= best_aicc:
            continue
        # the cost at which this variant would tie with the best so far
        need = n * np.exp((best_aicc - pen) / n) if np.isfinite(best_aicc) else np.inf
        sol = solve(family, data, *vs[i], hopeless=HOPELESS * need)
        if sol is None:
            continue
        aicc = n * np.log(max(sol.cost / n, SIGMA_FLOOR ** 2)) + pen
        if (aicc, pen) < (best_aicc, best_pen):
            best, best_aicc, best_pen = sol, aicc, pen
    if best is not None:
        best.aicc = best_aicc
    return best


def best_variant(family: "SpeedupShape", data: "FitData") -> Solution | None:
    """The fit of the one variant, or the AICc choice among several (a restriction that won
    refitted as a model of its own)."""
    vs = variants(family, data)
    if len(vs) == 1:
        return solve(family, data, *vs[0])
    best = select_aicc(family, data, vs)
    if best is not None and best.restricted:
        best = as_standalone(family, data, best, vs)
    return best
