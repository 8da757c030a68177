"""Sweep planning: which points an agent measures for one workload.

A sweep takes cores 1..N in the platform's sweep order (the agent's topology puts distinct
physical cores and NUMA nodes first), one thread per core, and every core count at every
frequency of the frequency grid (``SweepDefaults.frequency_grid``):

* ``"list"`` (default): the ``frequencies`` list (kHz); an empty list leaves the frequency alone;
* ``"none"``: leave the frequency alone (the board's own governor);
* ``"all"``: every frequency the points' cpufreq policies offer;
* ``"N"`` (a whole number >= 1): N frequencies evenly spread over the offered table, lowest and
  highest included (``"1"`` = the highest).

Only frequencies that every point of a sweep can be set to are planned: the intersection of the
tables of the policies of the sweep's cpus (so all core counts share one grid, which is what a
cores x frequency model needs). With ``per_cluster`` on a heterogeneous board (big.LITTLE) each
cluster is swept on its own, in the cluster's own sweep order and with its own table; its points
carry ``variant = "cluster<i>"`` (i indexes ``platform["clusters"]``), so the daemon fits and
recommends per cluster. A homogeneous board has one cluster and no variant.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..shared.clock_words import GOVERNOR_CLOCK, OWN_CLOCK, clock_text
from ..shared.config import ConfigError, SweepDefaults
from ..shared.cpus import format_cpu_list


class PlanError(ValueError):
    """The requested sweep cannot be planned on this platform (e.g. frequencies without
    cpufreq)."""


def sweep_order(platform: dict[str, Any]) -> list[int]:
    """The cpus in the order a sweep adds them: ``sweep_order``, else ``cpus_online``, else
    0..n_cpus-1."""
    for key in ("sweep_order", "cpus_online"):
        order = platform.get(key)
        if isinstance(order, list) and order and all(isinstance(c, int) for c in order):
            return list(dict.fromkeys(order))
    n = platform.get("n_cpus")
    return list(range(n)) if isinstance(n, int) and n > 0 else [0]


def cpu_count_known(platform: dict[str, Any]) -> bool:
    """Whether the platform names its cpus (``sweep_order``, ``cpus_online`` or ``n_cpus``);
    without them ``sweep_order`` falls back to cpu 0 alone."""
    return any(isinstance(platform.get(k), list) and platform[k]
               and all(isinstance(c, int) for c in platform[k])
               for k in ("sweep_order", "cpus_online")) or (
        isinstance(platform.get("n_cpus"), int) and platform["n_cpus"] > 0)


def cluster_orders(platform: dict[str, Any]) -> list[list[int]]:
    """Per cluster (index into ``platform["clusters"]``), its cpus in sweep order: the
    platform's ``cluster_sweep_orders`` when it sent them, else the board-wide sweep order
    restricted to each cluster. One cluster (the whole board) when none are described."""
    given = platform.get("cluster_sweep_orders")
    clusters = platform.get("clusters")
    if isinstance(given, list) and given and all(isinstance(o, list) and o for o in given):
        return [list(o) for o in given]
    order = sweep_order(platform)
    if not (isinstance(clusters, list) and clusters):
        return [order]
    out = []
    for cl in clusters:
        members = set(cl)
        sub = [c for c in order if c in members]
        if sub:
            out.append(sub)
    return out or [order]


def variant_cluster(variant: str) -> int | None:
    """The cluster index a group's variant names (``cluster<i>``: i); None for any other."""
    if variant.startswith("cluster") and variant[7:].isdigit():
        return int(variant[7:])
    return None


def cluster_platform(platform: str, variant: str) -> str:
    """MPET's platform for a group's runs: the board's id, and for a group of one cluster
    alone (``cluster<i>``) the id with ``:cluster<i>``: each cluster of a big.LITTLE board is
    a platform of its own, as the whole board is."""
    return f"{platform}:{variant}" if variant_cluster(variant) is not None else platform


def split_cluster(platform: str) -> tuple[str, str]:
    """(board's platform id or name, variant) of a ``cluster_platform`` key (variant "" for
    the whole board)."""
    base, sep, variant = platform.rpartition(":")
    return (base, variant) if sep and base and variant_cluster(variant) is not None \
        else (platform, "")


def cluster_order(platform: dict[str, Any], variant: str) -> list[int]:
    """Sweep order for a group's variant: the cluster's for ``cluster<i>``, else the board's."""
    i = variant_cluster(variant)
    if i is not None:
        orders = cluster_orders(platform)
        if i < len(orders):
            return orders[i]
    return sweep_order(platform)


def physical_cores(platform: dict[str, Any], order: list[int]) -> int | None:
    """How many distinct physical cores a sweep in ``order`` fills before it adds SMT
    siblings (``platform["smt_siblings"]``), for the models' effective cores; None when the
    order uses no sibling (every cpu its own core) or does not fill the physical cores first
    (then threads beyond them are not the SMT siblings the models assume)."""
    siblings = platform.get("smt_siblings")
    if not isinstance(siblings, list):
        return None
    core_of: dict[int, int] = {}
    for i, group in enumerate(siblings):
        for c in group if isinstance(group, list) else []:
            core_of.setdefault(c, i)
    cores = [core_of.get(c, -1 - c) for c in order]      # a cpu without siblings: its own core
    distinct = len(set(cores))
    if distinct == len(order) or len(set(cores[:distinct])) != distinct:
        return None
    return distinct


# A policy without a frequency table (intel_pstate, amd-pstate active) takes any clock of its
# [min, max] range. It is measured and recommended at steps of 100 MHz, both ends included:
# Intel's P-states are multiples of the 100 MHz bus clock, and so a finer step sets nothing
# new there.
RANGE_STEP_KHZ = 100_000


def frequency_ranges(platform: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """The cpufreq policies that offer a continuous range, not a table: name -> (min, max)
    kHz. The agent names them (``cpufreq.continuous``) and gives each as its two ends in
    ``frequencies_khz``; an older agent's hello names none, and a policy of two frequencies
    is read as a range there, as before."""
    cf = platform.get("cpufreq")
    if not isinstance(cf, dict):
        return {}
    named = cf.get("continuous")
    out = {}
    for name, table in (cf.get("frequencies_khz") or {}).items():
        ends = sorted({int(f) for f in table or [] if f})
        if len(ends) == 2 and (named is None or name in named):
            out[name] = (ends[0], ends[1])
    return out


def range_steps(lo: int, hi: int) -> list[int]:
    """The clocks a range is measured and recommended at: both ends and every multiple of
    RANGE_STEP_KHZ between them."""
    first = -(-lo // RANGE_STEP_KHZ) * RANGE_STEP_KHZ
    return sorted({lo, hi, *range(first, hi + 1, RANGE_STEP_KHZ)})


def _offers(platform: dict[str, Any]) -> dict[str, list[int]]:
    """Per policy, the clocks (kHz, ascending) it is measured and recommended at: its table,
    or its range's steps."""
    cf = platform.get("cpufreq") or {}
    ranges = frequency_ranges(platform)
    return {name: range_steps(*ranges[name]) if name in ranges
            else sorted({int(f) for f in table or [] if f})
            for name, table in (cf.get("frequencies_khz") or {}).items()}


def _policies_of(platform: dict[str, Any], cpus: list[int], names: Any) -> list[str]:
    """The policies (of ``names``) that govern any of ``cpus``; all of ``names`` when the
    platform lists no policy covering them."""
    want = set(cpus)
    mine = [str(p["name"]) for p in platform.get("policies") or []
            if p.get("name") in names and want & set(p.get("related_cpus") or p.get("cpus") or [])]
    return mine or list(names)


def offered_frequencies(platform: dict[str, Any], cpus: list[int]) -> list[int] | None:
    """Frequencies (kHz) every cpufreq policy of ``cpus`` offers, ascending; None when the
    platform has no usable cpufreq. A policy without a table offers its range at
    RANGE_STEP_KHZ steps (:func:`range_steps`)."""
    cf = platform.get("cpufreq")
    if not isinstance(cf, dict) or not cf.get("available"):
        return None
    offers = _offers(platform)
    sets = [set(offers[n]) for n in _policies_of(platform, cpus, offers)]
    return sorted(set.intersection(*sets)) if sets else None


def offered_range(platform: dict[str, Any], cpus: list[int]) -> tuple[int, int] | None:
    """The range (kHz) every policy of ``cpus`` takes any clock of, where each offers a range
    (:func:`frequency_ranges`); None where any has a table, or there is no cpufreq."""
    cf = platform.get("cpufreq")
    if not isinstance(cf, dict) or not cf.get("available"):
        return None
    ranges = frequency_ranges(platform)
    names = _policies_of(platform, cpus, (cf.get("frequencies_khz") or {}).keys())
    if not names or any(n not in ranges for n in names):
        return None
    lo, hi = max(ranges[n][0] for n in names), min(ranges[n][1] for n in names)
    return (lo, hi) if lo <= hi else None


def offer_text(platform: dict[str, Any], name: str, driver: str | None = None) -> str:
    """What policy ``name`` offers, for a person: "13 frequencies 200-1400 MHz", or
    "1200..3200 MHz (continuous, intel_pstate)" for a range."""
    rng = frequency_ranges(platform).get(name)
    if rng is not None:
        return (f"{rng[0] // 1000}..{rng[1] // 1000} MHz (continuous"
                + (f", {driver})" if driver else ")"))
    table = _offers(platform).get(name) or []
    if not table:
        return "no frequencies"
    return (f"{len(table)} frequenc{'ies' if len(table) != 1 else 'y'} "
            f"{table[0] // 1000}-{table[-1] // 1000} MHz")


def unoffered_frequencies(platform: dict[str, Any], freqs: list[int]
                          ) -> tuple[list[int], str, str]:
    """(the frequencies of ``freqs`` that no cpufreq policy of the board offers, what the
    policies offer in words, why none is offered). Nothing is refused when the platform says
    nothing about cpufreq (the agent decides). A range takes any clock within it."""
    if "cpufreq" not in platform:
        return [], "", ""
    cf = platform.get("cpufreq") or {}
    offers = {n: t for n, t in _offers(platform).items() if t} if cf.get("available") else {}
    ranges = frequency_ranges(platform)
    bad = [f for f in freqs if not any(
        int(f) in t or (n in ranges and ranges[n][0] <= int(f) <= ranges[n][1])
        for n, t in offers.items())]
    listed = sorted(set().union(*(set(t) for n, t in offers.items() if n not in ranges)))
    said = ([f"{', '.join(map(str, listed))} kHz"] if listed else []) + sorted(
        {f"{lo}..{hi} kHz (continuous)" for n, (lo, hi) in ranges.items() if n in offers})
    return bad, "; ".join(said), cf.get("reason") or "the board has no cpufreq frequencies"


def frequency_refusal(platform: dict[str, Any], board: str, freqs: list[int]) -> str | None:
    """Why board ``board`` cannot run at ``freqs`` (kHz), naming what it offers; None when
    it can (or the platform says nothing about cpufreq)."""
    bad, offered, reason = unoffered_frequencies(platform, freqs)
    if not bad:
        return None
    # below 100 MHz in kHz no board clocks: MHz typed (predict --freq takes MHz)
    mhz = (f" (frequencies here are in kHz: {bad[0]} MHz is {bad[0] * 1000})"
           if offered and all(0 < f < 100_000 for f in bad) else "")
    return (f"board {board} cannot run at {', '.join(map(str, bad))} kHz: "
            + (f"it offers {offered}" if offered else reason) + mhz)


def cpufreq_unavailable(platform: dict[str, Any]) -> str | None:
    """Why the board cannot set frequencies, in the words of its agent's hello (the cpufreq
    fact the doctor's knobs check reports too); None when it can, or says nothing."""
    cf = platform.get("cpufreq")
    if not isinstance(cf, dict) or cf.get("available"):
        return None
    return cf.get("reason") or "no cpufreq"


def frequencies_not_swept(platform: dict[str, Any], board: str) -> str | None:
    """What ``opptune sweep`` and ``opptune status`` say of a board that cannot set
    frequencies (its sweeps and characterisation go over cores only); None when it can."""
    why = cpufreq_unavailable(platform)
    if why is None:
        return None
    return (f"frequencies not swept on board {board}: {why}; its cores are swept at its own "
            "frequency")


def clocks_never_apply(platform: dict[str, Any], kind: str | None, board: str) -> str | None:
    """Why the board's clocks never reach a workload of ``kind``: a command of the agent's
    own configuration on a virtual board runs on the agent's machine, so a run "at" a
    board's clock would be stored at a clock that never applied to it; None otherwise."""
    if not platform.get("virtual") or kind != "command":
        return None
    return (f"a command runs on the agent's own machine, not on board {board}, whose clocks "
            "never reach it")


def unset_clock(platform: dict[str, Any], cpus: list[int], reaches: bool = True) -> str:
    """What ``cpus`` run at where no frequency is set: the governor's choice where a cpufreq
    policy governs them and the board's clocks reach the workload (``reaches``: False for a
    command on a virtual board, :func:`clocks_never_apply`), else the board's own clock."""
    want = set(cpus)
    governed = any(want & set(p.get("related_cpus") or p.get("cpus") or [])
                   for p in platform.get("policies") or [])
    return GOVERNOR_CLOCK if governed and reaches else OWN_CLOCK


def workload_clock(platform: dict[str, Any], kind: str | None, cpus: list[int]) -> str:
    """What ``cpus`` run a workload of ``kind`` at where no frequency is set (a stored or
    answered recommendation's ``clock``): :func:`unset_clock`, with the board's clocks out of
    reach of a command on a virtual board (:func:`clocks_never_apply`)."""
    return unset_clock(platform, cpus, clocks_never_apply(platform, kind, "") is None)


def cores_not_swept(platform: dict[str, Any], board: str) -> str | None:
    """What ``opptune sweep`` says of a board whose agent's hello names no cpus (an older or
    foreign agent): its sweeps measure cpu 0 alone; None when the cpus are known."""
    if cpu_count_known(platform):
        return None
    return (f"cores not swept on board {board}: its agent's hello names no cpus, so only 1 "
            "core is measured; start an opptune-agent that describes the board")


def grid_asks_frequencies(defaults: SweepDefaults, frequency_grid: str | int | None) -> bool:
    """Whether ``frequency_grid`` (None: ``defaults``') measures at set frequencies, rather
    than leaving the frequency alone ("none", or "list" with an empty list)."""
    grid = SweepDefaults.parse_grid(defaults.frequency_grid if frequency_grid is None
                                    else frequency_grid, "frequency_grid")
    return not (grid == "none" or (grid == "list" and not defaults.frequencies))


def spread(table: list[int], n: int) -> list[int]:
    """``n`` entries of the ascending ``table`` evenly spread by index, both ends included
    (n = 1: the highest); the whole table when n >= its length."""
    if n >= len(table):
        return list(table)
    if n == 1:
        return [table[-1]]
    idx = sorted({round(i * (len(table) - 1) / (n - 1)) for i in range(n)})
    return [table[i] for i in idx]


def _within(table: list[int], f: int, rng: tuple[int, int] | None) -> bool:
    # a range (no scaling_available_frequencies): the agent accepts any clock within it
    return f in table or (rng is not None and rng[0] <= f <= rng[1])


def grid_frequencies(platform: dict[str, Any], cpus: list[int], grid: str | int,
                   listed: list[int]) -> list[int | None]:
    """The frequencies (kHz) to measure ``cpus`` at; [None] = leave the frequency alone."""
    if grid == "none" or (grid == "list" and not listed):
        return [None]
    table = offered_frequencies(platform, cpus)
    if table is None or not table:
        if grid == "list" and "cpufreq" not in platform:
            return sorted(set(listed))  # nothing known about cpufreq: the agent decides
        reason = (platform.get("cpufreq") or {}).get("reason") or "no cpufreq frequencies " \
                                                                  "described"
        raise PlanError(f"frequency_grid {grid!r} needs frequencies, but cpus "
                        f"{format_cpu_list(cpus)} offer none: {reason}")
    if grid == "list":
        rng = offered_range(platform, cpus)
        chosen = sorted({int(f) for f in listed if _within(table, int(f), rng)})
        if not chosen:
            offered = (f"{rng[0]}..{rng[1]} kHz (continuous)" if rng
                       else f"{', '.join(map(str, table))} kHz")
            raise PlanError(f"none of the frequencies {sorted(listed)} kHz is offered for cpus "
                            f"{format_cpu_list(cpus)}; offered: {offered}")
        return list(chosen)
    if grid == "all":
        return list(table)
    return spread(table, int(grid))


# a tune session's one-point jobs: told apart by their id where no session here knows them (a
# restarted daemon, a session stopped with its job out), so that their end starts no sweep's
# fit and push
TUNE_JOB_PREFIX = "job-tune-"
# a re-measure job: a daemon of a fleet that finds no item waiting for it knows that another
# daemon judged it, rather than taking it for a first sweep (a retry count begun again)
REMEASURE_JOB_PREFIX = "job-again-"


def new_job_id(prefix: str = "job-") -> str:
    return prefix + uuid.uuid4().hex[:20]


def is_tune_job(job_id: str) -> bool:
    return job_id.startswith(TUNE_JOB_PREFIX)


def is_remeasure_job(job_id: str) -> bool:
    return job_id.startswith(REMEASURE_JOB_PREFIX)


def plan_sweep(platform: dict[str, Any], workload: str, defaults: SweepDefaults,
               size: str | None = None, reps: int | None = None, warmup: int | None = None,
               max_cores: int | None = None, frequencies: list[int] | None = None,
               frequency_grid: str | int | None = None, per_cluster: bool | None = None,
               adaptive: bool | None = None, cluster: int | None = None) -> dict[str, Any]:
    """A ``job`` body for ``workload`` on ``platform``; arguments left None take the defaults.

    ``cluster`` (an index into the platform's clusters) sweeps that cluster alone, its points
    carrying its variant, as a per-cluster sweep measures it (a drifted ``cluster<i>`` group
    measured again); PlanError where the board has no such cluster.

    ``adaptive`` (default ``defaults.adaptive``): each point carries the stop rule ``until``
    (target_ci, min_reps, point_budget_s) and ``reps`` is ``max_reps``, the most runs of a
    point (shared/protocol.py); an agent that ignores ``until`` runs max_reps of each.

    An explicit ``frequencies`` list without ``frequency_grid`` means grid "list". Raises
    :class:`PlanError` when the grid needs frequencies the platform does not offer, and
    ConfigError for a malformed grid."""
    if frequency_grid is None:
        grid = "list" if frequencies is not None else defaults.frequency_grid
    else:
        grid = frequency_grid
    grid = SweepDefaults.parse_grid(grid, "frequency_grid")
    listed = list(defaults.frequencies if frequencies is None else frequencies)
    per = defaults.per_cluster if per_cluster is None else bool(per_cluster)
    limit = defaults.max_cores if max_cores is None else max_cores
    orders = cluster_orders(platform) if per or cluster is not None else []
    segments = ([(f"cluster{i}", o) for i, o in enumerate(orders)] if len(orders) > 1
                else [("", sweep_order(platform))])
    if cluster is not None:
        if len(orders) < 2 or not 0 <= cluster < len(orders):
            have = (f"its clusters are 0-{len(orders) - 1}" if len(orders) > 1
                    else "it describes one cluster only")
            raise PlanError(f"the board has no cluster {cluster}: {have}")
        segments = [segments[cluster]]
    until = None
    if defaults.adaptive if adaptive is None else adaptive:
        until = {"ci": defaults.target_ci, "min_reps": defaults.min_reps,
                 "budget_s": defaults.point_budget_s}
        reps = defaults.max_reps if reps is None else reps  # an explicit count is the most
    points = []
    for variant, order in segments:
        n = min(limit, len(order)) if limit and limit > 0 else len(order)
        freqs = grid_frequencies(platform, order[:n], grid, listed)
        for cores in range(1, n + 1):
            for f in freqs:
                pt: dict[str, Any] = {"cpus": order[:cores], "threads": cores, "freq_khz": f}
                if variant:
                    pt["variant"] = variant
                if until:
                    pt["until"] = dict(until)
                points.append(pt)
    return {
        "job_id": new_job_id(),
        "workload": workload,
        "size": defaults.size if size is None else size,
        "points": points,
        "reps": defaults.reps if reps is None else reps,
        "warmup": defaults.warmup if warmup is None else warmup,
    }


__all__ = ["ConfigError", "GOVERNOR_CLOCK", "OWN_CLOCK", "PlanError", "clocks_never_apply",
           "clock_text", "cluster_order", "cluster_orders", "cluster_platform", "split_cluster",
           "unset_clock", "workload_clock",
           "cpufreq_unavailable",
           "grid_asks_frequencies", "grid_frequencies",
           "frequency_ranges", "new_job_id", "offer_text", "offered_frequencies",
           "offered_range", "plan_sweep", "range_steps", "spread", "sweep_order",
           "unoffered_frequencies", "frequency_refusal", "variant_cluster"]
