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
