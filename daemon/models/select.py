"""Cross-validated model choice per group: the model with the lowest held-out MAPE of time wins.

k-fold cross-validation (leave-one-out when the data are tiny) over the registry's models that
apply; a model whose module is missing, that declares itself not applicable, or that cannot fit
some fold is listed with the reason and not chosen. The winner is refitted on all data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import registry
from .base import FittedModel, NotEnoughData, Observations

ANALYTIC = ("amdahl", "usl", "memwall")
LOO_BELOW = 12  # fewer usable points than this: leave-one-out instead of k folds


@dataclass
class Selection:
    """The chosen fitted model and the CV table of every candidate (runners-up included)."""
    name: str
    model: FittedModel
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    folds: int = 0

    def table(self) -> list[dict[str, Any]]:
        """Candidates best first: name, cv_mape (%), fit_ms (mean per fold), error (or None)."""
        rows = [{"name": n, **s} for n, s in self.scores.items()]
        return sorted(rows, key=lambda r: (r["error"] is not None, r["cv_mape"]))


def fold_ids(n: int, k: int, seed: int) -> np.ndarray:
    """Fold number of each of n points: a seeded shuffle cut in k near-equal parts."""
    k = n if n < LOO_BELOW else max(2, min(k, n))
    ids = np.empty(n, dtype=int)
    ids[np.random.default_rng(seed).permutation(n)] = np.arange(n) % k
    return ids


def cv_score(name: str, obs: Observations, ids: np.ndarray) -> dict[str, Any]:
    """Held-out MAPE (%) of model ``name`` over the folds ``ids``; error names why it failed."""
    out: dict[str, Any] = {"cv_mape": float("inf"), "fit_ms": float("nan"), "error": None}
    try:
        modeler = registry.get(name)
    except (ImportError, AttributeError) as exc:
        out["error"] = f"not installed: {exc}"
        return out
    reason = modeler.applicable(obs)
    if reason:
        out["error"] = f"not applicable: {reason}"
        return out
    ape, fit_s = [], []
    for j in np.unique(ids):
        test = ids == j
        try:
            t0 = time.perf_counter()
            fitted = modeler.fit(obs.subset(~test))
            fit_s.append(time.perf_counter() - t0)
            pred = fitted.predict(obs.subset(test)).value
        except NotEnoughData as exc:
            out["error"] = f"fold {j}: {exc}"
            return out
        except Exception as exc:  # a foreign model's failure must not stop the choice
            out["error"] = f"fold {j}: {type(exc).__name__}: {exc}"
            return out
        truth = obs.time_s[test]
        ape.append(100 * np.abs(pred - truth) / truth)
    err = np.concatenate(ape)
    out["cv_mape"] = float(np.mean(err)) if np.all(np.isfinite(err)) else float("inf")
    out["fit_ms"] = 1e3 * float(np.mean(fit_s))
    if not np.isfinite(out["cv_mape"]):
        out["error"] = "non-finite predictions"
    return out


def choose(obs: Observations, candidates: list[str] | None = None, k: int = 5,
           seed: int = 0) -> Selection:
    """Fit every candidate (default: all installed models) by k-fold CV on the rows with a
    positive finite time, pick the lowest held-out MAPE, refit it on all of them."""
    ok = np.isfinite(obs.time_s) & (obs.time_s > 0) & np.isfinite(obs.cores)
    usable = obs.subset(ok)
    names = list(candidates) if candidates is not None else registry.available()
    if len(usable) < 3:
        return _first_that_fits(usable, names)
    ids = fold_ids(len(usable), k, seed)
    scores = {name: cv_score(name, usable, ids) for name in names}
    ranked = sorted((s["cv_mape"], names.index(n), n) for n, s in scores.items()
                    if s["error"] is None)
    for _, _, name in ranked:
        try:
            model = registry.get(name).fit(usable)
        except NotEnoughData as exc:
            scores[name]["error"] = f"refit: {exc}"
            continue
        return Selection(name=name, model=model, scores=scores, folds=int(ids.max()) + 1)
    reasons = "; ".join(f"{n}: {s['error']}" for n, s in scores.items())
    raise NotEnoughData(f"no candidate model could be fitted ({reasons})")


def _first_that_fits(obs: Observations, names: list[str]) -> Selection:
    # too few points to hold any out: the first candidate that fits (list order = parsimony)
    reasons = []
    for name in names:
        try:
            return Selection(name=name, model=registry.get(name).fit(obs),
                             scores={name: {"cv_mape": float("nan"), "fit_ms": float("nan"),
                                            "error": "no CV: fewer than 3 points"}}, folds=0)
        except (NotEnoughData, ImportError, AttributeError) as exc:
            reasons.append(f"{name}: {exc}")
    raise NotEnoughData(f"no candidate model could be fitted ({'; '.join(reasons)})")
