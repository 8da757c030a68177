"""The platform's other groups replayed through a group's split, for pooled intervals.

A single group's held-out errors cannot tell noise from the start of a turn, nor size an
interval where no fold validates the level (docs/models.md, issue 18 intervals): 100 %
coverage on armpm, 66 % on loghin's groups whose scaling breaks beyond the folds. The
platform's other workloads can: each other group h is fitted the way group g is (the same
choice, at g's training configurations, told g's query) and scored on every row it has
outside them. Its errors give h's error inside the training range (RMS, ``h0``) and per log
distance outside it (RMS of error / distance, ``rate``), so h's error at any of g's query
distances, whether h was measured there or not (a tuning store often has no row of h at
g's query). calibrate.pooled turns them into g's interval (leave-one-workload-out
calibration: it assumes only that the platform's workloads are exchangeable, as the prior
does for the point prediction).

A replay costs one full choice per other group, 57-231 ms per evaluation uncached (median,
docs/models.md): ``ReplayCache`` keeps each group's replay by (its rows, g's training
configurations, g's query configurations), so the groups of one platform at the same stage
of a sweep share them. Pure: no I/O; the caller passes the fitting function.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .base import FittedModel, NotEnoughData, Observations
from .calibrate import distance, ranges

MIN_GROUPS = 3  # fewer other groups: t with 1-2 degrees of freedom says nothing (doc)
# most groups replayed per fit (spread evenly over the eligible ones): the first fit of a
# platform's training grid pays one choice per group (a 10-30 ms choice each: under the 500 ms
# maximum fit time), and t(32) is within 2 % of t(64)
MAX_GROUPS = 32
CACHE_SIZE = 20000  # replays kept (three digests and two floats each: a few MB)

Fit = Callable[[Observations, Any], FittedModel]


@dataclass(frozen=True)
class Replay:
    """One other group's errors through g's split: RMS log error inside the training range
    (``h0``, NaN without such rows) and RMS of log error / log distance outside (``rate``,
    NaN without such rows)."""
    h0: float
    rate: float


def config_keys(obs: Observations) -> list[tuple[float, float]]:
    """Each row's (cores, freq MHz) configuration; freq -1 where a row has none."""
    f = (np.full(len(obs), -1.0) if obs.freq_mhz is None
         else np.where(np.isfinite(obs.freq_mhz), obs.freq_mhz, -1.0))
    return list(zip(np.round(obs.cores, 6).tolist(), np.round(f, 3).tolist()))


def target_key(target: Any) -> Any:
    """A hashable form of a fit's target: its sorted distinct configurations, or itself
    (None, "extrapolate", ...)."""
    if isinstance(target, Observations):
        return tuple(sorted(set(config_keys(target))))
    return target


def _digest(obs: Observations) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in (obs.cores, obs.time_s, obs.freq_mhz):
        if a is not None:
            h.update(np.ascontiguousarray(a, float).tobytes())
        h.update(b"|")
    for k in sorted(obs.counters):
        h.update(k.encode() + np.ascontiguousarray(obs.counters[k], float).tobytes())
    return h.digest()


def _text_digest(v: Any) -> bytes:
    return hashlib.blake2b(repr(v).encode(), digest_size=16).digest()


def replay(fit: Fit, other: Observations, train: set, target: Any) -> Replay | None:
    """``other`` fitted by ``fit`` at the configurations ``train`` (told ``target``) and
    scored on its rows outside them; None where it lacks one of them, has no row outside,
    or cannot be fitted."""
    keys = config_keys(other)
    inside = np.array([k in train for k in keys], bool)
    if inside.all() or not train <= set(keys):
        return None
    h_train, h_out = other.subset(inside), other.subset(~inside)
    try:
        model = fit(h_train, target)
    except (NotEnoughData, ValueError, ArithmeticError, RuntimeError):
        # another group that cannot be fitted this way is left out; never g's own fit
        return None
    with np.errstate(all="ignore"):
        e = np.abs(np.log(np.asarray(model.predict(h_out).value, float) / h_out.time_s))
    d = distance(h_out.cores, h_out.freq_mhz, ranges(h_train))
    ok = np.isfinite(e) & (h_out.time_s > 0)
    e, d = e[ok], d[ok]
    if e.size == 0:
        return None
    out = d > 1e-9
    h0 = float(np.sqrt(np.mean(e[~out] ** 2))) if (~out).any() else float("nan")
    rate = float(np.sqrt(np.mean((e[out] / d[out]) ** 2))) if out.any() else float("nan")
    return Replay(h0, rate)


class ReplayCache:
    """Replays by (the other group's rows, the training configurations, the target's): a
    group's replay through one split is computed once. ``hits`` / ``misses`` count lookups;
    the oldest entries go beyond ``size``."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self.hits = self.misses = 0
        self._d: OrderedDict[tuple, Replay | None] = OrderedDict()

    def get(self, fit: Fit, other: Observations, train: set, target: Any) -> Replay | None:
        # digests, not the configurations: a candidate grid has hundreds of them per key
        key = (_digest(other), _text_digest(sorted(train)), _text_digest(target_key(target)))
        if key in self._d:
            self.hits += 1
            self._d.move_to_end(key)
            return self._d[key]
        self.misses += 1
        r = self._d[key] = replay(fit, other, train, target)
        if len(self._d) > self.size:
            self._d.popitem(last=False)
        return r


def eligible(obs: Observations, others: list[Observations]) -> list[Observations]:
    """The other groups measured at every training configuration of ``obs`` and at least one
    more (the ones a replay can score); beyond MAX_GROUPS of them, MAX_GROUPS spread evenly
    over the given order (a store lists a workload's variants side by side: the first ones
    would be one workload)."""
    train = set(config_keys(obs))
    out = []
    for o in others:
        keys = set(config_keys(o))
        if train <= keys and keys - train:
            out.append(o)
    if len(out) > MAX_GROUPS:
        out = [out[i] for i in np.linspace(0, len(out) - 1, MAX_GROUPS).round().astype(int)]
    return out


def replays(fit: Fit, obs: Observations, others: list[Observations], target: Any,
            cache: ReplayCache | None = None) -> list[Replay]:
    """The replays of ``others`` (the platform's other groups, never ``obs``'s own rows)
    through ``obs``'s split: fitted by ``fit`` at its training configurations, told
    ``target``; empty when fewer than MIN_GROUPS are eligible."""
    pool = eligible(obs, others)
    if len(pool) < MIN_GROUPS:
        return []
    train = set(config_keys(obs))
    cache = cache if cache is not None else ReplayCache()
    got = [cache.get(fit, o, train, target) for o in pool]
    return [r for r in got if r is not None]
