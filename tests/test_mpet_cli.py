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
                                "measurements; run 'opptune characterize --agent AGENT' "
                                "first\n"), p.stderr + c.logs()
    finally:
        c.stop()
