"""The operator's queries (``opptune status``, ``sweep``, ``fit``): what the daemon answers.

The status shape is documented in the README: every key present every time, null for a
missing value.

Who may ask: with CURVE on, only the operator's key (the key ring refuses the rest before a
query gets here); with CURVE off, only a local socket: the daemon bound to ipc:// or loopback,
or a peer whose address is loopback (:func:`check_local`)."""

from __future__ import annotations

import ipaddress
import time
from typing import TYPE_CHECKING, Any

from .drift import status_rows as drift_rows
from .errors import HandlerError
from .recommender import off_pct, rests_on
from .registry import board_name
from ..shared.config import redact_url
from .store import Group

if TYPE_CHECKING:
    from .query_worker import Deferred
    from .service import Daemon


def is_loopback_address(addr: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped 127.x (what a local TCP client comes from)."""
    try:
        ip = ipaddress.ip_address((addr or "").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def check_local(d: Daemon, identity: bytes) -> None:
    """Refuse (HandlerError ``not_local``) a query that came over plain TCP from an address
    other than loopback; the link tracks addresses only on such a bind (else it is local or
    CURVE-authenticated, and the key ring has checked the operator's key)."""
    addrs = getattr(d.link, "peer_addrs", None)
    if addrs is None:
        return
    addr = addrs.get(identity)
    if is_loopback_address(addr):
        return
    raise HandlerError("not_local", f"status and control queries are answered only on a local "
                                    f"socket (ipc:// or loopback) or for the operator's key "
                                    f"with CURVE on; this one came over plain TCP from "
                                    f"{addr or 'an unknown address'}: run opptune on the "
                                    "daemon's host, or set curve = \"on\" in its configuration "
                                    "and give opptune its --config")


def answer(d: Daemon, what: str, args: dict[str, Any]) -> dict[str, Any] | Deferred:
    """The reply's data for query ``what`` (a Deferred for one that fits models: the loop
    sends it when the worker has computed it); HandlerError for an unknown query."""
    if what == "status":
        return status(d)
    if what == "sweep":
        return d.sweeps.query(args)
    if what == "fit":
        return {"queued": refit(d, args)}
    if what == "report":
        return report(d)
    if what == "recommend":
        from .goal_query import answer_recommend
        return answer_recommend(d, args)
    if what == "tune":
        return d.tuning.start(args)
    if what == "tune_status":
        return d.tuning.status(args)
    if what == "keys":
        return keys(d, args)
    if what == "doctor":
        return doctor(d, args)
    if what == "runs":  # opptune export
        from .pyperf_query import runs
        return runs(d, args)
    if what == "import":  # opptune import
        from .pyperf_query import import_runs
        return import_runs(d, args)
    if what in ("characterize", "mpet_data"):
        from . import characterize
        return getattr(characterize, what)(d, args)
    raise HandlerError("unknown_query", f"unknown query '{what[:40]}'; known: status, sweep, "
                                        "fit, recommend, tune, tune_status, report, keys, "
                                        "doctor, characterize, mpet_data, runs, import")


def keys(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """``opptune keys``: args.action list (the default), accept, reject or revoke args.id."""
    if d.keyring is None:
        raise HandlerError("curve_off", "CURVE is off on this daemon (curve = \"off\", or "
                                        "\"auto\" with a loopback bind): no agent keys to manage")
    action = str(args.get("action") or "list")
    if action == "list":
        return {"keys": d.keyring.rows()}
    entry = d.keyring.decide(action, str(args.get("id") or ""))
    info = d.registry.get(entry["agent"])
    if entry["state"] != "accepted" and info is not None:
        # Nothing more goes to it: new jobs wait as "queued" for a hello the key cannot make.
        info.identity = None
    return {"key": entry}


def doctor(d: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """``opptune doctor --agent A``: the report A sent with its last hello (null: none)."""
    agent = args.get("agent")
    info = d.registry.get(agent) if isinstance(agent, str) else None
    if info is None:
        raise HandlerError("unknown_agent", d.registry.unknown(agent))
    return {"agent": info.agent_id, "board": board_name(info.platform, info.platform_id),
            "alive": info.alive(d.config.agent_timeout_s), "received": info.doctor_at,
            "report": info.doctor}


def report(d: Daemon) -> dict[str, Any]:
    """What ``opptune report`` draws: the status (agents with their platforms, fits,
    recommendations, jobs) plus every group's successful runs as
    ``points: [{group, runs: [[cores, freq_mhz, time_s, energy_j], ...], fit_runs: [[cores,
    freq_mhz, time_s], ...]}]``."""
    data = status(d)
    data["generated"] = time.time()
    # runs: every successful run (the plots); fit_runs: those the daemon's fit may use (not
    # throttled, not marked unless the load is accepted, since the last drift), so the
    # report's refit rests on what the daemon's does
    data["points"] = [{"group": g.as_dict(), "runs": [list(r[:4]) for r in runs],
                       "fit_runs": [list(r) for r in d.store.group_runs(g)]}
                      for g, runs in sorted(d.store.run_points().items())]
    return data


def refit(d: Daemon, args: dict[str, Any]) -> list[dict[str, str]]:
    """Refit the stored groups matching args.platform/workload/input/variant (each
    optional); with args.recommend and args.agent, push a recommendation afterwards."""
    queued = []
    for g in d.store.groups():
        if any(args.get(k) not in (None, getattr(g, k)) for k in Group._fields):
            continue
        d.recommender.request_fit(g, agent=args.get("agent") if args.get("recommend") else None)
        queued.append(g.as_dict())
    return queued


def status(d: Daemon) -> dict[str, Any]:
    now = time.time()
    # agents online through another daemon sharing the store (read before the list: it adds
    # those this daemon never knew); their last_seen is that daemon's
    via = d.registry.elsewhere(now)
    agents = [{"id": a.agent_id, "board": board_name(a.platform, a.platform_id),
               "platform": a.platform_id,
               "alive": a.alive(d.config.agent_timeout_s, now),
               "via": via[a.agent_id].endpoint if a.agent_id in via else None,
               "last_seen_s": _age(max(a.last_seen, via[a.agent_id].last_seen
                                       if a.agent_id in via else 0.0), now),
               "outbox": a.outbox, "outbox_full": a.outbox_full,
               "doctor": (a.doctor or {}).get("summary"),
               # how old the verdict is: after a restart it is the stored one of the last hello
               "doctor_age_s": round(now - a.doctor_at, 1) if a.doctor_at else None}
              for a in d.registry.all()]
    boards = {a["id"]: a["board"] for a in agents}
    fits = [{"group": {k: f[k] for k in ("platform", "workload", "input", "variant")},
             "model": f["model"], "params": f["params"], "quality": f["quality"],
             "runners_up": f["runners_up"]} for f in d.store.fits()]
    recs = [{"config_id": r["config_id"], "agent": r["agent"],
             "group": {k: r[k] for k in ("platform", "workload", "input", "variant")},
             "cores": r["cores"], "cpus": r["cpus"], "freq_khz": r["freq_khz"],
             "predicted_time_s": r["predicted_time_s"],
             "predicted_lower_s": r["predicted_lower_s"],
             "predicted_upper_s": r["predicted_upper_s"], "state": r["state"],
             "verified_time_s": r["verified_time_s"],
             "off_pct": off_pct(r["verified_time_s"], r["predicted_time_s"])
             if r["state"] == "off" else None, "error": r["error"]}
            for r in d.store.recommendations()]
    basis = group_basis(d, fits)
    for r in recs:
        r["rests_on"] = basis(r["agent"], Group(**r["group"]))
    jobs = [{"job_id": j["job_id"], "agent": j["agent"],
             "board": boards.get(j["agent"], j["agent"]), "workload": j["workload"],
             "size": j["size"], "expected": j["expected"], "received": j["received"],
             "state": j["state"], "reason": j["reason"], "created": j["created"],
             "updated": j["updated"]} for j in d.store.jobs()]
    return {
        "daemon": {"instance": d.instance, "uptime_s": round(now - d.started, 3),
                   "endpoint": d.endpoint, "database": redact_url(d.config.database),
                   "stats": dict(d.stats),
                   # agents' keys that wait for 'opptune keys accept' (CURVE on): their agents
                   # are nowhere else in the status until then
                   "keys_pending": [{"id": k["id"], "agent": k["agent"],
                                     "first_seen": k["first_seen"]}
                                    for k in (d.keyring.rows() if d.keyring else [])
                                    if k["state"] == "pending"],
                   # every refusal by reason, and how many of them the bounded log left out
                   "refusals": {"by_code": dict(d.link.refusals.by_code),
                                "total": d.link.refusals.total,
                                "unlogged": d.link.refusals.unlogged}},
        "agents": agents,
        # What each agent's board offers (knob availability, topology), for operators.
        "platforms": {a["platform"]: d.store.platform(a["platform"])
                      for a in agents if a["platform"]},
        "workloads": d.store.workloads(),
        "runs": d.store.run_counts(),
        "jobs": jobs,
        "fits": fits,
        "fit_errors": d.recommender.fit_errors(),
        "recommendations": recs,
        # groups re-characterised because their verifications kept leaving the interval
        "drift": drift_rows(d.store, jobs),
        # marked points waiting to be measured again, being measured, or never clean
        "remeasure": d.remeasure.status(now),
    }


def _age(when: float, now: float) -> float | None:
    return round(now - when, 3) if when else None


def group_basis(d: Daemon, fits: list[dict[str, Any]]) -> Any:
    """``(agent, group) -> rests_on`` (recommender.rests_on), each group read once."""
    quality = {Group(**f["group"]): f["quality"] for f in fits}
    cache: dict[tuple[str, Group], dict[str, Any]] = {}
    never_clean = d.remeasure.never_clean  # a store read: once per status, not per group

    def basis(agent: str, group: Group) -> dict[str, Any]:
        key = (agent, group)
        if key not in cache:
            never = never_clean.get((agent, group.workload, group.input))
            cache[key] = rests_on(d.store, group, quality.get(group), never)
        return cache[key]
    return basis
