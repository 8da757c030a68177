"""Universal Scalability Law over cores, a speedup family with a fitted T1(F) (speedup.py)."""

from __future__ import annotations

import numpy as np

from .speedup import SpeedupFamily


class USLModeler(SpeedupFamily):
    """Universal Scalability Law: C(p) = p / (1 + a (p - 1) + b p (p - 1)), a, b in [0, 1].

    a = contention (a = Amdahl's serial fraction when b = 0), b = coherency (retrograde
    scaling); the peak is at p* = sqrt((1 - a) / b).
    """
    name = "usl"
    param_names = ("contention", "coherency")
    lower, upper = (0.0, 0.0), (1.0, 1.0)

    def rel_time(self, theta, p, freq):
        a, b = theta[:, :1], theta[:, 1:2]
        pp = p[None, :]
        return (1.0 + a * (pp - 1.0) + b * pp * (pp - 1.0)) / pp

    def log_rel_time_grad(self, theta, p, freq):
        return self.log_rel_time_and_grad(theta, p, freq)[1]

    def log_rel_time_and_grad(self, theta, p, freq):
        # log g and d log g / d (a, b), g = (1 + a (p - 1) + b p (p - 1)) / p; theta (2,) or (K, 2)
        theta = np.asarray(theta, float)
        a, b = theta[..., 0, None], theta[..., 1, None]
        den = 1.0 + a * (p - 1.0) + b * p * (p - 1.0)
        return np.log(den / p), np.stack([(p - 1.0) / den, p * (p - 1.0) / den], axis=-1)

    def candidates(self, rng):
        a = np.linspace(0.0, 1.0, 21)
        b = np.r_[0.0, np.geomspace(1e-6, 1.0, 13)]
        aa, bb = np.meshgrid(a, b)
        return np.column_stack([aa.ravel(), bb.ravel()])

    def derived(self, theta):
        a, b = map(float, theta)
        peak = float(np.sqrt((1 - a) / b)) if b > 0 else float("inf")
        return {"contention": a, "coherency": b, "peak_cores": peak}
