"""Thermal state around a run, and whether the run was throttled (all reads through SysFS).

Recorded: every /sys/class/thermal/thermal_zone* (type, temperature before and after the run
and the highest seen while it ran, its lowest passive trip point), the increase of the x86
thermal_throttle counters of the run's cpus (cpuN/thermal_throttle/*_throttle_count) and the
frequency of the run's cpus (the median of samples taken while it ran and just after).

A run is throttled when a zone reached its passive trip point, a throttle counter increased, or
a set frequency was not held (observed below it by more than 5 %). Throttled runs are stored
but kept out of fits: they measure the cooling, not the configuration. A board without thermal
zones records that as unavailable; it never fails a run.
"""

from __future__ import annotations

import re
import statistics
import threading
from typing import TYPE_CHECKING, Any

from ..sysfs import KnobUnavailable, SysFS

if TYPE_CHECKING:
    from ...shared.records import RunRecord
    from ..runspec import RunSpec

THERMAL = "/sys/class/thermal"
CPU = "/sys/devices/system/cpu"
FREQ_SLACK = 0.05  # observed below set by more than this fraction: the frequency was capped
SAMPLE_S = 0.1


def zone_names(fs: SysFS) -> list[str]:
    try:
        names = [n for n in fs.listdir(THERMAL) if re.match(r"^thermal_zone\d+$", n)]
    except KnobUnavailable:
        return []
    return sorted(names, key=lambda n: int(n[12:]))


def passive_trip_mc(fs: SysFS, zone: str) -> int | None:
    """The lowest passive trip point of a zone in millidegrees (None: it has none)."""
    d = f"{THERMAL}/{zone}"
    trips = []
    try:
        files = fs.listdir(d)
    except KnobUnavailable:
        return None
    for name in files:
        m = re.match(r"^trip_point_(\d+)_type$", name)
        if m and fs.try_text(f"{d}/{name}") == "passive":
            t = fs.try_int(f"{d}/trip_point_{m.group(1)}_temp")
            if t is not None and t > 0:
                trips.append(t)
    return min(trips) if trips else None


def throttle_counters(fs: SysFS) -> list[str]:
    """The x86 thermal_throttle counters this machine has ("cpuN/core_throttle_count", ...)."""
    try:
        cpus = [n for n in fs.listdir(CPU) if re.match(r"^cpu\d+$", n)]
    except KnobUnavailable:
        return []
    return [f"{cpu}/{leaf}" for cpu in cpus
            for leaf in ("core_throttle_count", "package_throttle_count")
            if fs.exists(f"{CPU}/{cpu}/thermal_throttle/{leaf}")]


def throttle_counts(fs: SysFS, names: list[str]) -> dict[str, int]:
    out = {}
    for name in names:
        cpu, leaf = name.split("/")
        v = fs.try_int(f"{CPU}/{cpu}/thermal_throttle/{leaf}")
        if v is not None:
            out[name] = v
    return out


class ThermalMeter:
    """Meter plug point (runspec.py): thermal zones and throttling of each run."""

    name = "thermal"

    def __init__(self, sysfs_root: str | SysFS = "/"):
        self.fs = sysfs_root if isinstance(sysfs_root, SysFS) else SysFS(sysfs_root)
        self.zones = zone_names(self.fs)
        self.trips = {z: passive_trip_mc(self.fs, z) for z in self.zones}
        self.types = {z: self.fs.try_text(f"{THERMAL}/{z}/type", z) for z in self.zones}
        self.counters = throttle_counters(self.fs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _temps(self) -> dict[str, int | None]:
        return {z: self.fs.try_int(f"{THERMAL}/{z}/temp") for z in self.zones}

    def _freqs(self) -> dict[int, int]:
        out = {}
        for c in self._cpus:
            v = self.fs.try_int(f"{CPU}/cpu{c}/cpufreq/scaling_cur_freq")
            if v is not None:
                out[c] = v
        return out

    def start(self, spec: "RunSpec") -> None:
        self._cpus = list(spec.cpus)
        self._before = self._temps()
        self._max = dict(self._before)
        self._freq_seen: dict[int, list[int]] = {}
        # the counters of the run's own cpus: throttling elsewhere does not pace this run
        mine = {f"cpu{c}" for c in self._cpus}
        self._names = [n for n in self.counters if n.split("/")[0] in mine]
        self._counts = throttle_counts(self.fs, self._names)
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="opptune-thermal",
                                        daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._observe()

    def _observe(self) -> None:
        for z, t in self._temps().items():
            if t is not None and (self._max.get(z) is None or t > self._max[z]):
                self._max[z] = t
        for c, f in self._freqs().items():
            self._freq_seen.setdefault(c, []).append(f)

    def stop(self, record: "RunRecord", ctx: dict[str, Any]) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._observe()
        after = self._temps()
        reasons = []
        zones = []
        for z in self.zones:
            b, a, mx, trip = self._before.get(z), after.get(z), self._max.get(z), self.trips[z]
            zones.append({"zone": z, "type": self.types[z], "before_c": _c(b), "after_c": _c(a),
                          "max_c": _c(mx), "passive_c": _c(trip)})
            if trip is not None and mx is not None and mx >= trip:
                reasons.append(f"{self.types[z]} reached {mx / 1000:g} C (passive trip "
                               f"{trip / 1000:g} C)")
        counts = throttle_counts(self.fs, self._names)
        events = {k: v - self._counts.get(k, v) for k, v in counts.items()
                  if v > self._counts.get(k, v)}
        if events:
            reasons.append(f"thermal_throttle counters increased on {len(events)} cpu(s)")
        # the median of the samples (while it ran and just after): one low reading of a
        # frequency averaged over an idle tick is not throttling
        held = {c: statistics.median_low(v) for c, v in sorted(self._freq_seen.items())}
        if record.freq_mhz:
            low = {c: f for c, f in held.items()
                   if f < record.freq_mhz * 1000 * (1 - FREQ_SLACK)}
            if low:
                c, f = min(low.items(), key=lambda kv: kv[1])
                reasons.append(f"cpu{c} ran at {f / 1000:g} MHz, below the set "
                               f"{record.freq_mhz:g} MHz")
        record.thermal = {"zones": zones, "throttle_events": events,
                          "freq_mhz": {str(c): f / 1000 for c, f in held.items()} or None,
                          "reasons": reasons}
        if not zones:
            record.invalid["thermal"] = (f"no thermal zones under {self.fs.path(THERMAL)}")
        record.throttled = bool(reasons)


def _c(mc: int | None) -> float | None:
    return None if mc is None else mc / 1000
