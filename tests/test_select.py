"""Cross-validated model choice."""

import numpy as np
import pytest

from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.memwall import speedup
from opptune.daemon.models.select import ANALYTIC, choose, extrapolation_splits, fold_ids


def test_folds_loo_for_tiny_and_k_otherwise():
    assert sorted(fold_ids(5, 5, 0)) == [0, 1, 2, 3, 4]
    ids = fold_ids(40, 5, 1)
    assert np.bincount(ids).tolist() == [8] * 5


def test_picks_usl_on_retrograde_data_and_lists_runners_up():
    p = np.arange(1, 33, dtype=float)
    t = 40 * (1 + 0.03 * (p - 1) + 0.004 * p * (p - 1)) / p
    obs = Observations(cores=p, time_s=t)
    sel = choose(obs, list(ANALYTIC), rule="fallback")
    assert sel.name == "usl"
    table = sel.table()
    assert table[0]["name"] == "usl" and table[0]["cv_mape"] < 0.5
    assert {r["name"] for r in table} == set(ANALYTIC)
    assert next(r for r in table if r["name"] == "amdahl")["cv_mape"] > 5
    # the default combination (hold, the persistence baseline, joins it): usl takes (nearly)
    # all the weight, the rest is listed
    sel = choose(obs, list(ANALYTIC), rule="combine")
    assert sel.name in ("usl", "combo")
    if sel.name == "combo":
        assert sel.model.weights.get("usl", 0) > 0.95
        assert {r["name"] for r in sel.table()} == {*ANALYTIC, "hold", "combo"}
    assert np.allclose(sel.model.predict(obs).value, t, rtol=0.01)


def test_picks_memwall_on_memory_wall_data():
    p = np.tile(np.arange(1, 17, dtype=float), 3)
    f = np.repeat([1200.0, 1800.0, 2400.0], 16)
    t = (5 + 20000 / f) / speedup(0.99, 4.0, 0.05, 0.1, p, f / 1000)
    sel = choose(Observations(cores=p, time_s=t, freq_mhz=f), list(ANALYTIC))
    assert sel.name == "memwall"
    assert sel.scores["memwall"]["cv_mape"] < sel.scores["amdahl"]["cv_mape"]


def test_unknown_module_is_skipped_not_fatal(monkeypatch):
    from opptune.daemon.models import registry
    monkeypatch.setitem(registry.MODELERS, "ghost", "no_such_module:Ghost")
    p = np.array([1.0, 2, 4, 8, 16])
    sel = choose(Observations(cores=p, time_s=10 * (0.1 + 0.9 / p)), ["ghost", "amdahl"])
    assert sel.name == "amdahl"
    assert "not installed" in sel.scores["ghost"]["error"]


def test_too_little_data():
    with pytest.raises(NotEnoughData):
        choose(Observations(cores=[1.0], time_s=[2.0]), list(ANALYTIC))
    sel = choose(Observations(cores=[1.0, 2.0], time_s=[2.0, 1.1]), list(ANALYTIC))
    assert sel.name == "amdahl" and sel.folds == 0


def test_extrapolation_axes_from_the_query():
    from opptune.daemon.models.select import extrapolation_axes
    p = np.tile([1.0, 2, 4, 8], 2)
    f = np.repeat([1000.0, 1400.0], 4)
    obs = Observations(cores=p, time_s=10 / p, freq_mhz=f)
    assert extrapolation_axes(obs, None) == []
    assert extrapolation_axes(obs, "interpolate") == []
    assert extrapolation_axes(obs, "extrapolate") == ["cores_up", "freq_up"]
    assert extrapolation_axes(obs, Observations.query([2, 4], [1000, 1400])) == []
    assert extrapolation_axes(obs, Observations.query([16], [1200])) == ["cores_up"]
    assert extrapolation_axes(obs, Observations.query([4], [1800])) == ["freq_up"]
    assert extrapolation_axes(obs, Observations.query([0.5], [800])) == ["cores_down", "freq_down"]
    with pytest.raises(ValueError):
        extrapolation_axes(obs, "sideways")


def test_forward_chaining_splits_hold_out_the_largest_cores_and_highest_freq():
    from opptune.daemon.models.select import extrapolation_splits
    p = np.tile([1.0, 2, 4, 8, 16], 2)
    f = np.repeat([1000.0, 1400.0], 5)
    obs = Observations(cores=p, time_s=10 / p, freq_mhz=f)
    splits = extrapolation_splits(obs, ["cores_up", "freq_up"])
    # cores: train < 4 / test >= 4, train < 8 / test >= 8, train < 16 / test 16; then freq
    assert [sorted(set(p[tr])) for tr, _ in splits[:3]] == [[1, 2], [1, 2, 4], [1, 2, 4, 8]]
    assert [sorted(set(p[te])) for _, te in splits[:3]] == [[4, 8, 16], [8, 16], [16]]
    tr, te = splits[3]
    assert set(f[tr]) == {1000.0} and set(f[te]) == {1400.0}
    for tr, te in splits:
        assert not np.any(tr & te)


def test_extrapolation_choice_prefers_the_model_that_extrapolates():
    # retrograde scaling that only shows beyond the middle of the range: random folds see
    # mostly interpolation; forward chaining sees the turn and must pick usl, and the chosen
    # model must predict the unseen large core counts well
    p = np.arange(1, 25, dtype=float)
    t = 40 * (1 + 0.02 * (p - 1) + 0.002 * p * (p - 1)) / p
    obs = Observations(cores=p, time_s=t)
    query = Observations.query([32, 48, 64])
    truth = 40 * (1 + 0.02 * (query.cores - 1) + 0.002 * query.cores * (query.cores - 1)) / query.cores
    sel = choose(obs, ["amdahl", "usl"], target=query, rule="fallback")
    # the last 3 core counts as origins, plus the cut that holds out as far as the query goes
    # (64 / 24 = 2.7 x: train on 1..9 cores, test on 10..24)
    assert sel.scheme == "extrapolate:cores_up" and sel.folds == 4
    assert sel.name == "usl"
    assert sel.scores["usl"]["cv_mape"] < sel.scores["amdahl"]["cv_mape"]
    assert np.allclose(sel.model.predict(query).value, truth, rtol=0.02)
    # the default combination weighs usl (nearly) alone: Amdahl cannot follow the turn
    sel = choose(obs, ["amdahl", "usl"], target=query, rule="combine")
    assert sel.scheme == "extrapolate:cores_up" and sel.folds == 4
    # hold (joins every combination) validates flat near the turn; the far fold sees it fail
    assert sel.name == "usl" or (sel.model.weights.get("amdahl", 0) < 0.01
                                 and sel.model.weights.get("hold", 0) < 0.01)
    assert np.allclose(sel.model.predict(query).value, truth, rtol=0.02)
    # the default (no target) keeps the k-fold scheme
    assert choose(obs, ["amdahl", "usl"]).scheme == "kfold"
    # a query inside the range is interpolation
    assert choose(obs, ["amdahl", "usl"], target=Observations.query([3, 5])).scheme == "kfold"


def test_extrapolation_with_too_few_levels_falls_back_to_kfold():
    obs = Observations(cores=[1.0, 2.0, 1.0, 2.0], time_s=[10.0, 5.5, 10.1, 5.4])
    sel = choose(obs, ["amdahl"], target="extrapolate")
    assert sel.scheme == "kfold" and sel.name == "amdahl"


def test_one_standard_error_rule_falls_back_to_hold_when_validation_is_one_point():
    # relearn-like weak scaling: 3 core counts, time rising; forward chaining has a single
    # fold with a single held-out point, so no standard error: the simplest model (hold) wins,
    # while the lowest-score rule picks usl, whose p^2 term over-predicts 256 and 512 cores
    p = np.array([32.0, 64, 128])
    t = np.array([405.7, 574.1, 939.8])
    obs = Observations(cores=p, time_s=t)
    query = Observations.query([256, 512])
    sel = choose(obs, list(ANALYTIC), target=query)
    assert sel.scheme == "extrapolate:cores_up" and sel.name == "hold"
    assert np.allclose(sel.model.predict(query).value, 939.8)
    comb = choose(obs, list(ANALYTIC), target=query, rule="combine")
    assert comb.name == "hold" and "combo" not in comb.scores  # one point weighs nothing
    old = choose(obs, ["amdahl", "usl", "memwall"], target=query, rule="min")
    assert old.name == "usl"
    assert np.all(old.model.predict(query).value > 1.3 * 939.8)


def test_enough_held_out_points_rank_the_models_and_hold_joins_only_the_combination():
    p = np.arange(1, 17, dtype=float)
    t = 10 * (0.05 + 0.95 / p) * (1 + 0.01 * np.sin(7 * p))
    obs = Observations(cores=p, time_s=t)
    sel = choose(obs, list(ANALYTIC), target="extrapolate", rule="fallback")
    assert sel.name == "amdahl" and "hold" not in sel.scores
    # the combination weighs hold with the rest: it validates badly here, so it is left out
    sel = choose(obs, list(ANALYTIC), target="extrapolate", rule="combine")
    assert "hold" in sel.scores and "hold" not in getattr(sel.model, "weights", {})
    for rule in ("fallback", "1se", "min"):
        sel = choose(obs, [*ANALYTIC, "hold"], target="extrapolate", rule=rule)
        assert sel.name == "amdahl"
        assert sel.scores["hold"]["cv_mape"] > 5 * sel.scores["amdahl"]["cv_mape"]
    # hold as an ordinary candidate of the combination: it validates badly, so weighs little
    sel = choose(obs, [*ANALYTIC, "hold"], target="extrapolate", rule="combine")
    assert sel.model.weights.get("hold", 0) < 0.05
    with pytest.raises(ValueError):
        choose(Observations(cores=p, time_s=t), ["amdahl"], rule="lowest")


@pytest.mark.parametrize("times, rule", [
    # one held-out point: the simplest-adequate fallback took Amdahl, the worst on it
    ([10.0, 5.37, 4.443], "combine"),
    ([10.0, 5.37, 4.443], "fallback"),
    # two candidates: "1se" took the simpler, the worse of the two
    ([10.0, 6.899, 5.786], "1se"),
])
def test_never_picks_the_candidate_with_the_worst_held_out_error(times, rule):
    obs = Observations(cores=np.array([1.0, 2, 4]), time_s=np.array(times))
    sel = choose(obs, ["amdahl", "usl"], target="extrapolate", rule=rule)
    valid = {n: s["cv_mape"] for n, s in sel.scores.items()
             if s["error"] is None and n != "combo"}
    assert len(valid) >= 2 and max(valid.values()) > 1.01 * min(valid.values())
    assert valid.get(sel.name, -1) < max(valid.values()), (sel.name, valid)


def test_worst_candidates_ties_and_single_sets():
    from opptune.daemon.models.select import worst_candidates

    def sc(**m):
        return {n: {"cv_mape": v, "error": None} for n, v in m.items()}
    assert worst_candidates(sc(a=1.0, b=2.0, c=2.0001)) == {"b", "c"}   # a tie at the top
    assert worst_candidates(sc(a=1.0, b=1.0)) == set()                  # all tie: no worst
    assert worst_candidates(sc(a=1.0)) == set()
    s = sc(a=1.0, b=3.0)
    s["b"]["error"] = "fold 0: failed"
    assert worst_candidates(s) == set()                                 # only a is validated


def test_one_held_out_point_never_excludes_hold_as_the_worst():
    # relearn "Update global tree": a tenfold jump at the last core count; every model misses
    # the single held-out point by ~90 %, hold within 0.1 % of the worst. One point cannot
    # name the worst any more than the best: the bounded fallback stays, usl's p^2 does not
    p = np.array([32.0, 64, 128])
    t = np.array([2.6515e-06, 2.6735e-06, 2.7292e-05])
    q = Observations.query([256, 512])
    sel = choose(Observations(cores=p, time_s=t), ["amdahl", "usl"], target=q)
    assert sel.name == "hold"
    assert np.allclose(sel.model.predict(q).value, t[-1])


def test_far_fold_reaches_as_far_as_the_query_in_physical_cores():
    p = np.arange(1.0, 9.0)
    obs = Observations(cores=p, time_s=10 / p)
    near = extrapolation_splits(obs, ["cores_up"])
    far = extrapolation_splits(obs, ["cores_up"], reach=4.0)
    assert len(near) == 3 and len(far) == 4
    tr, te = far[0]  # 8 / 4 = 2: train on 1-2 cores, test on 3-8
    assert set(p[tr]) == {1, 2} and set(p[te]) == set(range(3, 9))
    # beyond the physical cores only the SMT yield is asked: no fold can mimic that distance
    q = Observations.query([16.0])
    smt = Observations(cores=p, time_s=10 / p, counters={"hw_phys_cores": np.full(8, 8.0)})
    assert choose(smt, ["amdahl"], target=q).folds == 3
    assert choose(obs, ["amdahl"], target=q).folds == 4


def test_a_fold_left_with_one_frequency_validates_the_shape_and_twins_go_to_the_closer_fit():
    # 2 cores x 2 frequencies, asked at a higher clock; the serial share grows with the clock
    # (memory stalls do not scale with F), which Amdahl's speedup cannot follow
    from opptune.daemon.models import registry as reg
    from opptune.daemon.models.select import _level_free, _shape_base

    def truth(p, f):
        s = 0.05 + 0.05 * f / 1000
        return (5 + 40000 / f) * (s + (1 - s) / p)
    p, f = np.array([1.0, 2, 1, 2]), np.array([1000.0, 1000, 1400, 1400])
    obs = Observations(cores=p, time_s=truth(p, f), freq_mhz=f)
    q = Observations.query([1.0, 2.0], [1800.0, 1800.0])
    assert _level_free(obs, f < 1400) and not _level_free(obs, f > 0)
    assert list(_shape_base(obs)) == [0, 0, 2, 2]
    sel = choose(obs, ["amdahl", "usl", "memwall"], target=q)
    assert sel.scheme == "extrapolate:freq_up"
    # the fold's training part has one frequency, where every model scales T1 by 1/F (5 %
    # off here): scored on the shape at 1400 MHz only, the errors are well under that
    assert all(s["cv_mape"] < 1.0 for s in sel.scores.values() if s["error"] is None)
    # Amdahl and hold predict the same shape in the fold; hold follows all four points,
    # Amdahl does not: hold takes the weight, and the prediction is hold's
    want = truth(q.cores, q.freq_mhz)
    got = sel.model.predict(q).value
    assert "amdahl" not in (getattr(sel.model, "weights", None) or {})
    assert np.all(np.abs(got / want - 1) < 0.005)
    amdahl = reg.get("amdahl").fit(obs).predict(q).value
    assert np.all(np.abs(amdahl / want - 1) > 0.01)
    # nothing validated the level at the new clock: the interval reaches the hold forecast
    assert sel.model.quality["interval_held_out"] == 0.0
