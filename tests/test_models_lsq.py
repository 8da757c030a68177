"""lsq.py: bounded Levenberg-Marquardt on small problems, against known solutions and scipy."""

import numpy as np
import pytest
from scipy import optimize

from opptune.daemon.models.lsq import compass_search, least_squares_box, least_squares_box_many


def rosenbrock(x):
    return np.array([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]])


def rosenbrock_jac(x):
    return np.array([[-20.0 * x[0], 10.0], [-1.0, 0.0]])


def test_unconstrained_rosenbrock_reaches_the_exact_minimum():
    res = least_squares_box(rosenbrock, rosenbrock_jac, np.array([-1.2, 1.0]),
                            np.full(2, -np.inf), np.full(2, np.inf), max_iter=200)
    assert np.allclose(res.x, [1.0, 1.0], atol=1e-6)
    assert res.cost < 1e-12
    assert res.status in ("ftol", "xtol", "gtol", "exact")


def test_bound_is_active_at_the_solution_with_the_gradient_pointing_out():
    # the unconstrained minimum (1, 1) is outside x0 <= 0.5: the solution sits on the bound,
    # where x1 = x0^2 = 0.25 zeroes the first residual
    lo, hi = np.array([-2.0, -2.0]), np.array([0.5, 2.0])
    res = least_squares_box(rosenbrock, rosenbrock_jac, np.array([-1.2, 1.0]), lo, hi,
                            max_iter=200)
    assert res.x[0] == pytest.approx(0.5, abs=1e-12)
    assert res.x[1] == pytest.approx(0.25, abs=1e-6)
    assert res.cost == pytest.approx(0.25, rel=1e-6)
    g = rosenbrock_jac(res.x).T @ rosenbrock(res.x)
    assert g[0] < 0                     # descent would leave the box: the bound holds it


def test_fixed_parameter_lo_equals_hi_never_moves():
    lo, hi = np.array([0.3, -5.0]), np.array([0.3, 5.0])
    res = least_squares_box(rosenbrock, rosenbrock_jac, np.array([0.0, 0.0]), lo, hi)
    assert res.x[0] == 0.3
    assert res.x[1] == pytest.approx(0.09, abs=1e-8)


def test_exponential_fit_matches_scipy_least_squares():
    rng = np.random.default_rng(3)
    t = np.linspace(0, 4, 25)
    y = 2.5 * np.exp(-1.3 * t) + 0.4 + rng.normal(0, 0.01, t.size)

    def fun(x):
        return x[0] * np.exp(-x[1] * t) + x[2] - y

    def jac(x):
        e = np.exp(-x[1] * t)
        return np.column_stack([e, -x[0] * t * e, np.ones_like(t)])

    lo, hi = np.zeros(3), np.array([10.0, 10.0, 10.0])
    ours = least_squares_box(fun, jac, np.array([1.0, 0.5, 0.0]), lo, hi)
    ref = optimize.least_squares(fun, np.array([1.0, 0.5, 0.0]), jac=jac, bounds=(lo, hi),
                                 xtol=1e-12, ftol=1e-12, gtol=1e-12)
    assert ours.cost <= float(ref.fun @ ref.fun) * (1 + 1e-9)
    assert np.allclose(ours.x, ref.x, rtol=1e-5)


def test_result_is_never_worse_than_the_start_and_nonfinite_trials_are_rejected():
    # residuals are NaN for x < 0: the solver must stay in the finite region
    def fun(x):
        with np.errstate(invalid="ignore"):
            return np.array([np.sqrt(x[0]) - 0.1, x[0] - 2.0])

    def jac(x):
        with np.errstate(divide="ignore"):
            return np.array([[0.5 / np.sqrt(x[0])], [1.0]])

    x0 = np.array([1.0])
    start = float(fun(x0) @ fun(x0))
    res = least_squares_box(fun, jac, x0, np.array([-10.0]), np.array([10.0]))
    assert np.isfinite(res.cost) and res.cost <= start
    assert res.x[0] >= 0


def test_budget_stops_with_max_iter_and_a_continuation_goes_on():
    res = least_squares_box(rosenbrock, rosenbrock_jac, np.array([-1.2, 1.0]),
                            np.full(2, -5.0), np.full(2, 5.0), max_iter=3)
    assert res.status == "max_iter" and res.njev == 3
    more = least_squares_box(rosenbrock, rosenbrock_jac, res.x, np.full(2, -5.0),
                             np.full(2, 5.0), max_iter=200, lam0=res.lam)
    assert more.cost < res.cost and more.cost < 1e-12


def test_batched_steps_follow_the_single_run_path():
    # K starts at once: after n trial steps each start is where a single run from it is after
    # its first n trial steps (same active set, step, acceptance and damping rules)
    starts = np.array([[-1.2, 1.0], [0.0, 0.0], [2.0, -1.0]])

    def fun_many(x):
        return np.stack([10.0 * (x[:, 1] - x[:, 0] ** 2), 1.0 - x[:, 0]], axis=1)

    def jac_many(x):
        z = np.zeros(len(x))
        return np.stack([np.stack([-20.0 * x[:, 0], 10.0 + z], axis=1),
                         np.stack([-1.0 + z, z], axis=1)], axis=1)

    lo, hi = np.array([-5.0, -5.0]), np.array([0.9, 5.0])     # the bound on x0 is active
    for x0 in starts:
        seen = []                                   # every point a single run evaluates

        def fun(x):
            seen.append(x.copy())
            return rosenbrock(x)

        least_squares_box(fun, rosenbrock_jac, x0, lo, hi, max_iter=200)
        path, best = [], np.inf                     # current point after each trial
        for x in seen:
            c = float(rosenbrock(x) @ rosenbrock(x))
            if c < best:
                cur, best = x, c
            path.append(cur)
        assert len(path) > 5
        for n in sorted({1, 2, 5, len(path) - 1}):
            xb, cb, _ = least_squares_box_many(fun_many, jac_many, x0[None, :], lo, hi, trials=n)
            assert np.allclose(xb[0], path[n], rtol=1e-8, atol=1e-10), (x0, n)
            assert cb[0] == pytest.approx(float(rosenbrock(path[n]) @ rosenbrock(path[n])))
    xs, cost, _ = least_squares_box_many(fun_many, jac_many, starts, lo, hi, trials=60)
    assert np.allclose(xs, [0.9, 0.81], atol=1e-6)       # all three reach the bound's optimum


def test_compass_search_steps_off_a_kink():
    # f(x) = |x0 - 0.3| + |x1 + 0.2| as squared residuals sqrt(|.|): a gradient method sees
    # kinks at the minimum; the compass search walks there along the coordinates
    def fun_many(x):
        return np.sqrt(np.abs(x - np.array([0.3, -0.2])))

    x, c = compass_search(fun_many, np.array([0.0, 0.0]), 0.5, np.full(2, -1.0),
                          np.full(2, 1.0), max_moves=200)
    assert c < 1e-3
    assert np.allclose(x, [0.3, -0.2], atol=1e-3)


def test_polish_stops_new_rounds_once_the_budget_of_all_starts_is_used(monkeypatch):
    # polish_lm: successive halving rounds stop once all starts together used
    # LM_SOLVE_BUDGET iterations; each start still gets its first stage, and the result is
    # never worse than the best start
    from opptune.daemon.models import polish as pl

    calls = [0]

    def jac_counted(x):
        calls[0] += 1
        return rosenbrock_jac(x)

    starts = [np.array([-1.2, 1.0]), np.array([-1.5, 2.0]), np.array([2.0, -1.0])]
    lo, hi = np.full(2, -5.0), np.full(2, 5.0)

    def polish():
        calls[0] = 0
        out = pl.polish_lm(rosenbrock, jac_counted, starts, lo, hi, 0.0)
        return min(c for _, c in out), calls[0]

    free_cost, free_calls = polish()
    monkeypatch.setattr(pl, "LM_SOLVE_BUDGET", 0)
    capped_cost, capped_calls = polish()
    assert capped_calls <= len(starts) * pl.LM_STAGE < free_calls
    assert capped_cost <= min(float(np.sum(rosenbrock(s) ** 2)) for s in starts)
    assert free_cost <= capped_cost
