"""What a recommendation optimises for the user, and under which limits (pure: no I/O).

A :class:`Goal` is an objective (minimum time, energy, energy-delay product E*t or ED2P E*t^2)
with optional constraints: a deadline (time per run) and a power cap (mean power during a run).
"Minimum energy under a deadline" is ``Goal("energy", deadline_s=...)``; "maximum performance
under a power cap" is ``Goal("time", power_cap_w=...)``. Restricting to a cluster or a core
budget is a restriction of the candidate grid, not of the goal.

Every function takes per-configuration arrays (time in s, power in W) so that predicted,
measured and replayed values are judged by the same rules.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .objective_names import OBJECTIVES

UNITS = {"time": "s", "energy": "J", "edp": "J*s", "ed2p": "J*s^2"}
_NAMES = {"time": "minimum time", "energy": "minimum energy",
          "edp": "minimum energy-delay product", "ed2p": "minimum energy-delay² product"}


@dataclass(frozen=True)
class Goal:
    objective: str = "time"
    deadline_s: float | None = None
    power_cap_w: float | None = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; choose one of "
                             f"{', '.join(OBJECTIVES)}")
        for name, v in (("deadline", self.deadline_s), ("power cap", self.power_cap_w)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"the {name} must be a positive number, not {v!r}")

    @property
    def needs_power(self) -> bool:
        """True when judging a configuration needs its power (or energy)."""
        return self.objective != "time" or self.power_cap_w is not None

    @property
    def unit(self) -> str:
        return UNITS[self.objective]

    def describe(self) -> str:
        """E.g. "minimum energy under a 2.5 s deadline"."""
        limits = []
        if self.deadline_s is not None:
            limits.append(f"a {format_seconds(self.deadline_s)} deadline")
        if self.power_cap_w is not None:
            limits.append(f"a {format_watts(self.power_cap_w)} power cap")
        return _NAMES[self.objective] + (" under " + " and ".join(limits) if limits else "")

    def as_dict(self) -> dict:
        return {"objective": self.objective, "deadline_s": self.deadline_s,
                "power_cap_w": self.power_cap_w}

    @classmethod
    def from_dict(cls, d: dict) -> Goal:
        """The goal :meth:`as_dict` gave (checked again: ValueError when invalid)."""
        return cls(d.get("objective", "time"), d.get("deadline_s"), d.get("power_cap_w"))


_QUANTITY = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_SECONDS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "m": 60.0}
_WATTS = {"": 1.0, "w": 1.0, "mw": 1e-3, "kw": 1e3}


def _quantity(text: str | float, units: dict[str, float], what: str, example: str) -> float:
    if isinstance(text, (int, float)):
        value, factor = float(text), 1.0
    else:
        m = _QUANTITY.match(str(text))
        unit = m.group(2).lower() if m else None
        if not m or unit not in units:
            raise ValueError(f"cannot read {what} {text!r}: give a number with a unit, "
                             f"e.g. {example}")
        value, factor = float(m.group(1)), units[unit]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be positive, not {text!r}")
    return value * factor


def parse_duration(text: str | float) -> float:
    """Seconds from "2.5s", "300ms", "1.5min" or a bare number of seconds."""
    return _quantity(text, _SECONDS, "the deadline", "2.5s or 300ms")


def parse_power(text: str | float) -> float:
    """Watts from "4W", "500mW" or a bare number of watts."""
    return _quantity(text, _WATTS, "the power cap", "4W or 500mW")


def _scaled(value: float, units: tuple[tuple[float, str], ...]) -> str:
    if not math.isfinite(value) or value == 0:
        return f"{value:.4g} {units[0][1]}"
    for factor, unit in units:
        if abs(value) >= factor:
            return f"{value / factor:.4g} {unit}"
    factor, unit = units[-1]
    return f"{value / factor:.4g} {unit}"


def format_seconds(value: float) -> str:
    """A duration in the unit parse_duration reads back: "2.5 s", "300 ms", "40 us"."""
    return _scaled(float(value), ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")))


def format_watts(value: float) -> str:
    """A power in the unit parse_power reads back: "4 W", "500 mW"."""
    return _scaled(float(value), ((1.0, "W"), (1e-3, "mW")))


def make_goal(objective: str = "time", deadline: str | float | None = None,
              power_cap: str | float | None = None) -> Goal:
    """A Goal from user text; ValueError naming the problem."""
    return Goal(str(objective).lower(),
                None if deadline is None else parse_duration(deadline),
                None if power_cap is None else parse_power(power_cap))


def objective_values(goal: Goal, time_s: Sequence[float], power_w: Sequence[float] | None
                     ) -> np.ndarray:
    """The quantity to minimise per configuration: t, E = P*t, EDP = P*t^2 or ED2P = P*t^3
    (NaN where an input is missing)."""
    t = np.asarray(time_s, dtype=float)
    if goal.objective == "time":
        return t.copy()
    if power_w is None:
        raise ValueError(f"{goal.describe()} needs power or energy values")
    energy = np.asarray(power_w, dtype=float) * t
    return energy * t ** {"energy": 0, "edp": 1, "ed2p": 2}[goal.objective]


def feasible(goal: Goal, time_s: Sequence[float], power_w: Sequence[float] | None
             ) -> np.ndarray:
    """Which configurations meet the goal's deadline and power cap (unknown values do not)."""
    t = np.asarray(time_s, dtype=float)
    ok = np.isfinite(t) & (t > 0)
    if goal.deadline_s is not None:
        ok &= t <= goal.deadline_s
    if goal.power_cap_w is not None:
        if power_w is None:
            return np.zeros(t.shape, dtype=bool)
        p = np.asarray(power_w, dtype=float)
        ok &= np.isfinite(p) & (p <= goal.power_cap_w)
    return ok


def fewest_within(cores: Sequence[float], times: Sequence[float], tolerance: float,
                  freqs: Sequence[float] | None = None) -> int:
    """Index of the point with the fewest cores (then lowest frequency) whose time (or other
    value to minimise) is within ``tolerance`` (relative) of the minimum: cores and cycles that
    buy less than that are better left idle. ValueError when no value is finite and > 0."""
    c = np.asarray(cores, dtype=float)
    t = np.asarray(times, dtype=float)
    f = np.zeros_like(c) if freqs is None else np.nan_to_num(np.asarray(freqs, dtype=float))
    ok = np.isfinite(t) & (t > 0)
    if not ok.any():
        raise ValueError("no finite positive predicted time to recommend from")
    best = t[ok].min()
    within = np.flatnonzero(ok & (t <= best * (1.0 + tolerance)))
    return int(within[np.lexsort((f[within], c[within]))[0]])


@dataclass
class Choice:
    """The chosen configuration (an index into the arrays given to :func:`choose`)."""
    index: int
    value: float  # its objective value
    best_index: int  # the feasible configuration with the lowest objective value
    runner_up: int | None  # the best other feasible configuration
    margin: float | None  # (runner-up's value - chosen value) / chosen value
    n_feasible: int
    met: bool  # False: nothing meets the constraints; index is the closest to meeting them
    note: str | None = None


def choose(goal: Goal, time_s: Sequence[float], power_w: Sequence[float] | None,
           cores: Sequence[float], freq_khz: Sequence[float] | None = None,
           tolerance: float = 0.0, ok: np.ndarray | None = None) -> Choice:
    """The configuration that best serves ``goal``.

    Among the feasible configurations (``ok``, default :func:`feasible`), the one with the
    fewest cores, then the lowest frequency, whose objective is within ``tolerance``
    (relative) of the best: cores and cycles that buy less than that are better left idle.
    When none is feasible, the one closest to the violated limit (fastest for a deadline,
    lowest power for a power cap) with ``met`` False and a note saying so. ValueError when
    no configuration has a usable value at all."""
    t = np.asarray(time_s, dtype=float)
    c = np.asarray(cores, dtype=float)
    f = np.zeros_like(c) if freq_khz is None else np.nan_to_num(np.asarray(freq_khz, float))
    p = None if power_w is None else np.asarray(power_w, dtype=float)
    value = objective_values(goal, t, p)
    usable = np.isfinite(value) & (value > 0)
    if not usable.any():
        raise ValueError(f"no configuration has a finite predicted value for "
                         f"{goal.describe()}")
    mask = (feasible(goal, t, p) if ok is None else np.asarray(ok, dtype=bool)) & usable
    if not mask.any():
        return _closest(goal, t, p, value, usable)
    best = float(value[mask].min())
    i = fewest_within(c, np.where(mask, value, np.nan), tolerance, f)
    b = int(np.flatnonzero(mask & (value == best))[0])
    others = np.flatnonzero(mask)
    others = others[others != i]
    r = int(others[np.argmin(value[others])]) if others.size else None
    margin = None if r is None else float((value[r] - value[i]) / value[i])
    return Choice(i, float(value[i]), b, r, margin, int(mask.sum()), True)


def _closest(goal: Goal, t: np.ndarray, p: np.ndarray | None, value: np.ndarray,
             usable: np.ndarray) -> Choice:
    """No configuration meets the limits: the one that violates them least."""
    over = np.zeros(t.shape)
    if goal.deadline_s is not None:
        over += np.maximum(np.nan_to_num(t, nan=np.inf) / goal.deadline_s - 1.0, 0.0)
    if goal.power_cap_w is not None and p is not None:
        over += np.maximum(np.nan_to_num(p, nan=np.inf) / goal.power_cap_w - 1.0, 0.0)
    over[~usable] = np.inf
    i = int(np.argmin(over))
    parts = []
    # the limit the closest one meets is not news: name only what it breaks (or both when
    # it is closest without meeting either, e.g. both unknown)
    broke_t = goal.deadline_s is not None and not t[i] <= goal.deadline_s
    broke_p = goal.power_cap_w is not None and p is not None and not p[i] <= goal.power_cap_w
    if broke_t or (goal.deadline_s is not None and not broke_p):
        parts.append(f"takes {format_seconds(t[i])} (deadline {format_seconds(goal.deadline_s)})")
    if broke_p or (goal.power_cap_w is not None and p is not None and not broke_t):
        parts.append(f"draws {format_watts(p[i])} (cap {format_watts(goal.power_cap_w)})")
    note = "no configuration meets the limits; the closest " + " and ".join(parts)
    return Choice(i, float(value[i]), i, None, None, 0, False, note)
