"""What stands on a board: the rule the agent applies and the daemon shows.

A board holds one applied configuration per target: the board itself (a configuration run as
the agent's command: its clock), each process (``--pid``) and each systemd unit (``--unit``).
A configuration applied to stay replaces the one of its own target only; the others stand on.

Cpu sets of different targets are independent. A clock is not: it belongs to a cpufreq policy,
which several targets' cpus may share. Where two standing configurations set different clocks
on one policy, the newer one's clock holds there (it was applied last, and its verification
measured it); the older one keeps its cpu set and its clock on its other policies, and is said
to be overridden on that policy (the agent's log, ``opptune status``), not applied again over
the newer one at a restart.

A process may run in a unit that a configuration also confines. The process's own
configuration holds for it (the narrower target, whichever was applied first): it runs on its
cpus, and the unit's cpu set holds for the unit's other processes; the unit's is said to be
overridden for that process. The kernel keeps a process within its unit's cpu set (cgroup
cpuset) all the same, so where the process's cpus are not all among the unit's, the unit's
holds for it and the process's configuration is the one said to be overridden.

Entries here are the hello's (agent/standing.py ``wire``): ``config_id``, ``cpus``,
``freq_khz`` and an optional ``target`` ``{"kind", "pid" | "unit"}``, oldest first; a pid
target's ``in_unit`` names the unit of a configuration in force that the process runs in.
"""

from __future__ import annotations

from typing import Any, Iterable

# why a process's configuration was dropped while the agent ran (its hello's
# standings_dropped: 'CONFIG_ID: process N exited while the agent ran'), not at its restart
# (and a unit's: 'CONFIG_ID: unit web.service stopped (...) while the agent ran'); the daemon
# tells those apart from the drops at a restart by WHILE_RUNNING
WHILE_RUNNING = "while the agent ran"
EXITED_WHILE_RUNNING = f"exited {WHILE_RUNNING}"


def target_key(target: dict[str, Any] | None) -> str:
    """'board', 'pid:4242' or 'unit:web.service': what a configuration stands on."""
    t = target if isinstance(target, dict) else {}
    kind = t.get("kind", "command")
    if kind == "pid":
        return f"pid:{t.get('pid')}"
    if kind == "unit":
        unit = str(t.get("unit"))
        return f"unit:{unit if '.' in unit else unit + '.service'}"
    return "board"


def key_of(entry: dict[str, Any]) -> str:
    return target_key(entry.get("target"))


def policies_of(platform: dict[str, Any] | None, cpus: Iterable[Any]) -> list[str]:
    """The cpufreq policies (names) of the platform description that hold any of ``cpus``."""
    want = {c for c in cpus if type(c) is int}
    out = []
    for pol in (platform or {}).get("policies") or []:
        if not isinstance(pol, dict) or not isinstance(pol.get("name"), str):
            continue
        held = pol.get("related_cpus") or pol.get("cpus") or []
        if isinstance(held, list) and want & set(held):
            out.append(pol["name"])
    return out


def clock_plan(entries: list[dict[str, Any]], platform: dict[str, Any] | None
               ) -> dict[str, tuple[int, str]]:
    """{policy: (kHz, config id)}: the clock each policy holds under ``entries`` (oldest
    first), the newest clock where several set one."""
    plan: dict[str, tuple[int, str]] = {}
    for e in entries:
        if type(e.get("freq_khz")) is int:
            for pol in policies_of(platform, e.get("cpus") or []):
                plan[pol] = (e["freq_khz"], str(e.get("config_id")))
    return plan


def overridden(entries: list[dict[str, Any]], platform: dict[str, Any] | None
               ) -> dict[str, list[dict[str, Any]]]:
    """{config id: [{"policy", "by", "freq_khz"}, ...]}: where a newer entry's different
    clock holds on a policy an entry's cpus share; entries not overridden are absent."""
    plan = clock_plan(entries, platform)
    out: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if type(e.get("freq_khz")) is not int:
            continue
        cid = str(e.get("config_id"))
        for pol in policies_of(platform, e.get("cpus") or []):
            khz, by = plan[pol]
            if by != cid and khz != e["freq_khz"]:
                out.setdefault(cid, []).append({"policy": pol, "by": by, "freq_khz": khz})
    return out


def narrower(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{config id: [...]}: where a process's configuration and its unit's (the pid target's
    ``in_unit``) meet: the unit's entry gets ``{"pid", "by", "cpus"}`` (the process runs on
    the cpus of its own, ``by``), or, where those cpus are not all the unit's, the process's
    entry gets ``{"unit", "by", "cpus"}`` (the unit's cpu set holds for it); the others are
    absent."""
    units = {key_of(e): e for e in entries if (e.get("target") or {}).get("kind") == "unit"}
    out: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        t = e.get("target") if isinstance(e.get("target"), dict) else {}
        if t.get("kind") != "pid" or not isinstance(t.get("in_unit"), str):
            continue
        unit = units.get(target_key({"kind": "unit", "unit": t["in_unit"]}))
        if unit is None:
            continue
        mine, theirs = list(e.get("cpus") or []), list(unit.get("cpus") or [])
        if set(mine) <= set(theirs):
            out.setdefault(str(unit.get("config_id")), []).append(
                {"pid": t.get("pid"), "by": str(e.get("config_id")), "cpus": mine})
        else:
            out.setdefault(str(e.get("config_id")), []).append(
                {"unit": t["in_unit"], "by": str(unit.get("config_id")), "cpus": theirs})
    return out


def with_entry(entries: list[dict[str, Any]], new: dict[str, Any] | None, key: str
               ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(the entries once a configuration for target ``key`` is applied to stay, the entry it
    replaced or None). ``new`` None: it leaves nothing in force there (a command's
    configuration left to the governor ends the board's own)."""
    old = next((e for e in entries if key_of(e) == key), None)
    kept = [e for e in entries if key_of(e) != key]
    return (kept + [new] if new is not None else kept), old
