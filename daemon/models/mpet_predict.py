"""MPET candidate selection and the predictions of scenarios (a) and (b) (seed 000, section
3.2.2-3.2.3, 4.1).

Pure. Predictions read an ``MpetDatabase`` (mpet_database: profiles, their sc, the t(1) and
q(n) tables); the validated bases rate candidates with mpet_validate; the candidates' transfers
are combined by mpet_reconstruct (eq. 21-23); the interval is mpet_interval's, calibrated on
the errors ``calibration_errors`` gathers.

Scenario (a), migration: workload A profiled on reference platforms P, predicted on a target T
known through the other workloads (the suite) measured there. Scenario (b), scalability: A has
only t(1) (and counters at n = 1) on P; its scaling elements come from the closest workloads on P.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Hashable

import numpy as np

from .mpet_curve import PARAMS, fit_curve, time_curve
from .mpet_database import MpetDatabase
from .mpet_distance import Distances, tuple_distance, tuple_distances
from .mpet_interval import calibrated_band, candidates_band
from .mpet_reconstruct import penalty, reconstruct
from .mpet_validate import VALIDATION_FLOOR, likeness_to, validate_q, validate_t1


BASES = ("sc", "t1-ratio", "q-ratio", "t1-validated", "q-validated", "q-chosen")
# validated bases and the ratio basis each falls back to where nothing can be checked
VALIDATED = {"t1-validated": "t1-ratio", "q-validated": "q-ratio"}


@dataclass(frozen=True)
class Selection:
    """How candidates are chosen and weighted (section 3.2.2-3.2.3).

    Candidates are (P, B) tuples, taken in order of tuple distance (eq. 20) while at most
    ``n_platforms`` distinct P and ``n_workloads`` distinct B are used. ``workload_distance`` and
    ``platform_distance`` pick the individual (eq. 16-17) or mean (eq. 18-19) distances;
    ``weight`` says which distance gives w = 1 - D ("a", "p" or "t"); ``k`` is r(w)'s exponent.

    Two choices beyond the seed (defaults = the seed as written):
    ``space`` = "elements" applies eq. 21/23 to each element of sc (for sc) or to t(1);
    "curve" (sc only) applies them to the cpu-time ratio q(n) = n t(n)/t(1) at each of the
    target's core counts (measured, or the fitted curve beyond the measured counts) and rebuilds
    t(n) = t(1) q(n)/n: q(n) is positive and 1 at n = 1, while the linear-fit elements of a
    curve change sign and pass near 0, where f = sc(P,A)/sc(P,B) explodes.
    ``mean`` = "arithmetic" is eq. 23; "geometric" is its weighted geometric mean, the mean
    that suits ratios (a factor of 2 and one of 1/2 average to 1); it leaves out values <= 0.
    ``basis`` = "sc" rates candidates by D_a and D_p over sc (eq. 16-19); "t1-ratio" (for t(1))
    by how far from proportional the measured t(1) are (mpet_distance.ratio_distance): D_a over
    the reference platforms A and B share, D_p over the suite P and T share. Eq. 21 transfers
    t(1) exactly from a B whose t(1) is proportional to A's, and sc holds nothing about
    sequential speed where there are no counters. "q-ratio" (for sc) does the same with the
    measured q(n), n >= 2, per n (what eq. 21 in ``space="curve"`` transfers). With k > 0 the
    ratio D_a weighs A's reference platforms by eq. 22's penalty of their ratio D_p to T (B
    should be proportional to A where platforms behave like T). Where A shares fewer than two
    platforms with every B (or P fewer than two workloads with T), that distance falls back to
    sc's. Migration only: scenario (b) rates candidates by sc.
    "t1-validated" (for t(1)) rates each (P, B) tuple by how well its own eq. 21 transfer
    predicted the known t(1) nearest the prediction (A on its other references like T, the
    suite on T like A) and weights candidates by the inverse of that error variance instead of
    eq. 22's r(w) (see mpet_validate.validate_t1); where no tuple can be checked it is
    "t1-ratio".
    "q-validated" (for sc, space "curve") does the same with q(n) at T's core counts
    (``mpet_validate.validate_q``; where nothing can be checked it is "q-ratio"). "q-chosen"
    (for sc) takes, per prediction, the seed's "sc" where the instrumented runtime gave the
    scaling parameters (``runtime_parameters``), else whichever of q-ratio and q-validated
    predicted T's other workloads better in a leave-one-out over T's suite (``choose_sc``).
    """
    n_platforms: int = 3
    n_workloads: int = 10
    workload_distance: str = "individual"
    platform_distance: str = "individual"
    weight: str = "a"
    k: int = 3
    # Not in the seed (None = eq. 21 as written): a factor f outside [1/max_factor, max_factor],
    # or negative, leaves its candidate out of that element; near-zero denominators otherwise
    # blow single elements up by orders of magnitude.
    max_factor: float | None = None
    space: str = "elements"
    mean: str = "arithmetic"
    basis: str = "sc"

    def __post_init__(self):
        if self.n_platforms < 1 or self.n_workloads < 1:
            raise ValueError("candidate counts must be >= 1")
        if self.workload_distance not in ("individual", "mean") or \
                self.platform_distance not in ("individual", "mean"):
            raise ValueError("distances are 'individual' or 'mean'")
        if self.weight not in ("a", "p", "t"):
            raise ValueError("weight is 'a', 'p' or 't'")
        if self.k not in (0, 1, 2, 3):
            raise ValueError("k is one of 0, 1, 2, 3 (eq. 22)")
        if self.max_factor is not None and not self.max_factor > 1:
            raise ValueError("max_factor must be > 1 (or None)")
        if self.space not in ("elements", "curve"):
            raise ValueError("space is 'elements' or 'curve'")
        if self.mean not in ("arithmetic", "geometric"):
            raise ValueError("mean is 'arithmetic' or 'geometric'")
        if self.basis not in BASES:
            raise ValueError(f"basis is one of {', '.join(repr(b) for b in BASES)}")
        if self.basis in ("q-validated", "q-chosen") and self.space != "curve":
            raise ValueError(f"basis {self.basis!r} works on q(n) values: space='curve'")


# Section 4.1's final setup: t(1) from 5 workloads x 5 platforms rated by mean workload and
# individual platform distance, weighted by mean workload distance, k = 0; sc from tuples of
# individual distances (3 platforms, 10 workloads), weighted by individual workload distance, k = 3.
SEED_T1 = Selection(n_platforms=5, n_workloads=5, workload_distance="mean",
                    platform_distance="individual", weight="a", k=0)
SEED_SC = Selection(n_platforms=3, n_workloads=10, workload_distance="individual",
                    platform_distance="individual", weight="a", k=3)
# The default here: the seed's counts and weights, with eq. 21/23 on q(n) values, the geometric
# mean of the factors, and candidates rated by the ratio distances (the transfer eq. 21 makes,
# checked on the platforms and workloads where it can be; see Selection). Counts, k and weights
# stay the seed's: docs/mpet.md gives this setup's figures beside the seed's and beside the
# nested setup, which chooses them inside the leave-one-out.
RATIO_T1 = dataclasses.replace(SEED_T1, mean="geometric", basis="t1-ratio")
# t(1) by validated transfers (``mpet_validate.validate_t1``); the seed's counts, geometric mean.
DEFAULT_T1 = dataclasses.replace(RATIO_T1, basis="t1-validated")
# sc by ratio distances (the default before "q-chosen"), and the default: per prediction,
# whichever of q-ratio and q-validated predicted T's other workloads better (``choose_sc``)
RATIO_SC = dataclasses.replace(SEED_SC, space="curve", mean="geometric", basis="q-ratio")
DEFAULT_SC = dataclasses.replace(RATIO_SC, basis="q-chosen")
# "q-chosen": the sc bases it chooses between, per prediction (``choose_sc``); the first
# is kept on a tie or where nothing can be scored
SC_OPTIONS = ("q-ratio", "q-validated")


# The most of the target's other workloads one migration considers: those most alike A
# (``nearest_suite``). Its validations check each tuple on T's suite and its choice and
# calibration predict each suite workload again, so without a bound a prediction costs m^3 in
# the m workloads on T (60 workloads x 9 platforms: 0.8 s); twice the bench_suite's kernels,
# so the suite and a user's first workloads are all considered.
NEIGHBOURS = 24


@dataclass
class Candidate:
    platform: Hashable
    workload: Hashable
    d_a: float
    d_p: float
    d_t: float
    weight: float = math.nan  # r(w) of eq. 22 (t1-validated: inverse error variance)
    # t1-validated: the weighted mean squared log error of this tuple's transfer on the known
    # t(1) nearest the prediction (see mpet_validate.validate_t1); NaN where none was checked
    var: float = math.nan
    # whether it gave an estimate (set by the interval): a profile lacking t(1) or a valid
    # curve on one side of the transfer is listed but adds nothing
    usable: bool = True


@dataclass
class Prediction:
    workload: Hashable
    target: Hashable
    t1: float
    sc: np.ndarray
    ns: list[int]
    t: list[float]
    t1_candidates: list[Candidate] = field(default_factory=list)
    sc_candidates: list[Candidate] = field(default_factory=list)
    # Interval per n. Calibrated (``calibrated`` = m > 0, scenario (a)): t exp(+-e), e = the
    # largest log error of the same prediction made for each of the target's other workloads,
    # which holds a new one with probability ``level`` = m/(m+1) where the m are alike (split
    # conformal; (m - j)/(m + 1) where j of them could not give a positive time). Else
    # min..max of the single candidates' predictions around the weighted one (t1-validated:
    # t(1) within SIGMAS of its validated error), at least [t/f, t f]
    # (SINGLE_CANDIDATE_FACTOR) where t(1) or sc rests on one candidate; ``level`` None.
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    single_candidate: bool = False
    calibrated: int = 0
    level: float | None = None
    # the bases that rated the candidates (Selection.basis), after any fallback: "t1-validated"
    # and "q-validated" become "t1-ratio"/"q-ratio" where no tuple could be checked; scenario
    # (b): t1_basis "measured" (its own t(1))
    t1_basis: str = ""
    sc_basis: str = ""
    # sc basis "q-chosen": why (``score_sc``): {"chosen", "errors": {basis: geometric-mean
    # trend error on T's other workloads, or None}, "checked": how many were predicted}
    sc_choice: dict | None = None
    # scenario (a): (considered, measured) of the target's other workloads (``nearest_suite``)
    suite: tuple[int, int] | None = None


class NoCandidates(ValueError):
    """The database holds no candidate for this prediction."""


def _candidates(dist: Distances, db: MpetDatabase, workload, target, sel: Selection,
                refs=None, used: list | None = None) -> list[Candidate]:
    """The candidates by ``sel``; ``used`` (a list) gets the basis that rated them."""
    refs = set(refs) if refs is not None else dist.platforms_of.get(workload, set())
    suite = dist.workloads_on.get(target, set()) - {workload}
    pairs = []
    for p in refs:
        if p == target:
            continue
        for b in suite & dist.workloads_on.get(p, set()):
            pairs.append(Candidate(p, b, math.nan, math.nan, math.nan))

    def sc_distances(which):
        # eq. 16-19 for every pair at once
        ps, bs = [c.platform for c in pairs], [c.workload for c in pairs]
        if which == "a":
            if sel.workload_distance == "mean":
                mean = {b: dist.d_a_mean(workload, b) for b in dict.fromkeys(bs)}
                vals = [mean[b] for b in bs]
            else:
                vals = dist.d_a_many(ps, workload, bs)
            for c, v in zip(pairs, vals):
                c.d_a = v
        else:
            if sel.platform_distance == "mean":
                mean = {p: dist.d_p_mean(p, target) for p in dict.fromkeys(ps)}
                vals = [mean[p] for p in ps]
            else:
                vals = dist.d_p_many(bs, ps, target)
            for c, v in zip(pairs, vals):
                c.d_p = v

    if sel.basis in VALIDATED:
        check = validate_t1 if sel.basis == "t1-validated" else validate_q
        if not check(db, workload, target, pairs, refs):
            return _candidates(dist, db, workload, target,
                               dataclasses.replace(sel, basis=VALIDATED[sel.basis]), refs, used)
    elif sel.basis == "sc":
        sc_distances("a")
        sc_distances("p")
    elif pairs:
        # q: grouped per n (q(n)'s factor of eq. 21 is taken per n)
        kind = "t1" if sel.basis == "t1-ratio" else "q"
        # cached per database: the nested evaluation asks the same pairs for every setting
        cache = db.__dict__.setdefault("_ratio_cache", {})
        ref_key = frozenset(refs) - {target}
        others = lambda r: r != workload  # noqa: E731
        da, dp = {}, {}
        todo = [p for p in ref_key if (sel.basis, "p", workload, p, target) not in cache]
        for p, d in zip(todo, db.ratio_from(kind, todo, target, others)):
            cache[(sel.basis, "p", workload, p, target)] = d
        for p in ref_key:
            dp[p] = cache[(sel.basis, "p", workload, p, target)]
        # D_a over the references weighted by eq. 22's penalty of their D_p to T (k = 0: all
        # alike): B should be proportional to A on the platforms that behave like T
        pen = None
        if sel.k > 0:
            refs_l = sorted(ref_key, key=str)
            w = np.array([1.0 - dp[p] if math.isfinite(dp[p]) else 0.0 for p in refs_l])
            pen = dict(zip(refs_l, penalty(w, sel.k).tolist()))
        mine = lambda r: r in ref_key  # noqa: E731
        todo = [b for b in {c.workload for c in pairs}
                if (sel.basis, "a", workload, b, ref_key, target, sel.k) not in cache]
        for b, d in zip(todo, db.ratio(kind, "w", workload, todo, mine, pen)):
            cache[(sel.basis, "a", workload, b, ref_key, target, sel.k)] = d
        for b in {c.workload for c in pairs}:
            da[b] = cache[(sel.basis, "a", workload, b, ref_key, target, sel.k)]
        ra = [da[c.workload] for c in pairs]
        rp = [dp[c.platform] for c in pairs]
        # per component: the ratio distance where any candidate has it, else sc's (a workload
        # on one reference platform, a target with one suite workload)
        for which, vals in (("a", ra), ("p", rp)):
            if any(math.isfinite(x) for x in vals):
                for c, x in zip(pairs, vals):
                    setattr(c, "d_" + which, x)
            else:
                sc_distances(which)
    for c, d in zip(pairs, tuple_distances([c.d_p for c in pairs], [c.d_a for c in pairs])):
        c.d_t = d
    if sel.basis in VALIDATED:  # in order of validated error (unknown last)
        pairs.sort(key=lambda c: (c.var if math.isfinite(c.var) else math.inf,
                                  str(c.platform), str(c.workload)))
    else:
        pairs.sort(key=lambda c: (c.d_t, str(c.platform), str(c.workload)))
    if used is not None:
        used.append(sel.basis)
    chosen, plats, works = [], set(), set()
    for c in pairs:
        if (c.platform in plats or len(plats) < sel.n_platforms) and \
                (c.workload in works or len(works) < sel.n_workloads):
            chosen.append(c)
            plats.add(c.platform); works.add(c.workload)
    return chosen


def _weights(cands: list[Candidate], sel: Selection) -> np.ndarray:
    if sel.basis in VALIDATED and any(math.isfinite(c.var) for c in cands):
        # inverse variance in place of eq. 22 (see mpet_validate); an unvalidated candidate
        # counts as the worst validated one; scaled to a largest weight of 1
        v = np.array([c.var for c in cands], dtype=float)
        v = np.where(np.isfinite(v), v, np.nanmax(v))
        r = 1.0 / (v + VALIDATION_FLOOR ** 2)
        r = r / r.max()
        for c, x in zip(cands, r):
            c.weight = float(x)
        return r
    d = np.array([{"a": c.d_a, "p": c.d_p, "t": c.d_t}[sel.weight] for c in cands], dtype=float)
    w = 1.0 - np.where(np.isfinite(d), d, 1.0)
    r = penalty(w, sel.k)
    for c, v in zip(cands, r):
        c.weight = float(v)
    return r


def _q_curve(db: MpetDatabase, workload, target, sel: Selection, nsa: np.ndarray):
    """Eq. 21/23 on q(n) values alone (the sc half of ``predict_migration``, space "curve");
    None without candidates."""
    cs = _candidates(db.distances(), db, workload, target, sel)
    if not cs:
        return None
    r = _weights(cs, sel)
    nst = tuple(float(n) for n in nsa)
    rows = [np.vstack([db._q_values(k, nst) for k in keys]) for keys in
            ([(c.workload, target) for c in cs], [(workload, c.platform) for c in cs],
             [(c.workload, c.platform) for c in cs])]
    return reconstruct(*rows, r, sel.max_factor, sel.mean)


def runtime_parameters(db: MpetDatabase, workload, target) -> bool:
    """Whether the seed's scaling parameters R..j (Table 1) are there to rate sc candidates
    by: in A's profile on every platform it was measured on but T, and in at least one other
    workload's on T (an external workload or a dataset without the instrumented runtime has
    them invalid)."""
    width = 6 * len(PARAMS)
    has = lambda key: bool(np.isfinite(db.sc[key][:width]).any())  # noqa: E731
    refs = [k for k in db.sc if k[0] == workload and k[1] != target]
    suite = [k for k in db.sc if k[1] == target and k[0] != workload]
    return bool(refs) and all(has(k) for k in refs) and any(has(k) for k in suite)


def choose_sc(db: MpetDatabase, workload, target, sel: Selection) -> Selection:
    """Basis "q-chosen": ``sel`` with the basis ``score_sc`` chose."""
    return dataclasses.replace(sel, basis=score_sc(db, workload, target, sel)["chosen"])


# score_sc's answer where the runtime parameters are there
RUNTIME_CHOICE = {"chosen": "sc", "errors": {}, "checked": 0, "runtime_parameters": True}


def score_sc(db: MpetDatabase, workload, target, sel: Selection) -> dict:
    """Basis "q-chosen": "sc" (the seed's distances over sc, eq. 16-19) where the runtime
    parameters are there (``runtime_parameters``): they tell apart behaviours that q(n) on
    small platforms does not (on the 2-core machine triad and locked_update both scale about
    1.2x; on the 16-core one triad scales 8.8x and locked_update slows down, and only the lock
    wait l(n) differs beforehand). Measured on the bench_suite sets, scaling / full: 7.0 / 18.7
    -> 7.2 / 18.6 (3 platforms), 14.6 / 25.4 -> 11.6 / 21.7 (with the 16-core machine);
    docs/mpet.md. Else the basis, of SC_OPTIONS, whose scaling predictions of the target's
    other workloads were best (``suite_scores``, ``sc_choice``). Not in the seed: which
    transfer suits T is decided on T's own data.

    Returns {"chosen": basis, "errors": {basis: the geometric-mean error, None where none
    could be scored}, "checked": how many B' were scored}; with the runtime parameters
    RUNTIME_CHOICE."""
    return _q_chosen(db, workload, target, sel)[0]


def _q_chosen(db: MpetDatabase, workload, target, sel: Selection,
              subs: dict | None = None) -> tuple[dict, dict | None]:
    """``score_sc``'s answer and the ``suite_scores`` it rests on (None with the runtime
    parameters, where nothing is scored): the calibration reuses them."""
    if runtime_parameters(db, workload, target):
        return dict(RUNTIME_CHOICE), None
    scores = suite_scores(db, workload, target, sel, subs)
    return sc_choice(scores), scores


def _without(db: MpetDatabase, key, subs: dict | None) -> MpetDatabase:
    """``db.without(key)``, kept in ``subs`` (when given) for the next step that hides the
    same profile: the choice and the calibration hide each suite workload's profile on T in
    turn, and what a copy computes (distances, kernels) is then computed once."""
    if subs is None:
        return db.without(key)
    got = subs.get(key)
    if got is None:
        got = subs[key] = db.without(key)
    return got


def suite_scores(db: MpetDatabase, workload, target, sel: Selection,
                 subs: dict | None = None) -> dict:
    """The leave-one-out over T's suite that "q-chosen" chooses by: each suite workload B' on
    T (but ``workload``) removed in turn and its q(n) predicted from its other platforms with
    each basis of SC_OPTIONS; {B': [trend error of t(1) q(n)/n against the measured t(n), per
    option]} over the B' that every option could predict."""
    options = [dataclasses.replace(sel, basis=b) for b in SC_OPTIONS]
    scores = {}
    dist = db.distances()
    for b in sorted(dist.workloads_on.get(target, set()) - {workload}, key=str):
        t = db.profiles[(b, target)].get("t") or {}
        pts = sorted((float(n), float(v)) for n, v in t.items()
                     if v is not None and math.isfinite(float(v)) and float(v) > 0)
        if len(pts) < 2 or pts[0][0] != 1:
            continue
        nsa = np.array([n for n, _ in pts])
        meas = np.array([v for _, v in pts])
        sub = _without(db, (b, target), subs)
        got = []
        for opt in options:
            try:
                q = _q_curve(sub, b, target, opt, nsa)
            except NoCandidates:
                q = None
            if q is None or not np.all(np.isfinite(q)):
                break
            got.append(float(np.mean(np.abs(meas[0] * q / nsa - meas) / meas)))
        if len(got) == len(options):
            scores[b] = got
    return scores


def sc_choice(scores: dict, leave_out=None) -> dict:
    """The option of SC_OPTIONS with the lowest geometric mean of ``suite_scores``' errors
    (over its B' but ``leave_out``); the first where none could be scored or on a tie."""
    rows = [e for b, e in sorted(scores.items(), key=lambda kv: str(kv[0])) if b != leave_out]
    if not rows:
        return {"chosen": SC_OPTIONS[0], "errors": {b: None for b in SC_OPTIONS}, "checked": 0}
    means = [sum(math.log(max(r[i], 1e-9)) for r in rows) / len(rows)
             for i in range(len(SC_OPTIONS))]
    return {"chosen": SC_OPTIONS[int(np.argmin(means))], "checked": len(rows),
            "errors": {b: math.exp(m) for b, m in zip(SC_OPTIONS, means)}}


def nearest_suite(db: MpetDatabase, workload, target, refs=None,
                  k: int = NEIGHBOURS) -> MpetDatabase:
    """``db`` with, of the workloads measured on ``target``, only the ``k`` that behave most
    like ``workload`` on its references (``likeness_to``; ties by name) and ``workload``
    itself; ``db`` where T has no more than k others. Not in the seed: its candidates are the
    nearest workloads anyway (5 for t(1), 10 for sc), and a workload far from A gets almost no
    weight in the validations (1 / s^4)."""
    dist = db.distances()
    suite = dist.workloads_on.get(target, set()) - {workload}
    if len(suite) <= k:
        return db
    if refs is None:
        refs = dist.platforms_of.get(workload, set())
    like = likeness_to(db, workload, target, set(refs))
    near = sorted(suite, key=lambda b: (-like.get(b, 0.0), str(b)))[:k]
    return db.only_workloads({workload, *near})


def predict_migration(db: MpetDatabase, workload, target, t1_sel: Selection = DEFAULT_T1,
                      sc_sel: Selection = DEFAULT_SC, refs=None, ns=None,
                      interval: str = "calibrated", sc_vector: bool = True) -> Prediction:
    """Scenario (a): t(1) and sc of ``workload`` on ``target`` from its profiles on ``refs``
    (default: every platform it is profiled on but the target) and the target's suite.

    t(1) and sc use separate selections (section 4.1; ``SEED_T1``/``SEED_SC`` = the seed as
    written). The profile (workload, target), if present, is not used: call on
    ``db.without((workload, target))`` to be sure. ``interval``: "calibrated" (on the
    target's other workloads, ``calibrate``; the candidates' band where fewer than
    ``MIN_CALIBRATION`` can be predicted), "candidates", or "none". ``sc_vector`` False (with
    interval "none"): sc is not reconstructed (all NaN) where t(n) does not need it (space
    "curve": t(n) comes from q(n)), for callers that read t(1) and t(n) alone.
    """
    db = db.without((workload, target)) if (workload, target) in db.sc else db
    m = len(db.distances().workloads_on.get(target, set()) - {workload})
    db = nearest_suite(db, workload, target, refs)
    asked_sc = sc_sel
    topo = db.platforms.get(target, {})
    if ns is None:
        ns = list(range(1, int(topo.get("nmax") or 1) + 1))
    nsa = np.asarray(list(ns), dtype=float)
    nst = tuple(float(n) for n in nsa)
    choice = scores = None
    subs: dict = {}  # the copies of db without one profile of T's suite, made once
    # a workload measured at one core count (on a reference or on T) gives t(1) its t(1); it
    # has no scaling to lend: sc's candidates, validations and choice do not see it
    sdb = db.scaling_only(workload)
    whole = sdb is db  # the choice's scores and copies are db's, the calibration's own
    if sc_sel.basis == "q-chosen":
        choice, scores = _q_chosen(sdb, workload, target, sc_sel, subs if whole else None)
        sc_sel = dataclasses.replace(sc_sel, basis=choice["chosen"])
    cands, rows, used = {}, {}, []
    for name, sel in (("t1", t1_sel), ("sc", sc_sel)):
        on = db if name == "t1" else sdb
        cs = _candidates(on.distances(), on, workload, target, sel, refs, used)
        if not cs and on is not db and np.all(nsa == 1):
            # t(1) alone asked (a set measured at one core count): q(1) = 1 whatever sc is
            sdb = on = db
            cs = _candidates(db.distances(), db, workload, target, sel, refs, used)
        if not cs:
            raise NoCandidates(f"no candidate: {workload!r} shares no platform with a workload "
                               f"measured on {target!r}"
                               + (" at more than one core count" if name == "sc" else ""))
        _weights(cs, sel)
        cands[name] = cs
        if name == "t1":
            rows[name] = [np.array([[db.t1((c.workload, target))] for c in cs]),
                          np.array([[db.t1((workload, c.platform))] for c in cs]),
                          np.array([[db.t1((c.workload, c.platform))] for c in cs])]
        else:
            keys = ([(c.workload, target) for c in cs], [(workload, c.platform) for c in cs],
                    [(c.workload, c.platform) for c in cs])
            skip_sc = sel.space == "curve" and not sc_vector and interval == "none"
            if not skip_sc:
                rows[name] = [np.vstack([sdb.sc[k] for k in ks]) for ks in keys]
            if sel.space == "curve":
                rows["q"] = [np.vstack([sdb._q_values(k, nst) for k in ks]) for ks in keys]

    def combine(name, sel, r):
        return reconstruct(*rows[name], r, sel.max_factor, sel.mean)

    r1 = np.array([c.weight for c in cands["t1"]])
    rs = np.array([c.weight for c in cands["sc"]])
    t1 = float(combine("t1", t1_sel, r1)[0])
    if "sc" not in rows:
        sc = np.full(len(db.names), np.nan)
    else:
        sc = combine("sc", sc_sel, rs)
    if sc_sel.space == "curve":
        q = combine("q", sc_sel, rs)
        if "sc" in rows:
            # sc's q(n) part refitted to the predicted values, so sc describes what t(n) shows
            off = 6 * len(PARAMS)
            sc[off: off + 6] = fit_curve(nsa, q, topo.get("n_nu"), topo.get("n_ht"))
        t = t1 * q / nsa
    else:
        t = time_curve(t1, sc, nsa, topo.get("n_nu"), topo.get("n_ht"))
    pred = Prediction(workload, target, t1, sc, [int(n) for n in nsa], [float(x) for x in t],
                      cands["t1"], cands["sc"], t1_basis=used[0], sc_basis=used[1],
                      sc_choice=choice, suite=(min(m, NEIGHBOURS), m))
    if interval != "none":
        candidates_band(pred, rows, t1_sel, sc_sel, topo, nsa)
    if interval == "calibrated":
        calibrate(pred, db, refs, t1_sel, asked_sc, scores if whole else None, subs)
    return pred


def calibration_errors(db: MpetDatabase, workload, target, refs=None,
                       t1_sel: Selection = DEFAULT_T1, sc_sel: Selection = DEFAULT_SC,
                       scores: dict | None = None, subs: dict | None = None) -> list[float]:
    """The largest |log(predicted / measured t(n))| over n of each other workload B on
    ``target``, predicted as ``workload`` is: from its profiles on the references (those of
    ``refs``, default ``workload``'s, that B was measured on), without (B, target).

    ``scores``: ``workload``'s ``suite_scores`` (sc "q-chosen" without the runtime
    parameters). B's choice is then ``sc_choice`` of them without B's own row, instead of a
    leave-one-out of its own over T's suite without B: the same rows but for B's profile on T
    as a candidate of the others. The nested one costs m^2 sc predictions (20 workloads x 5
    platforms: 609 ms a prediction, 73 ms reused; benchmarks/mpet.py; docs/mpet.md).
    ``subs``: the copies without (B, target) the choice made (``_without``)."""
    if refs is None:
        refs = db.distances().platforms_of.get(workload, set()) - {target}
    errors = []
    for b in sorted({w for w, p in db.profiles if p == target and w != workload}, key=str):
        mine = sorted((p for p in refs if (b, p) in db.profiles), key=str)
        if not mine:
            continue
        sub = _without(db, (b, target), subs)
        sel = sc_sel
        if scores is not None and sc_sel.basis == "q-chosen" and not runtime_parameters(
                sub, b, target):
            sel = dataclasses.replace(sc_sel, basis=sc_choice(scores, leave_out=b)["chosen"])
        errors.append(largest_log_error(db.profiles[(b, target)], lambda ns: predict_migration(
            sub, b, target, t1_sel, sel, refs=mine, ns=ns, interval="none",
            sc_vector=False)))
    return [e for e in errors if e is not None]


def largest_log_error(profile: dict, predict) -> float | None:
    """max over the profile's measured n of |log(predicted / measured t(n))|, the prediction
    ``predict(ns)`` at those n; inf where it was made but is not a positive time at some n
    (eq. 21 on elements can give one), None where it cannot be made."""
    meas = {int(n): float(v) for n, v in (profile.get("t") or {}).items() if float(v) > 0}
    if not meas:
        return None
    ns = sorted(meas)
    try:
        pred = predict(ns)
    except NoCandidates:
        return None
    with np.errstate(all="ignore"):
        e = np.abs(np.log(np.asarray(pred.t) / np.array([meas[n] for n in ns])))
    return float(e.max()) if np.all(np.isfinite(e)) else math.inf


def calibrate(pred: Prediction, db: MpetDatabase, refs, t1_sel: Selection,
              sc_sel: Selection, scores: dict | None = None, subs: dict | None = None) -> None:
    """The interval ``calibrated_band`` of ``calibration_errors`` (split conformal: where the
    target's m other workloads and this one are alike, the measured t(n) lies inside at every
    n with probability m/(m+1)); left as it is (the candidates' band) with fewer than
    MIN_CALIBRATION errors. Why: the candidates' spread says how much they disagree, not how
    wrong the transfer is; the errors on the target's own suite measure the latter."""
    errors = calibration_errors(db, pred.workload, pred.target, refs, t1_sel, sc_sel, scores,
                                subs)
    band = calibrated_band(pred.t, errors)
    if band is None:
        return
    pred.lower, pred.upper, pred.level = band
    pred.calibrated = len(errors)


def predict_scalability(db: MpetDatabase, workload, platform, sel: Selection = SEED_SC,
                        ns=None) -> Prediction:
    """Scenario (b): t(n) on ``platform`` of a workload profiled there only at n = 1.

    Candidates are the other workloads measured on the platform at more than one core count
    (the scaling they lend), by D_a (eq. 16) over the elements the sequential profile has (its
    counters' offsets). A sequential profile has no scaling factor
    for eq. 21 (f = sc(P,A)/sc(P,B) is unknown), so f = 1: eq. 23 becomes the penalised mean of
    the candidates' elements, the seed's "adopting scaling features of existing benchmarks".
    """
    key = (workload, platform)
    if key not in db.sc:
        raise NoCandidates(f"{workload!r} has no profile on {platform!r}")
    dist = db.distances()
    # a workload measured at one core count has no scaling to lend, and its profile is as
    # sequential as A's: D_a 0 made it the only weighted candidate (its q offset with the
    # others' slopes: a t(1) 30 % off A's own)
    on_p = dist.workloads_on.get(platform, set()) - {workload}
    others = sorted((b for b in on_p if db.scales((b, platform))), key=str)
    cands = [Candidate(platform, b, d, 0.0, math.nan)
             for b, d in zip(others, dist.d_a_many([platform] * len(others), workload, others))]
    for c in cands:
        c.d_t = tuple_distance(0.0, c.d_a)
    cands.sort(key=lambda c: (c.d_t, str(c.workload)))
    cands = cands[: sel.n_workloads]
    if not cands:
        raise NoCandidates(f"no other workload measured on {platform!r}"
                           + (" at more than one core count" if on_p else ""))
    r = _weights(cands, sel)
    tv = np.vstack([db.sc[(c.workload, platform)] for c in cands])
    sc = reconstruct(tv, np.ones_like(tv), np.ones_like(tv), r)
    own = db.sc[key]
    has = np.isfinite(own)
    # keep what the sequential profile itself measured (offsets of its counters at n = 1)
    sc = np.where(has & ~np.isfinite(sc), own, sc)
    topo = db.platforms.get(platform, {})
    if ns is None:
        ns = list(range(1, int(topo.get("nmax") or 1) + 1))
    t1 = db.t1(key)
    t = time_curve(t1, sc, ns, topo.get("n_nu"), topo.get("n_ht"))
    return Prediction(workload, platform, t1, sc, list(ns), [float(x) for x in t], [], cands,
                      t1_basis="measured", sc_basis=sel.basis)
