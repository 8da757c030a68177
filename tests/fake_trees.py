"""Fake sysfs trees for tests: the generator lives in opptune.agent.virtual_board.

``fake_tree(tmp_path, "odroid-xu4")`` builds a board's tree; ``spec_variant`` derives a custom
board (another driver style, another numbering) from a known one. ``cgroup_tree`` adds a
cgroup v2 hierarchy with one unit.
"""

from __future__ import annotations

import os

from opptune.agent.virtual_board import BOARDS, board_spec, make_tree

BOARD_NAMES = tuple(BOARDS)


def fake_tree(tmp_path, name: str = "odroid-xu4", **changes) -> str:
    """Write board ``name`` (with top-level spec ``changes``) under tmp_path/name."""
    spec = spec_variant(name, **changes)
    return make_tree(spec, str(tmp_path / f"{name}-tree"))


def spec_variant(name: str, **changes) -> dict:
    spec = board_spec(name)
    spec.update(changes)
    return spec


def interleaved_smt_spec() -> dict:
    """One socket, 4 cores x 2 threads numbered (0,1),(2,3)... as AMD/ARM SMT boards do."""
    spec = board_spec("x86-2numa")
    cpus = list(range(8))
    cl = dict(spec["clusters"][0], cpus=cpus)
    spec.update(name="x86-interleaved", nodes=[cpus], siblings=[[c, c + 1] for c in (0, 2, 4, 6)],
                packages={0: cpus}, clusters=[cl])
    return spec


def amd_pstate_spec() -> dict:
    """amd-pstate (passive): no table, generic governors incl. userspace, global boost file."""
    spec = interleaved_smt_spec()
    spec.update(name="x86-amd-pstate", driver="amd-pstate", governors=list(
        ["conservative", "ondemand", "userspace", "powersave", "performance", "schedutil"]),
        initial_governor="schedutil", boost_file="/sys/devices/system/cpu/cpufreq/boost",
        rapl=False)
    spec["clusters"][0].update(min_khz=400000, max_khz=4500000, base_khz=3000000)
    return spec


def cppc_spec() -> dict:
    """An arm64 server with cppc_cpufreq: per-cpu policies, no table, userspace available."""
    spec = board_spec("rpi4")
    cl = spec["clusters"][0]
    cl.update(freqs_khz=None, min_khz=1000000, max_khz=2800000, per_cpu_policy=True)
    spec.update(name="arm-cppc", driver="cppc_cpufreq", energy_model=False)
    return spec


def cgroup_tree(root, unit="web.service", cpus="0-1", parent_allows=None):
    """A cgroup v2 tree under ``root`` (a Path) with ``unit`` under system.slice, the cpuset
    controller enabled, its ``cpuset.cpus`` at ``cpus``; returns the unit's directory.

    ``cpuset.cpus.effective`` stands for the kernel's: with ``parent_allows`` None the slice
    allows every cpu, and the unit's effective set is whatever its cpuset.cpus says (a link to
    it: processes that write the tree, an agent killed in a test among them, need no
    emulation); given a cpu list, the slice allows those only, and the unit's effective set
    stays that list whatever is written (what the kernel gives a cgroup whose cpus its parent
    allows only those of, or none of)."""
    base = root / "sys/fs/cgroup"
    d = base / "system.slice" / unit
    d.mkdir(parents=True)
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cpuset.cpus.effective").write_text("0-7\n")
    (base / "system.slice/cpuset.cpus.effective").write_text(f"{parent_allows or '0-7'}\n")
    (d / "cpuset.cpus").write_text(f"{cpus}\n")
    if parent_allows is None:
        os.symlink("cpuset.cpus", d / "cpuset.cpus.effective")
    else:
        (d / "cpuset.cpus.effective").write_text(f"{parent_allows}\n")
    (d / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    return d
