"""The median's 95 % interval (shared/point_stats.py): its claimed coverage is checked by
seeded simulation on run-time-like distributions (right-skewed, with outliers), at a fixed
count and under the adaptive stop rule (stopping as soon as the interval is narrow)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from scipy import stats

from opptune.shared.point_stats import (StopRule, interval_from, median_ci, relative_ci,
                                        stop_reason, t_quantile)


def _lognormal(sigma):
    return lambda rng, shape: np.exp(rng.normal(0.0, sigma, shape))


def _base_plus_exp(scale):  # a floor plus right-skewed delays (scheduler, caches)
    return lambda rng, shape: 1.0 + rng.exponential(scale, shape)


def _with_outliers(sigma, share=0.05):  # a share of runs 20-50 % slower
    def draw(rng, shape):
        x = np.exp(rng.normal(0.0, sigma, shape))
        slow = rng.random(shape) < share
        return np.where(slow, x * (1.0 + rng.uniform(0.2, 0.5, shape)), x)
    return draw


DISTRIBUTIONS = {"lognormal 1 %": _lognormal(0.01), "lognormal 5 %": _lognormal(0.05),
                 "1 + exp(2 %)": _base_plus_exp(0.02),
                 "lognormal 2 % + 5 % outliers": _with_outliers(0.02)}


def _true_median(draw) -> float:
    return float(np.median(draw(np.random.default_rng(99), 400_000)))


def test_t_quantile_matches_scipy():
    for df in (1, 2, 3, 4, 5, 9, 19, 100):
        for p in (0.9, 0.95, 0.975):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=2e-3)


def test_interval_is_pyperf_median_and_stdev():
    xs = [1.0, 1.02, 0.99, 1.05]
    half = stats.t.ppf(0.975, 3) * (np.pi / 2) ** 0.5 * statistics.stdev(xs) / 2
    lo, hi = median_ci(xs)
    assert (lo, hi) == pytest.approx((1.01 - half, 1.01 + half), rel=2e-3)
    assert relative_ci(xs) == pytest.approx(half / 1.01, rel=2e-3)
    assert median_ci([1.0, 1.1]) is None and relative_ci([1.0, 1.1]) is None  # n < 3
    assert relative_ci([1.0, 1.0, 1.0]) == 0.0


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_coverage_at_a_fixed_count_is_95_to_99_percent(name):
    draw = DISTRIBUTIONS[name]
    truth = _true_median(draw)
    rng = np.random.default_rng(7)
    for n in (3, 4, 5, 6, 8, 10, 20):
        x = draw(rng, (4000, n))
        lo, hi = interval_from(np.median(x, axis=1), x.std(axis=1, ddof=1), n)
        coverage = float(np.mean((lo <= truth) & (truth <= hi)))
        assert 0.94 <= coverage <= 0.99, (name, n, coverage)


@pytest.mark.parametrize("name,draw", [
    # noise at which the interval of 3-10 runs is near the 2 % target: the worst case
    ("lognormal 1.5 %", _lognormal(0.015)), ("lognormal 2 %", _lognormal(0.02)),
    ("1 + exp(2 %)", _base_plus_exp(0.02)), ("lognormal 1.5 % + outliers", _with_outliers(0.015)),
])
def test_coverage_when_stopping_as_soon_as_narrow(name, draw):
    """The stop rule as the agent runs it: the interval a point stops with covers the true
    median in >= 92 % of points (94-96 % in these cases; 95-99 % at a fixed count: the
    optional stopping bias)."""
    truth = _true_median(draw)
    rule = StopRule(max_reps=10, target_ci=0.02)
    rng = np.random.default_rng(11)
    covered = runs = 0
    trials = 1500
    for row in draw(rng, (trials, rule.max_reps)).tolist():
        for n in range(1, rule.max_reps + 1):
            reason, rel = stop_reason(rule, row[:n], n, 0.0)
            if reason:
                break
        med = statistics.median(row[:n])
        covered += abs(med - truth) <= rel * med
        runs += n
    coverage = covered / trials
    assert coverage >= 0.92, (name, coverage, runs / trials)
