"""Persistence baseline (hold): interpolation inside, last value outside, a + b/F across freqs."""

import numpy as np
import pytest

from opptune.daemon.models import registry
from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.hold import HoldModeler, dvfs_law


def test_holds_the_last_and_first_value_outside_the_measured_cores():
    p = np.array([32.0, 64, 128, 32, 64, 128])
    t = np.array([400.0, 570, 940, 410, 580, 940])
    fit = HoldModeler().fit(Observations(cores=p, time_s=t))
    v = fit.predict(Observations.query([256, 512, 16])).value
    assert np.allclose(v, [940, 940, np.sqrt(400 * 410)])
    assert fit.predict(Observations.query([128])).value[0] == pytest.approx(940)


def test_interpolates_log_time_linearly_in_log_cores():
    fit = registry.get("hold").fit(Observations(cores=[1.0, 4.0], time_s=[16.0, 1.0]))
    # halfway in log p (p = 2) is halfway in log t (t = 4)
    assert fit.predict(Observations.query([2.0])).value[0] == pytest.approx(4.0)
    pred = fit.predict(Observations.query([2.0]))
    assert pred.lower[0] < 4.0 < pred.upper[0]


def test_unseen_frequency_scales_the_nearest_curve_by_one_over_f():
    p = np.tile([1.0, 2, 4], 2)
    f = np.repeat([1000.0, 1400.0], 3)
    t = 1.4e4 / f / p
    fit = HoldModeler().fit(Observations(cores=p, time_s=t, freq_mhz=f))
    v = fit.predict(Observations.query([1, 4, 8], [1800, 1800, 1800])).value
    assert np.allclose(v, 1.4e4 / 1800 / np.array([1, 4, 4]))
    assert np.allclose(fit.predict(Observations.query(p, f)).value, t)
    assert fit.quality["mape"] == pytest.approx(0.0, abs=1e-9)


def test_unseen_frequency_follows_the_two_part_law_of_the_measured_ones():
    # t = a + b / F per core count (a memory part that does not scale with the clock):
    # two measured frequencies fix it, a third follows; pure 1/F scaling would miss it
    p = np.tile([1.0, 2.0], 2)
    f = np.repeat([1000.0, 1400.0], 2)
    a, b = np.where(p == 1, 8.0, 3.0), np.where(p == 1, 40000.0, 24000.0)
    fit = HoldModeler().fit(Observations(cores=p, time_s=a + b / f, freq_mhz=f))
    v = fit.predict(Observations.query([1, 2, 4], [1800, 1800, 1800])).value
    assert np.allclose(v, [8 + 40000 / 1800, 3 + 24000 / 1800, 3 + 24000 / 1800])
    assert not np.allclose(v[0], (8 + 40000 / 1400) * 1400 / 1800, rtol=0.01)


def test_two_part_law_keeps_both_parts_non_negative():
    f = np.array([1000.0, 1400.0])
    # faster than 1/F (negative memory part): the clock-bound part alone, through the origin
    assert dvfs_law(f, 2e4 / f ** 1.5 * 1e3 ** 0.5, 1800) == pytest.approx(
        np.dot(1 / f, 2e4 / f ** 1.5 * 1e3 ** 0.5) / np.dot(1 / f, 1 / f) / 1800)
    # slower at the higher clock: nothing scales, the mean is held
    assert dvfs_law(f, np.array([10.0, 11.0]), 1800) == pytest.approx(10.5)


def test_needs_two_core_counts():
    with pytest.raises(NotEnoughData):
        HoldModeler().fit(Observations(cores=[4.0, 4.0], time_s=[1.0, 1.1]))


def test_saved_state_round_trips_through_json():
    import json
    p = np.tile([1.0, 2, 4], 2)
    f = np.repeat([1000.0, 1400.0], 3)
    fit = HoldModeler().fit(Observations(cores=p, time_s=1.4e4 / f / p, freq_mhz=f))
    back = HoldModeler().from_state(json.loads(json.dumps(fit.to_state())))
    q = Observations.query([1, 3, 8], [1000, 1200, 1800])
    a, b = fit.predict(q), back.predict(q)
    assert np.allclose(a.value, b.value) and np.allclose(a.upper, b.upper)
    assert back.quality == fit.quality


def test_a_frequency_measured_at_one_core_count_follows_the_others_shape():
    """A recommendation verified at a clock no sweep measured adds that clock at one core
    count. Held flat, its one point was its time at every core count: triad on a virtual
    odroid-xu4, 4 cores at 1200 MHz verified at 0.038 s, was predicted 0.038 s at one core,
    where 800 and 1400 MHz measured 0.17 and 0.14 s (walk31: the report's curve, and the
    combination in which hold weighed 0.54). It takes the other clocks' shape through its
    point; those clocks and an unseen one are predicted as before from the measured curves."""
    p = np.tile([1.0, 2, 4, 8], 2)
    f = np.repeat([800.0, 1400.0], 4)
    t = (0.05 + 80.0 / f) / np.array([1, 1.9, 3.4, 4.0] * 2)
    law = HoldModeler().fit(Observations(cores=p, time_s=t, freq_mhz=f))
    t1200 = law.predict(Observations.query([4.0], [1200.0])).value[0]
    fit = HoldModeler().fit(Observations(cores=np.append(p, 4.0),
                                         time_s=np.append(t, t1200 * 1.02),
                                         freq_mhz=np.append(f, 1200.0)))
    q = Observations.query([1, 2, 4, 8], [1200.0] * 4)
    assert np.allclose(fit.predict(q).value, law.predict(q).value * 1.02)
    # the measured clocks keep their own curves; the single point is predicted as measured
    assert np.allclose(fit.predict(Observations.query(p, f)).value, t)
    assert fit.predict(Observations.query([4.0], [1200.0])).value[0] == pytest.approx(
        t1200 * 1.02)
    # with one shaped curve the single point takes its shape (1/F across clocks)
    one = HoldModeler().fit(Observations(cores=[1.0, 2, 4, 2], time_s=[8.0, 4.4, 2.6, 3.0],
                                         freq_mhz=[1000.0, 1000, 1000, 2000]))
    assert np.allclose(one.predict(Observations.query([1, 2, 4], [2000.0] * 3)).value,
                       np.array([8.0, 4.4, 2.6]) * 3.0 / 4.4)
