"""Amdahl's law over cores (seed 003 eq. 5), a speedup family with a fitted T1(F) (speedup.py).

Notation: seed 003 and the peers write Amdahl with the *parallel* fraction f,
t = T1 ((1 - f) + f / p); we report ``parallel_fraction`` f, ``serial_fraction`` 1 - f and the
speedup limit 1 / (1 - f).
"""

from __future__ import annotations

import numpy as np

from .speedup import SpeedupFamily


class AmdahlModeler(SpeedupFamily):
    """Amdahl's law, seed 003 eq. 5: S = 1 / ((1 - f) + f / p), f = parallel fraction."""
    name = "amdahl"
    param_names = ("parallel_fraction",)
    lower, upper = (0.0,), (1.0,)

    def rel_time(self, theta, p, freq):
        f = theta[:, :1]
        return (1.0 - f) + f / p[None, :]

    def log_rel_time_grad(self, theta, p, freq):
        return self.log_rel_time_and_grad(theta, p, freq)[1]

    def log_rel_time_and_grad(self, theta, p, freq):
        # log g of eq. 5 inverted and d log g / d f; theta (1,) or (K, 1)
        f = np.asarray(theta, float)[..., 0, None]
        g = (1.0 - f) + f / p
        return np.log(g), ((1.0 / p - 1.0) / g)[..., None]

    def candidates(self, rng):
        return np.linspace(0.0, 1.0, 41)[:, None]

    def derived(self, theta):
        f = float(theta[0])
        serial = 1.0 - f
        return {"parallel_fraction": f, "serial_fraction": serial,
                "speedup_limit": float(1.0 / serial) if serial > 0 else float("inf")}
