"""recommend.py: the fewest cores within the tolerance of the best predicted time."""

import numpy as np
import pytest

from opptune.daemon.models.base import FittedModel, Observations, Prediction
from opptune.daemon.planner import plan_sweep
from opptune.daemon.recommend import fewest_within, recommend
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
