"""The end-point anchoring of an extrapolation (intercept correction of forecasting): the
model's shape beyond the training core counts, its level the measured one at the ends."""

from __future__ import annotations

import numpy as np


def end_anchors(p: np.ndarray, freq: np.ndarray | None, r: np.ndarray) -> list[dict[str, float]]:
    """Per training frequency (one entry without a frequency axis): the mean log residual
    (measured / model) at the largest and the smallest core count, and the next core counts
    inwards, for ``anchor_correction``."""
    out = []
    keys = np.full(p.size, np.nan) if freq is None else freq
    for key in np.unique(keys) if freq is not None else [np.nan]:
        sel = np.ones(p.size, bool) if freq is None else keys == key
        u = np.unique(p[sel])
        if u.size < 2:
            continue
        out.append({"freq": float(key), "p_hi": float(u[-1]), "p_hi2": float(u[-2]),
                    "r_hi": float(np.mean(r[sel][p[sel] == u[-1]])),
                    "p_lo": float(u[0]), "p_lo2": float(u[1]),
                    "r_lo": float(np.mean(r[sel][p[sel] == u[0]]))})
    return out


def anchor_correction(anchors: list[dict[str, float]], p: np.ndarray,
                      freq: np.ndarray | None) -> np.ndarray:
    """Log correction that makes an extrapolation start from the measured end points:
    beyond the largest training core count the model's shape is kept and its level is the
    measured one there (intercept correction of forecasting); between the two largest
    counts the correction ramps in linearly in log p (no jump); the same at the smallest
    count. Frequencies not in training are not corrected."""
    out = np.zeros(p.size)
    lp = np.log(p)
    for a in anchors:
        if freq is None or not np.isfinite(a["freq"]):
            on = np.ones(p.size, bool)
        else:
            on = np.isclose(freq, a["freq"], rtol=1e-9, atol=1e-6)
        w_hi = np.clip((lp - np.log(a["p_hi2"])) / np.log(a["p_hi"] / a["p_hi2"]), 0.0, 1.0)
        w_lo = np.clip((np.log(a["p_lo2"]) - lp) / np.log(a["p_lo2"] / a["p_lo"]), 0.0, 1.0)
        out = np.where(on, w_hi * a["r_hi"] + w_lo * a["r_lo"], out)
    return out

