"""A best guess from one or two measurements: the speedup curves of the platform's other
workloads as a prior (pure; no I/O).

With one measured core count no speedup model can be fitted (every family needs two), yet
a user still needs an estimate. The other groups measured on the same platform say how time
changes between core counts there: for each, the ratio t_g(p) / t_g(p_m) between the query's
core count p and the measured one p_m (log time interpolated linearly in log cores, the last
value held outside the group's range, as in hold.py). The prediction is the measured time
times the median ratio; the interval spans the ``level`` quantiles of the ratios across the
workloads (at least ``MIN_HALF`` each side in log time), so it is as wide as the platform's
workloads disagree. A query at another frequency scales by F_m / F (CPU-bound assumption).
With two measured core counts, each anchors its own prediction and the nearer one (in log
cores) is used. The fit is flagged: ``quality["prior_based"] = 1``, name "prior".

The caller gathers the other groups' observations: ``opptune fit`` takes the CSV's other
groups of the same platform, the daemon the store's (daemon/recommender.py).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import FittedModel, Modeler, NotEnoughData, Observations, Prediction, fit_quality
from .speedup_fit import LEVEL

MIN_GROUPS = 2     # fewer other workloads than this: no prior
MIN_HALF = 0.10    # 10 % in log time at least: a borrowed curve is never a measurement


def _curve(obs: Observations) -> tuple[np.ndarray, np.ndarray] | None:
    """(log cores, median log time) of a group at its most measured frequency; None when it
    has fewer than 2 core counts."""
    ok = np.isfinite(obs.time_s) & (obs.time_s > 0) & np.isfinite(obs.cores) & (obs.cores >= 1)
    if obs.freq_mhz is not None and np.isfinite(obs.freq_mhz[ok]).any():
        f = np.where(np.isfinite(obs.freq_mhz), obs.freq_mhz, -1.0)
        vals, counts = np.unique(f[ok], return_counts=True)
        ok &= f == vals[np.argmax(counts)]
    p, t = obs.cores[ok], obs.time_s[ok]
    u = np.unique(p)
    if u.size < 2:
        return None
    return np.log(u), np.array([np.median(np.log(t[p == c])) for c in u])


class PriorFit(FittedModel):
    """Measured time(s) of one group carried to other core counts by the platform's curves."""
    name = "prior"

    def __init__(self, anchors: Observations, curves: list[tuple[np.ndarray, np.ndarray]],
                 level: float = LEVEL) -> None:
        self.anchors, self.curves, self.level = anchors, curves, level
        self.params = {"n_groups": float(len(curves)), "n_measured": float(len(anchors))}
        self.quality = {**fit_quality(anchors.time_s, self.predict(anchors).value),
                        "prior_based": 1.0, "n_groups": float(len(curves))}

    def predict(self, query: Observations) -> Prediction:
        qp = np.maximum(np.asarray(query.cores, float), 1.0)
        qf = (np.full(qp.size, np.nan) if query.freq_mhz is None
              else np.asarray(query.freq_mhz, float))
        a = self.anchors
        la = np.log(a.cores)
        value, lower, upper = (np.empty(qp.size) for _ in range(3))
        for i, (p, f) in enumerate(zip(qp, qf)):
            j = int(np.argmin(np.abs(la - np.log(p))))          # nearest measured core count
            ratios = np.array([np.interp(np.log(p), lx, ly) - np.interp(la[j], lx, ly)
                               for lx, ly in self.curves])
            base = np.log(a.time_s[j])
            fa = np.nan if a.freq_mhz is None else a.freq_mhz[j]
            if np.isfinite(f) and f > 0 and np.isfinite(fa) and fa > 0:
                base += np.log(fa / f)
            lo, mid, hi = np.quantile(ratios, [(1 - self.level) / 2, 0.5, (1 + self.level) / 2])
            value[i] = np.exp(base + mid)
            lower[i] = np.exp(base + min(lo, mid - MIN_HALF))
            upper[i] = np.exp(base + max(hi, mid + MIN_HALF))
        return Prediction(value=value, lower=lower, upper=upper, level=self.level)

    def to_state(self) -> dict:
        """JSON-ready state that ``PriorModeler.from_state`` turns back into this fit."""
        a = self.anchors
        return {"cores": a.cores.tolist(), "time_s": a.time_s.tolist(),
                "freq_mhz": None if a.freq_mhz is None else a.freq_mhz.tolist(),
                "curves": [[lx.tolist(), ly.tolist()] for lx, ly in self.curves],
                "level": self.level}


class PriorModeler(Modeler):
    """Reloads saved prior-based fits; fitting one needs the other workloads (:func:`fit_prior`),
    so it is never a candidate of a model choice."""
    name = "prior"

    def applicable(self, obs: Observations) -> str | None:
        return "a prior-based prediction is made from other workloads' curves (fit_prior)"

    def fit(self, obs: Observations) -> PriorFit:
        raise NotEnoughData(self.applicable(obs))

    def from_state(self, state: dict) -> PriorFit:
        anchors = Observations(cores=state["cores"], time_s=state["time_s"],
                               freq_mhz=state.get("freq_mhz"))
        curves = [(np.asarray(lx, float), np.asarray(ly, float)) for lx, ly in state["curves"]]
        return PriorFit(anchors, curves, float(state.get("level", LEVEL)))


def fit_prior(measured: Observations, others: Sequence[Observations]) -> PriorFit:
    """The prior-based prediction of a group with one or two measured core counts from the
    ``others`` (the other workloads' observations on the same platform); NotEnoughData names
    what is missing."""
    ok = np.isfinite(measured.time_s) & (measured.time_s > 0) & (measured.cores >= 1)
    anchors = measured.subset(ok)
    if len(anchors) == 0:
        raise NotEnoughData("a prior-based prediction needs at least one measured run")
    curves = [c for c in (_curve(o) for o in others) if c is not None]
    if len(curves) < MIN_GROUPS:
        raise NotEnoughData(f"a prior-based prediction needs the speedup curves of at least "
                            f"{MIN_GROUPS} other workloads on this platform (each with 2 or "
                            f"more core counts), found {len(curves)}")
    return PriorFit(anchors, curves)
