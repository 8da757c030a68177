"""Cpu sets as text, in the kernel's list notation ("0-3,8,10-11"): what sysfs files hold and
what every cpu set shown to a user is written as (a 16-cpu board's configuration reads "0-15",
not sixteen numbers); and cpufreq policies that share a value, named as one."""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping


def parse_cpu_list(text: str) -> list[int]:
    """Parse a kernel cpu list ("0-3,8,10-11", stride "0-7:2", or cpufreq's "0 1 2 3")."""
    out: set[int] = set()
    text = ",".join(text.split())
    if not text:
        return []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        stride = 1
        if ":" in part:
            part, s = part.split(":", 1)
            stride = int(s.split("/")[0])
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1, max(1, stride)))
        else:
            out.add(int(part))
    return sorted(out)


def format_cpu_list(cpus) -> str:
    """Inverse of :func:`parse_cpu_list`: [0,1,2,3,8] -> "0-3,8"; the order given is lost."""
    cpus = sorted(set(int(c) for c in cpus))
    parts = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


_POLICY = re.compile(r"policy(\d+)")


def policies_text(values: Mapping[str, Any], show: Callable[[Any], str]) -> str:
    """Each value once, with the policies at it: {"policy0": v, "policy1": v, "policy4": w}
    -> "policy0-1 V, policy4 W" (``show`` writes a value). A board with a policy per cpu
    (intel_pstate) lists them all otherwise. Names not of the form policyN stay whole."""
    def number(name: str) -> float:
        m = _POLICY.fullmatch(name)
        return int(m.group(1)) if m else float("inf")

    groups: dict[Any, list[str]] = {}
    for name in sorted(values, key=lambda n: (number(n), n)):
        groups.setdefault(values[name], []).append(name)
    parts = []
    for value, names in groups.items():
        numbered = [int(m.group(1)) for m in map(_POLICY.fullmatch, names) if m]
        if numbered:
            parts.append(f"policy{format_cpu_list(numbered)} {show(value)}")
        parts += [f"{n} {show(value)}" for n in names if not _POLICY.fullmatch(n)]
    return ", ".join(parts)
