"""Intervals sized by the choice's held-out errors (daemon/models/calibrate.py)."""

import numpy as np
import pytest
from scipy import stats

from opptune.daemon.models import registry
from opptune.daemon.models.base import Observations
from opptune.daemon.models.calibrate import CalibratedFit, distance, error_half
from opptune.daemon.models.select import choose


def test_error_half_is_the_t_quantile_of_the_rms_error():
    e = np.array([0.1, -0.2, 0.2])
    assert error_half(e, 0.9) == pytest.approx(stats.t.ppf(0.95, 3) * np.sqrt(0.03))
    assert error_half(np.empty(0), 0.9) == 0.0
    # one point says little: much wider than the point itself
    assert error_half(np.array([0.1]), 0.9) > 6 * 0.1


def test_distance_is_the_log_ratio_outside_the_training_range():
    rng = (1.0, 4.0, 1000.0, 1400.0)
    d = distance(np.array([2.0, 8.0, 2.0, 0.5]), np.array([1200.0, 1200, 2800, 1000]), rng)
    assert np.allclose(d, [0.0, np.log(2), np.log(2), np.log(2)])


def test_extrapolated_interval_grows_with_distance_and_never_narrows():
    p = np.array([1.0, 2, 4, 8])
    obs = Observations(cores=p, time_s=10 / p)
    inner = registry.get("amdahl").fit(obs)
    fit = CalibratedFit(inner, h0=0.0, rate=0.2, rng=(1.0, 8.0, None, None), n_held=3)
    q = Observations.query([4.0, 16.0, 64.0])
    own, cal = inner.predict(q), fit.predict(q)
    assert np.allclose(cal.value, own.value)
    assert np.all(cal.lower <= own.lower) and np.all(cal.upper >= own.upper)
    assert cal.upper[0] == pytest.approx(own.upper[0])     # inside: the model's own
    assert cal.upper[2] / cal.value[2] == pytest.approx(np.exp(0.2 * np.log(8)))
    assert fit.name == "amdahl" and fit.to_state() == inner.to_state()


def test_the_choice_widens_an_extrapolation_by_its_forward_errors():
    # Amdahl-like up to 8 cores, then the curve flattens: the folds see the model miss the
    # larger core counts, so the interval at 32 cores is wider than the model's own
    p = np.arange(1.0, 13.0)
    t = 100 * (0.02 + 0.98 / np.minimum(p, 8)) * (1 + 0.02 * np.sin(5 * p))
    obs = Observations(cores=p, time_s=t)
    q = Observations.query([24.0, 32.0])
    sel = choose(obs, ["amdahl", "usl"], target=q)
    assert isinstance(sel.model, CalibratedFit) and sel.held_log_err.size >= 2
    own = sel.model.inner.predict(q)
    cal = sel.model.predict(q)
    assert np.all(np.log(cal.upper / cal.value) > np.log(own.upper / own.value))
    assert sel.model.quality["interval_log_half_per_log_distance"] > 0


def test_two_points_without_validation_reach_the_hold_forecast():
    obs = Observations(cores=[1.0, 2.0], time_s=[10.0, 5.2])
    sel = choose(obs, ["amdahl"], target=Observations.query([8.0]))
    assert sel.scheme == "none"
    pr = sel.model.predict(Observations.query([8.0, 1.5]))
    assert pr.value[0] < 5.0 and pr.upper[0] == pytest.approx(5.2)  # reaches "it stops at 2"
    own = sel.model.inner.predict(Observations.query([1.5]))
    assert pr.upper[1] == pytest.approx(own.upper[0])  # inside the range: unchanged


def test_cores_beyond_every_fold_reach_the_hold_forecast_though_frequencies_validated():
    # 1-2 cores at three frequencies (a board characterized with --max-cores 2): the folds
    # validate frequencies and interpolation, none goes to more cores. At 8 cores the
    # interval must reach "it stops at 2 cores" (an xu4 so measured was recommended 8 cores
    # with +-2 % and measured 170 % off); at a measured core count it stays the model's.
    rng = np.random.default_rng(4)
    p = np.repeat([1.0, 2.0], 9)
    f = np.tile(np.repeat([600.0, 1000.0, 1400.0], 3), 2)
    t = (0.1 + 0.9 / p) * 1400.0 / f * (1 + 0.005 * rng.standard_normal(p.size))
    obs = Observations(cores=p, time_s=t, freq_mhz=f)
    q = Observations.query([8.0, 2.0], [1400.0, 1000.0])
    sel = choose(obs, ["amdahl", "usl"], target=q)
    pr = sel.model.predict(q)
    t2 = np.median(t[(p == 2) & (f == 1400)])
    assert pr.value[0] < 0.5 * t2 and pr.upper[0] == pytest.approx(t2, rel=0.02)
    assert pr.upper[1] < 1.1 * pr.value[1]  # measured: the validated interval stands


def test_enough_held_out_errors_narrow_an_interval_down_to_the_noise():
    from opptune.daemon.models.calibrate import calibrated, min_held
    assert min_held(0.9) == 10 and min_held(0.5) == 2
    p = np.arange(1.0, 13.0)
    t = 100 * (0.05 + 0.95 / p) * (1 + 0.001 * np.sin(7 * p))   # 0.1 % noise
    obs = Observations(cores=p, time_s=t)
    inner = registry.get("amdahl").fit(obs)
    q = Observations.query([3.0, 6.0])
    own = inner.predict(q)
    small = np.full(12, 0.001)
    fit = calibrated(inner, small, np.zeros(12), obs, 0.9)
    cal = fit.predict(q)
    assert fit.quality["interval_from_held_out"] == 1.0
    assert np.all(cal.upper < own.upper) and np.all(cal.lower > own.lower)
    # floored at the run-to-run noise: the residuals on the training data
    resid = np.log(t / inner.predict(obs).value)
    assert np.log(cal.upper[0] / cal.value[0]) == pytest.approx(
        max(error_half(small, 0.9), error_half(resid, 0.9)))
    # too few held-out points: never narrower than the model's own
    few = calibrated(inner, small[:9], np.zeros(9), obs, 0.9).predict(q)
    assert np.allclose(few.upper, own.upper) and np.allclose(few.lower, own.lower)
    # errors larger than the own interval widen it as before
    wide = calibrated(inner, np.full(12, 0.2), np.zeros(12), obs, 0.9).predict(q)
    assert np.all(wide.upper > own.upper)


def _amdahl_law(c):
    return 100 * (0.05 + 0.95 / c)


def _retrograde_law(c):
    # USL with a coherency term: time turns upward past about 20 cores
    return 100 * (1 + 0.03 * (c - 1) + 0.002 * c * (c - 1)) / c


def _fresh_draw_coverage(query_cores, law=_amdahl_law, sigma=0.02, seeds=10, draws=50):
    """Share (%) of fresh noisy draws of a known curve ``law`` (log-normal noise ``sigma``)
    inside the 90 % interval of the daemon's choice (fitter.fit_group, told the query) fitted
    on 16 noisy core counts, over ``seeds`` data sets."""
    from opptune.daemon.fitter import fit_group
    p = np.arange(1.0, 17.0)
    inside = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        obs = Observations(cores=p, time_s=law(p) * np.exp(sigma * rng.standard_normal(p.size)))
        q = Observations.query(np.asarray(query_cores, float))
        pr = fit_group(obs, target=q)[0].predict(q)
        fresh = law(q.cores)[None, :] * np.exp(sigma * rng.standard_normal((draws, len(q))))
        inside.append(np.mean((fresh >= pr.lower) & (fresh <= pr.upper)))
    return 100 * float(np.mean(inside))


def test_interpolated_90_percent_interval_covers_about_90_percent_of_fresh_draws():
    # the true law is a candidate and the noise is known: k-fold errors size the interval
    assert 80 <= _fresh_draw_coverage(np.arange(1.5, 16.0)) <= 97


def test_extrapolated_interval_holds_a_curve_that_turns_beyond_the_folds():
    # the folds end at 16 cores, the curve turns upward past 20: a narrower interval fitted to
    # the folds' mostly-noise errors (rate by the ratio of sums, docs/models.md) held 56 %
    assert _fresh_draw_coverage([20.0, 24.0, 32.0], _retrograde_law) >= 80


def test_extrapolated_90_percent_interval_is_not_wider_than_the_noise_needs():
    # the true law extrapolates without drift: the errors beyond the data are noise only, so
    # about 90 % of fresh draws, not all, fall inside (the rate per distance held 99 %: a
    # noise-sized error at a short fold distance was scaled up to the query's; measured 92 %)
    assert 80 <= _fresh_draw_coverage([20.0, 24.0, 32.0]) <= 97


def test_drift_fit_tells_noise_from_drift():
    from opptune.daemon.models.calibrate import drift_fit
    d = np.array([0.05, 0.1, 0.2, 0.4, 0.6, 0.8])
    # the same error at every distance: noise, it does not grow with the query's distance
    t, a, b = drift_fit(np.full(6, 0.02), d, 0.9)
    assert t == pytest.approx(stats.t.ppf(0.95, 4))      # n - 2 degrees of freedom
    assert a == pytest.approx(0.02 ** 2) and b == pytest.approx(0.0, abs=1e-12)
    # errors proportional to the distance: drift, no noise
    t, a, b = drift_fit(0.1 * d, d, 0.9)
    assert a == pytest.approx(0.0, abs=1e-12) and b == pytest.approx(0.01)
    assert drift_fit(np.array([0.1, 0.2]), np.array([0.1, 0.2]), 0.9) is None


def test_a_narrowed_interval_follows_the_variogram_and_adds_the_members_spread():
    from opptune.daemon.models.calibrate import calibrated, drift_fit, interval_state, with_interval
    from opptune.daemon.models.combine import CombinedFit
    p = np.arange(1.0, 9.0)
    obs = Observations(cores=p, time_s=100 * (0.05 + 0.95 / p))
    amdahl, hold = registry.get("amdahl").fit(obs), registry.get("hold").fit(obs)
    err = np.full(12, 0.01)                          # noise only: 1 % at every distance
    dist = np.linspace(0.05, 0.7, 12)
    q = Observations.query([8.0, 16.0, 64.0])
    single = calibrated(amdahl, err, dist, obs, 0.9)
    half = np.log(single.predict(q).upper / single.predict(q).value)
    t, a, b = drift_fit(err, dist, 0.9)
    assert np.allclose(half[1:], max(t * np.sqrt(a), single.noise))  # does not grow with d
    combo = CombinedFit([(amdahl, 0.8, None), (hold, 0.2, None)])
    fit = calibrated(combo, err, dist, obs, 0.9)
    pr = fit.predict(q)
    assert np.allclose(pr.value, combo.predict(q).value)        # the point stays
    lv = np.log([amdahl.predict(q).value, hold.predict(q).value])
    sd = np.sqrt(0.8 * 0.2) * np.abs(lv[0] - lv[1])            # two members' weighted SD
    base = np.where(distance(q.cores, None, (1.0, 8.0, None, None)) > 0,
                    max(t * np.sqrt(a), fit.noise), fit.noise)
    assert np.allclose(np.log(pr.upper / pr.value), np.hypot(base, stats.norm.ppf(0.95) * sd))
    # hold stops at 8 cores, Amdahl goes on: the members part, and the interval with them
    assert np.log(pr.upper[2] / pr.value[2]) > 10 * half[2]
    again = with_interval(combo, interval_state(fit)).predict(q)   # a saved fit: the same
    assert np.allclose(again.lower, pr.lower) and np.allclose(again.upper, pr.upper)


# --- pooled over the platform's other groups (models/pooled.py, calibrate.pooled) ---------

def _platform_group(rng, cores, sigma=0.01):
    """One workload of a platform: Amdahl with its own serial fraction, bending past 8 cores
    by (p / 8) ** b (b differs per workload: memory bandwidth, SMT...), with log-normal
    noise ``sigma``; returns (law, noisy observations at ``cores``)."""
    s, b = rng.uniform(0.02, 0.2), rng.normal(0.0, 0.1)

    def law(p):
        p = np.asarray(p, float)
        return 100 * (s + (1 - s) / p) * np.maximum(p / 8, 1.0) ** b
    p = np.asarray(cores, float)
    return law, Observations(cores=p, time_s=law(p) * np.exp(sigma * rng.standard_normal(p.size)))


def _pooled_coverage(n_others, trials=40, draws=20, cache=None):
    """Share (%) of fresh draws of a group's law at 12 and 16 cores inside the 90 % interval
    of the daemon's choice fitted on its cores 1-8 with ``n_others`` exchangeable workloads of
    the platform (measured at 1-16 cores) as ``others``; and the share without them."""
    from opptune.daemon.fitter import fit_group
    from opptune.daemon.models.pooled import ReplayCache
    q = Observations.query([12.0, 16.0])
    pooled_in, own_in = [], []
    for seed in range(trials):
        rng = np.random.default_rng(100 + seed)
        others = [_platform_group(rng, np.arange(1, 17))[1] for _ in range(n_others)]
        law, obs = _platform_group(rng, np.arange(1, 9))
        fresh = law(q.cores)[None, :] * np.exp(0.01 * rng.standard_normal((draws, len(q))))
        for dest, oth in ((pooled_in, others), (own_in, [])):
            pr = fit_group(obs, target=q, others=oth, cache=cache or ReplayCache())[0].predict(q)
            dest.append(np.mean((fresh >= pr.lower) & (fresh <= pr.upper)))
    return 100 * float(np.mean(pooled_in)), 100 * float(np.mean(own_in))


def test_pooled_interval_over_exchangeable_groups_covers_about_90_percent():
    # the bend past 8 cores differs per workload: the group's own folds cannot see it (its
    # own interval holds about 70 %), the other workloads measured further show how far such
    # curves go; about 90 %, not all (measured 90.6 %)
    pooled, own = _pooled_coverage(5)
    assert 80 <= pooled <= 97, (pooled, own)
    assert own < 80


def test_pooled_half_width_is_t_over_groups_times_their_rms_error():
    from opptune.daemon.models.calibrate import pooled_half
    h0, rate = np.array([0.01, 0.02, 0.03, np.nan]), np.array([0.1, 0.2, 0.3, 0.4])
    half, ok = pooled_half(h0, rate, np.array([0.0, 0.5]), 0.9, 3)
    # inside: the 3 groups with an inside error; outside: all 4, max(h0, rate d)
    assert half[0] == pytest.approx(stats.t.ppf(0.95, 3) * np.sqrt(np.mean([1e-4, 4e-4, 9e-4])))
    e = np.array([0.05, 0.1, 0.15, 0.2])
    assert half[1] == pytest.approx(stats.t.ppf(0.95, 4) * np.sqrt(np.mean(e ** 2)))
    assert ok.tolist() == [True, True]
    assert pooled_half(h0, rate, np.array([0.0]), 0.9, 4)[1].tolist() == [False]


def test_fewer_than_three_usable_other_groups_keep_the_groups_own_interval():
    from opptune.daemon.fitter import fit_group
    from opptune.daemon.models.pooled import ReplayCache
    rng = np.random.default_rng(7)
    _, obs = _platform_group(rng, np.arange(1, 9))
    two = [_platform_group(rng, np.arange(1, 17))[1] for _ in range(2)]
    # measured at 1-16 but not at 5 cores, one of the group's: not the same split
    gap = _platform_group(rng, np.array([1, 2, 3, 4, 6, 7, 8, 12, 16]))[1]
    q = Observations.query([12.0, 16.0])
    own = fit_group(obs, target=q)[0]
    for others in (two, two + [gap]):
        cache = ReplayCache()
        m = fit_group(obs, target=q, others=others, cache=cache)[0]
        assert "interval_pooled_groups" not in m.quality
        assert cache.misses == 0  # nothing replayed
        a, b = m.predict(q), own.predict(q)
        assert np.allclose(a.lower, b.lower) and np.allclose(a.upper, b.upper)
    m = fit_group(obs, target=q, others=two + [two[0]], cache=ReplayCache())[0]
    assert m.quality["interval_pooled_groups"] == 3
    assert np.allclose(m.predict(q).value, own.predict(q).value)  # the point stays


def test_a_replay_is_done_once_per_group_training_grid_and_query():
    from opptune.daemon.fitter import _choose
    from opptune.daemon.models.pooled import ReplayCache, replays
    rng = np.random.default_rng(3)
    others = [_platform_group(rng, np.arange(1, 17))[1] for _ in range(4)]
    _, g1 = _platform_group(rng, np.arange(1, 9))
    _, g2 = _platform_group(rng, np.arange(1, 9))   # another group, the same training grid
    q = Observations.query([12.0, 16.0])
    fits = []

    def fit(o, t):
        fits.append(len(o))
        return _choose(o, t)[0]
    cache = ReplayCache()
    first = replays(fit, g1, others, q, cache)
    assert len(first) == 4 and fits == [8] * 4 and cache.misses == 4
    assert replays(fit, g2, others, q, cache) == first  # the same replays, no new fit
    assert len(fits) == 4 and cache.hits == 4
    replays(fit, g1, others, Observations.query([32.0]), cache)  # another query: new ones
    assert len(fits) == 8
    _, g3 = _platform_group(rng, np.arange(1, 7))   # another training grid: new ones
    replays(fit, g3, others, q, cache)
    assert len(fits) == 12 and fits[-1] == 6
