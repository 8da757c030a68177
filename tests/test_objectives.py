"""Goals: objectives, constraints, parsing of the user's limits, and the choice rules."""

import numpy as np
import pytest

from opptune.daemon.objectives import (Goal, choose, feasible, format_seconds, make_goal,
                                       objective_values, parse_duration, parse_power)
from opptune.daemon.sampling import Grid, Measured, Sampler, space_filling


def test_objective_values_are_time_energy_edp_ed2p():
    t, p = np.array([2.0, 1.0]), np.array([1.0, 3.0])
    assert objective_values(Goal("time"), t, p).tolist() == [2.0, 1.0]
    assert objective_values(Goal("energy"), t, p).tolist() == [2.0, 3.0]
    assert objective_values(Goal("edp"), t, p).tolist() == [4.0, 3.0]
    assert objective_values(Goal("ed2p"), t, p).tolist() == [8.0, 3.0]


@pytest.mark.parametrize("text,seconds", [("2.5s", 2.5), ("300ms", 0.3), ("2", 2.0),
                                          ("1.5min", 90.0), (" 40 us", 4e-5)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,watts", [("4W", 4.0), ("500mW", 0.5), ("3.5", 3.5)])
def test_parse_power(text, watts):
    assert parse_power(text) == pytest.approx(watts)


@pytest.mark.parametrize("call,words", [
    (lambda: parse_duration("soon"), "2.5s"), (lambda: parse_power("4 horses"), "500mW"),
    (lambda: parse_duration("0s"), "positive"), (lambda: make_goal("speed"), "energy, edp"),
])
def test_bad_input_names_the_fix(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_energy_under_deadline_and_time_under_power_cap():
    # (cores, time, power): fast and hungry ... slow and frugal
    cores = np.array([4, 2, 1])
    t, p = np.array([1.0, 2.0, 4.0]), np.array([8.0, 3.0, 1.0])
    assert choose(Goal("energy"), t, p, cores).index == 2
    assert choose(Goal("energy", deadline_s=2.5), t, p, cores).index == 1
    assert choose(Goal("time"), t, p, cores).index == 0
    c = choose(Goal("time", power_cap_w=4.0), t, p, cores)
    assert (c.index, c.runner_up, c.met) == (1, 2, True)
    assert c.margin == pytest.approx(1.0)
    assert feasible(Goal("time", power_cap_w=4.0), t, p).tolist() == [False, True, True]


def test_nothing_feasible_gives_the_closest_and_says_so():
    t, p = np.array([1.0, 2.0]), np.array([8.0, 3.0])
    c = choose(Goal("energy", deadline_s=0.5), t, p, [2, 1])
    assert (c.index, c.met) == (0, False)
    assert "takes 1 s (deadline 500 ms)" in c.note
    c = choose(Goal("time", power_cap_w=1.0), t, p, [2, 1])
    assert (c.index, c.met) == (1, False) and "cap 1 W" in c.note


def test_limits_print_in_units_they_are_given_in_and_only_the_broken_one():
    t, p = np.array([1.0, 2.0]), np.array([8.0, 3.0])
    c = choose(Goal("time", deadline_s=1e-6), t, p, [2, 1])
    assert "(deadline 1 us)" in c.note and "e-06" not in c.note
    # the closest to the cap meets the deadline: only the cap is named
    c = choose(Goal("time", deadline_s=5.0, power_cap_w=0.01), t, p, [2, 1])
    assert c.note.endswith("draws 3 W (cap 10 mW)") and "deadline" not in c.note
    g = make_goal("energy", "40us", "500mW")
    assert g.describe() == "minimum energy under a 40 us deadline and a 500 mW power cap"
    assert parse_duration(format_seconds(g.deadline_s).replace(" ", "")) == pytest.approx(4e-5)


def test_tolerance_prefers_fewer_cores_then_lower_frequency():
    cores, freq = np.array([4, 2, 2]), np.array([1000, 1400, 1000])
    t = np.array([1.00, 1.03, 1.04])
    assert choose(Goal("time"), t, None, cores, freq).index == 0
    assert choose(Goal("time"), t, None, cores, freq, tolerance=0.05).index == 2


def test_space_filling_starts_at_the_corners_and_spreads():
    cc, ff = np.meshgrid(np.arange(1, 5), np.arange(200, 1900, 200))
    g = Grid(cc.ravel(), ff.ravel())
    first = space_filling(g, 6)
    corners = {(g.cores[i], g.freq_mhz[i]) for i in first[:4]}
    assert corners == {(1, 200), (4, 1800), (4, 200), (1, 1800)}
    assert len(set(first)) == 6


def test_sampler_finds_the_energy_optimum_of_a_physical_board_in_few_runs():
    cc, ff = np.meshgrid(np.arange(1, 5), np.arange(200, 1900, 200))
    g = Grid(cc.ravel(), ff.ravel())

    def truth(c, f):
        return 10 * (0.1 + 0.9 / c) * (1000 / f) ** 0.9, 0.3 + c * 0.25 * (f / 1000) ** 2.4

    s, m = Sampler(make_goal("energy"), budget=8), Measured()
    while (prop := s.propose(g, m)).index is not None:
        m.add(prop.index, *truth(g.cores[prop.index], g.freq_mhz[prop.index]))
    assert len(m) <= 8
    t, p = truth(g.cores, g.freq_mhz)
    best = (t * p).min()
    chosen = s.estimate(g, m).choice.index
    assert (t * p)[chosen] <= best * 1.03
