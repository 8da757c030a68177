"""Cross-validated model choice."""

import time

import numpy as np
import pytest

from opptune.daemon.models.base import NotEnoughData, Observations
from opptune.daemon.models.memwall import speedup
from opptune.daemon.models.select import ANALYTIC, choose, fold_ids


def test_folds_loo_for_tiny_and_k_otherwise():
    assert sorted(fold_ids(5, 5, 0)) == [0, 1, 2, 3, 4]
    ids = fold_ids(40, 5, 1)
    assert np.bincount(ids).tolist() == [8] * 5


def test_picks_usl_on_retrograde_data_and_lists_runners_up():
    p = np.arange(1, 33, dtype=float)
    t = 40 * (1 + 0.03 * (p - 1) + 0.004 * p * (p - 1)) / p
    t0 = time.perf_counter()
    sel = choose(Observations(cores=p, time_s=t), list(ANALYTIC))
    elapsed = time.perf_counter() - t0
    assert sel.name == "usl"
    table = sel.table()
    assert table[0]["name"] == "usl" and table[0]["cv_mape"] < 0.5
    assert {r["name"] for r in table} == set(ANALYTIC)
    assert next(r for r in table if r["name"] == "amdahl")["cv_mape"] > 5
    assert elapsed < 5


def test_picks_memwall_on_memory_wall_data():
    p = np.tile(np.arange(1, 17, dtype=float), 3)
    f = np.repeat([1200.0, 1800.0, 2400.0], 16)
    t = (5 + 20000 / f) / speedup(0.99, 4.0, 0.05, 0.1, p, f / 1000)
    sel = choose(Observations(cores=p, time_s=t, freq_mhz=f), list(ANALYTIC))
    assert sel.name == "memwall"
    assert sel.scores["memwall"]["cv_mape"] < sel.scores["amdahl"]["cv_mape"]


def test_unknown_module_is_skipped_not_fatal(monkeypatch):
    from opptune.daemon.models import registry
    monkeypatch.setitem(registry.MODELERS, "ghost", "no_such_module:Ghost")
    p = np.array([1.0, 2, 4, 8, 16])
    sel = choose(Observations(cores=p, time_s=10 * (0.1 + 0.9 / p)), ["ghost", "amdahl"])
    assert sel.name == "amdahl"
    assert "not installed" in sel.scores["ghost"]["error"]


def test_too_little_data():
    with pytest.raises(NotEnoughData):
        choose(Observations(cores=[1.0], time_s=[2.0]), list(ANALYTIC))
    sel = choose(Observations(cores=[1.0, 2.0], time_s=[2.0, 1.1]), list(ANALYTIC))
    assert sel.name == "amdahl" and sel.folds == 0
