"""A fitted speedup model, t = T1(F) * g(p, F; theta), and how one is built from a solution.

T1(F) (choice documented in docs/models.md): with one free level per training frequency
(``per_freq``) the levels are kept and c0 + c1/F, fitted (non-negative) to them, serves the
frequencies not in training (with one training frequency T1 ~ 1/F, CPU-bound assumption 3);
with ``hyper`` c0 + c1/F was fitted jointly with theta.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import optimize, stats

from .anchors import anchor_correction, end_anchors
from .base import FittedModel, Observations, Prediction, fit_quality
from .smt import effective_cores

if TYPE_CHECKING:
    from .fit_data import FitData
    from .shape import SpeedupShape
    from .solve import Solution

LEVEL = 0.9          # interval coverage
SIGMA_FLOOR = 0.005  # 0.5 % in log time: an exact fit does not mean zero uncertainty


def hyperbola(freqs: np.ndarray, levels: np.ndarray) -> tuple[float, float]:
    """Non-negative c0, c1 with c0 + c1/F closest to T1 at ``freqs`` in relative error."""
    if freqs.size < 2:
        return 0.0, float(levels[0] * freqs[0])          # T1 ~ 1/F (assumption 3)
    a = np.column_stack([np.ones_like(freqs), 1.0 / freqs]) / levels[:, None]
    (c0, c1), _ = optimize.nnls(a, np.ones_like(freqs))
    if c0 + c1 <= 0:
        return float(np.mean(levels)), 0.0
    return float(c0), float(c1)


def build_fit(family: "SpeedupShape", data: "FitData", sol: "Solution", p_cores: np.ndarray,
              phys: float | None, smt_yield: float) -> "SpeedupFit":
    """The fitted model of a solution: T1 scale, residual sigma, quality. ``p_cores``: the
    measured core counts (``data.p`` are the effective ones)."""
    p, freq, t, y = data.p, data.freq, data.t, data.y
    m = len(family.param_names)
    theta = sol.x[:m]
    r = sol.fun(sol.x)
    if sol.mode == "per_freq":
        lv = (y[None, :] - np.log(family.rel_time(theta[None, :], p, freq))) @ data.avg
        t1_levels = np.exp(lv[0])
        if freq is None:
            scale = {"mode": "single", "t1": float(t1_levels[0])}
        else:
            c0, c1 = hyperbola(data.ufreq, t1_levels)
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
    if family.restrictions():
        scale["nested"] = bool(sol.restricted)
    if getattr(family, "anchor", True):
        scale["anchors"] = end_anchors(p_cores, freq, r)
    fitted = SpeedupFit(family, theta, scale, sigma, max(dof, 1))
    fitted.cost = float(np.sum(r ** 2))
    fitted.aicc = sol.aicc
    fitted.quality = fit_quality(t, fitted.predict_time(p_cores, freq))
    # how well the speedup curve itself fits (before the end-point anchoring)
    fitted.quality["shape_mape"] = float(100 * np.mean(np.abs(np.expm1(-r))))
    return fitted


class SpeedupFit(FittedModel):
    """t = T1(F) * g(p, F; theta) with a log-normal residual interval."""

    def __init__(self, family: "SpeedupShape", theta: np.ndarray, scale: dict[str, Any],
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

