"""Variable-delay ("memory wall") speedup model of seed 003 (Furtunato et al.), eq. 9-16.

    rho  = t_m / t_c = 1 + k phi,          phi = F_cpu / F_mem           (eq. 10, 11)
    mu_p = min(m1 + m2 / p, 1)                                             (eq. 16)
    S_p  = ((1 - mu_1) + rho mu_1)
           / max(((1 - mu_p) + rho mu_p) ((1 - f) + f / p),  rho mu_p)     (eq. 15)

with f, m1, m2 in [0, 1] and k in [0, 10] (the paper's bounds). Time is T1(F) / S_p, T1 as in
speedup.py (free per training frequency, c0 + c1/F elsewhere, which is what eq. 3 + 9 imply).

F_mem: the model needs only phi, and measurements never give the memory clock, so F_mem is a
documented constant (``mem_mhz``, default 1000 MHz); k absorbs the true value (k_true =
k * F_mem_true / mem_mhz) as long as it stays inside the bounds. Without a frequency axis phi
is constant; we take phi = 1 (F_cpu = F_mem), so rho = 1 + k.

Fitting replaces the paper's coupled simulated annealing by (1) scoring a few hundred starts in
one vectorised pass, including starts placed in each branch of the max() (compute-bound:
rho mu_p small; memory-bound: the rho mu_p branch active at high p), (2) the best 48 taking
their first 10 Levenberg-Marquardt steps together (vectorised), (3) polishing the best few of
where they lead with the projected LM of lsq.py on log time. Each branch is smooth; at the
switch between branches the gradient blends both (``kink_blend``) and a compass search steps
off a kink that stops LM, so the solver also finds minima that lie on a switch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .speedup import SpeedupFamily

try:
    # eq. 15 and its gradient compiled (the fit's inner loop); the numpy code below is the
    # reference, gives the same doubles, and runs where the extension was not built
    from . import _memwall_eq15 as _native
except ImportError:
    _native = None

MEM_MHZ = 1000.0
KINK_BLEND = 1e-3   # relative band around eq. 15's switch where the gradient blends both branches


def mu(m1: np.ndarray, m2: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Fraction of memory instructions with p cores, eq. 16."""
    return np.minimum(m1 + m2 / p, 1.0)


def speedup(f: Any, k: Any, m1: Any, m2: Any, p: Any, phi: Any) -> np.ndarray:
    """S_p of eq. 15 (with rho of eq. 10 and mu_p of eq. 16); broadcasts over all arguments."""
    f, k, m1, m2, p, phi = np.broadcast_arrays(*(np.asarray(a, dtype=float)
                                                 for a in (f, k, m1, m2, p, phi)))
    rho = 1.0 + k * phi
    mu1, mup = mu(m1, m2, 1.0), mu(m1, m2, p)
    num = (1.0 - mu1) + rho * mu1
    compute = ((1.0 - mup) + rho * mup) * ((1.0 - f) + f / p)
    memory = rho * mup
    return num / np.maximum(compute, memory)


def memory_bound(f: Any, k: Any, m1: Any, m2: Any, p: Any, phi: Any) -> np.ndarray:
    """True where the memory branch (rho mu_p) of eq. 15's max() is the active one."""
    rho = 1.0 + np.asarray(k, float) * np.asarray(phi, float)
    mup = mu(np.asarray(m1, float), np.asarray(m2, float), np.asarray(p, float))
    f = np.asarray(f, float)
    return rho * mup > ((1.0 - mup) + rho * mup) * ((1.0 - f) + f / np.asarray(p, float))


class MemWallModeler(SpeedupFamily):
    """Seed 003 variable-delay model over (cores, frequency); parameters f, k, m1, m2."""
    name = "memwall"
    param_names = ("f", "k", "m1", "m2")
    lower = (0.0, 0.0, 0.0, 0.0)
    upper = (1.0, 10.0, 1.0, 1.0)
    piecewise = True     # eq. 15's max() and eq. 16's min()

    def __init__(self, t1_mode: str = "auto", mem_mhz: float = MEM_MHZ, n_random: int = 300,
                 solver: str = "lm", nested: bool = True, native: bool = True) -> None:
        # solver="scipy": the previous solver (exact active-branch gradient, no blending),
        # kept for benchmarks/memwall_fit.py's comparison. nested: test the Amdahl
        # restriction m1 = m2 = 0 by AICc (``restrictions``); False fits the full model only.
        # native: eq. 15 by the compiled _memwall_eq15 where it was built (False: numpy)
        super().__init__(t1_mode, solver=solver)
        self.nested = bool(nested)
        self.native = bool(native) and _native is not None
        self.kink_blend = KINK_BLEND
        self.mem_mhz = float(mem_mhz)
        self.n_random = int(n_random)

    def options(self) -> dict[str, Any]:
        return {"t1_mode": self.t1_mode, "mem_mhz": self.mem_mhz, "nested": self.nested}

    def restrictions(self):
        # Amdahl nested in eq. 15: m1 = m2 = 0 gives mu_1 = mu_p = 0 (eq. 16), so S_p =
        # 1 / max((1 - f) + f / p, 0) = eq. 5 for any k; k is then not identifiable and is
        # fixed at 0 as well (one free parameter, f). The full model has to beat it by AICc.
        if not self.nested:
            return []
        f = np.linspace(0.0, 1.0, 41)
        starts = np.column_stack([f, np.zeros((f.size, 3))])
        return [(np.zeros(4), np.array([1.0, 0.0, 0.0, 0.0]), starts)]

    def phi(self, freq: np.ndarray | None, n: int) -> np.ndarray:
        """F_cpu / F_mem per point; 1 where the data have no frequency axis."""
        return np.ones(n) if freq is None else np.asarray(freq, float) / self.mem_mhz

    def _axes(self, p: np.ndarray,
              freq: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """(phi, 1/p, 1/p - 1, p as contiguous float64) of the last data seen: a fit evaluates
        eq. 15 thousands of times on the same p and freq arrays, and recomputing these was a
        tenth of its cost.
        Keyed on the arrays' identity (the cache holds them, so the identity cannot be
        reused)."""
        c = getattr(self, "_axes_cache", None)
        if c is None or c[0] is not p or c[1] is not freq or c[2] != self.mem_mhz:
            c = (p, freq, self.mem_mhz, self.phi(freq, p.size), 1.0 / p, 1.0 / p - 1.0,
                 np.ascontiguousarray(p, dtype=float))
            self._axes_cache = c
        return c[3:]

    def rel_time(self, theta, p, freq):
        # eq. 15 inverted, written out (no broadcast_arrays: this is the inner loop of the fit)
        phi, _, _, pc = self._axes(p, freq)
        if self.native:
            theta = np.ascontiguousarray(theta, dtype=float)
            out = np.empty((theta.shape[0], pc.size))
            _native.rel_time(theta, pc, phi, out)
            return out
        f, k, m1, m2 = (theta[:, i:i + 1] for i in range(4))
        kphi = k * phi                      # rho - 1, kept exact for small k
        mu1 = np.minimum(m1 + m2, 1.0)
        mup = np.minimum(m1 + m2 / p, 1.0)
        num = 1.0 + kphi * mu1
        den = np.maximum((1.0 + kphi * mup) * ((1.0 - f) + f / p), (1.0 + kphi) * mup)
        return den / num

    def log_rel_time_grad(self, theta, p, freq):
        return self.log_rel_time_and_grad(theta, p, freq)[1]

    def log_rel_time_and_grad(self, theta, p, freq):
        lg, grad = self.log_rel_time_lazy(theta, p, freq)
        return lg, grad()

    def log_rel_time_lazy(self, theta, p, freq):
        # log g of eq. 15 (with eq. 10, 16) and a function giving its analytic
        # d/d(f, k, m1, m2) in whichever branch of the max() (and of eq. 16's min()) is
        # active; theta (4,) or (K, 4). The solver's inner loop: each vector is computed once,
        # the gradient only when asked (at accepted steps)
        phi, invp, invp1, _ = self._axes(p, freq)
        blend = self.kink_blend if self.solver == "lm" else 0.0
        if self.native:
            theta = np.ascontiguousarray(theta, dtype=float)
            logg = np.empty(theta.shape[:-1] + invp.shape)
            _native.log_rel_time(theta, invp, invp1, phi, logg, None, blend)

            def grad_native() -> np.ndarray:
                out = np.empty(logg.shape + (4,))
                _native.log_rel_time(theta, invp, invp1, phi, None, out, blend)
                return out
            return logg, grad_native
        theta = np.asarray(theta, float)
        f, k, m1, m2 = (theta[..., i, None] for i in range(4))
        kphi = k * phi                      # rho - 1, kept exact for small k
        sp = m1 + m2 * invp
        mup = np.minimum(sp, 1.0)
        s1 = m1 + m2
        mu1 = np.minimum(s1, 1.0)
        num = 1.0 + kphi * mu1
        a = 1.0 + kphi * mup
        b = (1.0 - f) + f * invp
        ab = a * b
        c = (1.0 + kphi) * mup
        logg = np.log(np.maximum(c, ab)) - np.log(num)

        def grad() -> np.ndarray:
            # weight of the memory branch: 1 where it is active; within kink_blend (relative)
            # of the switch both branches' gradients are blended linearly (a point of the
            # generalised gradient there), so the solver steps along a kink instead of
            # zigzagging across it
            w = (np.minimum(np.maximum(0.5 + (c - ab) / (2.0 * blend * (c + ab)), 0.0), 1.0)
                 if blend > 0 else (c > ab).astype(float))
            out = np.empty(logg.shape + (4,))
            # compute branch: log a + log b; memory branch: log(1 + k phi) + log mu_p. No
            # division can fail: a, num, 1 + k phi >= 1, b >= 1/p, mu_p guarded
            w1 = 1.0 - w
            out[..., 0] = w1 * invp1 / b
            out[..., 1] = w * phi / (1.0 + kphi) + w1 * phi * mup / a - phi * mu1 / num
            dmp = np.where(sp < 1.0, w / np.where(mup > 0, mup, 1.0)
                           + w1 * kphi / a, 0.0)                             # via mu_p
            dm1 = kphi * (s1 < 1.0) / num                                    # via mu_1
            out[..., 2] = dmp - dm1
            out[..., 3] = dmp * invp - dm1
            return out
        return logg, grad

    def candidates(self, rng):
        n = self.n_random
        rand = np.column_stack([rng.uniform(0, 1, n), 10 * rng.uniform(0, 1, n) ** 2,
                                rng.uniform(0, 1, n) ** 2, rng.uniform(0, 1, n)])
        # compute-bound starts: little memory traffic, close to Amdahl (eq. 5); not exactly
        # k = m = 0, where the gradient in k, m1, m2 vanishes (a saddle for the solver)
        compute = np.array(np.meshgrid([0.5, 0.8, 0.9, 0.95, 0.99, 1.0], [0.5, 2.0],
                                       [0.01, 0.05], [0.02, 0.1])).reshape(4, -1).T
        # memory-bound starts: large rho mu_p, so the rho mu_p branch is active at high p
        grid = np.array(np.meshgrid([0.9, 0.99], [0.5, 3.0, 9.0], [0.01, 0.05, 0.2],
                                    [0.0, 0.3, 0.9])).reshape(4, -1).T
        return np.vstack([compute, grid, rand])

    def regimes(self, theta, p, freq):
        # which points sit in the memory branch of eq. 15's max(): none, some or all; the
        # solver rarely crosses between these patterns, so each gets its own polished start
        phi = self.phi(freq, p.size)[None, :]
        mb = memory_bound(*(theta[:, i:i + 1] for i in range(4)), p[None, :], phi)
        return np.where(mb.all(axis=1), 2, np.where(mb.any(axis=1), 1, 0))

    def derived(self, theta):
        f, k, m1, m2 = map(float, theta)
        return {"f": f, "k": k, "m1": m1, "m2": m2, "serial_fraction": 1.0 - f,
                "mu_1": float(min(m1 + m2, 1.0)), "mem_mhz": self.mem_mhz}

    def from_state(self, state: dict[str, Any]):
        opts = state.get("options", {})
        self.t1_mode = opts.get("t1_mode", self.t1_mode)
        self.mem_mhz = float(opts.get("mem_mhz", self.mem_mhz))
        self.nested = bool(opts.get("nested", self.nested))
        return super().from_state(state)
