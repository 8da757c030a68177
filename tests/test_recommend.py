"""recommend.py: the fewest cores within the tolerance of the best predicted time."""

import numpy as np
import pytest

from opptune.daemon.models.base import FittedModel, Observations, Prediction
from opptune.daemon.planner import plan_sweep
from opptune.daemon.objectives import fewest_within
from opptune.daemon.recommend import fit_setting, recommend
from opptune.shared.config import SweepDefaults


class Curve(FittedModel):
    """A hand-made time curve over cores (and optionally frequency in MHz)."""
    name = "curve"

    def __init__(self, fn):
        self.fn, self.params, self.quality = fn, {}, {}

    def predict(self, q: Observations) -> Prediction:
        v = self.fn(q.cores, q.freq_mhz)
        return Prediction(v, v * 0.9, v * 1.1)


TIMES = {1: 10.0, 2: 5.2, 3: 3.7, 4: 3.0, 5: 2.9, 6: 2.86, 7: 2.85, 8: 2.9}


def test_fewest_cores_within_tolerance():
    m = Curve(lambda c, f: np.array([TIMES[int(x)] for x in c]))
    plat = {"sweep_order": [0, 4, 1, 5, 2, 6, 3, 7]}
    r = recommend(m, plat, tolerance=0.05)
    # best is 7 cores at 2.85 s; 2.85 * 1.05 = 2.9925 -> 5 cores (2.9) is the fewest within.
    assert (r.best_cores, r.best_time_s) == (7, 2.85)
    assert r.cores == 5 and r.threads == 5 and r.cpus == [0, 4, 1, 5, 2]
    assert r.predicted_time_s == 2.9 and r.lower_s < 2.9 < r.upper_s and r.freq_khz is None
    assert recommend(m, plat, tolerance=0.0).cores == 7
    assert recommend(m, plat, tolerance=0.25).cores == 4  # 3.0 <= 3.5625 < 3.7
    assert recommend(m, plat, tolerance=0.05, max_cores=4).cores == 4


def test_cores_and_frequency_grid():
    # time = work / (cores * f): faster with both; prefer fewer cores, then lower frequency.
    m = Curve(lambda c, f: 100.0 / (np.minimum(c, 3) * f / 1000.0))
    r = recommend(m, {"cpus_online": [0, 1, 2, 3]}, tolerance=0.05,
                  frequencies_khz=[1_000_000, 2_000_000])
    assert (r.cores, r.freq_khz) == (3, 2_000_000)
    assert r.best_time_s == pytest.approx(100 / 6)


def test_fewest_within_ignores_non_finite():
    assert fewest_within([1, 2, 3], [np.nan, 2.0, 1.95], 0.05) == 1
    with pytest.raises(ValueError):
        fewest_within([1, 2], [np.nan, np.inf], 0.05)


def test_plan_sweep_order_and_grid():
    d = SweepDefaults(reps=2, warmup=1, max_cores=3)
    job = plan_sweep({"sweep_order": [0, 2, 1, 3], "cpus_online": [0, 1, 2, 3]}, "w", d)
    assert [p["cpus"] for p in job["points"]] == [[0], [0, 2], [0, 2, 1]]
    assert all(p["threads"] == len(p["cpus"]) and p["freq_khz"] is None for p in job["points"])
    assert (job["reps"], job["warmup"], job["size"]) == (2, 1, "default")
    g = plan_sweep({"cpus_online": [0, 1]}, "w", SweepDefaults(frequencies=[500, 900]))
    assert [(len(p["cpus"]), p["freq_khz"]) for p in g["points"]] == \
        [(1, 500), (1, 900), (2, 500), (2, 900)]
    assert g["job_id"] != plan_sweep({"cpus_online": [0, 1]}, "w", SweepDefaults())["job_id"]


BIG_LITTLE = {
    "sweep_order": [0, 1, 4, 5], "cpus_online": [0, 1, 4, 5], "clusters": [[0, 1], [4, 5]],
    "policies": [{"name": "policy0", "related_cpus": [0, 1]},
                 {"name": "policy4", "related_cpus": [4, 5]}],
    "cpufreq": {"available": True, "frequencies_khz": {
        "policy0": [200, 400, 600, 800, 1000], "policy4": [200, 400, 600, 800, 1000, 1400,
                                                           2000]}},
}


def _grid(job):
    return [(p.get("variant", ""), tuple(p["cpus"]), p["freq_khz"]) for p in job["points"]]


def test_frequency_grid_all_and_spread_use_offered_tables():
    one = {**BIG_LITTLE, "sweep_order": [0, 1], "cpus_online": [0, 1], "clusters": [[0, 1]]}
    job = plan_sweep(one, "w", SweepDefaults(frequency_grid="all"))
    assert _grid(job) == [("", c, f) for c in ((0,), (0, 1)) for f in (200, 400, 600, 800, 1000)]
    job = plan_sweep(one, "w", SweepDefaults(frequency_grid="3"))
    assert [p["freq_khz"] for p in job["points"]] == [200, 600, 1000] * 2
    assert [p["freq_khz"] for p in plan_sweep(one, "w", SweepDefaults(frequency_grid="1"))
            ["points"]] == [1000, 1000]
    # the whole board: only what both domains offer, for every core count alike
    job = plan_sweep(BIG_LITTLE, "w", SweepDefaults(frequency_grid="all"))
    assert {p["freq_khz"] for p in job["points"]} == {200, 400, 600, 800, 1000}
    assert len(job["points"]) == 4 * 5
    # "none" leaves the frequency alone even when a list is configured
    job = plan_sweep(one, "w", SweepDefaults(frequency_grid="none", frequencies=[200]))
    assert all(p["freq_khz"] is None for p in job["points"])


def test_frequency_list_keeps_only_offered_and_per_cluster_uses_each_table():
    d = SweepDefaults(frequencies=[400, 2000, 999], per_cluster=True)
    job = plan_sweep(BIG_LITTLE, "w", d)
    assert _grid(job) == [("cluster0", (0,), 400), ("cluster0", (0, 1), 400),
                          ("cluster1", (4,), 400), ("cluster1", (4,), 2000),
                          ("cluster1", (4, 5), 400), ("cluster1", (4, 5), 2000)]
    job = plan_sweep(BIG_LITTLE, "w", SweepDefaults(frequency_grid="2", per_cluster=True,
                                                    max_cores=1))
    assert _grid(job) == [("cluster0", (0,), 200), ("cluster0", (0,), 1000),
                          ("cluster1", (4,), 200), ("cluster1", (4,), 2000)]
    # explicit arguments (the sweep query) win over the defaults
    job = plan_sweep(BIG_LITTLE, "w", SweepDefaults(per_cluster=True), frequency_grid="1",
                     per_cluster=False, max_cores=2)
    assert _grid(job) == [("", (0,), 1000), ("", (0, 1), 1000)]


def test_frequency_grid_errors_name_the_problem():
    from opptune.daemon.planner import PlanError
    from opptune.shared.config import ConfigError
    no_cpufreq = {"cpus_online": [0, 1], "cpufreq": {"available": False,
                                                     "reason": "no cpufreq policies"}}
    with pytest.raises(PlanError, match="no cpufreq policies"):
        plan_sweep(no_cpufreq, "w", SweepDefaults(frequency_grid="all"))
    with pytest.raises(PlanError, match="offered"):
        plan_sweep(BIG_LITTLE, "w", SweepDefaults(frequencies=[123]))
    assert plan_sweep(no_cpufreq, "w", SweepDefaults())["points"][0]["freq_khz"] is None
    with pytest.raises(ConfigError, match="frequency_grid"):
        SweepDefaults(frequency_grid="sometimes")
    with pytest.raises(ConfigError, match="frequency_grid"):
        plan_sweep(BIG_LITTLE, "w", SweepDefaults(), frequency_grid="0")


def test_config_file_rejects_bad_grid_naming_the_key(tmp_path):
    from opptune.shared.config import ConfigError, load_daemon_config
    p = tmp_path / "d.toml"
    p.write_text('[sweep]\nfrequency_grid = "many"\n')
    with pytest.raises(ConfigError, match="sweep.frequency_grid"):
        load_daemon_config(p)
    p.write_text('[sweep]\nfrequency_grid = "4"\nper_cluster = true\n')
    c = load_daemon_config(p)
    assert (c.sweep.frequency_grid, c.sweep.per_cluster) == ("4", True)


def test_recommendation_uses_offered_frequencies_of_the_recommended_cpus():
    # measured at 200 and 1000 only; the big cluster's table goes to 2000 and the model says
    # faster is better: the recommendation picks a frequency the big cpus offer
    from opptune.daemon.recommend import target_observations
    m = Curve(lambda c, f: 100.0 / (np.minimum(c, 2) * f))
    r = recommend(m, BIG_LITTLE, tolerance=0.0, frequencies_khz=[200, 1000], order=[4, 5])
    assert (r.cores, r.cpus, r.freq_khz) == (2, [4, 5], 2000)
    r = recommend(m, BIG_LITTLE, tolerance=0.0, frequencies_khz=[200, 1000], order=[0, 1])
    assert r.freq_khz == 1000
    q = target_observations(BIG_LITTLE, [200, 1000], order=[4, 5])
    assert sorted(set(q.freq_mhz * 1000)) == [200, 400, 600, 800, 1000, 1400, 2000]
    assert sorted(set(q.cores)) == [1, 2]


def test_fit_setting_leaves_runs_of_unknown_frequency_out_of_a_frequency_fit():
    plat = {"sweep_order": [0, 1, 2, 3], "clusters": [[0, 1], [2, 3]],
            "smt_siblings": [[0, 2], [1, 3]]}
    rows = [(1, 1000.0, 4.0), (2, 1000.0, 2.1), (1, 2000.0, 2.0), (2, None, 1.5),
            (4, float("nan"), 1.2)]
    s = fit_setting(plat, "", rows)
    assert s.rows == rows[:3]  # the two runs at an unknown frequency are out
    assert s.freqs_khz == [1000000, 2000000] and s.axis == [1000000, 2000000]
    assert s.order == [0, 1, 2, 3] and s.phys_cores == 2
    one = fit_setting(plat, "cluster1", [(1, 1500.0, 3.0), (2, None, 1.6)])
    assert one.order == [2, 3] and one.freqs_khz == [1500000] and one.axis is None
    assert one.rows == [(1, 1500.0, 3.0)]
    none = fit_setting({}, "", [(1, None, 3.0), (3, None, 1.1)])
    assert none.rows == [(1, None, 3.0), (3, None, 1.1)] and none.axis is None
    assert none.order == [0, 1, 2] and none.phys_cores is None


def test_report_and_daemon_fit_the_same_runs_of_a_mixed_group():
    """The daemon's fit request and the report's refit rest on one fit_setting: a group whose
    runs mix pinned frequencies with runs at an unknown one keeps its frequency axis in both
    (the daemon used to drop the axis and fit every run on cores alone)."""
    from opptune.daemon.report.analysis import analyse_group

    plat = {"sweep_order": [0, 1, 2, 3]}
    pinned = [(c, f, 8.0 / c * 1000.0 / f + 0.5) for c in (1, 2, 3, 4) for f in (1000.0, 2000.0)]
    rows = pinned + [(c, None, 9.9) for c in (1, 2)]  # at an unknown frequency
    req = _daemon_request(plat, rows)
    assert req.rows == pinned
    assert sorted(set(req.target.freq_mhz)) == [1000.0, 2000.0]
    view = analyse_group({"group": {"workload": "w", "variant": ""},
                          "runs": [[c, f, t, None] for c, f, t in rows]}, plat, "b", None)
    assert view.grid is not None
    pred = view.model.predict(Observations.query(np.array([1.0]), np.array([1000.0])))
    assert abs(float(pred.value[0]) - 8.5) / 8.5 < 0.05


def _daemon_request(plat, rows, stored=None):
    """The FitRequest the daemon's recommender submits for a group of ``rows`` on ``plat``
    (the first of ``stored``, {Group: rows}, where given: the store's groups)."""
    from opptune.daemon.recommender import Recommender
    from opptune.daemon.registry import Registry
    from opptune.daemon.store import Group
    from opptune.shared.config import DaemonConfig
    from opptune.shared.config import DaemonConfig

    stored = stored or {Group("p", "w", "", ""): rows}

    class Store:
        def group_runs(self, group):
            return stored[group]

        def claim_fit(self, *a):
            return True

        def platform(self, _):
            return plat

        def groups(self):
            return list(stored)

    class Fitter:
        requests = []

        def submit(self, req):
            self.requests.append(req)

    r = Recommender(DaemonConfig(), Store(), Registry(10.0), Fitter(), lambda *a: True, {})
    r.request_fit(next(iter(stored)))
    return Fitter.requests[-1]


def test_daemon_and_report_leave_the_same_outliers_out():
    """The MAD rule is applied once, in fit_setting: the daemon's fit request and the report's
    refit leave out the same run and say so."""
    from opptune.daemon.report.analysis import analyse_group

    plat = {"sweep_order": [0, 1, 2, 3]}
    rows = [(c, None, (0.2 + 0.8 / c) * (1 + e)) for c in (1, 2, 3, 4)
            for e in (-0.01, -0.005, 0.0, 0.005, 0.01)]
    planted = (2, None, 1.8)  # a neighbour ran: three times the 2-core time
    req = _daemon_request(plat, rows + [planted])
    assert planted not in req.rows and len(req.rows) == len(rows)
    assert req.outliers_left_out == 1
    view = analyse_group({"group": {"workload": "w", "variant": ""},
                          "runs": [[c, f, t, None] for c, f, t in rows + [planted]]},
                         plat, "b", None)
    assert "1 outlier run (MAD rule) left out" in view.model_note


def test_report_refits_the_runs_the_daemon_fits_not_the_marked_ones():
    """The report query's fit_runs (the store's fit-eligible runs) are what the report refits:
    a 2-core point measured only under a neighbour is plotted but not fitted, and a group whose
    every run was marked says why it has no model."""
    from opptune.daemon.report.analysis import analyse_group

    plat = {"sweep_order": [0, 1, 2, 3]}
    clean = [(c, None, 0.2 + 0.8 / c) for c in (1, 3, 4) for _ in range(3)]
    busy = [(2, None, 1.2) for _ in range(3)]  # every 2-core run twice as slow: no MAD outlier
    entry = {"group": {"workload": "w", "variant": ""},
             "runs": [[c, f, t, None] for c, f, t in clean + busy],
             "fit_runs": [[c, f, t] for c, f, t in clean]}
    view = analyse_group(entry, plat, "b", None)
    assert [p.cores for p in view.points] == [1, 2, 3, 4]  # every run plotted
    two = float(view.model.predict(Observations.query(np.array([2.0]))).value[0])
    assert abs(two - 0.6) / 0.6 < 0.05  # the clean law, not the busy 1.2
    empty = analyse_group({**entry, "fit_runs": []}, plat, "b", None)
    assert empty.model is None and "marked for interference" in empty.model_note


def _platform_runs(reps=2):
    """Five workloads on one platform (1-8 cores, bending past 4) and one elsewhere; the
    first is measured at 1-4 cores only: the others' replays size its interval."""
    from opptune.daemon.store import Group
    from opptune.shared.config import DaemonConfig

    rng = np.random.default_rng(3)
    runs = {}
    for i, (s, b) in enumerate([(0.05, 0.1), (0.1, -0.1), (0.02, 0.2), (0.2, 0.0), (0.08, 0.15)]):
        top = 4 if i == 0 else 8
        runs[Group("p", f"w{i}", "", "")] = [
            (c, None, float((s + (1 - s) / c) * max(1.0, c / 4) ** b
                            * np.exp(rng.normal(0, 0.01)))) for c in range(1, top + 1)
            for _ in range(reps)]
    runs[Group("q", "w9", "", "")] = [(c, None, 1.0 / c) for c in range(1, 9)]
    return runs


def test_report_refit_shows_the_daemons_pooled_interval():
    """The report's refits gather the platform's other groups as the daemon's fit does
    (analyse_groups, recommend.platform_others): the same interval at 1-8 cores, the pooled one (it differs
    from the group's own)."""
    from opptune.daemon.fitter import Fitter
    from opptune.daemon.models.pooled import MIN_GROUPS
    from opptune.daemon.report.analysis import analyse_group, analyse_groups

    plat = {"sweep_order": list(range(8))}
    runs = _platform_runs()
    g = next(iter(runs))
    daemon = Fitter().fit_one(_daemon_request(plat, runs[g], runs)).model
    assert daemon.quality["interval_pooled_groups"] >= MIN_GROUPS
    entries = [{"group": k.as_dict(), "runs": [[c, f, t, None] for c, f, t in r]}
               for k, r in runs.items()]  # what the report query gives (queries.report)
    view = analyse_groups(entries, {"p": plat, "q": plat}, {}, {})[0]
    alone = analyse_group(entries[0], plat, "b", None)
    q = Observations.query(np.arange(1.0, 9.0))
    want = daemon.predict(q)
    got = view.model.predict(q)
    np.testing.assert_allclose(got.lower, want.lower, rtol=1e-9)
    np.testing.assert_allclose(got.upper, want.upper, rtol=1e-9)
    own = alone.model.predict(q)
    assert not np.allclose(own.upper, want.upper, rtol=1e-3)



def test_only_the_platforms_groups_are_pooled_each_through_its_own_setting():
    """platform_others: the other groups of the group's platform only; the daemon's request
    carries each through its own fit setting (its runs' rules, its cluster's cpus)."""
    from opptune.daemon.recommend import platform_others

    keys = [("a", "w1", "", ""), ("a", "w2", "", ""), ("b", "w3", "", ""), ("a", "w4", "", "")]
    assert platform_others(keys[0], [(k, k[1]) for k in keys]) == ["w2", "w4"]
    runs = _platform_runs()
    plat = {"sweep_order": list(range(8))}
    req = _daemon_request(plat, runs[next(iter(runs))], runs)
    assert len(req.others) == 4 and all(s.order == list(range(8)) for s in req.others)
    # the MAD rule on each: a planted 3x run of another group is left out of its setting
    g1 = list(runs)[1]
    planted = {**runs, g1: runs[g1] + [(2, None, 3 * runs[g1][2][2])] * 1}
    req = _daemon_request(plat, runs[next(iter(runs))], planted)
    assert req.others[0].outliers_left_out == 1 and len(req.others[0].rows) == len(runs[g1])


def test_the_daemons_model_choice_is_validated_for_the_cores_its_push_keeps_within():
    """The daemon's own push keeps within the cores measured (Recommender.push), but its
    model choice was told the whole board's grid: a group measured at 1-3 of 8 cpus was
    chosen by forward chaining towards 8 cores, a prediction no push of it makes. The target
    is the push's candidates now, and the report's refit tells its choice the same."""
    from opptune.daemon.fitter import Fitter
    from opptune.daemon.report.analysis import analyse_group

    plat = {"sweep_order": list(range(8))}
    rows = [(c, None, (0.1 + 0.9 / c) * (1 + e)) for c in (1, 2, 3) for e in (-0.01, 0, 0.01)]
    req = _daemon_request(plat, rows)
    assert sorted(set(req.target.cores)) == [1.0, 2.0, 3.0]
    model = Fitter().fit_one(req).model
    assert model.quality["cv_scheme"] == "kfold", model.quality
    view = analyse_group({"group": {"workload": "w", "variant": ""},
                          "runs": [[c, f, t, None] for c, f, t in rows]}, plat, "b", None)
    q = Observations.query(np.arange(1.0, 9.0))
    assert np.allclose(view.model.predict(q).value, model.predict(q).value)


def _intel_pstate(tmp_path):
    """The x86-2numa's fake sysfs tree (intel_pstate: scaling_min/max, no frequency table) as
    its agent describes it."""
    from opptune.agent.platform import discover
    from opptune.agent.virtual_board import make_tree
    from opptune.shared.config import AgentConfig

    root = make_tree("x86-2numa", str(tmp_path / "x86"))
    return discover(AgentConfig(agent_id="x86", bench_kernels=[], state_dir=str(tmp_path),
                                sysfs_root=root, virtual_board="x86-2numa"))


def test_intel_pstates_range_is_a_range_not_two_frequencies(tmp_path):
    """intel_pstate exposes scaling_min/max_freq and no table: the agent gave its range as
    [1200000, 3200000] and everything read it as two frequencies ("2 frequencies" on the
    board's row, sweeps and characterize at both ends only, tune and recommend choosing
    between them). The agent names such a policy continuous; the daemon offers the range at
    100 MHz steps, takes any clock of it asked for, and says it as a range."""
    from opptune.daemon.planner import (frequency_ranges, frequency_refusal, offer_text,
                                        offered_frequencies, offered_range)
    from opptune.daemon.recommend import candidate_grid

    plat = _intel_pstate(tmp_path)
    assert set(plat["cpufreq"]["continuous"]) == {f"policy{c}" for c in range(32)}
    assert frequency_ranges(plat)["policy0"] == (1_200_000, 3_200_000)
    steps = list(range(1_200_000, 3_200_001, 100_000))
    assert offered_frequencies(plat, [0, 1]) == steps
    assert offered_range(plat, [0, 1]) == (1_200_000, 3_200_000)
    assert offer_text(plat, "policy0", "intel_pstate") == \
        "1200..3200 MHz (continuous, intel_pstate)"
    # sweeps: N spread over the range (min, mid, max), all = its steps, a listed clock within
    # it kept though off the steps, one outside refused naming the range
    def clocks(**kw):
        job = plan_sweep(plat, "w", SweepDefaults(max_cores=1, **kw))
        return [p["freq_khz"] for p in job["points"]]
    assert clocks(frequency_grid="3") == [1_200_000, 2_200_000, 3_200_000]
    assert clocks(frequency_grid="all") == steps
    assert clocks(frequency_grid="list", frequencies=[2_250_000, 3_300_000]) == [2_250_000]
    assert frequency_refusal(plat, "x86", [3_300_000]) == (
        "board x86 cannot run at 3300000 kHz: it offers 1200000..3200000 kHz (continuous)")
    assert frequency_refusal(plat, "x86", [2_250_000]) is None
    # recommend/tune candidates: the steps, and a fitted clock off them
    _, cc, ff = candidate_grid(plat, [1_200_000, 2_250_000], max_cores=2)
    assert sorted(set(ff)) == sorted(steps + [2_250_000]) and sorted(set(cc)) == [1.0, 2.0]


def test_an_older_agents_range_still_reads_as_one_and_a_two_clock_table_does_not():
    """An agent before cpufreq.continuous gave a range as its two ends alone: read as a range,
    as before. Where the agent names its ranges, a policy whose table has two clocks is
    two clocks."""
    from opptune.daemon.planner import frequency_ranges, offer_text, offered_frequencies

    pol = {"name": "policy0", "cpus": [0, 1], "driver": "cpufreq-dt"}
    old = {"policies": [pol], "cpufreq": {"available": True,
                                          "frequencies_khz": {"policy0": [800_000, 1_000_000]}}}
    assert frequency_ranges(old) == {"policy0": (800_000, 1_000_000)}
    assert offered_frequencies(old, [0]) == [800_000, 900_000, 1_000_000]
    new = {**old, "cpufreq": {**old["cpufreq"], "continuous": []}}
    assert frequency_ranges(new) == {}
    assert offered_frequencies(new, [0]) == [800_000, 1_000_000]
    assert offer_text(new, "policy0") == "2 frequencies 800-1000 MHz"


def test_the_daemons_log_words_an_unset_clock_as_recommend_does():
    """The log line of a pushed recommendation said "the governor's frequency" for a board
    without cpufreq too; it now says what the cpus run at (planner.clock_text)."""
    from opptune.daemon.planner import GOVERNOR_CLOCK, OWN_CLOCK
    from opptune.daemon.recommender import Recommender
    from opptune.daemon.registry import Registry
    from opptune.daemon.store import Group
    from opptune.shared.config import DaemonConfig

    class Store:
        plat = {}

        def platform(self, name):
            return self.plat

    store = Store()
    r = Recommender(DaemonConfig(), store, Registry(10.0), object(), lambda *a: True, {})
    group = Group("p", "w", "s", "")
    assert r._clock_text(None, group, None, [0, 1]) == OWN_CLOCK  # no cpufreq policy
    store.plat = {"policies": [{"cpus": [0, 1, 2, 3]}]}
    assert r._clock_text(None, group, None, [0, 1]) == GOVERNOR_CLOCK
    assert r._clock_text(None, group, 1_400_000, [0, 1]) == "1400 MHz"
