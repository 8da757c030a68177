"""Virtual boards: fake sysfs/procfs trees modelled on real boards, with known truth.

``make_tree(name, root)`` writes a tree under ``root`` that the agent reads through
:class:`~opptune.agent.sysfs.SysFS` exactly as it reads a board: cpu topology, NUMA nodes,
caches, cpufreq policies, cpu_capacity, RAPL powercap zones, hwmon power sensors, the kernel
energy model in debugfs, /proc/cpuinfo and /proc/stat.

:func:`attach` (called by ``make_tree`` in the process that makes the tree, and by the agent
when its configuration names a virtual board) registers :func:`install_hooks` as the tree's
write driver: writes to cpufreq limits then behave as the kernel does (governor checks,
min <= max, and ``scaling_cur_freq`` follows setspeed/min/max immediately). The agent's real
sysfs path knows nothing of this module.

Each board carries its true model parameters (``BOARDS[name]["truth"]``): the variable-delay
speedup model of seed 003 (eq. 15-16: f, k, m1, m2) and a V^2 f power model. The virtual
workload (``opptune.agent.virtual_workload``) follows them, so tests can compare fitted
parameters with the truth. Everything here is a test and demo device, always labelled virtual.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import time

from ..shared.cpus import format_cpu_list
from .private import make_dirs, open_private
from .sysfs import KnobUnavailable, SysFS, register_driver

CPUFREQ = "/sys/devices/system/cpu/cpufreq"
_POLICY_FILE = re.compile(r"^/?sys/devices/system/cpu/cpufreq/(policy\d+)/(\w+)$")

# A file at the root of every tree make_tree writes: the board's spec (and true model)
FAKE_MARKER = ".opptune-virtual-board.json"

# etc/os-release of the boards' userland (Debian 12, as Raspberry Pi OS 12 also reports)
DEBIAN_12 = {"PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "NAME": "Debian GNU/Linux",
             "VERSION_ID": "12", "VERSION": "12 (bookworm)", "ID": "debian"}

GOVS_GENERIC = ["conservative", "ondemand", "userspace", "powersave", "performance", "schedutil"]


def _xu4() -> dict:
    little = list(range(0, 4))
    big = list(range(4, 8))
    return {
        "name": "odroid-xu4",
        "arch": "arm",
        # Exynos 5422 is ARMv7 (32-bit only): a Debian armhf userland reports armv7l
        "machine": "armv7l",
        "kernel_release": "6.1.0-virtual-armmp-lpae",
        "os_release": DEBIAN_12,
        "model_name": "ODROID-XU4 (virtual)",
        "driver": "cpufreq-dt",
        "governors": GOVS_GENERIC,
        "initial_governor": "ondemand",
        "nodes": None,  # arm32: no NUMA directory at all
        "siblings": [[c] for c in little + big],
        "packages": {0: little, 1: big},  # one package id per cluster, as arm topology reports
        "clusters": [
            {"cpus": little, "freqs_khz": [f * 100000 for f in range(2, 15)],
             "capacity": 377, "latency_ns": 100000, "volt": (0.90, 1.2125), "ipc": 0.45,
             "bw_core_gbs": 1.1, "mem_latency_ns": 190,
             "c_dyn": 0.10, "p_static": 0.02, "caches": [(1, "Data", "32K", False),
                                                         (1, "Instruction", "32K", False),
                                                         (2, "Unified", "512K", True)]},
            {"cpus": big, "freqs_khz": [f * 100000 for f in range(2, 21)],
             "capacity": 1024, "latency_ns": 100000, "volt": (0.90, 1.3625), "ipc": 1.0,
             "bw_core_gbs": 2.2, "mem_latency_ns": 150,
             "c_dyn": 0.55, "p_static": 0.10, "caches": [(1, "Data", "32K", False),
                                                         (1, "Instruction", "32K", False),
                                                         (2, "Unified", "2048K", True)]},
        ],
        # LPDDR3-1866 2 x 32 bit, shared by both clusters: STREAM reaches about 4 GB/s
        "memory": {"bw_gbs": 4.0, "domain": "board"},
        "rapl": False,
        # INA231 rails as on the ODROID-XU3 family: big (arm), LITTLE (kfc), memory, GPU.
        "hwmon": [{"name": "ina231", "label": "arm", "cluster": 1},
                  {"name": "ina231", "label": "kfc", "cluster": 0},
                  {"name": "ina231", "label": "mem", "constant_w": 0.12},
                  {"name": "ina231", "label": "g3d", "constant_w": 0.05}],
        "energy_model": False,
        # Exynos 5422 tmu: one zone per big core sensor; passive trip as the DT of the XU4
        "thermal_zones": [{"type": f"cpu{i}-thermal", "cpus": big, "temp_c": 48.0,
                           "passive_c": 85.0, "critical_c": 120.0} for i in range(4)],
        "throttle": None,  # {"cpus": [...], "max_khz": N}: injected thermal throttling
        "truth": {"f": 0.95, "k": 0.8, "m1": 0.05, "m2": 0.25, "f_mem_ghz": 0.933,
                  "work_s": 0.040, "noise": 0.01, "idle_w": 0.02},
    }


def _x86_2numa() -> dict:
    # Two sockets of 8 cores x 2 threads, Intel numbering: node0 = 0-7,16-23, node1 = 8-15,24-31.
    cores, threads = 8, 2
    n = 2 * cores * threads
    siblings = [[c, c + 2 * cores] for c in range(2 * cores)]
    node0 = list(range(0, cores)) + list(range(2 * cores, 3 * cores))
    node1 = list(range(cores, 2 * cores)) + list(range(3 * cores, 4 * cores))
    return {
        "name": "x86-2numa",
        "arch": "x86",
        "machine": "x86_64",
        "kernel_release": "6.1.0-virtual-amd64",
        "os_release": DEBIAN_12,
        "model_name": "Intel(R) Xeon(R) CPU E5-2630 v3 @ 2.40GHz (virtual)",
        "driver": "intel_pstate",
        "governors": ["performance", "powersave"],
        "initial_governor": "powersave",
        "nodes": [sorted(node0), sorted(node1)],
        "siblings": siblings,
        "packages": {0: sorted(node0), 1: sorted(node1)},
        "clusters": [
            # intel_pstate: one policy per cpu, no frequency table, turbo above base.
            {"cpus": list(range(n)), "freqs_khz": None, "min_khz": 1200000, "max_khz": 3200000,
             "base_khz": 2400000, "per_cpu_policy": True, "capacity": None, "latency_ns": 0,
             "volt": (0.75, 1.15), "ipc": 1.6, "c_dyn": 1.6, "p_static": 0.8,
             "bw_core_gbs": 10.0, "mem_latency_ns": 85,
             "caches": [(1, "Data", "32K", False), (1, "Instruction", "32K", False),
                        (2, "Unified", "256K", False), (3, "Unified", "20480K", "package")]},
        ],
        # 4 x DDR4-1866 per socket (about 45 GB/s STREAM each), data first-touched locally
        "memory": {"bw_gbs": 90.0, "domain": "package"},
        "boost_file": "/sys/devices/system/cpu/intel_pstate/no_turbo",
        "rapl": True,
        "rapl_dram_w": 3.0,
        "hwmon": [],
        "energy_model": False,
        "thermal_zones": [{"type": "x86_pkg_temp", "cpus": sorted(node0), "temp_c": 42.0,
                           "passive_c": 90.0, "critical_c": 100.0},
                          {"type": "x86_pkg_temp", "cpus": sorted(node1), "temp_c": 41.0,
                           "passive_c": 90.0, "critical_c": 100.0}],
        "throttle_counters": True,  # x86: cpu*/thermal_throttle/*_throttle_count
        "throttle": None,
        "truth": {"f": 0.98, "k": 1.5, "m1": 0.10, "m2": 0.40, "f_mem_ghz": 1.866,
                  "work_s": 0.060, "noise": 0.01, "idle_w": 10.0},
    }


def _rpi4() -> dict:
    cpus = [0, 1, 2, 3]
    return {
        "name": "rpi4",
        "arch": "arm64",
        "machine": "aarch64",
        "kernel_release": "6.1.0-virtual-rpi-v8",
        "os_release": DEBIAN_12,
        "model_name": "Raspberry Pi 4 Model B Rev 1.4 (virtual)",
        "driver": "cpufreq-dt",
        "governors": GOVS_GENERIC,
        "initial_governor": "ondemand",
        "nodes": [cpus],
        "siblings": [[c] for c in cpus],
        "packages": {0: cpus},
        "clusters": [
            {"cpus": cpus, "freqs_khz": [600000, 750000, 1000000, 1200000, 1500000],
             "capacity": 1024, "latency_ns": 355000, "volt": (0.80, 0.95), "ipc": 0.9,
             "bw_core_gbs": 2.6, "mem_latency_ns": 120,
             "c_dyn": 0.35, "p_static": 0.05,
             "caches": [(1, "Data", "32K", False), (1, "Instruction", "48K", False),
                        (2, "Unified", "1024K", True)]},
        ],
        # LPDDR4-3200 32 bit: STREAM reaches about 4.4 GB/s with all cores
        "memory": {"bw_gbs": 4.4, "domain": "board"},
        "rapl": False,
        "hwmon": [],
        # No power sensor on a Pi: the kernel energy model is the only (estimated) source.
        "energy_model": True,
        "thermal_zones": [{"type": "cpu-thermal", "cpus": cpus, "temp_c": 52.0,
                           "passive_c": 80.0, "critical_c": 110.0}],
        "throttle": None,
        "truth": {"f": 0.90, "k": 0.5, "m1": 0.08, "m2": 0.15, "f_mem_ghz": 1.6,
                  "work_s": 0.050, "noise": 0.01, "idle_w": 0.6},
    }


BOARDS: dict[str, dict] = {"odroid-xu4": _xu4(), "x86-2numa": _x86_2numa(), "rpi4": _rpi4()}


def board_spec(name: str) -> dict:
    """A copy of a board's specification (structure and truth)."""
    try:
        return copy.deepcopy(BOARDS[name])
    except KeyError:
        raise ValueError(f"unknown virtual board {name!r}; known: {', '.join(BOARDS)}") from None


# --------------------------------------------------------------------------- tree writing

def _put(root: str, rel: str, content) -> None:
    """A file of the tree, 0600 in directories 0700 as the state directory's (private.py):
    the agent's alone, whatever the umask."""
    path = os.path.join(root, rel.lstrip("/"))
    make_dirs(os.path.dirname(path))
    with open_private(path) as fh:
        fh.write(f"{content}\n")


def _policy_groups(spec: dict) -> list[tuple[int, list[int], dict]]:
    out = []
    for cl in spec["clusters"]:
        if cl.get("per_cpu_policy"):
            out += [(c, [c], cl) for c in cl["cpus"]]
        else:
            out.append((cl["cpus"][0], list(cl["cpus"]), cl))
    return out


def make_tree(name, root_path: str) -> str:
    """Write the fake tree of board ``name`` (or a spec dict) under ``root_path``; return it."""
    spec = board_spec(name) if isinstance(name, str) else copy.deepcopy(name)
    root = os.path.abspath(root_path)
    make_dirs(root)
    cpus = sorted(c for cl in spec["clusters"] for c in cl["cpus"])
    cpu = "/sys/devices/system/cpu"
    _put(root, f"{cpu}/online", format_cpu_list(cpus))
    _put(root, f"{cpu}/possible", format_cpu_list(cpus))
    _put(root, f"{cpu}/present", format_cpu_list(cpus))
    sib_of = {c: s for s in spec["siblings"] for c in s}
    pkg_of = {c: p for p, cs in spec["packages"].items() for c in cs}
    for cl_idx, cl in enumerate(spec["clusters"]):
        for c in cl["cpus"]:
            d = f"{cpu}/cpu{c}"
            if c != 0:
                _put(root, f"{d}/online", 1)
            sib = sib_of.get(c, [c])
            _put(root, f"{d}/topology/thread_siblings_list", format_cpu_list(sib))
            _put(root, f"{d}/topology/core_cpus_list", format_cpu_list(sib))
            _put(root, f"{d}/topology/core_id", min(sib) % 64)
            _put(root, f"{d}/topology/physical_package_id", pkg_of.get(c, 0))
            _put(root, f"{d}/topology/cluster_id", cl_idx)
            _put(root, f"{d}/topology/core_siblings_list",
                 format_cpu_list(spec["packages"].get(pkg_of.get(c, 0), [c])))
            if cl.get("capacity") is not None:
                _put(root, f"{d}/cpu_capacity", cl["capacity"])
            for i, (level, ctype, size, shared) in enumerate(cl["caches"]):
                if shared == "package":
                    sh = spec["packages"][pkg_of[c]]
                elif shared:
                    sh = cl["cpus"]
                else:
                    sh = sib
                cd = f"{d}/cache/index{i}"
                _put(root, f"{cd}/level", level)
                _put(root, f"{cd}/type", ctype)
                _put(root, f"{cd}/size", size)
                _put(root, f"{cd}/coherency_line_size", 64)
                _put(root, f"{cd}/ways_of_associativity", 8)
                _put(root, f"{cd}/shared_cpu_list", format_cpu_list(sh))
    if spec.get("nodes"):
        for i, node in enumerate(spec["nodes"]):
            _put(root, f"/sys/devices/system/node/node{i}/cpulist", format_cpu_list(node))
        _put(root, "/sys/devices/system/node/online", f"0-{len(spec['nodes']) - 1}")

    for pnum, pcpus, cl in _policy_groups(spec):
        d = f"{CPUFREQ}/policy{pnum}"
        table = cl.get("freqs_khz")
        fmin = min(table) if table else cl["min_khz"]
        fmax = max(table) if table else cl["max_khz"]
        gov = spec["initial_governor"]
        _put(root, f"{d}/affected_cpus", " ".join(map(str, pcpus)))
        _put(root, f"{d}/related_cpus", " ".join(map(str, pcpus)))
        _put(root, f"{d}/scaling_driver", spec["driver"])
        _put(root, f"{d}/scaling_available_governors", " ".join(spec["governors"]))
        _put(root, f"{d}/scaling_governor", gov)
        _put(root, f"{d}/cpuinfo_min_freq", fmin)
        _put(root, f"{d}/cpuinfo_max_freq", fmax)
        _put(root, f"{d}/scaling_min_freq", fmin)
        _put(root, f"{d}/scaling_max_freq", fmax)
        _put(root, f"{d}/cpuinfo_transition_latency", cl["latency_ns"])
        cur = fmin if gov == "powersave" else fmax
        _put(root, f"{d}/scaling_cur_freq", cur)
        _put(root, f"{d}/cpuinfo_cur_freq", cur)
        if table:
            _put(root, f"{d}/scaling_available_frequencies", " ".join(map(str, table)))
        if cl.get("base_khz"):
            _put(root, f"{d}/base_frequency", cl["base_khz"])
        if "userspace" in spec["governors"]:
            _put(root, f"{d}/scaling_setspeed", cur if gov == "userspace" else "<unsupported>")
        for c in pcpus:
            # The kernel shows the policy directory under each of its cpus too.
            link = os.path.join(root, f"sys/devices/system/cpu/cpu{c}/cpufreq")
            if not os.path.lexists(link):
                os.symlink(f"../cpufreq/policy{pnum}", link)
    if spec.get("boost_file"):
        _put(root, spec["boost_file"], 0)
        _put(root, "/sys/devices/system/cpu/intel_pstate/status", "active")

    if spec.get("rapl"):
        for p in sorted(spec["packages"]):
            z = f"/sys/class/powercap/intel-rapl:{p}"
            _put(root, f"{z}/name", f"package-{p}")
            _put(root, f"{z}/energy_uj", 1000 * (p + 1))
            _put(root, f"{z}/max_energy_range_uj", 262143328850)
            _put(root, f"{z}/enabled", 1)
            zd = f"/sys/class/powercap/intel-rapl:{p}:0"
            _put(root, f"{zd}/name", "dram")
            _put(root, f"{zd}/energy_uj", 500 * (p + 1))
            _put(root, f"{zd}/max_energy_range_uj", 65712999613)
            _put(root, f"{zd}/enabled", 1)
    for i, h in enumerate(spec.get("hwmon", [])):
        d = f"/sys/class/hwmon/hwmon{i}"
        _put(root, f"{d}/name", h["name"])
        _put(root, f"{d}/label", h["label"])
        _put(root, f"{d}/power1_input", int(1e6 * _idle_power(spec, h)))
        _put(root, f"{d}/in1_input", 1000)
    if spec.get("energy_model"):
        for pnum, pcpus, cl in _policy_groups(spec):
            d = f"/sys/kernel/debug/energy_model/cpu{pnum}"
            _put(root, f"{d}/cpus", format_cpu_list(pcpus))
            for fk in cl["freqs_khz"]:
                mw = int(1000 * dynamic_power_w(cl, fk))
                _put(root, f"{d}/ps:{fk}/frequency", fk)
                _put(root, f"{d}/ps:{fk}/power", mw)
                _put(root, f"{d}/ps:{fk}/cost", mw * 10)

    for i, z in enumerate(spec.get("thermal_zones") or []):
        d = f"/sys/class/thermal/thermal_zone{i}"
        _put(root, f"{d}/type", z["type"])
        _put(root, f"{d}/temp", int(zone_temp_c(spec, z) * 1000))
        _put(root, f"{d}/trip_point_0_type", "passive")
        _put(root, f"{d}/trip_point_0_temp", int(z["passive_c"] * 1000))
        _put(root, f"{d}/trip_point_1_type", "critical")
        _put(root, f"{d}/trip_point_1_temp", int(z["critical_c"] * 1000))
    if spec.get("throttle_counters"):
        for c in cpus:
            for leaf in ("core_throttle_count", "package_throttle_count"):
                _put(root, f"{cpu}/cpu{c}/thermal_throttle/{leaf}", 0)

    cpuinfo = []
    for c in cpus:
        if spec["arch"] == "x86":
            cpuinfo.append(f"processor\t: {c}\nmodel name\t: {spec['model_name']}\n")
        else:
            cpuinfo.append(f"processor\t: {c}\nBogoMIPS\t: 108.00\nCPU part\t: 0xd08\n")
    if spec["arch"] != "x86":
        cpuinfo.append(f"Hardware\t: virtual\nModel\t\t: {spec['model_name']}\n")
    _put(root, "/proc/cpuinfo", "\n".join(cpuinfo))
    # what uname and os-release say on the board; a spec without them leaves them out
    if spec.get("machine"):
        _put(root, "/proc/sys/kernel/arch", spec["machine"])
    if spec.get("kernel_release"):
        _put(root, "/proc/sys/kernel/osrelease", spec["kernel_release"])
    if spec.get("os_release"):
        _put(root, "/etc/os-release", "\n".join(
            f'{k}="{v}"' if not v.isalnum() else f"{k}={v}"
            for k, v in spec["os_release"].items()))
    stat = ["cpu  0 0 0 0 0 0 0 0 0 0"] + [f"cpu{c} 0 0 0 0 0 0 0 0 0 0" for c in cpus]
    _put(root, "/proc/stat", "\n".join(stat))
    with open_private(os.path.join(root, FAKE_MARKER)) as fh:
        json.dump({"board": spec["name"], "spec": spec}, fh, default=list)
    attach(root)
    return root


def zone_temp_c(spec: dict, zone: dict) -> float:
    """A zone's temperature: its idle one, or 5 C above its passive trip while an injected
    throttle covers one of its cpus."""
    thr = spec.get("throttle") or {}
    if set(thr.get("cpus") or []) & set(zone.get("cpus") or []):
        return zone["passive_c"] + 5.0
    return zone["temp_c"]


def update_spec(root: str, now: float | None = None, **changes) -> dict:
    """Change a made tree's spec in place (the truth a virtual workload follows, an injected
    throttle ``throttle={"cpus": [...], "max_khz": N}`` or None, an injected neighbour
    ``neighbour={"cpus": [...], "share": S, "name": N, "pid": P}`` or None) and what follows
    from it (zone temperatures, the neighbour's /proc/PID/stat); returns the new spec. Runs
    started after this see the change; a run in flight charges a neighbour changed meanwhile
    only up to the change (``neighbour_at``: ``now``, default time.time())."""
    spec = load_spec(root)
    unknown = sorted(set(changes) - set(spec) - {"throttle", "neighbour"})
    if unknown:
        raise ValueError(f"unknown virtual board spec keys: {', '.join(unknown)}")
    if "neighbour" in changes:
        _set_neighbour(root, spec, changes["neighbour"])
        spec["neighbour_at"] = time.time() if now is None else now
    spec.update(changes)
    for i, z in enumerate(spec.get("thermal_zones") or []):
        path = os.path.join(root, f"sys/class/thermal/thermal_zone{i}/temp")
        with open(path, "w") as fh:
            fh.write(f"{int(zone_temp_c(spec, z) * 1000)}\n")
    with open_private(os.path.join(root, FAKE_MARKER) + ".tmp") as fh:
        json.dump({"board": spec["name"], "spec": spec}, fh, default=list)
    os.replace(os.path.join(root, FAKE_MARKER) + ".tmp", os.path.join(root, FAKE_MARKER))
    return spec


def _set_neighbour(root: str, spec: dict, nb: dict | None) -> None:
    """Check an injected neighbour and give it a /proc/PID/stat (the old one's goes)."""
    old = spec.get("neighbour")
    if old:
        try:
            for leaf in ("stat", "status"):
                os.remove(os.path.join(root, f"proc/{old['pid']}/{leaf}"))
            os.rmdir(os.path.join(root, f"proc/{old['pid']}"))
        except OSError:
            pass
    if nb is None:
        return
    board_cpus = {c for cl in spec["clusters"] for c in cl["cpus"]}
    if (not isinstance(nb, dict) or type(nb.get("share")) not in (int, float)
            or not 0 < nb["share"] < 1
            or not nb.get("cpus") or not set(nb["cpus"]) <= board_cpus
            or type(nb.get("pid")) is not int or nb["pid"] < 1
            or not isinstance(nb.get("name"), str)):
        raise ValueError("neighbour must be {\"cpus\": [cpus of the board], \"share\": 0 < S "
                         "< 1, \"name\": text, \"pid\": a number >= 1} or None")
    write_proc_stat(root, nb["pid"], nb["name"], 0, nb["cpus"])


def write_proc_stat(root: str, pid: int, name: str, ticks: int, cpus: list[int]) -> None:
    """A /proc/PID/stat and status in the tree: ``ticks`` of user time, last run on the first
    of ``cpus``, allowed on them."""
    fields = ["R", "1"] + ["0"] * 48  # state, ppid, ... as proc(5) numbers them from 3
    fields[11], fields[36] = str(ticks), str(min(cpus))
    _put(root, f"/proc/{pid}/stat", f"{pid} ({name}) " + " ".join(fields))
    _put(root, f"/proc/{pid}/status", f"Name:\t{name}\nPid:\t{pid}\n"
         f"Cpus_allowed_list:\t{format_cpu_list(cpus)}")


def attach(root: str) -> None:
    """Emulate the kernel's cpufreq writes on the virtual board tree ``root`` in this process;
    ValueError when ``root`` holds no tree made by :func:`make_tree`."""
    if not os.path.isfile(os.path.join(root or "/", FAKE_MARKER)):
        raise ValueError(f"{root or '/'} is not a virtual board tree (no {FAKE_MARKER}; "
                         "make one with opptune.agent.virtual_board.make_tree)")
    register_driver(root, install_hooks)


def load_spec(root: str) -> dict:
    """The spec a fake tree was made from (JSON turns int keys into str; undo that)."""
    with open(os.path.join(root, FAKE_MARKER)) as fh:
        spec = json.load(fh)["spec"]
    spec["packages"] = {int(k): v for k, v in spec["packages"].items()}
    return spec


# --------------------------------------------------------------------------- power model

def voltage(cl: dict, f_khz: float) -> float:
    """Supply voltage, linear in frequency between the cluster's lowest and highest point."""
    fmin = min(cl["freqs_khz"]) if cl.get("freqs_khz") else cl["min_khz"]
    fmax = max(cl["freqs_khz"]) if cl.get("freqs_khz") else cl["max_khz"]
    vmin, vmax = cl["volt"]
    x = 0.0 if fmax == fmin else (f_khz - fmin) / (fmax - fmin)
    return vmin + (vmax - vmin) * min(max(x, 0.0), 1.0)


def dynamic_power_w(cl: dict, f_khz: float) -> float:
    """Power of one busy core: c_dyn * V^2 * f (f in GHz)."""
    return cl["c_dyn"] * voltage(cl, f_khz) ** 2 * (f_khz / 1e6)


def _idle_power(spec: dict, h: dict) -> float:
    if "constant_w" in h:
        return h["constant_w"]
    return spec["clusters"][h["cluster"]]["p_static"]


# --------------------------------------------------------------------------- kernel emulation

def _policy_dir(rel: str):
    m = _POLICY_FILE.match(rel)
    return (f"{CPUFREQ}/{m.group(1)}", m.group(2)) if m else (None, None)


def install_hooks(fs: SysFS) -> None:
    """Make writes on a fake tree behave like the kernel's cpufreq core (see module doc)."""

    def before(rel: str, data: str) -> None:
        d, leaf = _policy_dir(rel)
        if d is None:
            return
        if leaf == "scaling_governor":
            if data.strip() not in fs.read_words(f"{d}/scaling_available_governors"):
                raise KnobUnavailable(rel, f"governor {data!r} not available", errno.EINVAL)
            return
        if leaf not in ("scaling_min_freq", "scaling_max_freq", "scaling_setspeed"):
            return
        try:
            val = int(data.strip())
        except ValueError:
            raise KnobUnavailable(rel, f"invalid value {data!r}", errno.EINVAL) from None
        if leaf == "scaling_setspeed" and fs.read_text(f"{d}/scaling_governor") != "userspace":
            raise KnobUnavailable(rel, "setspeed needs the userspace governor", errno.EINVAL)
        # Older kernels refuse a limit that crosses the other one: the agent must order writes.
        if leaf == "scaling_min_freq" and val > fs.read_int(f"{d}/scaling_max_freq"):
            raise KnobUnavailable(rel, f"min {val} above max", errno.EINVAL)
        if leaf == "scaling_max_freq" and val < fs.read_int(f"{d}/scaling_min_freq"):
            raise KnobUnavailable(rel, f"max {val} below min", errno.EINVAL)

    def after(rel: str, data: str) -> None:
        d, leaf = _policy_dir(rel)
        if d is None or leaf not in ("scaling_governor", "scaling_min_freq", "scaling_max_freq",
                                     "scaling_setspeed"):
            return
        # the kernel reads an attribute back with its newline, whatever was written
        with open(fs.path(rel), "w") as fh:
            fh.write(f"{data.strip()}\n")
        lo = fs.read_int(f"{d}/scaling_min_freq")
        hi = fs.read_int(f"{d}/scaling_max_freq")
        gov = fs.read_text(f"{d}/scaling_governor")
        cur = fs.read_int(f"{d}/scaling_cur_freq")
        set_path = fs.path(f"{d}/scaling_setspeed")
        if gov == "userspace":
            sp = fs.try_text(f"{d}/scaling_setspeed", "")
            target = int(sp) if sp and sp.isdigit() else cur
        elif gov == "powersave":
            target = lo
        else:  # performance, and the dynamic governors under a busy load
            target = hi
        target = min(max(target, lo), hi)
        table = fs.try_list(f"{d}/scaling_available_frequencies")
        if table:
            # The hardware runs at a table point: the highest one not above the target.
            ok = [f for f in table if lo <= f <= target] or [min(f for f in table if f >= lo)]
            target = max(ok)
        for leaf_name in ("scaling_cur_freq", "cpuinfo_cur_freq"):
            p = fs.path(f"{d}/{leaf_name}")
            if os.path.exists(p):
                with open(p, "w") as fh:
                    fh.write(f"{target}\n")
        if os.path.exists(set_path):
            with open(set_path, "w") as fh:
                fh.write(f"{target if gov == 'userspace' else '<unsupported>'}\n")

    fs.before_write = before
    fs.after_write = after


# --------------------------------------------------------------------------- workload model

SIZES = {"small": 1.0, "medium": 4.0, "large": 16.0}


def speedup(p: float, phi: float, f: float, k: float, m1: float, m2: float) -> float:
    """Variable-delay speedup of seed 003, eq. 15-16 (phi = F_cpu / F_mem)."""
    rho = 1.0 + k * phi
    mu1 = min(m1 + m2, 1.0)
    mup = min(m1 + m2 / p, 1.0)
    den = max(((1 - mup) + rho * mup) * ((1 - f) + f / p), rho * mup)
    return ((1 - mu1) + rho * mu1) / den


def model_time_s(truth: dict, p: int, f_ghz: float, size: str = "small",
                 speed: float = 1.0) -> float:
    """Noise-free run time: serial time at this frequency divided by the speedup.

    Serial time = work * ((1 - mu1) + rho * mu1) / (speed * F): compute instructions take one
    core cycle, memory instructions rho of them (seed 003, eq. 9-10); ``speed`` is the core's
    instructions per cycle relative to the reference core.
    """
    phi = f_ghz / truth["f_mem_ghz"]
    rho = 1.0 + truth["k"] * phi
    mu1 = min(truth["m1"] + truth["m2"], 1.0)
    serial = truth["work_s"] * SIZES[size] * ((1 - mu1) + rho * mu1) / (speed * f_ghz)
    return serial / speedup(p, phi, truth["f"], truth["k"], truth["m1"], truth["m2"])


def cpu_cluster(spec: dict, cpu: int) -> int:
    for i, cl in enumerate(spec["clusters"]):
        if cpu in cl["cpus"]:
            return i
    raise ValueError(f"cpu {cpu} is not on board {spec['name']}")


def policy_of(spec: dict, cpu: int) -> str:
    for pnum, pcpus, _ in _policy_groups(spec):
        if cpu in pcpus:
            return f"policy{pnum}"
    raise ValueError(f"cpu {cpu} has no policy on {spec['name']}")


def run_model(spec: dict, cpus: list[int], threads: int, freqs_khz: dict[int, int],
              size: str = "small") -> dict:
    """Time and power of a run on ``cpus`` at the given per-cpu frequencies (noise-free).

    Threads beyond the cpus share them (p = min(threads, cpus)); with cpus of different speed
    the slowest one paces the run (the threads meet at barriers).
    """
    p = max(1, min(threads, len(cpus)))
    used = list(cpus)[:p]
    speeds = []
    for c in used:
        cl = spec["clusters"][cpu_cluster(spec, c)]
        speeds.append((cl["ipc"] * freqs_khz[c] / 1e6, freqs_khz[c] / 1e6, cl["ipc"]))
    _, f_ghz, ipc = min(speeds)
    t = model_time_s(spec["truth"], p, f_ghz, size, speed=ipc)
    power = {}
    for i, cl in enumerate(spec["clusters"]):
        n = sum(1 for c in used if c in cl["cpus"])
        f = max((freqs_khz.get(c, 0) for c in cl["cpus"]), default=0)
        power[i] = cl["p_static"] + n * (dynamic_power_w(cl, f) if f else 0.0)
    return {"time_s": t, "p": p, "cpus_used": used, "f_ghz": f_ghz,
            "cluster_power_w": power, "power_w": sum(power.values())}
