"""Acquisition that drives the sampler (pure): expected improvement of the log objective over
the best measured feasible configuration, times the probability of meeting the deadline and
the power cap, under the surrogate ensemble (daemon/models/surrogate.py; idea (b) of issue 17).

The normal distribution comes from scipy.special (the functions scipy.stats.norm calls, the
same values): importing scipy.stats took 2-9 s of a daemon's first tune proposal.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri

from .models.surrogate import Ensemble


def log_objective(ens: Ensemble, exponent: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Members' log objective and its noise: log t (exponent None) or log P + exponent*log t
    (energy 1, EDP 2, ED2P 3)."""
    if exponent is None:
        return ens.log_t, ens.sigma_t
    return (ens.log_p + exponent * ens.log_t,
            np.sqrt(ens.sigma_p ** 2 + (exponent * ens.sigma_t) ** 2))


def prob_below(log_v: np.ndarray, sigma: np.ndarray, w: np.ndarray, limit: float
               ) -> np.ndarray:
    """P(value <= limit) under the weighted mixture of log-normals (exact where sigma = 0)."""
    z = (np.log(limit) - log_v) / np.where(sigma > 0, sigma, 1.0)
    pr = np.where(sigma > 0, ndtr(z), (log_v <= np.log(limit)).astype(float))
    return w @ pr


def expected_improvement(log_j: np.ndarray, sigma: np.ndarray, w: np.ndarray, best: float
                         ) -> np.ndarray:
    """E[max(0, log best - log J)] under the mixture: the expected relative gain (EI in log
    space; Jones et al. 1998, eq. 15, summed over the ensemble members)."""
    s = np.where(sigma > 0, sigma, 1.0)
    gap = np.log(best) - log_j
    z = gap / s
    ei = np.where(sigma > 0, gap * ndtr(z) + s * normal_pdf(z), np.maximum(gap, 0.0))
    return w @ ei


def normal_pdf(z: np.ndarray) -> np.ndarray:
    """The standard normal density, as scipy.stats.norm.pdf computes it."""
    return np.exp(-z ** 2 / 2.0) / np.sqrt(2 * np.pi)


def upper(log_v: np.ndarray, sigma: np.ndarray, w: np.ndarray, q: float = 0.9) -> np.ndarray:
    """A conservative (upper) bound: the highest member's q-quantile among members that carry
    weight, in linear units."""
    keep = w >= 0.01 * w.max()
    return np.exp(np.max(log_v[keep], axis=0) + ndtri(q) * sigma)


def lower(log_v: np.ndarray, sigma: np.ndarray, w: np.ndarray, q: float = 0.9) -> np.ndarray:
    keep = w >= 0.01 * w.max()
    return np.exp(np.min(log_v[keep], axis=0) - ndtri(q) * sigma)
