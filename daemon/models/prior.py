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

Curves from elsewhere in the store (``stored``, every platform's groups), in this order:
(1) the same workload measured on other platforms: its own shape, as MPET's migration
scenario carries a workload's scaling to another platform; on loghin's 7 one-core-count
evaluations it beat the platform's other workloads (MAPE 7.6 vs 11.4 %, max 15.6 vs 46.9 %,
docs/models.md); (2) the platform's other workloads (above); (3) where those are fewer than
MIN_GROUPS, the other workloads of the ``MAX_SIMILAR`` platforms nearest by MPET platform
distance (at most ``MAX_DISTANCE``; seed 000 eq. 19: the mean over the workloads measured on
both of the distance between their feature vectors, here from the time curves;
``platform_distances``). The level stays this group's measurement; only the ratios are
borrowed, and a curve from another platform gives an interval of at least
``MIN_HALF_ELSEWHERE`` each side. ``quality["prior_source"]`` names where the curves came from.

The caller gathers the other groups' observations: ``opptune fit`` takes the CSV's other
groups, the daemon the store's (daemon/recommender.py).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from .base import FittedModel, Modeler, NotEnoughData, Observations, Prediction, fit_quality
from .mpet_database import MpetDatabase
from .speedup_fit import LEVEL

MIN_GROUPS = 2     # fewer other workloads than this: no prior
MIN_HALF = 0.10    # 10 % in log time at least: a borrowed curve is never a measurement
MIN_HALF_ELSEWHERE = 0.20  # curves from other platforms: another machine scales otherwise
MAX_SIMILAR = 2    # platforms nearest by MPET distance that lend their workloads' curves,
MAX_DISTANCE = 0.5  # if that near: distances are normalised to [0, 1] over the store (eq. 13)


class StoredGroup(NamedTuple):
    """A group in the store: its workload (with input and variant), platform, observations."""
    workload: str
    platform: str
    obs: Observations


def _curve(obs: Observations, least: int = 2) -> tuple[np.ndarray, np.ndarray] | None:
    """(log cores, median log time) of a group at its most measured frequency; None when it
    has fewer than ``least`` core counts."""
    ok = np.isfinite(obs.time_s) & (obs.time_s > 0) & np.isfinite(obs.cores) & (obs.cores >= 1)
    if obs.freq_mhz is not None and np.isfinite(obs.freq_mhz[ok]).any():
        f = np.where(np.isfinite(obs.freq_mhz), obs.freq_mhz, -1.0)
        vals, counts = np.unique(f[ok], return_counts=True)
        ok &= f == vals[np.argmax(counts)]
    p, t = obs.cores[ok], obs.time_s[ok]
    u = np.unique(p)
    if u.size < max(least, 1):
        return None
    return np.log(u), np.array([np.median(np.log(t[p == c])) for c in u])


class PriorFit(FittedModel):
    """Measured time(s) of one group carried to other core counts by the platform's curves."""
    name = "prior"

    def __init__(self, anchors: Observations, curves: list[tuple[np.ndarray, np.ndarray]],
                 level: float = LEVEL, source: str = "", min_half: float = MIN_HALF) -> None:
        self.anchors, self.curves, self.level = anchors, curves, level
        self.min_half = float(min_half)
        self.source = source or f"the curves of {len(curves)} other workloads on this platform"
        self.params = {"n_groups": float(len(curves)), "n_measured": float(len(anchors))}
        self.quality = {**fit_quality(anchors.time_s, self.predict(anchors).value),
                        "prior_based": 1.0, "n_groups": float(len(curves)),
                        "prior_source": self.source}

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
            lower[i] = np.exp(base + min(lo, mid - self.min_half))
            upper[i] = np.exp(base + max(hi, mid + self.min_half))
        return Prediction(value=value, lower=lower, upper=upper, level=self.level)

    def to_state(self) -> dict:
        """JSON-ready state that ``PriorModeler.from_state`` turns back into this fit."""
        a = self.anchors
        return {"cores": a.cores.tolist(), "time_s": a.time_s.tolist(),
                "freq_mhz": None if a.freq_mhz is None else a.freq_mhz.tolist(),
                "curves": [[lx.tolist(), ly.tolist()] for lx, ly in self.curves],
                "level": self.level, "source": self.source, "min_half": self.min_half}


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
        return PriorFit(anchors, curves, float(state.get("level", LEVEL)),
                        state.get("source", ""), float(state.get("min_half", MIN_HALF)))


def platform_distances(target: str, groups: Sequence[StoredGroup]) -> dict[str, float]:
    """MPET distance (seed 000 eq. 19, via mpet_predict/mpet_distance) from platform
    ``target`` to every other platform of ``groups``: the mean, over the workloads measured on
    both, of the distance between their normalised feature vectors (eq. 10-13; here their
    cpu-time ratio curves n t(n) / t(1), the part every time curve gives). Platforms sharing no
    workload with the target (or none measured at one core) are left out."""
    profiles = {}
    for g in groups:
        c = _curve(g.obs, least=1)
        if c is not None:
            t = {int(round(float(np.exp(x)))): float(np.exp(y)) for x, y in zip(*c)}
            profiles[(g.workload, g.platform)] = {"t": t, "params": {}, "counters": {}}
    if not any(p == target for _, p in profiles):
        return {}
    dist = MpetDatabase(profiles, {}).distances()
    out = {}
    for p in sorted({p for _, p in profiles if p != target}):
        d = dist.d_p_mean(target, p)
        if math.isfinite(d):
            out[p] = d
    return out


def _same_workload(anchors: Observations, workload: str, platform: str,
                   stored: Sequence[StoredGroup]) -> PriorFit | None:
    """This workload's own curves measured on other platforms; None when there are none."""
    same = [(g.platform, c) for g in stored if g.workload == workload and g.platform != platform
            for c in [_curve(g.obs)] if c is not None]
    if not same:
        return None
    return PriorFit(anchors, [c for _, c in same], min_half=MIN_HALF_ELSEWHERE,
                    source="this workload's curve on " + ", ".join(sorted({p for p, _ in same})))


def _similar_platforms(anchors: Observations, workload: str, platform: str,
                       stored: Sequence[StoredGroup]) -> PriorFit | None:
    """The other workloads' curves on the platforms nearest by MPET distance; None when they
    are fewer than MIN_GROUPS."""
    here = [g for g in stored if not (g.workload == workload and g.platform == platform)]
    dist = platform_distances(platform, [StoredGroup(workload, platform, anchors), *here])
    near = sorted((p for p in dist if dist[p] <= MAX_DISTANCE),
                  key=lambda p: (dist[p], p))[:MAX_SIMILAR]
    similar = [(g.platform, c) for g in stored if g.platform in near and g.workload != workload
               for c in [_curve(g.obs)] if c is not None]
    if len(similar) < MIN_GROUPS:
        return None
    used = [p for p in near if any(q == p for q, _ in similar)]
    return PriorFit(anchors, [c for _, c in similar], min_half=MIN_HALF_ELSEWHERE,
                    source=f"the curves of {len(similar)} workloads on the platforms nearest by "
                           "MPET distance (" + ", ".join(f"{p} {dist[p]:.2f}" for p in used)
                           + ")")


def fit_prior(measured: Observations, others: Sequence[Observations],
              workload: str | None = None, platform: str | None = None,
              stored: Sequence[StoredGroup] = ()) -> PriorFit:
    """The prior-based prediction of a group with one or two measured core counts: from this
    ``workload``'s curves on other platforms in ``stored`` (the store's groups on every
    platform; this group itself may be among them), else the ``others`` (the other workloads'
    observations on the same ``platform``), else the workloads of platforms near by MPET
    distance (module doc). NotEnoughData names what is missing."""
    ok = np.isfinite(measured.time_s) & (measured.time_s > 0) & (measured.cores >= 1)
    anchors = measured.subset(ok)
    if len(anchors) == 0:
        raise NotEnoughData("a prior-based prediction needs at least one measured run")
    elsewhere = bool(stored) and workload is not None and platform is not None
    if elsewhere:
        fit = _same_workload(anchors, workload, platform, stored)
        if fit is not None:
            return fit
    curves = [c for c in (_curve(o) for o in others) if c is not None]
    if len(curves) >= MIN_GROUPS:
        return PriorFit(anchors, curves)
    if elsewhere:
        fit = _similar_platforms(anchors, workload, platform, stored)
        if fit is not None:
            return fit
        raise NotEnoughData(f"a prior-based prediction needs the speedup curves of at least "
                            f"{MIN_GROUPS} other workloads on this platform (each with 2 or "
                            f"more core counts), found {len(curves)}; nor does the store hold "
                            f"this workload on another platform or {MIN_GROUPS} workloads on a "
                            f"platform near by MPET distance")
    raise NotEnoughData(f"a prior-based prediction needs the speedup curves of at least "
                        f"{MIN_GROUPS} other workloads on this platform (each with 2 or "
                        f"more core counts), found {len(curves)}")
