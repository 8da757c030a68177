"""MPET (seed 000): curves and sc (eq. 3-9), normalisation and distances (eq. 10-20),
candidates and reconstruction (eq. 21-23, section 4.1), scenarios (a) and (b), the
leave-one-out evaluation and `opptune eval-mpet`."""

import csv
import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opptune.daemon.cli import main
from opptune.daemon.models.mpet_curve import (ELEMENTS, PARAMS, eval_curve, feature_names,
                                              feature_vector, fit_curve, time_curve)
from opptune.daemon.models.mpet_distance import (Distances, distance, distance_rows, normalise,
                                                  ratio_distance, tuple_distance)
from opptune.daemon.models.mpet_eval import (choose_settings, evaluate, evaluate_nested,
                                             summarise)
from opptune.daemon.models.mpet_database import MpetDatabase
from opptune.daemon.models.mpet_validate import VALIDATION_FLOOR
from opptune.daemon.models.mpet_interval import (MIN_CALIBRATION, SINGLE_CANDIDATE_FACTOR,
                                                 calibrated_band)
from opptune.daemon.models.mpet_predict import (DEFAULT_SC, DEFAULT_T1, SEED_SC, SEED_T1,
                                                calibration_errors, choose_sc,
                                                largest_log_error, nearest_suite,
                                                NEIGHBOURS, NoCandidates, Selection,
                                                predict_migration, predict_scalability,
                                                suite_scores)
from opptune.daemon.models.mpet_reconstruct import penalty, reconstruct


# ---- eq. 5-9 -------------------------------------------------------------------------------

def test_fit_curve_recovers_all_six_elements_linear_and_gaussian():
    ns = np.arange(1, 17)
    for gaussian in (False, True):
        truth = [0.02, 0.1, 0.05, 0.3, -0.01, 0.2]
        ys = eval_curve(truth, ns, 4, 8, gaussian)
        got = fit_curve(ns, ys, 4, 8, gaussian)
        assert np.allclose(got, truth, atol=1e-9)
    # the Gaussian sum differs from the linear one beyond the breakpoints
    assert not np.allclose(eval_curve(truth, ns, 4, 8, True), eval_curve(truth, ns, 4, 8, False))


def test_missing_breakpoints_and_short_segments_are_invalid():
    ns = np.arange(1, 7)
    got = fit_curve(ns, 1 + 0.1 * ns, None, None)
    assert np.allclose(got[:2], [0.1, 1.0]) and np.isnan(got[2:]).all()
    # a breakpoint at nmax has nothing beyond it: invalid; one point beyond: offset only, m = 0
    assert np.isnan(fit_curve(ns, ns * 1.0, 6, None)[2:4]).all()
    one = fit_curve(ns, np.where(ns > 5, 2.0 + ns, ns), 5, None)
    assert one[2] == 0.0 and one[3] == pytest.approx(2.0)
    # a single point gives b_base only
    single = fit_curve([1], [0.7], None, None)
    assert single[1] == pytest.approx(0.7) and np.isnan(single[0])


def test_feature_vector_concatenates_params_ratio_and_counters():
    ns = range(1, 9)
    prof = {"t": {n: 8.0 / n * (1 + 0.05 * (n - 1)) for n in ns},
            "params": {n: {p: 0.01 * n for p in PARAMS} for n in ns},
            "counters": {n: {"llc_miss": 0.2 + 0.01 * n} for n in ns}}
    sc = feature_vector(prof, 4, None, ["llc_miss", "absent"])
    names = feature_names(["llc_miss", "absent"])
    assert len(sc) == len(names) == 6 * (len(PARAMS) + 3)
    at = dict(zip(names, sc))
    assert at["R.m_base"] == pytest.approx(0.01) and at["R.m_ht"] != at["R.m_ht"]  # NaN
    assert at["d.m_base"] == pytest.approx(0.0, abs=1e-9) or math.isfinite(at["d.m_base"])
    assert at["cpu_time_ratio.m_base"] == pytest.approx(0.05)
    assert at["cpu_time_ratio.b_base"] == pytest.approx(0.95)
    assert at["llc_miss.m_base"] == pytest.approx(0.01)
    assert all(math.isnan(at[f"absent.{e}"]) for e in ELEMENTS)
    # runtime parameters invalid (an external workload): their 42 elements are NaN
    ext = feature_vector({"t": prof["t"]}, 4, None, [])
    assert np.isnan(ext[:42]).all() and np.isfinite(ext[42:44]).all()


def test_time_curve_uses_eq3_when_runtime_parameters_are_valid():
    ns = np.arange(1, 9)
    sc = np.full(6 * (len(PARAMS) + 1), np.nan)
    sc[0:6] = [0.02, 0.98, np.nan, np.nan, np.nan, np.nan]         # R(n) = 0.98 + 0.02 n
    for i in range(1, len(PARAMS)):
        sc[6 * i: 6 * i + 6] = [0.005, -0.005, np.nan, np.nan, np.nan, np.nan]
    t = time_curve(10.0, sc, ns, None, None)
    r = 0.98 + 0.02 * ns
    # l, w, c, s, j linear; d(n) on the Gaussian sum n(n+1)/2 (section 3.1)
    u = 1 - 5 * (0.005 * ns - 0.005) - (0.005 * ns * (ns + 1) / 2 - 0.005)
    assert np.allclose(t, 10.0 * r / (ns * u))
    # without them, the cpu-time ratio curve: t(n) = t(1) q(n) / n
    sc2 = np.full(6 * (len(PARAMS) + 1), np.nan)
    sc2[42:48] = [0.1, 0.9, np.nan, np.nan, np.nan, np.nan]
    assert np.allclose(time_curve(10.0, sc2, ns, None, None), 10.0 * (0.9 + 0.1 * ns) / ns)


# ---- eq. 10-20 -----------------------------------------------------------------------------

def test_normalise_per_dimension_over_database_and_query():
    got = normalise({("A", "P"): np.array([1.0, 5.0, np.nan]),
                     ("B", "P"): np.array([3.0, 5.0, 2.0]),
                     ("B", "T"): np.array([2.0, 5.0, 4.0])})
    assert np.allclose(got[("A", "P")][:2], [0.0, 0.0]) and np.isnan(got[("A", "P")][2])
    assert np.allclose(got[("B", "P")], [1.0, 0.0, 0.0])
    assert np.allclose(got[("B", "T")], [0.5, 0.0, 1.0])


def test_distance_worked_example_eq14_15():
    a = np.array([0.01, 0.04, 0.20])
    b = np.array([0.20, 0.01, np.nan])  # LLC-M invalid on beta
    assert distance(a, b) == pytest.approx(math.sqrt(0.19 ** 2 + 0.03 ** 2) / math.sqrt(2))
    assert round(distance(a, b), 3) == 0.136
    assert math.isnan(distance(np.array([np.nan]), np.array([1.0])))


# normalised elements (eq. 12: in [0, 1]) and, as often, invalid ones (NaN: no counter there)
_element = st.one_of(st.floats(0.0, 1.0), st.just(math.nan))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12).flatmap(lambda m: st.tuples(
    st.lists(st.lists(_element, min_size=m, max_size=m), min_size=1, max_size=5),
    st.lists(st.lists(_element, min_size=m, max_size=m), min_size=1, max_size=5))))
def test_distance_matrix_is_the_pair_by_pair_eq13(rows):
    """The matrix form (every row of a against every row of b, invalid elements masked, each
    pair normalised by its own valid count) gives eq. 13's per-pair floats exactly; a pair with
    no dimension valid in both (all-invalid rows, or no dimensions at all) is NaN in both."""
    a, b = (np.array(r, dtype=float).reshape(len(r), -1) for r in rows)
    got = distance_rows(a[:, None, :], b[None, :, :])
    assert got.shape == (len(a), len(b))
    for i in range(len(a)):
        for j in range(len(b)):
            want = distance(a[i], b[j])
            assert (math.isnan(want) and math.isnan(got[i, j])) or got[i, j] == want
    # facing rows, and through Distances
    n = min(len(a), len(b))
    assert np.array_equal(distance_rows(a[:n], b[:n]), got[np.arange(n), np.arange(n)],
                          equal_nan=True)
    d = Distances({**{(f"a{i}", "P"): v for i, v in enumerate(a)},
                   **{(f"b{j}", "P"): v for j, v in enumerate(b)}})
    assert np.array_equal(d.d_a_many(["P"] * len(b), "a0", [f"b{j}" for j in range(len(b))]),
                          got[0], equal_nan=True)


def test_distance_with_an_all_invalid_vector_is_unknown():
    a = np.array([[0.1, np.nan], [np.nan, np.nan]])
    b = np.array([[0.4, 0.5], [0.2, 0.3]])
    got = distance_rows(a[:, None, :], b[None, :, :])
    assert got[0].tolist() == pytest.approx([0.3, 0.1])  # one valid dimension each
    assert np.isnan(got[1]).all()
    d = Distances({("A", "P"): a[1], ("B", "P"): b[0]})
    assert math.isnan(d.d_a("P", "A", "B")) and math.isnan(d.d_a("P", "A", "C"))


def test_workload_platform_and_tuple_distances_eq16_20():
    sc = {("A", "P"): np.array([0.0, 0.0]), ("B", "P"): np.array([1.0, 0.0]),
          ("A", "Q"): np.array([0.0, 1.0]), ("B", "Q"): np.array([0.0, 0.0]),
          ("B", "T"): np.array([1.0, 1.0])}
    d = Distances(sc)
    assert d.d_a("P", "A", "B") == pytest.approx(1 / math.sqrt(2))            # eq. 16
    assert d.d_p("A", "P", "Q") == pytest.approx(1 / math.sqrt(2))            # eq. 17
    assert d.d_a_mean("A", "B") == pytest.approx(1 / math.sqrt(2))          # eq. 18 (P and Q)
    assert d.d_p_mean("P", "T") == pytest.approx(d.d_p("B", "P", "T"))       # eq. 19 (B only)
    assert d.d_p_mean("Q", "T") == pytest.approx(1.0)
    assert tuple_distance(0.2, 0.5) == pytest.approx(1 - 0.8 * 0.5)         # eq. 20
    assert tuple_distance(math.nan, 0.0) == 1.0


# ---- eq. 21-23 -----------------------------------------------------------------------------

def test_penalty_eq22():
    w = np.array([0.5, 0.75, 1.0])
    assert np.allclose(penalty(w, 0), 1)
    assert np.allclose(penalty(w, 1), [0, 0.5, 1])
    assert np.allclose(penalty(w, 3), [0, 0.125, 1])
    assert np.allclose(penalty(np.array([0.3, 0.3]), 3), 1)


def test_reconstruct_eq21_single_and_eq23_weighted():
    # one candidate: sc(T,A) = sc(T,B) * sc(P,A) / sc(P,B)
    assert reconstruct([[6.0]], [[2.0]], [[4.0]], np.array([1.0]))[0] == pytest.approx(3.0)
    got = reconstruct([[6.0, 1.0], [10.0, 1.0]], [[2.0, 1.0], [1.0, 0.0]],
                      [[4.0, 0.0], [1.0, 0.0]], np.array([1.0, 3.0]))
    assert got[0] == pytest.approx((3.0 * 1 + 10.0 * 3) / 4)
    assert math.isnan(got[1])  # no usable factor (zero denominators)
    # the optional bound drops a candidate whose factor is too large
    got = reconstruct([[1.0], [1.0]], [[100.0], [2.0]], [[1.0], [1.0]], np.array([1.0, 1.0]),
                      max_factor=5)
    assert got[0] == pytest.approx(2.0)
    # geometric mean: factors 2 and 1/2 average to 1; a value <= 0 is left out
    got = reconstruct([[1.0], [1.0], [1.0]], [[2.0], [1.0], [-1.0]], [[1.0], [2.0], [1.0]],
                      np.array([1.0, 1.0, 1.0]), mean="geometric")
    assert got[0] == pytest.approx(1.0)
    assert reconstruct([[1.0], [1.0]], [[4.0], [1.0]], [[1.0], [1.0]], np.array([3.0, 1.0]),
                       mean="geometric")[0] == pytest.approx(4.0 ** 0.75)


def test_selection_rejects_bad_settings():
    for bad in ({"k": 4}, {"weight": "x"}, {"n_platforms": 0}, {"workload_distance": "x"},
                {"max_factor": 1.0}, {"space": "x"}, {"mean": "median"}, {"basis": "x"}):
        with pytest.raises(ValueError):
            Selection(**bad)


# ---- scenarios -----------------------------------------------------------------------------

PLATFORMS = {"P1": (1.0, 0.5, 8), "P2": (1.6, 1.0, 8), "P3": (0.7, 2.0, 6), "T": (1.2, 1.5, 12)}
WORKLOADS = {"A": (3.0, 0.04), "B1": (5.0, 0.02), "B2": (2.0, 0.06), "B3": (8.0, 0.1),
             "B4": (1.0, 0.01)}


def synthetic(counters=False):
    """t1 = tau_w * pi_p and q(n) = 1 + s_w c_p (n - 1): the separable case eq. 21 assumes."""
    profiles, platforms = {}, {}
    for p, (pi, c, nmax) in PLATFORMS.items():
        platforms[p] = {"n_nu": None, "n_ht": None, "nmax": nmax}
        for w, (tau, s) in WORKLOADS.items():
            t = {n: tau * pi * (1 + s * c * (n - 1)) / n for n in range(1, nmax + 1)}
            ctr = {n: {"miss": 0.1 + s} for n in range(1, nmax + 1)} if counters else {}
            profiles[(w, p)] = {"t": t, "params": {}, "counters": ctr}
    return profiles, platforms


def test_migration_prediction_scenario_a():
    profiles, platforms = synthetic()
    db = MpetDatabase(profiles, platforms)
    pred = predict_migration(db, "A", "T")
    truth = profiles[("A", "T")]["t"]
    assert pred.t1 == pytest.approx(truth[1], rel=1e-9)        # t(1) factors are exact here
    assert pred.ns == list(range(1, 13))
    err = max(abs(p - truth[n]) / truth[n] for n, p in zip(pred.ns, pred.t))
    assert err < 0.05
    assert len({c.platform for c in pred.sc_candidates}) <= 3
    assert all(c.platform != "T" and c.workload != "A" for c in pred.sc_candidates)
    assert all(0 <= c.d_t <= 1 for c in pred.t1_candidates)
    # the target's own profile is never used: changing it changes nothing
    profiles[("A", "T")] = {"t": {n: 99.0 for n in range(1, 13)}}
    again = predict_migration(MpetDatabase(profiles, platforms), "A", "T")
    assert again.t == pytest.approx(pred.t)
    # several candidates: the interval holds the prediction, no single-candidate flag
    assert not pred.single_candidate
    assert all(lo <= t <= hi for lo, t, hi in zip(pred.lower, pred.t, pred.upper))
    # one platform, one workload: a single candidate, flagged, its interval not a point
    one = predict_migration(db, "A", "T", Selection(1, 1, k=0), Selection(1, 1, k=0),
                           interval="candidates")
    assert len(one.t1_candidates) == 1 and len(one.sc_candidates) == 1
    assert one.single_candidate
    f = SINGLE_CANDIDATE_FACTOR
    assert f >= 2
    assert all(lo <= t / f * (1 + 1e-12) and hi >= t * f * (1 - 1e-12)
               for lo, t, hi in zip(one.lower, one.t, one.upper))
    # two candidates listed, one without t(1) on the target: the prediction rests on the
    # other alone, and its interval is not the point min..max of one estimate makes
    prof = lambda t1, s, ns=(1, 2, 3, 4): {"t": {n: t1 / n ** s for n in ns}}  # noqa: E731
    two = {("A", "P"): prof(10, 0.9), ("B", "P"): prof(5, 0.8), ("B", "T"): prof(7, 0.7),
           ("C", "P"): prof(3, 0.5), ("C", "T"): prof(4, 0.6, (2, 3, 4))}
    plats = {p: {"n_nu": None, "n_ht": None, "nmax": 4} for p in ("P", "T")}
    half = predict_migration(MpetDatabase(two, plats), "A", "T", refs=["P"],
                            interval="candidates")
    assert {c.workload for c in half.t1_candidates} == {"B", "C"}
    # listed, and said to give no estimate (predict's table marks it)
    assert {c.workload: c.usable for c in half.t1_candidates} == {"B": True, "C": False}
    assert half.t[0] == pytest.approx(10 * 7 / 5)  # B's transfer alone
    assert half.single_candidate
    assert all(lo <= t / f * (1 + 1e-12) and hi >= t * f * (1 - 1e-12)
               for lo, t, hi in zip(half.lower, half.t, half.upper))
    with pytest.raises(NoCandidates):
        predict_migration(MpetDatabase({k: v for k, v in profiles.items() if k[1] in ("T", "P1")
                                        and k[0] != "A" or k == ("A", "P2")}, platforms),
                          "A", "T")


@pytest.mark.parametrize("where", ["references", "target"])
def test_a_workload_measured_at_one_core_lends_no_scaling_to_a_migration(where):
    """Issue 19's scenario (a): a suite workload measured at one core count only (on the
    reference platforms, or on T) has no q(n) to transfer, yet was a scaling candidate (its
    flat one-point curve). It may give t(1), not sc: t(n) is the one made without it."""
    profiles, platforms = synthetic()
    base = MpetDatabase(profiles, platforms)
    without = predict_migration(base, "A", "T")
    one = ("T",) if where == "target" else ("P1", "P2", "P3")
    for p, (pi, c, nmax) in PLATFORMS.items():
        ns = [1] if p in one else range(1, nmax + 1)
        # A's time on every platform, n = 1 alike: as sequential as A where it has one count
        profiles[("solo", p)] = {"t": {n: profiles[("A", p)]["t"][n] * 1.3 for n in ns}}
    got = predict_migration(MpetDatabase(profiles, platforms), "A", "T")
    assert "solo" not in {c.workload for c in got.sc_candidates}
    assert got.t == pytest.approx(without.t, rel=1e-9)
    assert got.t1 == pytest.approx(profiles[("A", "T")]["t"][1], rel=1e-9)
    # t(1) is what it measured: the t(1) side may still take it
    seed = predict_migration(MpetDatabase(profiles, platforms), "A", "T",
                             t1_sel=Selection(n_workloads=6), sc_sel=SEED_SC, interval="none")
    assert "solo" in {c.workload for c in seed.t1_candidates}
    assert "solo" not in {c.workload for c in seed.sc_candidates}
    assert seed.t == pytest.approx(predict_migration(base, "A", "T", t1_sel=Selection(
        n_workloads=6), sc_sel=SEED_SC, interval="none").t, rel=1e-9)


def _crowded_suite(alike=8, unalike=22, seed=0):
    """A on P1-P3; on every platform ``alike`` workloads proportional to A (the same speed
    ratios, the same scaling) and ``unalike`` ones whose speed ratios and scaling scatter."""
    rng = np.random.default_rng(seed)
    profiles, platforms = {}, {}
    for p, (pi, c, nmax) in PLATFORMS.items():
        platforms[p] = {"n_nu": None, "n_ht": None, "nmax": nmax}
    kinds = {"A": (3.0, 0.04, None)}
    kinds.update({f"near{i}": (1.0 + i, 0.04, None) for i in range(alike)})
    kinds.update({f"far{i}": (2.0 + i, 0.02 * (i % 5), rng.lognormal(0, 0.4, len(PLATFORMS)))
                  for i in range(unalike)})
    for w, (tau, s, noise) in kinds.items():
        for j, (p, (pi, c, nmax)) in enumerate(PLATFORMS.items()):
            if w == "A" and p == "T":
                continue
            t1 = tau * pi * (noise[j] if noise is not None else 1.0)
            profiles[(w, p)] = {"t": {n: t1 * (1 + s * c * (n - 1)) / n
                                      for n in range(1, nmax + 1)}}
    return profiles, platforms


def test_a_migration_considers_the_targets_workloads_most_alike_a():
    """Past NEIGHBOURS other workloads on T, candidates, checks, choice and interval come
    from those most alike A (their cost grows with the cube of T's suite otherwise): here
    the 8 proportional to A rank first, the prediction is the one made with only the nearest
    NEIGHBOURS in the database, and it says how many of how many it considered."""
    profiles, platforms = _crowded_suite()
    db = MpetDatabase(profiles, platforms)
    near = nearest_suite(db, "A", "T", k=8)
    assert {w for w, _ in near.profiles} == {"A"} | {f"near{i}" for i in range(8)}
    assert nearest_suite(db, "A", "T", k=30) is db  # no more than k: the database itself
    pred = predict_migration(db, "A", "T")
    assert pred.suite == (NEIGHBOURS, 30)
    kept = {w for w, _ in nearest_suite(db, "A", "T").profiles}
    assert {f"near{i}" for i in range(8)} <= kept and len(kept) == NEIGHBOURS + 1
    alone = predict_migration(db.only_workloads(kept), "A", "T")
    assert alone.suite == (NEIGHBOURS, NEIGHBOURS)
    assert pred.t == alone.t and pred.lower == alone.lower and pred.upper == alone.upper
    assert {c.workload for c in pred.t1_candidates + pred.sc_candidates} <= kept
    truth = 3.0 * PLATFORMS["T"][0]
    assert pred.t1 == pytest.approx(truth, rel=1e-6)


def test_curve_space_survives_a_flat_candidate_that_eq21_on_elements_blows_up():
    """B scales perfectly on P (q's slope ~0): f = slope(A)/slope(B) on the elements is huge;
    on q(n) values the factor stays near q_A/q_B and the prediction stays sane."""
    platforms = {"P": {"n_nu": None, "n_ht": None, "nmax": 8},
                 "T": {"n_nu": None, "n_ht": None, "nmax": 8}}
    ns = range(1, 9)
    def prof(t1, slope):
        return {"t": {n: t1 * (1 + slope * (n - 1)) / n for n in ns}}
    profiles = {("A", "P"): prof(2.0, 0.1), ("B", "P"): prof(1.0, 1e-6),
                ("B", "T"): prof(1.5, 0.02), ("A", "T"): prof(3.0, 0.12)}
    db = MpetDatabase(profiles, platforms)
    truth = profiles[("A", "T")]["t"]
    seed = predict_migration(db, "A", "T", SEED_T1, SEED_SC)
    curve = predict_migration(db, "A", "T")
    err = lambda p: max(abs(v - truth[n]) / truth[n] for n, v in zip(p.ns, p.t))
    assert err(seed) > 10          # the elements' factor multiplies the slope by ~1e5
    assert err(curve) < 0.1
    assert curve.t1 == pytest.approx(3.0)


def test_scalability_prediction_scenario_b_takes_the_closest_workload():
    profiles, platforms = synthetic(counters=True)
    # A measured sequentially only, with its counters: its twin B5 has the same counters
    profiles[("A", "P1")] = {"t": {1: 3.0}, "counters": {1: {"miss": 0.1 + 0.04}}}
    for p, (pi, c, nmax) in PLATFORMS.items():
        profiles[("B5", p)] = {"t": {n: 4.0 * pi * (1 + 0.04 * c * (n - 1)) / n
                                     for n in range(1, nmax + 1)},
                               "counters": {n: {"miss": 0.14} for n in range(1, nmax + 1)}}
    db = MpetDatabase(profiles, platforms)
    pred = predict_scalability(db, "A", "P1", Selection(1, 1, k=0))
    assert pred.sc_candidates[0].workload == "B5"
    assert (pred.t1_basis, pred.sc_basis, pred.sc_choice) == ("measured", "sc", None)
    want = [3.0 * (1 + 0.04 * 0.5 * (n - 1)) / n for n in range(1, 9)]
    assert pred.t == pytest.approx(want, rel=1e-6)


def test_ratio_distance_is_zero_for_proportional_series_and_grows_with_scatter():
    x = {"P1": 2.0, "P2": 8.0, "P3": 1.0}
    assert ratio_distance(x, {k: 3.5 * v for k, v in x.items()}) == pytest.approx(0.0, abs=1e-12)
    near = ratio_distance(x, {"P1": 7.0, "P2": 28.0 * 1.05, "P3": 3.5})
    far = ratio_distance(x, {"P1": 7.0, "P2": 28.0 * 1.5, "P3": 3.5})
    assert 0 < near < far < 1
    assert math.isnan(ratio_distance(x, {"P1": 1.0, "Q": 2.0}))      # one common key
    assert math.isnan(ratio_distance(x, {"P1": 1.0, "P2": -1.0}))    # one usable key
    # grouped (per n): a ratio constant within each n but differing between n is proportional
    xq = {("P1", 2): 1.1, ("P2", 2): 1.3, ("P1", 4): 1.5, ("P2", 4): 2.0}
    yq = {k: v * (1.2 if k[1] == 2 else 0.8) for k, v in xq.items()}
    assert ratio_distance(xq, yq, lambda k: k[1]) == pytest.approx(0.0, abs=1e-12)
    assert ratio_distance(xq, yq) > 0.1


def _misleading_t1(with_t=True):
    """B1's t(1) is proportional to A's on every platform; B2 scales like A (sc twin) but its
    sequential speed ratio to A changes from platform to platform."""
    nmax = 4
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": nmax} for p in ("P1", "P2", "P3", "T")}
    speed_a = {"P1": 1.0, "P2": 3.0, "P3": 0.5, "T": 2.0}
    speed_b2 = {"P1": 1.0, "P2": 1.0, "P3": 2.0, "T": 0.4}
    shape = {"A": 0.05, "B1": 0.3, "B2": 0.05}
    profiles = {}
    for p in platforms:
        for w, t1 in (("A", 4.0 * speed_a[p]), ("B1", 10.0 * speed_a[p]),
                      ("B2", 6.0 * speed_b2[p])):
            if w == "A" and p == "T" and not with_t:
                continue
            profiles[(w, p)] = {"t": {n: t1 * (1 + shape[w] * (n - 1)) / n
                                      for n in range(1, nmax + 1)}}
    return profiles, platforms


def test_t1_ratio_basis_finds_the_proportional_workload_that_sc_distances_miss():
    profiles, platforms = _misleading_t1()
    db = MpetDatabase(profiles, platforms)
    truth = profiles[("A", "T")]["t"][1]
    by_sc = predict_migration(db, "A", "T", Selection(3, 1, "mean", k=0, mean="geometric"))
    by_ratio = predict_migration(db, "A", "T", Selection(3, 1, "mean", k=0, mean="geometric",
                                                         basis="t1-ratio"))
    assert {c.workload for c in by_sc.t1_candidates} == {"B2"}      # the scaling twin
    assert abs(by_sc.t1 - truth) / truth > 0.5
    assert {c.workload for c in by_ratio.t1_candidates} == {"B1"}
    assert by_ratio.t1 == pytest.approx(truth, rel=1e-9)
    assert all(c.d_a == pytest.approx(0.0, abs=1e-12) for c in by_ratio.t1_candidates)
    # A on one reference platform: no spread to measure, D_a falls back to sc's
    one = {k: v for k, v in profiles.items() if k[0] != "A" or k[1] == "P1"}
    db1 = MpetDatabase(one, platforms)
    sel = Selection(3, 2, "individual", k=0)
    a = predict_migration(db1, "A", "T", sel)
    b = predict_migration(db1, "A", "T", Selection(3, 2, "individual", k=0, basis="t1-ratio"))
    assert [c.d_a for c in a.t1_candidates] == pytest.approx([c.d_a for c in b.t1_candidates])


def _local_proxy():
    """B1's t(1) is proportional to A's on P1, P2 and T (whose suite runs at one speed ratio),
    not on Q1, Q2; B2 the other way round."""
    speed = {"P1": 1.0, "P2": 2.0, "Q1": 0.7, "Q2": 3.0, "T": 1.5}
    suite_dev = {"Q1": (1.0, 1.5, 0.7), "Q2": (0.6, 1.0, 1.4)}
    a_dev = {"Q1": 2.0, "Q2": 0.5}
    b2_dev = {"P1": 1.3, "P2": 0.8, "T": 1.6}
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": 2} for p in speed}
    profiles = {}
    for p, sp in speed.items():
        t1s = {f"S{i}": base * sp * suite_dev.get(p, (1, 1, 1))[i]
               for i, base in enumerate((2.0, 5.0, 9.0))}
        t1s["A"] = 4.0 * sp * a_dev.get(p, 1.0)
        t1s["B1"] = 10.0 * sp
        t1s["B2"] = 6.0 * sp * a_dev.get(p, 1.0) * b2_dev.get(p, 1.0)
        for w, t1 in t1s.items():
            profiles[(w, p)] = {"t": {1: t1, 2: t1 * 1.1 / 2}}
    return profiles, platforms


def test_ratio_distance_with_k_looks_at_the_references_that_behave_like_the_target():
    """Over all references B2 looks closer (k = 0); with k > 0, D_a weighs the references by
    eq. 22's penalty of their D_p to T and B2 drops out."""
    profiles, platforms = _local_proxy()
    db = MpetDatabase(profiles, platforms)
    truth = profiles[("A", "T")]["t"][1]
    flat = predict_migration(db, "A", "T", Selection(1, 1, k=0, basis="t1-ratio"))
    local = predict_migration(db, "A", "T", Selection(1, 1, k=3, basis="t1-ratio"))
    assert {c.workload for c in flat.t1_candidates} == {"B2"}
    assert abs(flat.t1 - truth) / truth > 0.2
    # B1 (or a suite workload, proportional to A on those references too), never B2
    assert "B2" not in {c.workload for c in local.t1_candidates}
    assert local.t1 == pytest.approx(truth, rel=1e-6)


def test_t1_validated_basis_trusts_the_tuples_whose_transfer_held_where_data_resemble_t():
    """Each (P, B)'s eq. 21 transfer is checked on A's other references (weighted by their
    likeness to T) and on the suite on T (weighted by likeness to A): tuples whose transfer
    held on P1/P2 (which behave like T) come first and weigh most, and B2 (proportional to A
    on Q1/Q2 only) is left out, where the ratio distance over all references picks it."""
    profiles, platforms = _local_proxy()
    db = MpetDatabase(profiles, platforms)
    truth = profiles[("A", "T")]["t"][1]
    for n, off in ((1, 1e-9), (3, 0.05)):
        ratio = predict_migration(db, "A", "T", Selection(n, n, "mean", k=0, mean="geometric",
                                                          basis="t1-ratio"))
        got = predict_migration(db, "A", "T", Selection(n, n, "mean", k=0, mean="geometric",
                                                        basis="t1-validated"))
        assert "B2" in {c.workload for c in ratio.t1_candidates}
        assert abs(ratio.t1 - truth) / truth > 0.2
        assert "B2" not in {c.workload for c in got.t1_candidates}
        assert abs(got.t1 - truth) / truth < off
        assert got.t1_candidates[0].platform in ("P1", "P2")
        for c in got.t1_candidates:
            assert math.isfinite(c.var) and c.d_a == pytest.approx(1 - math.exp(-math.sqrt(c.var)))
        # inverse variance (largest weight 1), in order of validated error
        assert [c.weight for c in got.t1_candidates] == sorted(
            (c.weight for c in got.t1_candidates), reverse=True)
        assert got.t1_candidates[0].weight == pytest.approx(1.0)
    # A's own profile on T takes no part: a wild t(1) there changes nothing
    wild = dict(profiles)
    wild[("A", "T")] = {"t": {1: truth * 50, 2: truth * 30}}
    again = predict_migration(MpetDatabase(wild, platforms), "A", "T", DEFAULT_T1)
    assert again.t1 == pytest.approx(predict_migration(db, "A", "T", DEFAULT_T1).t1, rel=1e-12)


def test_t1_validated_trusts_the_workload_that_also_scales_like_a():
    """B1 and B2 run at speed ratios to A that deviate alike on A's two references (x1.1 and
    /1.1 on P2), but only B1 scales like A there (the same q(2)). Which workloads behave like A is
    read from both tables, so the transfers checked on B1 count more than those checked on
    B2: the tuples through B1 validate better and weigh more, and the t(1) predicted on T lies
    nearer B1's transfers. With the t(1) table alone the two are symmetric: equal weights."""
    t1 = {"A": {"P1": 1.0, "P2": 2.0}, "B1": {"P1": 1.0, "P2": 2.2}, "B2": {"P1": 1.0, "P2": 2 / 1.1}}
    q2 = {"A": {"P1": 1.2, "P2": 1.5}, "B1": {"P1": 1.2, "P2": 1.5}, "B2": {"P1": 1.2, "P2": 1.2}}
    t1["B1"]["T"], t1["B2"]["T"] = 4.0, 5.2
    q2["B1"]["T"] = q2["B2"]["T"] = 1.3
    profiles = {(w, p): {"t": {1: v, 2: v * q2[w][p] / 2}} for w, by in t1.items()
                for p, v in by.items()}
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": 2} for p in ("P1", "P2", "T")}
    got = predict_migration(MpetDatabase(profiles, platforms), "A", "T", DEFAULT_T1)
    weight = {b: sum(c.weight for c in got.t1_candidates if c.workload == b)
              for b in ("B1", "B2")}
    assert weight["B1"] > 1.1 * weight["B2"]
    for p in ("P1", "P2"):
        one = {c.workload: c.var for c in got.t1_candidates if c.platform == p}
        assert one["B1"] < one["B2"]

    def transfers(b):
        return [math.log(t1["A"][p] * t1[b]["T"] / t1[b][p]) for p in ("P1", "P2")]

    mid1, mid2 = np.mean(transfers("B1")), np.mean(transfers("B2"))
    assert abs(math.log(got.t1) - mid1) < abs(math.log(got.t1) - mid2)


def test_t1_validated_with_one_reference_trusts_factors_of_workloads_that_scale_like_a():
    """A profiled on P alone (``opptune predict --from P``): no ratio deviation exists, so
    which suite workloads behave like A is the seed's D_a over sc on P (eq. 16). B1 scales
    exactly like A there; each tuple's P -> T factor is checked against the other workloads'
    factors, B1's counting most, so B2's outlying factor (x1.65) weighs least and the t(1)
    lands near B1's and B3's factors (x1.0, x1.1), not at the plain mean of the three."""
    f = {"B1": 1.0, "B2": math.exp(0.5), "B3": math.exp(0.1)}
    q = {"A": (1.0, 1.1, 1.3, 1.6), "B1": (1.0, 1.1, 1.3, 1.6), "B2": (1.0, 1.6, 2.4, 3.5),
         "B3": (1.0, 1.4, 2.0, 2.8)}
    t1 = {"A": 2.0, "B1": 1.0, "B2": 3.0, "B3": 5.0}
    profiles = {}
    for w, qs in q.items():
        plats = ("P",) if w == "A" else ("P", "T")
        for p in plats:
            v = t1[w] * (f[w] if p == "T" else 1.0)
            profiles[(w, p)] = {"t": {n: v * qn / n for n, qn in zip((1, 2, 3, 4), qs)}}
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": 4} for p in ("P", "T")}
    got = predict_migration(MpetDatabase(profiles, platforms), "A", "T", DEFAULT_T1, refs=["P"])
    assert got.t1_basis == "t1-validated"
    var = {c.workload: c.var for c in got.t1_candidates}
    assert var["B2"] > var["B1"] > var["B3"]
    plain = t1["A"] * math.exp(np.mean(np.log(list(f.values()))))
    assert abs(math.log(got.t1 / t1["A"])) < 0.5 * abs(math.log(plain / t1["A"]))


def test_a_candidate_without_weight_is_not_in_the_band():
    """Eq. 22 with k = 3 gives the farthest candidate no weight: it takes no part in the
    prediction, so its curve (here B2's, which rises on T) does not stretch the interval;
    the prediction then rests on one weighted curve and is flagged and widened as such."""
    prof = lambda t1, s, ns=(1, 2, 3, 4): {"t": {n: t1 / n ** s for n in ns}}  # noqa: E731
    profiles = {("A", "P"): prof(10, 0.9), ("B1", "P"): prof(5, 0.9), ("B1", "T"): prof(7, 0.8),
                ("B2", "P"): prof(3, 0.2), ("B2", "T"): prof(4, -2.0)}
    plats = {p: {"n_nu": None, "n_ht": None, "nmax": 4} for p in ("P", "T")}
    db = MpetDatabase(profiles, plats)
    sc_sel = Selection(1, 2, k=3, space="curve", mean="geometric")
    got = predict_migration(db, "A", "T", Selection(1, 2, k=0, mean="geometric"), sc_sel,
                          interval="candidates")
    w = {c.workload: c.weight for c in got.sc_candidates}
    assert w["B1"] == pytest.approx(1.0) and w["B2"] == 0.0
    assert got.t == pytest.approx([got.t1 / n ** 0.8 for n in (1, 2, 3, 4)], rel=1e-9)
    assert got.single_candidate
    f = SINGLE_CANDIDATE_FACTOR
    assert all(lo <= t / f * (1 + 1e-12) and hi >= t * f * (1 - 1e-12)
               for lo, t, hi in zip(got.lower, got.t, got.upper))
    # B2's transfer alone would put t(4) near 4^2 times t(1); the band stays far below it
    b2 = got.t1 * 4 ** 2.0 * 4 ** 0.9 / 4 ** 0.2 / 4
    assert got.upper[-1] < 0.1 * b2


def test_interval_is_calibrated_on_the_targets_other_workloads():
    """The interval is t exp(+-e), e = the largest log error over n of the same prediction for
    each other workload on T (left out in turn, from the references A has): it narrows where
    the suite's transfers hold and widens by the error a suite workload shows; level m/(m+1)."""
    profiles, platforms = synthetic()
    db = MpetDatabase(profiles, platforms)
    pred = predict_migration(db, "A", "T")
    assert pred.calibrated == 4 and pred.level == pytest.approx(0.8)  # B1..B4 on T
    errs = calibration_errors(db.without(("A", "T")), "A", "T")
    assert len(errs) == 4
    # B3's error, predicted here the way the interval does it
    rest = db.without(("A", "T")).without(("B3", "T"))
    b3 = predict_migration(rest, "B3", "T", refs=["P1", "P2", "P3"], ns=range(1, 13),
                           interval="none")
    truth3 = profiles[("B3", "T")]["t"]
    assert max(abs(math.log(v / truth3[n])) for n, v in zip(b3.ns, b3.t)) == pytest.approx(
        errs[2], rel=1e-12)
    f = math.exp(max(max(errs), VALIDATION_FLOOR))  # at least the noise of one run
    assert pred.upper == pytest.approx([t * f for t in pred.t], rel=1e-12)
    assert pred.lower == pytest.approx([t / f for t in pred.t], rel=1e-12)
    assert f < 1.1  # separable: every transfer nearly holds
    truth = profiles[("A", "T")]["t"]
    assert all(lo <= truth[n] <= hi for n, lo, hi in zip(pred.ns, pred.lower, pred.upper))
    # B3 runs 1.5x slower on T than the separable case: its own prediction is that far off,
    # and the interval takes that error in; A's truth stays inside
    slow = dict(profiles)
    slow[("B3", "T")] = {"t": {n: 1.5 * v for n, v in truth3.items()}}
    wide = predict_migration(MpetDatabase(slow, platforms), "A", "T")
    assert 1.4 < wide.upper[0] / wide.t[0] < 1.7
    assert all(lo <= truth[n] <= hi for n, lo, hi in zip(wide.ns, wide.lower, wide.upper))
    # fewer than MIN_CALIBRATION other workloads on T: the candidates' band, no level
    few = {k: v for k, v in profiles.items() if k[1] != "T" or k[0] in ("A", "B1")}
    assert MIN_CALIBRATION == 2
    got = predict_migration(MpetDatabase(few, platforms), "A", "T")
    band = predict_migration(MpetDatabase(few, platforms), "A", "T", interval="candidates")
    assert (got.calibrated, got.level) == (0, None)
    assert (got.lower, got.upper) == (band.lower, band.upper)
    assert predict_migration(db, "A", "T", interval="none").lower == []


def test_a_calibration_prediction_that_fails_counts_as_outside():
    """A suite workload whose prediction gives no positive time (eq. 21 on elements can) is an
    infinite error: the band is the largest finite one and the level counts it as outside,
    (m - j)/(m + 1), instead of leaving it out (which overstated the seed setup's level)."""
    class Pred:
        def __init__(self, t):
            self.t = t
    prof = {"t": {1: 2.0, 2: 1.0}}
    assert largest_log_error(prof, lambda ns: Pred([2.0, -0.5])) == math.inf
    assert largest_log_error(prof, lambda ns: Pred([2.0, 2.0])) == pytest.approx(math.log(2))
    assert largest_log_error({"t": {}}, lambda ns: Pred([])) is None
    def cannot(ns):
        raise NoCandidates("none")
    assert largest_log_error(prof, cannot) is None
    lo, hi, level = calibrated_band([1.0, 0.5], [0.1, 0.2, math.inf])
    assert level == pytest.approx(2 / 4)
    assert hi == pytest.approx([math.exp(0.2), 0.5 * math.exp(0.2)])
    assert lo == pytest.approx([math.exp(-0.2), 0.5 * math.exp(-0.2)])
    assert calibrated_band([1.0], [0.1, math.inf]) is None  # one finite error: too few
    assert calibrated_band([1.0], [0.0, 0.01])[1] == [pytest.approx(math.exp(VALIDATION_FLOOR))]


def test_t1_validated_interval_is_the_validated_error_not_the_candidates_spread():
    """Where every transfer held exactly (each workload's t(1) a constant times a platform
    speed) the t(1) interval is a point even though the candidates' P and B differ a lot;
    where they did not (B2 off on the references like T), it widens and holds the truth."""
    speed = {"P1": 1.0, "P2": 2.5, "P3": 0.4, "T": 1.7}
    base = {"A": 3.0, "B1": 10.0, "B2": 0.5, "B3": 40.0}
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": 2} for p in speed}
    exact = {(w, p): {"t": {1: b * sp, 2: b * sp * 0.6}} for w, b in base.items()
             for p, sp in speed.items()}
    got = predict_migration(MpetDatabase(exact, platforms), "A", "T", DEFAULT_T1,
                            interval="candidates")
    assert got.t1 == pytest.approx(3.0 * 1.7, rel=1e-9)
    assert got.lower[0] == pytest.approx(got.t1, rel=1e-9)
    assert got.upper[0] == pytest.approx(got.t1, rel=1e-9)
    profiles, platforms = _local_proxy()
    truth = profiles[("A", "T")]["t"][1]
    got = predict_migration(MpetDatabase(profiles, platforms), "A", "T", DEFAULT_T1,
                            interval="candidates")
    assert got.upper[0] / got.lower[0] > 1.1
    assert got.lower[0] <= truth <= got.upper[0]
    # the candidates' own estimates span 2.1 .. 17.1 (x 8) here; the validated band is narrower
    assert got.upper[0] / got.lower[0] < 4


def test_t1_validated_basis_falls_back_to_the_ratio_distance_with_nothing_to_check():
    """A measured on one reference and T's suite of one workload: no tuple can be checked on
    other known t(1), so the ratio basis (and its fallback to sc) is what remains."""
    profiles, platforms = _local_proxy()
    keep = {k: v for k, v in profiles.items()
            if (k[0] != "A" or k[1] == "P1") and (k[1] != "T" or k[0] in ("A", "B1"))}
    db = MpetDatabase(keep, platforms)
    got = predict_migration(db, "A", "T", DEFAULT_T1)
    ratio = predict_migration(db, "A", "T", dataclasses.replace(DEFAULT_T1, basis="t1-ratio"))
    assert got.t1 == pytest.approx(ratio.t1, rel=1e-12)
    assert all(not math.isfinite(c.var) for c in got.t1_candidates)
    assert (got.t1_basis, ratio.t1_basis) == ("t1-ratio", "t1-ratio")  # fell back, says so
    # a reference profile without t(1) (runs at 2 cores only) is no tuple to check, no error
    profiles[("A", "P1")] = {"t": {2: profiles[("A", "P1")]["t"][2]}}
    truth = profiles[("A", "T")]["t"][1]
    got = predict_migration(MpetDatabase(profiles, platforms), "A", "T", DEFAULT_T1)
    assert all(c.platform != "P1" or not math.isfinite(c.var) for c in got.t1_candidates)
    assert got.lower[0] <= truth <= got.upper[0]


def test_q_ratio_basis_rates_scaling_candidates_by_proportional_curves():
    """B1's q(n) is A's times a factor per n on every platform; B2's q(n) is close to A's but
    off by a platform-dependent amount: the q-ratio basis takes B1 and transfers exactly."""
    nmax = 6
    plats = {"P1": 0.5, "P2": 1.0, "P3": 2.0, "T": 1.5}
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": nmax} for p in plats}
    wobble = {"P1": 1.15, "P2": 0.85, "P3": 1.1, "T": 0.9}
    profiles = {}
    for p, c in plats.items():
        q_a = {n: 1 + 0.05 * c * (n - 1) for n in range(1, nmax + 1)}
        qs = {"A": q_a, "B1": {n: q_a[n] * (1 + 0.1 * (n - 1)) for n in q_a},
              "B2": {n: q_a[n] * wobble[p] ** ((n - 1) / (nmax - 1)) for n in q_a}}
        for w, q in qs.items():
            profiles[(w, p)] = {"t": {n: 2.0 * q[n] / n for n in q}}
    db = MpetDatabase(profiles, platforms)
    truth = profiles[("A", "T")]["t"]
    sel = Selection(3, 1, space="curve", mean="geometric", k=0)
    by_ratio = predict_migration(db, "A", "T", sc_sel=dataclasses.replace(sel, basis="q-ratio"))
    assert {c.workload for c in by_ratio.sc_candidates} == {"B1"}
    shape = [v / by_ratio.t1 * truth[1] for v in by_ratio.t]
    assert shape == pytest.approx([truth[n] for n in by_ratio.ns], rel=1e-9)
    by_sc = predict_migration(db, "A", "T", sc_sel=sel)
    err = max(abs(v / by_sc.t1 * truth[1] - truth[n]) / truth[n]
              for n, v in zip(by_sc.ns, by_sc.t))
    assert {c.workload for c in by_sc.sc_candidates} == {"B2"} and err > 0.02


def _q_local_proxy(nmax=4):
    """q(w, p, n) = (1 + b_w (n-1)) (1 + g_p (n-1)) times deviations: A (and B2) scale
    differently on Q1, Q2, whose suite t(1) also deviates (Q unlike T); B2 wobbles on P1, P2
    and T. So the suite S0..S2 and B1 are proportional to A per n on P1, P2 and T only, B2 on
    Q1, Q2 (and nearly on P1, P2)."""
    g = {"P1": 0.05, "P2": 0.15, "Q1": 0.1, "Q2": 0.3, "T": 0.2}
    speed = {"P1": 1.0, "P2": 2.0, "Q1": 0.7, "Q2": 3.0, "T": 1.5}
    suite_dev = {"Q1": (1.0, 1.5, 0.7), "Q2": (0.6, 1.0, 1.4)}
    a_dev = {"Q1": 0.3, "Q2": -0.2}
    b2_wob = {"P1": 0.04, "P2": -0.03, "T": 0.05}
    base = {"A": 0.1, "B1": 0.25, "B2": 0.15, "S0": 0.0, "S1": 0.2, "S2": 0.4}
    t1_base = {"A": 4.0, "B1": 10.0, "B2": 6.0, "S0": 2.0, "S1": 5.0, "S2": 8.0}
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": nmax} for p in g}
    profiles = {}

    def fac(c, n):
        return 1 + c * (n - 1)

    for p in g:
        for w, b in base.items():
            dev = a_dev.get(p, 0.0) if w in ("A", "B2") else 0.0
            wob = b2_wob.get(p, 0.0) if w == "B2" else 0.0
            t1 = t1_base[w] * speed[p]
            if w[0] == "S":
                t1 *= suite_dev.get(p, (1, 1, 1))[int(w[1])]
            profiles[(w, p)] = {"t": {n: t1 * fac(b, n) * fac(g[p], n) * fac(dev, n) *
                                      fac(wob, n) / n for n in range(1, nmax + 1)}}
    return profiles, platforms


def _shape_error(pred, truth):
    return max(abs(v / pred.t1 * truth[1] - truth[n]) / truth[n]
               for n, v in zip(pred.ns, pred.t))


def test_q_validated_basis_trusts_the_curves_whose_transfer_held_where_data_resemble_t():
    """The q-ratio basis over all references takes B2 (14 % off); q-validated checks each
    tuple's q(n) transfer at T's core counts on A's references like T and on T's suite and
    transfers (almost) exactly; "q-chosen" takes q-validated, which predicted T's other
    workloads better. A's own profile on T takes no part."""
    profiles, platforms = _q_local_proxy()
    db = MpetDatabase(profiles, platforms)
    truth = profiles[("A", "T")]["t"]
    sel = Selection(3, 1, k=0, space="curve", mean="geometric")
    ratio = predict_migration(db, "A", "T", sc_sel=dataclasses.replace(sel, basis="q-ratio"))
    got = predict_migration(db, "A", "T", sc_sel=dataclasses.replace(sel, basis="q-validated"))
    assert {c.workload for c in ratio.sc_candidates} == {"B2"}
    assert _shape_error(ratio, truth) > 0.1
    assert "B2" not in {c.workload for c in got.sc_candidates}
    assert _shape_error(got, truth) < 0.01
    assert got.sc_candidates[0].platform in ("P1", "P2")
    assert [c.weight for c in got.sc_candidates] == sorted(
        (c.weight for c in got.sc_candidates), reverse=True)
    chosen = predict_migration(db, "A", "T", sc_sel=dataclasses.replace(sel, basis="q-chosen"))
    assert chosen.t == pytest.approx(got.t, rel=1e-12)
    rest = db.without(("A", "T"))
    assert choose_sc(rest, "A", "T", sel).basis == "q-validated"
    # the prediction says which basis it used and why: both options' errors on T's suite
    assert (ratio.sc_basis, got.sc_basis, chosen.sc_basis) == \
        ("q-ratio", "q-validated", "q-validated")
    assert ratio.sc_choice is None and got.sc_choice is None
    ch = chosen.sc_choice
    assert ch["chosen"] == "q-validated" and set(ch["errors"]) == {"q-ratio", "q-validated"}
    assert ch["errors"]["q-validated"] < ch["errors"]["q-ratio"]
    suite_on_t = {w for w, p in profiles if p == "T" and w != "A"}
    assert 0 < ch["checked"] <= len(suite_on_t)
    assert chosen.t1_basis == got.t1_basis == "t1-validated"
    wild = dict(profiles)
    wild[("A", "T")] = {"t": {1: truth[1] * 50, 2: truth[1] * 3, 4: truth[1] * 40}}
    again = predict_migration(MpetDatabase(wild, platforms), "A", "T", sc_sel=DEFAULT_SC)
    assert again.t == pytest.approx(predict_migration(db, "A", "T", sc_sel=DEFAULT_SC).t,
                                    rel=1e-12)


def test_calibration_chooses_each_suite_workloads_sc_basis_without_its_own_score():
    """Without the runtime parameters each suite workload B the interval is calibrated on is
    predicted with the sc basis that T's other workloads' scores choose: A's leave-one-out
    over T's suite, computed once, with B's own row left out (B's error on T never chooses
    how B is predicted)."""
    profiles, platforms = _q_local_proxy()
    db = MpetDatabase(profiles, platforms).without(("A", "T"))
    suite = ["B1", "B2", "S0", "S1", "S2"]
    scores = suite_scores(db, "A", "T", DEFAULT_SC)
    assert sorted(scores) == suite and all(len(e) == 2 for e in scores.values())
    # B2's row alone makes q-validated win: B2 is predicted with q-ratio, the others with it
    rigged = {b: ([0.3, 0.001] if b == "B2" else [0.1, 0.2]) for b in suite}
    fixed = {basis: calibration_errors(db, "A", "T", sc_sel=dataclasses.replace(
        DEFAULT_SC, basis=basis)) for basis in ("q-ratio", "q-validated")}
    assert fixed["q-ratio"] != pytest.approx(fixed["q-validated"], rel=1e-6)
    got = calibration_errors(db, "A", "T", scores=rigged)
    assert got == pytest.approx([fixed["q-validated"][0], fixed["q-ratio"][1],
                                 *fixed["q-validated"][2:]], rel=1e-12)
    # the prediction's own interval is calibrated on A's scores, computed once
    pred = predict_migration(db, "A", "T")
    errs = calibration_errors(db, "A", "T", scores=scores)
    f = math.exp(max(max(errs), VALIDATION_FLOOR))
    assert pred.upper == pytest.approx([t * f for t in pred.t], rel=1e-12)


def test_q_chosen_keeps_q_ratio_with_nothing_to_score_and_q_validated_falls_back():
    """T's suite of one workload: no other workload on T to predict, so "q-chosen" is the
    q-ratio basis; A on one reference and nothing else on T: q-validated has no tuple to
    check and is the q-ratio basis too."""
    profiles, platforms = _q_local_proxy()
    keep = {k: v for k, v in profiles.items() if k[1] != "T" or k[0] in ("A", "S1")}
    db = MpetDatabase(keep, platforms)
    assert choose_sc(db.without(("A", "T")), "A", "T", DEFAULT_SC).basis == "q-ratio"
    ratio = predict_migration(db, "A", "T", sc_sel=dataclasses.replace(DEFAULT_SC,
                                                                        basis="q-ratio"))
    assert predict_migration(db, "A", "T").t == pytest.approx(ratio.t, rel=1e-12)
    one = {k: v for k, v in keep.items() if k[0] != "A" or k[1] in ("P1", "T")}
    db = MpetDatabase(one, platforms)
    val = predict_migration(db, "A", "T", sc_sel=dataclasses.replace(DEFAULT_SC,
                                                                      basis="q-validated"))
    ratio = predict_migration(db, "A", "T", sc_sel=dataclasses.replace(DEFAULT_SC,
                                                                        basis="q-ratio"))
    assert val.t == pytest.approx(ratio.t, rel=1e-12)
    assert all(not math.isfinite(c.var) for c in val.sc_candidates)
    assert val.sc_basis == "q-ratio"  # the basis it fell back to, not the one asked for
    keep_db = MpetDatabase(keep, platforms)
    none = predict_migration(keep_db, "A", "T")
    assert none.sc_choice == {"chosen": "q-ratio", "checked": 0,
                              "errors": {"q-ratio": None, "q-validated": None}}
    with pytest.raises(ValueError):
        Selection(basis="q-chosen")  # works on q(n) values only


def _lock_lookalike(with_params=True, nmax=8):
    """A scales like GOOD times (1 + 0.1 (n-1)) on every platform, so eq. 21 with GOOD is
    exact; LOCK's q(n) equals A's on the references P1, P2 but rises steeply on T (a lock
    that a big machine contends: the locked_update / triad case of the 2-core and 16-core
    machines). Only the lock wait l(n) of the runtime parameters tells LOCK from A beforehand."""
    slope = {"P1": 0.05, "P2": 0.08, "T": 0.02}
    platforms = {p: {"n_nu": None, "n_ht": None, "nmax": nmax} for p in slope}
    ns = range(1, nmax + 1)
    profiles = {}
    for p, a in slope.items():
        good = {n: 1 + a * (n - 1) for n in ns}
        qs = {"GOOD": good, "A": {n: good[n] * (1 + 0.1 * (n - 1)) for n in ns}}
        qs["LOCK"] = qs["A"] if p != "T" else {n: 1 + 0.8 * (n - 1) for n in ns}
        for w, q in qs.items():
            prof = {"t": {n: 3.0 * q[n] / n for n in ns}}
            if with_params:
                lock = 0.1 if w == "LOCK" else 0.0
                prof["params"] = {n: {"R": 1 + 0.01 * n, "l": lock * n, "w": 0.01 * n,
                                      "c": 0.001 * n, "d": 0.001 * n, "s": 0.001 * n,
                                      "j": 0.001 * n} for n in ns}
            profiles[(w, p)] = prof
    return profiles, platforms


def test_q_chosen_rates_by_the_seeds_sc_distance_where_runtime_parameters_are_there():
    """With the runtime parameters, "q-chosen" is the seed's sc basis (eq. 16-19): LOCK,
    whose q(n) on the references equals A's, is told apart by its lock wait, and GOOD's
    transfer is exact; without them (an external workload, the CSV datasets) it chooses
    between q-ratio and q-validated as before, and the ratio basis follows LOCK."""
    profiles, platforms = _lock_lookalike()
    truth = profiles[("A", "T")]["t"]
    got = predict_migration(MpetDatabase(profiles, platforms), "A", "T")
    assert got.sc_basis == "sc" and got.sc_choice == {
        "chosen": "sc", "checked": 0, "errors": {}, "runtime_parameters": True}
    assert got.sc_candidates[0].workload == "GOOD"
    assert _shape_error(got, truth) < 0.02
    ratio = predict_migration(MpetDatabase(profiles, platforms), "A", "T",
                              sc_sel=dataclasses.replace(DEFAULT_SC, basis="q-ratio"))
    assert ratio.sc_candidates[0].workload == "LOCK" and _shape_error(ratio, truth) > 0.5
    bare, _ = _lock_lookalike(with_params=False)
    plain = predict_migration(MpetDatabase(bare, platforms), "A", "T")
    assert plain.sc_basis in ("q-ratio", "q-validated")
    assert set(plain.sc_choice["errors"]) == {"q-ratio", "q-validated"}
    # A's own profile on T carrying parameters does not count: it is what is predicted
    mixed = dict(bare)
    mixed[("A", "T")] = profiles[("A", "T")]
    assert predict_migration(MpetDatabase(mixed, platforms), "A", "T").sc_basis != "sc"


def test_extrapolated_q_never_falls_below_the_least_measured():
    """A line through q(1) = 1 and a superlinear q(2) < 1 turns negative a few cores on (the
    2-core machine's merge_sort at 10): beyond the measured core counts q(n) stays at or above
    the least measured value, so every transfer's log is defined."""
    prof = {"t": {1: 2.0, 2: 0.8}}  # q(2) = 0.8
    db = MpetDatabase({("W", "P"): prof}, {"P": {"n_nu": None, "n_ht": None, "nmax": 2}})
    q = db.q_values(("W", "P"), range(1, 17))
    assert q[0] == pytest.approx(1.0) and q[1] == pytest.approx(0.8)
    assert np.all(q[2:] >= 0.8 - 1e-12) and np.all(np.isfinite(np.log(q)))
    # a profile that scales normally keeps its fitted extrapolation
    up = MpetDatabase({("W", "P"): {"t": {1: 2.0, 2: 1.1}}},
                      {"P": {"n_nu": None, "n_ht": None, "nmax": 2}})
    assert up.q_values(("W", "P"), [4])[0] == pytest.approx(1.3)


def test_leave_one_out_evaluation_beats_naive_on_separable_data():
    profiles, platforms = synthetic()
    res = evaluate(MpetDatabase(profiles, platforms))
    assert len(res["cases"]) == len(profiles)
    s = res["summary"]
    assert s["mpet"]["t1"]["gmean"] < 1e-6
    assert s["mpet"]["scaling"]["gmean"] < s["naive"]["scaling"]["gmean"]
    assert s["mpet"]["full"]["p95"] >= s["mpet"]["full"]["median"]
    # no t(1) of its own: every key there (eval-mpet's JSON), none with a figure
    assert s["naive"]["t1"] == {"count": 0, "gmean": None, "median": None, "p70": None,
                                "p80": None, "p95": None, "min": None, "max": None}
    assert summarise([0.1, 0.4])["gmean"] == pytest.approx(0.2)
    iv = res["interval"]
    assert iv["count"] == len(res["cases"]) and 0 <= iv["covered"] <= iv["count"]
    assert iv["single"] == 0
    # every target has 4 other workloads: each interval calibrated at level 4/5
    assert iv["calibrated"] == iv["count"] and iv["level"] == pytest.approx(0.8)
    assert iv["width"] >= 1.0


SMALL_T1 = [SEED_T1, Selection(1, 1, "mean", k=0, mean="geometric")]
SMALL_SC = [SEED_SC, Selection(1, 1, space="curve", mean="geometric")]


def test_nested_settings_are_chosen_without_the_workloads_own_data():
    profiles, platforms = synthetic()
    res = evaluate_nested(MpetDatabase(profiles, platforms), SMALL_T1, SMALL_SC)
    assert set(res["chosen"]) == set(WORKLOADS)
    assert len(res["cases"]) == len(profiles)
    assert res["summary"]["mpet"]["full"]["count"] == len(profiles)
    # A's choice is what the database without A gives, so A's own numbers cannot move it
    without_a = MpetDatabase({k: v for k, v in profiles.items() if k[0] != "A"}, platforms)
    s1, ss = choose_settings(without_a, SMALL_T1, SMALL_SC)
    assert res["chosen"]["A"] == {"t1": s1.__dict__, "sc": ss.__dict__}
    for n in profiles[("A", "T")]["t"]:
        profiles[("A", "T")]["t"][n] *= 1 + 0.5 * n
    again = evaluate_nested(MpetDatabase(profiles, platforms), SMALL_T1, SMALL_SC)
    assert again["chosen"]["A"] == res["chosen"]["A"]


# ---- CLI -----------------------------------------------------------------------------------

def _write_csv(path, profiles):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["platform", "workload", "variant", "cores", "time_s", "hw_phys_cores"])
        for (work, plat), prof in sorted(profiles.items()):
            for n, t in sorted(prof["t"].items()):
                w.writerow([plat, work, "", n, f"{t:.6g}", 16])


def test_eval_mpet_default_datasets_are_installed_with_the_package():
    """`opptune eval-mpet` without --data reads DEFAULT_DATA beside the installed package
    (site-packages/opptune/data/...): an installed copy, not only a clone, must carry those
    files with their SOURCE.md. Checked on the build configuration (a wheel build compiles the
    kernels: too slow here); `pip install .` and `opptune eval-mpet` from another directory
    were run by hand (2026-11-26)."""
    import fnmatch
    import tomllib
    from pathlib import Path
    from opptune.daemon.mpet_cli import DEFAULT_DATA
    root = Path(__file__).resolve().parents[1]
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "opptune.data" in tool["packages"] and tool["package-dir"]["opptune.data"] == "data"
    globs = tool["package-data"]["opptune.data"]
    for rel in DEFAULT_DATA:
        folder = Path(rel).parent
        for name in ("data.csv", "SOURCE.md"):
            inside = (folder / name).relative_to("data").as_posix()
            assert (root / folder / name).exists()
            assert any(fnmatch.fnmatch(inside, g) for g in globs), (inside, globs)


def test_eval_mpet_bench_suite_sets_are_installed_with_the_package():
    """docs/mpet.md and docs/virtual-board.md give eval-mpet commands over
    data/bench_suite_*: an installed copy carries those sets too (opptune's own measurements,
    each with its SOURCE.md; tests/test_packaging.py runs them from an install)."""
    import fnmatch
    import tomllib
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["opptune.data"]
    sets = sorted((root / "data").glob("bench_suite_*"))
    assert len(sets) >= 4
    for folder in sets:
        assert (folder / "SOURCE.md").exists()
        for f in folder.iterdir():
            inside = f.relative_to(root / "data").as_posix()
            assert any(fnmatch.fnmatch(inside, g) for g in globs), (inside, globs)


def test_eval_mpet_finds_a_shipped_dataset_by_its_folder_from_any_directory(
        tmp_path, monkeypatch, capsys):
    """--data as the docs write it (data/NAME/data.csv), data/NAME or NAME reads the shipped
    set from a directory without data/; a file of that path in the directory, or any absolute
    path, is the user's own and wins; a missing relative path's message names the shipped
    sets."""
    from pathlib import Path
    from opptune.daemon.datasets import DATA_DIR
    monkeypatch.chdir(tmp_path)
    shipped = str(DATA_DIR / "bench_suite_rpi4" / "data.csv")
    for given in ("data/bench_suite_rpi4/data.csv", "data/bench_suite_rpi4", "bench_suite_rpi4"):
        assert main(["eval-mpet", "--data", given, "--scenario", "b", "--json"]) == 0
        r = json.loads(capsys.readouterr().out)["results"][0]
        assert r["data"] == shipped and r["platforms"] == 1 and r["predictions"] > 0
    assert main(["eval-mpet", "--data", "bench_suite_rpi4", "--scenario", "b"]) == 0
    # one platform in words that agree with the number (found by the README walk)
    assert capsys.readouterr().out.startswith(
        f"{shipped}: {r['predictions']} predictions, {r['workloads']} workloads, 1 platform, ")
    profiles, _ = synthetic()
    own = Path("data/bench_suite_rpi4/data.csv")
    own.parent.mkdir(parents=True)
    _write_csv(own, profiles)
    assert main(["eval-mpet", "--data", str(own), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["platforms"] == 4
    absolute = str(tmp_path / "bench_suite_rpi4")
    assert main(["eval-mpet", "--data", absolute]) == 2
    assert capsys.readouterr().err == (f"opptune eval-mpet: cannot read {absolute}: no such "
                                       f"file or directory; give a CSV of measurements\n")
    assert main(["eval-mpet", "--data", "data/no_such_set/data.csv"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "opptune eval-mpet: cannot read data/no_such_set/data.csv: no such file or directory; "
        "give a CSV of measurements; the datasets opptune carries, found by name from any "
        "directory: "), err
    assert "bench_suite_rpi4, " in err[0]


def test_eval_mpet_cli_real_run(tmp_path, capsys):
    profiles, _ = synthetic()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    assert main(["eval-mpet", "--data", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    r = out["results"][0]
    assert r["predictions"] == 20 and r["platforms"] == 4 and r["workloads"] == 5
    assert r["summary"]["mpet"]["t1"]["gmean"] < 0.001
    assert r["breakpoints"]["T"] == {"n_nu": None, "n_ht": None, "nmax": 12}
    assert r["setup"] == "default" and r["interval"]["count"] == 20
    # the synthetic workloads' exact predictions pick what the measured times pick
    op = r["operating_point"]
    assert op["tolerance"] == 0.05 and op["mpet"]["count"] == 20
    assert op["mpet"]["within"] == op["measured"]["within"] == 1.0
    assert set(op) == {"tolerance", "mpet", "naive", "same_curve", "measured"}
    assert main(["eval-mpet", "--data", str(path), "--max-factor", "5"]) == 0
    text = capsys.readouterr().out
    assert "scaling" in text and "naive" in text and "same_curve" in text
    assert "setup default" in text and "interval:" in text
    assert "operating point (the fewest cores within 5 % of the best predicted t(n)): " \
           "measured there within 5 % of the measured best in MPET 100 % (slower by " in text
    assert main(["eval-mpet", "--data", str(path), "--setup", "seed", "--json"]) == 0
    seed = json.loads(capsys.readouterr().out)["results"][0]
    assert seed["setup"] == "seed" and seed["summary"]["mpet"]["t1"]["gmean"] < 0.001
    assert main(["eval-mpet", "--data", str(path), "--setup", "nested", "--json"]) == 0
    nested = json.loads(capsys.readouterr().out)["results"][0]
    assert set(nested["chosen"]) == {"A", "B1", "B2", "B3", "B4"}
    for r in (out["results"][0], seed, nested):
        matches_json_doc(r)
    assert main(["eval-mpet", "--data", str(path), "--scenario", "b", "--json"]) == 0
    scenario_b = json.loads(capsys.readouterr().out)["results"][0]
    matches_json_doc(scenario_b)
    assert scenario_b["operating_point"]["same_curve"]["count"] == 0
    assert main(["eval-mpet", "--data", str(path), "--setup", "nested",
                 "--max-factor", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-factor" in err[0]


def matches_json_doc(r):
    """An eval-mpet --json result has the keys docs/json-output.md gives it, each object of a
    kind the same keys (a summary without errors, scenario b's operating point had fewer)."""
    from json_doc import keys_of, tables
    (doc,) = tables("`opptune eval-mpet --json`")
    assert set(r) == set(doc)
    stats = keys_of(doc["summary"], "gmean")
    assert all(set(r["summary"][m][k]) == stats for m in ("mpet", "naive", "same_curve")
               for k in ("t1", "scaling", "full")), r["summary"]
    assert set(r["seed_table5_gmean"]) == keys_of(doc["seed_table5_gmean"], "t1")
    assert set(r["interval"]) == keys_of(doc["interval"], "covered")
    assert set(r["operating_point"]) == keys_of(doc["operating_point"], "tolerance")
    assert all(set(v) == keys_of(doc["operating_point"], "within")
               for k, v in r["operating_point"].items() if k != "tolerance")
    assert all(set(b) == keys_of(doc["breakpoints"], "nmax") for b in r["breakpoints"].values())
    assert all(set(x) == keys_of(doc["skipped"], "why") for x in r["skipped"])
    for chosen in (r["chosen"] or {}).values():
        assert set(chosen) == keys_of(doc["chosen"], "sc")
        assert set(chosen["t1"]) == set(chosen["sc"]) == keys_of(doc["chosen"], "basis")


@pytest.mark.parametrize("column, value", [("n_nu", "abc"), ("R", "x"), ("counter.ipc", "zz"),
                                           ("l", "n/a")])
def test_eval_mpet_refuses_a_cell_that_is_not_a_number(tmp_path, capsys, column, value):
    """A text in an optional numeric column (breakpoint, runtime parameter, counter) had been
    read as missing without a word: one line naming the file, line and column now, exit 2."""
    rows = [f"p{p},{w},{n},{t * (p + 1) / n:.3f},{1 if n == 1 else 2}"
            for p in (1, 2) for w, t in (("a", 1.0), ("b", 2.0)) for n in (1, 2)]
    rows[1] = rows[1].rsplit(",", 1)[0] + f",{value}"
    path = tmp_path / "m.csv"
    path.write_text(f"platform,workload,cores,time_s,{column}\n" + "\n".join(rows) + "\n")
    assert main(["eval-mpet", "--data", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"opptune eval-mpet: {path} line 3: {column} {value!r} is not a number; "
                   f"give a number or leave the cell empty"]


def test_eval_mpet_table_counts_repeated_skips_once(tmp_path):
    """--single-reference skips a profile once per reference (xplat: 34 skips, the first
    three lines 'minife on akm_desktop/... (no candidate ...)' twice, then another): the table
    lists each skip once with how often it happened."""
    from opptune.daemon.mpet_cli import format_table, run
    profiles, _ = synthetic()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    (res,) = run([str(path)])
    why = "no candidate: 'a' shares no platform with a workload measured on 'T'"
    res["skipped"] = [{"workload": "a", "platform": "T", "why": why}] * 3 + [
        {"workload": "b", "platform": "T", "why": "no t(1)"}]
    last = format_table(res).splitlines()[-1]
    assert last == f"skipped 4: a on T ({why}) x3; b on T (no t(1))"


def test_eval_mpet_interval_line_says_how_many_have_the_candidates_band(tmp_path):
    """The interval line of a set with predictions too few workloads calibrate read
    '...; 4 the candidates' band, of which 4 rest on one candidate': a count and a noun with
    no verb. It says by what, why, and that the band has no level."""
    from opptune.daemon.mpet_cli import format_table, run
    profiles, _ = synthetic()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    (res,) = run([str(path)])
    res["interval"] = {"count": 5, "covered": 4, "single": 2, "calibrated": 1, "level": 0.5,
                       "width": 3.0}
    line, = [x for x in format_table(res).splitlines() if x.startswith("interval:")]
    assert line == ("interval: the measured t(n) inside the predicted interval at every n in 4 "
                    "of 5 predictions (median width x3.0, the largest upper/lower over n); 1 "
                    "calibrated on the target's other workloads (mean nominal level 50 %); 4 by "
                    "the candidates' band (too few other workloads to calibrate on: no stated "
                    "level), 2 of them resting on one candidate (at least [t/2, 2t])")


def _terminal_lines(seen: str) -> list[str]:
    """What a terminal shows of ``seen``: each line as its last carriage return left it."""
    return [line.split("\r")[-1] for line in seen.split("\r\n") if line]


def test_eval_mpet_says_what_it_evaluates_on_a_terminal(tmp_path):
    """On a terminal, eval-mpet says on stderr which file it evaluates before the leave-one-out
    (it had been silent for 10 s on loghin, 85 s with --single-reference, minutes nested,
    until every table at once), then counts the predictions in place on one line (powmon's
    540 took 75 s); piped, stderr stays as it was (empty), stdout JSON only."""
    import subprocess
    import sys
    from procs import run_on_terminal_stderr
    profiles, _ = synthetic()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    cmd = [sys.executable, "-m", "opptune.daemon.cli", "eval-mpet", "--data", str(path)]
    p, seen = run_on_terminal_stderr([*cmd, "--json"])
    assert p.returncode == 0 and json.loads(p.stdout)["results"][0]["predictions"] == 20
    said = (f"opptune eval-mpet: {path}: leave-one-out over 20 profiles of 5 workloads on 4 "
            f"platforms...")
    assert _terminal_lines(seen) == [said, "opptune eval-mpet: predictions 20/20"]
    assert "\ropptune eval-mpet: predictions 0/20" in seen  # from the start, in place
    piped = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == "" and "interval:" in piped.stdout
    # --combine evaluates a temporary merged CSV: the line names the files it came from
    p, seen = run_on_terminal_stderr([*cmd, "--combine", "--json"])
    assert p.returncode == 0 and _terminal_lines(seen) == [
        said, "opptune eval-mpet: predictions 20/20"]
    # nested: the settings chosen per workload first, then the predictions
    p, seen = run_on_terminal_stderr([*cmd, "--setup", "nested", "--json"])
    assert p.returncode == 0 and _terminal_lines(seen) == [
        said, "opptune eval-mpet: workloads' settings chosen 5/5",
        "opptune eval-mpet: predictions 20/20"]


def test_ctrl_c_during_the_count_ends_its_line(tmp_path):
    """Ctrl-C while eval-mpet counts in place: exit 130 and the count's line ended, so the
    shell's prompt does not land after 'predictions 30/540'."""
    import os
    import pty
    import signal
    import subprocess
    import sys
    from procs import wait_until
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "opptune.daemon.cli", "eval-mpet", "--data", "powmon_xu3_a15"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slave, cwd=tmp_path,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    seen = b""
    try:
        def counting():
            nonlocal seen
            seen += os.read(master, 4096)
            return b"\ropptune eval-mpet: predictions " in seen
        wait_until(counting, "eval-mpet's count on the terminal", timeout=120)
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 130
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the other end is closed and read out
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    assert seen.endswith(b"\r\n") and b"Traceback" not in seen, seen[-200:]
    # and says what stopped it (an exit of 130 said nothing)
    assert seen.splitlines()[-1] == b"opptune eval-mpet: stopped by Ctrl-C before it finished"


def test_sigterm_during_eval_mpet_says_so_in_one_line(tmp_path):
    """SIGTERM (timeout(1), a service manager) on eval-mpet: exit 143 and one line saying what
    stopped it; the line's own code raised a NameError (its signal module not imported)."""
    import signal
    import subprocess
    import sys
    from procs import wait_until
    err = tmp_path / "err"
    with open(err, "w") as fh:
        p = subprocess.Popen([sys.executable, "-m", "opptune.daemon.cli", "eval-mpet", "--data",
                              "powmon_xu3_a15"], stdout=subprocess.DEVNULL, stderr=fh,
                             cwd=tmp_path)
    try:
        # its first note is printed once the data is read: the command runs
        wait_until(lambda: "note:" in err.read_text(), "eval-mpet under way", 120)
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = err.read_text()
    assert "Traceback" not in text, text
    assert text.splitlines()[-1] == "opptune eval-mpet: stopped by SIGTERM before it finished"


def test_operating_point_is_judged_on_the_measured_times():
    """Each method's curve picks a core count by the recommender's rule (the fewest within 5 %
    of its best); the measured time there against the measured best says how good a choice
    it was: within the tolerance or not, and the slowdown."""
    from opptune.daemon.models.mpet_eval import operating_points
    from opptune.daemon.objectives import fewest_within
    rows = [{"ns": [1, 2, 4], "measured": [4.0, 2.5, 2.0],
             "curves": {"mpet": [4.0, 2.0, 1.0], "naive": [1.0, 0.5, 0.25],
                        "same_curve": [1.0, 0.5, 0.6]}},
            {"ns": [1, 2, 4], "measured": [4.0, 2.0, 3.0],  # slows down beyond 2 cores
             "curves": {"mpet": [4.0, 2.0, 2.5], "naive": [1.0, 0.5, 0.25],
                        "same_curve": [1.0, 0.5, 0.26]}}]
    op = operating_points(rows, fewest_within, 0.05)
    assert op["mpet"]["within"] == 1.0 and op["mpet"]["max"] == 0.0
    assert op["naive"]["within"] == 0.5 and op["naive"]["max"] == pytest.approx(0.5)
    assert op["same_curve"]["within"] == 0.0  # n = 2 (25 % slow), then n = 4 (50 % slow)
    assert op["same_curve"]["mean"] == pytest.approx((0.25 + 0.5) / 2)
    assert op["measured"] == {"count": 2, "failed": 0, "within": 1.0, "mean": 0.0,
                              "median": 0.0, "p95": 0.0, "max": 0.0}
    # a curve with no positive time (the seed setup's eq. 21 on elements can give one) is a
    # choice not made, not a crash (benchmarks/mpet.py stopped on the bench_suite set)
    rows[0]["curves"]["mpet"] = [-1.0, float("nan"), 0.0]
    op = operating_points(rows, fewest_within, 0.05)
    assert (op["mpet"]["count"], op["mpet"]["failed"], op["mpet"]["within"]) == (2, 1, 0.5)
    assert op["mpet"]["mean"] == 0.0  # the other case's choice


def test_scenario_b_evaluation_predicts_each_profile_from_its_one_core_run():
    """eval-mpet --scenario b: every profile measured at 1 core and more, cut to n = 1 and
    predicted from the other workloads on its platform; its own t(1), so the full error is the
    scaling error (no t(1) error), beside t(1)/n. The counters at n = 1 find the workload of
    the nearest scaling."""
    from opptune.daemon.models.mpet_eval import evaluate_scalability
    profiles, platforms = synthetic(counters=True)
    res = evaluate_scalability(MpetDatabase(profiles, platforms))
    assert len(res["cases"]) == len(profiles) == 20
    s = res["summary"]
    assert s["mpet"]["t1"]["count"] == 0 and s["mpet"]["t1"]["gmean"] is None
    assert s["mpet"]["scaling"]["count"] == s["naive"]["scaling"]["count"] == 20
    for m in ("mpet", "naive"):
        assert s[m]["full"] == s[m]["scaling"]
    assert s["mpet"]["scaling"]["gmean"] < 0.5 * s["naive"]["scaling"]["gmean"]
    case = next(c for c in res["cases"] if (c["workload"], c["platform"]) == ("B3", "T"))
    truth = profiles[("B3", "T")]["t"]
    assert case["ns"] == list(range(1, 13))
    assert case["predicted"][0] == pytest.approx(truth[1], rel=1e-9)
    assert case["naive"]["scaling"] == pytest.approx(
        np.mean([abs(truth[1] / n - truth[n]) / truth[n] for n in range(1, 13)]))
    iv = res["interval"]
    assert iv["calibrated"] == 20 and iv["level"] == pytest.approx(0.8)


def test_eval_mpet_cli_scenario_b(tmp_path, capsys):
    """Text and JSON say the same: scenario b's own setup by its name (not scenario a's
    "default", which --setup refuses with it), and full = scaling (its own t(1)): the text in
    words beside the scaling rows, the JSON in the same figures."""
    profiles, _ = synthetic()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    assert main(["eval-mpet", "--data", str(path), "--scenario", "b", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["results"][0]
    assert r["scenario"] == "b" and r["predictions"] == 20
    assert r["setup"] == "scalability"
    assert r["summary"]["mpet"]["scaling"]["count"] == 20
    for m in ("mpet", "naive"):
        assert r["summary"][m]["full"] == r["summary"][m]["scaling"]
    assert main(["eval-mpet", "--data", str(path), "--scenario", "b"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert "scenario b (from the 1-core runs" in text[0]
    assert "so the full error is the scaling error" in text[0]
    assert "setup scalability (" in text[0] and "setup default" not in text[0]
    assert [ln.split()[:2] for ln in text[2:4]] == [["scaling", "mpet"], ["scaling", "naive"]]
    assert len(text[2].split()) == 8  # no seed figure: Table 5 is of migration only
    assert "calibrated on the platform's other workloads" in text[4]
    for flags, named in ((["--setup", "seed"], "--setup does"),
                         (["--single-reference", "--max-factor", "5"],
                          "--max-factor, --single-reference do")):
        assert main(["eval-mpet", "--data", str(path), "--scenario", "b", *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"opptune eval-mpet: {named} not apply to "
                                                   f"--scenario b"), err


def test_eval_mpet_cli_ratio_setup_is_the_default_without_validated_transfers(tmp_path, capsys):
    profiles, _ = _local_proxy()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    got = {}
    for setup in ("default", "q-ratio", "ratio"):
        assert main(["eval-mpet", "--data", str(path), "--setup", setup, "--json"]) == 0
        r = json.loads(capsys.readouterr().out)["results"][0]
        assert r["setup"] == setup and r["predictions"] == 30
        got[setup] = r["summary"]["mpet"]
    # ratio = q-ratio with t(1) by ratio distances: the same sc, so the same scaling; t(1)
    # from validated transfers is the closer; q-ratio = the default with sc by ratio only
    assert got["q-ratio"]["scaling"] == got["ratio"]["scaling"]
    assert got["default"]["t1"] == got["q-ratio"]["t1"]
    assert got["default"]["t1"]["gmean"] < 0.5 * got["ratio"]["t1"]["gmean"]


def test_eval_mpet_cli_single_reference_predicts_from_each_reference_alone(tmp_path, capsys):
    """--single-reference: one prediction per (workload, target, reference), as 'opptune
    predict --from P' makes them; from one reference nothing can check A's relation to the
    suite elsewhere, so t(1) is further off than from all of A's references at once."""
    profiles, _ = _local_proxy()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    on = {}
    for w, p in profiles:
        on.setdefault(w, set()).add(p)
    expected = sum(len(on[w]) - 1 for w, _ in profiles if len(on[w]) > 1)
    got = {}
    for flag in ([], ["--single-reference"]):
        assert main(["eval-mpet", "--data", str(path), "--json", *flag]) == 0
        got[bool(flag)] = json.loads(capsys.readouterr().out)["results"][0]
    assert got[True]["references"] == "one" and got[False]["references"] == "all"
    assert got[True]["predictions"] == expected > got[False]["predictions"] == 30
    assert got[True]["summary"]["mpet"]["t1"]["gmean"] > \
        2 * got[False]["summary"]["mpet"]["t1"]["gmean"]
    assert main(["eval-mpet", "--data", str(path), "--single-reference"]) == 0
    assert "each from one reference platform at a time" in capsys.readouterr().out
    assert main(["eval-mpet", "--data", str(path), "--single-reference", "--setup",
                 "nested"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--single-reference does not apply to --setup nested" in err[0]


def test_eval_mpet_cli_default_chooses_the_sc_basis_per_prediction(tmp_path, capsys):
    profiles, _ = _q_local_proxy()
    path = tmp_path / "q.csv"
    _write_csv(path, profiles)
    got = {}
    for setup in ("default", "q-ratio"):
        assert main(["eval-mpet", "--data", str(path), "--setup", setup, "--json"]) == 0
        got[setup] = json.loads(capsys.readouterr().out)["results"][0]["summary"]["mpet"]
    assert got["default"]["t1"] == got["q-ratio"]["t1"]
    assert got["default"]["scaling"]["gmean"] < got["q-ratio"]["scaling"]["gmean"]


def test_eval_mpet_cli_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("platform,workload,cores\nP,A,1\n")
    assert main(["eval-mpet", "--data", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "time_s" in err[0] and "Traceback" not in err[0]
    missing = tmp_path / "missing.csv"
    assert main(["eval-mpet", "--data", str(missing)]) == 2
    # the reason once, without the OSError's errno and repeated path
    assert capsys.readouterr().err == (f"opptune eval-mpet: cannot read {missing}: no such "
                                       f"file or directory; give a CSV of measurements\n")
    # each file is checked in the order given (bad.csv's own error is tested below)
    assert main(["eval-mpet", "--combine", "--data", str(missing), "--data", str(bad)]) == 2
    assert capsys.readouterr().err == (f"opptune eval-mpet: cannot read {missing}: no such "
                                       f"file or directory; give a CSV of measurements\n")
    neg = tmp_path / "neg.csv"
    neg.write_text("platform,workload,cores,time_s\nP,A,1,-3\n")
    assert main(["eval-mpet", "--data", str(neg)]) == 2
    assert "line 2" in capsys.readouterr().err


def test_breakpoints_from_the_datasets_hw_columns(tmp_path):
    from opptune.daemon.mpet_cli import load_csv
    path = tmp_path / "hw.csv"
    path.write_text(
        "platform,workload,variant,cores,time_s,hw_cpu,hw_phys_cores,hw_l3_shared_by\n"
        "amd,A,all,1,4,AMD (4 sockets),48,\n"
        "amd,A,all,48,1,AMD (4 sockets),48,\n"
        "x2,A,,24,1,Supermicro,12,6\n"
        "xu3,A,big,4,1,Exynos,8,\n"
        "xu3,A,all-static,8,1,Exynos,8,\n")
    _, plats = load_csv(path)
    dual = tmp_path / "dual.csv"
    dual.write_text("platform,workload,cores,time_s,hw_system,hw_phys_cores,hw_l3_shared_by\n"
                    "srv,A,24,1,Supermicro_X10DRi,12,12\n")
    assert load_csv(dual)[1]["srv"] == {"n_nu": 6, "n_ht": 12, "nmax": 24}
    assert plats["amd"] == {"n_nu": 12, "n_ht": None, "nmax": 48}
    assert plats["x2"] == {"n_nu": 6, "n_ht": 12, "nmax": 24}
    assert plats["xu3:all-static"]["n_nu"] == 4 and plats["xu3:big"]["n_nu"] is None


def test_each_frequency_of_a_platform_is_a_platform_of_its_own(tmp_path, capsys):
    """A DVFS sweep in one CSV: the runs of a workload at 1000 and 1800 MHz are no repeats of
    one profile (their median would be a time at no frequency) but two platforms, which
    eval-mpet transfers between; a platform measured at one frequency keeps its name."""
    from opptune.daemon.mpet_cli import load_csv
    rows = ["platform,workload,variant,cores,freq_mhz,time_s"]
    for f, speed in ((1000, 1.0), (1400, 1.4), (1800, 1.8)):
        for w, t1 in (("A", 10.0), ("B", 20.0), ("C", 30.0)):
            rows += [f"xu3,{w},big,1,{f},{t1 / speed:.4f}",
                     f"xu3,{w},big,2,{f},{t1 / speed / 1.9:.4f}",
                     *(f"xu3,{w},all-static,{n},{f},{t1 / speed / (0.9 * n + 0.1):.4f}"
                       for n in (1, 2, 3, 4))]
    rows += ["pi,A,,1,,12", "pi,B,,1,,24"]
    path = tmp_path / "dvfs.csv"
    path.write_text("\n".join(rows) + "\n")
    profiles, plats = load_csv(path)
    assert set(plats) == {"xu3:big@1000MHz", "xu3:big@1400MHz", "xu3:big@1800MHz", "pi",
                          "xu3:all-static@1000MHz", "xu3:all-static@1400MHz",
                          "xu3:all-static@1800MHz"}
    assert profiles[("A", "xu3:big@1800MHz")]["t"][1] == pytest.approx(10 / 1.8, rel=1e-3)
    assert profiles[("B", "xu3:big@1000MHz")]["t"][2] == pytest.approx(20 / 1.9, rel=1e-3)
    # the heterogeneous variant's breakpoint is its own frequency's big cluster's core count
    assert plats["xu3:all-static@1400MHz"]["n_nu"] == 2
    assert main(["eval-mpet", "--data", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["results"][0]
    assert out["platforms"] == 7 and out["predictions"] > 0
    # transfers between frequencies of a proportional clock are near exact
    assert out["summary"]["mpet"]["t1"]["gmean"] < 0.01


def test_batched_ratio_distances_are_the_scalar_ones_to_the_last_bit():
    """MpetDatabase.ratio / ratio_from (dense tables, batches, padded rows) give exactly
    ratio_distance's floats, weighted or not, per n or not, on a database and on a copy
    with profiles hidden: predictions are compared bit for bit before and after."""
    rng = np.random.default_rng(7)
    plats = {"P1": 8, "P2": 12, "P3": 3, "T": 16}
    profiles = {}
    for w in ("A", "B1", "B2", "B3", "B4"):
        for p, nmax in plats.items():
            if (w, p) in (("B3", "P1"), ("B4", "P2")):
                continue  # platforms list different workloads
            t1 = rng.uniform(1, 5)
            profiles[(w, p)] = {"t": {n: t1 * rng.uniform(0.6, 1.2) / n if n > 1 else t1
                                      for n in range(1, nmax + 1)}}
    platforms = {p: {"nmax": n} for p, n in plats.items()}
    full = MpetDatabase(profiles, platforms)
    for db in (full, full.without(("A", "T")).without(("B1", "P2"))):
        for kind, table, group in (("t1", db.t1_table(), None),
                                   ("q", db.q_table(), lambda k: k[1])):
            by_w, by_p = table
            own = {k: v for k, v in by_w["A"].items()
                   if (k[0] if isinstance(k, tuple) else k) != "T"}
            pen = {"P1": 1.0, "P2": 0.25, "P3": 0.0}
            keep = lambda r: r != "T"  # noqa: E731
            ys = ["B1", "B2", "B3", "B4"]
            plain = [ratio_distance(own, by_w[b], group) for b in ys]
            weighted = [ratio_distance(own, by_w[b], group,
                                       lambda k: pen.get(k[0] if isinstance(k, tuple) else k,
                                                         0.0)) for b in ys]
            assert any(math.isfinite(x) for x in plain + weighted)
            assert _same(db.ratio(kind, "w", "A", ys, keep), plain)
            assert _same(db.ratio(kind, "w", "A", ys, keep, pen), weighted)
            tgt = {k: v for k, v in by_p["T"].items()
                   if (k[0] if isinstance(k, tuple) else k) != "A"}
            want = [ratio_distance({k: v for k, v in by_p[p].items()
                                    if (k[0] if isinstance(k, tuple) else k) != "A"}, tgt, group)
                    for p in ("P1", "P2", "P3")]
            assert _same(db.ratio_from(kind, ["P1", "P2", "P3"], "T", lambda r: r != "A"),
                         want)
    # a platform measured at one core only has no q(n) row: first in the batch, it had set
    # the batch's group count (1) and the others' rows (several n) did not fit
    one = MpetDatabase({**profiles, **{(w, "P0"): {"t": {1: 2.0}} for w in ("A", "B1")}},
                       {**platforms, "P0": {"nmax": 1}})
    got = one.ratio_from("q", ["P0", "P1", "P2"], "T", lambda r: r != "A")
    assert math.isnan(got[0]) and _same(got[1:], one.ratio_from("q", ["P1", "P2"], "T",
                                                                lambda r: r != "A"))


def _same(got, want):
    """Equal floats, NaN where NaN: no tolerance."""
    return len(got) == len(want) and all(
        (math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(got, want))


def test_eval_mpet_names_an_empty_or_header_only_csv_as_such(tmp_path, capsys):
    """A CSV with the right header and no rows is said to have no rows (not to miss the
    columns it has); an empty file is said to be empty."""
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert main(["eval-mpet", "--data", str(empty)]) == 2
    assert capsys.readouterr().err == (f"opptune eval-mpet: {empty}: the file is empty; give a "
                                       f"CSV with columns platform, workload, cores and time_s "
                                       f"(one row per run)\n")
    header = tmp_path / "header.csv"
    header.write_text("platform,workload,cores,time_s\n")
    assert main(["eval-mpet", "--data", str(header)]) == 2
    assert capsys.readouterr().err == (f"opptune eval-mpet: {header}: no rows of measurements "
                                       f"under its header; give a CSV with one row per run\n")


def test_eval_mpet_combine_checks_each_file_with_its_own_line_numbers(tmp_path, capsys):
    """--combine names the file and the line of that file, not of the merged temporary CSV,
    and refuses a file without the needed columns or without rows instead of skipping it."""
    good = tmp_path / "good.csv"
    good.write_text("platform,workload,cores,time_s\nP,A,1,2\nP,A,2,1\nP,B,1,3\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("platform,workload,cores,time_s\nT,A,1,2\nT,B,x,1\n")
    assert main(["eval-mpet", "--combine", "--data", str(good), "--data", str(bad)]) == 2
    need = ("need a platform, a workload, cores from 1 to 8192 (integer) and time_s > 0; fix "
            "or remove the row\n")
    assert capsys.readouterr().err == f"opptune eval-mpet: {bad} line 3: {need}"
    # a typo of a thousand million cores: no numpy overflow warning, the same line (the walk)
    huge = tmp_path / "huge.csv"
    huge.write_text("platform,workload,cores,time_s\nT,A,1,2\nT,A,1e9,1\n")
    assert main(["eval-mpet", "--combine", "--data", str(good), "--data", str(huge)]) == 2
    assert capsys.readouterr().err == f"opptune eval-mpet: {huge} line 3: {need}"
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("platform,workload,cores\nT,A,1\n")
    assert main(["eval-mpet", "--combine", "--data", str(good), "--data", str(nocol)]) == 2
    assert capsys.readouterr().err == (f"opptune eval-mpet: {nocol}: missing time_s; the CSV "
                                       f"needs columns platform, workload, cores and time_s "
                                       f"(one row per run)\n")
    header = tmp_path / "header.csv"
    header.write_text("platform,workload,cores,time_s\n")
    assert main(["eval-mpet", "--combine", "--data", str(good), "--data", str(header)]) == 2
    assert capsys.readouterr().err.startswith(f"opptune eval-mpet: {header}: no rows")


def test_eval_mpet_describes_the_default_sc_rule_with_runtime_parameters(tmp_path, capsys):
    """Since q-chosen takes the seed's sc basis where the runtime parameters are there, the
    default setup's help and the table's setup line say so (they described only the choice
    between ratio distances and validated transfers)."""
    with pytest.raises(SystemExit):
        main(["eval-mpet", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("sc candidates by the seed's distances over sc (eq. 16-19) where the workload's "
            "profiles and the target's suite carry the runtime parameters R..j") in help_text
    profiles, _ = synthetic()
    path = tmp_path / "m.csv"
    _write_csv(path, profiles)
    assert main(["eval-mpet", "--data", str(path)]) == 0
    assert ("sc candidates by the seed's distances (eq. 16-19) where the runtime parameters "
            "are there, else by ratio distances or validated transfers, whichever predicted "
            "the target's other workloads better") in capsys.readouterr().out


def test_eval_mpet_says_a_binary_file_is_not_text(tmp_path, capsys):
    """A binary file is named as not a text CSV, without the codec's jargon."""
    binary = tmp_path / "x.csv"
    binary.write_bytes(b"platform,workload\n\xf0\x28\x8c\x28\x00\x01")
    for argv in (["--data", str(binary)], ["--combine", "--data", str(binary)]):
        assert main(["eval-mpet", *argv]) == 2
        assert capsys.readouterr().err == (f"opptune eval-mpet: cannot read {binary}: not a "
                                           f"text file (it holds bytes such as 0xf0 that are not "
                                           f"UTF-8); give "
                                           f"a CSV of "
                                           f"measurements\n")


def test_opptune_help_names_the_mpet_commands_and_what_predict_reads(capsys):
    """`opptune --help`'s summary said 'fit', 'predict' and 'eval' work on a CSV: predict reads
    a saved fit or, for MPET, a daemon; characterize and eval-mpet were not named."""
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "'fit' and 'eval' work on a CSV of measurements, 'predict --fit' on a saved fit" in text
    assert ("MPET (seed 000): 'characterize' measures a board's whole bench_suite, 'predict "
            "--workload' predicts a workload on a platform it never ran on from a daemon's "
            "measurements, 'eval-mpet' evaluates that by leave-one-out") in text


def test_a_profile_without_t1_has_no_q_and_raises_no_warning():
    """A profile measured at 2 and 3 cores but not at 1 has no q(n) = n t(n)/t(1): its values
    are unknown (NaN), not 0, whose log (-inf) made numpy warn on the user's terminal during
    eval-mpet and weighed its candidates as infinitely wrong."""
    import warnings
    rng = np.random.default_rng(3)
    profiles = {}
    for w in ("A", "B", "C", "D"):
        for p in ("P0", "P1", "P2"):
            t1 = rng.uniform(1, 5)
            profiles[(w, p)] = {"t": {n: t1 * rng.uniform(1.0, 1.6) / n if n > 1 else t1
                                      for n in (1, 2, 3)}}
    profiles[("B", "P0")] = {"t": {2: 4.3, 3: 4.2}}
    db = MpetDatabase(profiles, {p: {"nmax": 3} for p in ("P0", "P1", "P2")})
    assert np.isnan(db.q_values(("B", "P0"), [1, 2, 3])).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = evaluate(db)
    assert res["summary"]["mpet"]["full"]["count"] > 0


def test_interval_width_is_over_the_predictions_that_have_one():
    """A prediction without a positive time (the seed setup's eq. 21 on elements) has no
    interval width: 0/0 had made numpy warn and the median NaN, which eval-mpet --json
    (allow_nan=False) could not print."""
    import warnings
    from opptune.daemon.models.mpet_eval import _interval_summary
    row = {"level": 0.5, "inside": False, "single_candidate": False}
    rows = [{**row, "lower": [0.0, 0.0], "upper": [0.0, 0.0]},
            {**row, "lower": [1.0, 0.5], "upper": [2.0, 1.5], "inside": True}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _interval_summary(rows)
    assert got["width"] == 3.0 and got["count"] == 2 and got["covered"] == 1
    assert _interval_summary(rows[:1])["width"] is None


def _random_database(seed: int) -> MpetDatabase:
    """A small database of the shapes users' data take: platforms of 1-8 cores with or
    without breakpoints, workloads missing on some platforms, profiles without t(1) or with
    one core count only, runtime parameters or counters on some."""
    import random
    rng = random.Random(seed)
    plats = {}
    for j in range(rng.randint(2, 5)):
        nmax = rng.choice([1, 2, 3, 4, 8])
        nu = rng.choice([None, 2, 4]) if nmax > 4 else None
        plats[f"P{j}"] = {"n_nu": nu, "n_ht": rng.choice([None, nmax // 2]) if nmax > 2 else None,
                          "nmax": nmax}
    params = rng.random() < 0.3
    profiles = {}
    for i in range(rng.randint(2, 6)):
        for p, topo in plats.items():
            if rng.random() < 0.25:
                continue
            t1 = rng.uniform(0.1, 10)
            ns = sorted(rng.sample(range(1, topo["nmax"] + 1), rng.randint(1, topo["nmax"])))
            ns = sorted({1, *ns}) if rng.random() < 0.8 else ns
            prof = {"t": {n: t1 / n * rng.uniform(0.8, 3.0) if n > 1 else t1 for n in ns},
                    "params": {}, "counters": {}}
            if params:
                prof["params"] = {n: {"R": rng.uniform(1, 1.5), "l": rng.uniform(0, 0.3),
                                      "w": rng.uniform(0, 0.2), "c": 0.01, "d": 0.0,
                                      "s": 0.0, "j": 0.01} for n in ns}
            if rng.random() < 0.2:
                prof["counters"] = {n: {"ipc": rng.uniform(0.5, 2)} for n in ns}
            profiles[(f"W{i}", p)] = prof
    return MpetDatabase(profiles, plats)


@pytest.mark.parametrize("seed", [3, 13, 17, 25, 33, 50, 75, 89, 101, 150])
def test_random_databases_evaluate_without_errors_or_warnings(seed):
    """What eval-mpet runs (every setup's evaluate, one reference at a time, scenario b) on
    odd but valid data: no exception and no numpy warning on the user's terminal (seeds 3-33
    made log(0) warnings before q without t(1) was NaN)."""
    import warnings
    from opptune.daemon.models.mpet_eval import evaluate_scalability
    db = _random_database(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kw in ({}, {"t1_sel": SEED_T1, "sc_sel": SEED_SC}, {"single_reference": True}):
            res = evaluate(db, **kw)
            assert res["interval"]["count"] == len(res["cases"])
        evaluate_scalability(db)


def test_a_set_whose_times_do_not_change_with_the_cores_gets_one_note(tmp_path, capsys):
    """`eval-mpet --data powmon_xu3_a15` (30 s windows, not completion times) printed errors
    near 0 % as if they meant something; now one note on stderr names the set and why. A set
    that scales gets none, the figures on stdout unchanged."""
    profiles, _ = synthetic()
    scaling, flat = tmp_path / "scaling.csv", tmp_path / "flat.csv"
    _write_csv(scaling, profiles)
    # every time a fixed window of about 30 s, whatever the cores (within 3 %)
    _write_csv(flat, {k: {"t": {n: 30.0 * (1 + 0.01 * (n % 4)) for n in p["t"]}}
                      for k, p in profiles.items()})
    assert main(["eval-mpet", "--data", str(scaling), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["results"][0]["predictions"] > 0 and "note" not in out.err
    assert main(["eval-mpet", "--data", str(flat), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["results"][0]["predictions"] > 0
    notes = [line for line in out.err.splitlines() if "note:" in line]
    assert len(notes) == 1 and notes[0].startswith(f"opptune eval-mpet: note: {flat}: no "
                                                   "workload's time changes with the cores")


def test_a_set_measured_at_one_core_count_only_gets_one_note(tmp_path, capsys):
    """Walking issue 19: 'eval-mpet --data' of a CSV holding 1-core runs only printed
    scaling errors of 0.0 % for every method without a word (each trend is one point); a
    note on stderr now says why they are 0 and what would give figures on scaling."""
    profiles, _ = synthetic()
    one = tmp_path / "one.csv"
    _write_csv(one, {k: {"t": {1: p["t"][1]}} for k, p in profiles.items()})
    assert main(["eval-mpet", "--data", str(one), "--json"]) == 0
    out = capsys.readouterr()
    res = json.loads(out.out)["results"][0]
    assert res["predictions"] > 0 and res["summary"]["mpet"]["scaling"]["max"] == 0
    notes = [line for line in out.err.splitlines() if "note:" in line]
    assert notes == [f"opptune eval-mpet: note: {one}: no workload is measured at more than "
                     f"one core count, so each prediction's trend is one point: its scaling "
                     f"errors are 0 by construction and full is t(1)'s; add runs at more core "
                     f"counts for figures on scaling"]


def test_of_the_shipped_sets_only_powmon_times_do_not_change_with_the_cores():
    from opptune.daemon.datasets import DATA_DIR
    from opptune.daemon.mpet_cli import MpetInputError, flat_note, load_csv
    flat, read = [], 0
    for path in sorted(DATA_DIR.glob("*/data.csv")):
        try:
            profiles, _ = load_csv(path)
        except MpetInputError:  # a layout eval-mpet does not read (poet, relearn)
            continue
        read += 1
        if flat_note(path, profiles):
            flat.append(path.parent.name)
    assert flat == ["powmon_xu3_a15"] and read >= 8


@pytest.mark.parametrize("seed", [3, 17, 50, 101])
def test_what_a_prediction_shares_or_skips_changes_none_of_its_floats(seed):
    """The calibration's predictions skip sc where t(n) comes from q(n) (``sc_vector``), and a
    ``without`` copy takes the log q(n) grid and the log t(1) matrix of the database it was
    cut from, its hidden profile blanked: the same floats as computed afresh."""
    db = _random_database(seed)
    checked = 0
    for w, p in sorted(db.profiles, key=str):
        rest = db.without((w, p))
        fresh = MpetDatabase({k: v for k, v in db.profiles.items() if k != (w, p)},
                             db.platforms)
        for ns in ((2.0,), (2.0, 3.0, 8.0)):
            rows, cols, vals, has = rest.log_q_grid(ns)
            rows2, cols2, vals2, has2 = fresh.log_q_grid(ns)
            assert has.sum() == has2.sum() == len(fresh.sc)
            for a, b in fresh.sc:
                assert has[rows[a], cols[b]]
                assert _same(vals[rows[a], cols[b]], vals2[rows2[a], cols2[b]])
            assert not has[rows[w], cols[p]] and np.isnan(vals[rows[w], cols[p]]).all()
        rows, cols, logs = rest.log_t1()
        rows2, cols2, logs2 = fresh.log_t1()
        for a, d in fresh.t1_table()[0].items():
            assert _same([logs[rows[a], cols[b]] for b in d],
                         [math.log(v) for v in d.values()])
        try:
            full = predict_migration(rest, w, p, interval="none")
        except NoCandidates:
            continue
        short = predict_migration(rest, w, p, interval="none", sc_vector=False)
        assert _same([short.t1, *short.t], [full.t1, *full.t])
        checked += 1
    assert checked


def test_the_mean_distances_are_the_same_in_every_process():
    """Eq. 18-19's means add their terms in one order whatever the process's string hashes
    (PYTHONHASHSEED): in a set's order their last bit, and a tie between two candidates
    decided by it, changed from one run of eval-mpet to the next."""
    code = ("import numpy as np; from opptune.daemon.models.mpet_distance import Distances; "
            "r = np.random.default_rng(7); "
            "d = Distances({(f'w{i}', p): r.random(6) for i in range(40) for p in 'PT'}); "
            "print(repr(d.d_p_mean('P', 'T')), repr(d.d_a_mean('w0', 'w1')))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in range(6)}
    assert len(outs) == 1, outs
