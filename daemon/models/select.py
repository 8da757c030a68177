"""Cross-validated model choice per group: candidates scored on held-out time, picked or mixed.

Validation scheme, from what the model will be asked (``target``):
* interpolation (default, ``target=None`` or ``"interpolate"``, or query points inside the
  training ranges): k-fold cross-validation, leave-one-out when the data are tiny;
* extrapolation (``target="extrapolate"``, or query points with more cores than any training
  row, fewer cores than any, or a frequency outside the training range): forward chaining.
  Cores: for each of the last ``N_CUTS`` distinct core counts c (at least 2 kept), train on the
  rows with fewer cores and test on all rows with c or more (so the held-out distance grows as
  it does in deployment); where the query goes further than that (its largest core count
  over the data's, ``reach``, counted in physical cores), one more cut holds out as far: train
  on the core counts up to max / reach, test on the rest. Frequency: train without the
  highest (or lowest) frequency, test on it; where that leaves the training part with one
  frequency of two or more (``_level_free``), every model scales T1 by 1/F there, not by the
  T1(F) = c0 + c1 / F law the fit on all the data extrapolates by, so the fold scores the
  curve's shape at the held-out frequency (times over the time at its fewest cores) and does
  not size the interval. APEs of all folds are pooled. Random folds measure interpolation and pick models that
  extrapolate badly; these folds measure what the daemon does (predict larger core counts and
  unseen frequencies).

Rule (``rule``):
* ``"combine"`` (default, ``DEFAULT_RULE``): forecast combination. Every candidate that validated enters twice,
  as fitted and end-anchored (its prediction scaled by the measured / modelled ratio at the
  training data's largest and smallest core count, ``combine.anchored``); the prediction is
  the weighted geometric mean, weights proportional to the inverse held-out mean squared log
  error (Bates and Granger 1969), see ``combination_weights``. Averaging lets opposite errors
  cancel, and the folds decide how much anchoring to apply instead of a fixed rule: a noisy
  end point anchors badly in the folds too and gets little weight. The hold baseline
  (``FALLBACK``) joins the candidates of the combination (``HOLD_IN_COMBINATION``): the
  zero-order forecast that the tree learners of the peer table make outside their data, it
  wins where scaling stops beyond the measured range (xplat's SMT threads) and weighs nothing
  where the folds see a trend it cannot follow. One surviving forecast is
  returned as itself. Measured against picking the lowest score (docs/models.md): selection
  loses to fold noise where the candidates validate alike. With fewer than ``MIN_HELD_OUT``
  held-out points it is ``"fallback"``: one point cannot weigh models either.
* ``"fallback"``: the lowest held-out MAPE wins, except where the
  validation has fewer than ``MIN_HELD_OUT`` held-out points (relearn: 3 core counts leave one
  forward fold with one point): one point cannot rank models. ``FALLBACK`` (the hold baseline:
  last measured value held) joins the candidates, and the simplest (``COMPLEXITY``) that fits
  every fold *and* its own training data within ``ADEQUATE_MAPE`` wins: Amdahl where the data
  look like strong scaling (loghin's 3-core groups), hold where no one-parameter speedup curve
  fits them (relearn: time rising with cores, which Amdahl cannot follow and USL's p^2 term
  over-extrapolates). Simplest adequate model, not lowest score. As an ordinary candidate of
  this rule, hold won noisy folds on loghin and xplat and extrapolated worse there
  (docs/models.md), so under "fallback" it only enters here (under "combine" it is weighed).
* ``"1se"``: among the candidates whose mean paired APE difference to the best is within one
  standard error of that difference (Hastie, Tibshirani, Friedman, The Elements of Statistical
  Learning, sec. 7.10, "one-standard-error rule"), the one with the fewest shape parameters
  wins (ties: lower MAPE); no standard error (fewer than 2 points): the simplest. Measured on
  the peer splits it picks the hold baseline too often (armpm, loghin: docs/models.md), so it
  is not the default.
* ``"min"``: the lowest MAPE outright (the behaviour before).

Under every rule the choice is never a candidate whose held-out error is the worst of the
validated set (``worst_candidates``; candidates within SAME_FORECAST of each other tie, and a
set that ties throughout has no worst; with fewer than MIN_HELD_OUT held-out points hold is
never counted worst: one point cannot rank it out of being the bounded fallback): the simplest-model fallback and "1se" could otherwise
return it (with two candidates, any pick but the best is the worst), and a combination that
validates worse than each of its members is not used. The worst is taken only when nothing
else can be fitted.

A model whose module is missing, that declares itself not applicable, or that cannot fit some
fold is listed with the reason and not chosen. The winner (every member of a combination) is
refitted on all data; a combination only takes members that can be saved (``to_state``), so a
learner can win alone but not join one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import combine, registry, smt
from .calibrate import calibrated, distance, ranges, unvalidated
from .speedup_fit import LEVEL
from .base import FittedModel, NotEnoughData, Observations

ANALYTIC = ("amdahl", "usl", "memwall")
FALLBACK = "hold"  # joins the candidates when the validation cannot rank them (rule fallback)
LOO_BELOW = 12  # fewer usable points than this: leave-one-out instead of k folds
N_CUTS = 3      # forward-chaining origins on the cores axis (extrapolation scheme)
# free shape parameters of each model: the one-standard-error rule prefers fewer; models not
# listed (regression family, learners) count as DEFAULT_COMPLEXITY
COMPLEXITY = {"amdahl": 1, "hold": 1.5, "usl": 2, "modelLog": 2, "modelQuad": 3, "memwall": 4}
DEFAULT_COMPLEXITY = 5
MIN_HELD_OUT = 2  # fewer held-out points than this: no ranking, the simplest model that fits
ADEQUATE_MAPE = 10.0  # ... its own training data within this MAPE (%) (hold always does)
RULES = ("combine", "fallback", "1se", "min")
HOLD_IN_COMBINATION = True  # rule "combine" weighs the hold baseline with the rest (doc)
DEFAULT_RULE = "combine"  # measured better than "fallback" on the peer splits (docs/models.md)
# rule "combine": forecast combination of the validated candidates (combination_weights)
ERR_FLOOR = 0.005   # RMS log error below which candidates are equally good (the models'
                    # own interval floor, speedup_fit.SIGMA_FLOOR: an exact fit is not exact)
MIN_WEIGHT = 0.01   # members below 1 % move a prediction by < 1 % of their disagreement
SAME_FORECAST = 1e-3  # held-out predictions within 0.1 %: one forecast, not two


@dataclass
class Selection:
    """The chosen fitted model and the CV table of every candidate (runners-up included)."""
    name: str
    model: FittedModel
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    folds: int = 0
    scheme: str = "kfold"   # "kfold", "extrapolate:cores+freq_up" ..., or "none"
    # |log(predicted / measured)| of the choice on the held-out points (empty: none)
    held_log_err: np.ndarray = field(default_factory=lambda: np.empty(0))

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


def kfold_splits(ids: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train mask, test mask) per fold number in ``ids``."""
    return [(ids != j, ids == j) for j in np.unique(ids)]


def extrapolation_axes(obs: Observations, target: Any) -> list[str]:
    """Directions in which ``target`` lies outside the training data ``obs``: any of
    "cores_up", "cores_down", "freq_up", "freq_down"; [] means interpolation.

    ``target`` is None/"interpolate" (no direction), "extrapolate" (more cores and a higher
    frequency, where the data vary along that axis) or query Observations."""
    has_freq = obs.has_freq()
    if target is None or (isinstance(target, str) and target == "interpolate"):
        return []
    if isinstance(target, str):
        if target != "extrapolate":
            raise ValueError(f"target must be 'interpolate', 'extrapolate' or Observations, "
                             f"not {target!r}")
        return ["cores_up"] + (["freq_up"] if has_freq else [])
    axes = []
    qc = np.asarray(target.cores, float)
    qc = qc[np.isfinite(qc)]
    if qc.size and qc.max() > obs.cores.max() * (1 + 1e-9):
        axes.append("cores_up")
    if qc.size and qc.min() < obs.cores.min() * (1 - 1e-9):
        axes.append("cores_down")
    if has_freq and target.freq_mhz is not None:
        qf = np.asarray(target.freq_mhz, float)
        qf = qf[np.isfinite(qf) & (qf > 0)]
        if qf.size and qf.max() > np.max(obs.freq_mhz) * (1 + 1e-9):
            axes.append("freq_up")
        if qf.size and qf.min() < np.min(obs.freq_mhz) * (1 - 1e-9):
            axes.append("freq_down")
    return axes


def extrapolation_splits(obs: Observations, axes: list[str], n_cuts: int = N_CUTS,
                         reach: float | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Forward-chaining (train mask, test mask) pairs along ``axes`` (see the module doc).

    ``reach``: how far the query goes beyond the largest measured core count (its largest
    core count / the data's). The cuts then include the one that holds out as far: training
    on the core counts up to max / reach (at least 2 of them), testing on the rest."""
    splits = []
    u = np.unique(obs.cores)
    nd = u.size
    if "cores_up" in axes:
        cuts = set(range(max(2, nd - n_cuts), nd))
        if reach is not None and np.isfinite(reach) and reach > 1:
            far = int(np.searchsorted(u, u[-1] / reach * (1 + 1e-9), side="right"))
            if 2 <= far < nd:
                cuts.add(far)
        for j in sorted(cuts):
            splits.append((obs.cores < u[j], obs.cores >= u[j]))
    if "cores_down" in axes:
        for j in range(min(nd - 2, n_cuts), 0, -1):
            splits.append((obs.cores > u[j - 1], obs.cores <= u[j - 1]))
    if obs.has_freq():
        fq = np.asarray(obs.freq_mhz, float)
        uf = np.unique(fq)
        if "freq_up" in axes:
            splits.append((fq < uf[-1], fq == uf[-1]))
        if "freq_down" in axes:
            splits.append((fq > uf[0], fq == uf[0]))
    return [(tr, te) for tr, te in splits if tr.sum() >= 2 and te.any()]


def _reach(obs: Observations, target: Any) -> float | None:
    """The query's largest core count over the data's (None: no query Observations).

    Counted in physical cores where the group names them (``smt.phys_cores``): a fold can
    only mimic the distance along the speedup curve; threads beyond the physical cores are
    the SMT yield's, which no fold without such rows can see, however far it holds out."""
    if not isinstance(target, Observations):
        return None
    qc = np.asarray(target.cores, float)
    qc = qc[np.isfinite(qc)]
    if not qc.size:
        return None
    top = float(np.max(obs.cores))
    phys = smt.phys_cores(obs)
    far = float(qc.max()) if phys is None else min(float(qc.max()), max(phys, top))
    return far / top


def cv_score(name: str, obs: Observations,
             ids: np.ndarray | list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """Held-out MAPE (%) of model ``name`` over the folds (fold numbers ``ids`` or a list of
    (train mask, test mask)); pooled over all held-out points; error names why it failed."""
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
    splits = kfold_splits(ids) if isinstance(ids, np.ndarray) else ids
    preds: list[np.ndarray] = []
    anch: list[np.ndarray] = []
    fit_s = []
    for j, (train, test) in enumerate(splits):
        try:
            t0 = time.perf_counter()
            part = obs.subset(train)
            fitted = modeler.fit(part)
            fit_s.append(time.perf_counter() - t0)
            held = obs.subset(test)
            pred = np.asarray(fitted.predict(held).value, float)
        except NotEnoughData as exc:
            out["error"] = f"fold {j}: {exc}"
            return out
        except Exception as exc:  # a foreign model's failure must not stop the choice
            out["error"] = f"fold {j}: {type(exc).__name__}: {exc}"
            return out
        # the same fit anchored at the fold's end points (rule "combine" weighs both)
        with np.errstate(all="ignore"):
            try:
                an = combine.anchored(pred, combine.anchors_for(fitted, part), held)
            except Exception:  # noqa: BLE001 - no anchored variant for this model
                an = np.full(pred.shape, np.nan)
        if _level_free(obs, train):
            base = _shape_base(held)
            pred, an = pred / pred[base], an / an[base]
        preds.append(pred)
        anch.append(an)
    truth = np.concatenate([obs.time_s[te] / (obs.time_s[te][_shape_base(obs.subset(te))]
                                              if _level_free(obs, tr) else 1.0)
                            for tr, te in splits])
    pred = np.concatenate(preds)
    err = 100 * np.abs(pred - truth) / truth
    out["_ape"] = err
    out["_pred"], out["_anch"], out["_truth"] = pred, np.concatenate(anch), truth
    out["cv_mape"] = float(np.mean(err)) if np.all(np.isfinite(err)) else float("inf")
    out["fit_ms"] = 1e3 * float(np.mean(fit_s))
    if not np.isfinite(out["cv_mape"]):
        out["error"] = "non-finite predictions"
    return out


def _level_free(obs: Observations, train: np.ndarray) -> bool:
    """Whether a fold's training part keeps fewer frequencies than the data's T1(F) law needs
    (two, where the data have two or more): from one frequency every model scales T1 by 1/F,
    a law the fit on all the data does not use, so the fold validates only the shape at the
    held-out frequency (``_shape_base``), not its level."""
    if not obs.has_freq():
        return False
    fq = np.asarray(obs.freq_mhz, float)
    ok = np.isfinite(fq) & (fq > 0)
    return np.unique(fq[train & ok]).size < min(2, np.unique(fq[ok]).size)


def _shape_base(held: Observations) -> np.ndarray:
    """Index, per held-out row, of the held-out row at its frequency with the fewest cores:
    times divided by the time there are the curve's shape without its level."""
    fq = np.nan_to_num(np.asarray(held.freq_mhz, float), nan=-1.0)
    base = np.arange(len(held))
    for f in np.unique(fq):
        at = np.flatnonzero(fq == f)
        base[at] = at[np.argmin(held.cores[at])]
    return base


def rank(scores: dict[str, dict[str, Any]], apes: dict[str, np.ndarray],
         names: list[str], rule: str = "fallback") -> list[str]:
    """Candidates (without error) in the order ``rule`` tries them (see the module doc): the
    preferred ones first (simplest first), then the rest by MAPE."""
    ok = [n for n in names if scores[n]["error"] is None]
    by_mape = sorted(ok, key=lambda n: (scores[n]["cv_mape"], names.index(n)))
    if not ok or rule == "min":
        return by_mape
    best = by_mape[0]
    n_held = apes[best].size
    near = []
    for n in ok:
        d = apes[n] - apes[best]
        if d.size != n_held:
            continue
        if n_held < MIN_HELD_OUT:
            near.append(n)                  # one point cannot rank the models
        elif rule == "1se" and float(np.mean(d)) <= float(np.std(d, ddof=1) / np.sqrt(d.size)):
            near.append(n)
    if not near:
        return by_mape
    near.sort(key=lambda n: (COMPLEXITY.get(n, DEFAULT_COMPLEXITY), scores[n]["cv_mape"],
                             names.index(n)))
    return near + [n for n in by_mape if n not in near]


def choose(obs: Observations, candidates: list[str] | None = None, k: int = 5,
           seed: int = 0, target: Any = None, rule: str = DEFAULT_RULE,
           calibrate: bool = True) -> Selection:
    """Fit every candidate (default: all installed models but hold and combo) by
    cross-validation on the rows with a positive finite time, combine or pick by the held-out
    errors (``rule``), refit on all of them.

    ``target``: what will be predicted: None or "interpolate" (k-fold CV, the default),
    "extrapolate" (forward chaining to more cores / a higher frequency) or the query
    Observations (forward chaining along the axes where a query leaves the training range,
    k-fold when none does). Where forward chaining leaves no fold, k-fold is used.
    ``rule``: "combine" (weighted geometric mean of the validated candidates, raw and
    end-anchored; "fallback" when fewer than MIN_HELD_OUT points were held out), "fallback"
    (lowest MAPE; the simplest model when fewer than MIN_HELD_OUT points were held out),
    "1se" (simplest within one standard error of the best) or "min".
    ``calibrate``: widen the chosen model's interval to the conformal quantile of its own
    held-out errors (calibrate.py), so that an extrapolation's interval reflects the
    validation's extrapolation error."""
    ok = np.isfinite(obs.time_s) & (obs.time_s > 0) & np.isfinite(obs.cores)
    usable = obs.subset(ok)
    names = (list(candidates) if candidates is not None
             else [n for n in registry.available() if n not in (FALLBACK, combine.NAME)])
    if len(usable) < 3:
        return _first_that_fits(usable, names)
    axes = extrapolation_axes(usable, target)
    splits = extrapolation_splits(usable, axes, reach=_reach(usable, target)) if axes else []
    if splits:
        scheme = "extrapolate:" + "+".join(axes)
        folds: Any = splits
        n_folds = len(splits)
    else:
        scheme = "kfold"
        folds = fold_ids(len(usable), k, seed)
        n_folds = int(folds.max()) + 1
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, not {rule!r}")
    held = (sum(int(te.sum()) for _, te in folds) if isinstance(folds, list)
            else len(usable))
    gate = rule in ("combine", "fallback") and held < MIN_HELD_OUT
    if (gate or (rule == "combine" and HOLD_IN_COMBINATION)) and FALLBACK not in names:
        names.append(FALLBACK)
    scores = {name: cv_score(name, usable, folds) for name in names}
    apes = {n: s.pop("_ape", np.empty(0)) for n, s in scores.items()}
    cv = {n: (s.pop("_pred", None), s.pop("_anch", None), s.pop("_truth", None))
          for n, s in scores.items()}
    worst = worst_candidates(scores)
    if gate:
        # one held-out point: the bounded fallback stays eligible whatever that point says
        worst.discard(FALLBACK)
    if rule == "combine" and not gate:
        sel = _combine(usable, scores, cv, names)
        if sel is not None and not _is_worst(sel.name, scores, worst):
            sel.folds, sel.scheme = n_folds, scheme
            return _calibrate(sel, calibrate, usable, folds)
        if sel is not None:
            scores[sel.name]["error"] = "not chosen: the worst held-out error of the set"
    ranked = rank(scores, apes, names, "fallback" if rule == "combine" else rule)
    # the worst only when nothing else can be fitted
    ranked = [n for n in ranked if n not in worst] + [n for n in ranked if n in worst]
    last_ok = max((i for i, n in enumerate(ranked) if n not in worst), default=len(ranked) - 1)
    for i, name in enumerate(ranked):
        try:
            model = registry.get(name).fit(usable)
        except NotEnoughData as exc:
            scores[name]["error"] = f"refit: {exc}"
            continue
        miss = model.quality.get("shape_mape", model.quality.get("mape", 0.0))
        if gate and name != FALLBACK and i < last_ok and miss > ADEQUATE_MAPE:
            scores[name]["error"] = (f"fallback: training MAPE {miss:.1f} % > "
                                     f"{ADEQUATE_MAPE:g} %")
            continue
        pred, _, truth = cv.get(name, (None, None, None))
        err = (np.abs(np.log(pred / truth)) if pred is not None and truth is not None
               else np.empty(0))
        return _calibrate(Selection(name=name, model=model, scores=scores, folds=n_folds,
                                    scheme=scheme, held_log_err=err),
                              calibrate, usable, folds)
    reasons = "; ".join(f"{n}: {s['error']}" for n, s in scores.items())
    raise NotEnoughData(f"no candidate model could be fitted ({reasons})")


def worst_candidates(scores: dict[str, dict[str, Any]]) -> set[str]:
    """The validated candidates (no error, finite held-out MAPE) whose MAPE is the highest of
    the set; ties within SAME_FORECAST (relative) count as one value, and a set without two
    distinct values has no worst (empty set)."""
    mape = {n: s["cv_mape"] for n, s in scores.items()
            if s["error"] is None and np.isfinite(s["cv_mape"])}
    if len(mape) < 2:
        return set()
    top = max(mape.values())
    worst = {n for n, m in mape.items() if m * (1 + SAME_FORECAST) >= top}
    return worst if len(worst) < len(mape) else set()


def _is_worst(name: str, scores: dict[str, dict[str, Any]], worst: set[str]) -> bool:
    """True when the selection ``name`` (a candidate, or the combination, whose held-out MAPE
    is in ``scores``) is, or validates no better than, the worst of the set."""
    if name in worst:
        return True
    if name != combine.NAME or not worst:
        return False
    return scores[name]["cv_mape"] * (1 + SAME_FORECAST) >= scores[next(iter(worst))]["cv_mape"]


def combination_weights(cv: dict[str, tuple], names: list[str],
                        misfit: dict[tuple[str, bool], float] | None = None
                        ) -> list[tuple[str, bool, float, np.ndarray]]:
    """(name, anchored, weight, held-out predictions) of the members of the combination.

    Variants: every candidate with valid held-out predictions, raw and end-anchored; an
    anchored variant whose held-out predictions equal (within SAME_FORECAST) the raw ones was
    never exercised by the folds (e.g. at an unseen frequency) and is left out. Different
    models that validate alike keep their own (equal) weights: the folds cannot tell them
    apart, so the combination hedges between them. Weight: inverse held-out mean squared log
    error (floored at ERR_FLOOR^2), normalised; members under MIN_WEIGHT are dropped and the
    rest renormalised.

    ``misfit`` ((name, anchored) -> mean squared log residual of the variant refitted on all
    the data): among fold twins (held-out predictions within SAME_FORECAST), a variant whose
    misfit exceeds the lowest of its twins (by more than the relative SAME_FORECAST) gets no
    weight. The folds cannot tell twins apart (armpm's frequency fold trains on one
    frequency, where Amdahl and hold predict the same shape), so the only evidence left is
    how closely each follows the data it will extrapolate from: Amdahl, whose speedup cannot
    change with frequency, misses them, and its per-frequency T1 levels absorb the miss and
    carry it into the frequency law (t = c0 + c1 / F) it extrapolates by."""
    order = sorted((n for n in names if cv.get(n, (None,))[0] is not None),
                   key=lambda n: (COMPLEXITY.get(n, DEFAULT_COMPLEXITY), names.index(n)))
    variants: list[tuple[str, bool, np.ndarray]] = []
    truth = None
    for n in order:
        pred, anch, truth = cv[n]
        for is_anch, p in ((False, pred), (True, anch)):
            if p is None or not np.all(np.isfinite(p) & (p > 0)):
                continue
            if is_anch and np.allclose(p, pred, rtol=SAME_FORECAST, atol=0):
                continue
            variants.append((n, is_anch, p))
    if not variants or truth is None:
        return []
    mse = np.array([np.mean(np.log(p / truth) ** 2) for _, _, p in variants])
    w = 1.0 / np.maximum(mse, ERR_FLOOR ** 2)
    if misfit:
        # the folds cannot tell fold twins apart; the training data can: a twin that misses
        # them more than the closest twin does (beyond SAME_FORECAST) gets no weight
        mf = np.array([misfit.get((n, a), np.inf) for n, a, _ in variants])
        for i, (_, _, p) in enumerate(variants):
            best = min(mf[j] for j, (_, _, q) in enumerate(variants)
                       if np.allclose(p, q, rtol=SAME_FORECAST, atol=0))
            if np.isfinite(best) and mf[i] > best * (1 + SAME_FORECAST) + 1e-12:
                w[i] = 0.0
    w /= w.sum()
    keep = w >= MIN_WEIGHT
    w = np.where(keep, w, 0.0) / w[keep].sum()
    return [(n, a, float(wi), p) for (n, a, p), wi, k in zip(variants, w, keep) if k]


def _fold_twins(cv: dict[str, tuple], names: list[str]) -> list[str]:
    """The candidates of ``names`` with a held-out forecast (raw or anchored) that another
    candidate's matches within SAME_FORECAST."""
    preds = [(n, p) for n in names for p in cv.get(n, (None, None))[:2]
             if p is not None and np.all(np.isfinite(p) & (p > 0))]
    out = []
    for n, p in preds:
        if n not in out and any(m != n and np.allclose(p, q, rtol=SAME_FORECAST, atol=0)
                                for m, q in preds):
            out.append(n)
    return out


def _combine(obs: Observations, scores: dict[str, dict[str, Any]], cv: dict[str, tuple],
             names: list[str]) -> Selection | None:
    """Rule "combine": the weighted geometric mean of the validated candidates (see
    ``combination_weights``). Members that predict alike both in the folds and on all the
    data (within SAME_FORECAST; e.g. USL with no coherency term and Amdahl) are one forecast:
    the simpler takes their summed weight, and one surviving raw member is returned as
    itself. None when no candidate validated or none could be refitted (the caller then
    ranks by MAPE)."""
    ok = [n for n in names if scores[n]["error"] is None]
    fits: dict[str, FittedModel | None] = {}
    misfit: dict[tuple[str, bool], float] = {}
    lt = np.log(obs.time_s)
    for n in _fold_twins(cv, ok):
        # refitted on all data: its in-sample misfit breaks ties between fold twins
        # (combination_weights); the others are refitted only if they take weight
        try:
            fits[n] = registry.get(n).fit(obs)
        except NotEnoughData as exc:
            scores[n]["error"] = f"refit: {exc}"
            fits[n] = None
            continue
        raw = np.asarray(fits[n].predict(obs).value, float)
        with np.errstate(all="ignore"):
            misfit[(n, False)] = float(np.mean((lt - np.log(raw)) ** 2))
            try:
                anc = combine.anchored(raw, combine.anchors_for(fits[n], obs), obs)
                misfit[(n, True)] = float(np.mean((lt - np.log(anc)) ** 2))
            except Exception:  # noqa: BLE001 - no anchored variant for this model
                pass
    ok = [n for n in ok if scores[n]["error"] is None]
    parts = combination_weights(cv, ok, {k: v for k, v in misfit.items() if np.isfinite(v)})
    members: list[list] = []   # [model, weight, anchors, name, anchored, fold preds, train preds]
    for n, is_anch, w, p in parts:
        if n not in fits:
            try:
                fits[n] = registry.get(n).fit(obs)
            except NotEnoughData as exc:
                scores[n]["error"] = f"refit: {exc}"
                fits[n] = None
        model = fits[n]
        # a member must be savable so the combination is (learners can still win alone)
        if model is None or (len(parts) > 1 and not combine.can_save(model)):
            continue
        anchors = combine.anchors_for(model, obs) if is_anch else None
        fitted = combine.anchored(np.asarray(model.predict(obs).value, float), anchors, obs)
        twin = next((m for m in members
                     if np.allclose(p, m[5], rtol=SAME_FORECAST, atol=0)
                     and np.allclose(fitted, m[6], rtol=SAME_FORECAST, atol=0)), None)
        if twin is not None:
            twin[1] += w
            continue
        members.append([model, w, anchors, n, is_anch, p, fitted])
    if not members:
        return None
    held = [(m[3], m[4], m[1], m[5]) for m in members]
    members = [(m[0], m[1], m[2]) for m in members]
    if len(members) == 1 and members[0][2] is None:
        n = held[0][0]
        return Selection(name=n, model=members[0][0], scores=scores,
                         held_log_err=np.abs(np.log(held[0][3] / cv[n][2])))
    model = combine.CombinedFit(members)
    model.set_quality(obs)
    truth = cv[held[0][0]][2]
    w = np.array([h[2] for h in held])
    pred = np.exp((w / w.sum()) @ np.log(np.vstack([h[3] for h in held])))
    scores[combine.NAME] = {
        # in-sample for the weights (they were set on the same folds): optimistic
        "cv_mape": float(np.mean(100 * np.abs(pred - truth) / truth)),
        "fit_ms": float(sum(scores[n]["fit_ms"] for n in {h[0] for h in held})),
        "error": None, "weights": model.weights}
    return Selection(name=combine.NAME, model=model, scores=scores,
                     held_log_err=np.abs(np.log(pred / truth)))


def _calibrate(sel: Selection, on: bool, obs: Observations, folds: Any) -> Selection:
    """The selection with its interval sized by its own held-out errors (calibrate.py)."""
    if on:
        splits = kfold_splits(folds) if isinstance(folds, np.ndarray) else folds
        dist = np.concatenate([distance(obs.cores[te], None if obs.freq_mhz is None
                                        else obs.freq_mhz[te], ranges(obs.subset(tr)))
                               for tr, te in splits])
        # held-out points above every core count of their fold's training runs: the only
        # errors that say how the choice goes on to more cores
        up = np.concatenate([obs.cores[te] > np.max(obs.cores[tr]) for tr, te in splits])
        # a level-free fold's errors are those of the shape alone: they cannot size an
        # interval around the level; without any other fold the choice is unvalidated
        keep = np.concatenate([np.full(int(te.sum()), not _level_free(obs, tr))
                               for tr, te in splits])
        err = np.asarray(sel.held_log_err, float)
        if err.size == keep.size and not keep.any():
            sel.model = _unvalidated(sel.model, obs)
            return sel
        if err.size == keep.size:
            err, dist, up = err[keep], dist[keep], up[keep]
        sel.model = calibrated(sel.model, err, dist, obs, LEVEL,
                               persistence=None if up.any() else _persistence(obs))
    return sel


def _persistence(obs: Observations) -> FittedModel | None:
    """The hold forecast (the persistence baseline) of ``obs``; None where it cannot be
    fitted."""
    try:
        return registry.get(FALLBACK).fit(obs)
    except NotEnoughData:
        return None


def _unvalidated(model: FittedModel, obs: Observations) -> FittedModel:
    """The model with an interval that reaches the hold forecast outside the measured range
    (calibrate.unvalidated); as it is where hold cannot be fitted."""
    persistence = _persistence(obs)
    return model if persistence is None else unvalidated(model, obs, persistence)


def _first_that_fits(obs: Observations, names: list[str]) -> Selection:
    # too few points to hold any out: the first candidate that fits (list order = parsimony)
    reasons = []
    for name in names:
        try:
            return Selection(name=name, model=_unvalidated(registry.get(name).fit(obs), obs),
                             scores={name: {"cv_mape": float("nan"), "fit_ms": float("nan"),
                                            "error": "no CV: fewer than 3 points"}}, folds=0,
                             scheme="none")
        except (NotEnoughData, ImportError, AttributeError) as exc:
            reasons.append(f"{name}: {exc}")
    raise NotEnoughData(f"no candidate model could be fitted ({'; '.join(reasons)})")
