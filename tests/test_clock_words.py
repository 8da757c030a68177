"""A configuration's clock is worded one way by the agent's log and the daemon's status: the
agent said "at the governor's clock" for any configuration without a set frequency, also
where no governor reaches its cpus (a virtual board's command, a board without cpufreq), and
its set clocks in kHz where status says MHz."""

import subprocess
import sys

import pytest

from opptune.agent.standing import describe
from opptune.daemon.status_view import standing_lines


@pytest.mark.parametrize("freq_khz, target, words", [
    (1_800_000, None, "triad on cpus 4-5 at 1800 MHz"),
    (None, {"kind": "pid", "pid": 4242}, "triad on cpus 4-5 with no set frequency, process 4242"),
    (None, {"kind": "unit", "unit": "web.service"},
     "triad on cpus 4-5 with no set frequency, unit web.service"),
])
def test_the_agent_words_an_applied_configuration_as_status_does(freq_khz, target, words):
    config = {"config_id": "cfg-1", "workload": "triad", "size": "small", "cpus": [4, 5],
              "freq_khz": freq_khz, **({"target": target} if target else {})}
    assert describe(config) == f"cfg-1 ({words})"
    [line] = standing_lines({"id": "a1", "standing": config}, "b")
    assert line.endswith(f"in force: {words}")
    assert "governor" not in describe(config)


def test_the_agents_words_come_without_the_daemon():
    """The agent on a board has no daemon extra: the shared wording imports none of it."""
    code = ("import sys, opptune.agent.standing, opptune.agent.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith('opptune.daemon')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
