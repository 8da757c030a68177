"""fitter.py: a group's runs as model input, and the physical cores of an SMT sweep."""

import numpy as np
import pytest

from opptune.daemon.fitter import observations
from opptune.daemon.models.amdahl import AmdahlModeler
from opptune.daemon.models.base import Observations
from opptune.daemon.planner import physical_cores


def smt_times(p, phys=4, smt_yield=0.25, serial=0.05):
    # Amdahl over effective cores: threads beyond the physical cores add a quarter core each
    eff = np.minimum(p, phys) + smt_yield * np.maximum(p - phys, 0)
    return 10.0 * (serial + (1 - serial) / eff)


def test_physical_cores_of_a_sweep_order():
    plat = {"smt_siblings": [[0, 4], [1, 5], [2, 6], [3, 7]]}
    assert physical_cores(plat, [0, 1, 2, 3, 4, 5, 6, 7]) == 4   # the agent's order
    assert physical_cores(plat, [0, 1, 2, 3]) is None               # no sibling used
    assert physical_cores(plat, [0, 4, 1, 5, 2, 6, 3, 7]) is None   # siblings first: not SMT-last
    assert physical_cores({"smt_siblings": [[0], [1], [2]]}, [0, 1, 2]) is None
    assert physical_cores({}, [0, 1]) is None
    # a cpu the sibling list does not name is its own core
    assert physical_cores({"smt_siblings": [[0, 2]]}, [0, 1, 2]) == 2


def test_physical_cores_reach_the_speedup_models_as_the_descriptor():
    p = np.repeat(np.arange(1, 9), 2)
    rows = [(int(c), None, float(t)) for c, t in zip(p, smt_times(p))]
    plain = observations(rows)
    assert plain.counters == {}
    smt = observations(rows, phys_cores=4)
    assert smt.counters["hw_phys_cores"].tolist() == [4.0] * len(rows)
    fit = AmdahlModeler().fit(smt)
    assert fit.params["phys_cores"] == 4 and fit.params["smt_yield"] == pytest.approx(0.25)
    assert fit.params["parallel_fraction"] == pytest.approx(0.95, abs=1e-3)
    # 16 threads on 4 physical cores: the descriptor keeps the prediction on the curve
    q = Observations.query([16])
    truth = smt_times(np.array([16.0]))
    assert abs(fit.predict(q).value[0] / truth[0] - 1) < 0.01
    assert abs(AmdahlModeler().fit(plain).predict(q).value[0] / truth[0] - 1) > 0.05


def test_the_daemon_starts_without_loading_scipy():
    # scipy costs about 60 MiB and 0.6 s at start; the models load it at their first fit
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys, opptune.daemon.service; "
                          "print(sorted(m for m in ('scipy', 'sklearn') if m in sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
