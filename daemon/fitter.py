"""Model fitting off the ingest path: a worker thread fed by a queue.

The service loop reads a group's runs from the store (one indexed query), submits them, and
later collects :class:`FitOutcome` objects without ever waiting on a fit. The worker touches
neither the socket nor the store, so neither needs to be shared across threads.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..shared.point_stats import outliers
from .models import registry as models
from .models import calibrate, pooled
from .models.base import FittedModel, NotEnoughData, Observations
from .models.pooled import ReplayCache
from .store import Group

log = logging.getLogger("opptune.daemon.fitter")

BASE_CANDIDATES = ("amdahl", "usl")
FREQ_CANDIDATES = ("memwall",)
# the other groups' replays through a split (pooled intervals): shared by every fit of this
# process, so the groups of one platform at the same training grid replay the others once
REPLAYS = ReplayCache()


@dataclass
class FitRequest:
    group: Group
    rows: Sequence[tuple[int, float | None, float]]  # (cores, freq_mhz, time_s)
    agent: str | None = None  # whom to recommend to afterwards
    job_id: str | None = None
    recommend: bool = True
    # what the model will be asked (query Observations over the recommendation's candidate
    # grid, or "extrapolate"/None): makes the model choice extrapolation-aware
    target: Any = None
    # physical cores the sweep order fills before SMT siblings (planner.physical_cores)
    phys_cores: int | None = None
    # the fit settings (recommend.fit_setting) of the platform's other groups: their
    # replays size the interval (fit_group, recommend.platform_others)
    others: Sequence[Any] = ()
    # the store's groups on every platform, as (workload key, platform, rows), for a group
    # too small to fit: a prior-based prediction from their curves (models/prior.py): this
    # workload elsewhere first, then the platform's other workloads, then platforms near by
    # MPET
    stored: Sequence[tuple[str, str, Sequence[tuple[int, float | None, float]]]] = ()
    # runs recommend.fit_setting left out of ``rows`` by the MAD rule: stored with the fit
    outliers_left_out: int = 0


@dataclass
class FitOutcome:
    request: FitRequest
    model: FittedModel | None = None
    description: dict[str, Any] = field(default_factory=dict)  # model, params, quality
    runners_up: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def observations(rows: Sequence[tuple[int, float | None, float]],
                 phys_cores: int | None = None) -> Observations:
    """A group's runs as model input. ``phys_cores`` (the board's physical cores in the
    sweep order, when it has SMT siblings) goes in as the ``hw_phys_cores`` descriptor: the
    speedup models then count threads beyond it as SMT siblings with a fitted yield
    (smt.effective_cores), as they do for the datasets' descriptor column."""
    arr = np.asarray([(c, np.nan if f is None else f, t) for c, f, t in rows], dtype=float)
    if arr.size == 0:
        raise NotEnoughData("no run in this group that a fit may use")
    freq = arr[:, 1] if np.isfinite(arr[:, 1]).any() else None
    counters = {} if not phys_cores else {"hw_phys_cores": np.full(len(arr), float(phys_cores))}
    return Observations(cores=arr[:, 0], time_s=arr[:, 2], freq_mhz=freq, counters=counters)


def without_outliers(rows: Sequence[tuple[int, float | None, float]]
                     ) -> tuple[list[tuple[int, float | None, float]], int]:
    """(the rows left after dropping each configuration's outliers by the MAD rule of
    shared.point_stats.outliers, how many were dropped). Only the fit leaves them out: the
    store and every export keep them."""
    by_conf: dict[tuple[int, float | None], list[int]] = {}
    for i, (c, f, _) in enumerate(rows):
        by_conf.setdefault((c, f), []).append(i)
    drop: set[int] = set()
    for idx in by_conf.values():
        flags = outliers([rows[i][2] for i in idx])
        drop.update(i for i, out in zip(idx, flags) if out)
    return [r for i, r in enumerate(rows) if i not in drop], len(drop)


def set_clock_rows(rows: Sequence[Any]) -> list[Any]:
    """The runs of a group that a model may take together: those at a set frequency (a row's
    second item, MHz) as soon as any run has one, else all (left to the governor, or a board
    without cpufreq). A run without a set frequency ran at the governor's clock, unknown, so it
    can stand neither on the frequency axis nor pooled as if measured at another. The one rule
    of the daemon's fits (``fit_rows``) and of a goal's recommendation (goal_recommend)."""
    known = [r for r in rows if r[1] is not None and r[1] == r[1]]
    return list(known or rows)


def set_clocks_khz(rows: Sequence[Any]) -> list[int]:
    """The set frequencies (kHz, ascending) of a group's runs (a row's second item, MHz; None
    or NaN: left to the governor)."""
    return sorted({int(round(float(r[1]) * 1000)) for r in rows
                   if r[1] is not None and r[1] == r[1]})


def fit_rows(rows: Sequence[tuple[int, float | None, float]]
             ) -> tuple[list[tuple[int, float | None, float]], int]:
    """(the runs a fit uses, how many the MAD rule left out): ``set_clock_rows``, then
    ``without_outliers``. The rule of a group's own runs (recommend.fit_setting) and of the
    other groups pooled for its interval (``other_observations``) alike."""
    return without_outliers(set_clock_rows(rows))


def other_observations(settings: Sequence[Any]) -> list[Observations]:
    """The other groups' fit settings (recommend.fit_setting of each: its runs through
    ``fit_rows``, its own board's physical cores) as the ``others`` of ``fit_group``."""
    return [observations(s.rows, s.phys_cores) for s in settings if s.rows]


def candidates_for(obs: Observations) -> list[str]:
    """The time models that apply to these observations and are installed."""
    names = list(BASE_CANDIDATES) + (list(FREQ_CANDIDATES) if obs.has_freq() else [])
    out = []
    for name in names:
        try:
            modeler = models.get(name)
        except (ImportError, AttributeError, ValueError):
            continue
        if modeler.applicable(obs) is None:
            out.append(name)
    return out


def _summary(model: Any) -> dict[str, Any]:
    try:
        return model.describe()
    except Exception as exc:  # a runner-up that cannot describe itself is still listed
        return {"model": getattr(model, "name", "?"), "error": str(exc)}


def fit_group(obs: Observations, target: Any = None, others: Sequence[Observations] = (),
              cache: ReplayCache | None = None) -> tuple[FittedModel, list[dict[str, Any]]]:
    """Choose and fit a model: cross-validated by ``models.select.choose`` when available
    (validated the way ``target`` will be predicted: forward chaining where the target leaves
    the measured cores/frequencies), else the lowest training RMSE among the candidates.
    Returns (model, runners-up). With two or more frequencies the candidates include memwall,
    the model over both axes.

    ``others``: the platform's other groups. Where at least pooled.MIN_GROUPS of them were
    measured at this group's configurations and beyond, each is put through the same choice
    at this group's training configurations and scored on its other rows, and their errors
    size the interval (calibrate.pooled; replays kept in ``cache``, default ``REPLAYS``)."""
    model, runners = _choose(obs, target)
    return with_pooled(model, obs, target, others, lambda o, t: _choose(o, t)[0],
                       REPLAYS if cache is None else cache), runners


def with_pooled(model: FittedModel, obs: Observations, target: Any,
                others: Sequence[Observations], fit: pooled.Fit,
                cache: ReplayCache) -> FittedModel:
    """``model`` (chosen by ``fit`` on ``obs``) with the interval of ``others`` replayed
    through the same choice at ``obs``'s configurations (calibrate.pooled); unchanged with
    fewer than pooled.MIN_GROUPS of them eligible. ``cache`` must hold replays of ``fit``
    only (its key does not name the choice)."""
    if not others:
        return model
    from .models.speedup_fit import LEVEL  # scipy loads at the first fit, not at daemon start

    reps = pooled.replays(fit, obs, list(others), target, cache)
    return calibrate.pooled(model, [r.h0 for r in reps], [r.rate for r in reps], obs,
                            LEVEL, pooled.MIN_GROUPS)


def _choose(obs: Observations, target: Any) -> tuple[FittedModel, list[dict[str, Any]]]:
    cands = candidates_for(obs)
    if not cands:
        raise NotEnoughData("no time model applies to this group's runs")
    try:
        from .models import select
    except ImportError:
        select = None
    if select is not None and hasattr(select, "choose"):
        sel = select.choose(obs, candidates=cands, k=5, seed=0, target=target)
        return _from_selection(sel)
    fitted, errors = [], []
    for name in cands:
        try:
            fitted.append(models.get(name).fit(obs))
        except (NotEnoughData, ValueError, ArithmeticError) as exc:
            errors.append({"model": name, "error": str(exc)})
    if not fitted:
        raise NotEnoughData("; ".join(f"{e['model']}: {e['error']}" for e in errors))
    fitted.sort(key=lambda m: _rmse(m))
    return fitted[0], [_summary(m) for m in fitted[1:]] + errors


def _prior(obs: Observations, req: FitRequest, why: NotEnoughData) -> FittedModel:
    """The prior-based prediction of a group too small to fit; NotEnoughData with both
    reasons when there is none either."""
    from .models.prior import StoredGroup, fit_prior
    g = req.group
    stored = [StoredGroup(w, p, observations(rows)) for w, p, rows in req.stored if rows]
    try:
        return fit_prior(obs, [observations(rows) for _, p, rows in req.stored
                               if rows and p == g.platform],
                         workload=workload_key(g), platform=g.platform, stored=stored)
    except NotEnoughData as exc:
        raise NotEnoughData(f"{why}; {exc}") from None


def workload_key(group: Group) -> str:
    """What makes two groups on different platforms the same workload: workload, input and
    variant."""
    return "/".join((group.workload, group.input, group.variant))


def _rmse(m: FittedModel) -> float:
    r = m.quality.get("rmse", float("inf"))
    return r if r == r else float("inf")


def _from_selection(sel: Any) -> tuple[FittedModel, list[dict[str, Any]]]:
    """The chosen model (its held-out score added to its quality) and the other candidates'
    cross-validation rows, best first."""
    model = sel.model
    chosen = sel.scores.get(sel.name, {})
    model.quality = {**model.quality, "cv_mape": chosen.get("cv_mape"), "cv_folds": sel.folds,
                     "cv_scheme": getattr(sel, "scheme", None)}
    runners = [{"model": row["name"], **_plain(row)} for row in sel.table()
               if row["name"] != sel.name]
    return model, runners


def _plain(v: Any) -> Any:
    """A JSON-ready view of dataclasses, named tuples and numpy values."""
    import dataclasses
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)
                if not isinstance(getattr(v, f.name), FittedModel)}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items() if not isinstance(x, FittedModel)}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, FittedModel):
        return _summary(v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v if isinstance(v, (str, int, float, bool, type(None))) else str(v)


class Fitter:
    """A worker thread that fits submitted groups; requests for a group already waiting are
    merged (the newest rows win) so a burst of batches costs one fit."""

    def __init__(self) -> None:
        self._in: queue.Queue[FitRequest | None] = queue.Queue()
        self._out: queue.Queue[FitOutcome] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="opptune-fitter", daemon=True)
        self.fits_done = 0

    def start(self) -> "Fitter":
        self._thread.start()
        return self

    def submit(self, req: FitRequest) -> None:
        self._in.put(req)

    def outcomes(self) -> list[FitOutcome]:
        """Finished fits, without waiting."""
        out = []
        while True:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                return out

    def wait_outcome(self, timeout_s: float) -> FitOutcome | None:
        try:
            return self._out.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def stop(self, timeout_s: float = 5.0) -> None:
        self._in.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            req = self._in.get()
            if req is None:
                return
            pending = {req.group: req}
            stop = False
            while True:  # merge whatever else is already waiting
                try:
                    more = self._in.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                prev = pending.get(more.group)
                if prev is not None and prev.agent and not more.agent:
                    more.agent, more.job_id = prev.agent, prev.job_id
                pending[more.group] = more
            for r in pending.values():
                self._out.put(self.fit_one(r))
            if stop:
                return

    def fit_one(self, req: FitRequest) -> FitOutcome:
        t0 = time.perf_counter()
        out = FitOutcome(req)
        try:
            obs = observations(req.rows, req.phys_cores)  # outliers out in fit_setting
            others = other_observations(req.others)
            try:
                model, runners = fit_group(obs, req.target, others)
            except NotEnoughData as exc:
                if not req.stored:
                    raise
                model, runners = _prior(obs, req, exc), []
            out.model, out.runners_up = model, runners
            out.description = _plain(model.describe())
            # stored with the fit's quality: status and the report say how many were left out
            out.description.setdefault("quality", {})["outliers_left_out"] = \
                req.outliers_left_out
        except Exception as exc:  # a fit failing must never stop the worker
            out.error = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, NotEnoughData):
                log.exception("fitting %s failed", "/".join(req.group))
        out.seconds = time.perf_counter() - t0
        self.fits_done += 1
        return out
