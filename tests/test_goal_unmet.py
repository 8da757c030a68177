"""A goal whose deadline or power cap no configuration meets: ``opptune recommend`` and ``opptune
tune`` answer with the closest configuration, exit 3 and push nothing (with --apply, --pid,
--unit, and at the end of a tune session, which ends ``unmet`` and stays so across a daemon
restart)."""

from __future__ import annotations

import json
import re
import time

import pytest

from opptune.daemon.client import query
from opptune.daemon.goal_query import withheld
from opptune.shared import protocol as P
from procs import db_rows, wait_until
from test_goal_e2e import opptune, start
from test_goal_service import METER, Agent
from test_tune_restart import answer, daemon_on, status


def rec(**over):
    """A recommendation map as recommend_steps gives it, reduced to what ``withheld`` reads."""
    out = {"agent": "pi", "workload": "triad", "size": "small",
           "goal": {"objective": "time", "deadline_s": 0.001, "power_cap_w": None},
           "met": False, "n_configurations": 3, "n_candidates": 20,
           "time_s": {"value": 0.0128, "lower": 0.0126, "upper": 0.013},
           "power_w": {"value": 1.9, "lower": 1.8, "upper": 2.0},
           "note": "no configuration meets the limits; the closest takes 0.0128 s "
                   "(deadline 1 ms)"}
    out.update(over)
    return out


def test_withheld_names_the_limit_and_what_to_do():
    a = withheld(rec())
    assert a["config_id"] is None and a["state"] == "withheld"
    assert a["reason"] == (
        "no configuration meets the limits; the closest takes 0.0128 s (deadline 1 ms); "
        "nothing was pushed to pi: relax --deadline, measure more configurations with "
        "'opptune tune --agent pi --workload triad --size small --deadline 1ms', or leave "
        "--deadline out for the best configuration for minimum time alone")


def test_withheld_with_every_configuration_measured_suggests_no_tune():
    goal = {"objective": "edp", "deadline_s": 0.01, "power_cap_w": 0.5}
    reason = withheld(rec(goal=goal, n_configurations=20))["reason"]
    assert "opptune tune" not in reason
    assert reason.endswith("nothing was pushed to pi: relax --deadline or --power-cap or "
                           "leave --deadline or --power-cap out for the best configuration "
                           "for minimum energy-delay product alone")
    # the command given to measure more asks for the same goal
    reason = withheld(rec(goal=goal))["reason"]
    assert ("'opptune tune --agent pi --workload triad --size small --objective edp "
            "--deadline 10ms --power-cap 500mW'") in reason


def test_withheld_advises_measuring_more_only_where_the_predictions_allow_it():
    """'measure more configurations with opptune tune' (and, after a tune, 'a larger
    --budget') was advised whenever a configuration was unmeasured, also where none is
    predicted, within its interval, to meet the limits (could_meet 0)."""
    reason = withheld(rec(could_meet=0))["reason"]
    assert reason.endswith(
        "nothing was pushed to pi: relax --deadline or leave --deadline out for the best "
        "configuration for minimum time alone (measuring more would not help: none of the 17 "
        "configurations not measured is predicted, within its interval, to meet them)")
    reason = withheld(rec(could_meet=0), tune=True, budget_spent=True)["reason"]
    assert "--budget" not in reason and reason.endswith("to meet them)")
    # some may: advised as before
    assert "measure more configurations with 'opptune tune" in withheld(rec(could_meet=2))[
        "reason"]
    assert "tune again with a larger --budget" in withheld(rec(could_meet=2), tune=True,
                                                           budget_spent=True)["reason"]


def test_withheld_names_the_limit_the_closest_breaks():
    # the deadline is met (0.0128 s <= 2.5 s), the cap is not (1.9 W > 0.5 W)
    goal = {"objective": "time", "deadline_s": 2.5, "power_cap_w": 0.5}
    reason = withheld(rec(goal=goal, n_configurations=20))["reason"]
    assert reason.endswith(": relax --power-cap or leave --power-cap out for the best "
                           "configuration for minimum time alone"), reason
    # broken by the interval's bound only: every limit is named
    goal = {"objective": "time", "deadline_s": 0.0129, "power_cap_w": 1.95}
    reason = withheld(rec(goal=goal, n_configurations=20))["reason"]
    assert ": relax --deadline or --power-cap or leave" in reason, reason


def test_withheld_in_a_tune_session_says_nothing_was_applied():
    reason = withheld(rec(goal={"objective": "time", "deadline_s": None, "power_cap_w": 1.0}),
                      tune=True)["reason"]
    assert reason.endswith("; nothing was applied: relax --power-cap or leave --power-cap out "
                           "for the best configuration for minimum time alone"), reason


def test_withheld_after_a_spent_budget_says_a_larger_one_may_find_more():
    reason = withheld(rec(), tune=True, budget_spent=True)["reason"]
    assert reason.endswith("; nothing was applied: relax --deadline, tune again with a larger "
                           "--budget, or leave --deadline out for the best configuration for "
                           "minimum time alone"), reason


def test_an_unmet_tune_session_applies_nothing_and_stays_unmet_after_a_restart(tmp_path):
    """Real sockets, the daemon loop in a thread: power (2 + cores) W is above a 1 W cap at
    every core count, so the session ends unmet with the closest configuration and sends no
    configuration; a daemon started again on its store neither resumes nor changes it."""
    d = daemon_on(tmp_path / "d.db")
    a = Agent(d.endpoint, METER)
    try:
        tune_id = a.query("tune", {"agent": "q1", "workload": "wl", "power_cap": "1W"}
                          )["body"]["data"]["tune_id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            s = d.tuning.sessions.get(tune_id)
            if s is None or s.state not in ("measuring", "verifying"):
                break
            if a.sock.poll(100):
                msg = P.decode(a.sock.recv())
                assert msg["type"] != "config", msg
                if msg["type"] == "job":
                    answer(a, msg["body"])
        # what the board is sent after the verdict (status() would pass over a config)
        sent = [P.decode(a.sock.recv())["type"] for _ in range(20) if a.sock.poll(200)]
        assert "config" not in sent, sent
        end = status(a, tune_id)
        assert end is not None and end["state"] == "unmet", end
        r = end["recommendation"]
        assert r["met"] is False and r["cores"] == 1  # the least power: 3 W
        assert r["applied"] == {"config_id": None, "state": "withheld",
                                "reason": end["reason"]}
        assert end["reason"].startswith("no configuration meets the limits; the closest "
                                        "draws 3 W (cap 1 W); nothing was applied: relax "
                                        "--power-cap"), end["reason"]
        assert end["config_id"] is None and end["verification"] is None
        assert db_rows(tmp_path / "d.db", "SELECT count(*) FROM recommendations") == [(0,)]
    finally:
        a.close()
        d.stop()
    d = daemon_on(tmp_path / "d.db")
    a = Agent(d.endpoint, METER)
    try:
        assert tune_id not in d.tuning.sessions  # a final state: not resumed
        again = status(a, tune_id)
        assert again["state"] == "unmet" and again["reason"] == end["reason"]
        assert again["recommendation"] == end["recommendation"]
        sent = [P.decode(a.sock.recv())["type"] for _ in range(20) if a.sock.poll(200)]
        assert "config" not in sent and "job" not in sent, sent
    finally:
        a.close()
        d.stop()


def configs_received(c) -> int:
    """Configurations the agent received (its outbox keeps each one it was pushed)."""
    return db_rows(c.tmp / "agent-state" / "outbox.db", "SELECT count(*) FROM configs")[0][0]


@pytest.mark.integration
def test_limits_no_configuration_meets_exit_3_and_push_nothing(tmp_path):
    """Real daemon and agent processes (odroid-xu4 virtual board), the installed opptune from
    another directory."""
    c = start(tmp_path, kernels=("pi_integrate",))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    base = ["--daemon", c.endpoint, "--agent", "test-agent", "--workload", "pi_integrate"]
    try:
        # tune: measured, then the closest shown, nothing applied, exit 3
        p = opptune("tune", *base, "--deadline", "1us", "--cluster", "1", "--budget", "3",
                    "--json", "--no-progress", cwd=elsewhere)
        assert p.returncode == 3, p.stdout + p.stderr + c.logs()
        s = json.loads(p.stdout)  # stdout holds only JSON
        assert s["state"] == "unmet" and s["measured"] == 3, s
        assert s["recommendation"]["met"] is False
        assert s["recommendation"]["applied"]["state"] == "withheld"
        assert s["config_id"] is None and s["verification"] is None
        assert "nothing was applied: relax --deadline" in s["reason"]
        assert c.rows("SELECT state FROM tune_sessions") == [("unmet",)]

        p = opptune("tune", *base, "--power-cap", "1mW", "--cluster", "1", "--budget", "3",
                    "--no-progress", cwd=elsewhere)
        assert p.returncode == 3, p.stdout + p.stderr + c.logs()
        text = " ".join(p.stdout.split())
        assert re.search(r"unmet: no configuration meets the limits; the closest draws "
                         r"[0-9.]+ m?W \(cap 1 mW\); nothing was applied: relax --power-cap or "
                         r"leave --power-cap out for the best configuration for minimum time "
                         r"alone \(measuring more would not help: none of the [0-9]+ "
                         r"configurations not measured is predicted, within its interval, to "
                         r"meet them\)", text), text  # a larger --budget was advised

        assert "Traceback" not in p.stderr and "verification" not in text

        # recommend, each way of applying: the answer, exit 3, nothing pushed
        for how in (["--apply"], ["--pid", "1"], ["--unit", "nginx.service"], []):
            p = opptune("recommend", *base, "--power-cap", "1mW", *how, "--json",
                        cwd=elsewhere)
            assert p.returncode == 3, p.stdout + p.stderr
            r = json.loads(p.stdout)
            assert r["met"] is False and r["note"].startswith("no configuration meets")
            if how:
                assert r["applied"]["state"] == "withheld" and r["applied"]["config_id"] is None
                assert "nothing was pushed to test-agent: relax --power-cap" in \
                    r["applied"]["reason"]
            else:
                assert r["applied"] is None
        p = opptune("recommend", *base, "--deadline", "1us", "--apply", cwd=elsewhere)
        assert p.returncode == 3, p.stdout + p.stderr
        text = " ".join(p.stdout.split())
        assert "limits │ not met, see below" in text
        assert "limits: no configuration meets the limits; the closest takes" in text
        assert re.search(r"not applied: no configuration meets the limits; the closest takes "
                         r"[0-9.]+ m?s \(deadline 1 us\); nothing was pushed to test-agent: "
                         r"relax --deadline or leave --deadline out for the best configuration "
                         r"for minimum time alone \(measuring more would not help", text), text
        # no configuration is predicted under 1 us: tuning was advised all the same
        assert "opptune tune" not in text
        assert "pushed to test-agent as" not in text and "Traceback" not in p.stderr
        # without --apply: the same advice (the limits' line alone said what is broken, not
        # what to do; walk31)
        p = opptune("recommend", *base, "--deadline", "1us", cwd=elsewhere)
        assert p.returncode == 3, p.stdout + p.stderr
        text = " ".join(p.stdout.split())
        assert re.search(r"limits: no configuration meets the limits; the closest takes "
                         r"[0-9.]+ m?s \(deadline 1 us\) to meet the limits: relax --deadline "
                         r"or leave --deadline out for the best configuration for minimum time "
                         r"alone \(measuring more would not help: none of the [0-9]+ "
                         r"configurations not measured is predicted, within its interval, to "
                         r"meet them\)$", text), text

        # neither the daemon's store nor the agent has any configuration
        assert c.rows("SELECT count(*) FROM recommendations") == [(0,)]
        assert configs_received(c) == 0

        # a goal that is met is pushed as before (exit 0): the check above can fail
        p = opptune("recommend", *base, "--deadline", "10s", "--apply", "--json",
                    cwd=elsewhere)
        assert p.returncode == 0, p.stdout + p.stderr
        assert json.loads(p.stdout)["applied"]["state"] == "pushed"
        wait_until(lambda: configs_received(c) == 1, "the agent receiving the met one", 30,
                   c.logs)

        # kill -9 and a new daemon on the store: the unmet sessions stay as they ended
        c.kill("daemon")
        c.start_daemon()
        c.wait_for(lambda st: any(a["alive"] for a in st["agents"]), 30, "the agent's hello")
        again = query(c.endpoint, "tune_status", {"tune_id": s["tune_id"]}, timeout_s=5)
        assert again["state"] == "unmet" and again["reason"] == s["reason"]
        assert c.rows("SELECT count(*) FROM tune_sessions WHERE state != 'unmet'") == [(0,)]
        assert "resumed" not in (c.tmp / "daemon.log").read_text()
        assert configs_received(c) == 1
    finally:
        c.stop()
