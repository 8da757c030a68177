"""Forecast combination (combine.py) and the choice's rule "combine" (select.py)."""

import json

import numpy as np
import pytest

from opptune.daemon.models import registry
from opptune.daemon.models.base import FittedModel, Modeler, NotEnoughData, Observations, Prediction
from opptune.daemon.models.combine import CombinedFit, anchored
from opptune.daemon.models.select import ERR_FLOOR, MIN_WEIGHT, choose, combination_weights


class Fixed(FittedModel):
    """A stub: truth(p) times a constant factor, 10 % interval."""
    name = "fixed"

    def __init__(self, factor):
        self.factor, self.params, self.quality = factor, {"factor": factor}, {}

    def predict(self, query):
        v = 100 / np.asarray(query.cores, float) * self.factor
        return Prediction(value=v, lower=v / 1.1, upper=v * 1.1)


def ape(pred, truth):
    return float(np.mean(100 * np.abs(np.asarray(pred) / truth - 1)))


def test_geometric_mean_cancels_opposite_errors_and_widens_the_interval():
    q = Observations.query([1, 2, 4])
    truth = 100 / q.cores
    over, under = Fixed(1.2), Fixed(1 / 1.2)
    fit = CombinedFit([(over, 1.0, None), (under, 1.0, None)])
    pred = fit.predict(q)
    assert np.allclose(pred.value, truth)              # 20 % over x 20 % under: exact
    assert ape(pred.value, truth) < min(ape(m.predict(q).value, truth) for m in (over, under))
    # the members disagree by a factor 1.44: the interval is wider than either member's
    assert np.all(pred.upper / pred.value > 1.1) and np.all(pred.lower < pred.value)
    assert fit.weights == {"fixed": pytest.approx(1.0)}
    same = CombinedFit([(Fixed(1.0), 0.3, None), (Fixed(1.0), 0.7, None)]).predict(q)
    assert np.allclose(same.upper / same.value, 1.1)    # no disagreement: members' own width
    with pytest.raises(ValueError):
        CombinedFit([(over, -1.0, None), (under, 2.0, None)])


def test_weights_are_inverse_mse_floored_deduplicated_and_pruned():
    truth = np.array([10.0, 20.0, 40.0])
    good = truth * np.exp([0.01, -0.01, 0.01])           # RMS log error 0.01
    poor = truth * np.exp([0.03, -0.03, 0.03])           # 0.03: 1/9 of the weight of good
    cv = {"amdahl": (good, good, truth), "usl": (poor, poor * 1.2, truth),
          "memwall": (truth * 3.0, truth * 3.0, truth)}
    parts = combination_weights(cv, ["amdahl", "usl", "memwall"])
    got = {(n, a): w for n, a, w, _ in parts}
    # anchored amdahl equals raw amdahl (same forecast): left out; usl + anchor is 0.2 off
    # and memwall 1.1 off in log time: both below MIN_WEIGHT, dropped
    assert set(got) == {("amdahl", False), ("usl", False)}
    assert got[("amdahl", False)] / got[("usl", False)] == pytest.approx(9.0)
    assert sum(got.values()) == pytest.approx(1.0)
    assert all(w >= MIN_WEIGHT for w in got.values())
    # two exact candidates are equally good (the floor), not infinitely weighted
    exact = truth * np.exp([0.8 * ERR_FLOOR, -0.8 * ERR_FLOOR, 0])  # distinct, under the floor
    parts = combination_weights({"amdahl": (truth, truth, truth),
                                 "usl": (exact, exact * 1.05, truth)}, ["amdahl", "usl"])
    ws = {(n, a): w for n, a, w, _ in parts}
    assert ws[("amdahl", False)] == pytest.approx(ws[("usl", False)])


def test_combination_beats_each_member_where_their_errors_have_opposite_signs():
    # Amdahl plus a sqrt(p) overhead: Amdahl's flat tail under-predicts 16-32 cores and
    # USL's p^2 term over-predicts them; the weighted geometric mean beats both
    p = np.arange(1, 13, dtype=float)

    def truth(c):
        return 100 * (0.03 + 0.97 / c) + 1.5 * np.sqrt(c)

    t = truth(p) * np.exp(np.random.default_rng(1).normal(0, 0.01, p.size))
    q = Observations.query([16, 24, 32])
    sel = choose(Observations(cores=p, time_s=t), ["amdahl", "usl"], target=q, rule="combine")
    assert sel.name == "combo" and isinstance(sel.model.inner, CombinedFit)  # calibrated
    assert set(sel.model.weights) <= {"amdahl", "amdahl+anchor", "usl", "usl+anchor", "hold"}
    err = ape(sel.model.predict(q).value, truth(q.cores))
    members = [ape(anchored(m.predict(q).value, a, q), truth(q.cores))
               for m, _, a in sel.model.members]
    signs = {np.sign(np.mean(anchored(m.predict(q).value, a, q) - truth(q.cores)))
             for m, _, a in sel.model.members}
    assert signs == {-1.0, 1.0}
    assert err < min(members)
    assert err < ape(registry.get("usl").fit(Observations(cores=p, time_s=t)).predict(q).value,
                     truth(q.cores))
    row = sel.scores["combo"]
    assert row["error"] is None and np.isfinite(row["cv_mape"]) and row["weights"]


def test_a_single_surviving_member_is_returned_as_itself():
    # exact Amdahl data: USL nests it, so its held-out forecasts are the same, and anchoring
    # changes nothing; one forecast is left, so no combination is built
    p = np.array([1.0, 2, 3, 4, 6, 8, 12, 16])
    t = 50 * (0.1 + 0.9 / p)
    sel = choose(Observations(cores=p, time_s=t), ["amdahl", "usl"], target="extrapolate",
                 rule="combine")
    assert sel.name == "amdahl" and not isinstance(sel.model, CombinedFit)
    assert np.allclose(sel.model.predict(Observations.query([32])).value, 50 * (0.1 + 0.9 / 32))


def test_round_trip_through_json_state_with_hold_and_anchored_members():
    p = np.tile([1.0, 2, 4, 8], 2)
    f = np.repeat([1000.0, 1500.0], 4)
    t = (2 + 6000 / f) * (0.1 + 0.9 / p) * (1 + 0.02 * np.sin(p + f / 100))
    obs = Observations(cores=p, time_s=t, freq_mhz=f)
    members = [registry.get(n).fit(obs) for n in ("amdahl", "usl", "hold")]
    from opptune.daemon.models.combine import anchors_for
    fit = CombinedFit([(members[0], 0.5, anchors_for(members[0], obs)),
                       (members[1], 0.3, None), (members[2], 0.2, None)])
    fit.set_quality(obs)
    state = json.loads(json.dumps(fit.to_state()))
    back = registry.get("combo").from_state(state)
    q = Observations.query([1, 6, 16, 16], [1000, 1200, 1500, 2000])
    a, b = fit.predict(q), back.predict(q)
    assert np.allclose(a.value, b.value) and np.allclose(a.lower, b.lower)
    assert back.quality == fit.quality and back.weights == fit.weights
    # a row without a frequency is predicted (anchoring included) at the highest training one
    assert np.allclose(fit.predict(Observations.query([16])).value,
                       fit.predict(Observations.query([16], [1500])).value)
    assert fit.quality["n"] == 8 and fit.quality["mape"] < 3 and "shape_mape" in fit.quality
    d = fit.describe()
    assert d["model"] == "combo" and [m["model"] for m in d["members"]] == ["amdahl", "usl", "hold"]
    assert d["members"][0]["anchored"] and all(isinstance(v, float) for v in d["params"].values())


def test_combo_modeler_fits_on_its_own(monkeypatch):
    p = np.arange(1, 11, dtype=float)
    t = 30 * (0.05 + 0.95 / p) * (1 + 0.03 * np.cos(3 * p))
    obs = Observations(cores=p, time_s=t)
    fit = registry.get("combo").fit(obs)
    assert fit.name == "combo" and sum(fit.weights.values()) == pytest.approx(1.0)
    assert fit.quality["mape"] < 5
    # "combo" is no default candidate (it would choose inside every fold); "hold" joins the
    # combination only (select.HOLD_IN_COMBINATION); a "combo" row in the table is the
    # combination itself (with its weights)
    monkeypatch.setattr(registry, "available", lambda: ["amdahl", "usl", "hold", "combo"])
    sel = choose(obs, rule="combine")
    assert {r["name"] for r in sel.table()} - {"combo"} == {"amdahl", "usl", "hold"}
    assert "hold" not in choose(obs, rule="fallback").scores
    assert all(r["name"] != "combo" or r["weights"] for r in sel.table())


class NoState(Modeler):
    """A model without a saved state (like the learners): it may win, not join a mix."""
    name = "nostate"

    def fit(self, obs):
        if len(obs) < 2:
            raise NotEnoughData("need 2")
        fit = Fixed(1.0)
        fit.name = "nostate"
        fit.predict = lambda q: Prediction(value=np.interp(q.cores, obs.cores, obs.time_s),
                                           lower=np.zeros(len(q)), upper=np.full(len(q), 1e9))
        return fit


def test_a_member_that_cannot_be_saved_is_left_out_of_the_combination(monkeypatch):
    monkeypatch.setitem(registry.MODELERS, "nostate", "stub:NoState")
    real_get = registry.get
    monkeypatch.setattr(registry, "get",
                        lambda name: NoState() if name == "nostate" else real_get(name))
    p = np.arange(1, 13, dtype=float)
    t = 40 * (0.05 + 0.95 / p) * (1 + 0.02 * np.sin(5 * p))
    sel = choose(Observations(cores=p, time_s=t), ["amdahl", "usl", "nostate"], rule="combine")
    assert sel.scores["nostate"]["error"] is None         # it was validated ...
    assert "nostate" not in getattr(sel.model, "weights", {})   # ... but is not a member
    assert sel.model.to_state()


def test_fold_twins_go_to_the_one_that_fits_its_data():
    # the folds give amdahl and hold the same held-out forecast (one frequency in the fold's
    # training part): the folds cannot rank them, the misfit on all the data does
    truth = np.array([10.0, 20.0])
    fold = truth * np.exp([0.05, -0.05])
    other = truth * np.exp([0.08, -0.02])
    cv = {"amdahl": (fold, fold, truth), "hold": (fold.copy(), fold.copy(), truth),
          "memwall": (other, other, truth)}
    names = ["amdahl", "hold", "memwall"]
    tie = {(n, a): w for n, a, w, _ in combination_weights(cv, names)}
    assert tie[("amdahl", False)] == pytest.approx(tie[("hold", False)])
    misfit = {("amdahl", False): 0.02 ** 2, ("hold", False): 0.0, ("memwall", False): 0.03 ** 2}
    got = {(n, a): w for n, a, w, _ in combination_weights(cv, names, misfit)}
    assert ("amdahl", False) not in got
    assert got[("hold", False)] > tie[("hold", False)]
    # memwall has no fold twin: its own larger misfit does not remove it
    assert got[("memwall", False)] > MIN_WEIGHT
    # misfits equal within SAME_FORECAST: still a tie
    close = {**misfit, ("amdahl", False): 1e-4, ("hold", False): 1e-4 * (1 + 1e-4)}
    got = {(n, a): w for n, a, w, _ in combination_weights(cv, names, close)}
    assert got[("amdahl", False)] == pytest.approx(got[("hold", False)])
