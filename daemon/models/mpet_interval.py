"""The interval of an MPET prediction (not in seed 000). Pure.

Calibrated (``calibrated_band``): t(n) exp(+-e), e the largest log error of the same prediction
made for each other workload on the platform (split conformal; mpet_predict.calibrate and
mpet_scenarios.scalability_band gather the errors). Else the candidates' band
(``candidates_band``): each single candidate's prediction, min..max around the weighted one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .mpet_curve import time_curve
from .mpet_reconstruct import reconstruct
from .mpet_validate import VALIDATION_FLOOR

# Beside a single candidate the spread of candidates says nothing: the interval is at least
# [t/f, t f] with this f (the leave-one-out full-prediction errors' 80 % percentile is 50-75 %
# on the two datasets, docs/mpet.md).
SINGLE_CANDIDATE_FACTOR = 2.0
# t1-validated: the t(1) interval, in standard deviations of the validated log error (about
# 95 % for a normal error)
SIGMAS = 2.0
# the fewest of the target's other workloads a calibrated interval rests on (level 2/3)
MIN_CALIBRATION = 2


def calibrated_band(t, errors: list[float]) -> tuple[list[float], list[float], float] | None:
    """(lower, upper, level): t exp(+-e), e = the largest finite one of ``errors``, at least
    VALIDATION_FLOOR (a suite whose transfers all held exactly says nothing finer than the
    noise of one run); level (m - j)/(m + 1), j of the m errors infinite (a prediction that
    failed counts as outside: split conformal with e the (m - j)-th smallest). None with fewer
    than MIN_CALIBRATION finite errors."""
    finite = [e for e in errors if math.isfinite(e)]
    if len(finite) < MIN_CALIBRATION:
        return None
    f = math.exp(max(max(finite), VALIDATION_FLOOR))
    return ([float(x) / f for x in t], [float(x) * f for x in t],
            len(finite) / (len(errors) + 1))


def candidates_band(pred: Any, rows: dict, t1_sel: Any, sc_sel: Any, topo: dict,
                    nsa: np.ndarray) -> None:
    """Fill pred.lower/upper: each single candidate's t(1) times each single candidate's
    curve shape, around the weighted prediction; widened where one usable candidate is all
    there is. A candidate eq. 22 gives no weight (k > 0 zeroes the farthest) takes no part in
    the prediction, nor in its band, unless no usable candidate has weight (then
    ``reconstruct`` averages them all, and so does the band)."""
    one = np.ones(1)
    t1s = [float(reconstruct(*(x[i: i + 1] for x in rows["t1"]), one, t1_sel.max_factor)[0])
           for i in range(len(pred.t1_candidates))]
    for c, v in zip(pred.t1_candidates, t1s):
        c.usable = math.isfinite(v) and v > 0
    t1s = [v for c, v in zip(pred.t1_candidates, t1s)
           if c.usable and takes_part(c, pred.t1_candidates)]
    # a listed candidate without a usable estimate (a profile lacking t(1), an invalid curve)
    # adds nothing: what counts is how many estimates the prediction rests on
    usable_t1 = len(t1s)
    t1s = t1s or [pred.t1]
    var = [(c.weight, c.var) for c in pred.t1_candidates if math.isfinite(c.var)]
    if t1_sel.basis == "t1-validated" and var:
        # validated transfers measured their own error (log t(1), mpet_validate.validate_t1):
        # the t(1) band is SIGMAS standard deviations of it (the candidates' weighted mean
        # variance) instead of the candidates' min..max, which says nothing about how wrong
        # they are
        sd = math.sqrt(sum(w * v for w, v in var) / sum(w for w, _ in var))
        t1s = [pred.t1 * math.exp(-SIGMAS * sd), pred.t1 * math.exp(SIGMAS * sd)]
    base = np.asarray(pred.t) / pred.t1
    curves = []
    for i in range(len(pred.sc_candidates)):
        if sc_sel.space == "curve":
            q = reconstruct(*(x[i: i + 1] for x in rows["q"]), one, sc_sel.max_factor)
            shape = q / nsa
        else:
            sc = reconstruct(*(x[i: i + 1] for x in rows["sc"]), one, sc_sel.max_factor)
            sc = np.where(np.isfinite(sc), sc, pred.sc)
            shape = time_curve(1.0, sc, nsa, topo.get("n_nu"), topo.get("n_ht"))
        pred.sc_candidates[i].usable = bool(np.all(np.isfinite(shape)) and np.all(shape > 0))
        curves.append(shape)
    kept = [x for c, x in zip(pred.sc_candidates, curves)
            if c.usable and takes_part(c, pred.sc_candidates)]
    usable_sc = len(kept)
    shapes = np.vstack([base, *kept])
    t = np.asarray(pred.t)
    lo = np.minimum(shapes.min(axis=0) * min(t1s), t)
    hi = np.maximum(shapes.max(axis=0) * max(t1s), t)
    # one usable estimate (however many candidates are listed) has no spread: min..max would
    # be the point itself, an interval that claims certainty
    pred.single_candidate = usable_t1 < 2 or usable_sc < 2
    if pred.single_candidate:
        lo = np.minimum(lo, t / SINGLE_CANDIDATE_FACTOR)
        hi = np.maximum(hi, t * SINGLE_CANDIDATE_FACTOR)
    pred.lower = [float(x) for x in lo]
    pred.upper = [float(x) for x in hi]


def takes_part(c: Any, cands: list) -> bool:
    """Whether usable candidate ``c`` takes part in the weighted prediction: it has weight, or
    no usable candidate has (``reconstruct`` then averages them unweighted)."""
    return c.weight > 0 or not any(x.usable and x.weight > 0 for x in cands)
