"""Accuracy of the power model, and of energy = power x time, on the datasets that measure power.

    python3 benchmarks/energy_fit.py        # about 10 s

Power (``models/energy.PowerModeler``, one fit per group, medians over repetitions): MAPE of
the measured power in-sample, holding out the highest frequency, and holding out the largest
core count (each hold-out refits without those rows); each cell is the mean / median over the
groups. powmon_xu3_a15 has a voltage column and a cores x frequency grid; loghin has one
frequency per board (the ``cores`` form).

Energy (what ``opptune fit`` + ``opptune predict`` give for an unseen configuration): on
loghin, per group, train on the smaller half of the core counts (the peers' extrapolate-cores
split), fit the time model by the automatic choice (``select.choose`` over the analytic models,
validated for the test core counts) and the power model, and predict energy = P t at the larger
core counts; pooled MAPE of energy, time and power over all test points.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from opptune.daemon.models.base import NotEnoughData, Observations, fit_quality
from opptune.daemon.models.energy import PowerModeler, measured_power, predict_energy
from opptune.daemon.models.select import ANALYTIC, choose
from opptune.daemon.tidy import median_reps, read_tidy

DATA = Path(__file__).resolve().parent.parent / "data"
POWER_SETS = (("powmon_xu3_a15", True), ("loghin_multicore_energy", False))


def _power_groups(name: str) -> list[Observations]:
    """Groups of a dataset (medians over repetitions) with at least 4 power measurements."""
    out = []
    for g in read_tidy(DATA / name / "data.csv"):
        obs = median_reps(g.obs)
        power = measured_power(obs)
        ok = np.isfinite(power) & (power > 0)
        if ok.sum() >= 4:
            out.append(obs.subset(ok))
    return out


def power_table(name: str, uncore: bool) -> dict[str, tuple[float, float, int]]:
    """(mean, median of the group MAPEs, groups) per evaluation of one dataset."""
    cells: dict[str, list[float]] = {"in-sample": [], "hold out max freq": [],
                                     "hold out max cores": []}
    for obs in _power_groups(name):
        modeler = PowerModeler(uncore=uncore)
        truth = measured_power(obs)
        try:
            cells["in-sample"].append(
                fit_quality(truth, modeler.fit(obs).predict(obs).value)["mape"])
        except NotEnoughData:
            continue
        holds = [("hold out max cores", obs.cores == obs.cores.max())]
        if obs.has_freq() and np.unique(obs.freq_mhz).size > 2:
            holds.append(("hold out max freq", obs.freq_mhz == np.nanmax(obs.freq_mhz)))
        for label, test in holds:
            try:
                fit = modeler.fit(obs.subset(~test))
            except NotEnoughData:
                continue
            cells[label].append(
                fit_quality(truth[test], fit.predict(obs.subset(test)).value)["mape"])
    return {k: (float(np.mean(v)), float(np.median(v)), len(v)) for k, v in cells.items() if v}


def energy_extrapolation(name: str = "loghin_multicore_energy") -> dict[str, float]:
    """Pooled MAPE of energy, time and power at the larger half of each group's core counts."""
    ape: dict[str, list[float]] = {"energy_j": [], "time_s": [], "power_w": []}
    groups = 0
    for g in read_tidy(DATA / name / "data.csv"):
        obs = median_reps(g.obs)
        obs = obs.subset(np.isfinite(obs.time_s) & (obs.time_s > 0)
                         & np.isfinite(obs.energy_j) & (obs.energy_j > 0))
        counts = np.unique(obs.cores)
        if counts.size < 4:
            continue
        cut = counts[int(np.ceil(counts.size / 2)) - 1]
        train, test = obs.subset(obs.cores <= cut), obs.subset(obs.cores > cut)
        try:
            time_model = choose(train, list(ANALYTIC), target=test).model
            power_model = PowerModeler().fit(train)
        except NotEnoughData:
            continue
        pred = predict_energy(time_model, power_model, test)
        truth = {"energy_j": test.energy_j, "time_s": test.time_s,
                 "power_w": measured_power(test)}
        for key, values in ape.items():
            values.extend(100 * np.abs(pred[key].value - truth[key]) / truth[key])
        groups += 1
    return {**{k: float(np.mean(v)) for k, v in ape.items()}, "groups": groups,
            "points": len(ape["energy_j"])}


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    print("power model, MAPE % (mean / median over groups, groups):")
    for name, has_voltage in POWER_SETS:
        for uncore in ((False, True) if has_voltage else (False,)):
            label = f"{name}{' + uncore' if uncore else ''}"
            for key, (mean, med, n) in power_table(name, uncore).items():
                print(f"  {label:40s} {key:20s} {mean:5.1f} / {med:5.1f}  ({n})")
    e = energy_extrapolation()
    print(f"\nenergy at unseen core counts (loghin, train on the smaller half of the counts, "
          f"{e['groups']} groups, {e['points']} points), pooled MAPE %:")
    print(f"  energy {e['energy_j']:.1f}   time {e['time_s']:.1f}   power {e['power_w']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
