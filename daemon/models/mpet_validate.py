"""Validated transfers (departs from seed 000's eq. 20-22; docs/mpet.md, "Departures"). Pure.

Each candidate tuple (P, B) of a migration of A to T is rated by how well its own eq. 21
transfer reproduced the known entries nearest the one predicted: A on its other references
(weighted by how much each behaves like T) and the other suite workloads on T (weighted by how
much each behaves like A). ``validate_t1`` does it on the t(1) table, ``validate_q`` on q(n) at
T's core counts; each sets the candidates' ``var`` (the weighted mean squared log error),
``d_a`` and ``d_p``, which mpet_predict orders and weighs them by.
"""

from __future__ import annotations

import math

import numpy as np

from .mpet_database import MpetDatabase


# t1-validated: the noise floor of a log t(1) (single runs vary by a few %), so a tuple that
# happened to transfer exactly on the references is not weighted without bound.
VALIDATION_FLOOR = 0.03


def _log_deviation(d: float) -> float:
    """The deviation s behind a ratio distance d = 1 - exp(-s); inf where d is unknown."""
    return -math.log(1.0 - d) if math.isfinite(d) and d < 1 else math.inf


def _likeness(s: float) -> float:
    """Weight of a known entry whose row or column deviates by s from the predicted one's:
    1 / (s^4 + floor^4) (4th power: squared errors are averaged; see validate_t1)."""
    return 1.0 / (s ** 4 + VALIDATION_FLOOR ** 4)


def _both(*devs: float) -> float:
    """One deviation from the known ones of the t(1) and q(n) tables: their root sum of
    squares (log deviations of two views of a row, added as independent errors); inf where
    neither is known."""
    known = [s for s in devs if math.isfinite(s)]
    return math.sqrt(sum(s * s for s in known)) if known else math.inf


def _kernels(db: MpetDatabase, workload, target, refs) -> tuple[dict, dict, dict, dict, dict]:
    """``_make_kernels``, kept per database (the t(1) and q(n) validations and the choice of
    the nearest suite ask the same); they depend on the references but T."""
    memo = db.__dict__.setdefault("_kernels", {})
    key = (workload, target, frozenset(refs) - {target})
    got = memo.get(key)
    if got is None:
        got = memo[key] = _make_kernels(db, workload, target, refs)
    return got


def _make_kernels(db: MpetDatabase, workload, target, refs) -> tuple[dict, dict, dict, dict,
                                                                       dict]:
    """(own, tgt, s_p, kern_p, kern_a) for validated transfers: A's t(1) on its references,
    the suite's on T, each reference's deviation s_p from T and its likeness weight, each
    suite workload's likeness to A. t1-validated and q-validated share them: one definition of
    which platforms behave like T and which workloads like A.

    A deviation is the ratio distance's (``ratio_distance``) over the t(1) table and over the
    q(n) table together (``_both``): of the suite between P and T, of A and B' over A's
    references. A workload that scales like A on the references (alike in the memory and
    synchronisation its q(n) shows) is likelier to change speed like A between platforms than
    one that only ran at the same speed ratios there; a platform whose suite scales as on T
    is likelier to behave like T. Where A and B' share fewer than two references, B''s
    likeness is the seed's D_a (eq. 16) instead. Measured against the t(1) table alone
    (docs/mpet.md): full prediction 21.7 -> 20.8 (loghin), 16.3 -> 15.7 (xplat), 18.6 -> 16.8
    and 21.7 -> 20.5 (the bench_suite sets), t(1) 14.9 -> 14.5, 9.0 -> 9.1, 8.2 -> 7.9, 9.5 ->
    9.2."""
    by_w, by_p = db.t1_table()
    own = {p: v for p, v in by_w.get(workload, {}).items() if p in refs and p != target}
    tgt = {b: v for b, v in by_p.get(target, {}).items() if b != workload}
    others = lambda r: r != workload  # noqa: E731
    refs_l = list(own)
    s_p = {p: _both(_log_deviation(d1), _log_deviation(dq)) for p, d1, dq in zip(
        refs_l, db.ratio_from("t1", refs_l, target, others),
        db.ratio_from("q", refs_l, target, others))}
    mine = lambda r: r in refs and r != target  # noqa: E731
    suite = list(tgt)
    dist = db.distances()

    def like_a(b, d1, dq) -> float:
        s = _both(_log_deviation(d1), _log_deviation(dq))
        if math.isinf(s):
            # A and B' share fewer than two references (A profiled on one platform: the
            # seed's case of 3.2.2): the seed's D_a over sc there (eq. 16), mean over A's
            # references, is what tells how much B' behaves like A
            ds = [d for d in dist.d_a_many(list(own), workload, [b] * len(own))
                  if math.isfinite(d)]
            s = _log_deviation(sum(ds) / len(ds)) if ds else math.inf
        return _likeness(s)

    kern_a = {b: like_a(b, d1, dq) for b, d1, dq in zip(
        suite, db.ratio("t1", "w", workload, suite, mine),
        db.ratio("q", "w", workload, suite, mine))}
    return own, tgt, s_p, {p: _likeness(s) for p, s in s_p.items()}, kern_a


def likeness_to(db: MpetDatabase, workload, target, refs) -> dict:
    """{B': weight} of each other workload B' with a t(1) on ``target``: how much it behaves
    like ``workload`` over its references ``refs`` (the weight both validations give B')."""
    return _kernels(db, workload, target, refs)[4]


def _set_var(c, num: float, den: float) -> bool:
    """c.var = num / den, the weighted mean squared log error (weights summing to ``den``);
    d_a from it. False where there was nothing to weigh."""
    c.var = num / den if den > 0 else math.nan
    c.d_a = 1.0 - math.exp(-math.sqrt(c.var)) if math.isfinite(c.var) else math.nan
    return math.isfinite(c.var)


def validate_t1(db: MpetDatabase, workload, target, pairs: list, refs) -> bool:
    """Set ``var`` and the distances of each t(1) candidate (P, B) by validating its transfer.

    Departs from eq. 20-22 (the seed rates (P, B) by D_p and D_a and weights by r(1 - D)).
    Eq. 21 makes log t1(A, T) = log t1(A, P) + [log t1(B, T) - log t1(B, P)]: one entry of the
    log t(1) matrix (workloads x platforms) from three known ones. The same tuple can be
    checked on known entries along both axes, without A's profile on T:
    - A on its other references P': predicted log t1(A, P') - log t1(B, P') + the shift
      log t1(A, P) - log t1(B, P), each P' weighted by how much it behaves like T;
    - the other suite workloads B' on T: P's factor log t1(B, T) - log t1(B, P) applied to
      B', each B' weighted by how much it behaves like A.
    "Behaves like" is the ratio distance's deviation s (mpet_distance.ratio_distance: of the
    suite between P' and T, of A and B' over A's references), weight 1 / (s^4 + floor^4) (the
    4th power: squared errors are averaged). ``var`` = the weighted mean squared error of both:
    the tuple's error where the data resemble the prediction's. ``_weights`` then uses
    1 / (var + floor^2), the inverse variance, for eq. 23's (geometric) mean. d_a = 1 -
    exp(-sqrt(var)) (what D_a stands for: how good a proxy of A the tuple is here), d_p = the
    ratio D_p of P to T, d_t = eq. 20. False where no tuple could be checked.
    """
    by_w, _ = db.t1_table()
    own, tgt, s_p, kern, kern_a = _kernels(db, workload, target, refs)
    # the tuples that can be checked: every (P, B) at once, as arrays over A's references and
    # T's suite (math.log per entry and sums term by term in the order of own and tgt: the
    # floats a loop over the terms makes)
    cs = []
    for c in pairs:
        c.d_p = 1.0 - math.exp(-s_p.get(c.platform, math.inf))
        if c.platform in own and c.platform in by_w.get(c.workload, {}) and c.workload in tgt:
            cs.append(c)
    if not cs:
        return False  # a profile without t(1): nothing to transfer (var stays NaN)
    rows, cols, logs = db.log_t1()
    own_l = list(own)
    suite = list(tgt)
    at_own = {q: i for i, q in enumerate(own_l)}
    at_suite = {b: i for i, b in enumerate(suite)}
    l_own = logs[rows[workload], [cols[q] for q in own_l]]
    k_own = np.array([kern[q] for q in own_l])
    l_tgt = logs[[rows[b] for b in suite], cols[target]]
    k_suite = np.array([kern_a[b] for b in suite])
    k = np.arange(len(cs))
    i_p = np.array([at_own[c.platform] for c in cs])
    i_b = np.array([at_suite[c.workload] for c in cs])
    # log t1(B, P') over A's references and log t1(B', P) over T's suite, per candidate
    l_b = logs[np.ix_([rows[c.workload] for c in cs], [cols[q] for q in own_l])]
    l_p = logs[np.ix_([rows[b] for b in suite], [cols[c.platform] for c in cs])].T
    # A on its other references P': log t1(A, P') - log t1(B, P') against the shift
    shift = l_own[i_p] - l_b[k, i_p]
    e_ref = ((l_own[None, :] - l_b) - shift[:, None]) ** 2
    m_ref = np.isfinite(l_b)
    m_ref[k, i_p] = False
    # the tuple's factor log t1(B, T) - log t1(B, P) applied to the other suite workloads B'
    # on T
    fac = l_tgt[i_b] - l_b[k, i_p]
    e_s = ((l_tgt[None, :] - l_p) - fac[:, None]) ** 2
    m_s = np.isfinite(l_p)
    m_s[k, i_b] = False
    mask = np.concatenate([m_ref, m_s], axis=1)
    w = np.concatenate([np.broadcast_to(k_own, m_ref.shape),
                        np.broadcast_to(k_suite, m_s.shape)], axis=1)
    with np.errstate(invalid="ignore"):
        e = np.concatenate([e_ref, e_s], axis=1)
        num = np.add.accumulate(np.where(mask, w * e, 0.0), axis=1)[:, -1]
        den = np.add.accumulate(np.where(mask, w, 0.0), axis=1)[:, -1]
    any_var = False
    for c, nu, de in zip(cs, num.tolist(), den.tolist()):
        any_var |= _set_var(c, nu, de)
    return any_var


def validate_q(db: MpetDatabase, workload, target, pairs: list, refs) -> bool:
    """``validate_t1`` for sc in the curve space (departs from eq. 20-22 alike).

    Eq. 21 per n: log q(A, T, n) = log q(A, P, n) + log q(B, T, n) - log q(B, P, n), at T's
    core counts, each curve measured there or fitted (``q_values``, as the prediction takes
    them). Each (P, B) tuple is checked the same way at the same n: A on its other references
    P' (log q(A, P') - log q(B, P') against the tuple's shift), the other suite workloads B'
    on T (their measured q on T against q(B', P) times the tuple's factor), the squared log
    errors averaged over n per entry, entries weighted by ``_kernels``' likeness (the same as
    for t(1)). ``var`` and the weights as in ``validate_t1``. False where nothing was checked.
    """
    _, _, s_p, kern, kern_a = _kernels(db, workload, target, refs)
    # suite workload -> {n: log q measured on T}
    gone = db.removed
    tgt_n = {b: d for b, d in db.ratio_rows().log_q_on(target).items()
             if b != workload and (b, target) not in gone}
    ns = tuple(sorted({n for d in tgt_n.values() for n in d}))  # T's core counts, n >= 2
    if not ns:
        return False
    suite = sorted(tgt_n, key=str)
    # the suite's measured log q on T (NaN where not measured) and its likeness to A
    on_t = np.array([[tgt_n[b].get(n, np.nan) for n in ns] for b in suite])
    w_a = np.array([kern_a.get(b, 0.0) for b in suite])
    ref_list = sorted(kern, key=str)

    nsf = tuple(float(n) for n in ns)
    # every profile's log q at those n (NaN and absent: no profile), built once per database
    at_w, at_p, logq, present = db.log_q_grid(nsf)
    wa = at_w.get(workload, len(at_w))

    def cols(platforms) -> list[int]:
        return [at_p.get(q, len(at_p)) for q in platforms]

    # every candidate (P, B) at once; the sums as validate_t1 adds them
    by_plat: dict = {}
    for c in pairs:
        c.d_p = 1.0 - math.exp(-s_p.get(c.platform, math.inf))
        if (workload, c.platform) in db.sc and (c.workload, c.platform) in db.sc \
                and c.workload in tgt_n:
            by_plat.setdefault(c.platform, []).append(c)
    k_ref = np.array([kern[q] for q in ref_list])
    a_ref = present[wa, cols(ref_list)]
    l_ref = logq[wa, cols(ref_list)].reshape(len(ref_list), len(ns))
    # the suite's log q on every platform involved (NaN: no profile), and who has one
    plats = sorted(set(ref_list) | set(by_plat), key=str)
    col = {q: i for i, q in enumerate(plats)}
    ref_i = [col[q] for q in ref_list]
    rows_s = np.array([at_w.get(b, len(at_w)) for b in suite], dtype=np.intp)
    cols_p = np.array(cols(plats), dtype=np.intp)
    lq = logq[np.ix_(rows_s, cols_p)].reshape(len(suite), len(plats), len(ns))
    has_b = present[np.ix_(rows_s, cols_p)].reshape(len(suite), len(plats))
    at = {b: i for i, b in enumerate(suite)}
    cs = [c for group in by_plat.values() for c in group]
    if not cs:
        return False
    idx = np.array([at[c.workload] for c in cs])
    pc = np.array([col[c.platform] for c in cs])
    # A on its other references P': log q(A, P') - log q(B, P') against the shift
    dm = l_ref[None, :, :] - lq[idx][:, ref_i, :]  # NaN where a profile is missing
    has = has_b[idx][:, ref_i] & a_ref[None, :] & \
        (np.array(ref_i)[None, :] != pc[:, None])
    l_a = logq[wa, cols_p].reshape(len(plats), len(ns))
    shift = l_a[pc] - lq[idx, pc, :]
    e_ref = np.mean((dm - shift[:, None, :]) ** 2, axis=2)
    # log q(B', T) - log q(B', P) against the tuple's factor, per B' (NaN: not measured)
    dev = on_t[None, :, :] - lq.transpose(1, 0, 2)  # per platform
    sq = (dev[pc] - dev[pc, idx][:, None, :]) ** 2
    cnt = np.isfinite(sq).sum(axis=2)
    with np.errstate(all="ignore"):
        e_s = np.where(np.isfinite(sq), sq, 0.0).sum(axis=2) / cnt
        ok = (cnt > 0) & (w_a > 0)[None, :]
        ok[np.arange(len(cs)), idx] = False
        mask = np.concatenate([has, ok], axis=1)
        w = np.concatenate([np.broadcast_to(k_ref, has.shape),
                            np.broadcast_to(w_a, ok.shape)], axis=1)
        e = np.concatenate([e_ref, e_s], axis=1)
        # summed in validate_t1's order: one term after the other
        num = np.add.accumulate(np.where(mask, w * e, 0.0), axis=1)[:, -1].tolist() \
            if mask.shape[1] else [0.0] * len(cs)
        den = np.add.accumulate(np.where(mask, w, 0.0), axis=1)[:, -1].tolist() \
            if mask.shape[1] else [0.0] * len(cs)
    any_var = False
    for c, nu, de in zip(cs, num, den):
        any_var |= _set_var(c, nu, de)
    return any_var
