"""Is this board fit for measuring? (``opptune doctor``; sent with the agent's hello.)

The checks are those of ``pyperf system show`` (ASLR, isolated cpus, governor, boost, perf
sample rate, IRQ affinity) plus what a sweep needs beyond them: the load now, temperatures,
the knobs and meters opptune can use and the clock source. Every read goes through
:class:`SysFS`, so a fake tree or a virtual board describes itself; a file that is missing or
unreadable makes its check ``unavailable`` with the reason, never an exception.

Each check is ``{"name", "value", "verdict", "advice"}``: verdict ``ok``, ``warn`` (it can
make measurements wrong or noisy; advice says what to change) or ``unavailable``. An ``ok``
check may carry advice too: a hint that makes runs quieter still, as pyperf gives it. An
``unavailable`` check has ``reason`` instead.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..shared.cpus import format_cpu_list
from .knobs.cpufreq import BOOST_FILES, read_boost
from .meters.thermal import THERMAL, passive_trip_mc, zone_names
from .sysfs import KnobUnavailable, SysFS

CPU = "/sys/devices/system/cpu"
ASLR = "/proc/sys/kernel/randomize_va_space"
SAMPLE_RATE = "/proc/sys/kernel/perf_event_max_sample_rate"
PARANOID = "/proc/sys/kernel/perf_event_paranoid"
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
# Governors under which a run's frequency does not follow its load: "userspace" is how the
# agent pins a frequency itself.
STEADY_GOVERNORS = ("performance", "userspace")
LOAD_WARN = 0.5  # 1-minute load average above which something else is running
TEMP_MARGIN_C = 10.0  # a zone closer than this to its passive trip point is about to throttle
# Clock sources whose reads are slow (a bus access per time stamp) or coarse (a tick)
SLOW_CLOCKS = ("hpet", "acpi_pm", "jiffies", "refined-jiffies", "pit")

_ASLR_STATES = {"0": "no randomization", "1": "conservative randomization",
                "2": "full randomization"}


def _check(name: str, value: Any, verdict: str, advice: str | None = None,
           short: str | None = None) -> dict[str, Any]:
    """One check; ``short`` is what the one-line summary says of a warning. Every check has
    the same keys (``opptune doctor --json``): ``short`` is None but for a warning, ``reason``
    None but for a check that could not be made."""
    return {"name": name, "value": value, "verdict": verdict, "advice": advice,
            "short": (short or name) if verdict == "warn" else None, "reason": None}


def _missing(name: str, exc: KnobUnavailable | str) -> dict[str, Any]:
    """A check that could not be made: ``reason`` says which file was missing or odd."""
    return {**_check(name, None, "unavailable"), "reason": str(exc)}


def check_aslr(fs: SysFS) -> dict[str, Any]:
    try:
        text = fs.read_text(ASLR)
    except KnobUnavailable as exc:
        return _missing("aslr", exc)
    state = _ASLR_STATES.get(text)
    if state is None:
        return _missing("aslr", f"{ASLR}: unknown value {text[:20]!r}")
    if text == "2":
        return _check("aslr", f"{text} ({state})", "ok")
    # Full randomization lets each run sample another memory layout, so the repetitions of a
    # point average layout effects out instead of all carrying one lucky or unlucky layout.
    return _check("aslr", f"{text} ({state})", "warn",
                  f"enable full randomization: echo 2 > {ASLR}", f"ASLR {state}")


def check_isolated(fs: SysFS, sweep_cpus: list[int]) -> dict[str, Any]:
    isolated = fs.try_list(f"{CPU}/isolated")
    nohz = fs.try_list(f"{CPU}/nohz_full")
    if isolated is None and nohz is None:
        return _missing("isolated_cpus", f"neither {CPU}/isolated nor {CPU}/nohz_full is "
                                         "readable")
    value = (f"isolated: {format_cpu_list(isolated) if isolated else 'none'}; "
             f"nohz_full: {format_cpu_list(nohz) if nohz else 'none'}")
    if not isolated:
        return _check("isolated_cpus", value, "ok",
                      "for quieter runs keep the system off the cpus a sweep uses: kernel "
                      "parameters isolcpus=<cpus> nohz_full=<cpus> rcu_nocbs=<cpus>, leaving "
                      "cpu 0 to the system")
    mixed = sorted(set(isolated) & set(sweep_cpus))
    if mixed and len(mixed) < len(sweep_cpus):
        # isolcpus removes cpus from load balancing: a sweep point spanning isolated and
        # ordinary cpus runs its threads under two different schedulers
        return _check("isolated_cpus", value, "warn",
                      f"the sweep uses isolated cpus {format_cpu_list(mixed)} and ordinary "
                      f"ones: sweep only isolated cpus or none",
                      "sweep mixes isolated and ordinary cpus")
    return _check("isolated_cpus", value, "ok")


def _policies(fs: SysFS) -> list[str]:
    try:
        names = [n for n in fs.listdir(f"{CPU}/cpufreq") if re.match(r"^policy\d+$", n)]
    except KnobUnavailable:
        return []
    return sorted(names, key=lambda n: int(n[6:]))


def check_governor(fs: SysFS, can_pin: bool) -> dict[str, Any]:
    cpus_of: dict[str, list[int]] = {}  # governor -> its cpus: one entry per governor, not
    for p in _policies(fs):              # per policy (x86 has a policy per cpu)
        g = fs.try_text(f"{CPU}/cpufreq/{p}/scaling_governor")
        if g is not None:
            cpus_of.setdefault(g, []).extend(
                fs.try_list(f"{CPU}/cpufreq/{p}/affected_cpus")
                or fs.try_list(f"{CPU}/cpufreq/{p}/related_cpus") or [])
    if not cpus_of:
        return _missing("governor", f"no readable scaling_governor under {CPU}/cpufreq "
                                    "(no cpufreq: the frequency is the firmware's)")
    value = "; ".join(f"{g} (cpus {format_cpu_list(c) or '?'})" for g, c in cpus_of.items())
    dynamic = sorted(g for g in cpus_of if g not in STEADY_GOVERNORS)
    if not dynamic:
        return _check("governor", value, "ok")
    advice = "set the governor to performance (cpupower frequency-set -g performance)"
    advice += (" or let opptune pin frequencies (sweep with --freq)" if can_pin else
               "; opptune cannot pin frequencies here (cpufreq is not writable for the agent)")
    return _check("governor", value, "warn", advice, f"governor {'/'.join(dynamic)}")


def check_boost(fs: SysFS) -> dict[str, Any]:
    b = read_boost(fs)
    if not b["available"]:
        return _missing("boost", f"neither {' nor '.join(BOOST_FILES)} is readable")
    on = b["enabled"]
    how = f"echo {0 if b['file'].endswith('boost') else 1} > {b['file']}"
    if not on:
        return _check("boost", "off", "ok")
    # a boosted frequency depends on temperature and on how many cores are busy: the same
    # configuration measures differently from one run to the next
    return _check("boost", "on", "warn", f"disable turbo/boost: {how}", "boost on")


def check_perf_event(fs: SysFS, euid: int) -> dict[str, Any]:
    rate = fs.try_int(SAMPLE_RATE)
    paranoid = fs.try_int(PARANOID)
    if rate is None and paranoid is None:
        return _missing("perf_event", f"neither {SAMPLE_RATE} nor {PARANOID} is readable")
    value = f"max sample rate {rate if rate is not None else '?'}/s, paranoid " \
            f"{paranoid if paranoid is not None else '?'}"
    if paranoid is not None and paranoid > 2 and euid != 0:
        return _check("perf_event", value, "warn",
                      "an unprivileged agent cannot open perf counters: sysctl "
                      "kernel.perf_event_paranoid=2 (or lower), or run the agent as root",
                      f"perf_event_paranoid {paranoid}")
    hints = []
    if rate is not None and rate > 1:
        hints.append(f"a profiler beside the sweep interrupts it less with "
                     f"'sysctl kernel.perf_event_max_sample_rate=1'")
    if paranoid == 2 and euid != 0:
        hints.append("counts are user-space only: kernel.perf_event_paranoid=1 adds kernel time")
    return _check("perf_event", value, "ok", "; ".join(hints) or None)


def _affinity_mask(text: str) -> list[int]:
    """CPUs of a hex affinity mask ("ff" or "00000000,000000ff")."""
    bits = int(text.replace(",", ""), 16)
    return [i for i in range(bits.bit_length()) if bits >> i & 1]


def check_irqs(fs: SysFS, sweep_cpus: list[int]) -> dict[str, Any]:
    try:
        irqs = [n for n in fs.listdir("/proc/irq") if n.isdigit()]
    except KnobUnavailable as exc:
        return _missing("irq_affinity", exc)
    try:
        default = _affinity_mask(fs.read_text("/proc/irq/default_smp_affinity"))
    except (KnobUnavailable, ValueError):
        default = None
    # an irq with a handler has a subdirectory named after it: only those can interrupt a run
    used = [n for n in irqs if any(os.path.isdir(fs.path(f"/proc/irq/{n}/{e}"))
                                   for e in _listdir(fs, f"/proc/irq/{n}"))] or irqs
    sweep = set(sweep_cpus)
    on_sweep = []
    for n in used:
        cpus = fs.try_list(f"/proc/irq/{n}/smp_affinity_list")
        if cpus is not None and sweep & set(cpus):
            on_sweep.append(int(n))
    value = (f"{len(on_sweep)} of {len(used)} irqs may run on the sweep's cpus "
             f"{format_cpu_list(sweep_cpus)}; default affinity "
             f"{format_cpu_list(default) if default is not None else '?'}")
    if not on_sweep:
        return _check("irq_affinity", value, "ok")
    online = set(fs.try_list(f"{CPU}/online") or sweep_cpus)
    outside = sorted(online - sweep)
    if not outside:
        return _check("irq_affinity", value, "ok",
                      "the sweep uses every cpu, so irqs have nowhere else to go; sweeping "
                      "fewer cores (--max-cores) leaves a cpu for them")
    return _check("irq_affinity", value, "warn",
                  f"route irqs to cpus outside the sweep: stop irqbalance, write "
                  f"{format_cpu_list(outside)} to /proc/irq/*/smp_affinity_list and its mask "
                  f"to /proc/irq/default_smp_affinity", "irqs on sweep cpus")


def _listdir(fs: SysFS, rel: str) -> list[str]:
    try:
        return fs.listdir(rel)
    except KnobUnavailable:
        return []


def check_load(fs: SysFS) -> dict[str, Any]:
    try:
        words = fs.read_words("/proc/loadavg")
        load = [float(w) for w in words[:3]]
    except KnobUnavailable as exc:
        return _missing("load", exc)
    except ValueError:
        return _missing("load", f"/proc/loadavg: unexpected content {' '.join(words)[:40]!r}")
    value = "load average " + " ".join(f"{x:.2f}" for x in load)
    if load[0] > LOAD_WARN:
        return _check("load", value, "warn",
                      "something else is running: stop it, or measure later (runs beside it "
                      "measure the neighbour too)", f"load {load[0]:.2f}")
    return _check("load", value, "ok")


def check_temperature(fs: SysFS) -> dict[str, Any]:
    zones = zone_names(fs)
    if not zones:
        return _missing("temperature", f"no thermal zones under {THERMAL}")
    parts, hot = [], []
    for z in zones:
        t = fs.try_int(f"{THERMAL}/{z}/temp")
        if t is None:
            continue
        kind = fs.try_text(f"{THERMAL}/{z}/type", z)
        trip = passive_trip_mc(fs, z)
        parts.append(f"{kind} {t / 1000:g} C" + (f" (passive {trip / 1000:g} C)" if trip else ""))
        if trip and t / 1000 > trip / 1000 - TEMP_MARGIN_C:
            hot.append(kind)
    if not parts:
        return _missing("temperature", f"no readable temperature under {THERMAL}")
    value = "; ".join(parts)
    if hot:
        return _check("temperature", value, "warn",
                      f"{', '.join(hot)} within {TEMP_MARGIN_C:g} C of throttling: let the "
                      "board cool, improve its cooling", f"{hot[0]} hot")
    return _check("temperature", value, "ok")


def check_clocksource(fs: SysFS) -> dict[str, Any]:
    try:
        clock = fs.read_text(CLOCKSOURCE)
    except KnobUnavailable as exc:
        return _missing("clocksource", exc)
    if clock in SLOW_CLOCKS:
        avail = fs.try_text(CLOCKSOURCE.replace("current_", "available_"), "")
        return _check("clocksource", clock, "warn",
                      f"{clock} makes every time stamp slow or coarse; choose another of "
                      f"'{avail}' (clocksource= kernel parameter)", f"clocksource {clock}")
    return _check("clocksource", clock, "ok")


def check_knobs(fs: SysFS, facts: dict[str, Any]) -> dict[str, Any]:
    cf = facts.get("cpufreq") or {}
    cgroup = fs.exists("/sys/fs/cgroup/cgroup.controllers")
    cpuset = cgroup and "cpuset" in (fs.try_text("/sys/fs/cgroup/cgroup.controllers") or "")
    value = (f"cores: sched_setaffinity; frequency: "
             f"{'writable cpufreq' if cf.get('available') else 'no'}; unit cpusets: "
             f"{'cgroup v2 cpuset' if cpuset else 'no'}")
    if not cf.get("available"):
        # not a fault of the measurement: the governor check says whether it drifts
        governed = any(fs.try_text(f"{CPU}/cpufreq/{p}/scaling_governor") is not None
                       for p in _policies(fs))
        return _check("knobs", value, "ok",
                      f"opptune cannot set frequencies ({cf.get('reason') or 'no cpufreq'}): "
                      "sweeps measure cores only, at "
                      + ("the governor's frequency" if governed else
                         "the board's own frequency (no governor: the firmware's)"))
    return _check("knobs", value, "ok")


def check_meters(facts: dict[str, Any]) -> dict[str, Any]:
    energy, perf = facts.get("energy") or {}, facts.get("perf") or {}
    value = (f"energy: {energy.get('source') if energy.get('available') else 'no'}; "
             f"perf counters: {'yes' if perf.get('available') else 'no'}")
    missing = [f"{k}: {m.get('reason')}" for k, m in (("energy", energy), ("perf", perf))
               if not m.get("available")]
    # without them the runs still measure time: a hint, not a warning
    return _check("meters", value, "ok", "; ".join(missing) or None)


def _facts(root: str) -> dict[str, Any]:
    """What discover() gives the agent, for a doctor run without an agent."""
    from .platform import cpufreq_availability, energy_availability, perf_availability
    from .topology import read_topology
    out: dict[str, Any] = {}
    try:
        topo = read_topology(root)
    except Exception:
        topo = {}
    out["sweep_order"] = topo.get("sweep_order") or topo.get("cpus_online")
    for name, fn in (("cpufreq", lambda: cpufreq_availability(root, topo)),
                     ("perf", lambda: perf_availability(root)),
                     ("energy", lambda: energy_availability(root))):
        try:
            out[name] = fn()
        except Exception as exc:
            out[name] = {"available": False, "reason": f"probe failed: {exc}"}
    return out


def collect(fs: SysFS | str = "/", facts: dict[str, Any] | None = None,
            euid: int | None = None) -> dict[str, Any]:
    """The doctor report of the board under ``fs``: ``{"checks": [...], "warnings": n,
    "summary": str}``. ``facts``: the agent's platform description (discover()), which has the
    knob and meter probes already; without it they are probed here."""
    fs = fs if isinstance(fs, SysFS) else SysFS(fs)
    if facts is None:
        facts = _facts(fs.root)
    euid = os.geteuid() if euid is None else euid
    sweep = list(facts.get("sweep_order") or facts.get("cpus_online")
                 or fs.try_list(f"{CPU}/online") or [])
    can_pin = bool((facts.get("cpufreq") or {}).get("available"))
    probes = (lambda: check_aslr(fs), lambda: check_isolated(fs, sweep),
              lambda: check_governor(fs, can_pin), lambda: check_boost(fs),
              lambda: check_perf_event(fs, euid), lambda: check_irqs(fs, sweep),
              lambda: check_load(fs), lambda: check_temperature(fs),
              lambda: check_clocksource(fs), lambda: check_knobs(fs, facts),
              lambda: check_meters(facts))
    names = ("aslr", "isolated_cpus", "governor", "boost", "perf_event", "irq_affinity", "load",
             "temperature", "clocksource", "knobs", "meters")
    checks = []
    for name, probe in zip(names, probes):
        try:
            checks.append(probe())
        except Exception as exc:  # one odd file must not cost the rest of the report
            checks.append(_missing(name, f"check failed: {exc}"))
    return {"checks": checks, **verdict(checks)}


def verdict(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """The one-line verdict: "ready for measuring" or "2 warnings (governor ondemand; ...)"."""
    warns = [c.get("short") or c.get("name") for c in checks if c.get("verdict") == "warn"]
    if not warns:
        return {"warnings": 0, "summary": "ready for measuring"}
    return {"warnings": len(warns),
            "summary": f"{len(warns)} warning{'s' if len(warns) > 1 else ''} "
                       f"({'; '.join(warns)})"}

