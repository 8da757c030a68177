"""The ``status`` query: the daemon's whole state, or a page of it.

A client that sends no arguments (every opptune before paging, ``sweep --wait`` of those
versions) gets every row, as before. ``opptune status`` asks for what it prints: ``limit``
rows of each list, ``agent`` for one board's rows; ``sweep --wait`` asks for its ``jobs``
and ``only`` the lists it reads. Each list is read from the store already cut (its rows and
their total in one or two statements), so a page costs the loop about the same at 10 boards
and at 200; ``page.total`` says how many rows each list has in all (README: the status's
JSON shape, docs/json-output.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import __version__
from ..shared.config import redact_url
from ..shared.standing import narrower, overridden
from ..shared.versions import older
from .drift import fit_predates, status_rows as drift_rows
from .errors import HandlerError
from .keyring import refused_keys
from .planner import workload_clock
from .recommender import off_pct, rests_on
from .registry import board_name
from .store import Group

if TYPE_CHECKING:
    from .service import Daemon

# the lists a page cuts, in the reply's order (``page.total`` has one count for each)
SECTIONS = ("agents", "platforms", "workloads", "runs", "jobs", "fits", "fit_errors",
            "recommendations", "drift", "remeasure", "tunes")
MAX_JOB_IDS = 4096  # a sweep --wait follows one job per workload and clock of one board
MAX_LIMIT = 2**31 - 1


class Page(NamedTuple):
    limit: int | None = None  # rows per list at most (None: all)
    agent: str | None = None  # only this agent's rows (None: every agent's)
    jobs: tuple[str, ...] | None = None  # only these jobs (None: all)
    only: frozenset[str] = frozenset(SECTIONS)  # the lists filled; the others are empty


def parse_page(args: dict[str, Any]) -> Page:
    """The query's arguments as a Page; HandlerError ``bad_args`` naming the wrong one."""
    limit, agent, jobs, only = (args.get(k) for k in ("limit", "agent", "jobs", "only"))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise HandlerError("bad_args", f"status args.limit must be a whole number >= 1 (rows "
                                       f"of each list) or null for all; got {limit!r:.40}")
    if agent is not None and not isinstance(agent, str):
        raise HandlerError("bad_args", "status args.agent must be an agent id (text)")
    if jobs is not None and (not isinstance(jobs, list) or len(jobs) > MAX_JOB_IDS
                             or not all(isinstance(j, str) for j in jobs)):
        raise HandlerError("bad_args", f"status args.jobs must be a list of at most "
                                       f"{MAX_JOB_IDS} job ids")
    if only is not None and (not isinstance(only, list) or not all(isinstance(s, str)
                                                                    for s in only)
                             or not set(only) <= set(SECTIONS)):
        raise HandlerError("bad_args", f"status args.only must be a list of {', '.join(SECTIONS)}")
    # a limit beyond any list is no limit; the store's LIMIT takes a 64-bit integer at most
    return Page(None if limit is None else min(limit, MAX_LIMIT), agent,
                None if jobs is None else tuple(jobs),
                frozenset(SECTIONS if only is None else only))


def status(d: Daemon, args: dict[str, Any] | None = None, bases: bool = True
           ) -> dict[str, Any]:
    """The status reply for ``args`` (none: every row of every list); ``bases`` False leaves
    out each recommendation's ``rests_on`` (a read of its group's points: the report's query
    does not draw it)."""
    page = parse_page(args or {})
    now = time.time()
    total: dict[str, int | None] = dict.fromkeys(SECTIONS)
    want = page.only.__contains__
    # agents online through another daemon sharing the store (read before the list: it adds
    # those this daemon never knew); their last_seen is that daemon's
    via = d.registry.elsewhere(now)
    # ...and through a daemon that does not say which (an older one: it records no row)
    unrecorded = {k: v for k, v in d.registry.heard_unrecorded(now, d.started).items()
                  if k not in via}
    known = d.registry.all()
    boards = {a.agent_id: board_name(a.platform, a.platform_id) for a in known}
    platform = None
    if page.agent is not None:
        info = d.registry.get(page.agent)
        if info is None:
            raise HandlerError("unknown_agent", d.registry.unknown(page.agent))
        known, platform = [info], info.platform_id

    agents: list[dict[str, Any]] = []
    if want("agents") or want("platforms"):
        refused = d.registry.refused_elsewhere(now)
        agents = [_agent_row(d, a, via, unrecorded, refused, now) for a in known]
        total["agents"] = len(agents)
        if page.limit is not None and len(agents) > page.limit:
            # the agents that need a look first: offline, or with a full outbox
            keep = sorted(agents, key=lambda a: (bool(a["alive"] or a["via"]
                                                      or a["via_unrecorded"])
                                                 and not a["outbox_full"], a["id"]))
            agents = sorted(keep[:page.limit], key=lambda a: a["id"])
    platforms = {a["platform"]: d.store.platform(a["platform"])
                 for a in agents if a["platform"]} if want("platforms") else {}
    total["platforms"] = len(platforms) if want("platforms") else None
    if not want("agents"):
        agents = []

    workloads: list[str] = []
    if want("workloads"):
        workloads = (sorted(set(known[0].workload_names())) if page.agent is not None
                     else d.store.workloads())
        total["workloads"] = len(workloads)
        workloads = workloads[:page.limit]

    runs: list[dict[str, Any]] = []
    if want("runs"):
        runs, total["runs"] = d.store.run_counts_page(page.agent, page.limit)

    jobs: list[dict[str, Any]] = []
    if want("jobs"):
        rows, total["jobs"] = d.store.jobs_page(page.agent, page.jobs, page.limit)
        jobs = [{"job_id": j["job_id"], "agent": j["agent"],
                 "board": boards.get(j["agent"], j["agent"]), "workload": j["workload"],
                 "size": j["size"], "expected": j["expected"], "received": j["received"],
                 "not_run": j["not_run"],
                 "state": j["state"], "reason": j["reason"], "stopped": j["stopped"],
                 "created": j["created"], "updated": j["updated"]} for j in rows]

    fits: list[dict[str, Any]] = []
    if want("fits"):
        rows, total["fits"] = d.store.fits_page(platform, page.limit)
        events = d.store.drift_events() if rows else []
        fits = [{**_fit_row(f), "predates_drift": fit_predates(f, events)} for f in rows]

    fit_errors: list[dict[str, Any]] = []
    if want("fit_errors"):
        fit_errors = [e for e in d.recommender.fit_errors() if page.agent is None
                      or e.get("agent") == page.agent
                      or (e.get("group") or {}).get("platform") == platform]
        total["fit_errors"] = len(fit_errors)
        fit_errors = fit_errors[:page.limit]

    recs: list[dict[str, Any]] = []
    if want("recommendations"):
        rows, total["recommendations"] = d.store.recommendations_page(page.agent, page.limit)
        recs = [_rec_row(r, _clock(d, r)) for r in rows]
        basis = group_basis(d, _fit_quality(d, fits, recs)) if bases else None
        for r in recs if basis else []:  # the listed ones only: each reads its group's points
            r["rests_on"] = basis(r["agent"], Group(**r["group"]))

    drift: list[dict[str, Any]] = []
    if want("drift"):
        states = {j["job_id"]: j["state"] for j in jobs}

        def state_of(job_id: str) -> str | None:
            if job_id not in states:  # a job of another page: read alone (drifts are rare)
                row = d.store.job(job_id)
                states[job_id] = row["state"] if row else None
            return states[job_id]
        drift = [e for e in drift_rows(d.store, state_of)
                 if page.agent is None or e["agent"] == page.agent]
        total["drift"] = len(drift)
        if page.limit is not None:  # the newest
            drift = sorted(drift, key=lambda e: e["since"])[-page.limit:]

    remeasure: list[dict[str, Any]] = []
    if want("remeasure"):
        remeasure = [m for m in d.remeasure.status(now)
                     if page.agent is None or m["agent"] == page.agent]
        total["remeasure"] = len(remeasure)
        remeasure = remeasure[:page.limit]

    tunes: list[dict[str, Any]] = []
    if want("tunes"):
        tunes = d.tuning.open_sessions(page.agent)
        total["tunes"] = len(tunes)
        tunes = tunes[:page.limit]

    return {
        "daemon": _daemon_row(d, now),
        "agents": agents,
        # What each agent's board offers (knob availability, topology), for operators.
        "platforms": platforms,
        "workloads": workloads,
        "runs": runs,
        "jobs": jobs,
        "fits": fits,
        "fit_errors": fit_errors,
        "recommendations": recs,
        # groups re-characterised because their verifications kept leaving the interval
        "drift": drift,
        # marked points waiting to be measured again, being measured, or never clean
        "remeasure": remeasure,
        # open tune sessions (opptune tune), oldest first
        "tunes": tunes,
        # what was asked, and each list's rows in all (null: a list not asked for)
        "page": {"limit": page.limit, "agent": page.agent, "total": total},
    }


def _agent_row(d: Daemon, a: Any, via: dict[str, Any], unrecorded: dict[str, float],
               refused: dict[str, Any], now: float) -> dict[str, Any]:
    return {"id": a.agent_id, "board": board_name(a.platform, a.platform_id),
            "platform": a.platform_id,
            "alive": a.alive(d.config.agent_timeout_s, now),
            "via": via[a.agent_id].endpoint if a.agent_id in via else None,
            # heard within agent_timeout_s through a daemon of the fleet that records no row
            # (older than schema 11), or one that stopped since: online, but not known where
            "via_unrecorded": a.agent_id in unrecorded,
            "last_seen_s": _age(max(a.last_seen, via[a.agent_id].last_seen
                                    if a.agent_id in via else 0.0,
                                    unrecorded.get(a.agent_id, 0.0)), now),
            "outbox": a.outbox, "outbox_full": a.outbox_full,
            "doctor": (a.doctor or {}).get("summary"),
            # how old the verdict is: after a restart it is the stored one of the last hello
            "doctor_age_s": round(now - a.doctor_at, 1) if a.doctor_at else None,
            # not heard here: the store's, read now (another daemon of a fleet that holds
            # the agent keeps it up to date; the copy loaded at this one's start ages)
            **_standing_fields(a, d.store.standings_of(a.agent_id) if not a.heard else None),
            # what its last hello said it runs, and whether that is an earlier release than
            # this daemon's (None: not a release number)
            "version": a.version, "older": older(a.version, __version__),
            "id_clash": _clash_row(d, a.agent_id, refused.get(a.agent_id), now)}


def _standing_fields(a: Any, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """What stands on the agent's board (shared/standing.py): ``standings``, one per target,
    oldest first, each with ``clock_overridden`` (where a newer one's clock holds on a policy
    of its cpus, else null) and ``cpus_overridden`` (where a process in a unit and the unit
    each have one: whose cpu set holds for that process, else null); ``standing`` the newest
    of them, ``standing_dropped`` the first of ``standings_dropped``, as a client of one per
    board reads them. ``standing_known`` false where the agent has not said hello to this
    daemon since it started: the lists are then those the store kept of its last hello
    (``standings_as_of``: when, Unix seconds; not yet confirmed), or empty where it kept
    none (not known, not nothing); ``standings_as_of`` null once the hello confirms them.
    ``stored``: the store's, read now (else those read at the daemon's start)."""
    stored = (stored or a.stored_standings) if not a.heard else None
    standings, dropped = ((a.standings, a.standings_dropped) if stored is None else
                          ([e for e in stored["standings"] if isinstance(e, dict)],
                           [d for d in stored["dropped"] if isinstance(d, str)]))
    over, within = overridden(standings, a.platform), narrower(standings)
    rows = [{**e, "clock_overridden": over.get(str(e.get("config_id"))),
             "cpus_overridden": within.get(str(e.get("config_id")))} for e in standings]
    return {"standing": standings[-1] if standings else None, "standings": rows,
            "standing_dropped": dropped[0] if dropped else None,
            "standings_dropped": list(dropped), "standing_known": a.heard,
            "standings_as_of": stored["at"] if stored is not None else None}


def _clash_row(d: Daemon, agent: str, refused: tuple[Any, Any, str, float] | None,
               now: float) -> dict[str, Any] | None:
    """Two agents connected with one id (two boards of one host name, the default id): the
    one that holds it (gets the jobs) and the other, while both speak; None otherwise. Each
    board's ``daemon``: the endpoint of the daemon of the fleet it is connected to, null:
    this one. ``refused``: the other board as the daemon that refuses it keeps it in the
    store (Registry.refused_elsewhere), for an id held here."""
    clash = d.registry.clash(agent, now)
    info = d.registry.get(agent)
    if clash is not None:
        since = info.clash_since if info is not None else None
        # the holder's daemon where it is another of the fleet (the other board is refused
        # here)
        daemons = (info.held_via[1] if info is not None and info.held_via is not None
                   else None, None)
    elif refused is not None:
        clash, daemons, since = refused[:2], (None, refused[2]), refused[3]
    else:
        return None
    return {"since_s": _age(since or now, now), "key": "agent_id",
            "boards": [{"board": c.board, "platform": c.platform_id, "instance": c.instance,
                        "machine": c.machine, "boot": c.boot, "holds": holds,
                        "daemon": where}
                       for c, holds, where in zip(clash, (True, False), daemons)]}


def _fit_row(f: dict[str, Any]) -> dict[str, Any]:
    return {"group": {k: f[k] for k in Group._fields}, "model": f["model"],
            "params": f["params"], "quality": f["quality"], "runners_up": f["runners_up"]}


def _clock(d: Daemon, r: dict[str, Any]) -> str | None:
    """What stored recommendation ``r``'s cpus run at where it sets no frequency, as
    ``recommend`` says it (planner.workload_clock); None where it sets one."""
    if r["freq_khz"] is not None:
        return None
    info = d.registry.get(r["agent"])
    platform = (info.platform if info else None) or d.store.platform(r["platform"]) or {}
    return workload_clock(platform, info.workload_kind(r["workload"]) if info else None,
                          list(r["cpus"] or []))


def _rec_row(r: dict[str, Any], clock: str | None = None) -> dict[str, Any]:
    return {"config_id": r["config_id"], "agent": r["agent"],
            "group": {k: r[k] for k in Group._fields},
            "cores": r["cores"], "cpus": r["cpus"], "freq_khz": r["freq_khz"],
            # where freq_khz is null: what its cpus run at (the governor's choice, or no set
            # frequency where no policy reaches the workload), in recommend's words
            "clock": clock,
            "predicted_time_s": r["predicted_time_s"],
            "predicted_lower_s": r["predicted_lower_s"],
            "predicted_upper_s": r["predicted_upper_s"], "state": r["state"],
            "verified_time_s": r["verified_time_s"],
            "off_pct": off_pct(r["verified_time_s"], r["predicted_time_s"])
            if r["state"] == "off" else None, "error": r["error"],
            # the goal it was pushed for (time where none was kept) and, for energy goals,
            # the predicted energy interval and the energy measured (recommender.judge)
            "objective": (r.get("goal") or {}).get("objective", "time"),
            "predicted_energy_j": (r.get("goal") or {}).get("energy_j"),
            "verified_energy_j": r.get("verified_energy_j"),
            # in force on its board until a newer one applied there took its place
            "replaced": {"by": r["replaced_by"], "at": r["replaced_at"]}
            if r.get("replaced_by") else None}


def _fit_quality(d: Daemon, fits: list[dict[str, Any]], recs: list[dict[str, Any]]
                 ) -> dict[Group, dict[str, Any]]:
    """The fit quality of each recommendation's group (what its rests_on counts as outliers
    left out): from the listed fits, the others read for those groups alone."""
    quality = {Group(**f["group"]): f["quality"] for f in fits}
    missing = sorted({Group(**r["group"]) for r in recs} - quality.keys())
    for i in range(0, len(missing), 200):  # 4 arguments a group: well within SQLite's bound
        quality.update((Group(*(f[k] for k in Group._fields)), f["quality"])
                       for f in d.store.fits_page(groups=missing[i:i + 200])[0])
    return quality


def _daemon_row(d: Daemon, now: float) -> dict[str, Any]:
    keys = d.keyring.rows() if d.keyring else []
    return {"instance": d.instance, "version": __version__,
            "uptime_s": round(now - d.started, 3),
            "endpoint": d.endpoint, "database": redact_url(d.config.database),
            "stats": dict(d.stats),
            # agents' keys that wait for 'opptune keys accept' (CURVE on): their agents are
            # nowhere else in the status until then
            "keys_pending": [{"id": k["id"], "agent": k["agent"],
                              "first_seen": k["first_seen"]}
                             for k in keys if k["state"] == "pending"],
            # agents refused since the operator rejected or revoked their (newest) key: they
            # look offline in the agents list, this says why and how to let one in again
            "keys_refused": [{"id": k["id"], "agent": k["agent"], "state": k["state"],
                              "first_seen": k["first_seen"], "updated": k["updated"]}
                             for k in refused_keys(keys)],
            # every daemon sharing the store; one whose heartbeat is older than
            # agent_timeout_s is not answering (killed, or its host is down): its row stays
            # until fleet_forget_s (0: until a daemon starts at its endpoint)
            "fleet_forget_s": d.config.fleet_forget_s,
            "fleet": [{"instance": r["instance"], "endpoint": r["endpoint"],
                       "started": r["started"], "last_seen_s": _age(r["last_seen"], now),
                       # a daemon that records no version predates schema 15: older than this
                       "version": r["version"], "older": True if r["version"] is None
                       else older(r["version"], __version__),
                       "answering": r["instance"] == d.instance
                       or now - r["last_seen"] <= d.config.agent_timeout_s}
                      for r in d.store.daemons()],
            # every refusal by reason, and how many of them the bounded log left out
            "refusals": {"by_code": dict(d.link.refusals.by_code),
                         "total": d.link.refusals.total,
                         "unlogged": d.link.refusals.unlogged}}


def _age(when: float, now: float) -> float | None:
    return round(now - when, 3) if when else None


def group_basis(d: Daemon, quality: dict[Group, dict[str, Any]]) -> Any:
    """``(agent, group) -> rests_on`` (recommender.rests_on), each group read once;
    ``quality``: each group's fit quality."""
    cache: dict[tuple[str, Group], dict[str, Any]] = {}
    never_clean = d.remeasure.never_clean  # a store read: once per status, not per group

    def basis(agent: str, group: Group) -> dict[str, Any]:
        key = (agent, group)
        if key not in cache:
            never = never_clean.get((agent, group.workload, group.input))
            cache[key] = rests_on(d.store, group, quality.get(group), never)
        return cache[key]
    return basis
