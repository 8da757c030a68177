"""Statistics of one point (the repeated runs of one configuration), from pyperf.

The values of a point are a ``pyperf.Benchmark`` (one ``pyperf.Run`` per value, built with
``collect_metadata=False``: pyperf's metadata collection costs about 8 ms, so it is never done
per point or run). Median, MAD, mean and stdev and the "may be unstable" warnings are
pyperf's. Only what pyperf does not offer is here:

* the 95 % confidence interval of the median, from pyperf's median and stdev:
  median +- t(n-1, 97.5 %) x sqrt(pi/2) x stdev / sqrt(n). sqrt(pi/2) is the asymptotic
  standard error of a normal sample's median over its mean's (efficiency 2/pi). It needs
  3 values (a distribution-free interval from order statistics needs 6: n = 5 reaches only
  93.75 %; with 6 as the least count, 40 % fewer runs than a fixed 10 is the best case).
  Its coverage, checked by seeded simulation on log-normal, floor + exponential and 5 %
  outlier run times (tests/test_point_stats.py), is 95-99 % at a fixed n from 3 to 20 (it is
  conservative); an outlier inflates the stdev, so a point with one runs on rather than stop
  on a too-narrow interval. Stopping as soon as the interval is narrow enough favours the
  samples whose stdev came out low: the interval a point stops with covers 94-96 % (same
  test; lowest where the noise puts the interval near the target);
* the stop rule of adaptive repetition (:func:`stop_reason`);
* the MAD outlier rule (:func:`outliers`).

Pure Python and pyperf only: the agent, which has no numpy, uses it too.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

import pyperf

CONFIDENCE = 0.95
MIN_VALUES_FOR_CI = 3  # the smallest n with an interval whose coverage was checked
MEDIAN_SE = math.sqrt(math.pi / 2)  # standard error of the median / of the mean (normal data)
MAD_SCALE = 1.4826  # MAD x 1.4826 estimates the standard deviation of normal data
OUTLIER_K = 3.0  # |x - median| > 3 x 1.4826 x MAD (Leys et al. 2013, "Detecting outliers")

STOP_CI = "ci"
STOP_MAX_REPS = "max_reps"
STOP_BUDGET = "budget"


def benchmark(values: Sequence[float], name: str = "point",
              metadata: dict[str, Any] | None = None) -> pyperf.Benchmark:
    """The values (seconds, > 0) as a pyperf Benchmark, one run per value."""
    meta = {"name": name, "unit": "second", **(metadata or {})}
    return pyperf.Benchmark([pyperf.Run([float(v)], metadata=meta, collect_metadata=False)
                             for v in values])


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (0.5 < p < 1): exact for 1 and 2 degrees of freedom, else the
    Cornish-Fisher expansion in 1/df (Abramowitz & Stegun 26.7.5), within 0.2 % of the exact
    value for p <= 0.975 (no scipy on the agent)."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z)
            / (92160 * v ** 4))


def interval_from(median: float, stdev: float, n: int, confidence: float = CONFIDENCE
                  ) -> tuple[float, float] | None:
    """(low, high) of the median's interval from its median, stdev and count (the formula
    in the module's docstring); None below MIN_VALUES_FOR_CI values."""
    if n < MIN_VALUES_FOR_CI:
        return None
    half = t_quantile(0.5 + confidence / 2, n - 1) * MEDIAN_SE * stdev / math.sqrt(n)
    return median - half, median + half


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE
              ) -> tuple[float, float] | None:
    """(low, high) of the median's interval, from pyperf's median and stdev of ``values``;
    None with fewer than MIN_VALUES_FOR_CI values."""
    if len(values) < MIN_VALUES_FOR_CI:
        return None
    b = benchmark(values)
    return interval_from(b.median(), b.stdev(), len(values), confidence)


def relative_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> float | None:
    """The half-width of the median's interval over the median (the "+- x %" of the
    median); None when no interval is possible."""
    if len(values) < MIN_VALUES_FOR_CI:
        return None
    b = benchmark(values)
    med = b.median()
    if med <= 0:
        return None
    low, _ = interval_from(med, b.stdev(), len(values), confidence)  # type: ignore[misc]
    return (med - low) / med


@dataclass
class PointStats:
    """What a report says about one point: pyperf's figures and its warnings."""
    n: int
    median: float | None = None
    mad: float | None = None
    mean: float | None = None
    stdev: float | None = None
    ci: tuple[float, float] | None = None
    ci_rel: float | None = None
    warnings: list[str] = field(default_factory=list)  # pyperf's "may be unstable" reasons

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "median": self.median, "mad": self.mad, "mean": self.mean,
                "stdev": self.stdev, "ci": list(self.ci) if self.ci else None,
                "ci_rel": self.ci_rel, "unstable": list(self.warnings)}


def point_stats(values: Sequence[float]) -> PointStats:
    """pyperf's statistics of a point's values (times, seconds); n = 0 gives only n."""
    vals = [float(v) for v in values if v is not None and v > 0]
    if not vals:
        return PointStats(0)
    b = benchmark(vals)
    return PointStats(n=len(vals), median=b.median(), mad=b.median_abs_dev(), mean=b.mean(),
                      stdev=b.stdev() if len(vals) >= 2 else None, ci=median_ci(vals),
                      ci_rel=relative_ci(vals), warnings=unstable(b))


def unstable(bench: pyperf.Benchmark) -> list[str]:
    """pyperf's reasons why ``bench`` "may be unstable" (its ``stats``/``show`` checks)."""
    try:
        from pyperf._cli import format_checks  # pyperf's own rules; not a public name
        lines = format_checks(bench)
    except Exception:  # a pyperf without it: no warnings rather than a failing report
        return []
    return [ln[2:] for ln in lines if ln.startswith("* ")]


@dataclass(frozen=True)
class StopRule:
    """Adaptive repetition of a point: stop once the median's relative 95 % interval is
    within ``target_ci`` (with at least ``min_reps`` values), or at ``max_reps`` runs, or once
    the point's runs took ``budget_s`` seconds (0: no budget)."""
    max_reps: int
    target_ci: float = 0.02
    min_reps: int = MIN_VALUES_FOR_CI
    budget_s: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        """The job point's ``until`` map (shared/protocol.py)."""
        return {"ci": self.target_ci, "min_reps": self.min_reps, "budget_s": self.budget_s}

    @classmethod
    def from_wire(cls, until: dict[str, Any], max_reps: int) -> "StopRule":
        return cls(max_reps=max_reps, target_ci=float(until.get("ci", 0.02)),
                   min_reps=max(MIN_VALUES_FOR_CI, int(until.get("min_reps",
                                                                 MIN_VALUES_FOR_CI))),
                   budget_s=float(until.get("budget_s", 0.0) or 0.0))


def stop_reason(rule: StopRule, values: Sequence[float], runs: int, spent_s: float
                ) -> tuple[str | None, float | None]:
    """(why the point stops now: ``ci``, ``max_reps``, ``budget``, or None to go on; the
    relative interval of its values). ``runs`` counts failed runs too; ``values`` are the
    successful runs' times."""
    rel = relative_ci(values) if len(values) >= max(rule.min_reps, MIN_VALUES_FOR_CI) else None
    if rel is not None and rel <= rule.target_ci:
        return STOP_CI, rel
    if runs >= rule.max_reps:
        return STOP_MAX_REPS, rel
    if rule.budget_s > 0 and spent_s >= rule.budget_s:
        return STOP_BUDGET, rel
    return None, rel


def outliers(values: Sequence[float], k: float = OUTLIER_K) -> list[bool]:
    """Per value, whether it is an outlier by the MAD rule |x - median| > k x 1.4826 x MAD
    (Leys et al. 2013; k = 3, "very conservative"). Median and MAD are pyperf's. Fewer than 3
    values, or a MAD of 0 (most values equal), mark nothing."""
    vals = [float(v) for v in values]
    if len(vals) < 3 or any(not v > 0 for v in vals):
        return [False] * len(vals)
    b = benchmark(vals)
    med, mad = b.median(), b.median_abs_dev()
    if mad <= 0:
        return [False] * len(vals)
    limit = k * MAD_SCALE * mad
    return [abs(v - med) > limit for v in vals]
