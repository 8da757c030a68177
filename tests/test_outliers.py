"""Outliers (MAD rule per configuration) stay in the store and the exports and out of the fit."""

from __future__ import annotations

import pytest

from opptune.daemon.fitter import FitRequest, Fitter, without_outliers
from opptune.daemon.recommend import fit_setting
from opptune.daemon.store import Group, ResultIn, open_store
from opptune.shared.records import RunRecord
from opptune.shared.point_stats import outliers


SPREAD = (-0.01, -0.005, 0.0, 0.005, 0.01)  # +-1 % around the truth, no value far out


def _amdahl_rows(planted: float | None = None) -> list[tuple[int, float | None, float]]:
    rows = []
    for n in (1, 2, 3, 4):
        for e in SPREAD:
            rows.append((n, None, (0.2 + 0.8 / n) * (1 + e)))
    if planted is not None:
        rows.append((2, None, planted))  # a neighbour ran: 2 cores took three times as long
    return rows


def test_mad_rule_marks_only_the_far_value():
    assert outliers([1.0, 1.01, 0.99, 1.02, 0.98, 3.0]) == [False] * 5 + [True]
    assert outliers([1.0, 1.2, 0.8, 1.1, 0.9]) == [False] * 5  # spread, but no outlier
    assert outliers([1.0, 5.0]) == [False, False]  # too few values to tell
    assert outliers([1.0, 1.0, 1.0, 2.0]) == [False] * 4  # MAD 0: no scale to judge by


def test_filter_is_per_configuration():
    rows = [(1, None, 1.0), (1, None, 1.01), (1, None, 0.99), (2, None, 3.0), (2, None, 3.02),
            (2, None, 2.98)]
    kept, n = without_outliers(rows)
    assert n == 0 and kept == rows  # 3.0 is far from 1-core times but not from its own


def _fit(rows):
    """The daemon's fit of ``rows``: its setting (where the MAD rule applies), then the fit."""
    setting = fit_setting({}, "", rows)
    return Fitter().fit_one(FitRequest(Group("p", "w", "small", ""), setting.rows,
                                       recommend=False,
                                       outliers_left_out=setting.outliers_left_out))


def test_planted_outlier_does_not_move_the_fit():
    clean = _fit(_amdahl_rows())
    dirty = _fit(_amdahl_rows(planted=1.8))
    assert clean.error is None and dirty.error is None
    assert dirty.description["quality"]["outliers_left_out"] == 1
    assert clean.description["quality"]["outliers_left_out"] == 0
    assert dirty.description["model"] == clean.description["model"]
    for k, v in clean.description["params"].items():
        if isinstance(v, float):
            assert dirty.description["params"][k] == pytest.approx(v, rel=1e-9), k


def test_outlier_stays_stored_and_is_left_out_of_the_fit(tmp_path):
    st = open_store(str(tmp_path / "s.db"))
    rows = _amdahl_rows(planted=1.8)
    items = []
    for i, (n, _, t) in enumerate(rows):
        rec = RunRecord(platform="p", workload="w", input="small", cores=n,
                        cpus=list(range(n)), threads=n, rep=i, time_s=t)
        items.append(ResultIn(f"m{i}", "a1", "job-1", i, rec, rec.to_dict()))
    st.insert_results(items, now=1.0)
    group = Group("p", "w", "small", "")
    stored = st.group_runs(group)
    assert len(stored) == len(rows) and any(t == 1.8 for _, _, t in stored)
    out = _fit(stored)
    assert out.error is None and out.description["quality"]["outliers_left_out"] == 1
    assert len(st.group_runs(group)) == len(rows)  # fitting removed nothing
