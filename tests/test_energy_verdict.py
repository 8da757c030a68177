"""A recommendation pushed for an energy goal (energy, EDP, ED2P) is judged on the energy its
verification runs measured as well as on their time (recommender.judge): the same rule as for
time, against the energy interval the goal answer predicted, stored with the recommendation."""

from __future__ import annotations

import time

from opptune.daemon.recommender import judge
from opptune.daemon.store import open_store
from test_daemon_service import PLATFORM, Agent, query, record
from test_job_lifecycle import daemon, hello  # noqa: F401  (daemon: a fixture)

TIME = {"predicted_time_s": 1.0, "predicted_lower_s": 0.9, "predicted_upper_s": 1.1}


def goal(objective, value=10.0, lower=9.0, upper=11.0):
    return {**TIME, "goal": {"objective": objective,
                             "energy_j": {"value": value, "lower": lower, "upper": upper}}}


def test_an_energy_goal_is_judged_on_time_and_energy():
    assert judge(goal("energy"), 0.97, 10.21) == (
        "verified", "time -3.0 % of the prediction, within its interval -10..+10 %; "
                    "energy +2.1 % of the prediction, within its interval -10..+10 %")
    # as predicted in time, but the board used 30 % more energy: off, saying by how much
    state, note = judge(goal("energy"), 1.0, 13.0)
    assert state == "off"
    assert note == ("time +0.0 % of the prediction, within its interval -10..+10 %; energy "
                    "off by +30.0 % (measured 13 J, predicted 10 J, interval 9..11 J)")
    # the worse of the two: an energy within a too-wide interval leaves it unconfirmed
    state, note = judge(goal("energy", 10.0, 4.0, 30.0), 1.0, 10.0)
    assert state == "unconfirmed" and "; energy +0.0 % of the prediction" in note
    # time off, energy within: off
    assert judge(goal("energy"), 1.5, 10.0)[0] == "off"


def test_edp_and_ed2p_are_judged_on_the_product_they_name():
    """EDP and ED2P goals were judged on time and energy each, never on the product they
    name. The product's interval comes from the ends of the time and energy intervals (it
    holds the product whenever both lie within theirs): E 9..11 J, t 0.9..1.1 s."""
    state, note = judge(goal("edp"), 1.0, 10.0)
    assert state == "verified" and note == (
        "EDP +0.0 % of the prediction, within its interval -19..+21 %; time +0.0 % of the "
        "prediction, within its interval -10..+10 %; energy +0.0 % of the prediction, within "
        "its interval -10..+10 %")
    # ED2P: E t^2, 9 x 0.81 .. 11 x 1.21 J s²
    state, note = judge(goal("ed2p"), 1.0, 10.0)
    assert state == "verified" and note.startswith(
        "ED2P +0.0 % of the prediction, within its interval -27..+33 %; time ")
    # twice the energy: the product is off, saying by how much against what
    state, note = judge(goal("edp"), 1.0, 20.0)
    assert state == "off" and note.startswith(
        "EDP off by +100.0 % (measured 20 J s, predicted 10 J s, interval 8.1..12.1 J s); ")
    # a slower run that took less energy: each factor outside its interval, the product the
    # goal names as predicted (judged each, this was "off")
    state, note = judge(goal("edp"), 1.15, 8.7)
    assert state == "verified" and note.startswith("EDP +0.0 % of the prediction")
    assert "time off by +15.0 %" in note and "energy off by -13.0 %" in note
    # no energy interval: no product interval, time and energy each as before
    assert judge(goal("edp", 10.0, None, None), 1.0, 10.0)[0] == "off"


def test_runs_without_energy_are_judged_on_time_only_and_say_so():
    assert judge(goal("energy"), 1.0, None) == (
        "verified", "time +0.0 % of the prediction, within its interval -10..+10 %; energy "
                    "not measured (the verification runs had no energy meter): judged on time "
                    "only")
    state, note = judge(goal("energy", None, None, None), 1.0, 12.0)
    assert state == "verified" and note.endswith(
        "energy 12 J, no predicted energy to compare with: judged on time only")


def test_a_time_goal_is_judged_as_before():
    plain = "+0.0 % of the prediction, within its interval -10..+10 %"
    assert judge(TIME, 1.0, 50.0) == ("verified", plain)
    assert judge({**TIME, "goal": {"objective": "time"}}, 1.0, 50.0) == ("verified", plain)
    assert judge(goal("energy"), None, 10.0) == ("failed", "no verification run gave a time")


def stored(daemon, config_id, goal_map):
    rec = {"config_id": config_id, "agent": "a1", "platform": "plat-test", "workload": "wl",
           "input": "small", "variant": "", "cores": 4, "cpus": [0, 1, 2, 3], "threads": 4,
           "freq_khz": None, "model": "amdahl", "state": "pushed", "goal": goal_map,
           **TIME}
    # through a connection of its own: the daemon's thread writes on its own meanwhile (its
    # start's rows), and one SQLite connection takes one transaction at a time
    st = open_store(daemon.config.database)
    try:
        st.save_recommendation(rec, time.time())
    finally:
        st.close()


def test_the_stored_verdict_of_an_energy_goal_carries_both_figures(daemon):  # noqa: F811
    """The agent's applied for a recommendation pushed for an energy goal: the status row
    says its objective, the predicted and measured energy, and the note judges both; runs
    without energy say time only."""
    # stored before the agent's hello: the daemon's refits after each applied write too
    stored(daemon, "cfg-e", goal("energy")["goal"])
    stored(daemon, "cfg-n", goal("energy")["goal"])
    stored(daemon, "cfg-t", None)
    stored(daemon, "cfg-m", goal("energy")["goal"])
    a, op = Agent(daemon.endpoint), Agent(daemon.endpoint, "operator-1")
    hello(a, platform=PLATFORM, workloads=["wl"])
    a.send("applied", {"config_id": "cfg-e", "ok": True, "time_s": 1.0,
                       "records": [record(4, r, 1.0, energy_j=e, energy_source="hwmon")
                                   for r, e in enumerate((10.0, 13.0, 13.4))]})
    a.expect("ack")
    a.send("applied", {"config_id": "cfg-n", "ok": True, "time_s": 1.0,
                       "records": [record(4, r, 1.0) for r in range(2)]})
    a.expect("ack")
    # a marked run (the daemon here does not accept load): not judged, both figures said
    a.send("applied", {"config_id": "cfg-m", "ok": True, "time_s": 1.0,
                       "records": [record(4, 0, 1.0, energy_j=10.0, energy_source="hwmon",
                                          marked="interference: 40 % of cpu 1")]})
    a.expect("ack")
    rows = {r["config_id"]: r for r in query(op, "status")["recommendations"]}
    assert rows["cfg-m"]["state"] == "marked"
    assert rows["cfg-m"]["error"] == (
        "not verified: 1 of 1 verification runs marked (interference: 40 % of cpu 1); under "
        "that load: time +0.0 % of the prediction, within its interval -10..+10 %; energy "
        "+0.0 % of the prediction, within its interval -10..+10 %")
    e, n = rows["cfg-e"], rows["cfg-n"]
    assert (e["state"], e["objective"], e["verified_energy_j"]) == ("off", "energy", 13.0)
    assert e["predicted_energy_j"] == {"value": 10.0, "lower": 9.0, "upper": 11.0}
    assert e["error"].endswith("; energy off by +30.0 % (measured 13 J, predicted 10 J, "
                               "interval 9..11 J)"), e
    assert (n["state"], n["verified_energy_j"]) == ("verified", None)
    assert n["error"].endswith("energy not measured (the verification runs had no energy "
                               "meter): judged on time only")
    # a time recommendation's row: objective time, no energy
    t = rows["cfg-t"]
    assert (t["objective"], t["predicted_energy_j"], t["verified_energy_j"]) == (
        "time", None, None)


def test_a_tunes_verdict_line_gives_the_energy_measured_and_predicted():
    from rich.console import Console

    from opptune.daemon.goal_cli import print_verdict
    note = ("time -3.0 % of the prediction, within its interval -10..+10 %; energy +2.1 % of "
            "the prediction, within its interval -10..+10 %")
    s = {"tune_id": "tune-1", "goal_text": "minimum energy", "workload": "wl", "size": "small",
         "agent": "a1", "measured": 3, "grid": 8, "elapsed_s": 1.0, "segments": [],
         "state": "done", "reason": f"applied and verified ({note})",
         "verification": {"state": "verified", "verified_time_s": 0.97, "error": note,
                          "predicted_time_s": 1.0, "verified_energy_j": 10.21,
                          "predicted_energy_j": {"value": 10.0, "lower": 9.0, "upper": 11.0}}}
    con = Console(record=True, width=400)
    print_verdict(s, con)
    lines = con.export_text().splitlines()
    assert lines[-2] == ("verification: verified, measured 0.97 s, predicted 1 s; 10.21 J, "
                         f"predicted 10 J ({note})")
    assert lines[-1] == "done: applied and verified"
