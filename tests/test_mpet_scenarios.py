"""MPET scenarios (b) and (c) (daemon/models/mpet_scenarios.py): edits parse or are refused
with a message naming the problem, they move t(n) in the expected direction, a workload
without runtime parameters takes only q and t1 edits, and scenario (b) predicts from the
1-core profile alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opptune.daemon.models.mpet_curve import PARAMS, time_curve
from opptune.daemon.models.mpet_database import MpetDatabase
from opptune.daemon.models.mpet_predict import NoCandidates, predict_scalability
from opptune.daemon.models.mpet_scenarios import (Edit, EditError, apply_edits,
                                                  backwards_edits, candidate_band,
                                                  edited_curve, parse_edit, scalability_band,
                                                  serial_errors, serial_profile)

NS = [1, 2, 3, 4]


def profile(t1: float, lock: float, idle: float, with_params: bool = True) -> dict:
    params, t = {}, {}
    for n in NS:
        p = {k: 0.0 for k in PARAMS}
        p.update(R=1.0 + 0.01 * (n - 1), l=lock * (n - 1), w=idle * (n - 1))
        params[n] = p
        t[n] = t1 * p["R"] / (n * (1 - p["l"] - p["w"]))
    return {"t": t, "params": params if with_params else {}, "counters": {}}


def database(extra: dict | None = None) -> MpetDatabase:
    profiles = {("a", "P"): profile(2.0, 0.04, 0.01), ("b", "P"): profile(1.0, 0.0, 0.02),
                ("c", "P"): profile(3.0, 0.08, 0.05), **(extra or {})}
    return MpetDatabase(profiles, {"P": {"n_nu": None, "n_ht": None, "nmax": 4}})


@pytest.mark.parametrize("text, edit", [
    ("l=2x", Edit("l", None, True, 2.0)),
    ("w = 0.05", Edit("w", None, False, 0.05)),
    ("R.m_base=0.02", Edit("R", "m_base", False, 0.02)),
    ("t1=0.5X", Edit("t1", None, True, 0.5)),
    ("q.b_base=1.5x", Edit("q", "b_base", True, 1.5)),
    ("l.m_base=-0.01", Edit("l", "m_base", False, -0.01)),  # a gradient may fall
])
def test_parse_edit(text, edit):
    assert parse_edit(text) == edit


@pytest.mark.parametrize("text, msg", [
    ("l2x", "write NAME=VALUE"),
    ("lock=2x", "unknown parameter 'lock'; editable: R, l, w, c, d, s, j, q, t1"),
    ("l.slope=1", "unknown element 'slope'; elements: m_base, b_base"),
    ("t1.b_base=1", "t1 is one number"),
    ("l=abc", "give a number, or a factor like 2x"),
    ("l=-2x", "give a number, or a factor like 2x"),
    ("l=-1", "give a number, or a factor like 2x (>= 0)"),  # a share of time: never negative
    ("q=-0.5", "give a number, or a factor like 2x (>= 0)"),
    ("t1=0", "t1 must be > 0"),
    ("w=nan", "give a number"),
])
def test_bad_edits_name_the_problem(text, msg):
    with pytest.raises(EditError, match=None) as exc:
        parse_edit(text)
    assert msg in str(exc.value) and text in str(exc.value)


def test_doubling_lock_wait_slows_the_parallel_runs_only():
    db = database()
    t1, sc = db.t1(("a", "P")), db.sc[("a", "P")]
    base = edited_curve(t1, sc, NS, None, None)
    assert base == pytest.approx([profile(2.0, 0.04, 0.01)["t"][n] for n in NS], rel=1e-6)
    more = edited_curve(*apply_edits(t1, sc, [parse_edit("l=2x")]), NS, None, None)
    less = edited_curve(*apply_edits(t1, sc, [parse_edit("l=0x")]), NS, None, None)
    assert more[0] == pytest.approx(base[0]) == pytest.approx(less[0])  # no lock wait at n=1
    for n in (1, 2, 3):
        assert less[n] < base[n] < more[n]
    # the exact effect: U(4) = 1 - 0.24 - 0.03 with l doubled
    assert more[3] == pytest.approx(2.0 * 1.03 / (4 * (1 - 0.24 - 0.03)), rel=1e-6)
    half = edited_curve(*apply_edits(t1, sc, [parse_edit("t1=0.5x")]), NS, None, None)
    assert half == pytest.approx([x / 2 for x in base])
    const = edited_curve(*apply_edits(t1, sc, [parse_edit("w=0.1"), parse_edit("l=0")]), NS,
                         None, None)
    assert const[1] == pytest.approx(2.0 * 1.01 / (2 * 0.9), rel=1e-6)
    # the original vector is not changed in place
    assert np.array_equal(sc, db.sc[("a", "P")], equal_nan=True)


def test_edits_that_leave_no_time_are_refused():
    db = database()
    t1, sc = apply_edits(db.t1(("a", "P")), db.sc[("a", "P")], [parse_edit("l=20x")])
    with pytest.raises(EditError, match=r"no useful time at n = 3"):
        edited_curve(t1, sc, NS, None, None)
    with pytest.raises(EditError, match="element m_nu is invalid for this profile"):
        apply_edits(1.0, db.sc[("a", "P")], [parse_edit("l.m_nu=0.1")])
    # a falling gradient may be given, but not one that takes the lock wait below 0: found
    # by the walk (l.m_base=-1 halved t(1) through U > 1)
    falling = [parse_edit("l.m_base=-1")]
    t1, sc = apply_edits(db.t1(("a", "P")), db.sc[("a", "P")], falling)
    with pytest.raises(EditError, match=r"make l\(n\) negative at n = 1 .*share of time"):
        edited_curve(t1, sc, NS, None, None, falling)
    gentle = [parse_edit("l.m_base=0.02"), parse_edit("l.b_base=-0.02")]  # l(1) = 0
    t1, sc = apply_edits(db.t1(("a", "P")), db.sc[("a", "P")], gentle)
    assert all(x > 0 for x in edited_curve(t1, sc, NS, None, None, gentle))
    # a fitted lock wait a little below 0 at n = 1 (a least-squares line): doubling or
    # zeroing the whole curve is the user's edit of what was measured, not a negative share
    # the edit made (found by the walk: the docs' 'locked_update --set l=2x' was refused);
    # an element edit is refused only below the fit's own dip
    dip = db.sc[("a", "P")].copy()
    lo = 6 * PARAMS.index("l")  # its six elements in sc (eq. 8)
    assert dip[lo: lo + 2] == pytest.approx([0.04, -0.04])  # l(n) = 0.04 (n - 1)
    dip[lo + 1] = -0.047  # the fit's l(1) = -0.007
    for text in ("l=2x", "l=1x", "l=0"):
        edits = [parse_edit(text)]
        t1, sc = apply_edits(db.t1(("a", "P")), dip, edits)
        assert all(x > 0 for x in edited_curve(t1, sc, NS, None, None, edits, dip))
    # l(1) = 0.0405 - 0.047 = -0.0065, above the fit's dip: the element edit is taken
    above = [parse_edit("l.m_base=0.0405")]
    t1, sc = apply_edits(db.t1(("a", "P")), dip, above)
    assert all(x > 0 for x in edited_curve(t1, sc, NS, None, None, above, dip))
    # l(1) = 0.0385 - 0.047 = -0.0085, below it: refused, as without the unedited fit
    deeper = [parse_edit("l.m_base=0.0385")]
    t1, sc = apply_edits(db.t1(("a", "P")), dip, deeper)
    for ref in (dip, None):
        with pytest.raises(EditError, match=r"make l\(n\) negative at n = 1 \(-0.0085\)"):
            edited_curve(t1, sc, NS, None, None, deeper, ref)


def test_a_factor_on_a_share_fitted_below_0_is_said_to_read_backwards():
    """'l=2x' on a lock wait fitted a little below 0 at n = 1 (l(1) = -0.007, a least-squares
    line) took it further below: t(1) shortened, as if doubling the lock wait sped the
    workload up, without a word. The edit stands (it is what was asked of what was fitted)
    and a sentence says where and which way it reads backwards."""
    db = database()
    t1, fitted = db.t1(("a", "P")), db.sc[("a", "P")].copy()
    fitted[6 * PARAMS.index("l") + 1] = -0.047  # l(n) = 0.04 (n - 1) - 0.007
    base = edited_curve(t1, fitted, NS, None, None)
    doubled = [parse_edit("l=2x")]
    t = edited_curve(*apply_edits(t1, fitted, doubled), NS, None, None, doubled, fitted)
    assert t[0] < base[0] and t[1] > base[1]  # what the note is about: backwards at n = 1 only
    assert backwards_edits(t1, fitted, doubled, NS, None, None) == [
        "l=2x: l(n) is below 0 at n = 1 (l(1) = -0.007: a fitted line dipping below a share "
        "measured near 0), so 2 times it is further below 0 there and t(n) shorter: the edit "
        "reads backwards at those n"]
    (half,) = backwards_edits(t1, fitted, [parse_edit("l=0.5x")], NS, None, None)
    assert "0.5 times it is nearer 0 there and t(n) longer" in half
    # nothing to say: no factor, a factor of 1, a share not below 0, an element not below 0,
    # and a factor after a value that lifted the curve
    for texts in (["l=0.1"], ["l=1x"], ["w=2x"], ["l.m_base=2x"], ["l=0.1", "l=2x"],
                  ["l=0.1", "l.b_base=0.5x"], ["l.b_base=-0.01"]):
        assert backwards_edits(t1, fitted, [parse_edit(x) for x in texts], NS, None,
                               None) == [], texts
    assert backwards_edits(t1, db.sc[("a", "P")], doubled, NS, None, None) == []


def test_a_factor_on_one_element_below_0_is_said_to_read_backwards():
    """'l.b_base=0.5x' on the same lock wait, whose fitted line has its offset below 0
    (b_base = -0.047: l(1) = -0.007), raised l(n) at every n and lengthened t(n), the reverse
    of halving a lock wait, without a word: the note covered a whole share's factor only.
    One element's factor that is below 0 is said alike, at every n it acts on."""
    db = database()
    t1, fitted = db.t1(("a", "P")), db.sc[("a", "P")].copy()
    fitted[6 * PARAMS.index("l") + 1] = -0.047
    base = edited_curve(t1, fitted, NS, None, None)
    half = [parse_edit("l.b_base=0.5x")]
    t = edited_curve(*apply_edits(t1, fitted, half), NS, None, None, half, fitted)
    assert all(a > b for a, b in zip(t, base))  # longer at every n
    assert backwards_edits(t1, fitted, half, NS, None, None) == [
        "l.b_base=0.5x: b_base of l(n) is below 0 (-0.047), so 0.5 times it raises l(n) at "
        "n = 1, 2, 3, 4 and t(n) is longer there: the edit reads backwards at those n"]
    (more,) = backwards_edits(t1, fitted, [parse_edit("l.b_base=1.1x")], NS, None, None)
    assert "1.1 times it lowers l(n) at n = 1, 2, 3, 4 and t(n) is shorter there" in more
    # an element acting beyond a breakpoint only: the n it acts on
    nu = fitted.copy()
    nu[6 * PARAMS.index("l") + 3] = -0.02  # b_nu, beyond n_nu = 2
    (beyond,) = backwards_edits(t1, nu, [parse_edit("l.b_nu=2x")], NS, 2, None)
    assert "lowers l(n) at n = 3, 4 and" in beyond


def test_external_workload_takes_only_q_and_t1():
    db = database({("ext", "P"): profile(2.0, 0.04, 0.01, with_params=False)})
    t1, sc = db.t1(("ext", "P")), db.sc[("ext", "P")]
    assert np.isnan(sc[: 6 * len(PARAMS)]).all()  # invalid, not zero
    with pytest.raises(EditError, match="no runtime parameters .* edit q"):
        apply_edits(t1, sc, [parse_edit("l=2x")])
    with pytest.raises(EditError, match="edit those"):
        apply_edits(db.t1(("a", "P")), db.sc[("a", "P")], [parse_edit("q=2x")])
    base = edited_curve(t1, sc, NS, None, None)
    worse = edited_curve(*apply_edits(t1, sc, [parse_edit("q=1.5x")]), NS, None, None)
    assert worse == pytest.approx([1.5 * x for x in base])


def test_a_serial_profile_without_runtime_parameters_is_edited_by_its_candidates_ones():
    """Scenario (b) for a workload that has no runtime parameters (an imported 1-core run):
    its scaling is the candidates', which carry R..j, so those are what --set edits (found by
    the walk: the refusal of q=2x said the workload had runtime parameters of its own)."""
    serial = serial_profile(profile(2.0, 0.04, 0.01, with_params=False))
    db = database({("new", "P"): serial})
    pred = predict_scalability(db, "new", "P", ns=NS)
    with pytest.raises(EditError, match=r"this profile's t\(n\) follows the runtime "
                                        r"parameters .* the candidates'"):
        apply_edits(pred.t1, pred.sc, [parse_edit("q=2x")])
    edits = [parse_edit("l=2x")]
    more = edited_curve(*apply_edits(pred.t1, pred.sc, edits), NS, None, None, edits, pred.sc)
    assert more[0] == pytest.approx(pred.t[0]) and more[3] > pred.t[3]


def test_scalability_from_the_serial_profile():
    full = profile(2.0, 0.04, 0.01)
    serial = serial_profile(full)
    assert serial["t"] == {1: full["t"][1]} and list(serial["params"]) == [1]
    db = database({("new", "P"): serial})
    pred = predict_scalability(db, "new", "P", ns=NS)
    assert pred.t[0] == pytest.approx(full["t"][1])
    assert {c.workload for c in pred.sc_candidates} == {"a", "b", "c"}
    assert all(math.isfinite(c.d_a) for c in pred.sc_candidates)
    lo, hi = candidate_band(db, pred, db.platforms["P"], pred.t)
    for a, t, b in zip(lo, pred.t, hi):
        assert a <= t <= b
    assert lo[3] < hi[3]  # the candidates differ: a band, not a point
    # the curve of every candidate with weight lies within the band, and the band is no wider
    # than they are; eq. 22's k = 3 leaves the farthest without weight, and out of the band
    weighted = [c.workload for c in pred.sc_candidates if c.weight > 0]
    assert len(weighted) == 2
    curves = [time_curve(pred.t1, db.sc[(w, "P")], NS, None, None) for w in weighted]
    assert hi[3] == pytest.approx(max(c[3] for c in curves), rel=1e-6)
    (far,) = {"a", "b", "c"} - set(weighted)
    assert time_curve(pred.t1, db.sc[(far, "P")], NS, None, None)[3] > 1.2 * hi[3]


@pytest.mark.parametrize("with_params", [True, False])
def test_a_workload_measured_at_one_core_lends_no_scaling(with_params):
    """Walking issue 19 (several not-yet-parallel workloads on one board, scenario b's use):
    another workload measured at 1 core only was a candidate at D_a 0 (its profile is as
    sequential as A's) and took the weight: here t(n) 4 % longer with the runtime parameters;
    without them (its q offset with the others' slopes) a t(1) 30 % above A's measured one
    ('predict --on' of test_mpet_predict_cli's data). It has no scaling to lend: the
    prediction is the one made without it."""
    full = profile(2.0, 0.04, 0.01, with_params)
    extra = {("new", "P"): serial_profile(full)}
    without = predict_scalability(database(extra), "new", "P", ns=NS)
    extra[("solo", "P")] = serial_profile(profile(5.0, 0.02, 0.0, with_params))
    got = predict_scalability(database(extra), "new", "P", ns=NS)
    assert "solo" not in {c.workload for c in got.sc_candidates}
    assert got.t == pytest.approx(without.t, rel=1e-12)
    assert got.t[0] == pytest.approx(full["t"][1], rel=1e-9)
    # with no other workload measured beyond one core there is nothing to predict from
    alone = {("new", "P"): serial_profile(full), ("solo", "P"): serial_profile(full)}
    db = MpetDatabase(alone, {"P": {"n_nu": None, "n_ht": None, "nmax": 4}})
    with pytest.raises(NoCandidates, match="at more than one core count"):
        predict_scalability(db, "new", "P", ns=NS)


def test_scalability_interval_is_calibrated_on_the_platforms_other_workloads():
    """Scenario (b)'s interval: t exp(+-e), e = the largest log error of each other workload
    on P predicted from its own 1-core run the same way (level m/(m+1)); with fewer than two
    such workloads, the candidates' band."""
    full = profile(2.0, 0.04, 0.01)
    db = database({("new", "P"): serial_profile(full), ("d", "P"): profile(1.5, 0.02, 0.0)})
    pred = predict_scalability(db, "new", "P", ns=NS)
    errs = serial_errors(db, "new", "P")
    assert len(errs) == 4  # a, b, c, d; not the sequential profile itself
    # c's error, predicted from its 1-core run alone among the others (new left out)
    rest = {k: v for k, v in db.profiles.items() if k != ("new", "P")}
    c_serial = MpetDatabase({**rest, ("c", "P"): serial_profile(rest[("c", "P")])},
                            db.platforms)
    c_pred = predict_scalability(c_serial, "c", "P", ns=NS)
    c_true = rest[("c", "P")]["t"]
    assert max(abs(math.log(v / c_true[n])) for n, v in zip(NS, c_pred.t)) == pytest.approx(
        errs[2], rel=1e-9)
    lo, hi, m, level = scalability_band(db, pred, db.platforms["P"], pred.t)
    assert m == 4 and level == pytest.approx(0.8)
    f = math.exp(max(errs))
    assert f > 1.05  # the lock-bound c is far from its candidates' scaling
    assert hi == pytest.approx([t * f for t in pred.t]) and lo == pytest.approx(
        [t / f for t in pred.t])
    assert all(a <= full["t"][n] <= b for n, a, b in zip(NS, lo, hi))
    # one other workload measured beyond one core: the candidates' band, no calibration
    few = MpetDatabase({("new", "P"): serial_profile(full), ("a", "P"): profile(2.0, 0.04, 0.01),
                        ("b", "P"): serial_profile(profile(1.0, 0.0, 0.02))},
                       db.platforms)
    got = predict_scalability(few, "new", "P", ns=NS)
    lo, hi, m, level = scalability_band(few, got, few.platforms["P"], got.t)
    assert (m, level) == (0, None)
    assert (lo, hi) == tuple(candidate_band(few, got, few.platforms["P"], got.t))


def test_a_factor_of_a_ratio_curve_says_it_scales_every_time_alike():
    """Walking issue 19: 'predict --workload ext --on pi --set q=2x' printed t(1) doubled
    beside the unedited one and the speed-up unchanged without a word: q(n) (and R(n)) is 1
    at n = 1, so a factor of the whole curve is t1's. The note says so; an element, another
    parameter or a factor of 1 says nothing."""
    from opptune.daemon.models.mpet_scenarios import scale_only_edits
    db = database({("ext", "P"): profile(2.0, 0.04, 0.01, with_params=False)})
    t1, sc = db.t1(("ext", "P")), db.sc[("ext", "P")]
    edits = [parse_edit("q=2x")]
    base = edited_curve(t1, sc, NS, None, None)
    doubled = edited_curve(*apply_edits(t1, sc, edits), NS, None, None)
    assert doubled == pytest.approx([2 * x for x in base])  # what the sentence states
    assert scale_only_edits(edits) == [
        "q=2x: q(n) is 1 at n = 1 (a ratio to t(1)), so 2 times it at every n is 2 times every "
        "t(n), as t1=2x: the speed-up t(1)/t(n) is unchanged; to change how it scales, edit "
        "its slope (q.m_base) or another parameter"]
    (r,) = scale_only_edits([parse_edit("R=0.5x"), parse_edit("l=2x"), parse_edit("q=1x"),
                             parse_edit("q.m_base=2x"), parse_edit("q=1.2"),
                             parse_edit("t1=2x")])
    assert r.startswith("R=0.5x: R(n) is 1 at n = 1 (a ratio to t(1)), so 0.5 times it")
