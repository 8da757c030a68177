"""`opptune eval-mpet` against a real daemon with CURVE on (a separate process over a real
socket): the daemon answers only its operator key, which --config supplies, as the timeout's
hint says."""

from __future__ import annotations

import pytest

from test_curve import CurveCluster, opptune

pytestmark = pytest.mark.integration


def test_eval_mpet_reaches_a_curve_daemon_with_its_config(tmp_path):
    c = CurveCluster(tmp_path)
    try:
        c.start_daemon()
        c.wait_keys()
        toml = str(c.daemon_toml)
        # without the operator key the daemon stays silent, and the message names --config
        p = opptune("eval-mpet", "--daemon", c.endpoint, "--timeout", "1")
        assert p.returncode == 1 and p.stdout == ""
        assert p.stderr.strip().endswith("give its --config)"), p.stderr
        # with it the query is answered: an empty store, said in one line
        for argv in (("--daemon", c.endpoint, "--config", toml), ("--config", toml)):
            p = opptune("eval-mpet", *argv, "--timeout", "10")
            assert p.returncode == 2 and p.stdout == "", p.stdout
            assert p.stderr == (f"opptune eval-mpet: the daemon at {c.endpoint} has no "
                                "measurements; run 'opptune characterize --agent AGENT --wait' "
                                "first\n"), p.stderr + c.logs()
    finally:
        c.stop()


def test_every_clock_is_asked_once_and_merged_once():
    """eval-mpet --daemon's further mpet_data queries: each platform's clocks below its
    highest, one query per rank; an answer naming what the first held adds nothing."""
    from opptune.daemon.mpet_answer import clock_queries, merge_answer, store_rows
    prof = lambda w, p, f: {"workload": w, "platform": p, "size": "small",  # noqa: E731
                            "freq_mhz": f, "t": {"1": 2000 / (f or 1000)}, "params": {},
                            "counters": {}}
    topo = {"n_nu": None, "n_ht": None, "nmax": 1}
    data = {"profiles": [prof("k", "p", 1500.0), prof("k", "q", 1400.0), prof("k", "r", None)],
            "platforms": {"p": {**topo, "board": "pi", "clocks": [600.0, 1000.0, 1500.0]},
                          "q": {**topo, "board": "xu", "clocks": [1000.0, 1400.0]},
                          "r": {**topo, "board": "vm", "clocks": []}}}
    assert clock_queries(data) == [{"p": 1000.0, "q": 1000.0}, {"p": 600.0}]
    # a platform not named is answered at its highest again: once in the merged answer
    merge_answer(data, {"profiles": [prof("k", "p", 1000.0), prof("k", "q", 1000.0),
                                     prof("k", "r", None)], "platforms": {}})
    merge_answer(data, {"profiles": [prof("k", "p", 600.0), prof("k", "q", 1400.0),
                                     prof("k", "r", None)], "platforms": {}})
    rows = store_rows(data)
    assert [(r["platform"], r["freq_mhz"]) for r in rows] == [
        ("pi", 600.0), ("pi", 1000.0), ("pi", 1500.0), ("vm", ""), ("xu", 1000.0),
        ("xu", 1400.0)]
    # a daemon older than 'clocks' in its answer: nothing more to ask
    assert clock_queries({"profiles": [], "platforms": {"p": topo}}) == []
