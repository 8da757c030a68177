"""Forecast combination: a weighted geometric mean of fitted models (log time averaged).

``select.choose`` (rule "combine") builds it from the candidates it cross-validated: each
member is a fitted model, optionally *end-anchored* (its prediction scaled by the measured /
modelled ratio at the largest and smallest training core count, ``anchors.end_anchors``),
and its weight is proportional to the inverse held-out mean squared log error (Bates and
Granger 1969; with few validation points the simple inverse-MSE weights are hard to beat by
estimated optimal weights, the "forecast combination puzzle"). Averaging log time lets
opposite errors of the members cancel; where one member validates far better it takes
nearly all the weight.

State (``to_state``/``combine_modeler.CombineModeler.from_state``) holds each member's own
saved state, so a combination is saved and reloaded like the analytic models.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from .anchors import anchor_correction, end_anchors
from .base import FittedModel, NotEnoughData, Observations, Prediction, fit_quality
from .speedup_fit import LEVEL

NAME = "combo"


def _freq(obs: Observations) -> np.ndarray | None:
    # the frequency column the analytic models use (fit_data.clean): None without one
    if obs.freq_mhz is None:
        return None
    fq = np.asarray(obs.freq_mhz, float)
    return fq if np.any(np.isfinite(fq) & (fq > 0)) else None


def anchors_for(model: FittedModel, obs: Observations) -> list[dict[str, float]]:
    """End anchors of ``model`` on its training rows ``obs`` (log measured / predicted at the
    largest and smallest core count of each frequency; rows with a time <= 0 ignored)."""
    ok = np.isfinite(obs.time_s) & (obs.time_s > 0) & np.isfinite(obs.cores) & (obs.cores >= 1)
    fq = _freq(obs)
    if fq is not None:  # as the models do: rows without a frequency cannot be placed
        ok &= np.isfinite(fq) & (fq > 0)
    o = obs.subset(ok)
    r = np.log(o.time_s) - np.log(model.predict(o).value)
    return end_anchors(o.cores, _freq(o), r)


def anchored(pred: np.ndarray, anchors: list[dict[str, float]] | None,
             query: Observations) -> np.ndarray:
    """``pred`` at ``query`` with the end-anchor correction applied (none: unchanged)."""
    if not anchors:
        return pred
    p = np.maximum(np.asarray(query.cores, float), 1.0)
    fq = _freq(query)
    known = [a["freq"] for a in anchors if np.isfinite(a["freq"])]
    if known:
        # a row without a frequency is predicted at the highest training one (SpeedupFit)
        fq = np.full(p.size, np.nan) if fq is None else fq
        fq = np.where(np.isfinite(fq) & (fq > 0), fq, max(known))
    return pred * np.exp(anchor_correction(anchors, p, fq))


class CombinedFit(FittedModel):
    """exp(sum_i w_i log t_i(x)) over members (model, weight, anchors or None)."""
    name = NAME

    def __init__(self, members: list[tuple[FittedModel, float, list | None]]) -> None:
        if not members:
            raise NotEnoughData("a combination needs at least one member")
        w = np.array([m[1] for m in members], float)
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"combination weights must be non-negative, got {w}")
        w = w / w.sum()
        self.members = [(m, float(wi), a or None) for (m, _, a), wi in zip(members, w)]
        self.params = {}
        for m, wi, a in self.members:
            key = m.name + ("+anchor" if a else "")
            self.params[f"w.{key}"] = self.params.get(f"w.{key}", 0.0) + wi
        for m, _, _ in self.members:
            for k, v in m.params.items():
                self.params.setdefault(f"{m.name}.{k}", float(v))
        self.quality = {}

    @property
    def weights(self) -> dict[str, float]:
        """Weight per member (name, "+anchor" when end-anchored)."""
        return {k[2:]: v for k, v in self.params.items() if k.startswith("w.")}

    def _members_log(self, query: Observations) -> tuple[np.ndarray, np.ndarray]:
        vals, half, cache = [], [], {}
        for m, _, a in self.members:
            pr = cache.get(id(m)) or cache.setdefault(id(m), m.predict(query))
            v = anchored(np.asarray(pr.value, float), a, query)
            with np.errstate(divide="ignore", invalid="ignore"):
                # half-width of the member's own interval, in log time
                half.append(0.5 * (np.log(pr.upper) - np.log(pr.lower)))
            vals.append(np.log(v))
        return np.vstack(vals), np.vstack(half)

    def _mixture(self, query: Observations) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The members' weighted log forecast, mean squared own half-width (within) and
        variance of their log forecasts (between, their disagreement) at ``query``."""
        lv, hw = self._members_log(query)
        w = np.array([m[1] for m in self.members])[:, None]
        mu = np.sum(w * lv, axis=0)
        return mu, np.sum(w * hw ** 2, axis=0), np.sum(w * (lv - mu) ** 2, axis=0)

    def predict(self, query: Observations) -> Prediction:
        return self.predict_with_spread(query)[0]

    def predict_with_spread(self, query: Observations) -> tuple[Prediction, np.ndarray]:
        """``predict``'s result and the members' disagreement at ``query`` (the weighted
        standard deviation of their log forecasts), from one evaluation of the members."""
        # interval of the mixture of the members' log-normal predictions: within-member
        # half-widths plus the members' disagreement (scaled to the same coverage)
        mu, within, between = self._mixture(query)
        z = float(stats.norm.ppf(0.5 + LEVEL / 2))
        half = np.sqrt(within + z ** 2 * between)
        value = np.exp(mu)
        return Prediction(value=value, lower=value * np.exp(-half), upper=value * np.exp(half),
                          level=LEVEL), np.sqrt(between)

    def set_quality(self, obs: Observations) -> None:
        """Training quality of the combination (``shape_mape``: without the anchoring)."""
        ok = np.isfinite(obs.time_s) & (obs.time_s > 0)
        o = obs.subset(ok)
        self.quality = fit_quality(o.time_s, self.predict(o).value)
        raw = np.exp(sum(wi * np.log(m.predict(o).value) for m, wi, _ in self.members))
        self.quality["shape_mape"] = fit_quality(o.time_s, raw)["mape"]

    def to_state(self) -> dict[str, Any]:
        """JSON-ready state that ``combine_modeler.CombineModeler.from_state`` turns back into
        this model."""
        return {"members": [{"model": m.name, "weight": w, "anchors": a,
                             "state": m.to_state()} for m, w, a in self.members],
                "quality": dict(self.quality), "options": {}}

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["members"] = [{"model": m.name, "weight": w, "anchored": bool(a)}
                        for m, w, a in self.members]
        return d


def can_save(model: FittedModel) -> bool:
    """True when ``model`` has a saved state (a member must, so the combination has one)."""
    return callable(getattr(model, "to_state", None))
