"""Analytic models: worked numbers, parameter recovery, memwall regimes, degenerate data."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from opptune.daemon.models.amdahl import AmdahlModeler
from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.memwall import MemWallModeler, memory_bound, speedup
from opptune.daemon.models.usl import USLModeler

P = np.array([1, 2, 4, 8, 16, 32], float)


def noisy(t, sd=0.005, seed=0):
    return t * np.exp(np.random.default_rng(seed).normal(0, sd, t.size))


def test_amdahl_worked_numbers():
    # f = 0.95 parallel: limit 1 / 0.05 = 20; S(8) = 1 / (0.05 + 0.95/8) = 5.925...
    t = 100 * ((1 - 0.95) + 0.95 / P)
    fit = AmdahlModeler().fit(Observations(cores=P, time_s=t))
    assert fit.params["parallel_fraction"] == pytest.approx(0.95, abs=1e-6)
    assert fit.params["serial_fraction"] == pytest.approx(0.05, abs=1e-6)
    assert fit.params["speedup_limit"] == pytest.approx(20.0, rel=1e-4)
    assert fit.speedup([8])[0] == pytest.approx(1 / (0.05 + 0.95 / 8), rel=1e-6)
    assert fit.predict(Observations.query([64])).value[0] == pytest.approx(100 * (0.05 + 0.95 / 64), rel=1e-5)


def test_amdahl_recovers_with_frequency_axis_and_predicts_unseen_frequency():
    p = np.tile(P, 3)
    f = np.repeat([1000.0, 1400.0, 1800.0], P.size)
    t1 = 10 + 20000 / f
    t = noisy(t1 * (0.1 + 0.9 / p))
    fit = AmdahlModeler().fit(Observations(cores=p, time_s=t, freq_mhz=f))
    assert fit.params["parallel_fraction"] == pytest.approx(0.9, abs=0.01)
    pred = fit.predict(Observations.query([1, 4], [2200, 2200]))
    truth = (10 + 20000 / 2200) * np.array([1.0, 0.1 + 0.9 / 4])
    assert np.allclose(pred.value, truth, rtol=0.03)
    assert np.all(pred.lower < pred.value) and np.all(pred.value < pred.upper)
    assert set(fit.quality) >= {"n", "rmse", "mae", "mape"} and fit.quality["mape"] < 2


def test_usl_recovers_contention_and_coherency():
    a, b = 0.05, 0.002
    t = noisy(50 * (1 + a * (P - 1) + b * P * (P - 1)) / P, sd=0.002)
    fit = USLModeler().fit(Observations(cores=P, time_s=t))
    assert fit.params["contention"] == pytest.approx(a, abs=0.01)
    assert fit.params["coherency"] == pytest.approx(b, abs=5e-4)
    assert fit.params["peak_cores"] == pytest.approx(np.sqrt((1 - a) / b), rel=0.2)


def test_memwall_equation_15_by_hand():
    # f=0.9, k=2, m1=0.1, m2=0.2, p=4, phi=1.5: rho=4, mu1=0.3, mu4=0.15
    num = 0.7 + 4 * 0.3                       # 1.9
    compute = (0.85 + 4 * 0.15) * (0.1 + 0.9 / 4)  # 1.45 * 0.325
    assert speedup(0.9, 2, 0.1, 0.2, 4, 1.5) == pytest.approx(num / max(compute, 0.6))
    # memory branch: rho mu_p dominates when the code is highly parallel and p large
    assert memory_bound(0.99, 9, 0.3, 0.0, 32, 2.0)
    assert not memory_bound(0.9, 0, 0.0, 0.0, 4, 2.0)
    s = speedup(0.99, 9, 0.3, 0.0, 32, 2.0)
    rho = 1 + 9 * 2.0
    assert s == pytest.approx(((0.7) + rho * 0.3) / (rho * 0.3))   # = plateau
    # mu_p is capped at 1 (eq. 16)
    assert speedup(0.5, 1, 0.8, 0.8, 1, 1) == pytest.approx(1.0)


def memwall_data(theta, sd=0.005):
    p = np.tile(np.arange(1, 17, dtype=float), 4)
    f = np.repeat([1200.0, 1600.0, 2000.0, 2400.0], 16)
    t = noisy((5 + 20000 / f) / speedup(*theta, p, f / 1000), sd=sd)
    return Observations(cores=p, time_s=t, freq_mhz=f)


@pytest.mark.parametrize("theta", [(0.97, 0.5, 0.02, 0.05), (0.99, 4.0, 0.05, 0.1)])
def test_memwall_fits_both_regimes_to_noise_level(theta):
    obs = memwall_data(theta)
    fit = MemWallModeler().fit(obs)
    truth_mb = memory_bound(*theta, obs.cores, obs.freq_mhz / 1000)
    fit_mb = memory_bound(*(fit.theta), obs.cores, obs.freq_mhz / 1000)
    assert np.mean(truth_mb == fit_mb) > 0.8       # same branch of the max() almost everywhere
    assert fit.params["log_sigma"] < 0.01          # residuals at the 0.5 % noise level
    q = Observations.query([24, 24], [1400, 2200])  # extrapolation in cores
    true = (5 + 20000 / q.freq_mhz) / speedup(*theta, q.cores, q.freq_mhz / 1000)
    assert np.allclose(fit.predict(q).value, true, rtol=0.05)


def test_memwall_no_frequency_axis_uses_constant_phi():
    p = np.arange(1, 25, dtype=float)
    t = noisy(100 / speedup(0.98, 3.0, 0.02, 0.2, p, 1.0))
    fit = MemWallModeler().fit(Observations(cores=p, time_s=t))
    assert fit.quality["mape"] < 1.0
    assert fit.scale["mode"] == "single"


def test_save_state_round_trip():
    obs = memwall_data((0.97, 0.5, 0.02, 0.05))
    fit = MemWallModeler().fit(obs)
    back = MemWallModeler().from_state(fit.to_state())
    q = Observations.query([3, 12], [1500, 2600])
    assert np.allclose(back.predict(q).value, fit.predict(q).value)


MODELERS = [AmdahlModeler, USLModeler, MemWallModeler]


@pytest.mark.parametrize("cls", MODELERS)
@pytest.mark.parametrize("cores,times", [([4], [1.0]), ([1, 1, 1], [1, 2, 3]),
                                         ([1, 2], [np.nan, np.nan]), ([], [])])
def test_degenerate_data_raise_not_enough_data(cls, cores, times):
    with pytest.raises(NotEnoughData):
        cls().fit(Observations(cores=cores, time_s=times))


finite_pos = st.floats(1e-3, 1e4, allow_nan=False)
cell = st.one_of(finite_pos, st.just(float("nan")), st.just(0.0), st.just(-1.0))


@settings(max_examples=25, deadline=None)
@given(cls=st.sampled_from(MODELERS),
       rows=st.lists(st.tuples(st.integers(1, 64), cell,
                               st.one_of(st.just(float("nan")), st.sampled_from([800.0, 1200.0, 2000.0]))),
                     min_size=0, max_size=12))
def test_fit_only_raises_not_enough_data_and_predicts_finite_positive(cls, rows):
    cores = [r[0] for r in rows]
    obs = Observations(cores=cores, time_s=[r[1] for r in rows], freq_mhz=[r[2] for r in rows])
    try:
        fit = cls().fit(obs)
    except NotEnoughData:
        return
    q = Observations.query([1, 2, 3, 64, 256], [1000, 1200, np.nan, 2500, 600])
    pr = fit.predict(q)
    for arr in (pr.value, pr.lower, pr.upper):
        assert np.all(np.isfinite(arr)) and np.all(arr > 0)
    assert np.all(pr.lower <= pr.value) and np.all(pr.value <= pr.upper)


def test_memwall_analytic_gradient_matches_finite_differences():
    m = MemWallModeler()
    p = np.tile(np.arange(1, 9, dtype=float), 3)
    fr = np.repeat([800.0, 1400.0, 2000.0], 8)
    for theta in m.candidates(np.random.default_rng(1))[::23]:
        g = m.log_rel_time_grad(theta, p, fr)
        base = np.log(m.rel_time(theta[None], p, fr)[0])
        h = 1e-7
        num = np.stack([(np.log(m.rel_time((theta + h * np.eye(4)[i])[None], p, fr)[0]) - base) / h
                        for i in range(4)], axis=1)
        assert np.allclose(g, num, atol=1e-4), theta


def test_threads_beyond_the_physical_cores_use_the_fitted_smt_yield():
    from opptune.daemon.models.smt import effective_cores
    from opptune.daemon.models.memwall import MemWallModeler
    phys = 4.0
    p = np.arange(1, 9, dtype=float)
    peff = effective_cores(p, phys, 0.25)
    assert np.allclose(peff, [1, 2, 3, 4, 4.25, 4.5, 4.75, 5])
    t = 12 * (0.02 + 0.98 / peff)
    hw = {"hw_phys_cores": np.full(p.size, phys)}
    for modeler in (AmdahlModeler(), MemWallModeler()):
        fit = modeler.fit(Observations(cores=p, time_s=t, counters=hw))
        assert fit.params["phys_cores"] == 4 and fit.params["smt_yield"] == 0.25
        assert fit.quality["mape"] < 0.5
        # a query without the descriptor column still knows the physical core count
        q = fit.predict(Observations.query([6.0])).value[0]
        assert q == pytest.approx(12 * (0.02 + 0.98 / 4.5), rel=0.01)
    q = AmdahlModeler().fit(Observations(cores=p, time_s=t, counters=hw)).predict(
        Observations.query([16.0])).value[0]
    assert q == pytest.approx(12 * (0.02 + 0.98 / 7), rel=0.01)
    # nothing measured beyond the physical cores: the prior yield (0.25: 8 threads = 5 cores)
    from opptune.daemon.models.smt import SMT_PRIOR
    fit = AmdahlModeler().fit(Observations(cores=p[:4], time_s=t[:4], counters={
        "hw_phys_cores": np.full(4, phys)}))
    v = fit.predict(Observations.query([5.0, 8.0])).value
    assert fit.params["smt_yield"] == SMT_PRIOR == 0.25
    assert v[1] == pytest.approx(12 * (0.02 + 0.98 / 5), rel=0.01) and v[0] > v[1]
    # without the column nothing changes
    assert "smt_yield" not in AmdahlModeler().fit(Observations(cores=p, time_s=t)).params


def test_extrapolation_is_anchored_at_the_measured_end_points():
    # Amdahl data whose largest core count runs 10 % slow: beyond it the prediction keeps
    # Amdahl's shape from the measured value; inside, nothing moves but the last interval
    p = np.array([1.0, 2, 4, 8, 16])
    t = 10 * (0.1 + 0.9 / p)
    t[-1] *= 1.1
    obs = Observations(cores=p, time_s=t)
    plain = AmdahlModeler().fit(obs)              # off by default (noisy end points)
    fit = AmdahlModeler(anchor=True).fit(obs)
    q = Observations.query([1.0, 2.0, 4.0, 16.0, 32.0])
    vp, va = plain.predict(q).value, fit.predict(q).value
    assert va[3] == pytest.approx(t[-1])                       # the measured end point
    assert va[4] / va[3] == pytest.approx(vp[4] / vp[3])       # the model's shape beyond
    assert np.allclose(va[:3], vp[:3] * np.exp([fit.scale["anchors"][0]["r_lo"], 0, 0]))
    v = fit.predict(Observations.query([8.0, 11.3, 16.0])).value
    assert v[0] < v[1] < v[2] or v[0] > v[1] > v[2] or np.isclose(v[0], v[1])
    assert fit.quality["shape_mape"] > fit.quality["mape"]
    # a frequency not in training is not corrected
    pf = np.tile([1.0, 2, 4], 2)
    ff = np.repeat([1000.0, 1400.0], 3)
    tf = 1.4e4 / ff * (0.1 + 0.9 / pf) * np.array([1, 1, 1.1, 1, 1, 1.1])
    fit = AmdahlModeler(anchor=True).fit(Observations(cores=pf, time_s=tf, freq_mhz=ff))
    plain = AmdahlModeler(anchor=False).fit(Observations(cores=pf, time_s=tf, freq_mhz=ff))
    q = Observations.query([8.0, 8.0], [1800.0, 1400.0])
    assert fit.predict(q).value[0] == pytest.approx(plain.predict(q).value[0])
    assert fit.predict(q).value[1] > plain.predict(q).value[1]


def grid_obs(t_fn, sd, seed):
    p = np.tile(np.arange(1, 9, dtype=float), 3)
    f = np.repeat([1200.0, 1800.0, 2400.0], 8)
    return Observations(cores=p, time_s=noisy(t_fn(p, f), sd=sd, seed=seed), freq_mhz=f)


@pytest.mark.parametrize("seed", range(4))
def test_memwall_keeps_the_nested_amdahl_model_on_noisy_amdahl_data(seed):
    # Amdahl (eq. 5) with 2 % noise: k, m1, m2 do not earn their AICc penalty
    obs = grid_obs(lambda p, f: (5 + 20000 / f) * (0.1 + 0.9 / p), 0.02, seed)
    fit = MemWallModeler().fit(obs)
    assert fit.params["nested"] == 1.0
    assert fit.params["k"] == fit.params["m1"] == fit.params["m2"] == 0.0
    assert fit.params["f"] == pytest.approx(0.9, abs=0.02)
    amdahl = AmdahlModeler().fit(obs)
    q = Observations.query([16, 16], [1500, 2400])
    assert np.allclose(fit.predict(q).value, amdahl.predict(q).value, rtol=0.02)
    assert fit.dof > MemWallModeler(nested=False).fit(obs).dof    # 3 parameters fewer


def test_memwall_nested_result_is_exactly_amdahls_fit_with_its_own_t1_rule():
    # 8 points over 6 frequencies: only the c0 + c1/F variants have an AICc, and the nested
    # one wins on Amdahl data. T1 is off that curve at the top "turbo" setting (20 % faster),
    # which one level per frequency (Amdahl's own rule here) captures: the nested winner is
    # refitted with that rule, so memwall reduces to Amdahl's fit exactly.
    p = np.array([1.0, 2, 4, 8, 1, 2, 4, 8])
    f = np.array([1200.0, 1500, 1800, 2100, 2400, 2900, 2900, 1200])
    t1 = (5 + 20000 / f) * np.where(f == 2900, 0.8, 1.0)
    obs = Observations(cores=p, time_s=noisy(t1 * (0.1 + 0.9 / p), sd=0.01, seed=3),
                       freq_mhz=f)
    fit, amdahl = MemWallModeler().fit(obs), AmdahlModeler().fit(obs)
    assert fit.params["nested"] == 1.0
    q = Observations.query([16, 3, 2], [2900, 2900, 1500])
    assert np.allclose(fit.predict(q).value, amdahl.predict(q).value, rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_memwall_keeps_the_full_model_on_memory_bound_data(seed):
    theta = (0.99, 4.0, 0.05, 0.1)
    obs = grid_obs(lambda p, f: (5 + 20000 / f) / speedup(*theta, p, f / 1000), 0.01, seed)
    fit = MemWallModeler().fit(obs)
    assert fit.params["nested"] == 0.0
    assert fit.params["k"] > 1 and fit.params["m1"] > 0
    assert memory_bound(*fit.theta, 8.0, 2.4)           # the memory wall at 8 cores, 2.4 GHz
    assert fit.params["log_sigma"] < 0.02


def test_memwall_nested_test_needs_an_aicc_else_full_model_as_before():
    # 2 cores x 2 frequencies: n = 4 points leave no AICc even for the nested model (K = 1 +
    # 2 levels + variance): the test does not apply, the full model is fitted as without it
    p = np.array([1.0, 2, 1, 2])
    f = np.array([1000.0, 1000, 1400, 1400])
    t = 1.4e4 / f * np.where(p == 1, 1.0, 0.62)
    obs = Observations(cores=p, time_s=t, freq_mhz=f)
    fit = MemWallModeler().fit(obs)
    assert fit.params["nested"] == 0.0
    assert np.allclose(fit.theta, MemWallModeler(nested=False).fit(obs).theta)
    assert "nested" not in MemWallModeler(nested=False).fit(obs).params
    back = MemWallModeler().from_state(MemWallModeler(nested=False).fit(obs).to_state())
    assert back.family.nested is False


def test_memwall_cached_axes_follow_the_data_and_mem_mhz():
    # eq. 15 caches phi and 1/p per (p, freq) array pair: a modeler reused on other data, or
    # after mem_mhz changes, must give what a fresh modeler gives
    p = np.array([1.0, 2, 4, 8, 16])
    f1, f2 = np.full(5, 1200.0), np.full(5, 2400.0)
    th = np.array([[0.9, 2.0, 0.1, 0.3]])
    m = MemWallModeler()
    a = m.rel_time(th, p, f1)
    b = m.rel_time(th, p, f2)
    assert np.allclose(a, MemWallModeler().rel_time(th, p, f1), rtol=0, atol=0)
    assert np.allclose(b, MemWallModeler().rel_time(th, p, f2), rtol=0, atol=0)
    assert not np.allclose(a, b)
    assert np.allclose(b[0], 1 / speedup(0.9, 2.0, 0.1, 0.3, p, f2 / 1000), rtol=1e-12)
    m.mem_mhz = 2000.0
    assert np.array_equal(m.rel_time(th, p, f2), MemWallModeler(mem_mhz=2000.0).rel_time(th, p, f2))
    lg, grad = m.log_rel_time_lazy(th[0], p, f1)
    want = MemWallModeler(mem_mhz=2000.0).log_rel_time_lazy(th[0], p, f1)
    assert np.array_equal(lg, want[0]) and np.array_equal(grad(), want[1]())
    # the batch shape (K, n, 4) of the gradient filled in place
    assert m.log_rel_time_and_grad(np.vstack([th, th]), p, f1)[1].shape == (2, 5, 4)


def test_memwall_variant_that_cannot_win_stops_early_and_the_choice_is_unchanged(monkeypatch):
    # T1 far off c0 + c1/F (one level per frequency, scattered by +-30 %): the full
    # per-frequency variant is fitted first and the full c0 + c1/F variant, whose cost stays
    # many times what it would need to win, stops after its first polish stage
    import opptune.daemon.models.aicc as aicc
    import opptune.daemon.models.polish as pl
    rng = np.random.default_rng(5)
    freqs = np.array([1200.0, 1400, 1600, 1800, 2000, 2200, 2400, 2600])
    level = dict(zip(freqs, (5 + 20000 / freqs) * rng.uniform(0.7, 1.3, freqs.size)))
    p = np.tile([1.0, 2, 4, 8], freqs.size)
    f = np.repeat(freqs, 4)
    t = np.array([level[x] for x in f]) / speedup(0.99, 4.0, 0.05, 0.1, p, f / 1000)
    obs = Observations(cores=p, time_s=noisy(t, sd=0.01, seed=1), freq_mhz=f)
    seen, iters = [], []
    solve, lsq_box = aicc.solve, pl.least_squares_box

    def spy_solve(family, data, mode, lo, hi, cand, hopeless=np.inf):
        sol = solve(family, data, mode, lo, hi, cand, hopeless=hopeless)
        seen.append((mode, bool(np.any(lo >= hi)), hopeless, sol.cost))
        return sol

    def spy_box(*a, **kw):
        res = lsq_box(*a, **kw)
        iters.append(res.njev)
        return res

    monkeypatch.setattr(aicc, "solve", spy_solve)
    monkeypatch.setattr(pl, "least_squares_box", spy_box)
    fit = MemWallModeler().fit(obs)
    order = [(mode, restricted) for mode, restricted, _, _ in seen]
    assert order == [("hyper", True), ("per_freq", True), ("per_freq", False), ("hyper", False)]
    _, _, hopeless, cost = seen[-1]
    assert cost > hopeless                          # cut short
    assert fit.scale["mode"] == "per_freq" and fit.params["nested"] == 0.0
    pruned_iters = sum(iters)
    monkeypatch.setattr(aicc, "HOPELESS", np.inf)
    seen.clear(), iters.clear()
    full = MemWallModeler().fit(obs)
    assert np.array_equal(full.theta, fit.theta) and full.cost == fit.cost
    assert sum(iters) > pruned_iters


def _edge_thetas(rng, n=400):
    """Random (f, k, m1, m2) plus the edges of eq. 15 / 16: Amdahl (m = 0), k = 0, mu_p
    clipped at 1, f at its bounds, and points on the max()'s switch."""
    th = np.column_stack([rng.uniform(0, 1, n), 10 * rng.uniform(0, 1, n) ** 2,
                          rng.uniform(0, 1, n) ** 2, rng.uniform(0, 1, n)])
    th[:40, 2:] = 0.0
    th[40:60, 1] = 0.0
    th[60:80, 2] = 0.8
    th[80:100, 0] = rng.choice([0.0, 1.0], 20)
    return th


@pytest.mark.parametrize("solver", ["lm", "scipy"])
def test_memwall_compiled_equation_15_gives_the_numpy_doubles(solver):
    # the fit's inner loop runs compiled (_memwall_eq15); the numpy code is the reference and
    # the fallback, and the two must agree to the last bit, kinks and clipped mu_p included
    # (log g within 1e-14: numpy's AVX-512 log may differ from the C library's by an ulp)
    fast, ref = MemWallModeler(solver=solver), MemWallModeler(solver=solver, native=False)
    assert fast.native and not ref.native
    th = _edge_thetas(np.random.default_rng(3))
    p = np.array([1.0, 2, 3, 4, 6, 8, 12, 16, 24, 32, 1.25, 5.5])
    for freq in (np.tile([1200.0, 2000.0, 2600.0, 900.0], 3), None):
        assert np.array_equal(fast.rel_time(th, p, freq), ref.rel_time(th, p, freq))
        for theta in (th, th[7]):
            lg, grad = fast.log_rel_time_lazy(theta, p, freq)
            lg0, grad0 = ref.log_rel_time_lazy(theta, p, freq)
            assert lg.shape == lg0.shape
            np.testing.assert_allclose(lg, lg0, rtol=0, atol=1e-14)
            assert np.array_equal(grad(), grad0())
    # the blended band of the max() is exercised: some points within KINK_BLEND of the switch
    phi = np.full(p.size, 1.2)
    c = (1 + th[:, 1:2] * phi) * np.minimum(th[:, 2:3] + th[:, 3:4] / p, 1)
    ab = (1 + th[:, 1:2] * phi * np.minimum(th[:, 2:3] + th[:, 3:4] / p, 1)) * (
        1 - th[:, :1] + th[:, :1] / p)
    assert np.any(np.abs(c - ab) < 1e-3 * (c + ab))


def test_memwall_fit_is_the_same_with_and_without_the_compiled_equation():
    obs = memwall_data((0.97, 3.0, 0.1, 0.4))
    fast, ref = MemWallModeler().fit(obs), MemWallModeler(native=False).fit(obs)
    assert np.allclose(fast.theta, ref.theta, rtol=1e-9, atol=1e-12)
    assert fast.cost == pytest.approx(ref.cost, rel=1e-9)


def test_memwall_compiled_equation_rejects_wrong_buffers_with_a_reason():
    from opptune.daemon.models import memwall
    ext = memwall._native
    p = np.array([1.0, 2.0, 4.0])
    th = np.array([[0.9, 1.0, 0.1, 0.2]])
    with pytest.raises(TypeError, match="theta: expected a C-contiguous float64"):
        ext.rel_time(th.astype(np.float32), p, p, np.empty((1, 3)))
    with pytest.raises(ValueError, match="out: 2 values do not fit"):
        ext.rel_time(th, p, p, np.empty(2))
    with pytest.raises(ValueError, match="theta: 3 values do not fit"):
        ext.rel_time(np.ones(3), p, p, np.empty(3))
    with pytest.raises(ValueError, match="grad: 4 values do not fit"):
        ext.log_rel_time(th, p, p, p, np.empty(3), np.empty(4), 1e-3)
    with pytest.raises(TypeError, match="invp1: expected a C-contiguous float64"):
        ext.log_rel_time(th, p, None, p, np.empty(3), None, 1e-3)
    with pytest.raises(ValueError, match="out and grad: at least one"):
        ext.log_rel_time(th, p, p, p, None, None, 1e-3)
    with pytest.raises(ValueError, match="not C-contiguous"):
        ext.rel_time(th, p, p, np.empty((1, 6))[:, ::2])


def test_memwall_without_the_compiled_extension_fits_with_numpy(monkeypatch):
    # a source tree where the extension was not built: the numpy reference runs, same fit
    from opptune.daemon.models import memwall
    obs = memwall_data((0.95, 1.0, 0.05, 0.2))
    want = MemWallModeler().fit(obs)
    monkeypatch.setattr(memwall, "_native", None)
    m = MemWallModeler()
    assert m.native is False
    got = m.fit(obs)
    assert np.allclose(got.theta, want.theta, rtol=1e-9, atol=1e-12)
    assert got.cost == pytest.approx(want.cost, rel=1e-9)
