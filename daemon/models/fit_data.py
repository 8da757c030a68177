"""Training data of an analytic speedup fit: the usable rows of a group (``clean``) and their
layout per training frequency (``FitData``), which the variable projection of T1 works on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import NotEnoughData, Observations


def clean(obs: Observations) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(cores, freq or None, time) of the usable rows; NotEnoughData when nothing is usable.

    Rows with a non-finite or non-positive time or core count are dropped. Where only some rows
    have a frequency, the rows without one are dropped (they cannot be placed on the axis).
    """
    p = np.asarray(obs.cores, dtype=float)
    t = np.asarray(obs.time_s, dtype=float)
    ok = np.isfinite(p) & np.isfinite(t) & (p >= 1) & (t > 0)
    freq = None
    if obs.freq_mhz is not None:
        fq = np.asarray(obs.freq_mhz, dtype=float)
        has = np.isfinite(fq) & (fq > 0)
        if np.any(has & ok):
            ok &= has
            freq = fq[ok]
    p, t = p[ok], t[ok]
    if p.size < 2:
        raise NotEnoughData(f"need at least 2 valid measurements, got {p.size}")
    if np.unique(p).size < 2:
        raise NotEnoughData("need at least 2 distinct core counts to fit a speedup curve")
    return p, freq, t


@dataclass
class FitData:
    """Training data of one fit: effective cores, frequency (None without an axis), time,
    log time, the frequency index of each point, the distinct frequencies and the (n, nlev)
    matrix whose product with residuals gives their per-frequency means."""
    p: np.ndarray
    freq: np.ndarray | None
    t: np.ndarray
    y: np.ndarray
    keys: np.ndarray
    ufreq: np.ndarray
    avg: np.ndarray

    @classmethod
    def of(cls, p: np.ndarray, freq: np.ndarray | None, t: np.ndarray) -> "FitData":
        """The layout of cores ``p`` (effective), frequencies and times."""
        if freq is None:
            keys = np.zeros(p.size, dtype=int)
            ufreq = np.array([np.nan])
        else:
            ufreq, keys = np.unique(freq, return_inverse=True)
        counts = np.bincount(keys, minlength=ufreq.size).astype(float)
        avg = np.zeros((p.size, ufreq.size))
        avg[np.arange(p.size), keys] = 1.0 / counts[keys]
        return cls(p, freq, t, np.log(t), keys, ufreq, avg)
