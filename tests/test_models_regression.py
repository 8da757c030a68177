"""Seed 002 regression family: coefficient recovery, hand-checked ANOVA, degenerate data."""

import numpy as np
import pytest

from opptune.daemon.models import registry
from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.regression import (Model2, ModelAll, ModelAov, ModelAov2, ModelLog,
                                              ModelQuad, select_and_validate, split_by_input,
                                              variant_factors)


def _grid(reps=3, seed=0, sched=("bf", "wf")):
    """Full factorial: input x threads x scheduler, ``reps`` replications."""
    I, T, S = np.meshgrid([1e4, 2e4, 4e4, 8e4], [1, 2, 4, 8], np.arange(len(sched)), indexing="ij")
    I, T, S = (np.repeat(a.ravel(), reps) for a in (I, T, S))
    return I, T, np.array([f"sched={sched[s]};cut=none" for s in S], dtype=object), S, \
        np.random.default_rng(seed)


def test_modellog_recovers_coefficients():
    I, T, var, S, rng = _grid()
    y = 0.3 + 1.1 * np.log(I) - 0.8 * np.log(T) + 0.25 * S + rng.normal(0, 0.01, I.size)
    fit = ModelLog().fit(Observations(cores=T, time_s=np.exp(y), input_size=I, variant=var))
    p = fit.params
    assert p["log(I)"] == pytest.approx(1.1, abs=0.01)
    assert p["log(T)"] == pytest.approx(-0.8, abs=0.01)
    assert p["factor(sched)wf"] == pytest.approx(0.25, abs=0.01)
    assert p["(Intercept)"] == pytest.approx(0.3, abs=0.1)
    assert fit.quality["mape"] < 2.0
    # 'cut' has one level: not a factor, no crash
    assert not any("cut" in k for k in p)


def test_modelquad_recovers_quadratic_terms():
    I, T, var, S, rng = _grid()
    lI, lT = np.log(I), np.log(T)
    y = 1.0 + 0.5 * lI + 0.05 * lI ** 2 - 0.9 * lT + 0.07 * lT ** 2 + rng.normal(0, 0.005, I.size)
    fit = ModelQuad().fit(Observations(cores=T, time_s=np.exp(y), input_size=I))
    assert fit.params["I(log(I)^2)"] == pytest.approx(0.05, abs=0.01)
    assert fit.params["I(log(T)^2)"] == pytest.approx(0.07, abs=0.005)
    assert fit.params["log(T)"] == pytest.approx(-0.9, abs=0.01)


def test_model2_and_modelall_recover_interactions():
    I, T, var, S, rng = _grid()
    lI, lT = np.log(I), np.log(T)
    y = (0.2 + 1.0 * lI - 0.7 * lT + 0.3 * S + 0.04 * lI * lT - 0.05 * lT * S
         + 0.02 * lI * lT * S + rng.normal(0, 0.003, I.size))
    obs = Observations(cores=T, time_s=np.exp(y), input_size=I, variant=var)
    f2 = Model2().fit(obs)
    fa = ModelAll().fit(obs)
    assert "log(I):log(T):factor(sched)wf" not in f2.params
    assert fa.params["log(I):log(T):factor(sched)wf"] == pytest.approx(0.02, abs=0.003)
    assert fa.params["log(I):log(T)"] == pytest.approx(0.04, abs=0.003)
    assert fa.quality["rmse"] < f2.quality["rmse"]
    labels = [r["term"] for r in fa.anova]
    assert labels == ["log(I)", "log(T)", "factor(sched)", "log(I):log(T)",
                      "log(I):factor(sched)", "log(T):factor(sched)",
                      "log(I):log(T):factor(sched)", "Residuals"]


def test_anova_balanced_2x2_matches_hand_sums_of_squares():
    # y_ijk for A in {a1,a2}, B in {b1,b2}, n=2 replications (seed 002 eq. 8)
    cells = {("a1", "b1"): [1.0, 3.0], ("a1", "b2"): [4.0, 6.0],
             ("a2", "b1"): [5.0, 9.0], ("a2", "b2"): [12.0, 14.0]}
    var, logt = [], []
    for (a, b), ys in cells.items():
        for y in ys:
            var.append(f"A={a};B={b}")
            logt.append(y)
    logt = np.array(logt)
    obs = Observations(cores=np.ones(8), time_s=np.exp(logt), variant=np.array(var, dtype=object))
    fit = ModelAll().fit(obs)
    g = logt.mean()                                           # 6.75
    mA = {a: np.mean([y for (aa, _), ys in cells.items() if aa == a for y in ys]) for a in ("a1", "a2")}
    mB = {b: np.mean([y for (_, bb), ys in cells.items() if bb == b for y in ys]) for b in ("b1", "b2")}
    ssA = 4 * sum((m - g) ** 2 for m in mA.values())          # b*n = 4
    ssB = 4 * sum((m - g) ** 2 for m in mB.values())
    ssAB = 2 * sum((np.mean(ys) - mA[a] - mB[b] + g) ** 2 for (a, b), ys in cells.items())
    ssE = sum((y - np.mean(ys)) ** 2 for ys in cells.values() for y in ys)
    assert (ssA, ssB, ssAB, ssE) == pytest.approx((84.5, 40.5, 4.5, 14.0))
    tab = {r["term"]: r for r in fit.anova}
    assert tab["factor(A)"]["Sum Sq"] == pytest.approx(ssA)
    assert tab["factor(B)"]["Sum Sq"] == pytest.approx(ssB)
    assert tab["factor(A):factor(B)"]["Sum Sq"] == pytest.approx(ssAB)
    assert tab["Residuals"]["Sum Sq"] == pytest.approx(ssE)
    assert tab["Residuals"]["Df"] == 4
    assert tab["factor(A)"]["F value"] == pytest.approx(84.5 / 3.5)
    # F(1,4) = 24.14 -> p = 0.00797 (R: pf(84.5/3.5, 1, 4, lower.tail=FALSE))
    assert tab["factor(A)"]["Pr(>F)"] == pytest.approx(0.007966, abs=1e-5)
    assert "anova" in fit.describe() and fit.describe()["formula"].startswith("log(time) ~")


def test_modelaov_keeps_significant_interactions_only():
    I, T, var, S, rng = _grid(reps=4)
    lI, lT = np.log(I), np.log(T)
    y = 0.5 + lI - 0.6 * lT + 0.4 * S + 0.3 * lT * S + rng.normal(0, 0.01, I.size)
    obs = Observations(cores=T, time_s=np.exp(y), input_size=I, variant=var)
    aov = ModelAov().fit(obs)
    aov2 = ModelAov2().fit(obs)
    for f in (aov, aov2):
        assert "log(T):factor(sched)" in f.term_labels
        assert f.term_labels[:3] == ["log(I)", "log(T)", "factor(sched)"]
        assert f.params["log(T):factor(sched)wf"] == pytest.approx(0.3, abs=0.01)
    assert all(lab.count(":") <= 1 for lab in aov2.term_labels)
    # an interaction that is absent from the data is (almost always) not selected
    assert len(aov.term_labels) < len(ModelAll().fit(obs).term_labels)


def test_prediction_interval_covers_and_is_positive():
    I, T, var, S, rng = _grid(reps=5)
    y = 0.3 + np.log(I) - 0.8 * np.log(T) + rng.normal(0, 0.05, I.size)
    fit = ModelLog(level=0.9).fit(Observations(cores=T, time_s=np.exp(y), input_size=I))
    q = Observations.query([2, 4, 16], input_size=[1.6e5, 3.2e5, 3.2e5])
    pred = fit.predict(q)
    truth = np.exp(0.3 + np.log(q.input_size) - 0.8 * np.log(q.cores))
    assert np.all(np.isfinite(pred.value)) and np.all(pred.value > 0)
    assert np.all(pred.lower < pred.value) and np.all(pred.value < pred.upper)
    assert np.all((pred.lower < truth) & (truth < pred.upper))
    # width on log scale ~ 2 * 1.645 * 0.05
    assert np.log(pred.upper / pred.lower)[0] == pytest.approx(2 * 1.65 * 0.05, rel=0.3)


def test_unseen_level_predicts_nan():
    I, T, var, S, rng = _grid()
    fit = ModelLog().fit(Observations(cores=T, time_s=I / T, input_size=I, variant=var))
    q = Observations.query([2, 2], input_size=[1e4, 1e4],
                           variant=np.array(["sched=bf", "sched=xx"], dtype=object))
    v = fit.predict(q).value
    assert np.isfinite(v[0]) and np.isnan(v[1])


def test_degenerate_data_raise_not_enough_data():
    # nothing varies
    obs = Observations(cores=[2, 2, 2, 2], time_s=[1, 1.1, 0.9, 1])
    for m in (ModelLog(), ModelAll(), ModelAov(), ModelAov2()):
        assert m.applicable(obs) is not None
        with pytest.raises(NotEnoughData):
            m.fit(obs)
    # too few points for the parameters: saturated
    obs = Observations(cores=[1, 2], time_s=[2.0, 1.0])
    with pytest.raises(NotEnoughData):
        ModelLog().fit(obs)
    obs = Observations(cores=[1, 2, 4], time_s=[2.0, 1.0, 0.6])
    with pytest.raises(NotEnoughData):
        ModelQuad().fit(obs)
    # NaN / non-positive times are dropped, not crashed on
    obs = Observations(cores=[1, 2, 4, 8, 8], time_s=[8.0, 4.1, 2.0, np.nan, 0.0])
    fit = ModelLog().fit(obs)
    assert fit.quality["n"] == 3


def test_collinear_factors_alias_not_crash():
    # frequency moves exactly with cores: log(F) is aliased with log(T) -> dropped
    T = np.array([1, 2, 4, 8, 1, 2, 4, 8], float)
    F = T * 100
    obs = Observations(cores=T, time_s=10 / T + 0.01 * np.arange(8), freq_mhz=F)
    fit = Model2().fit(obs)
    assert "log(F)" not in fit.params and "log(F)" in fit.describe()["aliased"]
    assert np.all(np.isfinite(fit.predict(Observations.query([3], [300])).value))


def test_variant_factors_parsing():
    f = variant_factors(np.array(["a=1;b=x", "a=2", None], dtype=object), 3)
    assert list(f["a"]) == ["1", "2", ""] and list(f["b"]) == ["x", "", ""]
    f = variant_factors(np.array(["big", "little"], dtype=object), 2)
    assert list(f["variant"]) == ["big", "little"]


def test_protocol_select_on_small_validate_on_large():
    I, T, var, S, rng = _grid(reps=2)
    lI, lT = np.log(I), np.log(T)
    y = 0.1 + lI - 0.7 * lT + 0.05 * lI * lT + rng.normal(0, 0.01, I.size)
    obs = Observations(cores=T, time_s=np.exp(y), input_size=I, variant=var)
    tr, va = split_by_input(obs, 3)
    assert set(obs.input_size[tr]) == {1e4, 2e4, 4e4} and set(obs.input_size[va]) == {8e4}
    res = select_and_validate(obs.subset(tr), obs.subset(va))
    assert res["chosen"] in res["train"]
    assert set(res["train"]) == {"modelLog", "modelQuad", "model2", "modelAll", "modelAov",
                                 "modelAov2"}
    # the interaction models extrapolate better than main effects only
    assert res["validation"]["model2"]["mape"] < res["validation"]["modelLog"]["mape"]
    assert res["validation"]["model2"]["mape"] < 3.0


def test_registry_names_resolve():
    for name in ("modelLog", "modelQuad", "model2", "modelAll", "modelAov", "modelAov2"):
        assert registry.get(name).name == name
