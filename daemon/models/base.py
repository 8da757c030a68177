"""The one interface every model family implements (pure: arrays in, arrays out, no I/O).

A :class:`Modeler` turns :class:`Observations` of one group (platform, workload, input, variant)
into a :class:`FittedModel`; a fitted model predicts :class:`Prediction` values with an interval
for new configurations and reports its own quality (``quality``), as Extra-P does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class NotEnoughData(ValueError):
    """The data cannot support this model; the message says what is missing."""


@dataclass
class Observations:
    """Measured (or queried) configurations of one group; one entry per measurement.

    ``freq_mhz`` is NaN where a row has no frequency; ``time_s`` is NaN for query points.
    ``input_size`` is numeric where inputs are numbers (NaN otherwise); ``variant`` holds the
    categorical knobs as text. ``counters`` maps a counter name to its column (NaN = invalid).
    """
    cores: np.ndarray
    time_s: np.ndarray
    freq_mhz: np.ndarray | None = None
    input_size: np.ndarray | None = None
    variant: np.ndarray | None = None
    counters: dict[str, np.ndarray] = field(default_factory=dict)
    energy_j: np.ndarray | None = None
    power_w: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.cores = np.asarray(self.cores, dtype=float).ravel()
        n = self.cores.size
        self.time_s = _column(self.time_s, n, "time_s")
        for name in ("freq_mhz", "input_size", "energy_j", "power_w"):
            col = getattr(self, name)
            setattr(self, name, None if col is None else _column(col, n, name))
        if self.variant is not None:
            self.variant = np.asarray(self.variant, dtype=object).ravel()
            if self.variant.size != n:
                raise ValueError(f"variant has {self.variant.size} entries, cores has {n}")
        self.counters = {k: _column(v, n, k) for k, v in self.counters.items()}

    def __len__(self) -> int:
        return int(self.cores.size)

    @classmethod
    def query(cls, cores: Any, freq_mhz: Any = None, **kw: Any) -> "Observations":
        """Points to predict (no times)."""
        cores = np.atleast_1d(np.asarray(cores, dtype=float))
        if freq_mhz is not None:
            cores, freq_mhz = np.broadcast_arrays(cores, np.asarray(freq_mhz, dtype=float))
        return cls(cores=cores, time_s=np.full(cores.shape, np.nan), freq_mhz=freq_mhz, **kw)

    def subset(self, index: Any) -> "Observations":
        """Rows selected by a boolean mask or an index array."""
        pick = (lambda a: None if a is None else a[index])
        return Observations(cores=self.cores[index], time_s=self.time_s[index],
                            freq_mhz=pick(self.freq_mhz), input_size=pick(self.input_size),
                            variant=pick(self.variant),
                            counters={k: v[index] for k, v in self.counters.items()},
                            energy_j=pick(self.energy_j), power_w=pick(self.power_w))

    def has_freq(self) -> bool:
        """True when every row has a frequency and there are at least two distinct ones."""
        return (self.freq_mhz is not None and bool(np.all(np.isfinite(self.freq_mhz)))
                and np.unique(self.freq_mhz).size >= 2)


def _column(values: Any, n: int, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size != n:
        raise ValueError(f"{name} has {arr.size} entries, cores has {n}")
    return arr


@dataclass
class Prediction:
    """Predicted values with a central interval of the given coverage."""
    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float = 0.9


class FittedModel(ABC):
    """A model with its parameters fixed. ``quality`` holds at least n, rmse, mape (training)."""
    name: str = ""
    params: dict[str, float]
    quality: dict[str, float]

    @abstractmethod
    def predict(self, query: Observations) -> Prediction:
        """Predicted execution time (seconds) for each query row."""

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary: name, parameters, quality."""
        return {"model": self.name, "params": dict(self.params), "quality": dict(self.quality)}


class Modeler(ABC):
    """A model family: decides whether it applies and fits it."""
    name: str = ""

    def applicable(self, obs: Observations) -> str | None:
        """None when the model can be fitted to ``obs``, else the reason it cannot."""
        return None

    @abstractmethod
    def fit(self, obs: Observations) -> FittedModel:
        """Fit to ``obs``; raises NotEnoughData when the data cannot support the model."""


def fit_quality(measured: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """Training error of a fit: n, RMSE and MAE in seconds, MAPE in percent."""
    measured = np.asarray(measured, dtype=float)
    predicted = np.asarray(predicted, dtype=float)
    err = predicted - measured
    with np.errstate(divide="ignore", invalid="ignore"):
        ape = np.abs(err) / np.abs(measured)
    return {
        "n": float(measured.size),
        "rmse": float(np.sqrt(np.mean(err ** 2))) if err.size else float("nan"),
        "mae": float(np.mean(np.abs(err))) if err.size else float("nan"),
        "mape": float(100 * np.mean(ape[np.isfinite(ape)])) if err.size else float("nan"),
    }
