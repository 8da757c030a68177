"""Power model P = P_static + p*c*V(f)^2*f, energy and EDP."""

import numpy as np
import pytest

from opptune.daemon.models.base import NotEnoughData, Observations, Prediction
from opptune.daemon.models.energy import PowerModeler, energy_and_edp, measured_power, predict_energy
from opptune.daemon.models.regression import ModelLog


def _grid(noise=0.005, seed=0):
    rng = np.random.default_rng(seed)
    p, f = np.meshgrid([1, 2, 3, 4], np.arange(200, 2000, 200), indexing="ij")
    p, f = p.ravel().astype(float), f.ravel().astype(float)
    volt = np.where(f <= 800, 0.91, 0.91 + 0.28 * (f - 800) / 1000)   # XU3-like DVFS table
    return p, f, volt, rng.normal(0, noise, p.size)


def test_recovers_static_and_c_with_voltage_column():
    p, f, v, eps = _grid()
    P = 0.12 + p * 0.35 * v ** 2 * (f / 1000) + eps
    obs = Observations(cores=p, time_s=np.full(p.size, 30.0), freq_mhz=f, power_w=P,
                       counters={"voltage_big_v": v})
    fit = PowerModeler().fit(obs)
    assert fit.form == "voltage"
    assert fit.params["P_static"] == pytest.approx(0.12, abs=0.01)
    assert fit.params["c"] == pytest.approx(0.35, rel=0.02)
    assert fit.quality["mape"] < 2.0
    # prediction at an unmeasured configuration uses V interpolated from the table
    q = Observations.query([3], [1100])
    pred = fit.predict(q)
    v_q = 0.91 + 0.28 * 0.3
    assert pred.value[0] == pytest.approx(0.12 + 3 * 0.35 * v_q ** 2 * 1.1, rel=0.02)
    assert pred.lower[0] < pred.value[0] < pred.upper[0]


def test_uncore_term_recovered_and_near_zero_when_absent():
    p, f, v, eps = _grid()
    P = 0.1 + (0.05 + p * 0.3) * v ** 2 * (f / 1000) + eps
    obs = Observations(cores=p, time_s=np.ones(p.size), freq_mhz=f, power_w=P,
                       counters={"voltage_big_v": v})
    fit = PowerModeler(uncore=True).fit(obs)
    assert fit.params["c_uncore"] == pytest.approx(0.05, abs=0.01)
    assert fit.params["c"] == pytest.approx(0.3, rel=0.03)
    assert PowerModeler(uncore=False).fit(obs).quality["mape"] > fit.quality["mape"]


def test_linear_voltage_without_column_and_energy_over_time():
    p, f, _, eps = _grid()
    fg = f / 1000
    P = 0.2 + p * (0.4 + 0.3 * fg) ** 2 * fg + eps      # c*V^2 with V linear in f
    t = 100 / (p * fg)
    obs = Observations(cores=p, time_s=t, freq_mhz=f, energy_j=P * t)   # power from E/t
    assert np.allclose(measured_power(obs), P)
    fit = PowerModeler().fit(obs)
    assert fit.form == "linear_v"
    assert fit.params["P_static"] == pytest.approx(0.2, abs=0.02)
    assert fit.params["a"] == pytest.approx(0.4, abs=0.03)
    assert fit.params["b"] == pytest.approx(0.3, abs=0.03)


def test_cores_only_idle_term():
    p = np.array([1, 2, 4, 8, 16, 24, 32, 48], float)
    P = 300 + 4.5 * p
    obs = Observations(cores=p, time_s=1000 / p, freq_mhz=np.full(8, 2100.0), power_w=P)
    fit = PowerModeler().fit(obs)
    assert fit.form == "cores"
    assert fit.params["P_static"] == pytest.approx(300, rel=1e-3)
    assert fit.params["d"] == pytest.approx(4.5, rel=1e-3)


def test_parameters_non_negative():
    # power falls with cores: the unconstrained slope would be negative
    p = np.array([1, 2, 3, 4, 5, 6], float)
    obs = Observations(cores=p, time_s=np.ones(6), power_w=10 - 0.5 * p)
    fit = PowerModeler().fit(obs)
    assert all(v >= 0 for v in fit.params.values())
    assert fit.params["d"] == pytest.approx(0.0, abs=1e-6)


def test_degenerate_power_data():
    obs = Observations(cores=[1, 2, 3, 4], time_s=[4, 2, 1.5, 1])
    assert "power" in PowerModeler().applicable(obs)
    with pytest.raises(NotEnoughData):
        PowerModeler().fit(obs)
    obs = Observations(cores=[2, 2, 2, 2], time_s=np.ones(4), power_w=[1, 1.1, 1, 1])
    with pytest.raises(NotEnoughData):
        PowerModeler().fit(obs)
    obs = Observations(cores=[1, 2], time_s=[1, 1], power_w=[1.0, np.nan])
    with pytest.raises(NotEnoughData):
        PowerModeler().fit(obs)


def test_energy_and_edp_combine_time_and_power():
    t = Prediction(np.array([10.0, 5.0]), np.array([9.0, 4.0]), np.array([11.0, 6.0]), 0.9)
    P = Prediction(np.array([2.0, 3.0]), np.array([1.5, 2.5]), np.array([2.5, 3.5]), 0.8)
    e, edp = energy_and_edp(t, P)
    assert np.allclose(e.value, [20, 15]) and np.allclose(edp.value, [200, 75])
    assert np.allclose(e.lower, [13.5, 10]) and np.allclose(edp.upper, [11 * 11 * 2.5, 36 * 3.5])
    assert e.level == 0.8


def test_predict_energy_with_a_time_model():
    p, f, v, eps = _grid()
    t = 60 / (p ** 0.9 * f / 1000)
    P = 0.12 + p * 0.35 * v ** 2 * (f / 1000)
    obs = Observations(cores=p, time_s=t, freq_mhz=f, power_w=P, counters={"voltage_big_v": v})
    out = predict_energy(ModelLog().fit(obs), PowerModeler().fit(obs),
                         Observations.query([2, 4], [1000, 1800]))
    assert set(out) == {"time_s", "power_w", "energy_j", "edp"}
    for pr in out.values():
        assert np.all(np.isfinite(pr.value)) and np.all(pr.value > 0)
    assert np.allclose(out["energy_j"].value, out["time_s"].value * out["power_w"].value)
