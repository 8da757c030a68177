"""Power over cores x frequency, and energy / EDP when combined with a time model.

CMOS power (static plus dynamic switching power of p active cores):

    P(p, f) = P_static + p * c * V(f)^2 * f        (f in GHz, V in volts, P in watts)

fitted by bounded least squares (every parameter >= 0) on the measured power (``power_w``, or
``energy_j / time_s`` where power is missing). V(f):

* a voltage column (a counter whose name contains "volt", e.g. powmon's ``voltage_big_v``):
  fitting uses each run's measured voltage; prediction interpolates the mean voltage per
  frequency piecewise linearly (extrapolating the end segments), since DVFS tables are not
  linear at the low end;
* otherwise V(f) = v0 + v1 * f (linear), with c absorbed into the fit as
  c*V^2 = (a + b*f)^2, a = sqrt(c)*v0, b = sqrt(c)*v1 >= 0 (c and V cannot be separated
  without a voltage);
* one frequency (or none): P(p) = P_static + p * d, with d = c*V^2*f of that frequency.

Energy E = P * t and EDP = E * t (``energy_and_edp``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import optimize, stats

from .base import FittedModel, Modeler, NotEnoughData, Observations, Prediction, fit_quality


def _voltage_key(obs: Observations) -> str | None:
    for k in sorted(obs.counters):
        if "volt" in k.lower():
            return k
    return None


def measured_power(obs: Observations) -> np.ndarray:
    """Power per run: ``power_w`` where finite, else ``energy_j / time_s`` (NaN if neither)."""
    n = len(obs)
    p = np.full(n, np.nan) if obs.power_w is None else np.asarray(obs.power_w, float).copy()
    if obs.energy_j is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            e_over_t = obs.energy_j / obs.time_s
        fill = ~np.isfinite(p) & np.isfinite(e_over_t) & (obs.time_s > 0)
        p[fill] = e_over_t[fill]
    return p


class PowerFit(FittedModel):
    """A fitted power model; ``predict`` returns watts (not seconds)."""

    def __init__(self, form: str, theta: np.ndarray, names: list[str], jac_inv: np.ndarray,
                 sigma2: float, dof: int, volt_table: tuple[np.ndarray, np.ndarray] | None,
                 quality: dict[str, float], level: float):
        self.name = f"power[{form}]"
        self.form, self.theta, self.level = form, theta, level
        self.params = {k: float(v) for k, v in zip(names, theta)}
        self.jac_inv, self.sigma2, self.dof = jac_inv, sigma2, dof
        self.volt_table = volt_table
        self.quality = quality

    def voltage(self, f_ghz: np.ndarray) -> np.ndarray:
        """V(f) from the voltage table (piecewise linear, end segments extended)."""
        fs, vs = self.volt_table
        f_ghz = np.asarray(f_ghz, float)
        if fs.size == 1:
            return np.full(f_ghz.shape, vs[0])
        v = np.interp(f_ghz, fs, vs)
        lo = f_ghz < fs[0]
        hi = f_ghz > fs[-1]
        v[lo] = vs[0] + (f_ghz[lo] - fs[0]) * (vs[1] - vs[0]) / (fs[1] - fs[0])
        v[hi] = vs[-1] + (f_ghz[hi] - fs[-1]) * (vs[-1] - vs[-2]) / (fs[-1] - fs[-2])
        return np.maximum(v, 0.0)

    def predict(self, query: Observations) -> Prediction:
        """Power (W) with a t interval from the linearised parameter covariance."""
        p = np.asarray(query.cores, float)
        f = (np.full(p.shape, np.nan) if query.freq_mhz is None
             else np.asarray(query.freq_mhz, float) / 1000.0)
        v = self.voltage(f) if self.form == "voltage" else None
        value = _power(self.form, self.theta, p, f, v)
        J = _jacobian(self.form, self.theta, p, f, v)
        var = self.sigma2 * (1.0 + np.einsum("ij,jk,ik->i", J, self.jac_inv, J))
        half = stats.t.ppf(0.5 + self.level / 2, max(self.dof, 1)) * np.sqrt(np.maximum(var, 0))
        return Prediction(value, np.maximum(value - half, 0.0), value + half, self.level)

    def to_state(self) -> dict[str, Any]:
        """JSON-ready state that ``PowerModeler.from_state`` turns back into this fit."""
        return {"form": self.form, "theta": self.theta.tolist(), "names": list(self.params),
                "jac_inv": self.jac_inv.tolist(), "sigma2": self.sigma2, "dof": self.dof,
                "volt_table": (None if self.volt_table is None
                               else [self.volt_table[0].tolist(), self.volt_table[1].tolist()]),
                "quality": dict(self.quality), "level": self.level}

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["form"] = {"voltage": "P = P_static + p*c*V(f)^2*f (V measured)",
                     "linear_v": "P = P_static + p*(a + b*f)^2*f (V linear in f)",
                     "cores": "P = P_static + p*d (one frequency)"}[self.form]
        return d


def _power(form: str, th: np.ndarray, p: np.ndarray, f: np.ndarray, v: np.ndarray | None
           ) -> np.ndarray:
    # an optional last parameter c_uncore adds cluster switching power independent of p
    if form == "voltage":
        act = p * th[1] + (th[2] if th.size > 2 else 0.0)
        return th[0] + act * v ** 2 * f
    if form == "linear_v":
        act = p + (th[3] if th.size > 3 else 0.0)
        return th[0] + act * (th[1] + th[2] * f) ** 2 * f
    return th[0] + p * th[1]


def _jacobian(form: str, th: np.ndarray, p: np.ndarray, f: np.ndarray, v: np.ndarray | None
              ) -> np.ndarray:
    one = np.ones_like(p)
    if form == "voltage":
        cols = [one, p * v ** 2 * f] + ([v ** 2 * f] if th.size > 2 else [])
        return np.column_stack(cols)
    if form == "linear_v":
        g = th[1] + th[2] * f
        act = p + (th[3] if th.size > 3 else 0.0)
        cols = [one, 2 * act * g * f, 2 * act * g * f * f] + ([g ** 2 * f] if th.size > 3 else [])
        return np.column_stack(cols)
    return np.column_stack([one, p])


class PowerModeler(Modeler):
    """Fits P(p, f) = P_static + p*c*V(f)^2*f with non-negative parameters. ``uncore=True``
    adds c_uncore*V^2*f: switching power of the cluster (L2, interconnect) that scales with
    V^2 f whatever the number of busy cores (our extension, not in the seeds)."""
    name = "power"

    def __init__(self, level: float = 0.9, uncore: bool = False):
        self.level = level
        self.uncore = uncore

    def _rows(self, obs: Observations) -> np.ndarray:
        P = measured_power(obs)
        ok = np.isfinite(P) & (P > 0) & np.isfinite(obs.cores) & (obs.cores > 0)
        if obs.has_freq():
            ok &= np.isfinite(obs.freq_mhz) & (obs.freq_mhz > 0)
        return ok

    def from_state(self, state: dict[str, Any]) -> PowerFit:
        """A power fit back from ``PowerFit.to_state()`` (for saved fits)."""
        vt = state.get("volt_table")
        return PowerFit(state["form"], np.asarray(state["theta"], float), list(state["names"]),
                        np.asarray(state["jac_inv"], float), float(state["sigma2"]),
                        int(state["dof"]),
                        None if vt is None else (np.asarray(vt[0], float), np.asarray(vt[1], float)),
                        dict(state.get("quality", {})), float(state.get("level", self.level)))

    def applicable(self, obs: Observations) -> str | None:
        if obs.power_w is None and obs.energy_j is None:
            return "no power or energy measurements"
        ok = self._rows(obs)
        sub = obs.subset(ok)
        if np.unique(sub.cores).size < 2 and not sub.has_freq():
            return "neither cores nor frequency varies"
        if ok.sum() < 4:
            return f"needs at least 4 runs with power, has {int(ok.sum())}"
        return None

    def fit(self, obs: Observations) -> PowerFit:
        reason = self.applicable(obs)
        if reason:
            raise NotEnoughData(f"power: {reason}")
        obs = obs.subset(self._rows(obs))
        P = measured_power(obs)
        p = obs.cores
        vkey = _voltage_key(obs)
        volt_table = None
        if obs.has_freq():
            f = obs.freq_mhz / 1000.0
            v = None if vkey is None else obs.counters[vkey]
            if v is not None and np.all(np.isfinite(v)) and np.all(v > 0):
                form, names = "voltage", ["P_static", "c"]
                fs = np.unique(f)
                volt_table = (fs, np.array([v[f == x].mean() for x in fs]))
                x0 = [max(P.min() * 0.5, 0.0), max(np.median((P - P.min()) / (p * v ** 2 * f)), 1e-6)]
            else:
                form, names, v = "linear_v", ["P_static", "a", "b"], None
                x0 = [max(P.min() * 0.5, 0.0), 0.3, 0.3]
            if self.uncore:
                names, x0 = names + ["c_uncore"], x0 + [x0[1] if form == "voltage" else 1.0]
        else:
            f, v = np.full(p.shape, np.nan), None
            form, names = "cores", ["P_static", "d"]
            x0 = [max(P.min() * 0.5, 0.0), max((P.max() - P.min()) / max(np.ptp(p), 1.0), 1e-6)]
        k = len(names)
        if len(P) <= k:
            raise NotEnoughData(f"power: {len(P)} runs for {k} parameters")
        res = optimize.least_squares(lambda th: _power(form, th, p, f, v) - P, x0,
                                     bounds=(0.0, np.inf), method="trf")
        theta = res.x
        pred = _power(form, theta, p, f, v)
        dof = len(P) - k
        sigma2 = float(np.sum((pred - P) ** 2)) / dof
        J = _jacobian(form, theta, p, f, v)
        jac_inv = np.linalg.pinv(J.T @ J)
        q = fit_quality(P, pred)
        if form == "linear_v":
            volt_table = None
        return PowerFit(form, theta, names, jac_inv, sigma2, dof, volt_table, q, self.level)


def energy_and_edp(time_pred: Prediction, power_pred: Prediction) -> tuple[Prediction, Prediction]:
    """Energy E = P*t (J) and energy-delay product EDP = E*t (J*s) per configuration. Bounds
    multiply the bounds (both quantities are positive), so they are conservative; the level
    is the smaller of the two inputs'."""
    t, P = time_pred, power_pred
    level = min(t.level, P.level)
    energy = Prediction(P.value * t.value, P.lower * t.lower, P.upper * t.upper, level)
    edp = Prediction(energy.value * t.value, energy.lower * t.lower, energy.upper * t.upper,
                     level)
    return energy, edp


def predict_energy(time_model: FittedModel, power_model: PowerFit, query: Observations
                   ) -> dict[str, Prediction]:
    """Time, power, energy and EDP for the ``query`` configurations."""
    t = time_model.predict(query)
    P = power_model.predict(query)
    e, edp = energy_and_edp(t, P)
    return {"time_s": t, "power_w": P, "energy_j": e, "edp": edp}
