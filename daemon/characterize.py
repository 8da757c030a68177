"""The daemon's side of ``opptune characterize`` and ``opptune predict --from/--to``.

``characterize``: one sweep job per bench_suite kernel the agent offers (kind "kernel" in its
hello) and, unless args.commands is false, per command workload of its configuration (kind
"command": external programs, e.g. OpenMP binaries, which get t(n) but no MPET runtime parameters;
each runs at the size asked where it has it, else at its first size; without a size asked, a
kernel lacking the ``[sweep]`` size runs at its first too, as a sweep does), over all of the
board's cores (as one platform, whatever [sweep] per_cluster says: MPET's profiles are the runs
without variant; args.per_cluster: each cluster of a big.LITTLE board alone instead, a
platform of its own for MPET, ``ID:cluster<i>``) and, where the board has cpufreq,
``FREQ_STEPS`` frequencies spread over its range (min, mid, max; of a policy with a range
and no table, intel_pstate, its ends and the 100 MHz step nearest their middle:
planner.range_steps), else at the board's own frequency. A
kernel with a done job of the same size that covered every point it would measure, with at least the
repetitions asked (``--reps``), is skipped (resuming after an interruption; a tune's one-point jobs
or an import do not count, nor a job sent before the last drift of the kernel's group or of one
of its clusters' groups, whose cpus its runs used: its runs no longer count, ``drifted`` says
which kernels are measured again for that reason, ``redefined`` which for a drift that is the
change of their program in the agent's configuration, drift.REDEFINED); one with
such a job still under way (or expired, which is resent at the agent's hello) is reported, not
sent twice; one whose last job failed, or was stopped by the agent for its timeouts (done with
the points before the stop, the rest never run), is queued again, and ``again`` names that job
and its reason; but one whose last two jobs at that size over the points it would send (whoever
sent them: characterize, or a sweep of the same points; a sweep of other points counts neither
way) were both stopped for their timeouts while the workload was defined as it is now (its
command or kernel, environment, sizes and the agent's run_timeout_s: the digest of the agent's
hello) is not (``not_retried``): it would hang again, costing stop_after_timeouts x
run_timeout_s each time; args.retry_stopped queues it all the same, and a changed definition
counts as a new workload. The frequency grid is chosen once from the board's description (its
last hello, which the store keeps across a restart), so the line printed says what is measured
even when nothing is queued.

``mpet_data``: the MPET database of the store: per (workload, platform) the median time per core
count (at the highest frequency measured for that group, or at the clock asked for that
platform; runs at the board's own frequency when there is none; of the runs received since the
group's last drift, as its fits take them: store.profile_runs), the mean MPET parameters per
core count (rec.extra["mpet"], where recorded; R(n) of a parallel run = its exec_s over the
group's median t(1), as bench_suite.accounting says), and per platform its breakpoints from its
description (n_nu: cpus of the sweep order on the first NUMA node when the order spans more;
n_ht: physical cores filled before SMT siblings) and the clocks it was measured at.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import TYPE_CHECKING, Any

import msgpack

from ..shared.cpus import format_cpu_list
from ..shared.records import DERIVED_COUNTERS
from .drift import is_redefined, last_event
from .errors import HandlerError
from .jobs import ACTIVE_JOB_STATES, stopped_early
from .planner import (PlanError, clocks_never_apply, cluster_order, cluster_platform,
                      cpufreq_unavailable, physical_cores, plan_sweep, split_cluster,
                      sweep_order, variant_cluster)
from .registry import board_name
from .store import Group
from .sweeps import check_sweep_args, sweep_counts

if TYPE_CHECKING:
    from .service import Daemon

FREQ_STEPS = 3  # min, mid, max of each policy: bounded, and spans the range
# an expired job is resent at its agent's next hello (JobTracker.resume): not queued twice
FOLLOWED = ACTIVE_JOB_STATES + ("expired",)
MPET_KEYS = ("R", "l", "w", "c", "d", "s", "j")


def characterize(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    agent = args.get("agent")
    if not isinstance(agent, str):
        raise HandlerError("bad_args", "characterize needs args.agent (an agent id)")
    info = d.registry.get(agent)
    if info is None:
        raise HandlerError("unknown_agent", d.registry.unknown(agent))
    kernels = sorted(w["name"] for w in info.workloads
                     if isinstance(w, dict) and w.get("kind") == "kernel")
    with_commands = args.get("commands", True)
    if not isinstance(with_commands, bool):
        raise HandlerError("bad_args", "characterize args.commands must be true or false")
    retry_stopped = args.get("retry_stopped", False)
    if not isinstance(retry_stopped, bool):
        raise HandlerError("bad_args", "characterize args.retry_stopped must be true or false")
    per_cluster = args.get("per_cluster", False)
    if not isinstance(per_cluster, bool):
        raise HandlerError("bad_args", "characterize args.per_cluster must be true or false")
    # what each workload runs now (a digest, in the agent's hello; absent from an older agent)
    definitions = {w["name"]: w.get("definition") for w in info.workloads
                   if isinstance(w, dict) and isinstance(w.get("name"), str)}
    commands = {w["name"]: list(w.get("sizes") or ["default"]) for w in info.workloads
                if with_commands and isinstance(w, dict) and w.get("kind") == "command"
                and isinstance(w.get("name"), str)}
    if not kernels and not commands:
        raise HandlerError("no_kernels", f"agent '{agent}' offers no bench_suite kernel: set "
                                         "bench_kernels = [\"all\"] in its configuration")
    asked = args.get("size")
    size = asked or d.config.sweep.size
    if not isinstance(size, str):
        raise HandlerError("bad_args", "characterize args.size must be text")
    # a command runs at the size asked where it has it, else at its first (its own) size;
    # without --size a kernel lacking the [sweep] size runs at its first, as sweep does
    sizes = {k: size for k in kernels}
    if not asked:
        sizes.update({k: s[0] for k in kernels
                      if (s := info.workload_sizes(k)) and size not in s})
    fell_back = {k: sizes[k] for k in kernels if sizes[k] != size}
    sizes.update({c: size if size in s else s[0] for c, s in commands.items()})
    counts = sweep_counts(args, "characterize")
    # checked before the skip below: a board already characterised would otherwise take
    # any value and answer "nothing to queue" (a size asked for must be every kernel's)
    check_sweep_args(agent, info, kernels, asked, counts["max_cores"], None)
    opts = {k: counts[k] for k in ("reps", "max_cores") if counts[k] is not None}
    opts["warmup"] = counts["warmup"] or 0
    # decided once from the board's description (its last hello, kept in the store across a
    # restart), whether or not anything is queued: the line printed says what is measured
    grid, planned = planned_grid(d, info.platform, opts, per_cluster=per_cluster)
    # a command on a virtual board runs off the board: its sweep leaves the board's clocks out
    # (Sweeps.sweep), and so must what counts as having measured it
    board = board_name(info.platform, info.platform_id)
    why_off = clocks_never_apply(info.platform or {}, "command", board)
    off_board = set(commands) if why_off else set()
    unclocked = planned_grid(d, info.platform, opts, ("none",), per_cluster)[1] \
        if off_board else planned
    done, under_way, todo, drifted, redefined, again, not_retried = [], [], {}, [], [], [], []
    events: list[dict[str, Any]] | None = None  # read once, where a kernel is measured again
    for k in sorted(sizes):
        pts = unclocked if k in off_board else planned
        mine = [j for j in d.store.jobs_for(agent, k) if j["size"] == sizes[k]]
        # asking for more repetitions than a job ran measures again (resuming without --reps
        # takes any job that covered the points)
        covering = [j for j in mine if pts <= _points(j["points"])
                    and int(j.get("reps") or 0) >= int(opts.get("reps") or 0)]
        # a job sent before a drift of a group it measures no longer counts: the group's
        # fits and MPET's profiles leave out the runs received before the drift
        since = _drift_since(d, info.platform_id, k, sizes[k], pts, info.agent_id)
        current = [j for j in covering if j["created"] >= since]
        if any(_measured_all(j) for j in current):
            done.append(k)
        elif any(j["state"] in FOLLOWED for j in current):
            # only a job that measures it all is "under way" for the user (not a sweep of
            # fewer cores or frequencies: waiting on that one would not characterise it)
            under_way += [_job(j) for j in current if j["state"] in FOLLOWED]
        else:
            # the jobs over the points characterize sends now only: a sweep of other points
            # (the user's, a tune's) that stopped, or did not, says nothing of these
            stops = stopped_twice([j for j in mine if _points(j["points"]) == pts],
                                  definitions.get(k))
            if stops and not retry_stopped:
                # it would hang again, at the cost of stop_after_timeouts x run_timeout_s
                not_retried.append({"workload": k, "size": sizes[k],
                                    "job_ids": [j["job_id"] for j in stops],
                                    "after_timeouts": stops[-1]["stopped"]["after_timeouts"]})
                continue
            todo.setdefault(sizes[k], []).append(k)
            if any(_measured_all(j) for j in covering):
                # the runs measured another program, or the workload's behaviour drifted
                events = d.store.drift_events() if events is None else events
                last = _last_drift(events, info.platform_id, k, sizes[k], pts, info.agent_id)
                (redefined if last and is_redefined(last["reason"]) else drifted).append(k)
            elif current:
                # its last job stopped early or failed: measured again, and the user is told
                # why it was not done (a program that hangs stops again, after as many points)
                last = current[-1]  # jobs_for lists them as created
                again.append({"workload": k, "job_id": last["job_id"], "state": last["state"],
                              "reason": last.get("reason")})
    queued: list[dict[str, Any]] = []
    for sz, names in sorted(todo.items()):
        queued += d.sweeps.query({"agent": agent, "workloads": names, "size": sz, **opts,
                                  "frequency_grid": grid, "per_cluster": per_cluster})["jobs"]
    return {"agent": agent, "size": size, "kernels": kernels,
            # kernels that lack the [sweep] size (none asked): the size each runs at instead
            "kernel_sizes": fell_back,
            "commands": sorted(commands),
            "command_sizes": {c: sizes[c] for c in sorted(commands)}, "skipped": done,
            "drifted": drifted, "redefined": redefined, "again": again,
            "not_retried": not_retried,
            "under_way": under_way, "queued": queued,
            "frequencies": frequencies_text(grid, planned, info.platform),
            # the clusters measured each alone (--per-cluster), as MPET's platforms
            # BOARD:cluster<i>; [] for the whole board
            "clusters": sorted({v for *_, v in planned if v}),
            "commands_at_no_clock": ({"workloads": sorted(off_board), "why": why_off}
                                     if off_board and grid != "none" else None)}


def _drift_since(d: Daemon, platform: str, workload: str, size: str,
                 planned: set[tuple], agent: str) -> float:
    """The last drift of a group ``planned``'s points measure on ``agent`` (one per variant: a
    per-cluster grid measures a group per cluster; a whole-board group's counts its clusters'
    drifts, store.drift_since; another agent's changed program does not count), 0 where none
    drifted."""
    variants = {variant for *_, variant in planned} or {""}
    return max(d.store.drift_since(Group(platform, workload, size, v), agent) or 0.0
               for v in variants)


def _last_drift(events: list[dict[str, Any]], platform: str, workload: str, size: str,
                planned: set[tuple], agent: str) -> dict[str, Any] | None:
    """The newest of the drift ``events`` that ends the runs of a group ``planned``'s points
    measure on ``agent`` (the one ``_drift_since`` dates)."""
    variants = {variant for *_, variant in planned} or {""}
    found = [e for v in variants
             if (e := last_event(events, Group(platform, workload, size, v), agent))
             is not None]
    return max(found, key=lambda e: e["since"], default=None)


def stopped_twice(jobs: list[dict[str, Any]], definition: Any) -> list[dict[str, Any]]:
    """The last two of a workload's ``jobs`` (at a size, over the points characterize would
    send, in creation order) where the agent stopped both for their timeouts while the
    workload was defined as it is now (``definition``, its hello's digest); [] otherwise: a
    job after them that did not stop, a changed command or run_timeout_s, or an agent (or a
    stored job) that gives no digest."""
    last = jobs[-2:]
    if len(last) < 2 or not isinstance(definition, str) or not definition:
        return []
    same = all((j.get("stopped") or {}).get("definition") == definition for j in last)
    return last if same else []


def _measured_all(job: dict[str, Any]) -> bool:
    """Done over every point it was sent with (not stopped early by the agent)."""
    return job["state"] == "done" and not stopped_early(job)


def _points(points: Any) -> set[tuple]:
    """A job's points as comparable keys: (cpus, threads, freq_khz, variant)."""
    return {(tuple(p.get("cpus") or ()), p.get("threads"), p.get("freq_khz"),
             str(p.get("variant", ""))) for p in points or [] if isinstance(p, dict)}


def planned_grid(d: Daemon, platform: dict[str, Any] | None, opts: dict[str, Any],
                 grids: tuple[str | int, ...] = (FREQ_STEPS, "none"),
                 per_cluster: bool = False) -> tuple[str | int, set[tuple]]:
    """(grid, points) characterize measures every workload at (a sweep's points depend on the
    board and the counts, not on the workload or its size): ``FREQ_STEPS`` where the board's
    cpufreq offers frequencies for every point, else "none" (cores only, at the board's own
    frequency: nothing it cannot set). A done job counts as this characterisation only when
    it covered these points (a tune's one-point jobs, an import or a sweep of fewer cores do
    not). The whole board, whatever [sweep] per_cluster says (MPET profiles a platform over
    its cores 1..nmax from the runs without variant); with ``per_cluster``, each cluster of a
    heterogeneous board alone (its own platform for MPET), the whole board where it has one."""
    for grid in grids:
        try:
            job = plan_sweep(platform or {}, "", d.config.sweep, reps=opts.get("reps"),
                             max_cores=opts.get("max_cores"), frequency_grid=grid,
                             per_cluster=per_cluster)
        except (PlanError, ValueError):
            continue
        return grid, _points(job["points"])
    return "none", set()


def frequencies_text(grid: str | int, planned: set[tuple],
                     platform: dict[str, Any] | None = None) -> str:
    """What the grid measures a policy at, counted from the planned points (a policy that
    gives only its range, intel_pstate, gets three of its 100 MHz steps too). A
    policy whose own top clock is left out (a big.LITTLE board swept as a whole: a point's
    cpus run at one clock that all their policies offer) is named with what it gets."""
    if grid == "none":
        return "board's own"
    per_cpu: dict[tuple, set] = {}
    for cpus, _, freq, _ in planned:
        if len(cpus) == 1:  # one cpu: one policy's frequencies
            per_cpu.setdefault(cpus, set()).add(freq)
    n = max((len(f) for f in per_cpu.values()), default=0)
    names = {1: "(max)", 2: "(min, max)", 3: "(min, mid, max)"}
    text = f"{n} per policy {names.get(n, '(spread over its range)')}"
    tables = ((platform or {}).get("cpufreq") or {}).get("frequencies_khz") or {}
    for pol in (platform or {}).get("policies") or []:
        cpus = set(pol.get("related_cpus") or pol.get("cpus") or [])
        top = max(tables.get(pol.get("name")) or [0])
        got = sorted({f for c, _, f, _ in planned if f and cpus & set(c)})
        if got and top > got[-1]:
            text += (f"; {pol['name']} (cpus {format_cpu_list(cpus)}) at "
                     f"{', '.join(f'{f / 1000:g}' for f in got)} MHz, not up to its "
                     f"{top / 1000:g} MHz: a point runs its cpus at one clock, one every "
                     "policy among them offers")
    return text


def _job(j: dict[str, Any]) -> dict[str, Any]:
    return {"job_id": j["job_id"], "workload": j["workload"], "size": j["size"],
            "state": j["state"]}


def breakpoints(platform: dict[str, Any], variant: str = "") -> dict[str, Any]:
    """n_nu, n_ht and nmax of the board ``platform`` describes, or of its cluster
    ``variant`` alone (its cpus in their sweep order)."""
    order = cluster_order(platform, variant) if variant else sweep_order(platform)
    n_nu = None
    nodes = [set(n) for n in platform.get("numa_nodes") or [] if isinstance(n, list)]
    if len(nodes) > 1 and order:
        first = next((n for n in nodes if order[0] in n), set())
        k = 0
        while k < len(order) and order[k] in first:
            k += 1
        n_nu = k if 0 < k < len(order) else None
    return {"n_nu": n_nu, "n_ht": physical_cores(platform, order), "nmax": len(order)}


# a group with no runs at the clock asked for its platform: no profile there
_ABSENT = object()


def _profile_freq(by_freq: dict, platform: str, clock: dict) -> Any:
    """The frequency a group's profile is taken at: ``clock``'s for its platform where it names
    one (``_ABSENT`` where the group has no runs there), else the highest it was measured at
    (None: the board's own frequency, no cpufreq)."""
    if platform in clock:
        want = clock[platform]
        return next((f for f in by_freq if f is not None and abs(f - want) < 0.5), _ABSENT)
    return max((f for f in by_freq if f is not None), default=None)


def _clock_arg(args: dict[str, Any]) -> dict[str, float]:
    """args.clock, ``{platform: MHz}``, checked (HandlerError names what is wrong)."""
    clock = args.get("clock") or {}
    if not isinstance(clock, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0 for k, v in clock.items()):
        raise HandlerError("bad_args", "clock must map platform ids to a frequency in MHz > 0")
    return {k: float(v) for k, v in clock.items()}


def _by_platform(clock: dict[str, float], measured: set[str],
                 agents: dict[str, str]) -> dict[str, float]:
    """args.clock with each agent name (a key that is no platform measured; with
    ``:cluster<i>``, that cluster of its board) as its platform id, as ``opptune predict``
    resolves --to and --on: the client asks in one query, before it knows the id."""
    out = {}
    for k, v in clock.items():
        base, variant = split_cluster(k)
        if k not in measured and base in agents:
            k = cluster_platform(agents[base], variant)
        out[k] = v
    return out


def mpet_data(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """Profiles as ``[{workload, platform, size, freq_mhz, t: {n: s}, params: {n: {..}},
    counters: {n: {name: value}}}]`` (counters: the derived ones, ``DERIVED_COUNTERS``)
    and ``platforms: {id: {n_nu, n_ht, nmax, board, clocks, cpufreq}}`` (clocks: every
    frequency, MHz, its profiles could be taken at; cpufreq: false where the board cannot set
    one); args.size keeps one size class; args.clock
    ``{platform: MHz}`` (a platform id or an agent name) takes that platform's profiles at that
    frequency (a group not measured there has none) instead of each at its highest;
    under_way: {agent: its jobs queued, sent or running}."""
    size = args.get("size")
    clock = _clock_arg(args)
    groups: dict[tuple, dict[Any, dict[int, list]]] = {}
    # runs marked for a neighbour on their cpus are no profile either, unless the load is
    # accepted (the daemon's accept_load), as in fits
    for plat, work, inp, cores, freq, t, text, packed, variant in d.store.profile_runs(
            None if d.store.accept_load else False):
        if size is not None and inp != size or variant and variant_cluster(variant) is None:
            continue
        plat = cluster_platform(plat, variant)
        raw = json.loads(text) if packed is None else msgpack.unpackb(packed)
        mpet = (raw.get("extra") or {}).get("mpet")
        ctrs = raw.get("counters") if isinstance(raw.get("counters"), dict) else {}
        groups.setdefault((work, plat, inp), {}).setdefault(freq, {}).setdefault(
            int(cores), []).append((t, mpet if isinstance(mpet, dict) else None,
                                    {k: float(v) for k, v in ctrs.items()
                                     if k in DERIVED_COUNTERS and _finite(v)}))
    agents = {a.agent_id: a.platform_id for a in d.registry.all()}
    clock = _by_platform(clock, {plat for _, plat, _ in groups}, agents)
    profiles = []
    clocks: dict[str, set[float]] = {}
    for (work, plat, inp), by_freq in sorted(groups.items(), key=lambda kv: str(kv[0])):
        clocks.setdefault(plat, set()).update(f for f in by_freq if f is not None)
        freq = _profile_freq(by_freq, plat, clock)
        if freq is _ABSENT:
            continue
        per_n = by_freq[freq]
        prof: dict[str, Any] = {"workload": work, "platform": plat, "size": inp,
                                "freq_mhz": freq, "t": {}, "params": {}, "counters": {}}
        t1 = statistics.median(t for t, _, _ in per_n[1]) if 1 in per_n else None
        for n, runs in sorted(per_n.items()):
            prof["t"][str(n)] = statistics.median(t for t, _, _ in runs)
            # a parallel run cannot know t(1): R(n) = exec_s(n) / t(1) (bench_suite.accounting)
            ps = [m if "R" in m or not t1 or not isinstance(m.get("exec_s"), (int, float))
                  else {**m, "R": float(m["exec_s"]) / t1} for _, m, _ in runs if m]
            vals = {k: statistics.fmean(float(m[k]) for m in ps) for k in MPET_KEYS
                    if ps and all(isinstance(m.get(k), (int, float)) for m in ps)}
            if vals:
                prof["params"][str(n)] = vals
            # the derived counters (relative values) every run of the point gave, as the
            # seed's pc: their mean; one a board cannot count stays out (invalid in sc)
            ctrs = {k: statistics.fmean(c[k] for _, _, c in runs) for k in DERIVED_COUNTERS
                    if all(k in c for _, _, c in runs)}
            if ctrs:
                prof["counters"][str(n)] = ctrs
        profiles.append(prof)
    platforms = {}
    for plat in {p["platform"] for p in profiles} | set(clock) & set(clocks):
        base, variant = split_cluster(plat)
        desc = d.store.platform(base) or {}
        platforms[plat] = {**breakpoints(desc, variant),
                           "board": board_name(desc, base) + (f":{variant}" if variant else ""),
                           "clocks": sorted(clocks.get(plat, ())),
                           "cpufreq": cpufreq_unavailable(desc) is None}
    only, points = ([], []) if d.store.accept_load else _marked(d, groups, size, clock)
    # jobs not finished yet: a prediction made meanwhile rests on part of what they measure
    under_way: dict[str, int] = {}
    for j in d.store.active_jobs():
        under_way[j["agent"]] = under_way.get(j["agent"], 0) + 1
    return {"profiles": profiles, "platforms": platforms, "agents": agents,
            "marked_only": only, "marked_points": points, "under_way": under_way}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _marked(d: Daemon, groups: dict[tuple, Any], size: str | None,
            clock: dict[str, float]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Groups measured with every run marked (so no profile), and the core counts of the
    other groups' profiles (their frequency) with every run marked (so missing from them):
    the CLI says so instead of "not measured", or of nothing."""
    counts: dict[tuple, int] = {}
    cores: dict[tuple, set[int]] = {}
    for plat, work, inp, n, freq, *_, variant in d.store.profile_runs(marked=True):
        key = (work, cluster_platform(plat, variant), inp)
        if size is not None and inp != size or variant and variant_cluster(variant) is None:
            continue
        if key not in groups:
            counts[key] = counts.get(key, 0) + 1
            continue
        by_freq = groups[key]
        # the profile's frequency, as mpet_data takes it
        top = _profile_freq(by_freq, plat, clock)
        if top is not _ABSENT and freq == top and int(n) not in by_freq[top]:
            cores.setdefault(key, set()).add(int(n))
    return ([{"workload": w, "platform": p, "size": i, "runs": n}
             for (w, p, i), n in sorted(counts.items())],
            [{"workload": w, "platform": p, "size": i, "cores": sorted(ns)}
             for (w, p, i), ns in sorted(cores.items())])
