"""Persistence baseline ("hold"): interpolate the measurements, hold the last value outside.

Within the measured core counts of a frequency, log time is interpolated linearly in log
cores (the median over repetitions at each core count); beyond the largest (smallest) core
count the time stays at the value measured there. A frequency not in training: with two or more
training frequencies, the times of that core count at each follow t = a + b / F (``dvfs_law``:
a part bound by the core clock and one that is not, a, b >= 0); with one, the curve is scaled
by F_train / F (CPU-bound assumption 3 of seed 003: t_c ~ 1/F). A frequency measured at one
core count only (a recommendation's verification at a clock no sweep measured) has no curve
of its own to hold: its times follow the other frequencies' curves, as an unseen frequency's
do, scaled to pass through its measured point (held flat, its one point became its time at
every core count: 0.038 s at one core where the neighbouring clocks measured 0.14 s).

This is the zero-order forecast of time-series practice and what the tree learners of the peer
table effectively do outside their data (relearn: gradient boosting = last value). It has no
shape parameter, so the choice (select.py) falls back to it when validation cannot rank the
fitted models (fewer than MIN_HELD_OUT held-out points): extrapolating a 3-point curve with a
fitted shape is a guess, holding the last measurement is a bounded one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from .base import FittedModel, Modeler, Observations, Prediction, fit_quality
from .fit_data import clean
from .speedup_fit import LEVEL

SIGMA_FLOOR = 0.05   # 5 % in log time: holding a value says little about what lies beyond


def dvfs_law(freqs: np.ndarray, times: np.ndarray, f: float) -> float:
    """Time at frequency ``f`` from the times at ``freqs`` (one core count) by the two-part
    law t = a + b / F (a: the part that does not scale with the core clock, memory stalls;
    b / F: the part that does), least squares with a, b >= 0; a = 0 is pure 1/F scaling."""
    x = 1.0 / np.asarray(freqs, float)
    t = np.asarray(times, float)
    b, a = np.polyfit(x, t, 1)
    if a < 0:              # faster than 1/F: the clock-bound part alone
        a, b = 0.0, float(np.dot(x, t) / np.dot(x, x))
    elif b < 0:            # slower at a higher clock: nothing scales, hold the mean
        a, b = float(np.mean(t)), 0.0
    return float(a + b / f)


class HoldModeler(Modeler):
    """Piecewise log-log interpolation per frequency, constant outside the measured cores."""
    name = "hold"

    def fit(self, obs: Observations) -> "HoldFit":
        p, freq, t = clean(obs)
        fq = np.full(p.size, np.nan) if freq is None else freq
        curves: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        keys = np.zeros(p.size) if freq is None else fq
        for key in np.unique(keys):
            sel = keys == key
            u = np.unique(p[sel])
            lt = np.array([np.median(np.log(t[sel][p[sel] == c])) for c in u])
            curves[float(key)] = (np.log(u), lt)
        fit = HoldFit(curves, freq is not None)
        resid = np.log(t) - np.log(fit.predict_time(p, fq))
        fit.sigma = max(float(np.sqrt(np.mean(resid ** 2))), SIGMA_FLOOR)
        fit.dof = max(p.size - sum(c[0].size for c in curves.values()), 1)
        fit.quality = fit_quality(t, fit.predict_time(p, fq))
        return fit

    def from_state(self, state: dict[str, Any]) -> "HoldFit":
        """A fitted model back from ``HoldFit.to_state()`` (for saved fits)."""
        curves = {float(f): (np.asarray(lx, float), np.asarray(ly, float))
                  for f, lx, ly in state["curves"]}
        fit = HoldFit(curves, bool(state["has_freq"]))
        fit.sigma, fit.dof = float(state["sigma"]), int(state["dof"])
        fit.quality = dict(state.get("quality", {}))
        return fit


class HoldFit(FittedModel):
    name = "hold"

    def __init__(self, curves: dict[float, tuple[np.ndarray, np.ndarray]], has_freq: bool):
        self.curves, self.has_freq = curves, has_freq
        self.freqs = np.array(sorted(curves))
        self.sigma, self.dof = SIGMA_FLOOR, 1
        last = {f: float(np.exp(c[0][-1])) for f, c in curves.items()}
        self.params = {"max_cores": max(last.values()), "n_curves": float(len(curves))}
        self.quality = {}

    def _across(self, c: float, f: float) -> float:
        """Time at ``c`` cores and frequency ``f`` from the curves measured at two or more core
        counts: the two-part law over their frequencies, or the one curve scaled by 1/F."""
        shaped = [g for g in self.freqs if self.curves[float(g)][0].size > 1]
        at = np.array([np.exp(np.interp(np.log(c), *self.curves[float(g)])) for g in shaped])
        if len(shaped) == 1:
            return float(at[0] * shaped[0] / f)
        return dvfs_law(np.array(shaped), at, f)

    def _on_curve(self, c: float, g: float) -> float:
        """Time at ``c`` cores on the curve of training frequency ``g``; one measured at a
        single core count takes the shape of the others' (:meth:`_across`) through its point."""
        lx, ly = self.curves[float(g)]
        if lx.size > 1 or not any(self.curves[float(h)][0].size > 1 for h in self.freqs):
            return float(np.exp(np.interp(np.log(c), lx, ly)))
        c0 = float(np.exp(lx[0]))
        return self._across(c, g) * float(np.exp(ly[0])) / self._across(c0, g)

    def predict_time(self, p: Any, freq: Any) -> np.ndarray:
        p = np.maximum(np.asarray(p, float), 1.0)
        out = np.empty(p.size)
        if not self.has_freq:
            lx, ly = self.curves[0.0]
            return np.exp(np.interp(np.log(p), lx, ly))
        fq = np.broadcast_to(np.asarray(np.nan if freq is None else freq, float), p.shape)
        fq = np.where(np.isfinite(fq) & (fq > 0), fq, self.freqs.max())
        for i, (c, f) in enumerate(zip(p, fq)):
            known = np.isclose(self.freqs, f, rtol=1e-9, atol=0)
            if known.any() or self.freqs.size < 2:
                near = self.freqs[np.argmin(np.abs(np.log(self.freqs) - np.log(f)))]
                out[i] = self._on_curve(c, near) * near / f
                continue
            at = np.array([self._on_curve(c, g) for g in self.freqs])
            out[i] = dvfs_law(self.freqs, at, f)
        return out

    def to_state(self) -> dict[str, Any]:
        """JSON-ready state that ``HoldModeler.from_state`` turns back into this model."""
        return {"curves": [[f, c[0].tolist(), c[1].tolist()] for f, c in self.curves.items()],
                "has_freq": self.has_freq, "sigma": self.sigma, "dof": self.dof,
                "quality": dict(self.quality), "options": {}}

    def predict(self, query: Observations) -> Prediction:
        value = self.predict_time(query.cores, query.freq_mhz)
        w = np.exp(float(stats.t.ppf(0.5 + LEVEL / 2, self.dof)) * self.sigma)
        return Prediction(value=value, lower=value / w, upper=value * w, level=LEVEL)
