"""Drift: a workload whose verified results keep leaving the prediction interval (a kernel
update, thermal throttling, a new version of the workload) is measured again.

After ``[daemon] drift_off_count`` consecutive "off" verdicts of the same group on the same
agent (a "verified" or "unconfirmed" one, whose time lay within the interval, resets the
count; refused, failed or marked ones do not count), the daemon
records a drift event with the reason, sends a new sweep of the group's points (sweeps.py): its
workload and size at the clocks its jobs measured it at (not those only a recommendation's
verification ran at; none set: the daemon's [sweep] grid), on the cpus it was measured on (a ``cluster<i>`` group on that cluster alone, as a
per-cluster sweep measured it; a group without variant over the whole board). From then on the
group is fitted, and profiled for MPET (characterize.mpet_data), only from runs received after
the event (store.group_runs, store.profile_runs: one rule), and ``opptune characterize`` counts
only jobs sent after it: the measurements of the old behaviour no longer describe it. A
``cluster<i>`` group's drift counts for the workload's whole-board group too (its runs ran on
that cluster): its next ``characterize`` measures it again; and a whole-board group's drift
for each of its ``cluster<i>`` groups (they ran on the cores that drifted; a per-cluster sweep
measures them again). One rule, store.drift_ends. The
sweep's completion fits and recommends again through the usual job path. ``opptune status``
lists the events (``drift``).

A workload whose program changed (its command, arguments or environment in the agent's
configuration, or the code it runs: the ``program`` digest of its hello, agent/workloads.py and
agent/program_id.py) is a new version of it that nothing needs to detect: at the hello that says
so (at the agent's start, or one it sends before the first run of a program changed while it
runs) the daemon records a drift event of its own reason (``REDEFINED``) for each size with runs of
it on the agent's platform or jobs sent to the agent, without a sweep, that ends the runs of
that agent only (``agent_only``): a program is an agent's (its configuration, the files on its
board), and the platform's other agents (a fleet of identical boards) keep measuring theirs;
their runs stay in the fits, which pool a platform's agents, until their own hello says their
program changed too. The agent's runs from before stay stored but no longer count, by the same
rule; ``opptune characterize`` measures it again (``redefined``). Each run record says the
program it measured (``extra["program"]``, agent/runner.py): one of the old program that reaches
the daemon after the hello (it waited in the agent's outbox across the restart) is stored as
received just before that drift (service._before_redefinition), with the old ones.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..shared.config import DaemonConfig
from .errors import HandlerError
from .recommender import JUDGED
from .store import Group, Store, drift_ends
from .sweeps import Sweeps

log = logging.getLogger("opptune.daemon")

# the reason of the drift event of a workload whose program changed (Drift.redefined), by which
# characterize tells it from a drift of the workload's behaviour
REDEFINED = ("its program changed in the agent's configuration (command, arguments or "
             "environment) or on the board (its executable, a script, the built kernels): "
             "the agent's runs from before measured another program; the runs of the "
             "platform's other agents stay in (each runs its own configuration and files)")
# the reason of the drift events stored before the code on the board counted (they end the
# runs of the platform's every agent)
_REDEFINED_BEFORE = ("its program changed in the agent's configuration (command, arguments or "
                     "environment): the runs from before measured another program")


def is_redefined(reason: Any) -> bool:
    """Whether a drift event's reason is a changed program's (``REDEFINED``, as stored now or
    before)."""
    return reason in (REDEFINED, _REDEFINED_BEFORE)


def programs(workloads: Any) -> dict[str, str]:
    """{name: program digest} of the workloads of a hello that give one (agent/workloads.py;
    an older agent's give none)."""
    return {w["name"]: w["program"] for w in workloads or []
            if isinstance(w, dict) and isinstance(w.get("name"), str)
            and isinstance(w.get("program"), str) and w["program"]}


def changed_programs(before: Any, after: Any) -> list[str]:
    """The workloads whose program differs between two hellos' workloads (both give one). A
    workload whose new hello's ``program_core`` (its program less the shared libraries and a
    script's #! interpreter, as agents digested it before they covered them:
    agent/workloads.py) is the program of the one before is the same program newly digested
    with them, not a change: an upgraded agent's measurements from before still count."""
    old, new = programs(before), programs(after)
    core = {w["name"]: w["program_core"] for w in after or []
            if isinstance(w, dict) and isinstance(w.get("program_core"), str)}
    return sorted(n for n in new if n in old and old[n] != new[n] and old[n] != core.get(n))


def consecutive_off(recs: list[dict[str, Any]], agent: str, group: Group,
                    since: float | None) -> list[dict[str, Any]]:
    """The group's latest verdicts on ``agent`` after ``since``, newest first, while "off"."""
    mine = [r for r in recs if r["agent"] == agent and Group(r["platform"], r["workload"],
                                                                r["input"], r["variant"]) == group
            and r["state"] in JUDGED and r["updated"] > (since or -1.0)]
    out = []
    for r in sorted(mine, key=lambda r: r["updated"], reverse=True):
        if r["state"] != "off":
            break
        out.append(r)
    return out


class Drift:
    def __init__(self, config: DaemonConfig, store: Store, sweeps: Sweeps):
        self.config = config
        self.store = store
        self.sweeps = sweeps

    def verdict(self, agent: str, group: Group, state: str, now: float) -> bool:
        """Called after a verdict was stored; True when the group is re-characterised (the
        caller then skips its refit: the old runs no longer count)."""
        limit = self.config.drift_off_count
        if limit <= 0 or state != "off":
            return False
        offs = consecutive_off(self.store.recommendations(), agent, group,
                               self.store.drift_since(group, agent))
        if len(offs) < limit:
            return False
        reason = (f"{len(offs)} consecutive verifications outside the prediction interval "
                  f"(last: {offs[0].get('error') or 'off'})")
        job_ids: list[str] = []
        error = None
        # the clocks the group was swept at: the daemon's [sweep] grid (by default the
        # governor's) would turn a group recommended at set clocks into one without them; a
        # verification's clock would add a clock at every core count
        clocks = self.store.swept_clocks_khz(group) or None
        try:
            # the group's own points: a cluster<i> group on its cluster, a whole-board one
            # over the board, whatever [sweep] per_cluster says (else no run joins it)
            jobs = self.sweeps.auto(agent, group.workload, size=group.input,
                                    frequencies=clocks, variant=group.variant)
            job_ids = [j["job_id"] for j in jobs]
        except HandlerError as exc:
            error = f"cannot re-characterise: {exc}"
        self.store.save_drift(agent, group, reason, job_ids, error, now)
        name = "/".join(group)
        if error:
            log.warning("drift on %s (agent %s): %s; %s", name, agent, reason, error)
        else:
            log.warning("drift on %s (agent %s): %s; re-characterising it (job %s) and "
                        "recommending again after it", name, agent, reason, ", ".join(job_ids))
        return True


    def redefined(self, agent: str, platform: str, before: Any, after: Any,
                  now: float) -> list[str]:
        """At a hello of ``agent`` on ``platform``: the workloads whose program changed since
        its stored hello (``before``; ``after`` this one's workloads), each with a drift event
        (``REDEFINED``, no sweep) per size it has runs of on ``platform`` or jobs sent to the
        agent, without variant (it ends its clusters' groups too, store.drift_ends)."""
        names = changed_programs(before, after)
        if not names:
            return []
        inputs: dict[str, set[str]] = {}
        for g in self.store.groups():
            if g.platform == platform and g.workload in names:
                inputs.setdefault(g.workload, set()).add(g.input)
        for name in names:
            # and the sizes of its jobs sent to the agent before: their runs of the old program
            # may still wait in its outbox (the daemon puts them before this drift)
            inputs.setdefault(name, set()).update(j["size"]
                                                  for j in self.store.jobs_for(agent, name))
        for name in names:
            sizes = sorted(inputs.get(name, ()))
            for size in sizes:
                self.store.save_drift(agent, Group(platform, name, size, ""), REDEFINED, [],
                                      None, now, agent_only=True)
            log.warning("agent %s: the program of workload %s changed: its runs from before "
                        "(sizes %s) no longer count, the platform's other agents' do; opptune "
                        "characterize measures it again",
                        agent, name, ", ".join(sizes) or "none")
        return names


def last_event(events: list[dict[str, Any]], group: Group,
               agent: str | None = None) -> dict[str, Any] | None:
    """The newest of ``events`` (as store.drift_events gives them) that ends ``group``'s runs
    from before it (store.drift_ends), of every agent's or of ``agent``'s own; None where none
    does."""
    mine = [e for e in events if (e["platform"], e["workload"], e["input"]) == group[:3]
            and drift_ends(e["variant"], group.variant)
            and (not e.get("agent_only") or e["agent"] == agent)]
    return max(mine, key=lambda e: e["since"], default=None)


def fit_predates(fit: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest drift event after stored fit ``fit`` was made that leaves its runs out
    (store.drift_ends: its group's, a whole-board group's clusters', a cluster group's
    whole-board group's), as ``{agent, variant, since, job_ids, agent_only}`` (job_ids: its
    sweep's, [] where it sent none; agent_only: it left out that agent's runs only, a changed
    program's); None when the fit is as current as its runs."""
    later = [e for e in events if e["since"] > fit["created"]
             and all(e[k] == fit[k] for k in ("platform", "workload", "input"))
             and drift_ends(e["variant"], fit["variant"])]
    if not later:
        return None
    e = max(later, key=lambda e: e["since"])
    return {"agent": e["agent"], "variant": e["variant"], "since": e["since"],
            "job_ids": e["job_ids"], "agent_only": bool(e.get("agent_only"))}


def status_rows(store: Store, state_of: Callable[[str], str | None]
                ) -> list[dict[str, Any]]:
    """Drift events for ``opptune status``: why, the sweep's state (``state_of(job_id)``),
    and the recommendation made after it (null until there is one)."""
    events = store.drift_events()
    recs = store.recommendations() if events else []
    out = []
    for e in events:
        group = {k: e[k] for k in ("platform", "workload", "input", "variant")}
        after = [r for r in recs if r["agent"] == e["agent"] and r["created"] >= e["since"]
                 and all(r[k] == v for k, v in group.items())]
        out.append({"agent": e["agent"], "group": group, "reason": e["reason"],
                    "since": e["since"], "job_ids": e["job_ids"],
                    "job_states": [state_of(j) for j in e["job_ids"]], "error": e["error"],
                    "recommendation": after[-1]["config_id"] if after else None})
    return out
