"""Prior-based prediction from one or two measurements (daemon/models/prior.py)."""

import numpy as np
import pytest

from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.prior import fit_prior


def _amdahl(s: float, t1: float, p: np.ndarray) -> np.ndarray:
    return t1 * ((1 - s) + s / p)


P = np.array([1.0, 2, 4, 8])
OTHERS = [Observations(cores=P, time_s=_amdahl(s, t1, P))
          for s, t1 in ((0.80, 10), (0.90, 50), (0.95, 7), (0.85, 100), (0.99, 3))]


def test_one_measurement_follows_the_platforms_median_curve_with_a_wide_interval():
    truth = _amdahl(0.9, 20.0, P)
    fit = fit_prior(Observations(cores=[1.0], time_s=[20.0]), OTHERS)
    pr = fit.predict(Observations.query(P))
    assert fit.name == "prior" and fit.quality["prior_based"] == 1.0
    assert np.allclose(pr.value, truth, rtol=0.05)          # median workload: s = 0.9
    assert np.all((pr.lower <= truth) & (truth <= pr.upper))
    assert pr.upper[3] / pr.lower[3] > 1.5                  # the workloads disagree at 8
    assert pr.value[0] == pytest.approx(20.0)


def test_two_measurements_anchor_at_the_nearer_one_and_frequency_scales_by_one_over_f():
    fit = fit_prior(Observations(cores=[1.0, 4.0], time_s=[20.0, 6.0],
                                 freq_mhz=[1000.0, 1000.0]), OTHERS)
    pr = fit.predict(Observations.query([8.0, 4.0], [1000.0, 2000.0]))
    med8 = np.median([_amdahl(s, 1, 8.0) / _amdahl(s, 1, 4.0) for s in (.8, .9, .95, .85, .99)])
    assert pr.value[0] == pytest.approx(6.0 * med8)
    assert pr.value[1] == pytest.approx(3.0)


def test_refuses_without_enough_other_workloads():
    with pytest.raises(NotEnoughData, match="at least 2 other workloads"):
        fit_prior(Observations(cores=[1.0], time_s=[5.0]), OTHERS[:1])
    with pytest.raises(NotEnoughData, match="at least one measured run"):
        fit_prior(Observations(cores=[1.0], time_s=[np.nan]), OTHERS)


def test_too_few_curves_here_borrows_this_workloads_curve_from_another_platform():
    from opptune.daemon.models.prior import MIN_HALF_ELSEWHERE, PriorModeler, StoredGroup
    there = Observations(cores=P, time_s=_amdahl(0.9, 40.0, P))
    stored = [StoredGroup("new", "far", there), StoredGroup("x", "far", OTHERS[0])]
    fit = fit_prior(Observations(cores=[1.0], time_s=[20.0]), [], workload="new",
                    platform="here", stored=stored)
    pr = fit.predict(Observations.query(P))
    assert fit.quality["prior_based"] == 1.0
    assert "this workload's curve on far" in fit.quality["prior_source"]
    assert np.allclose(pr.value, _amdahl(0.9, 20.0, P))     # its shape, this level
    assert np.all(np.log(pr.upper / pr.value) >= MIN_HALF_ELSEWHERE - 1e-12)
    back = PriorModeler().from_state(fit.to_state())
    assert back.quality["prior_source"] == fit.quality["prior_source"]
    assert np.allclose(back.predict(Observations.query(P)).upper, pr.upper)
    # its own curve elsewhere comes before the platform's other workloads
    both = fit_prior(Observations(cores=[1.0], time_s=[20.0]), OTHERS, workload="new",
                     platform="here", stored=stored)
    assert both.quality["prior_source"] == "this workload's curve on far"
    # without the store's other platforms: the same refusal as before
    with pytest.raises(NotEnoughData, match="at least 2 other workloads"):
        fit_prior(Observations(cores=[1.0], time_s=[20.0]), [])


def test_other_workloads_come_from_the_platform_nearest_by_mpet_distance():
    from opptune.daemon.models.prior import StoredGroup, platform_distances
    # "shared" runs on all three platforms: on "twin" it scales as here, on "odd" it does not
    def grp(w, plat, s, t1=10.0):
        return StoredGroup(w, plat, Observations(cores=P, time_s=_amdahl(s, t1, P)))
    stored = [grp("shared", "here", 0.9), grp("shared", "twin", 0.9), grp("shared", "odd", 0.2),
              grp("b", "twin", 0.95), grp("c", "twin", 0.97),     # scale well
              grp("b", "odd", 0.3), grp("c", "odd", 0.4)]         # barely scale
    d = platform_distances("here", stored)
    assert d["twin"] < d["odd"]
    measured = Observations(cores=[1.0], time_s=[20.0])
    fit = fit_prior(measured, [stored[0].obs], workload="new", platform="here", stored=stored)
    assert "nearest by MPET distance (twin" in fit.quality["prior_source"]
    # odd is farther than MAX_DISTANCE: only twin's shared, b, c lend their curves
    assert d["odd"] > 0.5 and "odd" not in fit.quality["prior_source"]
    assert fit.quality["n_groups"] == 3.0
    pr = fit.predict(Observations.query([8.0]))
    want = 20.0 * _amdahl(0.95, 1.0, 8.0)    # the median of twin's shared, b, c: b
    assert pr.value[0] == pytest.approx(want)
    # nothing shared with any platform and no same workload elsewhere: refused, naming why
    with pytest.raises(NotEnoughData, match="near by MPET distance"):
        fit_prior(measured, [], workload="new", platform="lonely", stored=stored[3:])
