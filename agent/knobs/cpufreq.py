"""CPU frequency knob: read cpufreq policies, set a fixed frequency, verify it, restore.

Two ways to fix a frequency, chosen per policy:

* ``userspace`` governor + ``scaling_setspeed`` where the driver offers it (cpufreq-dt,
  acpi-cpufreq, amd-pstate passive, cppc_cpufreq);
* otherwise (intel_pstate active, amd-pstate active) pin ``scaling_min_freq = scaling_max_freq``
  under the ``performance`` governor, writing the limits in the order the kernel accepts.

Only frequencies the platform offers are accepted: a table entry where the driver has a table,
otherwise a value within cpuinfo_min..cpuinfo_max. After setting, the frequency actually reached
is polled (bounded) and returned, to be recorded with the run. Originals are saved before the
first change (see :mod:`.state`).
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import TYPE_CHECKING, Any

from ..sysfs import KnobUnavailable, SysFS
from .state import STATE_FILENAME, StateKeeper, restore_from_state_file, write_limits

if TYPE_CHECKING:
    from ..runspec import RunSpec

__all__ = ["CpuFreq", "CpuFreqKnob", "FrequencyUnavailable", "read_policies",
           "restore_from_state_file", "STATE_FILENAME"]

log = logging.getLogger("opptune.agent.knobs.cpufreq")

CPUFREQ = "/sys/devices/system/cpu/cpufreq"
BOOST_FILES = ("/sys/devices/system/cpu/cpufreq/boost",
               "/sys/devices/system/cpu/intel_pstate/no_turbo")


class FrequencyUnavailable(ValueError):
    """A frequency the platform does not offer; the message lists what it offers."""


def _policy_names(fs: SysFS) -> list[str]:
    try:
        names = [n for n in fs.listdir(CPUFREQ) if re.match(r"^policy\d+$", n)]
    except KnobUnavailable:
        return []
    return sorted(names, key=lambda n: int(n[6:]))


def read_boost(fs: SysFS) -> dict:
    """Turbo/boost state: the first readable of BOOST_FILES (no_turbo counts inverted)."""
    for rel in BOOST_FILES:
        val = fs.try_int(rel)
        if val is not None:
            enabled = bool(val) if rel.endswith("boost") else not bool(val)
            return {"available": True, "enabled": enabled, "file": rel}
    return {"available": False, "enabled": None, "file": None}


def read_policy(fs: SysFS, name: str) -> dict:
    """Everything the agent knows about one policy; absent files give None."""
    d = f"{CPUFREQ}/{name}"
    related = fs.try_list(f"{d}/related_cpus") or []
    table = fs.try_list(f"{d}/scaling_available_frequencies")  # space separated ints
    setspeed = fs.try_text(f"{d}/scaling_setspeed")
    governors = (fs.try_text(f"{d}/scaling_available_governors") or "").split()
    cur = fs.try_int(f"{d}/cpuinfo_cur_freq")
    return {
        "name": name,
        "cpus": fs.try_list(f"{d}/affected_cpus") or related,
        "related_cpus": related,
        "driver": fs.try_text(f"{d}/scaling_driver"),
        "governor": fs.try_text(f"{d}/scaling_governor"),
        "governors": governors,
        "frequencies_khz": table or None,
        "cpuinfo_min_khz": fs.try_int(f"{d}/cpuinfo_min_freq"),
        "cpuinfo_max_khz": fs.try_int(f"{d}/cpuinfo_max_freq"),
        "base_khz": fs.try_int(f"{d}/base_frequency"),
        "scaling_min_khz": fs.try_int(f"{d}/scaling_min_freq"),
        "scaling_max_khz": fs.try_int(f"{d}/scaling_max_freq"),
        "cur_khz": cur if cur is not None else fs.try_int(f"{d}/scaling_cur_freq"),
        "transition_latency_ns": fs.try_int(f"{d}/cpuinfo_transition_latency"),
        "setspeed": setspeed is not None and "userspace" in governors,
        "method": ("setspeed" if setspeed is not None and "userspace" in governors
                   else "pin-limits"),
    }


def read_policies(sysfs_root="/") -> list[dict]:
    """All policies of the platform (empty list where there is no cpufreq)."""
    fs = sysfs_root if isinstance(sysfs_root, SysFS) else SysFS(sysfs_root)
    return [read_policy(fs, n) for n in _policy_names(fs)]


def offered_khz(policy: dict) -> list[int] | tuple[int, int]:
    """A policy's offer: its table, or the (min, max) range of a table-less driver."""
    if policy["frequencies_khz"]:
        return sorted(policy["frequencies_khz"])
    return (policy["cpuinfo_min_khz"], policy["cpuinfo_max_khz"])


class CpuFreq:
    """The frequency knob of one platform (all access under ``fs``'s root).

    ``state_dir`` holds the state file; with ``install_handlers`` the originals are restored
    on exit, SIGTERM and SIGINT.
    """

    def __init__(self, fs: SysFS | str = "/", state_dir: str | None = None,
                 install_handlers: bool = True, settle_timeout_s: float = 1.0):
        self.fs = fs if isinstance(fs, SysFS) else SysFS(fs)
        state_path = os.path.join(state_dir, STATE_FILENAME) if state_dir else None
        self.keeper = StateKeeper(self.fs, state_path, install_handlers=install_handlers)
        self.settle_timeout_s = settle_timeout_s
        self._policies = {p["name"]: p for p in read_policies(self.fs)}

    @property
    def available(self) -> bool:
        return bool(self._policies)

    @property
    def unavailable_reason(self) -> str | None:
        if self._policies:
            return None
        return f"no cpufreq policies under {self.fs.path(CPUFREQ)}"

    def policies(self) -> list[dict]:
        return [read_policy(self.fs, n) for n in self._policies]

    def policy_of_cpu(self, cpu: int) -> str:
        for name, p in self._policies.items():
            if cpu in (p["related_cpus"] or p["cpus"]):
                return name
        raise KnobUnavailable(f"{CPUFREQ}/policy*", f"no cpufreq policy covers cpu {cpu}")

    def policies_of_cpus(self, cpus) -> list[str]:
        return sorted({self.policy_of_cpu(c) for c in cpus}, key=lambda n: int(n[6:]))

    def check(self, policy: str, khz: int) -> None:
        """Raise FrequencyUnavailable unless ``policy`` offers ``khz``."""
        p = self._get(policy)
        offer = offered_khz(p)
        if isinstance(offer, list):
            if khz not in offer:
                raise FrequencyUnavailable(
                    f"{policy} ({p['driver']}) does not offer {khz} kHz; offered: "
                    f"{', '.join(map(str, offer))} kHz")
        else:
            lo, hi = offer
            if lo is None or hi is None or not lo <= khz <= hi:
                raise FrequencyUnavailable(
                    f"{policy} ({p['driver']}) offers {lo}..{hi} kHz (no table); "
                    f"{khz} kHz is outside")

    def _get(self, policy: str) -> dict:
        try:
            return self._policies[policy]
        except KeyError:
            raise KnobUnavailable(f"{CPUFREQ}/{policy}",
                                  self.unavailable_reason or
                                  f"no such policy; have {', '.join(self._policies)}") from None

    def set(self, settings: dict[str, int], verify: bool = True) -> dict[str, dict]:
        """Fix each policy of ``settings`` ({policy: kHz}) and verify.

        Returns {policy: {"set_khz", "observed_khz", "verified", "settle_s", "method"}}.
        All values are checked before anything is written.
        """
        for policy, khz in settings.items():
            self.check(policy, int(khz))
        out = {}
        for policy, khz in settings.items():
            out[policy] = self._set_one(policy, int(khz), verify)
        return out

    def set_for_cpus(self, cpus, khz: int, verify: bool = True) -> dict[str, dict]:
        """Same frequency on every policy that holds one of ``cpus``."""
        return self.set({p: khz for p in self.policies_of_cpus(cpus)}, verify)

    def _set_one(self, policy: str, khz: int, verify: bool) -> dict:
        p = self._get(policy)
        d = f"{CPUFREQ}/{policy}"
        self.keeper.save_policy(policy)
        if p["setspeed"]:
            if self.fs.read_text(f"{d}/scaling_governor") != "userspace":
                self.fs.write(f"{d}/scaling_governor", "userspace")
            lo = self.fs.read_int(f"{d}/scaling_min_freq")
            hi = self.fs.read_int(f"{d}/scaling_max_freq")
            if not lo <= khz <= hi:
                # Limits left narrow by someone else would clamp setspeed: widen them to allow it.
                write_limits(self.fs, policy, min(lo, khz), max(hi, khz))
            self.fs.write(f"{d}/scaling_setspeed", khz)
            method = "setspeed"
        else:
            if ("performance" in p["governors"]
                    and self.fs.read_text(f"{d}/scaling_governor") != "performance"):
                self.fs.write(f"{d}/scaling_governor", "performance")
            write_limits(self.fs, policy, khz, khz)
            method = "pin-limits"
        observed, ok, settle = (self.read_cur(policy), None, 0.0)
        if verify:
            observed, ok, settle = self.wait_for(policy, khz)
        return {"set_khz": khz, "observed_khz": observed, "verified": ok, "settle_s": settle,
                "method": method}

    def read_cur(self, policy: str) -> int | None:
        """Current frequency: cpuinfo_cur_freq (the hardware's) when readable, else scaling_."""
        d = f"{CPUFREQ}/{policy}"
        cur = self.fs.try_int(f"{d}/cpuinfo_cur_freq")
        return cur if cur is not None else self.fs.try_int(f"{d}/scaling_cur_freq")

    def wait_for(self, policy: str, khz: int, timeout_s: float | None = None,
                 tolerance: float = 0.02) -> tuple[int | None, bool, float]:
        """Poll the current frequency until within ``tolerance`` of ``khz`` or the timeout.

        Returns (observed kHz, reached, seconds waited). Drivers that report an average over
        the last tick (intel_pstate) need a tolerance and may need a tick to catch up.
        """
        timeout_s = self.settle_timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic()
        delay = 0.0005
        while True:
            cur = self.read_cur(policy)
            if cur is not None and abs(cur - khz) <= tolerance * khz:
                return cur, True, time.monotonic() - t0
            waited = time.monotonic() - t0
            if cur is None or waited >= timeout_s:
                return cur, False, waited
            time.sleep(min(delay, max(0.0, timeout_s - waited)))
            delay = min(delay * 2, 0.02)

    def restore(self, keep: frozenset[str] = frozenset()) -> list[str]:
        """Put back the original governors and limits of every policy but those in ``keep``;
        returns problems (empty on success)."""
        return self.keeper.restore(keep)

    def close(self) -> list[str]:
        problems = self.restore()
        self.keeper.disarm()
        return problems

    def __enter__(self) -> "CpuFreq":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CpuFreqKnob:
    """Adapter from :class:`CpuFreq` to the knob plug point (runspec.py).

    A point with ``freq_khz`` pins the policies of its cpus (verified); a point without one
    puts the original state back, so "no frequency" means the board's own governor, except on
    the policies whose clocks configurations in force hold where it is told them (``held``:
    a configuration's verification, measured at the clocks the board keeps with it; a job's
    point, told only those on the policies its cpus do not share, agent/apply.py). Either
    way the frequency observed per policy goes into the record."""

    name = "cpufreq"

    def __init__(self, cpufreq: Any):
        self.cf = cpufreq

    def apply(self, spec: "RunSpec", held: "list[RunSpec] | None" = None) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if spec.freq_khz is None and held:
            self.rest(held)  # their clocks stay set; every other policy back to its original
        elif spec.freq_khz is None:
            self.cf.restore()
        else:
            res = self.cf.set_for_cpus(spec.cpus, int(spec.freq_khz))
            bad = [p for p, r in res.items() if r.get("verified") is False]
            fields = {"freq_mhz": spec.freq_khz / 1000.0}
            if bad:
                fields["extra"] = {"freq_unverified": bad}
        observed = {}
        for pol in self.cf.policies_of_cpus(spec.cpus):
            cur = self.cf.read_cur(pol)
            if cur is not None:
                observed[pol] = cur / 1000.0
        fields["freq_observed_mhz"] = observed or None
        return fields

    def rest(self, specs: "RunSpec | list[RunSpec]") -> None:
        """The board at rest under standing configurations (oldest first): the policies of
        their cpus set to their clocks, the newest one's where several share a policy
        (shared/standing.py), straight from whatever the last point left (passing through the
        original governor would move the clock twice between jobs); every other policy back
        to its original."""
        plan: dict[str, int] = {}
        for spec in specs if isinstance(specs, list) else [specs]:
            if spec.freq_khz is not None:
                plan.update(dict.fromkeys(self.cf.policies_of_cpus(spec.cpus),
                                          int(spec.freq_khz)))
        if not plan:
            self.restore()
            return
        problems = self.cf.restore(frozenset(plan))
        if problems:
            log.error("cpufreq restore problems: %s", "; ".join(problems))
        self.cf.set(plan)

    def restore(self) -> None:
        problems = self.cf.restore()
        if problems:
            log.error("cpufreq restore problems: %s", "; ".join(problems))
