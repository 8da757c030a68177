"""Sweeps: turn a request (``opptune sweep``, or an agent's hello with ``auto_sweep``) into
planned jobs, refusing before anything is sent what the agent's catalogue or board does not
offer."""

from __future__ import annotations

import logging
from typing import Any

from ..shared.config import ConfigError, DaemonConfig, SweepDefaults
from .errors import HandlerError
from .jobs import JobTracker
from .planner import (PlanError, clocks_never_apply, cluster_orders, cores_not_swept,
                      cpu_count_known,
                      frequencies_not_swept, frequency_refusal, grid_asks_frequencies,
                      plan_sweep, sweep_order, variant_cluster)
from .registry import AgentInfo, Registry, board_name

log = logging.getLogger("opptune.daemon")


class Sweeps:
    def __init__(self, config: DaemonConfig, registry: Registry, jobs: JobTracker):
        self.config = config
        self.registry = registry
        self.jobs = jobs

    def start(self, agent: str, workloads: list[str] | None = None,
              size: str | None = None, reps: int | None = None,
              warmup: int | None = None, max_cores: int | None = None,
              frequency_grid: str | int | None = None, per_cluster: bool | None = None,
              frequencies: list[int] | None = None, adaptive: bool | None = None,
              cluster: int | None = None) -> list[dict[str, Any]]:
        """Plan and send one sweep job per workload to ``agent``; returns for each job its
        job_id, workload, size, n_points, reps. Options left None take ``[sweep]``'s; a grid
        the platform cannot honour raises HandlerError("bad_args") before anything is sent,
        except a board that cannot set frequencies at all: its cores are swept at its own
        frequency (:meth:`sweep`)."""
        return self.sweep(agent, workloads, size, reps, warmup, max_cores, frequency_grid,
                          per_cluster, frequencies, adaptive, cluster)[0]

    def sweep(self, agent: str, workloads: list[str] | None = None,
              size: str | None = None, reps: int | None = None,
              warmup: int | None = None, max_cores: int | None = None,
              frequency_grid: str | int | None = None, per_cluster: bool | None = None,
              frequencies: list[int] | None = None, adaptive: bool | None = None,
              cluster: int | None = None
              ) -> tuple[list[dict[str, Any]], str | None]:
        """:meth:`start`'s jobs, and why frequencies were not swept where a grid asked for
        them and the board cannot set any (None otherwise). Frequencies named in
        ``frequencies`` are still refused on such a board: a missing knob is reported and
        the sweep goes on, but what the user names explicitly is not quietly dropped.
        ``cluster`` sweeps that cluster of the board alone (planner.plan_sweep)."""
        info = self.registry.get(agent)
        if info is None:
            raise HandlerError("unknown_agent", self.registry.unknown(agent))
        if info.identity is None or not info.alive(self.registry.timeout_s):
            # gone from here: another daemon of the fleet may hold it now (no forwarding)
            if info.identity is None or self.registry.via(agent) is not None:
                raise HandlerError("agent_offline", self.registry.offline_text(agent))
        # a workload named twice (--workload W --workload W) is one job, not two of the same
        names = list(dict.fromkeys(workloads)) if workloads else info.workload_names()
        offered = set(info.workload_names())
        bad = [w for w in names if w not in offered]
        if bad:
            raise HandlerError("unknown_workload", f"agent '{agent}' does not offer "
                                                   f"{', '.join(bad)}; it offers "
                                                   f"{', '.join(sorted(offered)) or 'nothing'}")
        check_sweep_args(agent, info, names, size, max_cores, frequencies)
        not_swept = None
        why = frequencies_not_swept(info.platform or {},
                                    board_name(info.platform, info.platform_id))
        if why and frequencies is None and grid_asks_frequencies(self.config.sweep,
                                                                 frequency_grid):
            frequency_grid = "none"
            not_swept = why
            log.warning("sweep of %s for %s: %s", ", ".join(names), agent, not_swept)
        board = board_name(info.platform, info.platform_id)
        asks = frequency_grid != "none" and grid_asks_frequencies(self.config.sweep,
                                                                  frequency_grid)
        ids: list[dict[str, Any]] = []
        jobs: list[dict[str, Any]] = []
        for name in names:
            grid = frequency_grid
            off = clocks_never_apply(info.platform or {}, info.workload_kind(name), board)
            if off and asks:
                grid = "none"
                note = (f"frequencies not swept for {name}: {off}; its cores are swept at no "
                        "set clock")
                not_swept = f"{not_swept}\n{note}" if not_swept else note
                log.warning("sweep of %s for %s: %s", name, agent, note)
            job_size = size
            if job_size is None:
                sizes = info.workload_sizes(name)
                job_size = (self.config.sweep.size if not sizes or self.config.sweep.size
                            in sizes else sizes[0])
            try:
                job = plan_sweep(info.platform, name, self.config.sweep, size=job_size,
                                 reps=reps, warmup=warmup, max_cores=max_cores,
                                 frequencies=None if grid == "none" else frequencies,
                                 frequency_grid=grid,
                                 per_cluster=per_cluster, adaptive=adaptive, cluster=cluster)
            except (PlanError, ValueError) as exc:
                raise HandlerError("bad_args", f"cannot plan a sweep of {name} for {agent}: "
                                               f"{exc}") from None
            jobs.append(job)
        for job in jobs:
            state = self.jobs.send(agent, job)
            ids.append({"job_id": job["job_id"], "workload": job["workload"],
                        "size": job["size"], "n_points": len(job["points"]),
                        "reps": job["reps"], "state": state})
        return ids, not_swept

    def auto(self, agent: str, workload: str, size: str | None = None,
             frequencies: list[int] | None = None, variant: str | None = None
             ) -> list[dict[str, Any]]:
        """Sweep ``workload`` as configured, or at ``frequencies`` (kHz) where given (the
        daemon's own sweeps: a new agent's, a drift's re-characterisation at the group's
        clocks); on a board that cannot honour them, sweep cores only and say why. A
        ``variant`` (a drifted group's) is measured as such whatever [sweep] per_cluster
        says: ``cluster<i>`` on that cluster alone, "" over the whole board. An agent unknown
        or offline, or a workload it does not offer, is raised: no grid would do."""
        cluster = variant_cluster(variant) if variant else None
        per_cluster = None if variant is None or cluster is not None else False
        try:
            return self.start(agent, [workload], size=size, frequencies=frequencies,
                              per_cluster=per_cluster, cluster=cluster)
        except HandlerError as exc:
            if exc.code in ("unknown_agent", "agent_offline", "unknown_workload"):
                raise
            log.warning("sweep of %s for %s as configured: %s; sweeping cores only at the "
                        "board's own frequency", workload, agent, exc)
            return self.start(agent, [workload], size=size, frequency_grid="none",
                              per_cluster=per_cluster, cluster=cluster)

    def query(self, args: dict[str, Any]) -> dict[str, Any]:
        """The ``sweep`` query: check its arguments' types, then :meth:`sweep`; the answer's
        ``jobs``, ``frequencies_not_swept`` and ``cores_not_swept`` (why, or None)."""
        agent = args.get("agent")
        if not isinstance(agent, str):
            raise HandlerError("bad_args", "sweep needs args.agent (an agent id)")
        workloads = args.get("workloads")
        if isinstance(workloads, str):
            workloads = [workloads]
        if workloads is not None and not (isinstance(workloads, list)
                                          and all(isinstance(w, str) for w in workloads)):
            raise HandlerError("bad_args", "sweep args.workloads must be a list of names")
        ints = sweep_counts(args, "sweep")
        size = args.get("size")
        if size is not None and not isinstance(size, str):
            raise HandlerError("bad_args", "sweep args.size must be text")
        grid = args.get("frequency_grid")
        if grid is not None:
            try:
                grid = SweepDefaults.parse_grid(grid, "args.frequency_grid")
            except ConfigError as exc:
                raise HandlerError("bad_args", f"sweep {exc}") from None
        per_cluster = args.get("per_cluster")
        if per_cluster is not None and not isinstance(per_cluster, bool):
            raise HandlerError("bad_args", "sweep args.per_cluster must be true or false")
        adaptive = args.get("adaptive")
        if adaptive is not None and not isinstance(adaptive, bool):
            raise HandlerError("bad_args", "sweep args.adaptive must be true or false")
        freqs = args.get("frequencies")
        if freqs is not None and not (isinstance(freqs, list) and all(
                isinstance(f, int) and not isinstance(f, bool) and f > 0 for f in freqs)):
            raise HandlerError("bad_args", "sweep args.frequencies must be a list of kHz "
                                           "integers")
        jobs, not_swept = self.sweep(agent, workloads, size=size, frequency_grid=grid,
                                     per_cluster=per_cluster, frequencies=freqs,
                                     adaptive=adaptive, **ints)
        info = self.registry.get(agent)
        # without a size asked: the workloads that lack the [sweep] size, each with the size
        # swept instead (their first)
        other = {j["workload"]: j["size"] for j in jobs
                 if size is None and j["size"] != self.config.sweep.size}
        return {"jobs": jobs, "frequencies_not_swept": not_swept,
                "sizes_instead": ({"size": self.config.sweep.size, "workloads": other}
                                  if other else None),
                "cores_not_swept": cores_not_swept(info.platform or {},
                                                   board_name(info.platform, info.platform_id))}


def sweep_counts(args: dict[str, Any], query: str) -> dict[str, int | None]:
    """args' reps, warmup and max_cores (None where absent), each a whole number (reps >= 1,
    the others >= 0); else bad_args naming the key and the value."""
    ints = {}
    for key in ("reps", "warmup", "max_cores"):
        v = args.get(key)
        least = 1 if key == "reps" else 0
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < least):
            raise HandlerError("bad_args", f"{query}: {key} must be a whole number >= {least}"
                                           f", got {v!r}")
        ints[key] = v
    return ints


def check_sweep_args(agent: str, info: AgentInfo, names: list[str], size: str | None,
                     max_cores: int | None, frequencies: list[int] | None) -> None:
    """Refuse, before anything is sent, a size, core count or frequency the agent's
    catalogue (its hello) or board does not offer."""
    board = board_name(info.platform, info.platform_id)
    if size is not None:
        for name in names:
            sizes = info.workload_sizes(name)
            if sizes and size not in sizes:
                raise HandlerError("unknown_size", f"agent '{agent}' has no size '{size}' for "
                                                   f"{name}; it offers {', '.join(sizes)}")
    check_max_cores(info, max_cores)
    if frequencies:
        why = frequency_refusal(info.platform, board, frequencies)
        if why:
            raise HandlerError("bad_args", why)
        for name in names:
            off = clocks_never_apply(info.platform or {}, info.workload_kind(name), board)
            if off:
                raise HandlerError("bad_args", f"cannot sweep {name} at set frequencies: {off}; "
                                               "sweep it without --freq (over its cores at no "
                                               "set clock)")


def check_max_cores(info: AgentInfo, max_cores: int | None, cluster: int | None = None,
                    measures: bool = True) -> None:
    """Refuse a core count beyond the cpus of the agent's board, or of its cluster ``cluster``
    where one is asked for (sweep, recommend, tune; a cluster the board lacks is theirs to
    refuse). Where the board's cpu count is unknown (a hello without cpus) only a request
    that ``measures`` (sweep, tune: their plan has cpu 0 alone then) is refused, and for
    that reason; recommend caps what was measured and needs no count."""
    platform = info.platform or {}
    name = board_name(info.platform, info.platform_id)
    if not cpu_count_known(platform):
        if measures and max_cores and max_cores > 1:
            raise HandlerError("bad_args", f"max_cores {max_cores}: the cpu count of board "
                                           f"{name} is unknown (its agent's hello names no "
                                           f"cpus), so only 1 core can be measured there; "
                                           f"leave out max_cores, or start an opptune-agent "
                                           f"that describes the board")
        return
    orders = cluster_orders(platform)
    if cluster is not None and len(orders) > 1 and 0 <= cluster < len(orders):
        n_cpus, of = len(orders[cluster]), f"cluster {cluster} of board"
    else:
        n_cpus, of = len(sweep_order(platform)), "board"
    if max_cores and max_cores > n_cpus:
        raise HandlerError("bad_args", f"max_cores {max_cores} is more than the {n_cpus} "
                                       f"cpus of {of} {name}; use 1..{n_cpus} (0 = all)")
