"""Prediction intervals sized by the validation errors of the choice.

A model's own interval comes from its training residuals, which say how well it fits the
measured range, not how well it predicts beyond it: extrapolated, the 90 % interval held 63 %
of loghin's and 66 % of relearn's test points (benchmarks/peer_baselines.py). The model choice
(select.choose) already predicts held-out points the way the query will be predicted (forward
chaining when the query leaves the measured range, k-fold otherwise), so the size of those
errors is a direct measure of the error to expect, as in split-conformal prediction (Lei et
al., JASA 2018), with the error scaled by how far a point lies outside the training range
(their locally weighted variant): a fold that extrapolates one core count says less about a
query four times as far.

Half-width: Student-t quantile (n held-out points as degrees of freedom) times the root mean
square of the held-out log errors (``error_half``). The empirical quantile of split conformal
was measured too narrow here (coverage 74 / 79 / 78 % on loghin / relearn / xplat
extrapolation): folds hold out 1 to 6 points, too few for the 90 % rank, and the t quantile
widens exactly there.

Outside the range, with enough held-out points to fit it (``narrow``, below), the errors follow
a variogram: e^2 = a + b d^2 (``drift_fit``: noise a that does not grow with the distance d,
drift b that does; non-negative least squares; t quantile with n - 2 degrees of freedom). The
rate per distance (mean of error / distance) that stands with fewer points divides a noise-sized
error just beyond a fold's range by a short distance and scales it to the query's: 99 % of fresh
draws of a known Amdahl curve fell inside, and minibude's extrapolation held all 27 test points
(docs/models.md, fifth round). What no fold sees, a curve that turns beyond the data, shows in
how far the combined candidates' forecasts part at the query (``predict_with_spread``): the
narrowed interval adds that disagreement in quadrature, as the combination's own interval does (combine.py). The
variogram alone held 49 % of a curve that turns past the folds (2 % noise); with the spread,
95 %, and Amdahl's fresh draws 92 % (tests/test_models_calibrate.py).

Narrower than the model's own interval only with at least ``min_held(level)`` = 1 / (1 -
level) held-out points (10 for 90 %: fewer cannot place the 90 % quantile at all): then the
held-out errors replace the model's own interval, floored at the run-to-run noise (the
t-scaled RMS of the choice's residuals on its training data). The models' own intervals come
from a few residual degrees of freedom and a fixed floor (0.5 % in log time) and were far
wider than the errors where the fits are close (minibude random-12: 100 % inside, errors a
third of the half-width). With fewer held-out points the interval is never narrower than the
model's own (narrowing to 4 or more held-out points gave 70 / 73 % on xplat extrapolate /
random-12: a few k-fold errors underrate the test points'), and its out-of-range part is the
t-scaled RMS of error / distance: too wide is kept over too narrow where the evidence is thin
(the variogram there took xplat extrapolation to 78 %). Without held-out points
(``unvalidated``) the interval reaches the persistence forecast outside the range. Point
predictions are unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .base import FittedModel, Observations, Prediction


def min_held(level: float) -> int:
    """Held-out points needed before the errors may narrow a model's own interval:
    1 / (1 - level), the fewest with one point expected beyond the ``level`` quantile."""
    return int(np.ceil(1.0 / (1.0 - level) - 1e-9))


def error_half(log_err: np.ndarray, level: float) -> float:
    """Half-width (log time) of a central ``level`` interval from absolute held-out log
    errors: Student-t quantile with n degrees of freedom times their root mean square (the
    errors of an unbiased choice scatter around 0); 0 for none."""
    e = np.abs(np.asarray(log_err, float))
    e = e[np.isfinite(e)]
    if e.size == 0:
        return 0.0
    from scipy import stats  # loaded at the first fit: the daemon starts without scipy

    return float(stats.t.ppf(0.5 + level / 2, e.size) * np.sqrt(np.mean(e ** 2)))


def drift_fit(log_err: np.ndarray, dist: np.ndarray, level: float
              ) -> tuple[float, float, float] | None:
    """(t, a, b): the variogram e^2 = a + b d^2 of absolute held-out log errors ``log_err`` at
    distances ``dist`` > 0 outside their fold's range (non-negative least squares) and the
    Student-t quantile of a central ``level`` interval with n - 2 degrees of freedom, so that
    t sqrt(a + b d^2) is the half-width at distance d; None with fewer than 3 errors."""
    e = np.abs(np.asarray(log_err, float))
    d = np.asarray(dist, float)
    ok = np.isfinite(e) & np.isfinite(d) & (d > 0)
    e, d = e[ok], d[ok]
    if e.size < 3:
        return None
    from scipy import stats
    from scipy.optimize import nnls

    (a, b), _ = nnls(np.column_stack([np.ones(e.size), d ** 2]), e ** 2)
    return float(stats.t.ppf(0.5 + level / 2, e.size - 2)), float(a), float(b)


def predict_with_spread(model: FittedModel, query: Observations
                        ) -> tuple[Prediction, np.ndarray]:
    """``model``'s prediction at ``query`` and how far a combination's members' forecasts
    part there (the weighted standard deviation of their log forecasts,
    combine.CombinedFit.predict_with_spread), from one evaluation; 0 for a single model."""
    # looked up on the class: a wrapper (_IntervalOf) forwards unknown attributes to the
    # model it wraps, whose prediction would bypass the wrapper's interval
    f = getattr(type(model), "predict_with_spread", None)
    if f is None:
        return model.predict(query), np.zeros(len(query))
    pr, sd = f(model, query)
    return pr, np.asarray(sd, float)


def distance(cores: np.ndarray, freq: np.ndarray | None, rng: tuple) -> np.ndarray:
    """How far each point lies outside the training ranges ``rng`` = (min cores, max cores,
    min freq, max freq) (freq None: no axis): the sum over both axes of the log ratio to the
    nearest end of the range, 0 inside."""
    p = np.asarray(cores, float)
    d = np.maximum(0.0, np.log(p / rng[1])) + np.maximum(0.0, np.log(rng[0] / p))
    if freq is not None and rng[2] is not None:
        f = np.asarray(freq, float)
        ok = np.isfinite(f) & (f > 0)
        f = np.where(ok, f, rng[3])
        d = d + np.maximum(0.0, np.log(f / rng[3])) + np.maximum(0.0, np.log(rng[2] / f))
    return np.where(np.isfinite(d), d, 0.0)


def ranges(obs: Observations) -> tuple:
    """(min cores, max cores, min freq, max freq) of ``obs`` (freq None without an axis)."""
    p = np.asarray(obs.cores, float)
    f = None if obs.freq_mhz is None else np.asarray(obs.freq_mhz, float)
    f = None if f is None else f[np.isfinite(f) & (f > 0)]
    if f is None or f.size == 0:
        return (float(p.min()), float(p.max()), None, None)
    return (float(p.min()), float(p.max()), float(f.min()), float(f.max()))


class _IntervalOf(FittedModel):
    """A fitted model with another interval: everything but ``predict``'s interval (name,
    parameters, saved state, members) is the wrapped model's (``inner``)."""

    inner: FittedModel

    def _wrap(self, inner: FittedModel, quality: dict[str, float]) -> None:
        self.inner = inner
        self.name = inner.name
        self.params = inner.params
        self.quality = {**inner.quality, **quality}

    def describe(self) -> dict[str, Any]:
        d = self.inner.describe()
        d["quality"] = dict(self.quality)
        return d

    def __getattr__(self, attr: str) -> Any:
        # only reached for attributes the wrapper does not define (to_state, form, ...); the
        # guard keeps a half-built one (copy, unpickling) from recursing
        if attr in ("inner", "envelope"):
            raise AttributeError(attr)
        return getattr(self.inner, attr)


class CalibratedFit(_IntervalOf):
    """A fitted model whose interval is at least as wide as its validation errors say.

    Half-width in log time at a query point lying ``d`` outside the training ranges
    (``distance``): ``h0`` inside (t-scaled RMS of the held-out errors of points that lay
    inside their fold's range), outside ``max(h0, rate d)`` (``rate``: t-scaled RMS of error /
    distance of the held-out points that lay outside: extrapolation error grows with how far
    it goes, and the query may go further than any fold) or, where ``drift`` = (t, a, b) was
    fitted (``drift_fit``), ``max(h0, t sqrt(a + b d^2))``. ``narrow`` (enough held-out
    points, ``min_held``): that half-width, at least ``noise``, with the members' spread
    (``predict_with_spread``) at the query added in quadrature, is the interval; otherwise
    it is never narrower than the model's own. ``envelope`` (the persistence forecast): where nothing validated the
    way the query goes, the interval reaches it: everywhere outside the range without
    held-out points (``beyond_cores`` False), or only beyond the largest measured core
    count when no fold held out a core count above its training ones (``beyond_cores``):
    errors of folds that extrapolated in frequency, or interpolated, say nothing of more
    cores than were ever measured.
    Everything else (name, parameters, saved state, members) is the wrapped model's; a saved
    fit keeps this interval beside the state (``interval_state``)."""

    def __init__(self, inner: FittedModel, h0: float, rate: float, rng: tuple,
                 n_held: int, envelope: FittedModel | None = None, noise: float = 0.0,
                 narrow: bool = False, drift: tuple | None = None,
                 beyond_cores: bool = False) -> None:
        self.envelope, self.beyond_cores = envelope, bool(beyond_cores)
        self.h0, self.rate, self.rng = float(h0), float(rate), rng
        self.n_held = n_held
        self.noise, self.narrow = float(noise), bool(narrow)
        self.drift = None if drift is None else tuple(float(x) for x in drift)
        self._wrap(inner, {"interval_log_half": self.h0,
                           "interval_log_half_per_log_distance": (
                               self.rate if self.drift is None
                               else self.drift[0] * np.sqrt(self.drift[2])),
                           "interval_held_out": float(n_held),
                           "interval_noise_log_half": self.noise,
                           "interval_from_held_out": float(self.narrow)})

    def predict(self, query: Observations) -> Prediction:
        # the members' disagreement only where it sizes the interval (one evaluation of them)
        pr, sd = (predict_with_spread(self.inner, query) if self.narrow
                  else (self.inner.predict(query), None))
        v = np.asarray(pr.value, float)
        d = distance(query.cores, query.freq_mhz, self.rng)
        if self.drift is None:
            out = self.rate * d
        else:
            t, a, b = self.drift
            out = t * np.sqrt(a + b * d ** 2)
        half = np.where(d > 0, np.maximum(self.h0, out), self.h0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.narrow:
                # enough held-out errors: they size the interval (down to the noise floor);
                # the members' disagreement at the query adds what no fold could see
                from scipy import stats

                z = float(stats.norm.ppf(0.5 + pr.level / 2))
                half = np.hypot(np.maximum(half, self.noise), z * sd)
                lo, hi = v * np.exp(-half), v * np.exp(half)
            else:
                lo = np.minimum(np.asarray(pr.lower, float), v * np.exp(-half))
                hi = np.maximum(np.asarray(pr.upper, float), v * np.exp(half))
        if self.envelope is not None:
            # not validated that way: the interval reaches the persistence forecast (scaling
            # stops where the data end), whatever the model's shape says
            where = (np.asarray(query.cores, float) > self.rng[1] if self.beyond_cores
                     else d > 0)
            e = np.asarray(self.envelope.predict(query).value, float)
            lo = np.where(where, np.minimum(lo, e), lo)
            hi = np.where(where, np.maximum(hi, e), hi)
        return Prediction(value=v, lower=lo, upper=hi, level=pr.level)


def calibrated(model: FittedModel, log_err: np.ndarray, dist: np.ndarray, obs: Observations,
               level: float, persistence: FittedModel | None = None) -> FittedModel:
    """``model`` (fitted on ``obs``) with its interval sized by the absolute held-out log
    errors ``log_err`` of the choice at held-out distances ``dist`` (see CalibratedFit);
    unchanged when there are none. ``persistence``: given when no held-out point lay above
    its fold's training core counts; beyond the largest measured count the interval reaches
    it."""
    e = np.abs(np.asarray(log_err, float))
    d = np.asarray(dist, float)
    if e.size == 0 or d.size != e.size:
        return model
    ok = np.isfinite(e)
    e, d = e[ok], d[ok]
    if e.size == 0:
        return model
    inner = model.inner if isinstance(model, CalibratedFit) else model
    out = d > 1e-9
    h0 = error_half(e[~out], level)
    rate = error_half(e[out] / d[out], level)
    with np.errstate(all="ignore"):
        r = np.log(np.asarray(obs.time_s, float) / np.asarray(inner.predict(obs).value, float))
    noise = error_half(r[np.isfinite(r)], level)
    narrow = e.size >= min_held(level)
    return CalibratedFit(inner, h0, rate, ranges(obs), e.size, noise=noise, narrow=narrow,
                         drift=drift_fit(e[out], d[out], level) if narrow else None,
                         envelope=persistence, beyond_cores=persistence is not None)


def unvalidated(model: FittedModel, obs: Observations, persistence: FittedModel
                ) -> FittedModel:
    """``model`` (fitted on ``obs``, too few points to hold any out) whose interval, outside
    the measured range, reaches the ``persistence`` forecast (the hold baseline): with
    nothing to validate on, the distance between "the curve goes on" and "it stops here" is
    the honest width."""
    return CalibratedFit(model, 0.0, 0.0, ranges(obs), 0, envelope=persistence)


def pooled_half(h0: np.ndarray, rate: np.ndarray, d: np.ndarray, level: float,
                min_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(half-width in log time, usable) at distances ``d`` from the other groups' replays
    (pooled.py): group h's error there is ``h0`` inside the range, ``max(h0, rate d)``
    outside; the half-width is the Student-t quantile with n groups as degrees of freedom
    (the points of one group move together) times the RMS over the n groups that have an
    error there, usable where n >= ``min_groups``."""
    h0 = np.asarray(h0, float)[:, None]
    rate = np.asarray(rate, float)[:, None]
    d = np.asarray(d, float)[None, :]
    with np.errstate(invalid="ignore"):
        e = np.where(d > 0, np.fmax(h0, rate * d), h0)
        e = np.where(d > 0, np.where(np.isfinite(rate), e, np.nan), e)
    ok = np.isfinite(e)
    n = ok.sum(axis=0)
    rms = np.sqrt(np.where(ok, e ** 2, 0.0).sum(axis=0) / np.maximum(n, 1))
    from scipy import stats  # see error_half

    t = stats.t.ppf(0.5 + level / 2, np.maximum(n, 1))
    return t * rms, n >= min_groups


class PooledFit(_IntervalOf):
    """A fitted model whose interval comes from the platform's other groups replayed
    through its split (pooled.py, ``pooled_half``): at each query point where at least
    ``min_groups`` of them have an error, that half-width replaces the model's interval
    (calibrated or not); elsewhere the model's stands. Everything else is the wrapped
    model's; a saved fit keeps this interval beside the state (``interval_state``)."""

    def __init__(self, inner: FittedModel, h0: np.ndarray, rate: np.ndarray, rng: tuple,
                 level: float, min_groups: int) -> None:
        self.h0, self.rate = np.asarray(h0, float), np.asarray(rate, float)
        self.rng, self.level, self.min_groups = rng, level, min_groups
        self._wrap(inner, {"interval_pooled_groups": float(self.h0.size)})

    def predict(self, query: Observations) -> Prediction:
        pr = self.inner.predict(query)
        v = np.asarray(pr.value, float)
        d = distance(query.cores, query.freq_mhz, self.rng)
        half, ok = pooled_half(self.h0, self.rate, d, self.level, self.min_groups)
        with np.errstate(over="ignore", invalid="ignore"):
            lo = np.where(ok, v * np.exp(-half), np.asarray(pr.lower, float))
            hi = np.where(ok, v * np.exp(half), np.asarray(pr.upper, float))
        return Prediction(value=v, lower=lo, upper=hi, level=pr.level)



def pooled(model: FittedModel, h0: Any, rate: Any, obs: Observations, level: float,
           min_groups: int) -> FittedModel:
    """``model`` (fitted on ``obs``) with the interval of the other groups' replays
    (``PooledFit``); unchanged with fewer than ``min_groups`` replays."""
    if len(h0) < min_groups:
        return model
    return PooledFit(model, h0, rate, ranges(obs), level, min_groups)


def interval_state(model: FittedModel) -> dict[str, Any] | None:
    """The interval of a calibrated or pooled fit as plain data, for a saved fit (whose
    state is the wrapped model's); None for a model's own interval. A persistence envelope
    is saved as its model's name and state (None where that model cannot save itself)."""
    if isinstance(model, PooledFit):
        return {"pooled": {"h0": model.h0.tolist(), "rate": model.rate.tolist(),
                           "rng": list(model.rng), "level": model.level,
                           "min_groups": model.min_groups},
                "inner": interval_state(model.inner)}
    if isinstance(model, CalibratedFit):
        env = model.envelope
        if env is not None and not hasattr(env, "to_state"):
            return None
        return {"calibrated": {"h0": model.h0, "rate": model.rate, "rng": list(model.rng),
                               "n_held": model.n_held, "noise": model.noise,
                               "narrow": model.narrow,
                               "drift": None if model.drift is None else list(model.drift),
                               "envelope": None if env is None else {
                                   "model": env.name, "state": env.to_state(),
                                   "beyond_cores": model.beyond_cores}}}
    return None


Load = Callable[[str, dict], FittedModel]


def with_interval(model: FittedModel, state: dict[str, Any] | None,
                  load: Load | None = None) -> FittedModel:
    """``model`` (reloaded from its saved state) wrapped again in the interval that
    ``interval_state`` saved; ``load(name, state)`` reloads a saved envelope's model (the
    caller's registry: this module does not import the families), without it the envelope
    is left out."""
    if not state:
        return model
    if "pooled" in state:
        p = state["pooled"]
        return PooledFit(with_interval(model, state.get("inner"), load), p["h0"], p["rate"],
                         tuple(p["rng"]), float(p["level"]), int(p["min_groups"]))
    c = state["calibrated"]
    e = c.get("envelope")
    env = None if e is None or load is None else load(e["model"], e["state"])
    return CalibratedFit(model, c["h0"], c["rate"], tuple(c["rng"]), int(c["n_held"]),
                         noise=c["noise"], narrow=c["narrow"], drift=c.get("drift"),
                         envelope=env, beyond_cores=bool(e and e.get("beyond_cores")))
