"""What this board is: topology facts, a stable platform id, and which knobs/meters it has.

``discover`` returns plain types only (it goes into the hello message). A missing knob or meter
is reported unavailable with a reason, never raised.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import platform as _pyplatform
import re
import socket
from typing import Any

from ..shared.config import AgentConfig
from ..shared.cpus import format_cpu_list

log = logging.getLogger("opptune.agent.platform")

CPUFREQ_DIR = "sys/devices/system/cpu/cpufreq"


def _under(root: str, rel: str) -> str:
    return os.path.join(root or "/", rel.lstrip("/"))


def _fallback_topology() -> dict[str, Any]:
    """Facts from os when the topology module is missing (never a second sysfs reader)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except OSError:
        cpus = list(range(os.cpu_count() or 1))
    return {"cpus_online": cpus, "model_name": _pyplatform.processor() or "unknown",
            "smt_siblings": [[c] for c in cpus], "numa_nodes": [cpus], "policies": [],
            "clusters": [cpus], "sweep_order": cpus, "n_nu": None, "n_ht": None}


def _topology(config: AgentConfig) -> dict[str, Any]:
    try:
        from .topology import read_topology
    except Exception as exc:
        log.warning("topology module unavailable (%s); using os facts", exc)
        return _fallback_topology()
    try:
        return read_topology(config.sysfs_root)
    except Exception as exc:
        log.error("reading topology under %s failed (%s); using os facts", config.sysfs_root,
                  exc)
        return _fallback_topology()


def _avail(ok: bool, reason: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"available": bool(ok), "reason": None if ok else (reason or "unavailable"), **extra}


def cpufreq_availability(root: str, topo: dict[str, Any]) -> dict[str, Any]:
    policies = sorted(glob.glob(_under(root, f"{CPUFREQ_DIR}/policy[0-9]*")))
    if not policies:
        return _avail(False, f"no cpufreq policies under {_under(root, CPUFREQ_DIR)} "
                             "(kernel without cpufreq or a virtual machine)")
    writable = [p for p in policies
                if os.access(os.path.join(p, "scaling_setspeed"), os.W_OK)
                or os.access(os.path.join(p, "scaling_max_freq"), os.W_OK)]
    freqs: dict[str, list[int]] = {}
    # policies without a table (intel_pstate, amd-pstate active): any clock of [min, max],
    # which frequencies_khz gives as its two ends (what an older daemon reads)
    continuous: list[str] = []
    for p in policies:
        try:
            with open(os.path.join(p, "scaling_available_frequencies")) as fh:
                freqs[os.path.basename(p)] = sorted(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            pol = next((q for q in topo.get("policies") or []
                        if q.get("name") == os.path.basename(p)), {})
            lo, hi = pol.get("cpuinfo_min_khz"), pol.get("cpuinfo_max_khz")
            freqs[os.path.basename(p)] = [lo, hi] if lo and hi else []
            if lo and hi:
                continuous.append(os.path.basename(p))
    if not writable:
        return _avail(False, "cpufreq policies are read-only for this user (run as root or "
                             "use the systemd unit)", frequencies_khz=freqs,
                      continuous=continuous)
    return _avail(True, frequencies_khz=freqs, continuous=continuous)


def perf_availability(root: str) -> dict[str, Any]:
    """Open the counters once on this thread: available if any hardware event counts. Events
    this PMU lacks are listed by name under ``unavailable`` with the kernel's reason."""
    path = _under(root, "proc/sys/kernel/perf_event_paranoid")
    try:
        with open(path) as fh:
            paranoid: int | None = int(fh.read().strip())
    except (OSError, ValueError):
        paranoid = None
    try:
        from .meters.perf import EVENTS, PERF_TYPE_SOFTWARE, PerfSession, process_abi, \
            syscall_number
    except Exception as exc:
        return _avail(False, f"perf meter module unavailable: {exc}", paranoid=paranoid)
    # what the agent knows even where it cannot count (a fake tree, an emulated board)
    known = {"paranoid": paranoid, "syscall_abi": process_abi(), "syscall_nr": syscall_number()}
    if root not in ("", "/"):
        # a fake tree cannot fake perf_event_open: counters of this machine would be lies
        return _avail(False, "perf counters are not simulated under a fake sysfs root", **known)
    try:
        counters, invalid, _ = PerfSession().start().stop()
    except Exception as exc:
        return _avail(False, f"perf_event_open failed: {exc}", **known)
    working = sorted(k for k, v in counters.items() if v is not None and k in EVENTS)
    unavailable = {k: invalid[k] for k in EVENTS if k in invalid}
    hardware = [k for k in working if EVENTS[k][0] != PERF_TYPE_SOFTWARE]
    if not hardware:
        reasons = sorted({v for k, v in invalid.items()
                          if k in EVENTS and EVENTS[k][0] != PERF_TYPE_SOFTWARE})
        # software events (task-clock, context switches) still count: the meter keeps them
        return _avail(False, "no hardware event can be opened: " + "; ".join(reasons[:3]),
                      software_only=bool(working), events=working, unavailable=unavailable,
                      **known)
    return _avail(True, events=working, unavailable=unavailable, **known)


def energy_availability(root: str) -> dict[str, Any]:
    try:
        from .meters.energy import EnergyMeter
    except Exception as exc:
        return _avail(False, f"energy meter module unavailable: {exc}")
    meter = EnergyMeter.discover(root or "/")
    if meter.backend is None:
        return _avail(False, meter.reason or "no energy sensor")
    return _avail(True, source=meter.source)


def _read_first_line(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.readline().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines of os-release(5); values may be quoted, with backslash escapes."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out[key.strip()] = value
    return out


def distribution(root: str) -> dict[str, str | None]:
    """PRETTY_NAME, ID and VERSION_ID from etc/os-release under ``root`` (then
    usr/lib/os-release, as os-release(5) says); each None when absent."""
    fields = {}
    for rel in ("etc/os-release", "usr/lib/os-release"):
        try:
            with open(_under(root, rel), encoding="utf-8", errors="replace") as fh:
                fields = parse_os_release(fh.read())
            break
        except OSError:
            continue
    return {"pretty_name": fields.get("PRETTY_NAME") or None, "id": fields.get("ID") or None,
            "version_id": fields.get("VERSION_ID") or None}


def kernel_facts(root: str) -> tuple[str | None, str | None]:
    """(machine, kernel release) from proc/sys/kernel/{arch,osrelease} under ``root``; on the
    real root os.uname() fills what /proc lacks (kernel.arch is recent). A fake tree without
    them gives None: this machine's values would describe another board."""
    arch = _read_first_line(_under(root, "proc/sys/kernel/arch"))
    release = _read_first_line(_under(root, "proc/sys/kernel/osrelease"))
    if root in ("", "/"):
        uname = os.uname()
        arch, release = arch or uname.machine, release or uname.release
    return arch, release


def platform_id(facts: dict[str, Any]) -> str:
    """A stable fingerprint of the board *type*: same model, cpus, topology, arch -> same id."""
    key = {k: facts.get(k) for k in ("arch", "model_name", "n_cpus", "smt_siblings",
                                       "numa_nodes", "clusters", "virtual_board")}
    key["freq_domains"] = [(p.get("related_cpus") or p.get("cpus"), p.get("cpuinfo_max_khz"))
                           for p in facts.get("policies") or []]
    digest = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:16]


def discover(config: AgentConfig) -> dict[str, Any]:
    """Plain-typed description of this board for hello and for validating pushed configs."""
    topo = _topology(config)
    root = config.sysfs_root or "/"
    cpus = list(topo.get("cpus_online") or [])
    arch, release = kernel_facts(root)
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "arch": arch,
        "kernel": release,
        "distribution": distribution(root),
        "model_name": topo.get("model_name") or "unknown",
        "n_cpus": len(cpus),
        "cpus_online": cpus,
        "smt_siblings": topo.get("smt_siblings") or [[c] for c in cpus],
        "numa_nodes": topo.get("numa_nodes") or [cpus],
        "clusters": topo.get("clusters") or [cpus],
        "policies": topo.get("policies") or [],
        "sweep_order": topo.get("sweep_order") or cpus,
        # per cluster (same index as "clusters"): its cpus in sweep order (per-cluster sweeps)
        "cluster_sweep_orders": topo.get("cluster_sweep_orders")
        or [list(c) for c in (topo.get("clusters") or [cpus])],
        "n_nu": topo.get("n_nu"),
        "n_ht": topo.get("n_ht"),
        "virtual": bool(config.virtual_board),
        "virtual_board": config.virtual_board or None,
    }
    for name, fn in (("cpufreq", lambda: cpufreq_availability(root, topo)),
                     ("perf", lambda: perf_availability(root)),
                     ("energy", lambda: energy_availability(root))):
        try:
            facts[name] = fn()
        except Exception as exc:  # a probe must never stop discovery
            facts[name] = _avail(False, f"probe failed: {exc}")
    facts["id"] = platform_id(facts)
    return facts


def cpus_problem(facts: dict[str, Any], cpus: list[int]) -> str | None:
    """Why ``cpus`` cannot be used on this board (empty, or some not online); None if they can."""
    online = set(facts.get("cpus_online") or [])
    if not cpus:
        return "cpus is empty"
    missing = sorted(set(cpus) - online)
    if missing:
        return (f"cpus {format_cpu_list(missing)} are not online on this board (online: "
                f"{format_cpu_list(online)}); "
                f"asked for {len(cpus)} cpus, {len(online)} are online")
    return None


def clock_problem(facts: dict[str, Any], cpus: list[int], freq_khz: int) -> str | None:
    """Why ``cpus`` cannot be set to ``freq_khz`` here (no cpufreq, a clock not offered);
    None if they can."""
    offered = offered_frequencies(facts, cpus)
    if offered is None:
        reason = (facts.get("cpufreq") or {}).get("reason") or "cpufreq unavailable"
        return f"frequency {freq_khz} kHz cannot be set: {reason}"
    if len(offered) == 2 and offered[0] < offered[1] and freq_khz not in offered:
        # only a range is known (no scaling_available_frequencies): accept within it
        if not offered[0] <= freq_khz <= offered[1]:
            return f"frequency {freq_khz} kHz is outside {offered[0]}..{offered[1]} kHz"
    elif freq_khz not in offered:
        return (f"frequency {freq_khz} kHz is not offered for cpus {format_cpu_list(cpus)}; "
                f"offered: {offered}")
    return None


def offered_frequencies(facts: dict[str, Any], cpus: list[int]) -> list[int] | None:
    """Frequencies (kHz) the domains of ``cpus`` offer; None when cpufreq is unavailable."""
    cf = facts.get("cpufreq") or {}
    if not cf.get("available"):
        return None
    by_policy = cf.get("frequencies_khz") or {}
    sets = []
    for pol in facts.get("policies") or []:
        pcpus = set(pol.get("related_cpus") or pol.get("cpus") or [])
        if pcpus & set(cpus) and pol.get("name") in by_policy:
            sets.append(set(by_policy[pol["name"]]))
    if not sets:
        sets = [set(v) for v in by_policy.values()]
    return sorted(set.intersection(*sets)) if sets else []
