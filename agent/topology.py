"""CPU topology discovery and the order in which a sweep adds cores.

Everything is read through :class:`SysFS`, so a fake tree gives the same answer a board would.
The result of :func:`read_topology` holds plain types only (lists, dicts with str keys, ints,
str, None) and goes on the wire as it is.

Sweep order (seed 000, section 3.1): the Linux scheduler fills one hardware thread per physical
core, NUMA node after NUMA node, and only then the SMT siblings. With that order
``n_nu`` is the number of physical cores of the first NUMA node (NUMA effects appear for
n > n_nu) and ``n_ht`` the number of physical cores in total (SMT effects appear for n > n_ht).
A platform with one NUMA node has ``n_nu = None``; one without SMT has ``n_ht = None``: the
breakpoint does not exist there, and the model must treat it as invalid, not as a number.
"""

from __future__ import annotations

import os
import re

from ..shared.cpus import format_cpu_list
from .sysfs import KnobUnavailable, SysFS

CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"
_CPU_RE = re.compile(r"^cpu(\d+)$")
_NODE_RE = re.compile(r"^node(\d+)$")


def _as_sysfs(sysfs_or_root) -> SysFS:
    return sysfs_or_root if isinstance(sysfs_or_root, SysFS) else SysFS(sysfs_or_root or "/")


def online_cpus(fs: SysFS) -> list[int]:
    """Online cpus: the ``online`` mask, else the cpuN directories (cpu0 has no online file)."""
    cpus = fs.try_list(f"{CPU_DIR}/online")
    if cpus:
        return cpus
    found = []
    try:
        for name in fs.listdir(CPU_DIR):
            m = _CPU_RE.match(name)
            if m and fs.try_text(f"{CPU_DIR}/{name}/online", "1") != "0":
                found.append(int(m.group(1)))
    except KnobUnavailable:
        pass
    if found:
        return sorted(found)
    # No sysfs at all (containers with a masked /sys): the affinity mask is still a fact.
    try:
        return sorted(os.sched_getaffinity(0)) if fs.root == "/" else []
    except OSError:
        return []


def model_name(fs: SysFS) -> str:
    """Processor/board name from /proc/cpuinfo (x86 "model name", ARM "Model"/"Hardware")."""
    info = fs.try_text("/proc/cpuinfo", "") or ""
    fields: dict[str, str] = {}
    for line in info.splitlines():
        if ":" in line:
            key, _, val = line.partition(":")
            fields.setdefault(key.strip().lower(), val.strip())
    for key in ("model name", "model", "hardware", "cpu model", "uarch", "isa"):
        val = fields.get(key)
        # ARM cpuinfo has a numeric "model"-like line per cpu on some kernels; skip bare numbers.
        if val and not val.isdigit():
            return val
    for rel in ("/sys/firmware/devicetree/base/model", "/proc/device-tree/model"):
        val = fs.try_text(rel)
        if val:
            return val.strip("\x00")
    return "unknown"


def cpumap_cpus(text: str | None) -> list[int]:
    """Cpus of a sysfs hex mask (``cpumap``): 32-bit words, most significant first, comma-separated."""
    if not text:
        return []
    digits = "".join(w.strip() for w in text.strip().split(","))
    try:
        mask = int(digits, 16) if digits else 0
    except ValueError:
        return []
    return [bit for bit in range(mask.bit_length()) if mask >> bit & 1]


def _size_kb(text: str | None) -> int | None:
    if not text:
        return None
    m = re.match(r"^\s*(\d+)\s*([KMG]?)", text)
    if not m:
        return None
    mult = {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024 * 1024}[m.group(2)]
    return int(int(m.group(1)) * mult)


def _caches(fs: SysFS, cpus: list[int]) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for cpu in cpus:
        base = f"{CPU_DIR}/cpu{cpu}/cache"
        try:
            names = [n for n in fs.listdir(base) if n.startswith("index")]
        except KnobUnavailable:
            continue
        for idx in names:
            d = f"{base}/{idx}"
            level = fs.try_int(f"{d}/level")
            ctype = fs.try_text(f"{d}/type")
            shared = fs.try_list(f"{d}/shared_cpu_list") or [cpu]
            key = (level, ctype, tuple(shared))
            if key in seen:
                continue
            seen[key] = {
                "level": level,
                "type": ctype,
                "size_kb": _size_kb(fs.try_text(f"{d}/size")),
                "line_bytes": fs.try_int(f"{d}/coherency_line_size"),
                "ways": fs.try_int(f"{d}/ways_of_associativity"),
                "shared_cpus": shared,
            }
    return sorted(seen.values(), key=lambda c: (c["level"] or 0, c["type"] or "",
                                                 c["shared_cpus"]))


def _policies(fs: SysFS) -> list[dict]:
    """Frequency domains: one entry per cpufreq policy (topology view only; see knobs.cpufreq)."""
    base = f"{CPU_DIR}/cpufreq"
    out = []
    try:
        names = [n for n in fs.listdir(base) if re.match(r"^policy\d+$", n)]
    except KnobUnavailable:
        return out
    for name in sorted(names, key=lambda n: int(n[6:])):
        d = f"{base}/{name}"
        related = fs.try_list(f"{d}/related_cpus") or []
        out.append({
            "name": name,
            "cpus": fs.try_list(f"{d}/affected_cpus") or related,
            "related_cpus": related,
            "driver": fs.try_text(f"{d}/scaling_driver"),
            "cpuinfo_min_khz": fs.try_int(f"{d}/cpuinfo_min_freq"),
            "cpuinfo_max_khz": fs.try_int(f"{d}/cpuinfo_max_freq"),
        })
    return out


def sweep_order_from(cpus: list[int], smt_siblings: list[list[int]],
                     numa_nodes: list[list[int]]) -> tuple[list[int], int | None, int | None]:
    """Scheduler-like core order and its breakpoints (n_nu, n_ht), from plain structure.

    First thread of every physical core, node by node (nodes in id order, cores by their
    lowest cpu id), then the second threads in the same order, then third ones, and so on.
    """
    online = set(cpus)
    node_of = {}
    for i, node in enumerate(numa_nodes):
        for c in node:
            node_of.setdefault(c, i)
    groups: dict[int, list[int]] = {}
    for sib in smt_siblings:
        members = sorted(c for c in sib if c in online)
        if members:
            groups.setdefault(members[0], members)
    for c in cpus:  # cpus with no sibling information are their own core
        if not any(c in g for g in groups.values()):
            groups[c] = [c]
    cores = sorted(groups.values(), key=lambda g: (node_of.get(g[0], 0), g[0]))
    order: list[int] = []
    depth = max((len(g) for g in cores), default=0)
    for level in range(depth):
        for g in cores:
            if level < len(g):
                order.append(g[level])
    used_nodes = {node_of.get(g[0], 0) for g in cores}
    n_nu = None
    if len(used_nodes) > 1:
        first = node_of.get(cores[0][0], 0)
        n_nu = sum(1 for g in cores if node_of.get(g[0], 0) == first)
    n_ht = len(cores) if depth > 1 else None
    return order, n_nu, n_ht


def _clusters(cpus: list[int], capacity: dict[int, int] | None,
              policies: list[dict]) -> list[list[int]]:
    """Groups of identical cores: same cpu_capacity and same maximum frequency.

    Per-core policies on x86 (intel_pstate makes one per cpu) do not split a homogeneous
    machine; a big.LITTLE board or a hybrid x86 differs in capacity or top frequency.
    """
    maxf = {}
    for p in policies:
        for c in p["related_cpus"] or p["cpus"]:
            maxf[c] = p.get("cpuinfo_max_khz")
    groups: dict[tuple, list[int]] = {}
    for c in cpus:
        key = ((capacity or {}).get(c), maxf.get(c))
        groups.setdefault(key, []).append(c)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def read_topology(sysfs_root="/") -> dict:
    """Discover the platform's cpu topology (see the module docstring for the keys' meaning).

    ``sysfs_root`` is a root directory or a :class:`SysFS`.
    """
    fs = _as_sysfs(sysfs_root)
    cpus = online_cpus(fs)
    per_cpu = {}
    capacity: dict[int, int] = {}
    for c in cpus:
        t = f"{CPU_DIR}/cpu{c}/topology"
        sib = fs.try_list(f"{t}/thread_siblings_list") or fs.try_list(f"{t}/core_cpus_list")
        per_cpu[c] = {
            "core_id": fs.try_int(f"{t}/core_id"),
            "package": fs.try_int(f"{t}/physical_package_id"),
            "cluster_id": fs.try_int(f"{t}/cluster_id"),
            "siblings": sib or [c],
        }
        cap = fs.try_int(f"{CPU_DIR}/cpu{c}/cpu_capacity")
        if cap is not None:
            capacity[c] = cap

    smt: dict[int, list[int]] = {}
    online = set(cpus)
    for c in cpus:
        members = sorted(x for x in per_cpu[c]["siblings"] if x in online) or [c]
        smt.setdefault(members[0], members)
    smt_siblings = [smt[k] for k in sorted(smt)]

    packages: dict[int, list[int]] = {}
    for c in cpus:
        pid = per_cpu[c]["package"]
        packages.setdefault(pid if pid is not None and pid >= 0 else 0, []).append(c)

    numa_ids, numa_nodes = [], []
    try:
        node_names = [n for n in fs.listdir(NODE_DIR) if _NODE_RE.match(n)]
    except KnobUnavailable:
        node_names = []
    for name in sorted(node_names, key=lambda n: int(n[4:])):
        listed = fs.try_list(f"{NODE_DIR}/{name}/cpulist")
        if not listed:  # some kernels' and tools' trees carry only the hex mask
            listed = cpumap_cpus(fs.try_text(f"{NODE_DIR}/{name}/cpumap"))
        members = [c for c in (listed or []) if c in online]
        if members:
            numa_ids.append(int(name[4:]))
            numa_nodes.append(members)
    if not numa_nodes:
        numa_ids, numa_nodes = [0], [list(cpus)]

    policies = _policies(fs)
    clusters = _clusters(cpus, capacity or None, policies)
    order, n_nu, n_ht = sweep_order_from(cpus, smt_siblings, numa_nodes)
    cluster_orders = [cluster_sweep_order_from(order, cl) for cl in clusters]
    return {
        "cpus_online": cpus,
        "model_name": model_name(fs),
        "smt_siblings": smt_siblings,
        "smt": any(len(s) > 1 for s in smt_siblings),
        "packages": [{"id": pid, "cpus": packages[pid]} for pid in sorted(packages)],
        "numa_nodes": numa_nodes,
        "numa_node_ids": numa_ids,
        "caches": _caches(fs, cpus),
        "policies": policies,
        "capacity": [capacity.get(c) for c in cpus] if capacity else None,
        "clusters": clusters,
        "heterogeneous": len(clusters) > 1,
        "sweep_order": order,
        "cluster_sweep_orders": cluster_orders,
        "n_nu": n_nu,
        "n_ht": n_ht,
        "sysfs_root": fs.root,
    }


def cluster_sweep_order_from(order: list[int], cluster: list[int]) -> list[int]:
    """The whole-board sweep order restricted to one cluster's cpus."""
    members = set(cluster)
    return [c for c in order if c in members]


def cluster_sweep_order(topology: dict, cluster: int | list[int]) -> list[int]:
    """Sweep order for one cluster of a heterogeneous board.

    ``cluster`` is an index into ``topology["clusters"]`` or a cpu of that cluster given as a
    one-element list ([4] selects the cluster that holds cpu 4).
    """
    clusters = topology["clusters"]
    if isinstance(cluster, int):
        if not 0 <= cluster < len(clusters):
            raise IndexError(f"cluster {cluster} does not exist: the platform has "
                             f"{len(clusters)} cluster(s)")
        chosen = clusters[cluster]
    else:
        want = set(cluster)
        match = [cl for cl in clusters if want & set(cl)]
        if not match:
            raise ValueError(f"no cluster holds cpus {format_cpu_list(want)}")
        chosen = match[0]
    return cluster_sweep_order_from(topology["sweep_order"], chosen)
