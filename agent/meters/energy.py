"""Energy of one run, from whatever the board has (all reads through SysFS).

Sources, best first:

* ``rapl``: powercap zones ``/sys/class/powercap/intel-rapl:N`` (package) and ``:N:M`` (dram),
  ``energy_uj`` counters, wrap-around handled with ``max_energy_range_uj``;
* ``hwmon-energy``: hwmon ``energy*_input`` counters (microjoules);
* ``hwmon-power``: hwmon ``power*_input`` (microwatts; INA219/INA226/INA231/INA3221 as on Jetson
  and ODROID) sampled in a background thread and integrated with the trapezoid rule;
* ``energy-model-estimate``: the kernel energy model in debugfs (mW per performance state)
  times each cpu's busy time from /proc/stat. An estimate, labelled so.

No source gives ``(None, None, reason)``: never zero.
"""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING, Any

from ..sysfs import KnobUnavailable, SysFS
from .interference import USER_HZ, cpu_ticks

if TYPE_CHECKING:
    from ...shared.records import RunRecord
    from ..runspec import RunSpec

POWERCAP = "/sys/class/powercap"
HWMON = "/sys/class/hwmon"
EM = "/sys/kernel/debug/energy_model"
CPUFREQ = "/sys/devices/system/cpu/cpufreq"


def counter_delta(start: int, end: int, max_range: int | None) -> int:
    """Increase of a wrapping counter (one wrap at most between two reads)."""
    if end >= start or not max_range:
        return end - start
    return end + (max_range - start) + 1


def trapezoid(samples: list[tuple[float, float]]) -> float:
    """Integral of (t, value) samples."""
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(samples, samples[1:]))


class _Rapl:
    source = "rapl"

    def __init__(self, fs: SysFS, zones: list[str]):
        self.fs, self.zones = fs, zones
        self.ranges = {z: fs.try_int(f"{POWERCAP}/{z}/max_energy_range_uj") for z in zones}
        self.label = "rapl:" + "+".join(fs.try_text(f"{POWERCAP}/{z}/name", z) for z in zones)

    def _read(self):
        return {z: self.fs.read_int(f"{POWERCAP}/{z}/energy_uj") for z in self.zones}

    def start(self):
        self._t0 = self._read()

    def stop(self) -> float:
        t1 = self._read()
        return sum(counter_delta(self._t0[z], t1[z], self.ranges[z]) for z in self.zones) / 1e6


class _HwmonEnergy:
    source = "hwmon-energy"

    def __init__(self, fs: SysFS, files: list[str]):
        self.fs, self.files = fs, files
        self.label = "hwmon-energy:" + "+".join(files)

    def start(self):
        self._t0 = [self.fs.read_int(f) for f in self.files]

    def stop(self) -> float:
        return sum(self.fs.read_int(f) - a for f, a in zip(self.files, self._t0)) / 1e6


class _HwmonPower:
    source = "hwmon-power"

    def __init__(self, fs: SysFS, files: list[str], interval_s: float):
        self.fs, self.files, self.interval_s = fs, files, interval_s
        self.label = "hwmon-power:" + "+".join(files)
        self.samples: list[tuple[float, float]] = []

    def _sample(self):
        watts = sum(self.fs.read_int(f) for f in self.files) / 1e6
        self.samples.append((time.monotonic(), watts))

    def _loop(self):
        # Event.wait paces the sampler and lets stop() end it at once.
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except KnobUnavailable:
                pass

    def start(self):
        self.samples = []
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="opptune-power", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return trapezoid(self.samples)


class _EnergyModel:
    source = "energy-model-estimate"

    def __init__(self, fs: SysFS, domains: list[tuple[list[int], dict[int, float]]]):
        self.fs, self.domains = fs, domains
        self.label = "energy-model-estimate (kernel EM x /proc/stat busy time)"

    def _busy(self) -> dict[int, float]:
        """cpu -> busy seconds so far (all but idle and iowait)."""
        return {c: busy / USER_HZ for c, (busy, _) in cpu_ticks(self.fs).items()}

    def _power_w(self, cpus: list[int], table: dict[int, float]) -> float:
        pol = None
        for c in cpus:
            link = f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq"
            pol = self.fs.try_int(link)
            if pol is not None:
                break
        f = pol if pol is not None else max(table)
        best = min(table, key=lambda k: abs(k - f))
        return table[best] / 1000.0

    def start(self):
        self._b0 = self._busy()

    def stop(self) -> float:
        b1 = self._busy()
        total = 0.0
        for cpus, table in self.domains:
            w = self._power_w(cpus, table)
            total += w * sum(b1.get(c, 0) - self._b0.get(c, 0) for c in cpus)
        return total


class EnergyMeter:
    """Measures one run's energy; build it with :meth:`discover`."""

    def __init__(self, backend=None, reason: str | None = None):
        self.backend = backend
        self.reason = reason

    @property
    def source(self) -> str | None:
        return self.backend.label if self.backend else None

    @classmethod
    def discover(cls, sysfs_root="/", sample_interval_s: float = 0.01) -> "EnergyMeter":
        fs = sysfs_root if isinstance(sysfs_root, SysFS) else SysFS(sysfs_root)
        tried = []
        zones = cls._rapl_zones(fs)
        if zones:
            return cls(_Rapl(fs, zones))
        tried.append(f"no readable RAPL zone under {POWERCAP}")
        energy, power = cls._hwmon_files(fs)
        if energy:
            return cls(_HwmonEnergy(fs, energy))
        if power:
            return cls(_HwmonPower(fs, power, sample_interval_s))
        tried.append(f"no hwmon energy*/power*_input under {HWMON}")
        domains = cls._em_domains(fs)
        if domains:
            return cls(_EnergyModel(fs, domains))
        tried.append(f"no energy model in {EM} (debugfs mounted? root?)")
        return cls(None, "no energy sensor: " + "; ".join(tried))

    @staticmethod
    def _rapl_zones(fs: SysFS) -> list[str]:
        try:
            names = fs.listdir(POWERCAP)
        except KnobUnavailable:
            return []
        zones = []
        for z in names:
            m = re.match(r"^intel-rapl:(\d+)(?::(\d+))?$", z)
            if not m:
                continue
            name = fs.try_text(f"{POWERCAP}/{z}/name", "")
            # Packages and dram; core/uncore subzones are already inside the package count.
            if (m.group(2) is None or name == "dram") and \
                    fs.try_int(f"{POWERCAP}/{z}/energy_uj") is not None:
                zones.append(z)
        return zones

    @staticmethod
    def _hwmon_files(fs: SysFS) -> tuple[list[str], list[str]]:
        energy, power = [], []
        try:
            devs = fs.listdir(HWMON)
        except KnobUnavailable:
            return energy, power
        for dev in devs:
            try:
                files = fs.listdir(f"{HWMON}/{dev}")
            except KnobUnavailable:
                continue
            for f in files:
                path = f"{HWMON}/{dev}/{f}"
                if re.match(r"^energy\d+_input$", f) and fs.try_int(path) is not None:
                    energy.append(path)
                elif re.match(r"^power\d+_input$", f) and fs.try_int(path) is not None:
                    power.append(path)
        return energy, power

    @staticmethod
    def _em_domains(fs: SysFS) -> list[tuple[list[int], dict[int, float]]]:
        try:
            pds = fs.listdir(EM)
        except KnobUnavailable:
            return []
        out = []
        for pd in pds:
            cpus = fs.try_list(f"{EM}/{pd}/cpus")
            if not cpus:
                continue
            table = {}
            for ps in fs.listdir(f"{EM}/{pd}"):
                if ps.startswith("ps:"):
                    f = fs.try_int(f"{EM}/{pd}/{ps}/frequency")
                    p = fs.try_int(f"{EM}/{pd}/{ps}/power")
                    if f is not None and p is not None:
                        table[f] = float(p)
            if table:
                out.append((cpus, table))
        return out

    def start(self) -> "EnergyMeter":
        if self.backend:
            try:
                self.backend.start()
            except KnobUnavailable as exc:
                self.reason, self.backend = f"energy sensor failed at start: {exc}", None
        return self

    def stop(self) -> tuple[float | None, str | None, str | None]:
        if not self.backend:
            return None, None, self.reason
        try:
            joules = self.backend.stop()
        except KnobUnavailable as exc:
            return None, self.backend.label, f"energy sensor failed at stop: {exc}"
        if joules <= 0:
            # no run costs nothing: the meter did not see it (a real command on a virtual
            # board, whose counters move for its modelled runs only) or ticked too coarsely
            return None, self.backend.label, (
                f"{self.backend.label} counted 0 J over the run: the run was shorter than "
                "its resolution, or the meter does not see it (a real command on a virtual "
                "board, whose counters move for its modelled runs only)")
        return joules, self.backend.label, None


class EnergyRunMeter:
    """Adapter from :class:`EnergyMeter` (RAPL, hwmon, energy model) to the meter plug point
    (runspec.py)."""

    name = "energy"

    def __init__(self, sysfs_root: str = "/"):
        self._discover = lambda: EnergyMeter.discover(sysfs_root)
        self._meter = None

    def start(self, spec: "RunSpec") -> None:
        self._meter = self._discover().start()

    def stop(self, record: "RunRecord", ctx: dict[str, Any]) -> None:
        meter, self._meter = self._meter, None
        if meter is None:
            return
        joules, source, reason = meter.stop()
        if joules is not None and record.energy_j is None:
            record.energy_j, record.energy_source = float(joules), source
            record.invalid.pop("energy_j", None)
        elif joules is None and record.energy_j is None:
            record.invalid["energy_j"] = reason or "no energy reading"
